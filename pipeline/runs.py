"""Runs that died: find them, mark them, free what they held; and wait for the live ones.

`rewardhouse run` leases the run it executes before it starts it:
`{DAGSTER_HOME}/leases/{run_id}/{host}-{pid}.json` (a `Holder`, with a heartbeat in its mtime).
A run launched from the UI runs in processes Dagster starts and records in the run's engine
events (the run worker, a multiprocess run's step processes), all on the daemon's host. A run in
flight (STARTING, STARTED, CANCELING) is alive while one of its lease holders is; with no lease,
while a process Dagster recorded for it is (a pid counts only if that process started before the
event that names it, so a recycled pid is not taken for it); with neither, for a short grace
after its last update. A run that is not alive is dead: it is marked failed (canceled, if it was
being canceled) with the reason, its pool slots and pending claims are freed and its leases
removed. Slots still held by runs that ended (Dagster fails a run whose worker died, but keeps
its slots) are freed too. Lock files need nothing of this: the kernel drops an flock when its
holder dies.

`rewardhouse run` reaps before it starts and while it waits; the `dead_run_reaper` sensor does it
for runs launched from the UI while the daemon is up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import dagster as dg

from pipeline.liveness import HOST, Busy, Heartbeat, Holder, heartbeat_of, pid_exists, process_start
from pipeline.staging import write_text_atomic
from pipeline.stopping import stop_point
from pipeline.unwritable import naming

IN_FLIGHT = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)
# A run in flight with no process recorded at all is given this long after its last update.
NO_PROCESS_GRACE_SECONDS = 60.0
LEASES = "leases"
# How often a waiting run says what it waits for.
WAIT_REPORT_SECONDS = 5.0
WAIT_POLL_SECONDS = 0.5


def lease_dir(instance: dg.DagsterInstance, run_id: str) -> Path:
    return Path(instance.root_directory) / LEASES / run_id


# Room kept beside a lease until its run ends: on a full disk, freeing it lets this process still
# record its run as failed (SQLite needs space for its journal). A disk without this much free
# fails before the run is created.
RESERVE_BYTES = 1 << 20


class Lease:
    """This process executes run `run_id`: a lease file with a heartbeat, and `reserve` bytes of
    disk held for recording the run's end (`free_reserve()`); both removed by `release()`."""

    def __init__(self, instance: dg.DagsterInstance, run_id: str, label: str, reserve: int = RESERVE_BYTES):
        self.holder = Holder.me(label)
        self.path = lease_dir(instance, run_id) / f"{self.holder.host}-{self.holder.pid}.json"
        self.reserve = self.path.with_suffix(".reserve")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.path, self.holder.to_json())
            _write_zeros(self.reserve, reserve)
        except OSError as exc:
            self._remove()
            raise naming(exc, instance.root_directory) from None
        self.heartbeat = Heartbeat(self.path).start()

    def free_reserve(self) -> None:
        self.reserve.unlink(missing_ok=True)

    def release(self) -> None:
        self.heartbeat.stop()
        self._remove()

    def _remove(self) -> None:
        self.free_reserve()
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _write_zeros(path: Path, size: int) -> None:
    block = bytes(min(size, 1 << 16))
    with open(path, "wb") as fh:
        for start in range(0, size, len(block) or 1):
            fh.write(block[: size - start])
        fh.flush()
        os.fsync(fh.fileno())  # allocated now, not when the disk is already full


def leases_of(instance: dg.DagsterInstance, run_id: str) -> list[tuple[Holder, float | None]]:
    folder = lease_dir(instance, run_id)
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            holder = Holder.from_json(path.read_text())
        except OSError:
            continue
        if holder:
            out.append((holder, heartbeat_of(path)))
    return out


