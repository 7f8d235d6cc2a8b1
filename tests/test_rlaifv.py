"""RLAIF-V: the sample generator, the source, the parser, its refusals and its duplicate marks (no Dagster)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.rlaifv import sample
from pipeline.rlaifv.parse import origin_meta, parse_rlaifv
from pipeline.rlaifv.source import REPO, fetch_rlaifv, recorded_shards, select_shards, snapshot_rlaifv
from pipeline.settings import Layout, QualitySettings, Settings, ZipLimits
from pipeline.sources.base import ChecksumCache, SourceError

pytestmark = pytest.mark.fast

REPO_ROOT = Path(__file__).resolve().parent.parent
FIRST, SECOND = sample.SHARDS
FIRST_NAME, SECOND_NAME = Path(FIRST).name, Path(SECOND).name
REPEAT, REPEATED = sample.REPEATED_IDX  # (the row repeating an idx, the first row with it)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("rlaifv")
    return root, sample.write_rlaifv_sample(root)


@pytest.fixture(scope="module")
def parsed(written):
    root, _ = written
    return parse_rlaifv([root / FIRST, root / SECOND], ZipLimits(), root=root)


@pytest.fixture(scope="module")
def pairs(parsed) -> dict[str, dict]:
    return {r["pair_id"]: r for r in parsed.pairs.to_pylist()}


# ---- the sample ---------------------------------------------------------------------------------


def test_sample_has_the_upstream_columns_and_layout(written):
    root, facts = written
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*.parquet")) == list(sample.SHARDS)
    for path, rows in facts.rows.items():
        table = pq.read_table(root / path)
        assert table.schema.names == ["ds_name", "image", "question", "chosen", "rejected", "origin_dataset",
                                      "origin_split", "idx", "image_path"]
        assert table.schema.field("image").type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        assert table.num_rows == rows
    assert facts.rows == {FIRST: sample.FIRST_SHARD_ROWS, SECOND: sample.ROWS - sample.FIRST_SHARD_ROWS + 1}
    assert len(facts.ids) == len(set(facts.ids)) == sum(facts.rows.values())  # every row its own id
    second = pq.read_table(root / SECOND).to_pylist()
    # the repeat of an idx, across shards: the last row of the second shard, the fourth of the first
    assert second[-1]["idx"] == "1003" and (facts.ids[3], facts.ids[-1]) == ("rlaifv:1003", "rlaifv:1003#2")
    assert facts.repeated_idx == {"rlaifv:1003#2": "rlaifv:1003"} == {REPEAT: REPEATED}
    first = pq.read_table(root / FIRST).slice(0, 1).to_pylist()[0]
    assert Image.open(io.BytesIO(first["image"]["bytes"])).size[0] >= 200
    assert json.loads(first["origin_split"]).keys() == {"model", "feedback_model", "type"}


def test_sample_is_identical_on_every_call_and_in_another_process(written, tmp_path):
    root, _ = written
    before = {p: (root / p).stat().st_mtime_ns for p in sample.SHARDS}
    sample.write_rlaifv_sample(root)
    assert {p: (root / p).stat().st_mtime_ns for p in sample.SHARDS} == before  # already right: left alone
    code = ("import sys; from pathlib import Path; from pipeline.rlaifv.sample import write_rlaifv_sample; "
            "write_rlaifv_sample(Path(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=REPO_ROOT)
    for path in sample.SHARDS:
        assert (tmp_path / path).read_bytes() == (root / path).read_bytes()


# ---- the sample parses to exactly its facts ------------------------------------------------------


def test_published_pairs_are_the_facts(parsed, pairs):
    facts = sample.facts()
    assert tuple(parsed.pairs["pair_id"].to_pylist()) == facts.published
    assert facts.published == tuple(pid for pid in facts.ids if pid not in sample.FAULTS)  # all rows but the faults
    assert len(facts.published) == sum(facts.rows.values()) - len(sample.FAULTS)
    nameless = pairs[sample.NO_IDX_ID]
    assert (nameless["pair_id"], nameless["idx"], nameless["source_file"], nameless["row_in_file"]) == \
        ("rlaifv:RLAIF-V-Dataset_001.parquet#36", None, SECOND_NAME, 36)
    assert {r["source_file"] for r in pairs.values()} == {FIRST_NAME, SECOND_NAME}
    assert {n: sum(r["ds_name"] == n for r in pairs.values()) for n in sample.DS_NAMES} == facts.ds_names
    assert all(r["responses_differ"] is True and r["image_key"].startswith("sha256:") for r in pairs.values())


def test_faults_are_quarantined_at_parse_with_field_and_rule(parsed):
    got = {r.record_key: r.reason for r in parsed.rejected if r.stage == "parse"}
    assert set(got) == set(sample.facts().quarantined)
    assert got == {
        "rlaifv:1007": "record contract: rlaifv_pairs.chosen must be non-empty text (got '')",
        "rlaifv:1014": "record contract: rlaifv_pairs.responses_differ must be one of [True] (got false)",
        "rlaifv:1017": "record contract: rlaifv_pairs.image_key must be set (got null)",
        "rlaifv:1097": "record contract: rlaifv_pairs.image_key must be set (got null)",
    }
    assert {r.stage for r in parsed.rejected} == {"parse", "decode"}  # no file refused


def test_a_repeated_idx_publishes_as_another_pair(pairs):
    first, repeat = pairs["rlaifv:1003"], pairs["rlaifv:1003#2"]
    assert (first["source_file"], first["row_in_file"], first["idx"]) == (FIRST_NAME, 3, "1003")
    assert (repeat["source_file"], repeat["row_in_file"], repeat["idx"]) == \
        (SECOND_NAME, sample.facts().rows[SECOND] - 1, "1003")  # the idx as upstream wrote it
    # a second pair over the same picture (as upstream builds them), not a duplicate of the first
    assert repeat["image_key"] == first["image_key"] and repeat["question"] != first["question"]
    assert (repeat["dup_group"], repeat["exact_duplicate_of"]) == (None, None)


def test_the_planted_faults_stay_under_the_quarantine_budget(written, parsed):
    """The sample is large enough that its planted faults do not trip the release's budget
    (checks/rules.py: quarantine_budget, quarantined / (kept + quarantined), records and images)."""
    _, facts = written
    budget = QualitySettings().quarantine_budget
    rows = sum(facts.rows.values())
    at_parse = [r for r in parsed.rejected if r.stage == "parse"]
    assert parsed.pairs.num_rows + len(at_parse) == rows  # every row read either publishes or is quarantined
    assert len(at_parse) / rows < budget, (len(at_parse), rows)
    ok = sum(s == "ok" for s in parsed.images["status"].to_pylist())
    at_decode = [r for r in parsed.rejected if r.stage == "decode"]
    assert ok + len(at_decode) == parsed.images.num_rows == facts.distinct_images
    assert len(at_decode) / facts.distinct_images < budget, (len(at_decode), facts.distinct_images)


def test_images_are_keyed_by_content_and_the_corrupt_one_is_quarantined_at_decode(written, parsed, pairs):
    root, facts = written
    rows = {r["image_key"]: r for r in parsed.images.to_pylist()}
    blobs = {r["image"]["bytes"] for r in pq.read_table(root / FIRST).to_pylist() if r["image"]}
    blobs |= {r["image"]["bytes"] for r in pq.read_table(root / SECOND).to_pylist() if r["image"]}
    assert set(rows) == {f"sha256:{hashlib.sha256(b).hexdigest()}" for b in blobs}
    # every row read but those without an image and those showing an earlier row's picture
    imageless = [pid for pid, why in sample.FAULTS.items() if why == "no image"]
    sharing = (sample.EXACT_DUPLICATE[0], sample.SAME_QUESTION[1], REPEAT)
    assert len(rows) == facts.distinct_images == sum(facts.rows.values()) - len(imageless) - len(sharing)
    corrupt = pairs[facts.corrupt_image_pair]["image_key"]
    assert [k for k, r in rows.items() if r["status"] == "corrupt"] == [corrupt]
    assert (rows[corrupt]["bytes"], rows[corrupt]["width"], rows[corrupt]["format"]) == (300, None, None)
    assert [(r.stage, r.record_key) for r in parsed.rejected if r.stage == "decode"] == [("decode", corrupt)]
    assert {h.key for h in parsed.hashed} == {k for k, r in rows.items() if r["status"] == "ok"}
    ok = rows[pairs["rlaifv:1004"]["image_key"]]
    assert ok["format"] == "PNG" and ok["width"] >= 200 and ok["sha256"] == ok["image_key"][7:]


def test_duplicate_pairs_are_marked_not_removed(pairs):
    facts = sample.facts()
    assert {pid: r["dup_group"] for pid, r in pairs.items() if r["dup_group"]} == facts.dup_groups
    assert {pid: r["exact_duplicate_of"] for pid, r in pairs.items() if r["exact_duplicate_of"]} == facts.exact_duplicates
    same, other = (pairs[p] for p in sample.SAME_QUESTION)
    assert same["image_key"] == other["image_key"] and same["question"] != other["question"]
    assert " ".join(same["question"].lower().split()) == " ".join(other["question"].lower().split())
    assert (same["source_file"], other["source_file"]) == (FIRST_NAME, SECOND_NAME)  # found across shards
    repeat, first = (pairs[p] for p in sample.EXACT_DUPLICATE)
    assert (repeat["chosen"], repeat["rejected"], repeat["image_key"]) == (first["chosen"], first["rejected"], first["image_key"])
    assert repeat["idx"] == sample.EXACT_DUPLICATE[0].removeprefix("rlaifv:") != first["idx"]  # under another idx


def test_origin_split_is_read_into_columns(pairs):
    facts = sample.facts()
    assert {pid: (r["origin_model"], r["origin_feedback_model"], r["origin_type"]) if r["origin_meta"] else None
            for pid, r in pairs.items()} == facts.origin
    python = pairs[sample.ORIGIN_PYTHON]
    assert python["origin_split"].startswith("{'model': ") and json.loads(python["origin_meta"])["type"] == python["origin_type"]
    plain = pairs[sample.ORIGIN_PLAIN]
    assert plain["origin_split"].startswith("detailed_description by ")  # kept as written
    assert (plain["origin_meta"], plain["origin_model"], plain["origin_type"]) == (None, None, None)
    assert pairs[sample.ORIGIN_NULL]["origin_split"] is None and pairs[sample.ORIGIN_NULL]["origin_meta"] is None


@pytest.mark.parametrize("text, expected", [
    ('{"model": "m", "feedback_model": "f", "type": "question_answering"}',
     {"model": "m", "feedback_model": "f", "type": "question_answering"}),
    ("{'model': 'm', 'feedback_model': 'f', 'type': 'detailed_description'}",
     {"model": "m", "feedback_model": "f", "type": "detailed_description"}),
    ("{'model': ('a', 'b'), 1: None}", {"model": ["a", "b"], "1": None}),  # made JSON-shaped
    ('{"score": 1e999}', {"score": "inf"}),  # JSON text cannot hold infinity
    ("detailed_description by OmniLMM-12B", None),
    ("", None),
    (None, None),
    ('["model", "type"]', None),  # JSON, but not a mapping
    ('{"model": NaN}', None),
    ("{'model': 'm'", None),
    ("{__import__('os').system('echo hi'): 1}", None),  # a literal only: nothing runs
])
def test_origin_split_parsing(text, expected):
    assert origin_meta(text) == expected


def test_contaminated_pair_copies_a_published_vlrb_image():
    from pipeline.dedupe.hashing import hash_bytes
    from pipeline.vlrb import sample as vlrb

    eval_id, train_id = sample.facts().contaminated
    assert eval_id in vlrb.facts().published and eval_id not in vlrb.facts().quarantined
    eval_row = next(r for r in pq.read_table(io.BytesIO(vlrb.parquet_bytes())).to_pylist() if r["id"] == eval_id)
    train_row = next(r for r in pq.read_table(io.BytesIO(sample.shard_bytes()[FIRST])).to_pylist()
                     if r["idx"] == train_id.split(":")[1])
    a, b = hash_bytes("e", eval_row["image"]["bytes"]), hash_bytes("t", train_row["image"]["bytes"])
    assert eval_row["image"]["bytes"] != train_row["image"]["bytes"] and b.format == "JPEG"
    assert abs(b.width - round(a.width * 1.08)) <= 1 and abs(b.height - round(a.height * 1.08)) <= 1
    assert bin((a.phash ^ b.phash) & (2**64 - 1)).count("1") <= 6


# ---- pair ids: a repeated idx counts on, and no two rows ever share an id ------------------------


def _tiny_png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (40, 90, 160)).save(buf, format="PNG")
    return buf.getvalue()


def _shards_of_idx(root: Path, *shards: list) -> list[Path]:
    """Shards `RLAIF-V-Dataset_00<n>.parquet` in the upstream format, one row per idx given (None:
    no idx), every row a valid pair over one small picture."""
    picture, paths, k = _tiny_png(), [], 0
    for n, idxs in enumerate(shards):
        rows = []
        for idx in idxs:
            rows.append({"ds_name": "RLAIF-V", "image": {"bytes": picture, "path": None}, "question": f"What is in {k}?",
                         "chosen": f"A blue square ({k}).", "rejected": f"A red circle ({k}).", "origin_dataset": None,
                         "origin_split": None, "idx": idx, "image_path": None})
            k += 1
        path = root / f"RLAIF-V-Dataset_{n:03d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=sample.SCHEMA), path)
        paths.append(path)
    return paths


def _ids(root: Path, *shards: list) -> list[str]:
    out = parse_rlaifv(_shards_of_idx(root, *shards), ZipLimits(), root=root)
    assert out.rejected == []  # a repeated idx is no fault
    ids = out.pairs["pair_id"].to_pylist()
    assert len(set(ids)) == len(ids) == sum(map(len, shards))
    return ids


def test_a_repeated_idx_counts_on_across_shards(tmp_path):
    assert _ids(tmp_path, ["a", "b", "a"], ["a", "c", "b"]) == \
        ["rlaifv:a", "rlaifv:b", "rlaifv:a#2", "rlaifv:a#3", "rlaifv:c", "rlaifv:b#2"]


def test_the_idx_stays_as_written_and_a_blank_one_is_none(tmp_path):
    paths = _shards_of_idx(tmp_path, ["7", " ", "7", None])
    out = parse_rlaifv(paths, ZipLimits(), root=tmp_path)
    assert out.pairs.select(["pair_id", "idx"]).to_pylist() == [
        {"pair_id": "rlaifv:7", "idx": "7"},
        {"pair_id": "rlaifv:RLAIF-V-Dataset_000.parquet#1", "idx": " "},
        {"pair_id": "rlaifv:7#2", "idx": "7"},
        {"pair_id": "rlaifv:RLAIF-V-Dataset_000.parquet#3", "idx": None},
    ]


@pytest.mark.parametrize("shards, expected", [
    # an idx holding '#' after a repeat made its id: it counts on rather than take it
    ([["7", "7", "7#2", "7#2", "7#3", "7"]],
     ["rlaifv:7", "rlaifv:7#2", "rlaifv:7#2#2", "rlaifv:7#2#3", "rlaifv:7#3", "rlaifv:7#4"]),
    # the other way round: the repeat steps over the id an idx took first
    ([["7#2", "7", "7", "7"]], ["rlaifv:7#2", "rlaifv:7", "rlaifv:7#3", "rlaifv:7#4"]),
    # an idx spelling a row's shard-and-row id, before and after that row
    ([["RLAIF-V-Dataset_000.parquet#1", None], [None, "RLAIF-V-Dataset_001.parquet#0"]],
     ["rlaifv:RLAIF-V-Dataset_000.parquet#1", "rlaifv:RLAIF-V-Dataset_000.parquet#1#2",
      "rlaifv:RLAIF-V-Dataset_001.parquet#0", "rlaifv:RLAIF-V-Dataset_001.parquet#0#2"]),
], ids=["hash-idx-after-repeat", "repeat-after-hash-idx", "idx-like-a-row-id"])
def test_an_idx_holding_a_hash_never_collides(tmp_path, shards, expected):
    assert _ids(tmp_path, *shards) == expected


def test_ids_are_unique_whatever_the_idx(tmp_path):
    """Many rows over few idx made of '1' and '#' (and some without): every id distinct, each
    its row's own id or that id with `#<n>`, the first row with an idx that no id took before it
    keeps the plain `rlaifv:<idx>`."""
    import random

    rng = random.Random(11)
    shards = [[None if rng.random() < 0.1 else "".join(rng.choice("1#") for _ in range(rng.randint(1, 4)))
               for _ in range(120)] for _ in range(2)]
    ids = _ids(tmp_path, *shards)
    given, met, stepped = set(), Counter(), 0  # ids given so far; rows met per own id; rows that stepped over an id
    for n, (idx, pid) in enumerate(zip([i for s in shards for i in s], ids)):
        shard, row = divmod(n, 120)
        own = f"rlaifv:{idx}" if idx else f"rlaifv:RLAIF-V-Dataset_{shard:03d}.parquet#{row}"
        if own not in given:
            assert pid == own, (idx, pid)
        else:
            assert pid.startswith(f"{own}#") and pid[len(own) + 1:].isdigit(), (idx, pid)
            stepped += pid != f"{own}#{met[own] + 1}"  # not simply the n-th row with its idx: another took that id
        met[own] += 1
        given.add(pid)
    assert stepped > 0  # the collisions the rule is for did happen


# ---- whole-shard faults: each is one `file` refusal naming the file; the other shard publishes ----


def _swap(table: pa.Table, column: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), column, values)


@pytest.fixture(scope="module")
def upstream(written) -> pa.Table:
    root, _ = written
    return pq.read_table(root / FIRST)


@pytest.fixture
def beside(tmp_path, written):
    """A fresh root holding the sample's second shard; the first is for the test to write."""
    root, _ = written
    (tmp_path / SECOND).parent.mkdir(parents=True)
    shutil.copyfile(root / SECOND, tmp_path / SECOND)
    return tmp_path


