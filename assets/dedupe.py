"""Dedupe assets: perceptual hashes of every image of both datasets → clusters and contamination."""

import time

import dagster as dg
import pyarrow as pa

from pipeline.dedupe.decisions import find_duplicates
from pipeline.resources import RewardhouseResource
from pipeline.staging import read_staged, write_staged

from assets.common import bars, plain_counts, preview, reuse_or_run, staging_key

GROUP = "dedupe"


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, code_version="1")
def image_hashes(
    context: dg.AssetExecutionContext,
    rewardhouse: RewardhouseResource,
    mmrb2_images: dict,
    visualprm_images: dict,
) -> dg.Output[dict]:
    """sha256, 64-bit pHash and dHash, width and height of every decodable image of both datasets,
    gathered from the steps that read them: each image is decoded once, where it is checked
    (`mmrb2_task_images` per task, straight from the zip; `visualprm_images`)."""
    key = staging_key(None, {"m": mmrb2_images["internal"], "v": visualprm_images["internal"]})
    out = rewardhouse.layout().staging / "image_hashes" / key

    def compute():
        staged = read_staged({"m": mmrb2_images["internal"]["image_hashes"], "v": visualprm_images["internal"]["image_hashes"]})
        tables = {"image_hashes": pa.concat_tables([staged["m"], staged["v"]])}
        metadata = {**plain_counts(tables), **{f"hashed_{d}": t.num_rows for d, t in (("mmrb2", staged["m"]), ("visualprm", staged["v"]))},
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