def recorded_pids(instance: dg.DagsterInstance, run_id: str) -> list[tuple[int, float]]:
    """(pid, when) of the processes Dagster's engine events name for this run."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=1000).records
    out = []
    for record in records:
        data = record.event_log_entry.dagster_event.engine_event_data if record.event_log_entry.dagster_event else None
        pid = (data.metadata or {}).get("pid") if data else None
        if pid is not None:
            try:
                out.append((int(getattr(pid, "value", pid)), record.event_log_entry.timestamp))
            except ValueError:
                continue
    return out


@dataclass(frozen=True)
class Verdict:
    alive: bool
    why: str  # for a live run: who runs it; for a dead one: why it is taken for dead
    holder: Holder | None = None


def judge(instance: dg.DagsterInstance, record, now: float | None = None) -> Verdict:
    """Is the run of this run record still executing somewhere?"""
    run = record.dagster_run
    now = time.time() if now is None else now
    leases = leases_of(instance, run.run_id)
    if leases:
        for holder, beat in leases:
            if holder.alive(beat, now):
                return Verdict(True, holder.describe(), holder)
        holder, beat = leases[0]
        return Verdict(False, "; ".join(h.why_dead(b) for h, b in leases), holder)
    pids = recorded_pids(instance, run.run_id)
    for pid, when in pids:
        started = process_start(pid)
        if pid_exists(pid) and (started is None or started <= when + 2.0):
            holder = Holder(pid=pid, host=HOST, boot_id="", started=started, since=when, label=f"run {run.run_id[:8]}")
            return Verdict(True, holder.describe(), holder)
    if pids:
        return Verdict(False, f"process {', '.join(str(p) for p, _ in pids)} on {HOST} is gone")
    updated = record.update_timestamp.timestamp() if record.update_timestamp else now
    if now - updated < NO_PROCESS_GRACE_SECONDS:
        return Verdict(True, f"starting (no process recorded yet, updated {now - updated:.0f}s ago)")
    return Verdict(False, f"no process recorded for it in {now - updated:.0f}s")


def runs_in_flight(instance: dg.DagsterInstance, exclude: Iterable[str] = ()):
    skip = set(exclude)
    records = instance.get_run_records(filters=dg.RunsFilter(statuses=list(IN_FLIGHT)))
    return [r for r in records if r.dagster_run.run_id not in skip]


def slots_held(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The pools in which `run_id` holds a slot."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    held = []
    for pool in storage.get_concurrency_keys():
        info = storage.get_concurrency_info(pool)
        held += [pool for slot in info.claimed_slots if slot.run_id == run_id]
    return held


def reap_dead_runs(instance: dg.DagsterInstance, by: str, exclude: Iterable[str] = ()) -> list[str]:
    """Mark every dead run in flight failed (canceled, if it was canceling), free its pool slots and
    pending claims, remove its leases. One line per run reaped, saying what was cleaned up."""
    lines = []
    _sweep_leases(instance)
    lines += _free_slots_of_finished_runs(instance)
    for record in runs_in_flight(instance, exclude):
        verdict = judge(instance, record)
        if verdict.alive:
            continue
        run = record.dagster_run
        pools = slots_held(instance, run.run_id)
        reason = f"its process died ({verdict.why}); cleaned up by {by}"
        fresh = instance.get_run_by_id(run.run_id)
        if fresh is None or fresh.status not in IN_FLIGHT:
            continue  # it ended meanwhile
        if fresh.status == dg.DagsterRunStatus.CANCELING:
            instance.report_run_canceled(fresh, message=f"Run canceled: {reason}")
            marked = "canceled"
        else:
            instance.report_run_failed(fresh, message=f"Run failed: {reason}")
            marked = "failed"
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        shutil.rmtree(lease_dir(instance, run.run_id), ignore_errors=True)
        freed = f", freed its {', '.join(f'`{p}`' for p in sorted(set(pools)))} pool slot{'s' if len(pools) > 1 else ''}" if pools else ""
        lines.append(f"cleaned up after dead run {run.run_id} ({verdict.why}): marked it {marked}{freed}")
    return lines


def _free_slots_of_finished_runs(instance: dg.DagsterInstance) -> list[str]:
    """Slots still claimed by runs that are over. Dagster marks a run failed when its run worker
    dies (the code server notices) but leaves the slots its steps claimed."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    lines = []
    for run_id in sorted(storage.get_concurrency_run_ids()):
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            continue
        pools = sorted(set(slots_held(instance, run_id)))
        storage.free_concurrency_slots_for_run(run_id)
        if pools:
            state = f"which ended {run.status.value.lower()}" if run else "which is no longer recorded"
            lines.append(f"freed the {', '.join(f'`{p}`' for p in pools)} pool slot held by run {run_id}, {state}")
    return lines


def _sweep_leases(instance: dg.DagsterInstance) -> None:
    """Leases of runs that are over: a process killed between its run's end and its own."""
    root = Path(instance.root_directory) / LEASES
    if not root.is_dir():
        return
    for folder in root.iterdir():
        run = instance.get_run_by_id(folder.name)
        if run is None or run.status not in IN_FLIGHT:
            shutil.rmtree(folder, ignore_errors=True)


