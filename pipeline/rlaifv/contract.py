"""RLAIF-V's tables and their rules (see pipeline/contract.py for who reads them)."""

from __future__ import annotations

import pyarrow as pa

from pipeline.contract import (
    BOOL, INT, LIST, STRING, FileColumns, TableContract, between, in_set, json_text, not_null, null, regex, sha256,
    unique, where,
)
from pipeline.settings import LEAK_CLASSES, QualitySettings

IMAGE_STATUS = ("ok", "corrupt")

# An upstream shard's columns as the Hub's parquet holds them (HF `Image()` is a struct of bytes
# and path; every other column is a string, `idx` included). A pair needs its image, question and
# two responses; the rest is provenance. A shard whose types moved away from these is refused
# whole, before its rows are read.
SHARD = FileColumns(
    required={"image": pa.struct([("bytes", pa.binary()), ("path", pa.string())]), "question": pa.string(),
              "chosen": pa.string(), "rejected": pa.string()},
    optional={"ds_name": pa.string(), "origin_dataset": pa.string(), "origin_split": pa.string(),
              "idx": pa.string(), "image_path": pa.string()},
)


def contracts(q: QualitySettings) -> dict[str, TableContract]:
    pairs = TableContract("rlaifv_pairs", {
        "pair_id": STRING, "question": STRING, "chosen": STRING, "rejected": STRING, "responses_differ": BOOL,
        "image_key": STRING, "ds_name": STRING, "origin_dataset": STRING, "origin_split": STRING,
        "origin_model": STRING, "origin_feedback_model": STRING, "origin_type": STRING, "origin_meta": STRING,
        "idx": STRING, "image_path": STRING, "source_file": STRING, "row_in_file": INT,
        "dup_group": STRING, "exact_duplicate_of": STRING,
        # the training export's marks (pipeline/rlaifv/export.py), as the release publishes the table
        "image_cluster": STRING, "is_duplicate": BOOL, "duplicate_of": STRING, "is_contaminated": BOOL,
        "leak": STRING, "leaked_from": LIST, "in_export": BOOL, "excluded_reason": STRING,
    }, (
        *not_null("pair_id", "question", "chosen", "rejected", "responses_differ", "image_key", "source_file",
                  "row_in_file"),
        *unique("pair_id"),
        *regex("question", r"\S", notes="non-empty text"),
        *regex("chosen", r"\S", notes="non-empty text"),
        *regex("rejected", r"\S", notes="non-empty text"),
        # Two columns that must differ have no rule of their own: the parser derives the comparison
        # (as VL-RewardBench derives n_responses) and the rule holds it to true, at parse and at the gate.
        *in_set("responses_differ", (True,)),
        *regex("image_key", r"^sha256:[0-9a-f]{64}$", notes="sha256:<64 hex digits>"),
        *json_text("origin_meta"),
        *between("row_in_file", 0),
        *not_null("duplicate_of", when=where("is_duplicate", True)),
        *in_set("leak", LEAK_CLASSES),
        *not_null("leak", when=where("is_contaminated", True)),
        *null("excluded_reason", when=where("in_export", True)),
        *not_null("excluded_reason", when=where("in_export", False)),
    ), record_key="pair_id",
        description="one row per preference pair: a question over one image, the chosen and the rejected response")
    ok = where("status", "ok")
    images = TableContract("rlaifv_images", {
        "image_key": STRING, "sha256": STRING, "bytes": INT, "width": INT, "height": INT, "format": STRING, "status": STRING,
        "store_path": STRING,  # in the image store, for the export (images that decode)
    }, (
        *not_null("image_key", "sha256", "bytes", "status"),
        *unique("image_key"),
        *in_set("status", IMAGE_STATUS),
        *sha256("sha256"),
        *not_null("width", "height", when=ok),
        *between("width", 1, when=ok),
        *between("height", 1, when=ok),
        *between("bytes", 0),
    ), description="every image of the pairs, by content (image_key = sha256:<hex>)")
    return {c.name: c for c in (pairs, images)}
