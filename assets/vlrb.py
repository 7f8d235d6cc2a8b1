"""VL-RewardBench assets: raw parquet → vlrb_pairs + vlrb_images (and their hashes for dedupe)."""

from typing import Optional

import dagster as dg

from pipeline.dedupe.decisions import hashes_table
from pipeline.quarantine import quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.sources.base import RawSnapshot
from pipeline.staging import Staged, write_staged
from pipeline.vlrb.parse import DATASET, parse_vlrb
from pipeline.vlrb.source import fetch_vlrb, shards

from assets.common import fetch_output, plain_counts, preview, reuse_or_run, snapshot_of, staging_key

TAGS = {"dataset": DATASET}


@dg.asset(group_name="raw", kinds={"python", "file"}, code_version="1", owners=["team:data"], tags=TAGS)
def vlrb_raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[Optional[RawSnapshot]]:
    """The VL-RewardBench parquet shard(s) from the configured source, checksummed. None when a
    local folder holds none."""
    return fetch_output(context, fetch_vlrb, rewardhouse, "VL-RewardBench")


@dg.asset(group_name="staged", kinds={"python", "parquet"}, code_version="2", tags=TAGS)
def vlrb_pairs(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource,
               vlrb_raw: Optional[RawSnapshot]) -> dg.Output[Staged]:
    """Preference pairs (`vlrb_pairs`) and their images (`vlrb_images`, decoded once, content
    keyed and hashed for dedupe), streamed from the shards; records breaking the contract
    (ranking a permutation of (0, 1), two non-empty responses, one image) quarantined at parse."""
    snapshot = snapshot_of(vlrb_raw)
    settings = rewardhouse.settings()
    out = rewardhouse.layout().staging / "vlrb_pairs" / staging_key(snapshot, settings.fingerprint(), context)

    def compute():
        root = snapshot.root if snapshot else None
        parsed = parse_vlrb(shards(snapshot), settings.zip_limits, settings.quality, root=root)
        tables = {**parsed.tables(), "quarantine": quarantine_table(parsed.rejected)}
        sizes = dict(zip(parsed.images["image_key"].to_pylist(), parsed.images["bytes"].to_pylist()))
        internal = {"image_hashes": hashes_table(DATASET, parsed.hashed, sizes)}
        status = parsed.images["status"].to_pylist()
        chosen = parsed.pairs["chosen"].to_pylist()
        metadata = {
            **plain_counts(tables),
            "images_ok": status.count("ok"), "images_corrupt": status.count("corrupt"),
            "chosen_a": chosen.count("A"), "chosen_b": chosen.count("B"),
            "preview": preview(parsed.pairs, columns=["pair_id", "query_source", "model_a", "model_b", "chosen"]),
        }
        value = Staged(tables=write_staged(out, tables), internal=write_staged(out / "internal", internal),
                       present=snapshot is not None)
        return value, metadata

    return reuse_or_run(context, out, compute)
