"""Benchmark: how long the everyday commands take to answer, as a user's shell runs them.

On a data root holding a release of the embedded sample (made first, not timed), each command
runs as a new process, warm (its files in the page cache, its bytecode compiled), five times; the
best and the median are printed against the goals: `sql`, `releases` and `status` under 1 s, an
unchanged `make run` (bootstrap included) within 8 s.

    python tests/benchmarks/bench_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).with_name("rewardhouse")
GOALS = {"sql": 1.0, "releases": 1.0, "status": 1.0, "make run (unchanged)": 8.0}


def timed(argv: list[str], env: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "data"
        env = {**os.environ, "REWARDHOUSE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
        timed([str(CLI), "run"], env)  # the release the commands read (not timed)
        commands = {
            "sql": [str(CLI), "sql", "select task, count(*) from mmrb2_pairs group by task"],
            "releases": [str(CLI), "releases"],
            "status": [str(CLI), "status"],
            "make run (unchanged)": ["make", "-s", "run"],
        }
        print(f"start-up: each command {args.repeat} times on a sample release, warm, as new processes")
        for name, argv in commands.items():
            timed(argv, env)  # warm
            runs = [timed(argv, env) for _ in range(args.repeat if name != "make run (unchanged)" else 3)]
            best, median = min(runs), statistics.median(runs)
            verdict = "met" if median <= GOALS[name] else "NOT met"
            print(f"  {name:22s} best {best:5.2f} s  median {median:5.2f} s   goal <= {GOALS[name]:g} s: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
