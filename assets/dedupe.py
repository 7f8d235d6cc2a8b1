"""Dedupe assets: perceptual hashes of every image of both datasets → clusters and contamination."""

import time
from typing import Optional

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.dedupe.decisions import HASHES_SCHEMA, find_duplicates
from pipeline.dedupe.hashing import default_workers, hash_files, hash_zip
from pipeline.quarantine import Rejection, quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.staging import read_staged, write_staged

from assets.common import bars, plain_counts, preview, progress_logger, reuse_or_run, snapshot_of, staging_key

GROUP = "dedupe"


def _rows(dataset: str, results, sizes: dict[str, int]) -> tuple[list[dict], list[Rejection]]:
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
    mmrb2_raw: Optional[dict],
    mmrb2_images: dict,
    visualprm_images: dict,
) -> dg.Output[dict]:
    """sha256, 64-bit pHash and dHash, width and height of every decodable image of both datasets:
    MMRB2 images read straight from the zip, VisualPRM images from the content-addressed store;
    the work is spread over `workers` processes."""
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    workers = settings.workers or default_workers()
    key = staging_key(None, {"m": mmrb2_images["tables"], "v": visualprm_images["tables"]})
    out = layout.staging / "image_hashes" / key

    def compute():
        staged = read_staged({"m": mmrb2_images["tables"]["mmrb2_images"], "v": visualprm_images["tables"]["prm_images"]})
        mm = staged["m"].filter(pc.equal(staged["m"]["status"], "ok")).to_pylist()
        vp = staged["v"].filter(pc.equal(staged["v"]["status"], "ok")).to_pylist()
        snapshot = snapshot_of(mmrb2_raw)
        rows, rejected = [], []
        if mm:
            results = hash_zip(snapshot.image_zip, [(r["image_name"], r["zip_entry"]) for r in mm], settings.zip_limits,
                               workers=workers, progress=progress_logger(context, "mmrb2: hashed"))
            got = _rows("mmrb2", results, {r["image_name"]: r["bytes"] for r in mm})
            rows += got[0]
            rejected += got[1]
        if vp:
            results = hash_files([(r["image_key"], layout.image_store / r["store_path"]) for r in vp],
                                 workers=workers, progress=progress_logger(context, "visualprm: hashed"))
            got = _rows("visualprm", results, {r["image_key"]: r["bytes"] for r in vp})
            rows += got[0]
            rejected += got[1]
        tables = {"image_hashes": pa.Table.from_pylist(rows, schema=HASHES_SCHEMA), "quarantine": quarantine_table(rejected)}
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
