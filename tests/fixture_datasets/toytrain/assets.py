"""The fixture train set's Dagster assets: raw shards -> toytrain_pairs + toytrain_images (+
hashes) -> its training export (leaks left out)."""

from typing import Optional

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from assets.common import export_metadata, fetch_output, plain_counts, reuse_or_run, snapshot_of, staging_key
from pipeline import datasets
from pipeline.decontam.records import excluded_reason, removed_by_leak, sample_leaks
from pipeline.dedupe.decisions import hashes_table
from pipeline.imaging import ImageStore
from pipeline.quarantine import quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.sources.base import RawSnapshot
from pipeline.staging import Export, Staged, read_staged, write_staged
from tests.fixture_datasets.toytrain.data import fetch, parse, shards, write_export
from tests.fixture_datasets.toytrain.spec import NAME

TAGS = {"dataset": NAME}


@dg.asset(name=f"{NAME}_raw", group_name="raw", kinds={"python", "file"}, code_version="1", tags=TAGS)
def raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[Optional[RawSnapshot]]:
    """The fixture train set's shards, checksummed."""
    return fetch_output(context, fetch, rewardhouse, "Toy train")


@dg.asset(name=f"{NAME}_pairs", group_name="staged", kinds={"python", "parquet"}, code_version="1", tags=TAGS,
          ins={"raw": dg.AssetIn(f"{NAME}_raw")})
def pairs(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, raw: Optional[RawSnapshot]) -> dg.Output[Staged]:
    """Its pairs (handed on internally: the export publishes them with its marks) and pictures
    (kept in the image store for the export, hashed for dedupe)."""
    snapshot = snapshot_of(raw)
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    out = layout.staging / f"{NAME}_pairs" / staging_key(snapshot, settings.fingerprint(), context)

    def compute():
        parsed = parse(shards(snapshot), settings.zip_limits, settings.quality,
                       root=snapshot.root if snapshot else None, store=ImageStore(layout.image_store))
        tables = {f"{NAME}_images": parsed.images, "quarantine": quarantine_table(parsed.rejected)}
        sizes = dict(zip(parsed.images["image_key"].to_pylist(), parsed.images["bytes"].to_pylist()))
        internal = {f"{NAME}_pairs": parsed.records, "image_hashes": hashes_table(NAME, parsed.hashed, sizes)}
        value = Staged(tables=write_staged(out, tables), internal=write_staged(out / "internal", internal),
                       present=snapshot is not None)
        return value, plain_counts({**tables, f"{NAME}_pairs": parsed.records})

    return reuse_or_run(context, out, compute)


@dg.asset(name=f"{NAME}_export", group_name="dedupe", kinds={"python", "file"}, code_version="1", tags=TAGS,
          ins={"pairs": dg.AssetIn(f"{NAME}_pairs"), "image_dedupe": dg.AssetIn("image_dedupe"),
               "record_contamination": dg.AssetIn("record_contamination")})
def export(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, pairs: Staged, image_dedupe: Staged,
           record_contamination: Staged) -> dg.Output[Export]:
    """The pairs with their leak marks, and TRL's preference Parquet of those that copy no eval record."""
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    kept = settings.kept_leaks
    key = staging_key(None, {"p": pairs.internal, "i": pairs.tables, "l": record_contamination.tables,
                             "keep": sorted(kept)}, context)
    out = layout.staging / f"{NAME}_export" / key

    def compute():
        staged = read_staged({**pairs.internal, **pairs.tables,
                              "record_contamination": record_contamination.tables["record_contamination"]})
        leaks, table = staged["record_contamination"], staged[f"{NAME}_pairs"]
        marks = sample_leaks(table, "pair_id", leaks, NAME, kept)
        table = table.append_column("is_contaminated", pc.is_valid(marks["leak"]))
        table = table.append_column("leak", marks["leak"]).append_column("leaked_from", marks["leaked_from"])
        drop = marks["leak_removed"]
        path, rows = write_export(table.filter(pc.invert(drop)), staged[f"{NAME}_images"], out / "exports",
                                  layout.image_store)
        no_image = pc.invert(pc.is_in(table["image_key"], value_set=staged[f"{NAME}_images"].filter(
            pc.is_valid(staged[f"{NAME}_images"]["store_path"]))["image_key"]))
        no_duplicates = pa.array([False] * table.num_rows)
        reason = excluded_reason(table.append_column("duplicate_of", pa.nulls(table.num_rows, pa.string())),
                                 no_duplicates, drop, no_image)
        table = table.append_column("in_export", pc.invert(pc.or_(drop, no_image)))
        table = table.append_column("excluded_reason", reason)
        removed = {"contaminated": pc.sum(drop).as_py() or 0, "image_unavailable": pc.sum(no_image).as_py() or 0}
        removed["contaminated_by"], removed["leaks"] = removed_by_leak(leaks, NAME, kept, datasets.eval_sets())
        value = Export(tables=write_staged(out, {f"{NAME}_pairs": table}), exports={f"exports/{path.name}": str(path)},
                       rows=rows, removed=removed, dataset=NAME)
        return value, export_metadata(rows, 0, removed)

    return reuse_or_run(context, out, compute)
