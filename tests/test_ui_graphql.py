"""End to end through the Dagster UI's API: webserver + daemon as real processes, "materialize
all" (the `refresh` job, which selects every asset, over every partition as the schedule runs it)
launched with the GraphQL `launchRun` mutation, queued, dequeued by the daemon, run to SUCCESS,
every task partition materialized, and a release published."""

from __future__ import annotations

import re
import time

import pytest

from pipeline.mmrb2.tasks import PARTITION_KEYS
from pipeline.schedules import all_partitions_tags
from ui_server import assert_release_published, dagster_ui

LAUNCH_RUN = """
mutation Launch($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status jobName } }
    ... on PythonError { message stack }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
    ... on PipelineNotFoundError { message }
    ... on UnauthorizedError { message }
  }
}
"""

PARTITION_STATS = """
{ assetNodeOrError(assetKey: {path: ["mmrb2_task_images"]}) {
    ... on AssetNode { partitionKeys partitionStats { numMaterialized numPartitions numFailed } } } }
"""

RUN_EVENT_TYPES = """
query Events($runId: ID!) {
  runOrError(runId: $runId) {
    ... on Run { eventConnection(afterCursor: null) { events { __typename } } }
  }
}
"""


@pytest.mark.timeout(900)
def test_materialize_all_through_graphql_publishes_a_release(tmp_path):
    with dagster_ui(tmp_path) as ui:
        params = {
            "selector": {"repositoryLocationName": ui.location, "repositoryName": ui.repository, "jobName": "refresh"},
            "runConfigData": {},
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in all_partitions_tags().items()]},
        }
        started = time.monotonic()
        launched = ui.graphql(LAUNCH_RUN, {"executionParams": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", f"{launched}\n{ui.diagnostics()}"
        run = launched["run"]
        assert run["jobName"] == "refresh"
        # The instance queues runs (dagster.yaml): only the daemon can start this one.
        assert run["status"] == "QUEUED", run

        ui.wait_for_run(run["runId"])
        print(f"run {run['runId']} succeeded in {time.monotonic() - started:.1f} s")

        events = {e["__typename"] for e in ui.graphql(RUN_EVENT_TYPES, {"runId": run["runId"]})["runOrError"]["eventConnection"]["events"]}
        assert {"RunEnqueuedEvent", "RunStartingEvent", "RunSuccessEvent"} <= events, sorted(events)
        # The daemon's queued-run coordinator is what took it off the queue.
        assert re.search(r"QueuedRunCoordinatorDaemon .*Launched \d+ runs?", ui.logs["daemon"].read_text()), ui.diagnostics()

        node = ui.graphql(PARTITION_STATS)["assetNodeOrError"]
        assert node["partitionKeys"] == list(PARTITION_KEYS)
        assert node["partitionStats"] == {"numMaterialized": len(PARTITION_KEYS), "numPartitions": len(PARTITION_KEYS), "numFailed": 0}

    assert_release_published(ui.data_root)