def _second_shard_pairs(parsed) -> list[str]:
    return [pid for pid, f in zip(parsed.pairs["pair_id"].to_pylist(), parsed.pairs["source_file"].to_pylist())
            if f == SECOND_NAME]


def _second_shard_alone(parsed) -> list[str]:
    """The second shard's pairs when nothing of the first is read: its repeat of an idx of the first
    shard is then the first row with that idx, and takes its plain id."""
    ids = _second_shard_pairs(parsed)
    assert ids[-1] == REPEAT
    return [*ids[:-1], REPEATED]


DRIFTS = {  # a column's Arrow type moved away from the upstream format -> the reason
    "question as integers": (lambda t: _swap(t, "question", pa.array(range(t.num_rows), pa.int64())),
                             "column question is int64, expected string"),
    "image as plain binary": (lambda t: _swap(t, "image", pa.array(
        [r["bytes"] if r else None for r in t["image"].to_pylist()], pa.binary())),
        "column image is binary, expected struct<bytes: binary, path: string>"),
    "idx as integers": (lambda t: _swap(t, "idx", pa.array(range(t.num_rows), pa.int64())),
                        "column idx is int64, expected string"),
    "chosen as a list": (lambda t: _swap(t, "chosen", pa.array([[c] for c in t["chosen"].to_pylist()], pa.list_(pa.string()))),
                         "column chosen is list<string>, expected string"),
}


