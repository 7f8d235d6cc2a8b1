"""Dedupe decisions: clusters and contamination across datasets, the rollout rule for samples."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.dedupe.decisions import SIGNATURE_SCHEMA, find_duplicates, mark_samples

from tests.dedupe_images import bar_chart, crop, encode, half, photo, signatures

ROLES = {"eval_sets": ("mmrb2", "vlrb"), "train_sets": ("visualprm",)}  # as the pipeline passes the registry's


def test_clusters_span_datasets_and_contamination_lists_train_eval_pairs():
    original = photo(1)
    eval_bytes = encode(original, "JPEG", 92)
    copy = encode(half(original), "JPEG", 80)  # a smaller re-encode: near
    cropped = encode(crop(original, 0.04), "PNG")  # 4 % off each side: crop
    table = pa.concat_tables([
        signatures({"eval.jpg": eval_bytes}, "mmrb2"),
        signatures({"train/copy.jpg": copy, "train/exact.jpg": copy, "train/crop.png": cropped,
                    "train/other.png": encode(photo(2)), "train/chart.png": encode(bar_chart([0.2, 0.9, 0.5]))},
                   "visualprm"),
    ]).cast(SIGNATURE_SCHEMA)
    clusters, contamination, result = find_duplicates(table, max_distance=8, **ROLES)
    rows = {r["image_key"]: r for r in clusters.to_pylist()}
    assert set(rows) == {"eval.jpg", "train/copy.jpg", "train/exact.jpg", "train/crop.png"}
    assert len({r["cluster_id"] for r in rows.values()}) == 1
    assert rows["eval.jpg"]["is_canonical"] and rows["eval.jpg"]["kind"] is None and rows["eval.jpg"]["score"] is None
    assert rows["train/copy.jpg"]["kind"] == rows["train/exact.jpg"]["kind"] == "near"
    assert rows["train/crop.png"]["kind"] == "crop"
    assert all(r["score"] >= 0.965 for k, r in rows.items() if k != "eval.jpg")
    got = {(r["train_image_key"], r["eval_image_key"]): r["kind"] for r in contamination.to_pylist()}
    assert got == {("train/copy.jpg", "eval.jpg"): "near", ("train/exact.jpg", "eval.jpg"): "near",
                   ("train/crop.png", "eval.jpg"): "crop"}
    assert result.flat_nodes == 0 and result.nodes == 5  # copy.jpg and exact.jpg are one node


def test_identical_bytes_across_datasets_are_exact_contamination():
    data = encode(photo(3), "JPEG", 90)
    table = pa.concat_tables([signatures({"e.jpg": data}, "mmrb2"), signatures({"t.jpg": data}, "visualprm")])
    clusters, contamination, _ = find_duplicates(table, max_distance=8, **ROLES)
    assert contamination.to_pylist() == [
        {"train_dataset": "visualprm", "train_image_key": "t.jpg", "eval_dataset": "mmrb2", "eval_image_key": "e.jpg",
         "distance": 0, "kind": "exact", "score": 1.0}]
    assert sorted((r["image_key"], r["kind"]) for r in clusters.to_pylist()) == [("e.jpg", None), ("t.jpg", "exact")]


def test_every_eval_set_is_checked_against_every_train_set():
    """One train image copying an image of each eval set gives one row per eval set, each naming
    its set; two eval images that copy each other are a duplicate, not contamination."""
    shared, other = encode(photo(3), "JPEG", 90), encode(photo(11), "JPEG", 90)
    table = pa.concat_tables([signatures({"e.jpg": shared}, "mmrb2"), signatures({"sha256:v": shared, "x": other}, "vlrb"),
                              signatures({"t.jpg": shared}, "visualprm")])
    _, contamination, _ = find_duplicates(table, max_distance=8, **ROLES)
    assert [(r["train_dataset"], r["train_image_key"], r["eval_dataset"], r["eval_image_key"], r["kind"])
            for r in contamination.to_pylist()] == [
        ("visualprm", "t.jpg", "mmrb2", "e.jpg", "exact"), ("visualprm", "t.jpg", "vlrb", "sha256:v", "exact")]


def _samples(rows):
    return pa.Table.from_pylist(
        [{"sample_id": sid, "question": q, "image_refs": refs, "row_index": i} for i, (sid, q, refs) in enumerate(rows)],
        schema=pa.schema([("sample_id", pa.string()), ("question", pa.string()),
                          ("image_refs", pa.list_(pa.string())), ("row_index", pa.int64())]),
    )


def _steps(rows):
    return pa.Table.from_pylist([{"sample_id": s, "step_index": i, "text": t} for s, texts in rows for i, t in enumerate(texts)])


def test_rollouts_sharing_an_image_are_not_duplicates_unless_question_and_steps_match():
    samples = _samples([
        ("r0", "What is x?", ["a.jpg"]),
        ("r1", "What is x?", ["a.jpg"]),            # same image and question, other steps: a rollout
        ("r2", "  what is   X? ", ["a_copy.jpg"]),   # near-copy image, same question/steps as r0 after normalising
        ("r3", "What is x?", ["b.jpg"]),            # same question and steps, unrelated image
    ])
    steps = _steps([("r0", ["x = 2", "So 2."]), ("r1", ["x = 3", "So 3."]), ("r2", ["X = 2", "so  2."]), ("r3", ["x = 2", "So 2."])])
    images = pa.table({"image_key": ["a.jpg", "a_copy.jpg", "b.jpg"], "sha256": ["s1", "s2", "s3"]})
    clusters = pa.table({"cluster_id": ["c1", "c1"], "dataset": ["visualprm", "visualprm"], "image_key": ["a.jpg", "a_copy.jpg"],
                         "is_canonical": [True, False], "distance_to_canonical": [0, 2], "kind": [None, "near"],
                         "score": pa.array([None, 0.99], pa.float32())})
    contamination = pa.table({"train_dataset": ["visualprm"], "train_image_key": ["b.jpg"], "eval_dataset": ["mmrb2"],
                              "eval_image_key": ["e.jpg"], "distance": [1]})
    out = {r["sample_id"]: r for r in mark_samples(samples, steps, images, clusters, contamination).to_pylist()}
    assert [out[s]["is_duplicate"] for s in ("r0", "r1", "r2", "r3")] == [False, False, True, False]
    assert out["r2"]["duplicate_of"] == "r0" and out["r0"]["duplicate_of"] is None
    assert [out[s]["is_contaminated"] for s in ("r0", "r1", "r2", "r3")] == [False, False, False, True]
    assert out["r0"]["image_clusters"] == out["r2"]["image_clusters"] == ["c1"]
    assert out["r3"]["image_clusters"] == ["sha256:s3"]


def test_steps_that_differ_only_in_runs_of_whitespace_are_the_same_rollout():
    """A step's text is lower-cased, trimmed of spaces and each run of RE2's \\s (tab, newline, form
    feed, return, space) made one space, whichever of those it holds; a vertical tab or a
    non-breaking space is not one of them, so a step holding one differs."""
    steps_of = {"r0": ["x = 2", "so 2."], "r1": ["X =\t2", "So\r\n2."], "r2": ["x\f=  2", " so 2. "],
                "r3": ["x =\n\n 2", "so\t\t2."], "r4": ["x =\v2", "so 2."], "r5": ["x =\u00a02", "so 2."]}
    samples = _samples([(s, "What is x?", ["a.jpg"]) for s in steps_of])
    images = pa.table({"image_key": ["a.jpg"], "sha256": ["s1"]})
    no_clusters = pa.table({"cluster_id": pa.array([], pa.string()), "dataset": pa.array([], pa.string()),
                            "image_key": pa.array([], pa.string()), "is_canonical": pa.array([], pa.bool_()),
                            "distance_to_canonical": pa.array([], pa.int32()), "kind": pa.array([], pa.string()),
                            "score": pa.array([], pa.float32())})
    no_contamination = pa.table({"train_dataset": pa.array([], pa.string()), "train_image_key": pa.array([], pa.string()),
                                 "eval_dataset": pa.array([], pa.string()), "eval_image_key": pa.array([], pa.string()),
                                 "distance": pa.array([], pa.int32())})
    out = {r["sample_id"]: r for r in mark_samples(samples, _steps(steps_of.items()), images, no_clusters,
                                                   no_contamination).to_pylist()}
    assert {s: out[s]["duplicate_of"] for s in steps_of} == {"r0": None, "r1": "r0", "r2": "r0", "r3": "r0",
                                                             "r4": None, "r5": None}


MEMORY_PROBE = """
import sys
import numpy as np
from pathlib import Path
from pipeline.dedupe.decisions import thumb_file

