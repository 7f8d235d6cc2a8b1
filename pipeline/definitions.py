"""The Dagster code location: `dagster dev` and `dagster definitions validate` find it via pyproject."""

from __future__ import annotations

import dagster as dg

from assets import dedupe, mmrb2, release, visualprm
from checks import mmrb2 as mmrb2_checks
from checks import release as release_checks
from pipeline.resources import default_resource
from pipeline.schedules import nightly_refresh
from pipeline.sensors import dead_run_reaper, run_failure_notifier, upstream_change_sensor

all_assets = dg.load_assets_from_modules([mmrb2, visualprm, dedupe, release])
all_checks = dg.load_asset_checks_from_modules([mmrb2_checks, release_checks])

# The main job: every asset, raw to release. `rewardhouse run` and `make run` execute it.
refresh_job = dg.define_asset_job("refresh", selection=dg.AssetSelection.all(), description="Raw → staged → release, all datasets.")

defs = dg.Definitions(
    assets=all_assets,
    asset_checks=all_checks,
    jobs=[refresh_job],
    schedules=[nightly_refresh],
    sensors=[upstream_change_sensor, run_failure_notifier, dead_run_reaper],
    resources={"rewardhouse": default_resource()},
)