@pytest.mark.parametrize("case", list(DRIFTS))
def test_a_drifted_shard_is_refused_whole_and_the_other_still_publishes(beside, upstream, parsed, case):
    drift, reason = DRIFTS[case]
    (beside / FIRST).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(drift(upstream), beside / FIRST)
    out = parse_rlaifv([beside / FIRST, beside / SECOND], ZipLimits(), root=beside)
    assert [(r.dataset, r.stage, r.record_key, r.reason) for r in out.rejected if r.stage == "file"] == \
        [("rlaifv", "file", FIRST, f"parquet schema drift: {reason}")]
    # nothing of the first shard is read, so the second shard's repeat of idx 1003 is now the first: rlaifv:1003
    assert out.pairs["pair_id"].to_pylist() == _second_shard_alone(parsed)
    assert set(out.pairs["source_file"].to_pylist()) == {SECOND_NAME}


def test_wider_types_of_the_same_kind_are_not_drift(beside, upstream, parsed):
    pq.write_table(_swap(upstream, "question", upstream["question"].cast(pa.large_string())), beside / FIRST)
    out = parse_rlaifv([beside / FIRST, beside / SECOND], ZipLimits(), root=beside)
    assert out.pairs["pair_id"].to_pylist() == parsed.pairs["pair_id"].to_pylist()
    assert not [r for r in out.rejected if r.stage == "file"]


