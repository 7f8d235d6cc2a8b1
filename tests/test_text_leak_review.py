"""Text leaks under review, without Dagster: a reviewer's text `not_leak` decision (the file, the
CLI, `apply_text_not_leak` on hand-made record_contamination rows, and the image step leaving it
alone), and the review page's text-leak section built from a hand-made release candidate: both
records' texts, read by each dataset's `record_text` SQL, with the copied words marked in each."""

from __future__ import annotations

import hashlib
import json
import random
import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.decontam.overrides import apply_text_not_leak
from pipeline.decontam.records import EVAL_OVERLAP_SCHEMA, RECORD_CONTAMINATION_SCHEMA
from pipeline.dedupe.decisions import (
    CLUSTERS_SCHEMA, CONTAMINATION_SCHEMA, HASHES_SCHEMA, NEAR_MISS_SCHEMA, OVERRIDES_APPLIED_SCHEMA,
    TEXT_DECISION_EFFECT, apply_not_leak, overrides_table,
)
from pipeline.review import overrides as ov
from pipeline.review.page import marked_texts
from pipeline.review.release import review_release

pytestmark = pytest.mark.fast


def _leak(train, eval_, leak, overlap=None, matched=None, kind=None, images=(None, None)):
    (td, tk), (ed, ek) = train.split(":", 1), eval_.split(":", 1)
    has_text = leak in ("text", "full")
    return {"train_dataset": td, "train_key": tk, "eval_dataset": ed, "eval_key": ek, "leak": leak,
            "text_overlap": overlap if has_text else None, "matched_text": matched if has_text else None,
            "image_kind": kind, "longest_span": len(matched.split()) if has_text else None,
            "train_image_key": images[0], "eval_image_key": images[1]}


LEAKS = [
    _leak("visualprm:s1", "mmrb2:m1", "full", 0.75, "the area of the triangle", "near", ("geo/1.png", "m1.jpg")),
    _leak("visualprm:s1", "vlrb:p1", "text", 0.9, "what is the area of the triangle abc"),
    _leak("visualprm:s1", "vlrb:p2", "image", kind="exact", images=("geo/1.png", "sha256:" + "a" * 64)),
    _leak("visualprm:s2", "vlrb:p1", "text", 0.6, "area of the triangle abc"),
    _leak("visualprm:s3", "vlrb:p3", "full", 1.0, "count the red cubes", "crop", ("clevr/3.png", "sha256:" + "b" * 64)),
]


def _leaks() -> pa.Table:
    return pa.Table.from_pylist(LEAKS, schema=RECORD_CONTAMINATION_SCHEMA)


def _overrides(tmp_path: Path, decisions: list[dict]) -> ov.Overrides:
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps({"format": 1, "revision": 1, "decisions": decisions}))
    return ov.load(str(path))


def _text(train, eval_=None, **notes):
    return {"decision": "not_leak", "of": "text", "train": train, **({"eval": eval_} if eval_ else {}), **notes}


# ---- apply_text_not_leak --------------------------------------------------------------------------

def test_a_text_decision_drops_text_leaks_and_leaves_full_leaks_their_picture(tmp_path):
    o = _overrides(tmp_path, [
        {"decision": "not_leak", "train": "visualprm:geo/1.png"},  # an image decision: not this step's
        _text("visualprm:s1", reason="stock geometry question", by="ana", at="2026-12-01T12:00:00Z"),
        _text("visualprm:s3", "vlrb:p3"),
    ])
    kept, effects = apply_text_not_leak(_leaks(), o)
    assert kept.schema == RECORD_CONTAMINATION_SCHEMA
    got = [(r["train_key"], r["eval_dataset"], r["eval_key"], r["leak"], r["text_overlap"], r["matched_text"],
            r["longest_span"], r["image_kind"], r["train_image_key"]) for r in kept.to_pylist()]
    assert got == [
        ("s1", "mmrb2", "m1", "image", None, None, None, "near", "geo/1.png"),  # was full: its picture link stays
        ("s1", "vlrb", "p2", "image", None, None, None, "exact", "geo/1.png"),  # an image leak: untouched
        ("s2", "vlrb", "p1", "text", pytest.approx(0.6), "area of the triangle abc", 5, None, None),  # not named
        ("s3", "vlrb", "p3", "image", None, None, None, "crop", "clevr/3.png"),
    ]
    assert effects.schema == OVERRIDES_APPLIED_SCHEMA
    assert effects.to_pylist() == [
        {"number": 2, "decision": "not_leak", "images": "visualprm:s1", "reason": "stock geometry question", "by": "ana",
         "at": "2026-12-01T12:00:00Z", "applied": True,
         "effect": "applied: removed the text link of 2 pairs (1 kept as an image leak)"},
        {"number": 3, "decision": "not_leak", "images": "visualprm:s3 | vlrb:p3", "reason": "", "by": "", "at": "",
         "applied": True, "effect": "applied: removed the text link of 1 pair (1 kept as an image leak)"},
    ]


