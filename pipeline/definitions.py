"""The Dagster code location: `dagster dev` and `dagster definitions validate` find it via pyproject."""

from __future__ import annotations

import dagster as dg

import importlib

from assets import dedupe, release
from checks import release as release_checks
from pipeline import datasets, event_log
from pipeline.resources import default_resource
from pipeline.schedules import nightly_refresh
from pipeline.sensors import dead_run_reaper, run_failure_notifier, upstream_change_sensor

event_log.install()  # one SQLite engine per event database, not one per event (pipeline/event_log.py)

# Every dataset of the registry brings its own assets (and checks); dedupe and release are shared.
_dataset_assets = [importlib.import_module(d.assets) for d in datasets.DATASETS]
_dataset_checks = [importlib.import_module(d.checks) for d in datasets.DATASETS if d.checks]
all_assets = dg.load_assets_from_modules([*_dataset_assets, dedupe, release])
all_checks = dg.load_asset_checks_from_modules([*_dataset_checks, release_checks])

# The main job: every asset, raw to release. `rewardhouse run` and `make run` execute it.
# Runs from the UI, the schedule and the sensors execute each step in its own process; forked from
# a server that has imported this code location and the instance's SQLite storage once, a step
# starts in a fraction of a second instead of importing Dagster, SQLAlchemy, polars, DuckDB and the
# assets again (3-4 s a step, 22 steps). A module that cannot be imported is skipped there.
STEP_PRELOAD = [
    "pipeline.definitions",
    "dagster._core.storage.sqlite_storage",
    "dagster._core.storage.runs.sqlite",
    "dagster._core.storage.event_log.sqlite",
    "dagster._core.storage.schedules.sqlite",
]
refresh_job = dg.define_asset_job(
    "refresh", selection=dg.AssetSelection.all(), description="Raw → staged → release, all datasets.",
    executor_def=dg.multiprocess_executor.configured(
        {"start_method": {"forkserver": {"preload_modules": STEP_PRELOAD}}}),
)

defs = dg.Definitions(
    assets=all_assets,
    asset_checks=all_checks,
    jobs=[refresh_job],
    schedules=[nightly_refresh],
    sensors=[upstream_change_sensor, run_failure_notifier, dead_run_reaper],
    resources={"rewardhouse": default_resource()},
)
