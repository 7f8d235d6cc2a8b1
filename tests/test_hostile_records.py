"""Broken and hostile records: the MMRB2 annotation parser and the VisualPRM readers + parser turn
each into a quarantine row with its stage and reason; the good records beside them still parse,
and the tables (and the quarantine itself) can always be written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import stand_in_jpeg
from pipeline.contract import enforce
from pipeline.mmrb2.contract import contracts as mmrb2_contracts
from pipeline.mmrb2.parse import parse_mmrb2
from pipeline.quarantine import quarantine_table
from pipeline.settings import MMRB2_TASKS, QualitySettings, ZipLimits
from pipeline.visualprm.images import ImageStore, inventory_prm_images
from pipeline.visualprm.parse import parse_prm
from pipeline.visualprm.readers import connect, load_jsonl_input, load_parquet_input, refused_files

MEDIA = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
CONV = [{"from": "system", "value": "judge"}, {"from": "human", "value": "### Question:\nq?\n\n### Solution Process:\nstep one"},
        {"from": "gpt", "value": "+"}, {"from": "human", "value": "step two"}, {"from": "gpt", "value": "-"}]


# ---- MMRB2 annotations --------------------------------------------------------------------------


def pair(pair_id: str) -> dict:
    return {
        "id": pair_id, "chosen": "A", "prompt_source": "bench", "prompt_metadata": {"n": 1},
        "human_annotations": [{"rater": 1}],
        "response_a": {"model_name": "m1", "response_content": [["text", "hi"], ["image", f"{pair_id}_0.jpg"]]},
        "response_b": {"model_name": "m2", "response_content": [["image", f"{pair_id}_1.jpg"]]},
    }


def write_tasks(root: Path, pairs: dict[str, list], raw: dict[str, bytes] | None = None) -> dict[str, Path]:
    files = {}
    for task in MMRB2_TASKS:
        files[task] = root / f"{task}_response_only.json"
        text = raw[task] if raw and task in raw else json.dumps({"pairs": pairs.get(task, [pair(f"{task}-ok")])}).encode()
        files[task].write_bytes(text)
    return files


def _with(change):
    def make():
        p = pair("bad")
        change(p)
        return p
    return make


PAIR_CASES = {
    "pair is an array": (lambda: ["bad", "A"], "pair is not an object"),
    "pair is a string": (lambda: "bad", "pair is not an object"),
    "missing id": (_with(lambda p: p.pop("id")), "missing or non-string id"),
    "integer id": (_with(lambda p: p.update(id=7)), "missing or non-string id"),
    "empty id": (_with(lambda p: p.update(id="")), "missing or non-string id"),
    "missing chosen": (_with(lambda p: p.pop("chosen")), "chosen is None, expected 'A' or 'B'"),
    "chosen not A/B": (_with(lambda p: p.update(chosen="a")), "chosen is 'a', expected 'A' or 'B'"),
    "missing response": (_with(lambda p: p.pop("response_b")), "response_b is not an object"),
    "response is an array": (_with(lambda p: p.update(response_a=[["text", "x"]])), "response_a is not an object"),
    "content is a string": (_with(lambda p: p["response_a"].update(response_content="hi")), "response_a.response_content is not a list"),
    "item is not a pair": (_with(lambda p: p["response_b"].update(response_content=[["image"]])),
                           "response_b.response_content[0] is not a [kind, value] pair"),
    "unknown item kind": (_with(lambda p: p["response_a"].update(response_content=[["video", "v.mp4"]])),
                          "response_a.response_content[0] has unknown kind 'video'"),
    "empty image name": (_with(lambda p: p["response_b"].update(response_content=[["image", ""]])),
                         "response_b.response_content[0] image value is not a non-empty string"),
    "number as text": (_with(lambda p: p["response_a"].update(response_content=[["text", 3]])),
                       "response_a.response_content[0] text value is not a non-empty string"),
    "lone surrogate in text": (_with(lambda p: p["response_a"].update(response_content=[["text", "\udc80"]])),
                               "text holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), not valid Unicode"),
    "lone surrogate in metadata": (_with(lambda p: p.update(prompt_metadata={"\ud800": 1})),
                                   "text holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), not valid Unicode"),
}


@pytest.mark.parametrize("case", list(PAIR_CASES))
def test_malformed_pair_is_quarantined_and_the_rest_parse(tmp_path, case):
    make, reason = PAIR_CASES[case]
    bad = make()
    files = write_tasks(tmp_path, {"edit": [pair("good-1"), bad, pair("good-2")]})
    parsed = parse_mmrb2(files)
    key = bad["id"] if isinstance(bad, dict) and isinstance(bad.get("id"), str) and bad["id"] else "edit_response_only.json#1"
    assert [(r.dataset, r.stage, r.record_key, r.reason) for r in parsed.rejected] == [("mmrb2", "parse", key, reason)]
    tables = parsed.tables()  # the good pairs are whole and writable
    assert sorted(tables["mmrb2_pairs"].column("pair_id").to_pylist()) == ["good-1", "good-2", "interleaved-ok", "reasoning-ok", "t2i-ok"]
    assert tables["mmrb2_response_items"].num_rows == 5 * 3
    assert quarantine_table(parsed.rejected).column("reason").to_pylist() == [reason]


def test_lone_surrogate_id_is_quarantined_with_a_writable_key(tmp_path):
    files = write_tasks(tmp_path, {"t2i": [pair("\ud800x")]})
    parsed = parse_mmrb2(files)
    assert [r.reason for r in parsed.rejected] == [PAIR_CASES["lone surrogate in text"][1]]
    assert quarantine_table(parsed.rejected).column("record_key").to_pylist() == ["\\ud800x"]


FILE_CASES = {
    "truncated JSON": (b'{"pairs": [{"id": "x", ', "unreadable JSON: Expecting property name enclosed in double quotes"),
    "empty file": (b"", "unreadable JSON: Expecting value: line 1 column 1 (char 0)"),
    "top-level array": (json.dumps([pair("x")]).encode(), 'expected an object with a "pairs" list'),
    "pairs is an object": (json.dumps({"pairs": {"x": pair("x")}}).encode(), 'expected an object with a "pairs" list'),
    "pairs is null": (b'{"pairs": null}', 'expected an object with a "pairs" list'),
    "not UTF-8": (b'{"pairs": [{"id": "caf\xe9"}]}', "unreadable JSON: 'utf-8' codec can't decode byte 0xe9"),
    "deeply nested": (b'{"pairs": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "unreadable JSON: maximum recursion depth exceeded"),
}


@pytest.mark.parametrize("case", list(FILE_CASES))
def test_unreadable_annotation_file_is_one_quarantine_row(tmp_path, case):
    raw, reason = FILE_CASES[case]
    files = write_tasks(tmp_path, {}, raw={"interleaved": raw})
    parsed = parse_mmrb2(files)
    assert [(r.stage, r.record_key) for r in parsed.rejected] == [("file", "interleaved_response_only.json")]
    assert parsed.rejected[0].reason.startswith(reason)
    assert sorted(parsed.tables()["mmrb2_pairs"].column("task").to_pylist()) == ["edit", "reasoning", "t2i"]


def test_byte_order_mark_is_not_an_error(tmp_path):
    files = write_tasks(tmp_path, {}, raw={"t2i": b"\xef\xbb\xbf" + json.dumps({"pairs": [pair("bom")]}).encode()})
    parsed = parse_mmrb2(files)
    assert parsed.rejected == [] and "bom" in parsed.tables()["mmrb2_pairs"].column("pair_id").to_pylist()


def test_duplicate_pair_id_across_files_keeps_the_first(tmp_path):
    dup = pair("same")
    dup["chosen"] = "B"
    files = write_tasks(tmp_path, {"t2i": [pair("same")], "reasoning": [pair("r"), dup]})
    parsed = parse_mmrb2(files)
    assert [(r.stage, r.record_key, r.reason) for r in parsed.rejected] == [("parse", "same", "duplicate pair id (first seen in task t2i)")]
    rows = {r["pair_id"]: r for r in parsed.tables()["mmrb2_pairs"].to_pylist()}
    assert (rows["same"]["task"], rows["same"]["chosen"]) == ("t2i", "A")


def test_malformed_prompt_entries_are_quarantined_at_parse_prompts(tmp_path):
    files = write_tasks(tmp_path, {"edit": [pair("e1"), pair("e2")]})
    prompts = tmp_path / "new_task_release.json"
    prompts.write_text(json.dumps({"pairs": [
        {"pair_id": "e1", "prompt_content": [["text", "make it blue"], ["image", "new_images/e1.jpg"]]},
        {"prompt_content": [["text", "no id"]]},
        {"pair_id": 5, "prompt_content": []},
        {"pair_id": "ghost", "prompt_content": [["text", "x"]]},
        {"pair_id": "e1", "prompt_content": [["text", "again"]]},
        {"pair_id": "e2", "prompt_content": "make it red"},
        ["e2", []],
    ]}))
    parsed = parse_mmrb2(files, prompts)
    assert [(r.stage, r.record_key, r.reason) for r in parsed.rejected] == [
        ("parse_prompts", "new_task_release.json#1", "missing or non-string pair_id"),
        ("parse_prompts", "new_task_release.json#2", "missing or non-string pair_id"),
        ("parse_prompts", "ghost", "prompt for a pair that is not in the annotation files"),
        ("parse_prompts", "e1", "duplicate prompt entry"),
        ("parse_prompts", "e2", "prompt_content is not a list"),
        ("parse_prompts", "new_task_release.json#6", "missing or non-string pair_id"),
    ]
    assert parsed.prompt_images() == {"new_images/e1.jpg"}

    prompts.write_text(json.dumps([{"pair_id": "e1"}]))
    parsed = parse_mmrb2(files, prompts)
    assert [(r.stage, r.record_key, r.reason) for r in parsed.rejected] == \
        [("file", "new_task_release.json", 'expected an object with a "pairs" list')]


def rated(pair_id: str, ratings=(4, 5, 3)) -> dict:
    return {**pair(pair_id), "human_annotations": list(ratings)}


def test_an_annotation_file_that_gives_no_pair_is_refused_whole(tmp_path):
    reasoning = {**pair("r-ok"), "human_annotations": {"response_a_ratings": ["A"], "response_b_ratings": ["B"]}}
    files = write_tasks(tmp_path, {
        "t2i": [rated("t-1", (9, 9, 9)), rated("t-2", (0, 2, 3))],  # every pair breaks the record contract
        "edit": [],  # an empty list
        "interleaved": [{**rated("i-1"), "id": 1}, {**rated("i-2"), "id": 2}],  # ids drifted to integers
        "reasoning": [reasoning],
    })
    prompts = tmp_path / "new_task_release.json"
    prompts.write_text(json.dumps({"pairs": []}))
    parsed = parse_mmrb2(files, prompts)
    checked = enforce("mmrb2", parsed.tables(), mmrb2_contracts(QualitySettings()))
    every = "nothing usable: all of its pairs (2) were refused, each with its own quarantine row"
    assert [(r.dataset, r.stage, r.record_key, r.reason) for r in parsed.refused_files(checked.tables["mmrb2_pairs"])] == [
        ("mmrb2", "file", "t2i_response_only.json", every),
        ("mmrb2", "file", "edit_response_only.json", "holds no pairs: nothing to publish"),
        ("mmrb2", "file", "interleaved_response_only.json", every),
        ("mmrb2", "file", "new_task_release.json", "holds no pairs: nothing to publish"),
    ]
    # No id was coerced: the integer ids are refused one by one, and only the good pair is left.
    assert [(r.record_key, r.reason) for r in parsed.rejected] == [
        ("interleaved_response_only.json#0", "missing or non-string id"), ("interleaved_response_only.json#1", "missing or non-string id")]
    assert checked.tables["mmrb2_pairs"]["pair_id"].to_pylist() == ["r-ok"]


# ---- VisualPRM: parquet shards whose schema drifted ---------------------------------------------


def parquet_shards(d: Path) -> list[Path]:
    conv = json.dumps(CONV)
    d.mkdir()
    with_media = pa.array([[{"bytes": stand_in_jpeg(1), "path": "src/a.jpg"}], [{"bytes": None, "path": "src/b.jpg"}]], MEDIA)
    pq.write_table(pa.table({"id": ["a", "b"], "messages": [conv, conv], "media": with_media}), d / "train-00.parquet")
    pq.write_table(pa.table({"id": [1, 2], "messages": [conv, conv]}), d / "train-01.parquet")  # id retyped
    pq.write_table(pa.table({"id": ["1", "2"], "messages": [conv, conv]}), d / "train-11.parquet")  # no media
    structured = pa.array([CONV], pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())])))
    pq.write_table(pa.table({"id": ["c"], "messages": structured}), d / "train-02.parquet")  # messages as structs
    pq.write_table(pa.table({"id": ["d"], "conversation": [conv]}), d / "train-03.parquet")  # messages renamed
    pq.write_table(pa.table({"id": ["e"], "messages": [conv], "media": pa.array([[{"data": b"x", "path": "p"}]])}),
                   d / "train-04.parquet")  # media field renamed
    pq.write_table(pa.table({"id": ["f"], "messages": [conv], "media": ["src/f.jpg"]}), d / "train-05.parquet")  # media retyped
    pq.write_table(pa.table({"id": ["g"], "messages": [7]}), d / "train-06.parquet")  # messages retyped
    empty_media = pa.array([[{"bytes": None, "path": None}]], pa.list_(pa.struct([("bytes", pa.null()), ("path", pa.null())])))
    pq.write_table(pa.table({"id": ["h"], "messages": [conv], "media": empty_media}), d / "train-07.parquet")
    pq.write_table(pa.table({"id": ["a", "i"], "messages": [conv, "[]"]}), d / "train-08.parquet")  # dup id; no turns
    (d / "train-09.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    damaged = pa.table({"id": [f"z{i}" for i in range(2000)], "messages": [conv + " " * (i % 7) for i in range(2000)]})
    pq.write_table(damaged, d / "train-10.parquet", compression="snappy")
    data = bytearray((d / "train-10.parquet").read_bytes())
    data[100:3000] = bytes(b ^ 0x55 for b in data[100:3000])  # data pages damaged, footer intact
    (d / "train-10.parquet").write_bytes(bytes(data))
    return sorted(d.glob("*.parquet"))


def test_parquet_schema_drift_is_quarantined_per_shard_and_the_rest_parse(tmp_path):
    shards = parquet_shards(tmp_path / "data")
    con = connect()
    read = load_parquet_input(con, shards)
    out = parse_prm(con)
    got = [(r.stage, r.record_key, r.reason) for r in read] + \
        [(r["stage"], r["record_key"], r["reason"]) for r in out["quarantine"].to_pylist()]
    media = "expected list<struct<bytes: binary, path: string>>"
    assert got[:5] == [  # drift is refused from the schema, before a row is read: no id is cast to text
        ("file", "train-01.parquet", "parquet schema drift: column id is int64, expected string"),
        ("file", "train-03.parquet", "parquet lacks column(s) messages; columns are id, conversation"),
        ("file", "train-04.parquet", f"parquet schema drift: column media is list<struct<data: binary, path: string>>, {media}"),
        ("file", "train-05.parquet", f"parquet schema drift: column media is string, {media}"),
        ("file", "train-06.parquet", "parquet schema drift: column messages is int64, expected string or list<struct> or struct"),
    ]
    assert got[5][:2] == ("file", "train-09.parquet") and got[5][2].startswith("unreadable parquet: ")
    assert got[6][:2] == ("file", "train-10.parquet") and got[6][2].startswith("unreadable parquet: ")
    assert got[7:] == [
        ("parse", "h", "image reference 0 is empty (no path and no bytes)"),
        ("parse", "a", "duplicate sample id (first seen at row 1)"),
        ("parse", "i", "conversation has no steps"),
    ]
    # Shards read whole whose every row was refused are refused whole too.
    assert [(r.stage, r.record_key, r.reason) for r in refused_files(con, out["prm_samples"])] == [
        ("file", "train-07.parquet", "nothing usable: all of its rows (1) were refused, each with its own quarantine row"),
        ("file", "train-08.parquet", "nothing usable: all of its rows (2) were refused, each with its own quarantine row"),
    ]
    samples = {r["sample_id"]: r for r in out["prm_samples"].to_pylist()}
    assert set(samples) == {"a", "b", "1", "2", "c"}
    assert out["quarantine"].num_rows + len(samples) == 2 + 1 + 1 + 2 + 2  # every row of a readable shard
    # A shard without `media` does not cost the other shards their images.
    assert samples["a"]["image_refs"] == ["src/a.jpg"] and samples["b"]["image_refs"] == ["src/b.jpg"]
    assert samples["1"]["image_refs"] == [] and samples["c"]["n_steps"] == 2 == samples["a"]["n_steps"]
    assert [s["label"] for s in out["prm_steps"].to_pylist() if s["sample_id"] == "c"] == ["+", "-"]

    # The image inventory reads the same shards without tripping over the drifted ones.
    table, rejected, _ = inventory_prm_images({"src/a.jpg", "src/b.jpg"}, shards, None, [], ZipLimits(), ImageStore(tmp_path / "store"))
    assert {r["image_key"]: r["status"] for r in table.to_pylist()} == {"src/a.jpg": "ok", "src/b.jpg": "unresolved"}
    assert rejected == []


# ---- VisualPRM: InternVL jsonl lines -------------------------------------------------------------


def test_jsonl_lines_that_are_not_records_are_quarantined_with_reasons(tmp_path):
    ann = tmp_path / "annotations"
    (ann / "again").mkdir(parents=True)
    line = lambda image, conv=CONV: json.dumps({"id": -1, "image": image, "conversations": conv})  # noqa: E731
    lines = [
        line("src/1.jpg"),
        '{"id": -1, "image": "src/2.jpg", "conversations": [',  # malformed JSON
        json.dumps([{"from": "human", "value": "x"}]),  # an array where the object belongs
        '"a string"',
        "null",
        line(5),  # image of the wrong type
        line(""),  # empty image reference
        line(["src/3.jpg", "src/4.jpg"]),
        json.dumps({"id": -1, "image": "src/5.jpg", "conversations": "not a list"}),  # unknown shape
        line("src/6.jpg", [{"from": "robot", "value": "beep"}]),  # unknown role
        line("src/7.jpg", [{"speaker": "human", "text": "x"}]),  # unknown turn shape
        line("src/8.jpg", CONV[:4]),  # last step without a label
        "",
    ]
    body = "\n".join(lines).encode() + b"\n" + b'{"id": -1, "image": "caf\xe9.jpg", "conversations": []}\n'
    (ann / "Geo_prm.jsonl").write_bytes(body)
    (ann / "again" / "Geo_prm.jsonl").write_text(line("src/9.jpg") + "\n")  # same stem: the same ids
    con = connect()
    read = load_jsonl_input(con, [ann / "Geo_prm.jsonl", ann / "again" / "Geo_prm.jsonl"])
    out = parse_prm(con)
    assert [(r.stage, r.record_key, r.reason) for r in read] == [
        ("read", "Geo_prm:14", "line is not valid UTF-8 (invalid continuation byte at byte 24)"),
        ("read", "Geo_prm:3", "line is a JSON array, expected an object"),
        ("read", "Geo_prm:4", "line is a JSON string, expected an object"),
        ("read", "Geo_prm:5", "line is a JSON null, expected an object"),
        ("read", "Geo_prm:6", "image is a JSON number, expected a path or a list of paths"),
    ]
    assert [(r["stage"], r["record_key"], r["reason"]) for r in out["quarantine"].to_pylist()] == [
        ("parse", "Geo_prm:2", "messages is not valid JSON"),
        ("parse", "Geo_prm:7", "image reference 0 is empty (no path and no bytes)"),
        ("parse", "Geo_prm:9", "JSON object without a steps_with_score list"),
        ("parse", "Geo_prm:10", "turn 0 has unknown role 'robot'"),
        ("parse", "Geo_prm:11", "turn 0 is not a {from, value} or {role, content} object"),
        ("parse", "Geo_prm:12", "step 1 has no label"),
        ("parse", "Geo_prm:1", "duplicate sample id (first seen at row 1)"),
    ]
    samples = {r["sample_id"]: r for r in out["prm_samples"].to_pylist()}
    assert {k: v["image_refs"] for k, v in samples.items()} == {"Geo_prm:1": ["src/1.jpg"], "Geo_prm:8": ["src/3.jpg", "src/4.jpg"]}
    assert len(read) + out["quarantine"].num_rows + len(samples) == 14  # every non-empty line is accounted for
    assert {v["source"] for v in samples.values()} == {"Geo"}


def test_non_utf8_file_name_gives_writable_ids(tmp_path):
    name = Path(b"Bad\xff_prm.jsonl".decode("utf-8", "surrogateescape"))
    path = tmp_path / name
    path.write_text(json.dumps({"id": -1, "image": "x.jpg", "conversations": CONV}) + "\n[]\n")
    con = connect()
    read = load_jsonl_input(con, [path])
    out = parse_prm(con)
    assert out["prm_samples"].column("sample_id").to_pylist() == ["Bad\\udcff_prm:1"]
    assert out["prm_samples"].column("source").to_pylist() == ["Bad\\udcff"]
    assert quarantine_table(read).column("record_key").to_pylist() == ["Bad\\udcff_prm:2"]


def test_a_visualprm_file_that_gives_no_sample_is_refused_whole(tmp_path):
    conv = json.dumps(CONV)
    d = tmp_path / "data"
    d.mkdir()
    pq.write_table(pa.table({"id": ["a"], "messages": [conv]}), d / "train-00.parquet")
    pq.write_table(pa.table({"id": ["x"], "messages": [conv]}).slice(0, 0), d / "train-01.parquet")  # no rows
    con = connect()
    assert load_parquet_input(con, sorted(d.glob("*.parquet"))) == []
    assert [(r.stage, r.record_key, r.reason) for r in refused_files(con, parse_prm(con)["prm_samples"])] == \
        [("file", "train-01.parquet", "holds no rows: nothing to publish")]

    good, blank, bad = (tmp_path / f"{n}_prm.jsonl" for n in ("Good", "Blank", "Bad"))
    good.write_text(json.dumps({"id": -1, "image": "g.jpg", "conversations": CONV}) + "\n")
    blank.write_text("\n\n")
    bad.write_bytes(b'[]\n{"id": -1, "conversations": [\n{"image": "caf\xe9.jpg"}\n')  # refused at read, parse, read
    con = connect()
    load_jsonl_input(con, [good, blank, bad])
    assert [(r.stage, r.record_key, r.reason) for r in refused_files(con, parse_prm(con)["prm_samples"])] == [
        ("file", "Blank_prm.jsonl", "holds no rows: nothing to publish"),
        ("file", "Bad_prm.jsonl", "nothing usable: all of its rows (3) were refused, each with its own quarantine row"),
    ]