def describe_run(record, verdict: Verdict) -> str:
    run = record.dagster_run
    started = record.start_time or (record.create_timestamp.timestamp() if record.create_timestamp else None)
    when = time.strftime("%H:%M:%S", time.localtime(started)) if started else "?"
    return f"run {run.run_id} ({run.job_name}, {run.status.value.lower()}, {verdict.why}; started {when})"


def wait_for_other_runs(instance: dg.DagsterInstance, me: str, say: Callable[[str], None], *, wait: bool = True,
                        every: float = WAIT_REPORT_SECONDS, by: str = "rewardhouse run") -> None:
    """Until no other run is in flight on this instance: reap dead ones, and for live ones sleep,
    saying every `every` seconds which run holds the instance, who runs it and since when. With
    `wait=False`, raise Busy with that line instead."""
    last_said = None
    while True:
        for line in reap_dead_runs(instance, by, exclude=[me]):
            say(line)
        live = [(r, judge(instance, r)) for r in runs_in_flight(instance, exclude=[me])]
        live = [(r, v) for r, v in live if v.alive]
        if not live:
            return
        line = "waiting for " + "; ".join(describe_run(r, v) for r, v in live) + " to finish"
        if not wait:
            raise Busy(line.replace("waiting for", "busy:", 1))
        now = time.monotonic()
        if last_said is None or now - last_said >= every:
            say(line)
            last_said = now
        stop_point()
        time.sleep(WAIT_POLL_SECONDS)


def mark_canceling(instance: dg.DagsterInstance, run_id: str, message: str) -> None:
    """Ask for run `run_id` to stop: CANCELING, so the interrupt that follows ends it canceled."""
    run = instance.get_run_by_id(run_id)
    if run is not None and run.status in (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED):
        instance.report_run_canceling(run, message=message)


def run_outcome(events) -> "dg.DagsterEventType | None":
    """How a run ended, by its own run-level events (RUN_SUCCESS, RUN_FAILURE or RUN_CANCELED),
    not by the status in the run storage: a stop marked CANCELING from another thread can land
    after the end was recorded, and Dagster's `ExecuteInProcessResult.success` reads that status
    back (a run that succeeded then reads as not successful)."""
    ends = (dg.DagsterEventType.RUN_SUCCESS, dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.RUN_CANCELED)
    outcome = None
    for event in events:
        if event.is_job_event and event.event_type in ends:
            outcome = event.event_type
    return outcome


def settle_finished(instance: dg.DagsterInstance, run_id: str, outcome: "dg.DagsterEventType | None") -> None:
    """Run `run_id` of this process has returned with `outcome` (`run_outcome` of its events). A
    stop marked CANCELING after its last safe point (the mark is made from another thread, and
    reads the status before it writes) can land after Dagster recorded the end: the end is
    recorded again, so a run that succeeded is SUCCESS and one that failed is FAILURE, never left
    CANCELING. Called with the stop request's lock held, so no mark follows."""
    from dagster._core.events import DagsterEvent

    run = instance.get_run_by_id(run_id)
    if outcome is None or run is None or run.status != dg.DagsterRunStatus.CANCELING:
        return
    if outcome == dg.DagsterEventType.RUN_SUCCESS:
        message = "Finished: the stop request came after the run's last safe point."
    elif outcome == dg.DagsterEventType.RUN_FAILURE:
        message = "Run failed before the stop request was recorded."
    else:
        message = "Run canceled."
    event = DagsterEvent(event_type_value=outcome.value, job_name=run.job_name, message=message)
    instance.report_dagster_event(event, run_id=run_id)


def fail_run(instance: dg.DagsterInstance, run_id: str, message: str) -> bool:
    """Run `run_id` of this process ended in a failure Dagster may not have recorded (its storage
    could not be written): mark it failed if it is still in flight, free its slots and leases.
    False if the run was never created. Raises what the storage raises."""
    run = instance.get_run_by_id(run_id)
    if run is not None and (run.status in IN_FLIGHT or run.status == dg.DagsterRunStatus.NOT_STARTED):
        instance.report_run_failed(run, message=f"Run failed: {message}")
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)
    shutil.rmtree(lease_dir(instance, run_id), ignore_errors=True)
    return run is not None


def abandon(instance: dg.DagsterInstance, run_id: str, message: str) -> None:
    """This process gives up run `run_id` on the spot: mark it canceled, free its slots and leases."""
    run = instance.get_run_by_id(run_id)
    if run is not None and run.status in IN_FLIGHT:
        instance.report_run_canceled(run, message=f"Run canceled: {message}")
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)
    shutil.rmtree(lease_dir(instance, run_id), ignore_errors=True)
