"""SIGTERM/SIGINT handling on its own (pipeline.stopping), in child processes that signal
themselves: a stop lands on a stop point, waits for a critical section to end, and a second
signal ends the process at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROGRAM = """
import os, signal, sys, time
from pipeline.stopping import SignalOwner, Stopped, critical_section, stop_point

def first(signum):
    print("first", signal.Signals(signum).name, flush=True)

def second(signum):
    print("second", signal.Signals(signum).name, flush=True)

mode = sys.argv[1]
with SignalOwner(first, second):
    try:
        if mode == "stop_point":
            os.kill(os.getpid(), signal.SIGTERM)
            for i in range(100):
                time.sleep(0.02)
                stop_point()
            print("not stopped", flush=True)
        elif mode == "critical":
            with critical_section():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.3)
                stop_point()  # no effect inside
                print("critical section finished", flush=True)
            print("not stopped", flush=True)
        elif mode == "second":
            with critical_section():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
                print("not stopped", flush=True)
        elif mode == "forced":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)  # no stop point: the stop is forced
            print("not stopped", flush=True)
    except Stopped as exc:
        print("stopped", signal.Signals(exc.signum).name, flush=True)
        sys.exit(128 + exc.signum)
"""


def run(mode: str) -> tuple[int, list[str], float]:
    started = time.monotonic()
    # SIGTERM/SIGINT ignored on entry, as in a background job: the owner takes them anyway.
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], cwd=REPO, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: (signal.signal(signal.SIGTERM, signal.SIG_IGN),
                                              signal.signal(signal.SIGINT, signal.SIG_IGN)))
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout.splitlines(), time.monotonic() - started


def test_a_stop_lands_on_the_next_stop_point():
    code, out, _ = run("stop_point")
    assert out == ["first SIGTERM", "stopped SIGTERM"] and code == 143


def test_a_stop_inside_a_critical_section_waits_for_its_end():
    code, out, _ = run("critical")
    assert out == ["first SIGTERM", "critical section finished", "stopped SIGTERM"] and code == 143


def test_a_second_signal_ends_the_process_at_once():
    code, out, _ = run("second")
    # at once: the child would print "not stopped" 5 s after the second signal
    assert out == ["first SIGTERM", "second SIGINT"] and code == 128 + signal.SIGINT


def test_a_run_that_reaches_no_stop_point_is_stopped_anyway():
    from pipeline.stopping import FORCE_AFTER_SECONDS

    code, out, took = run("forced")
    # stopped before the child's 30 s without a stop point end ("not stopped"), after waiting for one
    assert out == ["first SIGINT", "stopped SIGINT"] and code == 130
    assert took >= FORCE_AFTER_SECONDS
