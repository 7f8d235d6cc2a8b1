"""Whole `rewardhouse run` processes killed or stopped at any moment: the next run is never blocked.

Each trial starts a real `rewardhouse run` in its own process group, waits for a step's STEP_START
in the run's own event log, and signals the whole group, as an OOM kill, a reboot, systemd or a
closed terminal would. What must hold after every trial:

- the next `rewardhouse run` completes within 60 s, and says in one line what it cleaned up;
- the dead run is not left STARTED, and holds no `warehouse` pool slot and no lease;
- CURRENT names a whole release (every file matches its manifest) that the warehouse serves.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import dagster as dg
import pytest

import run_control as rc
from publish_helper import assert_release_complete
from warehouse.duck import connect_readonly, warehouse_release
from warehouse.store import ReleaseStore, exclusive_lock

NEXT_RUN_WITHIN = 60.0


@pytest.fixture(scope="module")
def warm_homes(tmp_path_factory) -> list[Path]:
    """Two data roots where one run has published, so trials reuse unchanged work like a nightly
    run; two, so the kill trials run as two streams side by side (one per core)."""
    homes = [tmp_path_factory.mktemp("recovery") / "home" for _ in range(2)]
    procs = [rc.start(home) for home in homes]
    for proc in procs:
        code, _, err = rc.finish(proc, timeout=300)
        assert code == 0, err[-3000:]
    return homes


@pytest.fixture(scope="module")
def warm_home(warm_homes) -> Path:
    return warm_homes[0]


@contextlib.contextmanager
def instance_for(home: Path) -> Iterator[dg.DagsterInstance]:
    """The data root's Dagster instance (its dagster.yaml reads DAGSTER_HOME), env restored after."""
    saved = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    try:
        with dg.DagsterInstance.get() as instance:
            yield instance
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = saved


def warehouse_slots(home: Path) -> list[str]:
    with instance_for(home) as instance:
        return [slot.run_id for slot in instance.event_log_storage.get_concurrency_info("warehouse").claimed_slots]


def run_status(home: Path, run_id: str) -> str:
    with instance_for(home) as instance:
        return instance.get_run_by_id(run_id).status.value


def assert_whole(home: Path) -> str:
    store = ReleaseStore(home / "releases")
    current = store.current()
    assert current is not None
    assert_release_complete(store, current)
    assert warehouse_release(home / "warehouse.duckdb") == current
    with connect_readonly(home / "warehouse.duckdb") as con:
        for table, rows in store.manifest(current).row_counts.items():
            assert con.execute(f'select count(*) from main."{table}"').fetchone()[0] == rows, table
    return current


def next_run_completes(home: Path) -> tuple[str, float]:
    started = time.monotonic()
    code, out, err = rc.finish(rc.start(home), timeout=NEXT_RUN_WITHIN + 60)
    took = time.monotonic() - started
    assert code == 0, err[-3000:]
    assert "Traceback" not in err
    assert took < NEXT_RUN_WITHIN, f"the next run took {took:.1f}s"
    return err, took


def kill_at(home: Path, step: str, budget: float, delay: float = 0.0) -> dict:
    """Start a run that publishes a new release (a new quarantine budget changes the release id),
    SIGKILL its whole process group `delay` s after `step` starts; report what the kill hit."""
    before = rc.run_dbs(home)
    proc = rc.start(home, "--set", f"quarantine_budget={budget}")
    db = rc.wait_for_event(home, before, step, "STEP_START", proc)
    if delay:
        time.sleep(delay)
    rc.kill_group(proc)
    code, _, _ = rc.finish(proc)
    assert rc.group_gone(proc.pid), "a process of the killed run survived it"
    run_id = db.stem if db else None
    landed_inside = db is not None and "STEP_SUCCESS" not in rc.events(db, step) and code == -signal.SIGKILL
    return {"run_id": run_id, "inside": landed_inside, "slots": warehouse_slots(home), "code": code}