def test_an_unreadable_shard_is_refused_whole(beside, parsed):
    (beside / FIRST).write_bytes(b"PAR1 not really a parquet file")
    out = parse_rlaifv([beside / FIRST, beside / SECOND], ZipLimits(), root=beside)
    files = [(r.stage, r.record_key, r.reason.split(":")[0]) for r in out.rejected if r.stage == "file"]
    assert files == [("file", FIRST, "unreadable parquet")]
    assert out.pairs["pair_id"].to_pylist() == _second_shard_alone(parsed)


def test_a_shard_without_rows_is_refused_whole(beside, upstream, parsed):
    pq.write_table(upstream.slice(0, 0), beside / FIRST)
    out = parse_rlaifv([beside / FIRST, beside / SECOND], ZipLimits(), root=beside)
    assert [(r.stage, r.record_key, r.reason) for r in out.rejected if r.stage == "file"] == \
        [("file", FIRST, "holds no rows: nothing to publish")]
    assert out.pairs["pair_id"].to_pylist() == _second_shard_alone(parsed)


def test_a_shard_whose_every_row_is_refused_is_refused_whole(beside, upstream, parsed):
    empty = pa.array([""] * upstream.num_rows, pa.string())  # the right type, never usable
    pq.write_table(_swap(upstream, "chosen", empty), beside / FIRST)
    out = parse_rlaifv([beside / FIRST, beside / SECOND], ZipLimits(), root=beside)
    refused = [r for r in out.rejected if r.stage == "parse" and r.reason.startswith("record contract: rlaifv_pairs.chosen")]
    first_ids = sample.facts().ids[:upstream.num_rows]
    imageless = [pid for pid in first_ids if sample.FAULTS.get(pid) == "no image"]
    assert len(refused) == upstream.num_rows - len(imageless)  # a pair without an image is refused for that first
    assert [(r.stage, r.record_key, r.reason) for r in out.rejected if r.stage == "file"] == \
        [("file", FIRST, f"nothing usable: all of its rows ({sample.FIRST_SHARD_ROWS}) were refused, each with its own "
                         "quarantine row")]
    # the first shard was read (its ids given), so the second shard's repeat of idx 1003 is still rlaifv:1003#2
    assert out.pairs["pair_id"].to_pylist() == _second_shard_pairs(parsed)