def hwm():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) // 1024

path, out = sys.argv[1], Path(sys.argv[2])
thumb_file(sys.argv[3], out.with_name("warm.npy"))  # imports and first-use costs paid before the baseline
base = hwm()
files = thumb_file(path, out)
print(hwm() - base, files.thumbs.shape[0])
"""


def _signatures_file(path: Path, rows: int) -> None:
    """`rows` signatures with random thumbnails and a fine luma on every tenth, in row groups of
    SIGNATURE_BATCH rows, as image_hashes stages them (staging.write_staged_stream)."""
    import pyarrow.parquet as pq

    from pipeline.dedupe.decisions import SIGNATURE_BATCH, THUMB_BYTES
    from pipeline.dedupe.hashing import pack_fine

    rng = np.random.default_rng(rows)
    thumbs = rng.integers(0, 256, (rows, THUMB_BYTES), dtype=np.uint8)
    luma = rng.integers(0, 256, (256, 256), dtype=np.uint8)
    fine = [pack_fine(np.roll(luma, k)) if k % 10 == 0 else None for k in range(rows)]
    columns = {f.name: pa.nulls(rows, f.type) for f in SIGNATURE_SCHEMA}
    columns.update(dataset=pa.array(["d"] * rows), image_key=pa.array([f"k{k}" for k in range(rows)]),
                   thumb=pa.FixedSizeBinaryArray.from_buffers(pa.binary(THUMB_BYTES), rows,
                                                            [None, pa.py_buffer(thumbs.tobytes())]),
                   fine=pa.array(fine, pa.binary()))
    table = pa.table([columns[f.name].cast(f.type) for f in SIGNATURE_SCHEMA], schema=SIGNATURE_SCHEMA)
    pq.write_table(table, path, row_group_size=SIGNATURE_BATCH, compression="zstd")
    np.save(path.with_suffix(".check.npy"), thumbs[::997])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
def test_thumb_file_memory_does_not_grow_with_the_file(tmp_path):
    """Turning 2,048 and then 8,192 signatures (37 and 150 MB of thumbnails) into the engine's
    files raises the process's peak memory by about the same (a few row groups as Arrow reads them),
    not by the file; the thumbnails come out intact."""
    import subprocess
    import sys

    grew = {}
    _signatures_file(tmp_path / "warm.parquet", 16)
    for rows in (2048, 8192):
        path = tmp_path / f"signatures{rows}.parquet"
        _signatures_file(path, rows)
        done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(path), str(tmp_path / f"thumbs{rows}.npy"),
                               str(tmp_path / "warm.parquet")],
                              capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
        assert done.returncode == 0, done.stderr[-2000:]
        grew[rows], n = map(int, done.stdout.split())
        assert n == rows
        got = np.load(tmp_path / f"thumbs{rows}.npy", mmap_mode="r")
        assert np.array_equal(got[::997], np.load(path.with_suffix(".check.npy")))
    # a reader that held the file would grow by its 110 MB more of thumbnails at least
    assert grew[8192] < grew[2048] + 60 and grew[8192] < 250, grew


def test_the_datasets_signatures_are_linked_as_parts_and_read_back_in_order(tmp_path):
    """gather_signatures links each dataset's signatures as a part when it has SIGNATURE_SCHEMA
    (read_signatures and thumb_file read the parts in order: the same rows, thumbnails and 256 px
    lumas as one file), and copies them cast to it otherwise."""
    import os

    import pyarrow.parquet as pq

    from pipeline.dedupe.decisions import gather_signatures, read_signatures, thumb_file
    from pipeline.staging import parts_of

    first = signatures({"a.png": encode(bar_chart([0.2, 0.9, 0.5])), "b.jpg": encode(photo(3), "JPEG", 90)}, "mmrb2")
    second = signatures({"c.png": encode(bar_chart([0.7, 0.1, 0.4])), "d.png": encode(photo(4))}, "visualprm")
    paths = []
    for k, table in enumerate((first, second)):
        paths.append(str(tmp_path / f"src{k}.parquet"))
        pq.write_table(table, paths[-1])
    linked = gather_signatures(tmp_path / "linked", paths)
    assert [os.stat(p).st_ino for p in parts_of(linked)] == [os.stat(p).st_ino for p in paths]
    whole = pa.concat_tables([first, second])
    columns = ["dataset", "image_key", "phash", "flat"]
    assert read_signatures(linked, columns).equals(whole.select(columns))
    files = thumb_file(linked, tmp_path / "linked_thumbs.npy")
    assert np.array_equal(files.thumbs, np.stack([np.frombuffer(t, np.uint8) for t in whole["thumb"].to_pylist()]))
    assert files.fine(np.arange(4)) == whole["fine"].to_pylist()
    assert any(whole["fine"].to_pylist()) and not all(whole["fine"].to_pylist())  # charts have one, photos none

    narrow = first.set_column(first.schema.get_field_index("width"), "width", first["width"].cast(pa.int16()))
    pq.write_table(narrow, paths[0])  # a part of another schema: copied into one file, cast
    copied = gather_signatures(tmp_path / "copied", paths)
    assert parts_of(copied) == [copied] and pq.read_schema(copied).equals(SIGNATURE_SCHEMA)
    assert read_signatures(copied, columns + ["width"]).equals(whole.select(columns + ["width"]))


def test_a_thumbnail_column_of_one_chunk_is_read_in_place():
    """ThumbColumn reads a one-chunk column (hashes_table's) without copying it, a slice of one at
    its offset, and several chunks combined: the same rows each way."""
    from pipeline.dedupe.decisions import ThumbColumn

    rows = np.arange(6 * 5, dtype=np.uint8).reshape(6, 5)
    array = pa.array([r.tobytes() for r in rows], pa.binary(5))
    one = ThumbColumn(pa.chunked_array([array]))
    address = np.frombuffer(array.buffers()[1], np.uint8).ctypes.data
    assert one.data.ctypes.data == address and np.array_equal(one[np.array([4, 0])], rows[[4, 0]])
    sliced = ThumbColumn(pa.chunked_array([array.slice(2, 3)]))
    assert sliced.data.ctypes.data == address + 2 * 5 and np.array_equal(sliced.data, rows[2:5])
    several = ThumbColumn(pa.chunked_array([array.slice(0, 2), array.slice(2, 4)]))
    assert np.array_equal(several.data, rows)