def kill_trials(home: Path, trials: list[tuple[str, float, float]]) -> list[dict]:
    """Kill a run at each (step, delay, budget), then check the next run: see the module docstring."""
    results = []
    for step, delay, budget in trials:
        hit = kill_at(home, step, budget=budget, delay=delay)
        assert hit["run_id"], f"the run ended before {step} started"
        hit["held"] = hit["run_id"] in hit["slots"]
        # On a loaded machine the kill may come after the run's last event (the process was exiting).
        hit["missed"] = run_status(home, hit["run_id"]) == "SUCCESS"

        err, took = next_run_completes(home)
        cleaned = [line for line in err.splitlines() if hit["run_id"] in line]
        if hit["missed"]:
            assert not cleaned and not hit["held"], err
        else:
            # The dead run was cleaned up by the next run, which said so in one line.
            assert run_status(home, hit["run_id"]) == "FAILURE", (step, err)
            assert len(cleaned) == 1 and "cleaned up after dead run" in cleaned[0] and "is gone" in cleaned[0], err
            if hit["held"]:
                assert "freed its `warehouse` pool slot" in cleaned[0]
        assert warehouse_slots(home) == []
        assert not (home / "dagster" / "leases" / hit["run_id"]).exists()
        assert_whole(home)
        results.append({**hit, "step": step, "delay": delay, "next_run": took})
    return results


# 23 real runs killed and 23 next runs, two at a time: 5-10 minutes on 2 cores, beside another test file
@pytest.mark.timeout(1500)
def test_a_run_killed_at_each_step_never_blocks_the_next(warm_homes):
    # Every step once, and more kills in the first 20 ms of the publish step (it takes 0.1-0.3 s).
    # A new quarantine budget per trial gives a new release id, so each run publishes.
    (first,) = [db for home in warm_homes[:1] for db in rc.run_dbs(home)]
    assert rc.started_steps(first) == set(rc.STEPS)  # every step of a real run is killed once
    rng = random.Random(11)
    plan = [(step, 0.0) for step in rc.STEPS] + [("warehouse_release", rng.uniform(0.0, 0.02)) for _ in range(3)]
    trials = [(step, delay, 0.05 + (i + 1) / 1000) for i, (step, delay) in enumerate(plan)]
    streams = [trials[0::2], trials[1::2]]
    with ThreadPoolExecutor(len(streams)) as pool:
        results = [r for part in pool.map(kill_trials, warm_homes, streams) for r in part]
    for r in results:
        print(f"killed in {r['step']} (+{r['delay'] * 1000:.0f} ms): inside={r['inside']} slot held={r['held']} "
              f"missed={r['missed']}; "
              f"next run {r['next_run']:.1f}s")
    inside_publish = sum(r["inside"] for r in results if r["step"] == "warehouse_release")
    wedged = sum(r["held"] for r in results)
    print(f"{len(results)} kills, {inside_publish} inside warehouse_release, {wedged} left the warehouse slot held")
    assert len(results) == len(trials)
    # The trials did hit the case that used to wedge every later run.
    assert inside_publish >= 2 and wedged >= 2


def stop_at(home: Path, step: str, budget: float, sig: int = signal.SIGTERM, delay: float = 0.0,
            second: float | None = None) -> tuple[int, str, float, str]:
    before = rc.run_dbs(home)
    proc = rc.start(home, "--set", f"quarantine_budget={budget}")
    db = rc.wait_for_event(home, before, step, "STEP_START", proc)
    assert db is not None, f"the run ended before {step} started"
    time.sleep(delay)
    sent = time.monotonic()
    rc.kill_group(proc, sig)
    if second is not None:
        time.sleep(second)
        rc.kill_group(proc, sig)
    code, _out, err = rc.finish(proc, timeout=60)
    took = time.monotonic() - sent
    assert rc.group_gone(proc.pid), "a process of the stopped run outlived it"
    return code, err, took, db.stem


