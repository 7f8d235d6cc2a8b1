"""Leaks per record (pipeline/decontam/records.py): image contamination brought to records, joined
with text leaks into text | image | full, the export's marks and counts. Hand-made tables, values
asserted; no Dagster."""

import pyarrow as pa
import pytest

from pipeline.decontam.records import (
    RECORD_CONTAMINATION_SCHEMA, dataset_records, eval_image_links, eval_overlap, excluded_reason, image_links,
    record_contamination, removed_by_leak, sample_leaks,
)

pytestmark = pytest.mark.fast

TEXT_LEAK = pa.schema([("train_dataset", pa.string()), ("train_key", pa.string()), ("eval_dataset", pa.string()),
                       ("eval_key", pa.string()), ("text_overlap", pa.float32()), ("longest_span", pa.int32()),
                       ("matched_text", pa.string()), ("exact", pa.bool_())])


def _contamination(rows):
    return pa.Table.from_pylist(
        [dict(zip(("train_dataset", "train_image_key", "eval_dataset", "eval_image_key", "distance", "kind", "score"), r))
         for r in rows],
        schema=pa.schema([("train_dataset", pa.string()), ("train_image_key", pa.string()), ("eval_dataset", pa.string()),
                          ("eval_image_key", pa.string()), ("distance", pa.int32()), ("kind", pa.string()),
                          ("score", pa.float32())]))


def _record_images(rows):
    return pa.Table.from_pylist([dict(zip(("dataset", "image_key", "record"), r)) for r in rows])


def _text(rows):
    return pa.Table.from_pylist([dict(zip(TEXT_LEAK.names, r)) for r in rows], schema=TEXT_LEAK)


def test_an_image_copy_becomes_a_leak_of_every_record_using_either_picture():
    contamination = _contamination([("train", "t/a.png", "ev", "e/1.png", 2, "near", 0.97),
                                    ("train", "t/b.png", "ev", "e/1.png", 0, "exact", 1.0)])
    images = _record_images([("train", "t/a.png", "s1"), ("train", "t/a.png", "s2"), ("train", "t/b.png", "s1"),
                             ("ev", "e/1.png", "P1"), ("ev", "e/9.png", "P9")])
    links = image_links(contamination, images).sort_by([("train_key", "ascending")]).to_pylist()
    # s1 uses both copies: the exact one names the pair; s2 only the near copy
    assert links == [
        {"train_dataset": "train", "train_key": "s1", "eval_dataset": "ev", "eval_key": "P1", "image_kind": "exact",
         "train_image_key": "t/b.png", "eval_image_key": "e/1.png"},
        {"train_dataset": "train", "train_key": "s2", "eval_dataset": "ev", "eval_key": "P1", "image_kind": "near",
         "train_image_key": "t/a.png", "eval_image_key": "e/1.png"},
    ]


def test_text_and_image_on_one_pair_of_records_is_a_full_leak_and_a_generic_prompt_stays_image():
    text = _text([("train", "s1", "ev", "P1", 0.9, 12, "as shown in the figure ab cd", False),
                  ("train", "s3", "ev", "P2", 1.0, 5, "what is the value of x", True)])
    images = pa.Table.from_pylist([
        {"train_dataset": "train", "train_key": "s1", "eval_dataset": "ev", "eval_key": "P1", "image_kind": "crop",
         "train_image_key": "t/a.png", "eval_image_key": "e/1.png"},
        {"train_dataset": "train", "train_key": "s2", "eval_dataset": "ev", "eval_key": "P1", "image_kind": "near",
         "train_image_key": "t/c.png", "eval_image_key": "e/1.png"}])
    out = record_contamination(text, images)
    assert out.schema == RECORD_CONTAMINATION_SCHEMA
    rows = {(r["train_key"], r["eval_key"]): r for r in out.to_pylist()}
    assert set(rows) == {("s1", "P1"), ("s2", "P1"), ("s3", "P2")}
    assert rows["s1", "P1"]["leak"] == "full" and rows["s1", "P1"]["image_kind"] == "crop"
    assert rows["s1", "P1"]["matched_text"] == "as shown in the figure ab cd" and rows["s1", "P1"]["longest_span"] == 12
    assert rows["s2", "P1"]["leak"] == "image" and rows["s2", "P1"]["text_overlap"] is None
    assert rows["s3", "P2"]["leak"] == "text" and rows["s3", "P2"]["image_kind"] is None