# ---- the source: local layout, git-lfs pointers, the hf shard limit ------------------------------


def test_source_local_absent_present_lfs_pointer_and_stray_files(tmp_path, written):
    root, _ = written
    cache = ChecksumCache(tmp_path / "c.json")
    assert snapshot_rlaifv(tmp_path / "empty", "local", cache) is None
    snap = fetch_rlaifv(Settings(source="local", local_path=str(root)), Layout(tmp_path / "home"))
    assert [f.role for f in snap.files] == [f"rlaifv_parquet:{p}" for p in sample.SHARDS]
    assert snap.files[0].sha256 == hashlib.sha256((root / FIRST).read_bytes()).hexdigest()
    pointer = tmp_path / "lfs" / FIRST
    pointer.parent.mkdir(parents=True)
    pointer.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1\n")
    with pytest.raises(SourceError, match="RLAIF-V file .*RLAIF-V-Dataset_000.parquet is a git-lfs pointer"):
        snapshot_rlaifv(tmp_path / "lfs", "local", cache)
    stray = tmp_path / "stray" / REPO / "data" / "train-00000.parquet"  # not where upstream keeps its shards
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"x")
    with pytest.raises(SourceError, match="holds files but no RLAIF-V-Dataset_"):
        snapshot_rlaifv(tmp_path / "stray", "local", cache)