@pytest.mark.parametrize(
    "step,sig",
    [("visualprm_raw", signal.SIGTERM), ("mmrb2_task_images", signal.SIGTERM), ("release_gx_suites", signal.SIGINT),
     ("warehouse_release", signal.SIGTERM)],
)
def test_sigterm_stops_a_run_at_a_safe_point_within_seconds(warm_home, step, sig):
    home = warm_home
    budget = 0.2 + rc.STEPS.index(step) / 1000 + sig / 100000
    previous = ReleaseStore(home / "releases").current()
    code, err, took, run_id = stop_at(home, step, budget, sig)
    name = signal.Signals(sig).name
    assert code == 128 + sig, err[-3000:]
    assert took < 10, f"exited {took:.1f}s after {name}"
    assert "Traceback" not in err
    assert f"{name} received: stopping at the next safe point" in err
    final = [line for line in err.splitlines() if line.startswith(f"rewardhouse: stopped by {name}")]
    assert len(final) == 1 and run_id in final[0] and "canceled at a safe point" in final[0], err
    assert run_status(home, run_id) == "CANCELED"
    assert warehouse_slots(home) == []
    assert not (home / "dagster" / "leases" / run_id).exists()
    current = assert_whole(home)
    # Stopped before its publish began, the previous release stays; a publish under way is
    # finished, not cut, and its release is current and whole.
    assert current in (previous, ReleaseStore(home / "releases").list()[0].release_id)
    err2, _ = next_run_completes(home)
    assert "cleaned up" not in err2  # the stopped run left nothing to clean
    print(f"{name} in {step}: exit {code} after {took:.1f}s")


def test_a_second_signal_stops_at_once_and_leaves_a_whole_release(warm_home):
    home = warm_home
    code, err, took, run_id = stop_at(home, "warehouse_release", 0.31, second=0.01)
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert took < 6, f"exited {took:.1f}s after the first SIGTERM"
    assert "second SIGTERM: stopping now" in err
    assert "Traceback" not in err
    assert_whole(home)
    err2, _ = next_run_completes(home)
    # Marked canceled on the way out, or else cleaned up by the next run; never left STARTED.
    assert run_status(home, run_id) in ("CANCELED", "FAILURE"), err2
    assert warehouse_slots(home) == []


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_second_run_waits_cheaply_says_for_whom_and_proceeds(warm_home):
    home = warm_home
    before = rc.run_dbs(home)
    first = rc.start(home, "--set", "quarantine_budget=0.41")
    db = rc.wait_for_event(home, before, "release_gx_suites", "STEP_START", first)
    assert db is not None
    # Held there (a stopped process still holds the data root): however quickly its last steps
    # run, it is still running while the others are measured; let go once they have been.
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = rc.start(home)
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(second.stderr), daemon=True)
        reader.start()
        # --no-wait: fails at once, with the line a waiting run logs.
        started = time.monotonic()
        code, _, busy = rc.finish(rc.start(home, "--no-wait"), timeout=60)
        assert code == 75, busy
        assert time.monotonic() - started < 15
        assert re.search(rf"rewardhouse: busy: the data root {re.escape(str(home))}: held by pid {first.pid} on \S+ "
                         rf"\(rewardhouse run, run {db.stem[:8]}\) since \d\d:\d\d:\d\d", busy), busy
        deadline = time.monotonic() + 60
        while not any("waiting for the data root" in line for line in said) and time.monotonic() < deadline:
            time.sleep(0.1)
        waited_from = cpu_seconds(second.pid)
        time.sleep(3.0)
        spent = cpu_seconds(second.pid) - waited_from
        assert first.poll() is None, "the first run ended before the second was measured waiting"
        assert spent < 0.3, f"the waiting run used {spent:.2f}s of CPU in 3s"
    finally:
        os.kill(first.pid, signal.SIGCONT)
    code1, _, err1 = rc.finish(first)
    code2 = second.wait(timeout=120)
    reader.join(timeout=10)
    out2, err2 = second.stdout.read(), "".join(said)
    assert code1 == 0 and code2 == 0, (err1[-2000:], err2[-2000:])
    waits = [line for line in err2.splitlines() if line.startswith("rewardhouse: waiting for the data root")]
    assert waits and f"held by pid {first.pid}" in waits[0] and f"run {db.stem[:8]}" in waits[0], err2
    assert out2.startswith("release ")
    assert_whole(home)
    print(f"waiting run: {spent:.3f}s CPU over 3s; {len(waits)} waiting lines")