def test_text_decisions_that_name_nothing_here_are_reported_not_applied(tmp_path):
    o = _overrides(tmp_path, [
        _text("visualprm:gone"),
        _text("visualprm:s2", "vlrb:p9"),  # s2 copies p1, not p9
        _text("visualprm:s1", "vlrb:p2"),  # an image leak only: no text link to remove
        _text("vlrb:p1", "mmrb2:m1"),  # eval to eval: reported in eval_overlap, never removed
        _text("visualprm:s2", "vlrb:p1"),
    ])
    kept, effects = apply_text_not_leak(_leaks(), o)
    assert [(r["train_key"], r["eval_key"]) for r in kept.to_pylist()] == [("s1", "m1"), ("s1", "p1"), ("s1", "p2"), ("s3", "p3")]
    assert [(r["number"], r["applied"], r["effect"]) for r in effects.to_pylist()] == [
        (1, False, "not applied: no text leak of visualprm:gone in this release"),
        (2, False, "not applied: no text leak of visualprm:s2 against vlrb:p9 in this release"),
        (3, False, "not applied: no text leak of visualprm:s1 against vlrb:p2 in this release"),
        (4, False, "not applied: no text leak of vlrb:p1 against mmrb2:m1 in this release"),
        (5, True, "applied: removed the text link of 1 pair"),
    ]


def test_without_text_decisions_the_leaks_are_unchanged(tmp_path):
    o = _overrides(tmp_path, [{"decision": "not_leak", "train": "visualprm:s1", "eval": "vlrb:p1"}])  # of image
    kept, effects = apply_text_not_leak(_leaks(), o)
    assert kept.equals(_leaks()) and effects.num_rows == 0 and effects.schema == OVERRIDES_APPLIED_SCHEMA
    empty, effects = apply_text_not_leak(RECORD_CONTAMINATION_SCHEMA.empty_table(), _overrides(tmp_path, [_text("visualprm:s1")]))
    assert empty.num_rows == 0 and effects.column("applied").to_pylist() == [False]


def test_the_image_step_leaves_text_decisions_to_record_contamination(tmp_path):
    """A record key may read like an image name: the image step still does not apply a text
    decision, and its dedupe_overrides row says where the decision's effect is."""
    contamination = pa.Table.from_pylist([
        {"train_dataset": "visualprm", "train_image_key": "s1", "eval_dataset": "vlrb", "eval_image_key": "p1",
         "distance": 2, "kind": "near", "score": 0.99}], schema=CONTAMINATION_SCHEMA)
    images = pa.table({"dataset": ["visualprm", "vlrb"], "image_key": ["s1", "p1"], "sha256": ["1" * 64, "2" * 64]})
    o = _overrides(tmp_path, [_text("visualprm:s1", "vlrb:p1"), {"decision": "not_leak", "train": "visualprm:s1"}])
    kept, effects = apply_not_leak(contamination, ov.Overrides([o.decisions[0]]), images)
    assert kept.num_rows == 1 and effects == {}
    kept, effects = apply_not_leak(contamination, o, images)
    assert kept.num_rows == 0 and effects == {1: "applied: removed 1 contamination row"}
    table = overrides_table(o, effects)
    assert [(r["number"], r["images"], r["applied"], r["effect"]) for r in table.to_pylist()] == [
        (1, "visualprm:s1 | vlrb:p1", False, TEXT_DECISION_EFFECT),
        (2, "visualprm:s1", True, "applied: removed 1 contamination row"),
    ]
    assert TEXT_DECISION_EFFECT == "text leak decision: applied in record_contamination (leak_overrides)"


