"""VL-RewardBench: the sample generator, the source, the parser and its refusals (no Dagster)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.settings import Layout, Settings, ZipLimits
from pipeline.sources.base import ChecksumCache, SourceError
from pipeline.vlrb import sample
from pipeline.vlrb.parse import parse_vlrb
from pipeline.vlrb.source import REPO, fetch_vlrb, snapshot_vlrb

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlrb")
    return root, sample.write_vlrb_sample(root)


@pytest.fixture(scope="module")
def parsed(written):
    root, _ = written
    return parse_vlrb([root / sample.RELPATH], ZipLimits(), root=root)


def test_sample_has_the_upstream_columns_and_types(written):
    root, facts = written
    table = pq.read_table(root / sample.RELPATH)
    assert table.schema.names == ["id", "query", "response", "image", "human_ranking", "models", "judge",
                                  "rationale", "query_source", "ground_truth"]
    assert table.schema.field("image").type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    assert table.schema.field("response").type == pa.list_(pa.string())
    assert table.num_rows == 101 and table["id"].to_pylist()[-1] == "VLRB_0009"  # 100 + the repeated id
    first = table.slice(0, 1).to_pylist()[0]
    assert first["human_ranking"] in ([0, 1], [1, 0]) and len(first["models"]) == 2
    assert Image.open(io.BytesIO(first["image"]["bytes"])).size[0] >= 240


def test_sample_is_identical_in_another_process(written, tmp_path):
    root, _ = written
    code = ("import sys; from pathlib import Path; from pipeline.vlrb.sample import write_vlrb_sample; "
            "write_vlrb_sample(Path(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=REPO_ROOT)
    assert (tmp_path / sample.RELPATH).read_bytes() == (root / sample.RELPATH).read_bytes()


def test_pairs_and_choices(parsed):
    pairs = {r["pair_id"]: r for r in parsed.pairs.to_pylist()}
    assert len(pairs) == 96  # 100 written, 4 planted faults; the repeated id keeps its first row
    assert "VLRB_0009" in pairs and not pairs["VLRB_0009"]["query"].endswith("(again)")
    assert {k: v["chosen"] for k, v in pairs.items()} == sample.facts().chosen
    one = pairs["VLRB_0001"]
    assert (one["chosen"], one["human_ranking"], one["n_responses"]) == ("B", "[1, 0]", 2)
    assert one["response_b"].startswith("The image shows the red object near the centre")
    assert one["image_key"].startswith("sha256:") and len(one["image_key"]) == 71
    assert pairs["VLRB_0011"]["image_key"] == pairs["VLRB_0012"]["image_key"]  # one picture, two pairs


def test_faults_are_quarantined_with_field_and_rule(parsed):
    got = {r.record_key: (r.stage, r.reason) for r in parsed.rejected if r.stage == "parse"}
    assert got == {
        "VLRB_0003": ("parse", "record contract: vlrb_pairs.human_ranking must match the JSON shape a permutation "
                               "of (0, 1) (got '[0, 0]')"),
        "VLRB_0014": ("parse", "record contract: vlrb_pairs.response_b must be non-empty text (got '')"),
        "VLRB_0017": ("parse", "record contract: vlrb_pairs.n_responses must be within 2..2 (got 3)"),
        "VLRB_0024": ("parse", "record contract: vlrb_pairs.image_key must be set (got null)"),
        "VLRB_0009": ("parse", "id repeats row 9; the first is kept"),
    }


def test_images_are_keyed_by_content_and_the_corrupt_one_is_quarantined(written, parsed):
    root, _ = written
    rows = {r["image_key"]: r for r in parsed.images.to_pylist()}
    table = pq.read_table(root / sample.RELPATH)
    blobs = {r["image"]["bytes"] for r in table.to_pylist() if r["image"]}
    assert set(rows) == {f"sha256:{hashlib.sha256(b).hexdigest()}" for b in blobs}
    assert len(rows) == 98  # 101 rows: the repeated id is not read, one has no image, two share one
    corrupt = [k for k, r in rows.items() if r["status"] == "corrupt"]
    assert len(corrupt) == 1 and rows[corrupt[0]]["bytes"] == 300 and rows[corrupt[0]]["width"] is None
    assert [(r.stage, r.record_key) for r in parsed.rejected if r.stage == "decode"] == [("decode", corrupt[0])]
    assert {h.key for h in parsed.hashed} == {k for k, r in rows.items() if r["status"] == "ok"}
    ok = next(r for r in rows.values() if r["status"] == "ok")
    assert ok["format"] in ("JPEG", "PNG") and ok["width"] >= 240 and ok["sha256"] == ok["image_key"][7:]


def test_large_shards_are_checked_on_worker_processes_with_the_same_rows(written, parsed, monkeypatch):
    """Past embedded.POOL_BYTES of shards the images are decoded on hashing's worker processes
    (threads below): the pairs, images, hashes and quarantine are those of the thread pool."""
    from concurrent.futures import ProcessPoolExecutor

    from pipeline import embedded

    root, _ = written
    monkeypatch.setattr(embedded, "POOL_BYTES", 0)
    seen_pools = []
    original_submit = embedded._submit

    def submit(dataset, rows, seen, limits, pool, *args, **kw):
        seen_pools.append(type(pool))
        return original_submit(dataset, rows, seen, limits, pool, *args, **kw)

    monkeypatch.setattr(embedded, "_submit", submit)
    again = parse_vlrb([root / sample.RELPATH], ZipLimits(), root=root)
    if (os.cpu_count() or 1) > 1:
        assert seen_pools and all(t is ProcessPoolExecutor for t in seen_pools)
    assert again.pairs.equals(parsed.pairs) and again.images.equals(parsed.images)
    assert [vars(h) for h in again.hashed] == [vars(h) for h in parsed.hashed]
    assert [vars(r) for r in again.rejected] == [vars(r) for r in parsed.rejected]


def test_a_shard_that_cannot_be_used_is_a_file_refusal(tmp_path, written):
    root, _ = written
    bad = tmp_path / "data" / "test-00001-of-00002.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"PAR1 not really")
    drift = tmp_path / "data" / "test-00002-of-00002.parquet"
    pq.write_table(pa.table({"id": ["x"], "question": ["q"]}), drift)
    out = parse_vlrb([bad, drift, root / sample.RELPATH], ZipLimits(), root=None)
    files = [(r.stage, r.record_key, r.reason.split(":")[0]) for r in out.rejected if r.stage == "file"]
    assert files == [("file", bad.name, "unreadable parquet"),
                     ("file", drift.name, "parquet lacks column(s) query, response, image, human_ranking; "
                                          "columns are id, question")]
    assert out.pairs.num_rows == 96  # the good shard still parses


def test_source_local_absent_present_and_lfs_pointer(tmp_path, written):
    root, _ = written
    cache = ChecksumCache(tmp_path / "c.json")
    assert snapshot_vlrb(tmp_path / "empty", "local", cache) is None
    snap = fetch_vlrb(Settings(source="local", local_path=str(root)), Layout(tmp_path / "home"))
    assert [f.role for f in snap.files] == [f"vlrb_parquet:{sample.RELPATH}"]
    assert snap.files[0].sha256 == hashlib.sha256((root / sample.RELPATH).read_bytes()).hexdigest()
    pointer = tmp_path / "lfs" / REPO / "data" / "test-00000-of-00001.parquet"
    pointer.parent.mkdir(parents=True)
    pointer.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1\n")
    with pytest.raises(SourceError, match="git-lfs pointer"):
        snapshot_vlrb(tmp_path / "lfs", "local", cache)
    stray = tmp_path / "stray" / REPO / "README.md"
    stray.parent.mkdir(parents=True)
    stray.write_text("only a card")
    with pytest.raises(SourceError, match="holds files but no data/test-"):
        snapshot_vlrb(tmp_path / "stray", "local", cache)


def test_contaminated_pair_copies_a_visualprm_training_image():
    from pipeline.dedupe.hashing import hash_bytes
    from pipeline.visualprm.sample import embedded_image

    train, pair = sample.CONTAMINATED
    row = next(r for r in pq.read_table(io.BytesIO(sample.parquet_bytes())).to_pylist() if r["id"] == pair)
    a, b = hash_bytes("t", embedded_image(train)), hash_bytes("e", row["image"]["bytes"])
    assert abs(b.width - round(a.width * 1.1)) <= 1 and abs(b.height - round(a.height * 1.1)) <= 1  # 110 %
    assert bin((a.phash ^ b.phash) & (2**64 - 1)).count("1") <= 6


def test_the_planted_repeated_id_is_in_the_shard_twice():
    ids = [r["id"] for r in pq.read_table(io.BytesIO(sample.parquet_bytes()), columns=["id"]).to_pylist()]
    assert sample.facts().quarantined["VLRB_0009"] == "id repeats an earlier row"
    assert ids.count("VLRB_0009") == 2  # the shard itself holds the repeat the facts name"


# ---- whole-shard faults: drift, no rows, every row refused --------------------------------------


def _swap(table: pa.Table, column: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(column), column, values)


DRIFTS = {  # a column's Arrow type moved away from the upstream format -> the reason
    "ranking as strings": (lambda t: _swap(t, "human_ranking", pa.array(
        [[str(x) for x in r] if r else r for r in t["human_ranking"].to_pylist()], pa.list_(pa.string()))),
        "column human_ranking is list<string>, expected list<int>"),
    "ranking as floats": (lambda t: _swap(t, "human_ranking", t["human_ranking"].cast(pa.list_(pa.float64()))),
                          "column human_ranking is list<double>, expected list<int>"),
    "image as plain binary": (lambda t: _swap(t, "image", pa.array(
        [r["bytes"] if r else None for r in t["image"].to_pylist()], pa.binary())),
        "column image is binary, expected struct<bytes: binary, path: string>"),
    "response as one string": (lambda t: _swap(t, "response", pa.array(
        [" / ".join(r) for r in t["response"].to_pylist()], pa.string())),
        "column response is string, expected list<string>"),
    "id as integers": (lambda t: _swap(t, "id", pa.array(range(t.num_rows), pa.int64())),
                       "column id is int64, expected string"),
}


@pytest.fixture(scope="module")
def upstream(written) -> pa.Table:
    root, _ = written
    return pq.read_table(root / sample.RELPATH)


def shard(root: Path, table: pa.Table) -> Path:
    path = root / sample.RELPATH
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("case", list(DRIFTS))
def test_a_drifted_shard_is_refused_whole_before_any_row_is_read(tmp_path, upstream, case):
    drift, reason = DRIFTS[case]
    out = parse_vlrb([shard(tmp_path, drift(upstream))], ZipLimits(), root=tmp_path)
    assert [(r.dataset, r.stage, r.record_key, r.reason) for r in out.rejected] == \
        [("vlrb", "file", sample.RELPATH, f"parquet schema drift: {reason}")]
    assert out.pairs.num_rows == 0 and out.images.num_rows == 0 and out.hashed == []  # nothing coerced, nothing half-read


def test_wider_or_narrower_types_of_the_same_kind_are_not_drift(tmp_path, upstream):
    same = _swap(_swap(upstream, "id", upstream["id"].cast(pa.large_string())),
                 "human_ranking", upstream["human_ranking"].cast(pa.list_(pa.int8())))
    out = parse_vlrb([shard(tmp_path, same)], ZipLimits(), root=tmp_path)
    assert out.pairs.num_rows == 96 and not [r for r in out.rejected if r.stage == "file"]


def test_a_shard_without_rows_is_refused_and_a_good_shard_beside_it_still_parses(tmp_path, written, upstream):
    root, _ = written
    empty = shard(tmp_path, upstream.slice(0, 0))
    out = parse_vlrb([empty, root / sample.RELPATH], ZipLimits())
    assert [(r.stage, r.record_key, r.reason) for r in out.rejected if r.stage == "file"] == \
        [("file", empty.name, "holds no rows: nothing to publish")]
    assert out.pairs.num_rows == 96


def test_a_shard_whose_every_row_is_refused_is_refused_whole(tmp_path, upstream):
    ranks = pa.array([[0, 0]] * upstream.num_rows, pa.list_(pa.int64()))  # the right type, never a permutation
    out = parse_vlrb([shard(tmp_path, _swap(upstream, "human_ranking", ranks))], ZipLimits(), root=tmp_path)
    stages = [r.stage for r in out.rejected]
    assert stages.count("parse") == upstream.num_rows and out.pairs.num_rows == 0
    assert [(r.stage, r.record_key, r.reason) for r in out.rejected if r.stage == "file"] == \
        [("file", sample.RELPATH, "nothing usable: all of its rows (101) were refused, each with its own quarantine row")]


def test_an_image_first_met_on_a_dropped_row_is_kept_by_a_later_row_in_the_next_batch_or_shard(tmp_path):
    """A row without an id (dropped before its image is kept) shows an image that a good row of the
    next batch, or of the next shard, shows too: the good row keeps it (the batches are checked one
    ahead, embedded.checked_batches)."""
    from pipeline.vlrb.parse import BATCH_ROWS

    def png(colour):
        out = io.BytesIO()
        Image.new("RGB", (40, 30), colour).save(out, "PNG")
        return out.getvalue()

    red = png((255, 0, 0))
    schema = pa.schema([("id", pa.string()), ("query", pa.string()), ("response", pa.list_(pa.string())),
                        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("human_ranking", pa.list_(pa.int64()))])

    def shard(name, rows):
        path = tmp_path / name
        pq.write_table(pa.Table.from_pylist([{"id": i, "query": "q", "response": ["a", "b"], "human_ranking": [0, 1],
                                              "image": None if b is None else {"bytes": b, "path": None}}
                                             for i, b in rows], schema=schema), path)
        return path

    next_batch = [shard("a.parquet", [(None, red)] + [(f"r{i}", None) for i in range(1, BATCH_ROWS)] + [("last", red)])]
    next_shard = [shard("b1.parquet", [(None, red)]), shard("b2.parquet", [("c", red)])]
    for files in (next_batch, next_shard):
        out = parse_vlrb(files, ZipLimits(), root=tmp_path)
        key = "sha256:" + hashlib.sha256(red).hexdigest()
        assert out.images["image_key"].to_pylist() == [key]
        assert [k for k in out.pairs["image_key"].to_pylist() if k] == [key]
        assert "row has no id" in [r.reason for r in out.rejected]
