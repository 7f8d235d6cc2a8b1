"""VisualPRM400K assets: raw files → parsed samples/steps + label stats → images → training export."""

from typing import Optional

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.quarantine import quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.sources import fetch_visualprm
from pipeline.sources.base import SourceError
from pipeline.sources.visualprm import prm_image_root, prm_image_zips, prm_jsonl_files, prm_parquet_files
from pipeline.staging import read_staged, write_staged
from pipeline.visualprm.export import build_export
from pipeline.visualprm.images import ImageStore, inventory_prm_images
from pipeline.visualprm.parse import parse_prm
from pipeline.visualprm.readers import connect, load_jsonl_input, load_parquet_input
from pipeline.visualprm.stats import label_stats

from assets.common import raw_metadata, row_counts, snapshot_of, staging_key

GROUP = "visualprm"


@dg.asset(group_name=GROUP, kinds={"python", "file"}, code_version="1")
def visualprm_raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[Optional[dict]]:
    """VisualPRM400K raw files (parquet shards, or InternVL jsonl + images), checksummed.
    None when a local folder holds neither form."""
    try:
        snapshot = fetch_visualprm(rewardhouse.settings(), rewardhouse.layout(), log=context.log.info)
    except SourceError as exc:
        raise dg.Failure(description=str(exc)) from None
    if snapshot is None:
        context.log.warning("VisualPRM400K is absent from this source: its tables will be empty")
    return dg.Output(snapshot.to_dict() if snapshot else None, metadata=raw_metadata(snapshot))


@dg.asset(group_name=GROUP, kinds={"duckdb", "parquet"}, code_version="1")
def visualprm_samples(rewardhouse: RewardhouseResource, visualprm_raw: Optional[dict]) -> dg.Output[dict]:
    """`messages` parsed into prm_samples and prm_steps (vectorised, in DuckDB), plus
    prm_label_stats; rows of unknown shape are quarantined with a reason."""
    snapshot = snapshot_of(visualprm_raw)
    settings = rewardhouse.settings()
    con = connect()
    if snapshot is not None and prm_parquet_files(snapshot):
        rejected = load_parquet_input(con, prm_parquet_files(snapshot))
    elif snapshot is not None:
        rejected = load_jsonl_input(con, prm_jsonl_files(snapshot))
    else:
        rejected = load_parquet_input(con, [])
    tables = parse_prm(con, threshold=settings.prm_label_threshold)
    tables["quarantine"] = pa.concat_tables([quarantine_table(rejected), tables["quarantine"].cast(quarantine_table([]).schema)])
    tables["prm_label_stats"] = label_stats(tables["prm_samples"])
    key = staging_key(snapshot, {"threshold": settings.prm_label_threshold})
    out = rewardhouse.layout().staging / "visualprm_samples" / key
    paths = write_staged(out, tables)
    overall = tables["prm_label_stats"].filter(pc.equal(tables["prm_label_stats"]["scope"], "overall")).to_pylist()
    md = {**row_counts(tables), "staged": dg.MetadataValue.path(str(out))}
    if overall:
        md["positive_rate"] = dg.MetadataValue.float(overall[0]["positive_rate"])
    return dg.Output({"tables": paths}, metadata=md)


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, code_version="1")
def visualprm_images(
    rewardhouse: RewardhouseResource, visualprm_raw: Optional[dict], visualprm_samples: dict
) -> dg.Output[dict]:
    """Every referenced image: embedded bytes decoded, path references resolved against the local
    image folder/zips; each image with bytes is kept once in the content-addressed image store."""
    snapshot = snapshot_of(visualprm_raw)
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    samples = read_staged({"prm_samples": visualprm_samples["tables"]["prm_samples"]})["prm_samples"]
    refs = set(pc.list_flatten(samples["image_refs"]).to_pylist())
    table, rejected = inventory_prm_images(
        refs,
        prm_parquet_files(snapshot) if snapshot else [],
        prm_image_root(snapshot) if snapshot else None,
        prm_image_zips(snapshot) if snapshot else [],
        settings.zip_limits,
        ImageStore(layout.image_store),
    )
    tables = {"prm_images": table, "quarantine": quarantine_table(rejected)}
    out = layout.staging / "visualprm_images" / staging_key(snapshot, settings.fingerprint())
    paths = write_staged(out, tables)
    status = table.column("status").to_pylist()
    return dg.Output(
        {"tables": paths},
        metadata={
            **row_counts(tables),
            **{f"images_{s}": dg.MetadataValue.int(status.count(s)) for s in ("ok", "corrupt", "unresolved")},
        },
    )


@dg.asset(group_name=GROUP, kinds={"python", "file"}, code_version="1")
def visualprm_export(
    rewardhouse: RewardhouseResource, visualprm_samples: dict, visualprm_images: dict
) -> dg.Output[dict]:
    """InternVL training files: `visualprm_train.jsonl` + `.parquet` (+ meta at publish time);
    samples whose images cannot be loaded are left out with a quarantine row."""
    layout = rewardhouse.layout()
    staged = read_staged({**visualprm_samples["tables"], **visualprm_images["tables"]})
    key = staging_key(None, {"samples": visualprm_samples["tables"], "images": visualprm_images["tables"]})
    out = layout.staging / "visualprm_export" / key
    result = build_export(staged["prm_samples"], staged["prm_steps"], staged["prm_images"], out / "exports")
    paths = write_staged(out, {"quarantine": quarantine_table(result.excluded)})
    return dg.Output(
        {
            "tables": paths,
            "files": {f"exports/{result.jsonl.name}": str(result.jsonl), f"exports/{result.parquet.name}": str(result.parquet)},
            "images": {rel: str(layout.image_store / src) for rel, src in result.image_files.items()},
            "rows": result.rows,
        },
        metadata={
            "rows": dg.MetadataValue.int(result.rows),
            "excluded": dg.MetadataValue.int(len(result.excluded)),
            "images": dg.MetadataValue.int(len(result.image_files)),
        },
    )
