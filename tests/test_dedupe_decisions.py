"""Dedupe decisions: clusters and contamination across datasets, the rollout rule for samples."""

import pyarrow as pa

from pipeline.dedupe.decisions import HASHES_SCHEMA, find_duplicates, mark_samples

H = 0x0F0F_0F0F_0F0F_0F0F


def flip(h: int, bits: int) -> int:
    """h with its lowest `bits` bits flipped, as a signed int64."""
    u = (h ^ ((1 << bits) - 1)) & (2**64 - 1)
    return u - 2**64 if u >= 2**63 else u


def hashes(rows):
    return pa.Table.from_pylist(
        [{"dataset": d, "image_key": k, "sha256": s, "phash": p, "dhash": 0, "width": w, "height": w, "bytes": 100}
         for d, k, s, p, w in rows],
        schema=HASHES_SCHEMA,
    )


def test_clusters_span_datasets_and_contamination_lists_train_eval_pairs():
    table = hashes([
        ("mmrb2", "eval.jpg", "e", flip(H, 0), 512),
        ("visualprm", "train/copy.jpg", "t1", flip(H, 3), 256),     # near-copy of the eval image
        ("visualprm", "train/exact.jpg", "t1", flip(H, 3), 256),    # byte-identical to copy.jpg
        ("visualprm", "train/other.jpg", "o", flip(~H, 0), 256),    # far from everything
    ])
    clusters, contamination = find_duplicates(table, max_distance=4)
    rows = {r["image_key"]: r for r in clusters.to_pylist()}
    assert set(rows) == {"eval.jpg", "train/copy.jpg", "train/exact.jpg"}
    assert len({r["cluster_id"] for r in rows.values()}) == 1
    assert rows["eval.jpg"]["is_canonical"] and rows["eval.jpg"]["kind"] is None  # largest image wins
    assert (rows["train/copy.jpg"]["kind"], rows["train/copy.jpg"]["distance_to_canonical"]) == ("near", 3)
    assert contamination.to_pylist() == [
        {"train_image_key": "train/copy.jpg", "eval_image_key": "eval.jpg", "distance": 3},
        {"train_image_key": "train/exact.jpg", "eval_image_key": "eval.jpg", "distance": 3},
    ]
    _, none = find_duplicates(table, max_distance=2)
    assert none.num_rows == 0


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
                         "is_canonical": [True, False], "distance_to_canonical": [0, 2], "kind": [None, "near"]})
    contamination = pa.table({"train_image_key": ["b.jpg"], "eval_image_key": ["e.jpg"], "distance": [1]})
    out = {r["sample_id"]: r for r in mark_samples(samples, steps, images, clusters, contamination).to_pylist()}
    assert [out[s]["is_duplicate"] for s in ("r0", "r1", "r2", "r3")] == [False, False, True, False]
    assert out["r2"]["duplicate_of"] == "r0" and out["r0"]["duplicate_of"] is None
    assert [out[s]["is_contaminated"] for s in ("r0", "r1", "r2", "r3")] == [False, False, False, True]
    assert out["r0"]["image_clusters"] == out["r2"]["image_clusters"] == ["c1"]
    assert out["r3"]["image_clusters"] == ["sha256:s3"]