def test_the_sample_source_writes_and_inventories_both_shards(tmp_path):
    snap = fetch_rlaifv(Settings(source="sample"), Layout(tmp_path / "home"))
    assert [Path(f.path).name for f in snap.files] == [FIRST_NAME, SECOND_NAME]
    assert snap.revisions == {"rlaifv_sample": sample.SAMPLE_VERSION}


HUB_NAMES = ["README.md", ".gitattributes", "RLAIF-V-Dataset_002.parquet", "RLAIF-V-Dataset_000.parquet",
             "RLAIF-V-Dataset_010.parquet", "RLAIF-V-Dataset_001.parquet", "data/RLAIF-V-Dataset_003.parquet"]


def test_the_shard_limit_selects_the_first_shards_by_name():
    every = ["RLAIF-V-Dataset_000.parquet", "RLAIF-V-Dataset_001.parquet", "RLAIF-V-Dataset_002.parquet",
             "RLAIF-V-Dataset_010.parquet"]
    assert select_shards(HUB_NAMES) == every  # only the root's shards
    assert select_shards(HUB_NAMES, 2) == every[:2]
    assert select_shards(HUB_NAMES, 9) == every


def test_a_lock_entry_is_reused_only_when_it_answers_the_limit():
    rec = {"sha256": "0" * 64, "size": 1}
    files = {f"RLAIF-V-Dataset_00{i}.parquet": rec for i in range(3)}
    whole = {"revision": "r", "files": files, "shard_limit": None}
    assert recorded_shards(whole, None) == files
    assert list(recorded_shards(whole, 2)) == ["RLAIF-V-Dataset_000.parquet", "RLAIF-V-Dataset_001.parquet"]
    two = {"revision": "r", "files": dict(list(files.items())[:2]), "shard_limit": 2}
    assert list(recorded_shards(two, 1)) == ["RLAIF-V-Dataset_000.parquet"]
    assert recorded_shards(two, 3) is None and recorded_shards(two, None) is None  # the repo may hold more
    assert recorded_shards({"revision": "r"}, 2) is None


