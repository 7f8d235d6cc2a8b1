"""RLAIF-V assets: raw parquet shards → rlaifv_pairs + rlaifv_images (and their hashes for dedupe)
→ the training export (duplicates and leaks left out; InternVL's preference JSONL and TRL's
preference Parquet)."""

import time
from typing import Optional

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import datasets
from pipeline.decontam.records import excluded_reason, removed_by_leak, sample_leaks
from pipeline.dedupe.decisions import hashes_table
from pipeline.imaging import ImageStore
from pipeline.quarantine import quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.rlaifv.export import DATASET, build_export, mark_pairs
from pipeline.rlaifv.parse import parse_rlaifv
from pipeline.rlaifv.source import fetch_rlaifv, shards
from pipeline.sources.base import RawSnapshot
from pipeline.staging import Export, Staged, read_staged, write_staged
from pipeline.stopping import stop_point

from assets.common import export_metadata, fetch_output, plain_counts, preview, reuse_or_run, snapshot_of, staging_key

TAGS = {"dataset": DATASET}


@dg.asset(group_name="raw", kinds={"python", "file"}, code_version="1", owners=["team:data"], tags=TAGS)
def rlaifv_raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[Optional[RawSnapshot]]:
    """The RLAIF-V parquet shards from the configured source (on `hf`, `hf_shards` may take only
    the first few), checksummed. None when a local folder holds none."""
    return fetch_output(context, fetch_rlaifv, rewardhouse, "RLAIF-V")


@dg.asset(group_name="staged", kinds={"python", "parquet"}, code_version="1", tags=TAGS)
def rlaifv_pairs(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource,
                 rlaifv_raw: Optional[RawSnapshot]) -> dg.Output[Staged]:
    """Preference pairs (`rlaifv_pairs`) and their images (`rlaifv_images`: decoded once, content
    keyed, hashed for dedupe, kept in the image store for the export), streamed from the shards a
    batch at a time; pairs breaking the contract (non-empty texts, chosen unlike rejected, one
    image, a unique idx) quarantined at parse; pairs over the same image and question marked."""
    snapshot = snapshot_of(rlaifv_raw)
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    out = layout.staging / "rlaifv_pairs" / staging_key(snapshot, settings.fingerprint(), context)

    def compute():
        root = snapshot.root if snapshot else None
        parsed = parse_rlaifv(shards(snapshot), settings.zip_limits, settings.quality, root=root,
                              store=ImageStore(layout.image_store), progress=_progress(context))
        # rlaifv_pairs is published by rlaifv_export, with its marks: here it is handed on internally
        tables = {"rlaifv_images": parsed.images, "quarantine": quarantine_table(parsed.rejected)}
        sizes = dict(zip(parsed.images["image_key"].to_pylist(), parsed.images["bytes"].to_pylist()))
        internal = {"rlaifv_pairs": parsed.pairs, "image_hashes": hashes_table(DATASET, parsed.hashed, sizes)}
        status = parsed.images["status"].to_pylist()
        metadata = {
            **plain_counts({**tables, "rlaifv_pairs": parsed.pairs}),
            "images_ok": status.count("ok"), "images_corrupt": status.count("corrupt"),
            "same_image_and_question": int(pc.sum(pc.is_valid(parsed.pairs["dup_group"])).as_py() or 0),
            "preview": preview(parsed.pairs, columns=["pair_id", "ds_name", "origin_dataset", "question"]),
        }
        value = Staged(tables=write_staged(out, tables), internal=write_staged(out / "internal", internal),
                       present=snapshot is not None)
        return value, metadata

    return reuse_or_run(context, out, compute)


def _progress(context, every: float = 5.0):
    """Rows read so far, logged at most every `every` seconds (a stop asked for ends the step there:
    the parser reports after each batch)."""
    start = last = time.monotonic()

    def report(done: int) -> None:
        nonlocal last
        stop_point()
        now = time.monotonic()
        if now - last >= every:
            last = now
            context.log.info(f"RLAIF-V: {done} rows read ({done / (now - start):.0f} rows/s)")

    return report


@dg.asset(group_name="dedupe", kinds={"python", "file"}, code_version="1", tags=TAGS)
def rlaifv_export(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, rlaifv_pairs: Staged,
                  image_dedupe: Staged, record_contamination: Staged) -> dg.Output[Export]:
    """rlaifv_pairs with their marks (`is_duplicate`: the same picture, or one of its near-duplicate
    cluster, and the same question as an earlier pair; `leak`: the pair copies an eval record by
    its question, its picture or both) and why a pair is out of the export; the training files
    `rlaifv_train.jsonl` (InternVL's preference layout) and `rlaifv_train_trl.parquet` (TRL's
    preference type). Duplicates and every leak class are left out unless a setting keeps them."""
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    kept = settings.kept_leaks
    key = staging_key(None, {"p": rlaifv_pairs.internal, "i": rlaifv_pairs.tables, "d": image_dedupe.tables, "l": record_contamination.tables,
                             "keep": [settings.export_keep_duplicates, sorted(kept)]}, context)
    out = layout.staging / "rlaifv_export" / key

    def compute():
        staged = read_staged({**rlaifv_pairs.internal, **rlaifv_pairs.tables, "duplicate_clusters": image_dedupe.tables["duplicate_clusters"],
                              "record_contamination": record_contamination.tables["record_contamination"]})
        leaks = staged["record_contamination"]
        pairs = mark_pairs(staged["rlaifv_pairs"], staged["duplicate_clusters"])
        marks = sample_leaks(pairs, "pair_id", leaks, DATASET, kept)
        pairs = pairs.append_column("is_contaminated", pc.is_valid(marks["leak"]))
        pairs = pairs.append_column("leak", marks["leak"]).append_column("leaked_from", marks["leaked_from"])
        drop_duplicate = pc.and_(pairs["is_duplicate"], pa.scalar(not settings.export_keep_duplicates))
        drop_contaminated = marks["leak_removed"]
        keep = pc.invert(pc.or_(drop_duplicate, drop_contaminated))
        removed = {
            "duplicate": pc.sum(drop_duplicate).as_py() or 0,
            "contaminated": pc.sum(drop_contaminated).as_py() or 0,
            "dedupe_total": pairs.num_rows - (pc.sum(keep).as_py() or 0),
        }
        removed["contaminated_by"], removed["leaks"] = removed_by_leak(leaks, DATASET, kept, datasets.eval_sets())
        result = build_export(pairs.filter(keep), staged["rlaifv_images"], out / "exports", layout.image_store)
        removed["image_unavailable"] = len(result.excluded)
        unavailable = pc.is_in(pairs["pair_id"], value_set=pa.array([r.record_key for r in result.excluded], pa.string()))
        pairs = pairs.append_column("in_export", pc.and_(keep, pc.invert(unavailable)))
        pairs = pairs.append_column("excluded_reason", excluded_reason(pairs, drop_duplicate, drop_contaminated, unavailable))
        value = Export(
            tables=write_staged(out, {"rlaifv_pairs": pairs, "quarantine": quarantine_table(result.excluded)}),
            exports={f"exports/{p.name}": str(p) for p in (result.jsonl, result.trl)},
            images={rel: str(layout.image_store / src) for rel, src in result.image_files.items()},
            rows=result.rows, removed=removed, dataset=DATASET,
        )
        metadata = {**export_metadata(result.rows, len(result.image_files), removed),
                    "preview": preview(pairs, columns=["pair_id", "ds_name", "is_duplicate", "leak", "in_export",
                                                       "excluded_reason"])}
        return value, metadata

    return reuse_or_run(context, out, compute)