# ---- the decisions file -------------------------------------------------------------------------

def test_a_text_decision_round_trips_and_leaves_image_decisions_and_digests_as_they_were(tmp_path):
    path = str(tmp_path / "overrides.json")
    ov.add(path, "not_leak", ["visualprm:geo/1.png", "vlrb:sha256:" + "a" * 64], reason="public diagram", by="ana")
    before = ov.load(path).digest()
    # the digest of a file of image decisions is what it was before `of` existed
    core = [["not_leak", "visualprm:geo/1.png", "vlrb:sha256:" + "a" * 64]]
    assert before == hashlib.sha256(json.dumps(core).encode()).hexdigest()[:16]

    ov.add(path, "not_leak", ["visualprm:s1", "vlrb:p1"], reason="stock question", by="bo", of="text")
    doc = json.loads(Path(path).read_text())
    assert doc["revision"] == 2
    image, text = doc["decisions"]
    assert "of" not in image  # written only for text
    assert {k: text[k] for k in ("decision", "of", "train", "eval", "reason", "by")} == {
        "decision": "not_leak", "of": "text", "train": "visualprm:s1", "eval": "vlrb:p1", "reason": "stock question", "by": "bo"}
    loaded = ov.load(path)
    assert [(d.decision, d.of, d.images) for d in loaded.decisions] == [
        ("not_leak", "image", ("visualprm:geo/1.png", "vlrb:sha256:" + "a" * 64)),
        ("not_leak", "text", ("visualprm:s1", "vlrb:p1"))]
    assert loaded.decisions[1].label == "not a text leak: visualprm:s1 (against vlrb:p1)"
    assert ov.parse(loaded.to_json(), "again").decisions == loaded.decisions
    assert loaded.of("not_leak", "text") == [loaded.decisions[1]]
    with_text = loaded.digest()
    assert with_text != before

    # the same names as an image decision and as a text decision are two decisions
    ov.add(path, "not_leak", ["visualprm:s1", "vlrb:p1"], by="bo")
    assert [d.of for d in ov.load(path).decisions] == ["image", "text", "image"]
    assert ov.load(path).digest() != with_text
    # recording the text decision again replaces it (notes are not content)
    again = ov.add(path, "not_leak", ["visualprm:s1", "vlrb:p1"], reason="reworded", of="text")
    assert [(d.of, d.reason) for d in again.decisions] == [("image", "public diagram"), ("image", ""), ("text", "reworded")]
    assert ov.remove(path, 2).digest() == with_text


TEXT_FAULTS = [
    ({"decision": "not_leak", "of": "pixels", "train": "visualprm:s1"}, "decision 1: `of` must be one of image, text (got 'pixels')"),
    ({"decision": "not_leak", "of": 3, "train": "visualprm:s1"}, "decision 1: `of` must be one of image, text (got 3)"),
    ({"decision": "duplicates", "of": "text", "images": ["a:b", "c:d"]}, "decision 1: `of` text applies to not_leak only"),
    ({"decision": "not_leak", "of": "text", "train": "sha256:" + "c" * 64}, "decision 1: `train`: a record is named <dataset>:<record key>"),
    ({"decision": "not_leak", "of": "text", "train": "visualprm:s1", "eval": "p1"}, "decision 1: `eval`: a record is named"),
    ({"decision": "not_leak", "of": "text"}, "decision 1: `train`: a record is named <dataset>:<record key> (got null)"),
]


@pytest.mark.parametrize("entry, message", TEXT_FAULTS)
def test_a_bad_text_decision_is_named_in_one_line(tmp_path, entry, message):
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps({"format": 1, "decisions": [entry]}))
    with pytest.raises(ov.OverridesError) as err:
        ov.load(str(path))
    assert str(err.value).startswith(str(path)) and message in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


# ---- the CLI --------------------------------------------------------------------------------------

