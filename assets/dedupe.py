"""Dedupe assets: perceptual hashes of every image of both datasets → clusters and contamination."""

import time

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.dedupe.decisions import HASHES_SCHEMA, find_duplicates
from pipeline.dedupe.hashing import default_workers, hash_files
from pipeline.quarantine import Rejection, quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.staging import read_staged, write_staged

from assets.common import bars, plain_counts, preview, progress_logger, reuse_or_run, staging_key

GROUP = "dedupe"


def hash_rows(dataset: str, results, sizes: dict[str, int]) -> tuple[list[dict], list[Rejection]]:
    rows, rejected = [], []
    for r in results:
        if r.error:
            rejected.append(Rejection(dataset, "hash", r.key, r.error))
            continue
        rows.append({"dataset": dataset, "image_key": r.key, "sha256": r.sha256, "phash": r.phash, "dhash": r.dhash,
                     "width": r.width, "height": r.height, "bytes": sizes.get(r.key)})
    return rows, rejected


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, code_version="1")
def image_hashes(
    context: dg.AssetExecutionContext,
    rewardhouse: RewardhouseResource,
    mmrb2_images: dict,
    visualprm_images: dict,
) -> dg.Output[dict]:
    """sha256, 64-bit pHash and dHash, width and height of every decodable image of both datasets:
    MMRB2's were hashed per task in `mmrb2_task_images` (straight from the zip), VisualPRM's are
    hashed here from the content-addressed store, spread over `workers` processes."""
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    workers = settings.workers or default_workers()
    key = staging_key(None, {"m": mmrb2_images["internal"], "v": visualprm_images["tables"]})
    out = layout.staging / "image_hashes" / key

    def compute():
        staged = read_staged({**mmrb2_images["internal"], "v": visualprm_images["tables"]["prm_images"]})
        vp = staged["v"].filter(pc.equal(staged["v"]["status"], "ok")).to_pylist()
        rows, rejected = [], []
        if vp:
            results = hash_files([(r["image_key"], layout.image_store / r["store_path"]) for r in vp],
                                 workers=workers, progress=progress_logger(context, "visualprm: hashed"),
                                 max_image_pixels=settings.max_image_pixels)
            rows, rejected = hash_rows("visualprm", results, {r["image_key"]: r["bytes"] for r in vp})
        hashes = pa.concat_tables([staged["image_hashes"], pa.Table.from_pylist(rows, schema=HASHES_SCHEMA)])
        tables = {"image_hashes": hashes, "quarantine": quarantine_table(rejected)}
        metadata = {**plain_counts(tables), "workers": workers,
                    "preview": preview(tables["image_hashes"], columns=["dataset", "image_key", "phash", "width", "height"])}
        return {"tables": write_staged(out, tables)}, metadata

    return reuse_or_run(context, out, compute)


@dg.asset(group_name=GROUP, kinds={"duckdb", "parquet"}, code_version="1")
def image_dedupe(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, image_hashes: dict) -> dg.Output[dict]:
    """Exact search of every image pair within the pHash radius (banded, not quadratic), clusters
    with a canonical image each, and VisualPRM images that are near-copies of MMRB2 images."""
    settings = rewardhouse.settings()
    key = staging_key(None, {"h": image_hashes["tables"], "r": settings.dedupe_max_distance})
    out = rewardhouse.layout().staging / "image_dedupe" / key

    def compute():
        hashes = read_staged(image_hashes["tables"])["image_hashes"]
        start = time.perf_counter()
        clusters, contamination = find_duplicates(hashes, settings.dedupe_max_distance)
        seconds = time.perf_counter() - start
        tables = {"duplicate_clusters": clusters, "contamination": contamination}
        kinds = clusters.group_by(["dataset", "kind"]).aggregate([("image_key", "count")]).to_pylist() if clusters.num_rows else []
        n_clusters = len(set(clusters["cluster_id"].to_pylist()))
        summary = [(f"{k['dataset']} {k['kind'] or 'canonical'}", k["image_key_count"] / max(hashes.num_rows, 1),
                    f"{k['image_key_count']} of {hashes.num_rows} hashed images") for k in kinds]
        metadata = {
            **plain_counts(tables),
            "max_distance": settings.dedupe_max_distance,
            "clusters": n_clusters,
            "search_seconds": round(seconds, 3),
            "dedupe_summary": bars(summary + [("contamination pairs", min(contamination.num_rows / max(hashes.num_rows, 1), 1.0),
                                                str(contamination.num_rows))]),
            "contamination_preview": preview(contamination),
        }
        return {"tables": write_staged(out, tables)}, metadata

    return reuse_or_run(context, out, compute)
