"""Asset checks on the MMRB2 staged tables. The full GX suites that gate releases come later."""


import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


@dg.asset_check(asset="mmrb2_annotations", blocking=True, description="pair ids are unique and chosen is A or B")
def mmrb2_pairs_well_formed(mmrb2_annotations: dict) -> dg.AssetCheckResult:
    if not mmrb2_annotations.get("present", True):
        return dg.AssetCheckResult(passed=True, metadata={"absent": True})
    pairs = pq.read_table(mmrb2_annotations["tables"]["mmrb2_pairs"], columns=["pair_id", "chosen", "task"])
    duplicates = pairs.num_rows - len(pc.unique(pairs["pair_id"]))
    bad_chosen = pairs.num_rows - (pc.sum(pc.is_in(pairs["chosen"], value_set=pa.array(["A", "B"]))).as_py() or 0)
    per_task = {t["task"]: t["count"] for t in pairs.group_by("task").aggregate([("task", "count")]).rename_columns(["task", "count"]).to_pylist()}
    return dg.AssetCheckResult(
        passed=pairs.num_rows > 0 and duplicates == 0 and bad_chosen == 0,
        metadata={"pairs": pairs.num_rows, "duplicate_ids": duplicates, "bad_chosen": bad_chosen, "pairs_per_task": per_task},
    )


@dg.asset_check(asset="mmrb2_images", description="every referenced image is present and decodes")
def mmrb2_images_resolved(mmrb2_images: dict) -> dg.AssetCheckResult:
    images = pq.read_table(mmrb2_images["tables"]["mmrb2_images"], columns=["status", "referenced"])
    referenced = images.filter(images["referenced"])
    counts = {s: 0 for s in ("ok", "corrupt", "missing")}
    for s in referenced["status"].to_pylist():
        counts[s] = counts.get(s, 0) + 1
    return dg.AssetCheckResult(
        passed=counts["corrupt"] == 0 and counts["missing"] == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={f"images_{k}": v for k, v in counts.items()},
    )
