"""VL-RewardBench's tables and their rules (see pipeline/contract.py for who reads them)."""

from __future__ import annotations

import pyarrow as pa

from pipeline.contract import (
    INT, STRING, FileColumns, TableContract, between, in_set, json_schema, not_null, regex, sha256, unique, where,
)
from pipeline.settings import QualitySettings

IMAGE_STATUS = ("ok", "corrupt")

# An upstream shard's columns as the Hub's parquet holds them (HF `Image()` is a struct of bytes
# and path). A shard whose types moved away from these is refused whole, before its rows are read.
SHARD = FileColumns(
    required={"id": pa.string(), "query": pa.string(), "response": pa.list_(pa.string()),
              "image": pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
              "human_ranking": pa.list_(pa.int64())},
    optional={"models": pa.list_(pa.string()), "judge": pa.string(), "rationale": pa.string(),
              "query_source": pa.string(), "ground_truth": pa.string()},
)


def contracts(q: QualitySettings) -> dict[str, TableContract]:
    pairs = TableContract("vlrb_pairs", {
        "pair_id": STRING, "query": STRING, "response_a": STRING, "response_b": STRING, "chosen": STRING,
        "model_a": STRING, "model_b": STRING, "judge": STRING, "rationale": STRING, "query_source": STRING,
        "ground_truth": STRING, "image_key": STRING, "human_ranking": STRING, "n_responses": INT,
    }, (
        *not_null("pair_id", "query", "human_ranking", "n_responses"),
        *unique("pair_id"),
        *between("n_responses", 2, 2),
        # human_ranking holds the ranks of the two responses (0 = preferred): a permutation of (0, 1).
        *json_schema("human_ranking", {"enum": [[0, 1], [1, 0]]}, notes="a permutation of (0, 1)"),
        *not_null("response_a", "response_b", "chosen", "image_key"),
        *regex("response_a", r"\S", notes="non-empty text"),
        *regex("response_b", r"\S", notes="non-empty text"),
        *in_set("chosen", ("A", "B")),
        *regex("image_key", r"^sha256:[0-9a-f]{64}$", notes="sha256:<64 hex digits>"),
    ), record_key="pair_id", description="one row per preference pair: the query, two responses, the human choice")
    ok = where("status", "ok")
    images = TableContract("vlrb_images", {
        "image_key": STRING, "sha256": STRING, "bytes": INT, "width": INT, "height": INT, "format": STRING, "status": STRING,
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
