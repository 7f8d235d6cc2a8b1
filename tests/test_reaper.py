"""The reaper on a real (temporary, SQLite) Dagster instance: a run whose process is gone is marked
failed and its pool slot freed; a live one is left alone and waited for."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun

from pipeline.liveness import Busy, Holder
from pipeline.runs import NO_PROCESS_GRACE_SECONDS, Lease, judge, lease_dir, reap_dead_runs, wait_for_other_runs


@pytest.fixture
def instance(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        inst.event_log_storage.set_concurrency_slots("warehouse", 1)
        yield inst


def started_run(instance, run_id: str, status=dg.DagsterRunStatus.STARTED) -> DagsterRun:
    return instance.add_run(DagsterRun(job_name="refresh", run_id=run_id, status=status))


def dead_holder(label: str) -> Holder:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return replace(Holder.me(label), pid=proc.pid)


def write_lease(instance, run_id: str, holder: Holder) -> None:
    folder = lease_dir(instance, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{holder.host}-{holder.pid}.json").write_text(holder.to_json())


def claimed(instance) -> list[str]:
    return [s.run_id for s in instance.event_log_storage.get_concurrency_info("warehouse").claimed_slots]


def test_a_run_whose_process_is_gone_is_failed_and_its_slot_freed(instance):
    run_id = "dead0000-0000-0000-0000-000000000000"
    started_run(instance, run_id)
    holder = dead_holder("rewardhouse run")
    write_lease(instance, run_id, holder)
    assert instance.event_log_storage.claim_concurrency_slot("warehouse", run_id, "warehouse_release").is_claimed
    assert claimed(instance) == [run_id]

    lines = reap_dead_runs(instance, by="the test")
    assert lines == [f"cleaned up after dead run {run_id} (process {holder.pid} on {holder.host} is gone): "
                     f"marked it failed, freed its `warehouse` pool slot"]
    run = instance.get_run_by_id(run_id)
    assert run.status == dg.DagsterRunStatus.FAILURE
    failure = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    assert "its process died" in failure[0].event_log_entry.dagster_event.message
    assert claimed(instance) == []
    assert not lease_dir(instance, run_id).exists()
    assert reap_dead_runs(instance, by="the test") == []  # nothing left to do


def test_a_canceling_run_whose_process_died_ends_canceled(instance):
    run_id = "canc0000-0000-0000-0000-000000000000"
    started_run(instance, run_id, dg.DagsterRunStatus.CANCELING)
    write_lease(instance, run_id, dead_holder("rewardhouse run"))
    (line,) = reap_dead_runs(instance, by="the test")
    assert "marked it canceled" in line
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED


def test_a_live_run_is_left_alone_and_waited_for(instance):
    run_id = "live0000-0000-0000-0000-000000000000"
    started_run(instance, run_id)
    with Lease(instance, run_id, "rewardhouse run") as lease:
        assert reap_dead_runs(instance, by="the test") == []
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
        with pytest.raises(Busy) as busy:
            wait_for_other_runs(instance, "me", print, wait=False)
        assert f"run {run_id} (refresh, started, pid {os.getpid()} on {lease.holder.host} (rewardhouse run)" in str(busy.value)
    assert not lease_dir(instance, run_id).exists()  # released with the run


def test_a_run_on_another_host_lives_while_its_heartbeat_is_fresh(instance):
    run_id = "away0000-0000-0000-0000-000000000000"
    started_run(instance, run_id)
    away = replace(dead_holder("rewardhouse run"), host="another-host")
    write_lease(instance, run_id, away)
    assert reap_dead_runs(instance, by="the test") == []
    lease = lease_dir(instance, run_id) / f"another-host-{away.pid}.json"
    old = time.time() - 120
    os.utime(lease, (old, old))
    (line,) = reap_dead_runs(instance, by="the test")
    assert "stopped its heartbeat" in line


def test_a_finished_run_still_holding_a_slot_has_it_freed(instance):
    run_id = "done0000-0000-0000-0000-000000000000"
    started_run(instance, run_id, dg.DagsterRunStatus.FAILURE)
    assert instance.event_log_storage.claim_concurrency_slot("warehouse", run_id, "warehouse_release").is_claimed
    assert reap_dead_runs(instance, by="the test") == [
        f"freed the `warehouse` pool slot held by run {run_id}, which ended failure"
    ]
    assert claimed(instance) == []


def test_a_run_with_no_process_recorded_gets_a_grace_period(instance):
    run_id = "new00000-0000-0000-0000-000000000000"
    started_run(instance, run_id, dg.DagsterRunStatus.STARTING)
    assert reap_dead_runs(instance, by="the test") == []  # just launched: its worker may be starting
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTING
    record = instance.get_run_records(filters=dg.RunsFilter(run_ids=[run_id]))[0]
    later = judge(instance, record, now=time.time() + NO_PROCESS_GRACE_SECONDS + 1)
    assert not later.alive and "no process recorded" in later.why


def test_status_shows_who_holds_what_and_clean_reaps(home, capsys):
    from pipeline.cli import main, prepare_dagster_home
    from pipeline.settings import Layout

    prepare_dagster_home(Layout())
    run_id = "stat0000-0000-0000-0000-000000000000"
    with dg.DagsterInstance.get() as inst:
        inst.event_log_storage.set_concurrency_slots("warehouse", 1)
        started_run(inst, run_id)
        holder = dead_holder("rewardhouse run")
        write_lease(inst, run_id, holder)
        assert inst.event_log_storage.claim_concurrency_slot("warehouse", run_id, "warehouse_release").is_claimed

    assert main(["status"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "data root (.run.lock: `rewardhouse run`, gc): free"
    assert out[1] == "warehouse writer (.writer.lock): free"
    assert out[2].startswith(f"run {run_id} (refresh, started, process {holder.pid} on {holder.host} is gone; started")
    assert out[2].endswith("DEAD (the next `rewardhouse run`, `rewardhouse status --clean` or the daemon cleans it up)")
    assert out[3] == f"pool `warehouse`: 1 of 1 slots taken by run {run_id} (warehouse_release)"

    assert main(["status", "--clean"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == (f"cleaned up after dead run {run_id} (process {holder.pid} on {holder.host} is gone): "
                      "marked it failed, freed its `warehouse` pool slot")
    assert out[3:] == ["runs in flight: none", "pool `warehouse`: 0 of 1 slots taken"]

    # idle now: the answer read from the SQLite files without Dagster is the one Dagster gives
    assert main(["status"]) == 0
    fast = capsys.readouterr().out
    from pipeline import cli

    assert cli._idle_status(prepare_dagster_home(Layout())) is not None  # the fast path answered
    original = cli._idle_status
    try:
        cli._idle_status = lambda home: None  # noqa: E731  (as if it could not tell)
        assert main(["status"]) == 0
    finally:
        cli._idle_status = original
    assert capsys.readouterr().out == fast


def test_the_status_names_of_runs_in_flight_are_the_reapers():
    from pipeline.cli import IN_FLIGHT_STATUSES
    from pipeline.runs import IN_FLIGHT

    assert IN_FLIGHT_STATUSES == tuple(s.value for s in IN_FLIGHT)