def test_hf_fetches_the_first_n_shards_and_drops_the_rest_when_the_limit_shrinks(hub, tmp_path, written):
    root, _ = written
    first, second = (root / FIRST).read_bytes(), (root / SECOND).read_bytes()
    sha = hub.add_dataset_commit(REPO, {"README.md": b"# RLAIF-V\n", "RLAIF-V-Dataset_000.parquet": first,
                                        "RLAIF-V-Dataset_001.parquet": second, "RLAIF-V-Dataset_002.parquet": second})
    layout = Layout(tmp_path / "home")
    lines = []
    snap = fetch_rlaifv(Settings(source="hf", hf_shards={REPO: 2}), layout, lines.append)
    assert [Path(f.path).name for f in snap.files] == [FIRST_NAME, SECOND_NAME]
    assert snap.revisions == {REPO: sha} and snap.files[0].origin == f"{REPO}@{sha}/{FIRST_NAME}"
    assert f"hf: {REPO}: the first 2 shard(s) by name (hf_shards[{REPO}] = 2)" in lines
    lock = json.loads((layout.raw_source("hf") / "sources.lock.json").read_text())[REPO]
    assert (lock["revision"], sorted(lock["files"]), lock["shard_limit"]) == (sha, [FIRST_NAME, SECOND_NAME], 2)

    hub.clear_log()
    snap = fetch_rlaifv(Settings(source="hf", hf_shards={REPO: 1}), layout)
    assert [Path(f.path).name for f in snap.files] == [FIRST_NAME]  # the second is stale now: removed
    assert not (layout.raw_source("hf") / SECOND).exists() and hub.requests == []  # answered by the lock

    snap = fetch_rlaifv(Settings(source="hf"), layout)
    assert [Path(f.path).name for f in snap.files] == [FIRST_NAME, SECOND_NAME, "RLAIF-V-Dataset_002.parquet"]


