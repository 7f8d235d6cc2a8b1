"""The fixture eval set's Dagster assets: raw shards -> toyeval_pairs + toyeval_images (+ hashes)."""

from typing import Optional

import dagster as dg

from assets.common import fetch_output, plain_counts, reuse_or_run, snapshot_of, staging_key
from pipeline.dedupe.decisions import hashes_table
from pipeline.quarantine import quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.sources.base import RawSnapshot
from pipeline.staging import Staged, write_staged
from tests.fixture_datasets.toyeval.data import fetch, parse, shards
from tests.fixture_datasets.toyeval.spec import NAME

TAGS = {"dataset": NAME}


@dg.asset(name=f"{NAME}_raw", group_name="raw", kinds={"python", "file"}, code_version="1", tags=TAGS)
def raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[Optional[RawSnapshot]]:
    """The fixture eval set's shards, checksummed."""
    return fetch_output(context, fetch, rewardhouse, "Toy eval")


@dg.asset(name=f"{NAME}_pairs", group_name="staged", kinds={"python", "parquet"}, code_version="1", tags=TAGS,
          ins={"raw": dg.AssetIn(f"{NAME}_raw")})
def pairs(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, raw: Optional[RawSnapshot]) -> dg.Output[Staged]:
    """Its pairs and pictures, the record contract enforced; the pictures hashed for dedupe."""
    snapshot = snapshot_of(raw)
    settings = rewardhouse.settings()
    out = rewardhouse.layout().staging / f"{NAME}_pairs" / staging_key(snapshot, settings.fingerprint(), context)

    def compute():
        parsed = parse(shards(snapshot), settings.zip_limits, settings.quality, root=snapshot.root if snapshot else None)
        tables = {f"{NAME}_pairs": parsed.records, f"{NAME}_images": parsed.images,
                  "quarantine": quarantine_table(parsed.rejected)}
        sizes = dict(zip(parsed.images["image_key"].to_pylist(), parsed.images["bytes"].to_pylist()))
        value = Staged(tables=write_staged(out, tables),
                       internal=write_staged(out / "internal", {"image_hashes": hashes_table(NAME, parsed.hashed, sizes)}),
                       present=snapshot is not None)
        return value, plain_counts(tables)

    return reuse_or_run(context, out, compute)
