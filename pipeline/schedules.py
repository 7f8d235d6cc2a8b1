"""The nightly refresh: the `refresh` job (every asset, raw to release) once a night.

It refreshes from the configured source (`REWARDHOUSE_SOURCE`, as the UI and the resource
default): a `local` mirror is re-read, the `hf` source re-verifies its locked files and resumes
any interrupted download (moving to new upstream revisions is the change sensor's job). Unchanged
input publishes nothing new, so a night with nothing new costs one idempotent run.

Off until asked (`REWARDHOUSE_SCHEDULES_ON=1`, or the toggle in the UI): a fresh checkout running
`make dev` should not start a 2 GB download at 2 am on its own.
"""

from __future__ import annotations

import importlib

import dagster as dg

from pipeline import datasets, env

REFRESH_JOB = "refresh"  # defined in pipeline/definitions.py; referenced by name to avoid an import cycle
DEFAULT_NIGHTLY_CRON = "0 2 * * *"


def all_partitions_tags() -> dict[str, str]:
    """Tags of a run over every partition (`rewardhouse run`, the nightly schedule, the upstream
    sensor): one run, and one step for the whole range, as the partitioned assets' backfill policy
    is single-run. The partitions are those the datasets' assets declare (each DatasetSpec names its
    assets module), so a dataset that splits its work brings them itself. One range spans one
    partitions definition: every partitioned asset shares it, or a run could not cover them all."""
    modules = [importlib.import_module(d.assets) for d in datasets.DATASETS]
    found = []
    for asset in dg.load_assets_from_modules(modules):
        if isinstance(asset, dg.AssetsDefinition) and asset.partitions_def is not None and asset.partitions_def not in found:
            found.append(asset.partitions_def)
    if not found:
        return {}
    if len(found) > 1:
        raise ValueError(f"the partitioned assets use {len(found)} partitions definitions; one run over every "
                         "partition needs them to share one")
    keys = found[0].get_partition_keys()
    return {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}


def automation_on() -> bool:
    """Whether schedules and the upstream sensor start running by themselves (REWARDHOUSE_SCHEDULES_ON=1)."""
    return env.schedules_on()


def nightly_schedule() -> dg.ScheduleDefinition:
    """The schedule as the environment configures it (REWARDHOUSE_NIGHTLY_CRON, REWARDHOUSE_SCHEDULES_ON)."""

    @dg.schedule(
        name="nightly_refresh",
        job_name=REFRESH_JOB,
        cron_schedule=env.nightly_cron(DEFAULT_NIGHTLY_CRON),
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING if automation_on() else dg.DefaultScheduleStatus.STOPPED,
        description="Refresh every asset, every partition, from the configured source (REWARDHOUSE_SOURCE); cron "
        "from REWARDHOUSE_NIGHTLY_CRON (default 02:00 UTC).",
    )
    def nightly_refresh(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        # Every partition of the partitioned assets, in one run (the partition range tags).
        return dg.RunRequest(tags={"rewardhouse/trigger": "nightly", **all_partitions_tags()})

    return nightly_refresh


nightly_refresh = nightly_schedule()