# ---- streaming: memory follows the batch, not the shard ----------------------------------------

MEMORY_PROBE = """
import json, sys, tracemalloc
from pathlib import Path
import pyarrow as pa
from pipeline.rlaifv.parse import parse_rlaifv
from pipeline.settings import ZipLimits

parse_rlaifv([Path(sys.argv[1])], ZipLimits())  # warm up: lazy imports are not the parser's memory
tracemalloc.start()
parsed = parse_rlaifv([Path(sys.argv[2])], ZipLimits())
_, python_peak = tracemalloc.get_traced_memory()
print(json.dumps({"python_peak": python_peak, "arrow_peak": pa.default_memory_pool().max_memory(),
                  "pairs": parsed.pairs.num_rows, "images": parsed.images.num_rows}))
"""


def test_a_large_shard_is_parsed_in_memory_that_follows_the_batch_not_the_shard(tmp_path):
    rng = np.random.default_rng(7)
    pictures = []
    for _ in range(150):  # grain compresses badly: ~20 KB each, cheap to decode
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=95)
        pictures.append(buf.getvalue())
    n = 6000
    table = pa.Table.from_pylist([
        {"image": {"bytes": pictures[i % len(pictures)], "path": None}, "question": f"What is in picture {i}?",
         "chosen": "A field of grain.", "rejected": "A cat on a sofa.", "idx": str(i)} for i in range(n)
    ], schema=pa.schema([("image", sample.SCHEMA.field("image").type), ("question", pa.string()),
                         ("chosen", pa.string()), ("rejected", pa.string()), ("idx", pa.string())]))
    big, small = tmp_path / "RLAIF-V-Dataset_000.parquet", tmp_path / "warm" / "RLAIF-V-Dataset_000.parquet"
    small.parent.mkdir()
    # One row group for the whole shard (a reader that takes row groups whole would hold all of it);
    # pages of 64 rows, as a writer of image rows would cut them.
    pq.write_table(table, big, row_group_size=n, compression="none", use_dictionary=False, write_batch_size=64)
    pq.write_table(table.slice(0, 100), small)
    del table
    size = big.stat().st_size
    try:
        out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(small), str(big)], check=True, cwd=REPO_ROOT,
                             capture_output=True, text=True)
    finally:
        big.unlink()
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["pairs"], got["images"]) == (n, 150) and size > 100e6
    assert got["python_peak"] + got["arrow_peak"] < size / 5, (got, size)
