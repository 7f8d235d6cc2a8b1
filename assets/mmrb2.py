"""MMRB2 assets: raw files → parsed annotation tables → image inventory."""


from typing import Optional

import dagster as dg

from pipeline.mmrb2.images import inventory_images
from pipeline.mmrb2.parse import parse_mmrb2
from pipeline.quarantine import quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.sources import fetch_mmrb2
from pipeline.staging import write_staged

from assets.common import fetch_output, plain_counts, preview, progress_logger, reuse_or_run, snapshot_of, staging_key

RAW, STAGED, IMAGES = "raw", "staged", "images"


@dg.asset(group_name=RAW, kinds={"python", "file"}, code_version="1", owners=["team:data"], tags={"dataset": "mmrb2"})
def mmrb2_raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[Optional[dict]]:
    """The upstream MMRB2 files (image zip + annotation JSONs) from the configured source, checksummed.
    None when a local folder holds no MMRB2 files at all."""
    return fetch_output(context, fetch_mmrb2, rewardhouse, "MMRB2")


@dg.asset(group_name=STAGED, kinds={"python", "parquet"}, code_version="1")
def mmrb2_annotations(
    context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, mmrb2_raw: Optional[dict]
) -> dg.Output[dict]:
    """Pairs, response items and prompt items parsed from the annotation files; bad records quarantined."""
    snapshot = snapshot_of(mmrb2_raw)
    out = rewardhouse.layout().staging / "mmrb2_annotations" / staging_key(snapshot)

    def compute():
        parsed = parse_mmrb2(snapshot.annotations(), snapshot.path("new_task_release")) if snapshot else parse_mmrb2({})
        tables = parsed.tables()
        tables["quarantine"] = quarantine_table(parsed.rejected)
        pairs = tables["mmrb2_pairs"]
        tasks = pairs.group_by("task").aggregate([("pair_id", "count")]).to_pylist() if pairs.num_rows else []
        value = {
            "present": snapshot is not None,
            "tables": write_staged(out, tables),
            "response_images": sorted(parsed.response_images()),
            "prompt_images": sorted(parsed.prompt_images()),
        }
        metadata = {
            **plain_counts(tables),
            "pairs_per_task": {t["task"]: t["pair_id_count"] for t in tasks},
            "preview": preview(pairs, columns=["pair_id", "task", "model_a", "model_b", "chosen"]),
        }
        return value, metadata

    return reuse_or_run(context, out, compute)


@dg.asset(group_name=IMAGES, kinds={"python", "parquet"}, code_version="1")
def mmrb2_images(
    context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, mmrb2_raw: Optional[dict], mmrb2_annotations: dict
) -> dg.Output[dict]:
    """Every image in the zip and every response image, read straight from the zip: sha256, size,
    dimensions, ok|corrupt|missing. Prompt images outside the zip are not faults (see parse.py)."""
    snapshot = snapshot_of(mmrb2_raw)
    settings = rewardhouse.settings()
    out = rewardhouse.layout().staging / "mmrb2_images" / staging_key(snapshot, settings.fingerprint())

    def compute():
        images, rejected = inventory_images(
            snapshot.image_zip if snapshot else None,
            set(mmrb2_annotations["response_images"]),
            settings.zip_limits,
            optional=set(mmrb2_annotations["prompt_images"]),
            progress=progress_logger(context, "mmrb2 images: read"),
        )
        tables = {"mmrb2_images": images, "quarantine": quarantine_table(rejected)}
        status = images.column("status").to_pylist()
        metadata = {
            **plain_counts(tables),
            **{f"images_{s}": status.count(s) for s in ("ok", "corrupt", "missing")},
            "preview": preview(images, columns=["image_name", "width", "height", "format", "status"]),
        }
        return {"tables": write_staged(out, tables)}, metadata

    return reuse_or_run(context, out, compute)
