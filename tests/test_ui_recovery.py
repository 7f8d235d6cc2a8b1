"""A run launched from the UI (webserver + daemon) whose processes are SIGKILLed mid-publish does
not block the queue: the `dead_run_reaper` sensor marks it failed and frees its `warehouse` slot,
and the next queued run starts and publishes."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import time
from pathlib import Path

import pytest

import run_control as rc
from pipeline.schedules import all_partitions_tags
from test_ui_graphql import LAUNCH_RUN
from ui_server import RUN_TIMEOUT, assert_release_published, dagster_ui


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def run_worker_and_descendants(db: Path) -> list[int]:
    """The run worker Dagster started for this run (its engine event "Started process for run
    (pid: N)") and every process under it (a multiprocess run's step processes, a hashing pool)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        messages = [r[0] for r in con.execute("select event from event_logs where dagster_event_type = 'ENGINE_EVENT'")]
    finally:
        con.close()
    roots = sorted({int(m) for text in messages for m in re.findall(r"Started process for run \(pid: (\d+)\)", text)})
    kids, out, todo = _children(), [], list(roots)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def launch(ui) -> str:
    params = {
        "selector": {"repositoryLocationName": ui.location, "repositoryName": ui.repository, "jobName": "refresh"},
        "runConfigData": {},
        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in all_partitions_tags().items()]},
    }
    launched = ui.graphql(LAUNCH_RUN, {"executionParams": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", f"{launched}\n{ui.diagnostics()}"
    return launched["run"]["runId"]


@pytest.mark.timeout(900)
def test_a_ui_run_killed_mid_publish_does_not_block_the_next_queued_run(tmp_path):
    with dagster_ui(tmp_path) as ui:
        first = launch(ui)
        db = ui.dagster_home / "history" / "runs" / f"{first}.db"
        deadline = time.monotonic() + RUN_TIMEOUT
        while "STEP_START" not in rc.events(db, "warehouse_release"):
            assert time.monotonic() < deadline, f"warehouse_release never started\n{ui.diagnostics()}"
            assert ui.run(first)["status"] not in ("SUCCESS", "FAILURE", "CANCELED"), ui.describe_run(ui.run(first))
            time.sleep(0.003)
        victims = run_worker_and_descendants(db)
        assert victims, "no run worker process found"
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed_at = time.monotonic()
        inside = "STEP_SUCCESS" not in rc.events(db, "warehouse_release")

        second = launch(ui)  # queued behind the dead run: one run at a time (dagster.yaml)
        ui.wait_for_run(second)
        waited = time.monotonic() - killed_at

        dead = ui.run(first)
        assert dead["status"] == "FAILURE", ui.describe_run(dead)
        # Dagster's code server marks a run failed when its worker dies, but keeps its pool slot:
        # the reaper sensor freed it, else the next run would wait on it for ever.
        reaped = [line for line in ui.logs["daemon"].read_text().splitlines() if first in line and "dead_run_reaper" in line]
        if inside:
            assert any("pool slot held by run" in line or "freed its `warehouse` pool slot" in line for line in reaped), \
                ui.diagnostics()
        print(f"killed {len(victims)} processes of run {first[:8]} (inside warehouse_release: {inside}); "
              f"the next queued run succeeded {waited:.1f}s later")
    assert_release_published(ui.data_root)
    leases = ui.dagster_home / "leases"
    assert not leases.exists() or not any(leases.iterdir())
