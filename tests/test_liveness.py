"""Who holds what, and whether they are alive: holders, lock files and their waiting lines
(plain Python, no Dagster)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.liveness import HOST, STALE_AFTER_SECONDS, Busy, Heartbeat, Holder, heartbeat_of, process_start
from warehouse.store import exclusive_lock, lock_holder

REPO = Path(__file__).resolve().parents[1]

# Holds a lock file until its stdin closes; says "held" once it does.
HOLDER = """
import sys
from pathlib import Path
from pipeline.liveness import set_process_label
from warehouse.store import exclusive_lock
set_process_label("test holder")
with exclusive_lock(Path(sys.argv[1]), "the test lock"):
    print("held", flush=True)
    sys.stdin.read()
"""


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_this_process_is_alive_and_an_exited_one_is_not():
    me = Holder.me("test")
    assert me.pid == os.getpid() and me.host == HOST and me.alive()
    gone = replace(me, pid=dead_pid())
    assert not gone.alive()
    assert gone.why_dead() == f"process {gone.pid} on {HOST} is gone"


def test_a_recycled_pid_is_not_taken_for_the_holder():
    me = Holder.me()
    started = process_start(os.getpid())
    assert started is not None and abs(started - time.time()) < 3600 * 24 * 365
    # Same pid, but the process that has it started at another moment: not the holder.
    assert not replace(me, started=me.started - 30).alive()


def test_a_holder_on_another_host_lives_by_its_heartbeat():
    other = replace(Holder.me(), host="elsewhere", pid=dead_pid())
    now = time.time()
    assert other.alive(heartbeat=now - 1, now=now)
    assert not other.alive(heartbeat=now - STALE_AFTER_SECONDS - 1, now=now)
    assert not other.alive(heartbeat=None, now=now)
    assert "stopped its heartbeat" in other.why_dead(now - 100)


def test_a_holder_from_before_a_reboot_is_dead():
    before = replace(Holder.me(), boot_id="00000000-0000-0000-0000-000000000000")
    if not Holder.me().boot_id:
        pytest.skip("no boot id on this system")
    assert not before.alive()
    assert "rebooted" in before.why_dead()


def test_heartbeat_touches_the_lease_until_stopped(tmp_path):
    lease = tmp_path / "lease.json"
    lease.write_text(Holder.me().to_json())
    os.utime(lease, (0, 0))
    beat = Heartbeat(lease, every=0.05).start()
    time.sleep(0.3)
    beat.stop()
    first = heartbeat_of(lease)
    assert first is not None and time.time() - first < 5
    time.sleep(0.2)
    assert heartbeat_of(lease) == first
    assert Holder.from_json(lease.read_text()).pid == os.getpid()  # the content is never rewritten


def test_holder_round_trips_and_rejects_junk():
    me = Holder.me("x")
    assert Holder.from_json(me.to_json()) == me
    assert Holder.from_json("{not json") is None
    assert Holder.from_json('{"pid": 1}') is None


def test_a_held_lock_names_its_holder_and_no_wait_fails_at_once(tmp_path):
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        who = lock_holder(lock)
        assert who is not None and who.pid == holder.pid and who.label == "test holder"
        started = time.monotonic()
        with pytest.raises(Busy) as busy:
            with exclusive_lock(lock, "the test lock", wait=False):
                pass
        assert time.monotonic() - started < 1
        assert re.fullmatch(rf"busy: the test lock: held by pid {holder.pid} on {re.escape(HOST)} \(test holder\) "
                            rf"since \d\d:\d\d:\d\d \({re.escape(str(lock))}\)", str(busy.value)), str(busy.value)

        # A waiter sleeps and repeats the line every `every` seconds until the holder lets go.
        said: list[str] = []
        def release_later():
            time.sleep(0.8)
            holder.stdin.close()
        threading.Thread(target=release_later, daemon=True).start()
        cpu = time.process_time()
        with exclusive_lock(lock, "the test lock", said.append, every=0.3):
            me = lock_holder(lock)
        assert time.process_time() - cpu < 0.2  # slept, did not spin
        assert len(said) >= 2 and all(line.startswith("waiting for the test lock: held by pid") for line in said)
        assert me is not None and me.pid == os.getpid()
        assert lock_holder(lock) is None  # free again, and says so
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_whose_holder_was_killed_is_free_at_once(tmp_path):
    lock = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    started = time.monotonic()
    with exclusive_lock(lock, "the test lock", wait=False):
        assert lock_holder(lock).pid == os.getpid()
    assert time.monotonic() - started < 1
