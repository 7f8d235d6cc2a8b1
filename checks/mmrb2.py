"""An early check on the MMRB2 staged tables, so a broken annotation file stops the run before
the images are read; the full gate is on the release candidate (checks/release.py)."""


import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.staging import Staged


@dg.asset_check(asset="mmrb2_annotations", blocking=True, description="pair ids are unique and chosen is A or B")
def mmrb2_pairs_well_formed(mmrb2_annotations: Staged) -> dg.AssetCheckResult:
    if not mmrb2_annotations.present:
        return dg.AssetCheckResult(passed=True, metadata={"absent": True})
    pairs = pq.read_table(mmrb2_annotations.tables["mmrb2_pairs"], columns=["pair_id", "chosen", "task"])
    duplicates = pairs.num_rows - len(pc.unique(pairs["pair_id"]))
    bad_chosen = pairs.num_rows - (pc.sum(pc.is_in(pairs["chosen"], value_set=pa.array(["A", "B"]))).as_py() or 0)
    per_task = {t["task"]: t["count"] for t in pairs.group_by("task").aggregate([("task", "count")]).rename_columns(["task", "count"]).to_pylist()}
    return dg.AssetCheckResult(
        passed=pairs.num_rows > 0 and duplicates == 0 and bad_chosen == 0,
        metadata={"pairs": pairs.num_rows, "duplicate_ids": duplicates, "bad_chosen": bad_chosen, "pairs_per_task": per_task},
    )