def test_records_and_their_texts_come_from_each_datasets_sql(tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"pair_id": ["A", "B", "C"], "query": ["one", None, "three"],
                             "image_key": ["a.png", "b.png", None]}), path)
    texts, images = dataset_records("ev", "select pair_id as record, query as text from pairs",
                                    "select image_key, pair_id as record from pairs", {"pairs": str(path), "x": "notes.json"})
    assert texts.to_pylist() == [{"dataset": "ev", "key": "A", "text": "one"}, {"dataset": "ev", "key": "C", "text": "three"}]
    assert sorted(images.to_pylist(), key=lambda r: r["record"]) == [
        {"dataset": "ev", "image_key": "a.png", "record": "A"}, {"dataset": "ev", "image_key": "b.png", "record": "B"}]
    none, _ = dataset_records("ev", None, None, {"pairs": str(path)})
    assert none.num_rows == 0 and none.schema.names == ["dataset", "key", "text"]


def test_the_export_marks_the_strongest_leak_and_removes_only_classes_not_kept():
    leaks = record_contamination(
        _text([("train", "s1", "ev", "P1", 0.9, 9, "x", False), ("train", "s2", "ev", "P2", 1.0, 4, "y", True)]),
        pa.Table.from_pylist([{"train_dataset": "train", "train_key": "s1", "eval_dataset": "ev", "eval_key": "P1",
                               "image_kind": "near", "train_image_key": "a", "eval_image_key": "b"},
                              {"train_dataset": "train", "train_key": "s1", "eval_dataset": "ev2", "eval_key": "Q",
                               "image_kind": "exact", "train_image_key": "a", "eval_image_key": "c"}]))
    samples = pa.table({"sample_id": ["s0", "s1", "s2"]})
    marks = sample_leaks(samples, "sample_id", leaks, "train", keep=("text",))
    assert marks["leak"].to_pylist() == [None, "full", "text"]
    assert marks["leaked_from"].to_pylist() == [None, ["ev2:Q", "ev:P1"], ["ev:P2"]]
    assert marks["leak_removed"].to_pylist() == [False, True, False]  # s2's only leak is text, which is kept
    per_eval, per_class = removed_by_leak(leaks, "train", ("text",), ("ev", "ev2"))
    assert per_eval == {"ev": 1, "ev2": 1}
    assert per_class == {"text": {"ev": 0, "ev2": 0}, "image": {"ev": 0, "ev2": 1}, "full": {"ev": 1, "ev2": 0}}
    everything = removed_by_leak(leaks, "train", (), ("ev", "ev2"))
    assert everything[0] == {"ev": 2, "ev2": 1} and everything[1]["text"] == {"ev": 1, "ev2": 0}


def test_why_a_record_is_out_of_the_export_names_every_reason():
    records = pa.table({"leak": ["full", None, None, "text"], "leaked_from": [["ev:P1"], None, None, ["ev:P2", "ev:P3"]],
                        "duplicate_of": [None, "s0", None, "s1"]})
    reason = excluded_reason(records, pa.array([False, True, False, True]), pa.array([True, False, False, True]),
                             pa.array([False, False, False, True]))
    assert reason.to_pylist() == ["full leak of ev:P1", "duplicate of s0", None,
                                  "text leak of ev:P2, ev:P3; duplicate of s1; image unavailable"]


def test_the_same_item_in_two_eval_sets_is_reported_by_picture_and_text():
    clusters = pa.Table.from_pylist([
        {"cluster_id": "c1", "dataset": "ev", "image_key": "e/1.png", "is_canonical": True, "kind": None, "score": None},
        {"cluster_id": "c1", "dataset": "ev2", "image_key": "f/1.png", "is_canonical": False, "kind": "near", "score": 0.98},
        {"cluster_id": "c1", "dataset": "train", "image_key": "t/1.png", "is_canonical": False, "kind": "exact", "score": 1.0},
    ])
    images = _record_images([("ev", "e/1.png", "P1"), ("ev2", "f/1.png", "Q1"), ("train", "t/1.png", "s1")])
    links = eval_image_links(clusters, images, ("ev", "ev2"))
    assert links.to_pylist() == [{"dataset_a": "ev", "key_a": "P1", "dataset_b": "ev2", "key_b": "Q1", "image_kind": "near"}]
    text = _text([("ev", "P1", "ev2", "Q1", 0.8, 10, "same words", False), ("ev", "P5", "ev2", "Q7", 1.0, 3, "abc", True)])
    out = {(r["key_a"], r["key_b"]): r["leak"] for r in eval_overlap(text, links).to_pylist()}
    assert out == {("P1", "Q1"): "full", ("P5", "Q7"): "text"}
