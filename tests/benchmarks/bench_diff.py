"""Benchmark: `rewardhouse diff` of two releases with 1M `prm_steps` rows each.

Two releases are published into a temporary data root (not timed): `prm_steps` in the columns and
types of its contract, 1,000,000 rows over 125,000 samples; the second release drops 0.5 % of the
rows, adds as many new ones and flips the label of 1 %. Then `rewardhouse diff --format json` runs
as a new process, three times, and its wall time and peak RSS (the child's own, from wait4) are
printed against the goals: at most 5 s and under 1 GB on 2 cores. The counts it reports are
checked against the ones planted. `--rows` is timed too.

    python tests/benchmarks/bench_diff.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pipeline.contract import BOOL, FLOAT, INT, INT64, STRING  # noqa: E402
from pipeline.datasets import table_contracts  # noqa: E402
from warehouse.store import ReleaseStore  # noqa: E402

CLI = Path(sys.executable).with_name("rewardhouse")
GOAL_SECONDS, GOAL_BYTES = 5.0, 1 << 30
ARROW = {STRING: pa.string(), INT: pa.int32(), INT64: pa.int64(), FLOAT: pa.float64(), BOOL: pa.bool_()}
STEPS_PER_SAMPLE = 8

# Row i of the older release; the newer one drops i % 200 == 0, flips the label where i % 100 == 1,
# and adds rows n .. n + n/200 (new samples).
ROW = """
select 'bench_' || lpad((i // {per})::varchar, 7, '0') as sample_id, (i % {per}) as step_index,
       'Step ' || (i % {per}) || ': ' || md5(i::varchar) || ' so ' || md5((i * 7)::varchar) as text,
       {label} as label, (hash(i) % 1000) / 1000.0 as mc_score, (hash(i) % 16) as num_mc_correct, 16 as num_mc_total
from range({lo}, {hi}) t(i) {where}
"""
LABEL = "case when hash(i) % 10 < 8 then '+' else '-' end"
FLIPPED = f"case when i % 100 = 1 then (case when {LABEL} = '+' then '-' else '+' end) else {LABEL} end"


def steps_table(con: duckdb.DuckDBPyConnection, n: int, newer: bool) -> pa.Table:
    schema = pa.schema([(c, ARROW[kind]) for c, kind in table_contracts()["prm_steps"].columns.items()])
    old = ROW.format(per=STEPS_PER_SAMPLE, label=FLIPPED if newer else LABEL, lo=0, hi=n,
                     where="where i % 200 <> 0" if newer else "")
    query = old + (f" union all {ROW.format(per=STEPS_PER_SAMPLE, label=LABEL, lo=n, hi=n + n // 200, where='')}"
                   if newer else "")
    return con.sql(query).to_arrow_table().select(schema.names).cast(schema)


def publish(root: Path, n: int) -> None:
    store = ReleaseStore(root / "releases")
    with duckdb.connect() as con:
        for rid, newer in (("bench-older", False), ("bench-newer", True)):
            folder = root / "staged" / rid
            folder.mkdir(parents=True)
            path = folder / "prm_steps.parquet"
            pq.write_table(steps_table(con, n, newer), path, compression="zstd")
            store.publish(rid, {"prm_steps": path}, code_version="bench", sources={},
                          settings={"prm_label_threshold": 0.5 if newer else 0.0})
            time.sleep(0.01)  # created_at orders them


def run(argv: list[str], env: dict) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in bytes (the child's own) and stdout of one new process."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.read()[-2000:]}")
        return took, usage.ru_maxrss * 1024, out.read()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.rows
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        started = time.perf_counter()
        publish(root, n)
        print(f"diff: two releases of {n:,} prm_steps rows each, made in {time.perf_counter() - started:.1f} s; "
              f"{os.cpu_count()} cores")
        env = {**os.environ, "REWARDHOUSE_HOME": str(root), "PYTHONWARNINGS": "ignore"}
        for name, argv in (("diff", [str(CLI), "diff", "--format", "json"]),
                           ("diff --rows", [str(CLI), "diff", "--table", "prm_steps", "--rows", "--format", "json"])):
            runs = [run(argv, env) for _ in range(args.repeat)]
            if name == "diff":
                got = json.loads(runs[0][2])["tables"]["prm_steps"]
                want = {"added": n // 200, "removed": n // 200, "changed": len(range(1, n, 100))}
                if {k: got[k] for k in want} != want:
                    raise SystemExit(f"diff counted {got}, planted {want}")
            seconds = [r[0] for r in runs]
            peak = max(r[1] for r in runs)
            verdict = "met" if statistics.median(seconds) <= GOAL_SECONDS and peak < GOAL_BYTES else "NOT met"
            print(f"  {name:12s} best {min(seconds):5.2f} s  median {statistics.median(seconds):5.2f} s  "
                  f"peak RSS {peak / 2**20:6.0f} MiB   goal <= {GOAL_SECONDS:g} s and < 1 GiB: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
