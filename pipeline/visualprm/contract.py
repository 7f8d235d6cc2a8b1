"""VisualPRM400K's tables and their rules (see pipeline/contract.py for who reads them)."""

from __future__ import annotations

import pyarrow as pa

from pipeline.contract import (
    BOOL, FLOAT, INT, LIST, STRING, FileColumns, TableContract, between, greater, in_set, json_text, not_null, null,
    sha256, unique, where,
)
from pipeline.settings import LEAK_CLASSES, QualitySettings

MESSAGE_FORMATS = ("internvl", "chat", "raw")
IMAGE_STATUS = ("ok", "corrupt", "unresolved")

# A mm-eval/VisualPRM400K parquet shard's columns: `messages` is JSON text upstream; the same
# conversation (or raw object) already stored as structs is read back as JSON text, unchanged.
# `media` (absent in some forms) is a list of HF images. Any other type is drift: the shard is
# refused whole rather than its ids cast to text or every row refused.
SHARD = FileColumns(
    required={"id": pa.string(), "messages": (pa.string(), pa.list_(pa.struct([])), pa.struct([]))},
    optional={"media": pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))},
)


def contracts(q: QualitySettings) -> dict[str, TableContract]:
    top = q.max_steps
    samples = TableContract("prm_samples", {
        "sample_id": STRING, "source": STRING, "question": STRING, "image_refs": LIST, "n_steps": INT,
        "n_positive": INT, "n_negative": INT, "first_negative_step": INT, "message_format": STRING,
        "answer": STRING, "row_index": INT, "image_clusters": LIST, "is_duplicate": BOOL,
        "duplicate_of": STRING, "is_contaminated": BOOL, "in_export": BOOL, "leak": STRING, "leaked_from": LIST,
        "excluded_reason": STRING,
    }, (
        *not_null("sample_id", "n_steps", "n_positive", "n_negative", "message_format", "row_index",
                  "is_duplicate", "is_contaminated", "in_export"),
        *unique("sample_id"),
        *between("n_steps", 1, top),
        *between("n_positive", 0),
        *between("n_negative", 0),
        *between("first_negative_step", 0, top - 1),
        *between("row_index", 0),
        *in_set("message_format", MESSAGE_FORMATS),
        *not_null("duplicate_of", when=where("is_duplicate", True)),
        *in_set("leak", LEAK_CLASSES),
        *not_null("leak", when=where("is_contaminated", True)),
        *null("excluded_reason", when=where("in_export", True)),
        *not_null("excluded_reason", when=where("in_export", False)),
        *greater("n_steps", "first_negative_step"),
    ), record_key="sample_id", description="one row per rollout (question, image refs, step counts, dedupe marks)")
    steps = TableContract("prm_steps", {
        "sample_id": STRING, "step_index": INT, "text": STRING, "label": STRING, "mc_score": FLOAT,
        "num_mc_correct": INT, "num_mc_total": INT,
    }, (
        *not_null("sample_id", "step_index", "label", "text"),
        *unique("sample_id", "step_index"),
        *between("step_index", 0, top - 1),
        *in_set("label", ("+", "-")),
        *between("mc_score", 0, 1),
        *between("num_mc_correct", 0),
        *between("num_mc_total", 0),
    ), record_key="sample_id", description="one row per solution step with its +/- label", distribution=("label",))
    ok = where("status", "ok")
    images = TableContract("prm_images", {
        "image_key": STRING, "origin": STRING, "sha256": STRING, "bytes": INT, "width": INT, "height": INT,
        "format": STRING, "status": STRING, "store_path": STRING, "problem": STRING, "located_at": STRING,
    }, (
        *not_null("image_key", "origin", "status"),
        *unique("image_key"),
        *in_set("origin", ("embedded", "path")),
        *in_set("status", IMAGE_STATUS),
        *null("located_at", when=where("origin", "embedded")),
        *sha256("sha256"),
        *not_null("sha256", "bytes", when=where("status", "ok", "corrupt")),
        *not_null("width", "height", when=ok),
        *between("width", 1, when=ok),
        *between("height", 1, when=ok),
        *between("bytes", 0),
    ), description="every referenced image: where it came from, checksum, size, status")
    share = ("positive_rate", "first_negative_last_share", "first_negative_last_share_of_negative")
    stats = TableContract("prm_label_stats", {
        "scope": STRING, "source": STRING, "samples": INT, "steps": INT, "positive_rate": FLOAT,
        "steps_min": INT, "steps_p25": INT, "steps_median": INT, "steps_p75": INT, "steps_max": INT,
        "steps_mean": FLOAT, "steps_histogram": STRING, "samples_with_negative": INT,
        "first_negative_last_share": FLOAT, "first_negative_last_share_of_negative": FLOAT,
    }, (
        *not_null("scope", "source", "samples", "steps", "positive_rate"),
        *unique("source"),
        *in_set("scope", ("source", "overall")),
        *[r for c in share for r in between(c, 0, 1)],
        *between("samples", 1),
        *between("steps", 0),
        *between("samples_with_negative", 0),
        *between("steps_min", 1, top),
        *between("steps_max", 1, top),
        *json_text("steps_histogram"),
    ), description="label and steps-per-sample distribution per source and overall")
    return {c.name: c for c in (samples, steps, images, stats)}
