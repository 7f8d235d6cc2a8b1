"""Contracts of the tables every dataset shares: image hashes, dedupe decisions, quarantine.
Their value sets (dataset names, eval and train sets, quarantine stages) are the registry's, handed
in by its `table_contracts`: generic code does not read the registry. Until pipeline/datasets.py
passes them, `contracts` reads them itself, the one import circle left (registry <-> here)."""

from __future__ import annotations

from typing import Sequence

from pipeline.contract import (
    BOOL, FLOAT, INT, INT64, STRING, TableContract, between, in_set, not_null, null, sha256, unique, where,
)
from pipeline.dedupe.engine import OVERRIDE_KIND, ROUTES
from pipeline.review.overrides import DECISIONS
from pipeline.dedupe.verify import KINDS

DEDUPE_KINDS = (*KINDS, OVERRIDE_KIND)  # override: a pair a reviewer joined (pipeline/review/overrides.py)
from pipeline.settings import LEAK_CLASSES, QualitySettings

HASH_BITS = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def contracts(q: QualitySettings, names: Sequence[str], eval_sets: Sequence[str], train_sets: Sequence[str],
              stages: Sequence[str]) -> dict[str, TableContract]:
    """The shared tables' contracts for the datasets `names`, of which `eval_sets` and `train_sets`,
    refusing with the quarantine `stages` (the registry hands them in: pipeline/datasets.py)."""
    hashes = TableContract("image_hashes", {
        "dataset": STRING, "image_key": STRING, "sha256": STRING, "phash": INT64, "dhash": INT64,
        "width": INT, "height": INT, "bytes": INT,
    }, (
        *not_null("dataset", "image_key", "sha256", "phash", "dhash", "width", "height"),
        *unique("dataset", "image_key"),
        *in_set("dataset", names),
        *between("phash", INT64_MIN, INT64_MAX),
        *between("dhash", INT64_MIN, INT64_MAX),
        *sha256("sha256"),
        *between("width", 1),
        *between("height", 1),
        *between("bytes", 0),
    ), description="pHash and dHash of every decodable image of every dataset")
    canonical, member = where("is_canonical", True), where("is_canonical", False)
    clusters = TableContract("duplicate_clusters", {
        "cluster_id": STRING, "dataset": STRING, "image_key": STRING, "is_canonical": BOOL,
        "distance_to_canonical": INT, "kind": STRING, "score": FLOAT,
    }, (
        *not_null("cluster_id", "dataset", "image_key", "is_canonical", "distance_to_canonical"),
        *unique("dataset", "image_key"),
        *in_set("dataset", names),
        *in_set("kind", DEDUPE_KINDS),
        *between("distance_to_canonical", 0, HASH_BITS),
        *null("kind", when=canonical),
        *not_null("kind", when=member),
        *null("score", when=canonical),
        *not_null("score", when=member),
        *between("score", -1.0, 1.0),
    ), description="clusters of duplicate images across datasets")
    contamination = TableContract("contamination", {
        "train_dataset": STRING, "train_image_key": STRING, "eval_dataset": STRING, "eval_image_key": STRING,
        "distance": INT, "kind": STRING, "score": FLOAT,
    }, (
        *not_null("train_dataset", "train_image_key", "eval_dataset", "eval_image_key", "distance", "kind", "score"),
        *unique("train_dataset", "train_image_key", "eval_dataset", "eval_image_key"),
        *in_set("train_dataset", train_sets),
        *in_set("eval_dataset", eval_sets),
        *between("distance", 0, HASH_BITS),
        *in_set("kind", DEDUPE_KINDS),
        *between("score", -1.0, 1.0),
    ), description="train images that are copies of an eval image, per eval set")
    near_misses = TableContract("dedupe_near_misses", {
        "dataset_a": STRING, "image_key_a": STRING, "dataset_b": STRING, "image_key_b": STRING,
        "route": STRING, "route_distance": INT, "score": FLOAT,
    }, (
        *not_null("dataset_a", "image_key_a", "dataset_b", "image_key_b", "route", "route_distance", "score"),
        *in_set("dataset_a", names),
        *in_set("dataset_b", names),
        *in_set("route", ROUTES),
        *between("route_distance", 0, HASH_BITS),
        *between("score", -1.0, 1.0),
    ), description="candidate pairs verification refused, best scores first (at most 1,000): where the line was drawn")
    overrides = TableContract("dedupe_overrides", {
        "number": INT, "decision": STRING, "images": STRING, "reason": STRING, "by": STRING, "at": STRING,
        "applied": BOOL, "effect": STRING,
    }, (
        *not_null("number", "decision", "images", "applied", "effect"),
        *unique("number"),
        *in_set("decision", DECISIONS),
        *between("number", 1),
    ), description="reviewers' overrides of dedupe decisions and what each did to this release")
    quarantine = TableContract("quarantine", {
        "dataset": STRING, "stage": STRING, "record_key": STRING, "reason": STRING,
    }, (
        *not_null("dataset", "stage", "record_key", "reason"),
        *in_set("dataset", names),
        *in_set("stage", stages),
    ), description="every refused record, image or file, with its stage and reason")
    text_leak, image_leak = where("leak", "text"), where("leak", "image")
    records = TableContract("record_contamination", {
        "train_dataset": STRING, "train_key": STRING, "eval_dataset": STRING, "eval_key": STRING, "leak": STRING,
        "text_overlap": FLOAT, "matched_text": STRING, "image_kind": STRING, "longest_span": INT,
        "train_image_key": STRING, "eval_image_key": STRING,
    }, (
        *not_null("train_dataset", "train_key", "eval_dataset", "eval_key", "leak"),
        *unique("train_dataset", "train_key", "eval_dataset", "eval_key"),
        *in_set("train_dataset", train_sets),
        *in_set("eval_dataset", eval_sets),
        *in_set("leak", LEAK_CLASSES),
        *in_set("image_kind", DEDUPE_KINDS),
        *between("text_overlap", 0.0, 1.0),
        *between("longest_span", 1),
        *[r for c in ("image_kind", "train_image_key", "eval_image_key") for r in null(c, when=text_leak)],
        *not_null("image_kind", "train_image_key", "eval_image_key", when=where("leak", "image", "full")),
        *[r for c in ("text_overlap", "matched_text", "longest_span") for r in null(c, when=image_leak)],
        *not_null("text_overlap", "matched_text", "longest_span", when=where("leak", "text", "full")),
    ), description="train records that copy an eval record: by text, by image or both (full), one row per pair")
    overlap = TableContract("eval_overlap", {
        "dataset_a": STRING, "key_a": STRING, "dataset_b": STRING, "key_b": STRING, "leak": STRING,
        "text_overlap": FLOAT, "matched_text": STRING, "image_kind": STRING,
    }, (
        *not_null("dataset_a", "key_a", "dataset_b", "key_b", "leak"),
        *unique("dataset_a", "key_a", "dataset_b", "key_b"),
        *in_set("dataset_a", eval_sets),
        *in_set("dataset_b", eval_sets),
        *in_set("leak", LEAK_CLASSES),
        *between("text_overlap", 0.0, 1.0),
    ), description="the same item in two eval sets (by text, image or both): reported, never removed")
    leak_overrides = TableContract("leak_overrides", dict(overrides.columns), (
        *not_null("number", "decision", "images", "applied", "effect"),
        *unique("number"),
        *in_set("decision", DECISIONS),
        *between("number", 1),
    ), description="reviewers' text not-leak decisions and what each did to record_contamination")
    return {c.name: c for c in (hashes, clusters, contamination, near_misses, overrides, quarantine, records, overlap,
                                leak_overrides)}
