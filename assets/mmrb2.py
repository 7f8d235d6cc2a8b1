"""MMRB2 assets: raw files → parsed annotation tables → image inventory."""


import hashlib
import json
from pathlib import Path

import dagster as dg
import pyarrow as pa

from pipeline.mmrb2.images import inventory_images
from pipeline.mmrb2.parse import parse_mmrb2
from pipeline.quarantine import quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.settings import TRANSFORM_VERSION
from pipeline.sources import fetch
from pipeline.sources.base import RawSnapshot, SourceError
from pipeline.staging import write_staged

GROUP = "mmrb2"


def _staging_key(snapshot: RawSnapshot, extra: dict | None = None) -> str:
    blob = json.dumps({"inputs": snapshot.checksums(), "code": TRANSFORM_VERSION, **(extra or {})}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _counts(tables: dict[str, pa.Table]) -> dict:
    return {f"rows_{name}": dg.MetadataValue.int(t.num_rows) for name, t in tables.items()}


@dg.asset(group_name=GROUP, kinds={"python", "file"}, code_version="1")
def mmrb2_raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[dict]:
    """The upstream MMRB2 files (image zip + annotation JSONs) from the configured source, checksummed."""
    try:
        snapshot = fetch(rewardhouse.settings(), rewardhouse.layout(), log=context.log.info)
    except SourceError as exc:
        raise dg.Failure(description=str(exc)) from None
    md = {f"sha256 {f.role}": f.sha256 for f in snapshot.files}
    md["source"] = snapshot.source
    md["root"] = dg.MetadataValue.path(snapshot.root)
    md["bytes"] = dg.MetadataValue.int(sum(f.size for f in snapshot.files))
    return dg.Output(snapshot.to_dict(), metadata=md)


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, code_version="1")
def mmrb2_annotations(rewardhouse: RewardhouseResource, mmrb2_raw: dict) -> dg.Output[dict]:
    """Pairs, response items and prompt items parsed from the annotation files; bad records quarantined."""
    snapshot = RawSnapshot.from_dict(mmrb2_raw)
    parsed = parse_mmrb2(snapshot.annotations(), snapshot.path("new_task_release"))
    tables = parsed.tables()
    tables["quarantine"] = quarantine_table(parsed.rejected)
    out = rewardhouse.layout().staging / "mmrb2_annotations" / _staging_key(snapshot)
    paths = write_staged(out, tables)
    return dg.Output(
        {"tables": paths, "response_images": sorted(parsed.response_images()), "prompt_images": sorted(parsed.prompt_images())},
        metadata={**_counts(tables), "staged": dg.MetadataValue.path(str(out))},
    )


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, code_version="1")
def mmrb2_images(rewardhouse: RewardhouseResource, mmrb2_raw: dict, mmrb2_annotations: dict) -> dg.Output[dict]:
    """Every image in the zip and every response image, read straight from the zip: sha256, size,
    dimensions, ok|corrupt|missing. Prompt images outside the zip are not faults (see parse.py)."""
    snapshot = RawSnapshot.from_dict(mmrb2_raw)
    settings = rewardhouse.settings()
    images, rejected = inventory_images(
        snapshot.image_zip,
        set(mmrb2_annotations["response_images"]),
        settings.zip_limits,
        optional=set(mmrb2_annotations["prompt_images"]),
    )
    tables = {"mmrb2_images": images, "quarantine": quarantine_table(rejected)}
    out = rewardhouse.layout().staging / "mmrb2_images" / _staging_key(snapshot, settings.fingerprint())
    paths = write_staged(out, tables)
    status = images.column("status").to_pylist()
    return dg.Output(
        {"tables": paths},
        metadata={
            **_counts(tables),
            **{f"images_{s}": dg.MetadataValue.int(status.count(s)) for s in ("ok", "corrupt", "missing")},
        },
    )
