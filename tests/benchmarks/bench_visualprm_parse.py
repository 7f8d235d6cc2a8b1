"""Benchmark: parse N VisualPRM rows (default 50,000) from parquet, against peers in the same run.

    ours    readers.load_parquet_input + parse.parse_prm + stats.label_stats (DuckDB, set-based)
    python  the obvious per-row loop: json.loads each `messages`, walk the turns, build rows
    floor   read the two columns from the parquet file (I/O + decompression only)

Rows look like mm-eval/VisualPRM400K: ~1.4 kB of messages, 1-16 steps, path-only media.
Usage: python tests/benchmarks/bench_visualprm_parse.py [rows]
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

MEDIA = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


def make_shard(path: Path, n: int) -> None:
    rng = random.Random(11)
    words = "the angle triangle sum of sides equals therefore we compute area radius circle so answer is".split()
    ids, media, messages = [], [], []
    for i in range(n):
        steps = rng.randint(1, 16)
        first_bad = rng.randrange(steps) if rng.random() < 0.35 else None
        turns = [{"from": "system", "value": "You are a process supervision model."}]
        for k in range(steps):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(6, 18))) + "."
            if k == 0:
                text = f"### Question:\n<image>\nWhat is x in figure {i // 4}?\n\n### Solution Process:\n{text}"
            label = "-" if first_bad is not None and k >= first_bad else "+"
            turns += [{"from": "human", "value": text}, {"from": "gpt", "value": label}]
        ids.append(f"MathV360K_{i}")
        media.append([{"bytes": None, "path": f"MathV360K/data_images/{i // 4}.jpg"}])
        messages.append(json.dumps(turns))
    pq.write_table(pa.table({"id": ids, "media": pa.array(media, type=MEDIA), "messages": messages}), path, compression="zstd")


def run_ours(path: Path) -> tuple[int, int]:
    from pipeline.visualprm.parse import parse_prm
    from pipeline.visualprm.readers import connect, load_parquet_input
    from pipeline.visualprm.stats import label_stats

    con = connect()
    load_parquet_input(con, [path])
    out = parse_prm(con)
    label_stats(out["prm_samples"])
    return out["prm_samples"].num_rows, out["prm_steps"].num_rows


def run_python(path: Path) -> tuple[int, int]:
    table = pq.read_table(path, columns=["id", "messages"])
    samples, steps = [], []
    for sid, raw in zip(table["id"].to_pylist(), table["messages"].to_pylist()):
        turns = [t for t in json.loads(raw) if t["from"] != "system"]
        question = turns[0]["value"].split("### Solution Process:\n", 1)
        for k in range(0, len(turns), 2):
            text = question[1] if k == 0 else turns[k]["value"]
            steps.append((sid, k // 2, text, turns[k + 1]["value"]))
        samples.append((sid, question[0], len(turns) // 2))
    return len(samples), len(steps)


def run_floor(path: Path) -> tuple[int, int]:
    table = pq.read_table(path, columns=["id", "messages"])
    return table.num_rows, 0


def timed(fn, path: Path, repeat: int = 3) -> tuple[float, tuple[int, int]]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(path)
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train-00000-of-00001.parquet"
        make_shard(path, n)
        mb = path.stat().st_size / 1e6
        run_ours(path)  # warm imports and DuckDB's JSON extension
        results = {name: timed(fn, path) for name, fn in (("floor", run_floor), ("python", run_python), ("ours", run_ours))}
    print(f"visualprm parse: {n} rows, shard {mb:.1f} MB (best of 3)")
    for name, (secs, (rows, steps)) in results.items():
        print(f"  {name:<6} {secs:6.2f}s  {rows / secs:9.0f} rows/s  ({rows} samples, {steps} steps)")
    ours, py = results["ours"][0], results["python"][0]
    print(f"  ours/python time {ours / py:.2f}x, ours/floor time {ours / results['floor'][0]:.1f}x")


if __name__ == "__main__":
    main()
