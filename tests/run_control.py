"""Drive whole `rewardhouse run` processes the way an operator, systemd or the OOM killer does:
start one in its own process group, watch its Dagster event log for a step, then signal the group.

The event log is read straight from the run's SQLite file (`history/runs/<run_id>.db`), so the
watcher costs a few milliseconds per poll and never takes a lock the run needs.
"""

from __future__ import annotations

import atexit
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

CLI = Path(sys.executable).with_name("rewardhouse")
# The steps of the `refresh` job, in the order one in-process run executes them (the kill test
# checks this list against the steps a real run starts, so a dataset added later is not missed).
def _job_steps() -> tuple[str, ...]:
    """The steps of the job `rewardhouse run` executes, in its plan's order (every dataset of the
    registry brings its own)."""
    from dagster._core.execution.api import create_execution_plan

    from pipeline.definitions import defs

    return tuple(create_execution_plan(defs.resolve_job_def("refresh")).step_keys_to_execute)


STEPS = _job_steps()


def env_for(home: Path) -> dict:
    env = {**os.environ, "REWARDHOUSE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "PYTHONWARNINGS": "ignore"}
    return env


def _default_signals() -> None:
    # As from a terminal or a service manager: SIGINT/SIGTERM not ignored (a background job's are).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # A run outlives no test session: killed with the process that started it, even by SIGKILL (Linux).
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_STARTED: list[subprocess.Popen] = []


@atexit.register
def _end_started_groups() -> None:
    """When the test session ends, however it ends short of SIGKILL, every run group it started
    ends with it (a failed or interrupted test leaves no `rewardhouse run` behind)."""
    for proc in _STARTED:
        if proc.poll() is None:
            kill_group(proc)


def start(home: Path, *argv: str) -> subprocess.Popen:
    proc = subprocess.Popen([str(CLI), "run", *argv], env=env_for(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_default_signals)
    _STARTED.append(proc)
    return proc


def run_dbs(home: Path) -> set[Path]:
    folder = home / "dagster" / "history" / "runs"
    return {p for p in folder.glob("*.db") if p.name != "index.db"} if folder.is_dir() else set()


def events(db: Path, step: str | None = None) -> list[str]:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05)
        try:
            if step is None:
                rows = con.execute("select dagster_event_type from event_logs where dagster_event_type is not null order by id")
            else:
                rows = con.execute("select dagster_event_type from event_logs where step_key = ? order by id", (step,))
            return [r[0] for r in rows.fetchall()]
        finally:
            con.close()
    except sqlite3.Error:
        return []


def started_steps(db: Path) -> set[str]:
    """The steps a run started (its STEP_START events)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("select distinct step_key from event_logs where dagster_event_type = 'STEP_START'")
        return {r[0] for r in rows.fetchall()}
    finally:
        con.close()


def wait_for_event(home: Path, before: set[Path], step: str, event: str, proc: subprocess.Popen,
                   timeout: float = 120.0) -> Path | None:
    """The new run's event-log file once `step` has logged `event`; None if the run ended first."""
    deadline = time.monotonic() + timeout
    db = None
    while time.monotonic() < deadline:
        if db is None:
            new = run_dbs(home) - before
            db = next(iter(new)) if new else None
        if db is not None and event in events(db, step):
            return db
        if proc.poll() is not None:
            return None
        time.sleep(0.003)
    raise TimeoutError(f"{step} did not log {event} within {timeout}s")


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def finish(proc: subprocess.Popen, timeout: float = 120.0) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def group_gone(pgid: int, timeout: float = 10.0) -> bool:
    """Every process of the group has exited (the pool's workers and Dagster's helpers included)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