def test_override_not_leak_text_writes_the_decision(home, capsys):
    path = home / "overrides.json"
    assert main(["override", "--file", str(path), "not-leak", "visualprm:s1", "--eval", "vlrb:p1", "--text",
                 "--reason", "stock question"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "recorded: not a text leak: visualprm:s1 (against vlrb:p1)" and err == ""
    assert main(["override", "--file", str(path), "not-leak", "visualprm:s2", "--text"]) == 0
    assert main(["override", "--file", str(path), "not-leak", "visualprm:geo/1.png"]) == 0
    (first, second, third) = json.loads(path.read_text())["decisions"]
    assert {k: first[k] for k in ("decision", "of", "train", "eval", "reason")} == {
        "decision": "not_leak", "of": "text", "train": "visualprm:s1", "eval": "vlrb:p1", "reason": "stock question"}
    assert (second["of"], second["train"], "eval" in second) == ("text", "visualprm:s2", False)
    assert "of" not in third and third["train"] == "visualprm:geo/1.png"
    capsys.readouterr()
    assert main(["override", "--file", str(path), "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].startswith("1. not a text leak: visualprm:s1 (against vlrb:p1) — stock question (")
    assert listed[1].startswith("2. not a text leak: visualprm:s2 (")
    assert listed[2].startswith("3. not a leak: visualprm:geo/1.png (")


def test_override_not_leak_text_refuses_an_image_name_in_one_line(home, capsys):
    path = home / "overrides.json"
    assert main(["override", "--file", str(path), "not-leak", "vlrb:sha256:" + "a" * 64, "--text"]) == 0  # vlrb keys read so
    capsys.readouterr()
    assert main(["override", "--file", str(path), "not-leak", "sha256:" + "a" * 64, "--text"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "`train`: a record is named <dataset>:<record key>" in err
    assert len(json.loads(path.read_text())["decisions"]) == 1


def test_override_not_leak_text_warns_when_the_current_release_has_no_such_text_leak(home, capsys):
    home.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(home / "warehouse.duckdb"))
    con.register("leaks", _leaks())
    con.execute("create table record_contamination as select * from leaks")
    con.close()
    path = str(home / "overrides.json")
    assert main(["override", "--file", path, "not-leak", "visualprm:s1", "--eval", "vlrb:p1", "--text"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["override", "--file", path, "not-leak", "visualprm:s1", "--eval", "vlrb:p2", "--text"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("rewardhouse: warning: the current release has no text leak of visualprm:s1 against vlrb:p2;")
    assert len(ov.load(path).decisions) == 2  # recorded all the same


# ---- the review page ------------------------------------------------------------------------------

TRAIN_TEXT = "<image>\nQuestion: What is the AREA of the  triangle, ABC? <script>alert(1)</script> Give cm²."
EVAL_TEXT = "Look at the figure.\nwhat is the area of the\n   triangle abc. Choose & explain <!-- -->"
MMRB2_ITEMS = [("m1", 0, "text", "Draw"), ("m1", 1, "image", None), ("m1", 2, "text", "THE area of the Triangle!")]


def _write(folder: Path, name: str, table: pa.Table) -> Path:
    path = folder / f"{name}.parquet"
    pq.write_table(table, path)
    return path


def candidate(folder: Path, with_leaks: bool = True) -> dict[str, Path]:
    """A release candidate's tables, by hand: no image decisions; three VisualPRM samples, three
    VL-RewardBench pairs and one MMRB2 prompt with texts, and the leaks between them."""
    folder.mkdir(parents=True, exist_ok=True)
    tables = {
        "image_hashes": HASHES_SCHEMA.empty_table(), "duplicate_clusters": CLUSTERS_SCHEMA.empty_table(),
        "contamination": CONTAMINATION_SCHEMA.empty_table(), "dedupe_near_misses": NEAR_MISS_SCHEMA.empty_table(),
        "dedupe_overrides": pa.Table.from_pylist([
            {"number": 1, "decision": "not_leak", "images": "visualprm:s9 | vlrb:p9", "reason": "", "by": "ana", "at": "",
             "applied": False, "effect": TEXT_DECISION_EFFECT}], schema=OVERRIDES_APPLIED_SCHEMA),
        "prm_samples": pa.table({"sample_id": ["s1", "s2", "s3"], "question": [TRAIN_TEXT, "Area of the triangle ABC?", "x"],
                                 "image_refs": [["geo/1.png"], [], ["clevr/3.png"]], "in_export": [False, False, False]}),
        "vlrb_pairs": pa.table({"pair_id": ["p1", "p2", "p3"], "query": [EVAL_TEXT, "q2", None],
                                "image_key": [None, "sha256:" + "a" * 64, "sha256:" + "b" * 64]}),
        "mmrb2_prompt_items": pa.Table.from_pylist([dict(zip(("pair_id", "position", "kind", "text", "image_name"), r))
                                                    for r in MMRB2_ITEMS]),
    }
    if with_leaks:
        tables["record_contamination"] = _leaks()
        tables["eval_overlap"] = pa.Table.from_pylist([
            {"dataset_a": "mmrb2", "key_a": "m1", "dataset_b": "vlrb", "key_b": "p1", "leak": "text", "text_overlap": 0.8,
             "matched_text": "the area of the triangle", "image_kind": None}], schema=EVAL_OVERLAP_SCHEMA)
        tables["leak_overrides"] = pa.Table.from_pylist([
            {"number": 1, "decision": "not_leak", "images": "visualprm:s9 | vlrb:p9", "reason": "", "by": "ana", "at": "",
             "applied": False, "effect": "not applied: no text leak of visualprm:s9 against vlrb:p9 in this release"}],
            schema=OVERRIDES_APPLIED_SCHEMA)
    return {name: _write(folder, name, t) for name, t in tables.items()}


def review_page(tmp_path: Path, with_leaks: bool = True) -> Path:
    out = tmp_path / "release" / "review"
    review_release(out, candidate(tmp_path / "candidate", with_leaks), {}, SimpleNamespace(root=tmp_path / "root"),
                   "r1", "release_r1")
    return out / "index.html"


class _Script(HTMLParser):
    """The page's elements by id and its inline script."""

    def __init__(self):
        super().__init__()
        self.ids, self.script, self._in = {}, "", False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids[attrs["id"]] = tag
        self._in = tag == "script"

    def handle_endtag(self, tag):
        self._in = False

    def handle_data(self, data):
        if self._in:
            self.script += data


def _page(path: Path) -> tuple[_Script, dict]:
    parsed = _Script()
    parsed.feed(path.read_text())
    data = json.loads(re.search(r"const DATA = (\{.*?\});\n", parsed.script, re.S).group(1))
    return parsed, data


def test_the_review_page_shows_both_texts_with_the_copied_words_marked(tmp_path):
    page_path = review_page(tmp_path)
    parsed, data = _page(page_path)
    assert parsed.ids.get("textleaks") == "section" and parsed.ids.get("evaloverlap") == "section"
    # Nothing of a record's text reaches the HTML parser as markup: the script holds all of it.
    html = page_path.read_text()
    assert "<script>alert" not in html and "<!-- -->" not in html and html.count("<script>") == 1

    leaks = data["leaks"]
    assert leaks["present"] and leaks["total"] == 4 and leaks["byLeak"] == {"text": 2, "full": 2, "image": 1}
    # the largest overlap first; image-only rows are the contamination section's
    assert [(r[0], r[1], r[2], r[3]) for r in leaks["rows"]] == [
        ("visualprm:s3", "vlrb:p3", "full", 1.0), ("visualprm:s1", "vlrb:p1", "text", 0.9),
        ("visualprm:s1", "mmrb2:m1", "full", 0.75), ("visualprm:s2", "vlrb:p1", "text", 0.6)]
    rows = {(r[0], r[1]): r for r in leaks["rows"]}

    _, _, _, _, kind, span, train, ev, sampled = rows[("visualprm:s1", "vlrb:p1")]
    assert (kind, span, sampled) == (None, 8, False)
    assert train == {"before": "<image>\nQuestion: ", "match": "What is the AREA of the  triangle, ABC",
                     "after": "? <script>alert(1)</script> Give cm².", "located": True}
    assert ev == {"before": "Look at the figure.\n", "match": "what is the area of the\n   triangle abc",
                  "after": ". Choose & explain <!-- -->", "located": True}
    # MMRB2's prompt text is its text items in order (its record_text SQL over the release's tables)
    *_, train, ev, _ = rows[("visualprm:s1", "mmrb2:m1")]
    assert train["match"] == "the AREA of the  triangle" and train["before"] == "<image>\nQuestion: What is "
    assert ev == {"before": "Draw ", "match": "THE area of the Triangle", "after": "!", "located": True}
    # a record without text in the release, and a text the matched words are not in
    *_, train, ev, _ = rows[("visualprm:s3", "vlrb:p3")]
    assert ev is None and train == {"before": "x", "match": "", "after": "", "located": False}

    assert leaks["overlapPresent"] and leaks["overlapTotal"] == 1
    assert leaks["overlap"] == [["mmrb2:m1", "vlrb:p1", "text", 0.8, None, "the area of the triangle", False]]
    assert [r["effect"] for r in data["leakOverrides"]] == [
        "not applied: no text leak of visualprm:s9 against vlrb:p9 in this release"]
    assert data["overrides"][0]["effect"] == TEXT_DECISION_EFFECT


def test_an_older_candidate_has_an_empty_leak_section(tmp_path):
    _, data = _page(review_page(tmp_path, with_leaks=False))
    assert data["leaks"] == {"present": False, "rows": [], "total": 0, "byLeak": {}, "overlapPresent": False,
                             "overlapTotal": 0, "overlap": []}
    assert data["leakOverrides"] is None


def test_the_rows_shown_are_capped_the_largest_overlaps_and_a_seeded_sample(tmp_path, monkeypatch):
    from pipeline.review import page as review_page_module

    monkeypatch.setattr(review_page_module, "TEXT_TOP", 3)
    monkeypatch.setattr(review_page_module, "TEXT_SAMPLED", 2)
    many = pa.Table.from_pylist([_leak(f"visualprm:s{i:02d}", "vlrb:p1", "text", i / 100, "area of the triangle")
                                 for i in range(40)], schema=RECORD_CONTAMINATION_SCHEMA)
    section = review_page_module._leaks_section(review_page_module.RecordLeaks(many, None, lambda wanted: {}),
                                                random.Random("r1"))
    keys = [r[0] for r in section["rows"]]
    assert keys[:3] == ["visualprm:s39", "visualprm:s38", "visualprm:s37"] and len(keys) == 5 and len(set(keys)) == 5
    assert [r[-1] for r in section["rows"]] == [False, False, False, True, True]
    assert section["total"] == 40


@pytest.mark.parametrize("text, matched, expected", [
    ("Area  of\tthe TRIANGLE.", "area of the triangle", ("", "Area  of\tthe TRIANGLE", ".")),
    ("(a) The cat's hat", "the cat s hat", ("(a) ", "The cat's hat", "")),  # punctuation inside a word
    ("first area of x; then area of the triangle", "area of the triangle", ("first area of x; then ", "area of the triangle", "")),
    ("nothing alike", "area of the triangle", ("nothing alike", "", "")),
    # the project's normalisation drops stock instructions, labels and InternVL's frame: the words
    # it kept are placed in the text as written, what it dropped inside the span is marked with them
    ("What is the area? Answer the question using a single word or phrase. Of the triangle, ABC\nChoices: (A) 4",
     "what is the area of the triangle abc",
     ("", "What is the area? Answer the question using a single word or phrase. Of the triangle, ABC", "\nChoices: (A) 4")),
    ("You are a helpful assistant.\n### Question: How many red cubes?\n### Solution Process: Step 1: count the red cubes",
     "how many red cubes", ("You are a helpful assistant.\n### Question: ", "How many red cubes",
                            "?\n### Solution Process: Step 1: count the red cubes")),
])
def test_the_matched_words_are_found_in_the_text_as_written(text, matched, expected):
    (got,) = marked_texts([(text, matched)])
    assert (got["before"], got["match"], got["after"]) == expected and got["located"] == bool(expected[1])