def test_a_waiting_run_stopped_by_sigterm_leaves_at_once_having_changed_nothing(warm_home):
    home = warm_home
    before = sorted(p.name for p in rc.run_dbs(home))
    with exclusive_lock(home / ".run.lock", "the data root", label="a test holding the data root"):
        proc = rc.start(home)
        said: list[str] = []
        reader = threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True)
        reader.start()
        deadline = time.monotonic() + 60
        while not any("waiting for the data root" in line for line in said):
            assert time.monotonic() < deadline and proc.poll() is None, said
            time.sleep(0.05)
        assert "(a test holding the data root)" in said[0]
        rc.kill_group(proc, signal.SIGTERM)
        sent = time.monotonic()
        code = proc.wait(timeout=30)
        took = time.monotonic() - sent
    reader.join(timeout=10)
    assert code == 143 and took < 3, said
    assert said[-1].strip() == "rewardhouse: stopped by SIGTERM before the run started; nothing was changed", said
    assert sorted(p.name for p in rc.run_dbs(home)) == before  # no run was created


def test_a_stop_marked_after_the_run_ended_leaves_it_as_it_ended(tmp_path, monkeypatch):
    """The stop request is marked from a helper thread: it reads STARTED, loses the race with the
    run's end and writes CANCELING after it, before `execute_in_process` reads the run back (so
    its `success` is False for a run that succeeded). `rewardhouse run` settles the run by its own
    events: one that succeeded is SUCCESS again, one that failed FAILURE, and nothing is written
    for a run that was not left CANCELING."""
    from pipeline.runs import mark_canceling, run_outcome, settle_finished

    @dg.op
    def one():
        return 1

    @dg.op
    def broken():
        raise ValueError("no")

    @dg.job
    def tiny():
        one()

    @dg.job
    def failing():
        broken()

    ends = (dg.DagsterEventType.RUN_SUCCESS, dg.DagsterEventType.RUN_FAILURE)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with dg.DagsterInstance.get() as instance:
        storage = instance.run_storage
        handle = storage.handle_run_event

        def late_mark(run_id, event, *args, **kwargs):  # the helper thread's write, landing after the end
            stale = instance.get_run_by_id(run_id)
            handle(run_id, event, *args, **kwargs)
            if event.event_type in ends:
                instance.report_run_canceling(stale, message="read STARTED before the end, written after it")

        monkeypatch.setattr(storage, "handle_run_event", late_mark)
        ok = tiny.execute_in_process(instance=instance)
        bad = failing.execute_in_process(instance=instance, raise_on_error=False)
        monkeypatch.setattr(storage, "handle_run_event", handle)

        assert instance.get_run_by_id(ok.run_id).status == dg.DagsterRunStatus.CANCELING
        assert not ok.success  # the status read back: not to be trusted here
        assert run_outcome(ok.all_events) == dg.DagsterEventType.RUN_SUCCESS
        assert run_outcome(bad.all_events) == dg.DagsterEventType.RUN_FAILURE
        settle_finished(instance, ok.run_id, None)  # no known end: not touched
        assert instance.get_run_by_id(ok.run_id).status == dg.DagsterRunStatus.CANCELING
        settle_finished(instance, ok.run_id, run_outcome(ok.all_events))
        settle_finished(instance, bad.run_id, run_outcome(bad.all_events))
        assert instance.get_run_by_id(ok.run_id).status == dg.DagsterRunStatus.SUCCESS
        assert instance.get_run_by_id(bad.run_id).status == dg.DagsterRunStatus.FAILURE
        settle_finished(instance, ok.run_id, run_outcome(ok.all_events))  # settled once: nothing more is written
        assert len(instance.all_logs(ok.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS)) == 2
        mark_canceling(instance, ok.run_id, "too late")  # a mark that reads the status first: nothing
        assert instance.get_run_by_id(ok.run_id).status == dg.DagsterRunStatus.SUCCESS
