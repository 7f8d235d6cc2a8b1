"""Benchmark: one RLAIF-V shard at upstream shape, parsed, hashed, kept and exported, with its peak memory.

Upstream shards are 0.75-1.1 GB of parquet with ~6,000 rows each, every row embedding its JPEG. The
bench writes one such shard (default 6,000 rows of photo-like JPEGs, 640-1600 px, about 1.3 GB;
built once per --keep folder) and runs, each in its own child process so the peak RSS is its own:

    ours    pipeline.rlaifv.parse.parse_rlaifv (stream, contract, decode + hash every image over the
            cores, keep each in the image store) + the dedupe hashes table + the export's marks and
            files (pipeline.rlaifv.export: InternVL JSONL and TRL preference Parquet, images embedded)
    floor   the same shard streamed batch by batch with pyarrow (I/O and decompression only)

Printed: seconds, rows/s, peak RSS of each, against the goal (memory < 1 GB).

    python tests/benchmarks/bench_rlaifv.py [--rows 6000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GOAL_MB = 1024
SHARD = "openbmb/RLAIF-V-Dataset/RLAIF-V-Dataset_000.parquet"
WORDS = ("the a man woman dog cat car tree sky red blue green small large left right near far holding standing "
         "sitting table window street building light water").split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def make_shard(path: Path, rows: int) -> None:
    """Rows in RLAIF-V's columns, each with its own photo-like JPEG, written in row groups of 64."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from bench_hashing import photo_like

    from pipeline.rlaifv.sample import SCHEMA

    rng = random.Random(3)
    path.parent.mkdir(parents=True, exist_ok=True)
    with multiprocessing.get_context("fork").Pool() as pool, \
            pq.ParquetWriter(path, SCHEMA, compression="zstd") as writer:
        batch = []
        for i, data in enumerate(pool.imap(photo_like, range(rows), chunksize=8)):
            meta = {"model": rng.choice(("OmniLMM-12B", "LLaVA-1.5-7B")), "feedback_model": "RLAIF-V-12B",
                    "type": rng.choice(("question_answering", "detailed_description"))}
            batch.append({"ds_name": rng.choice(("RLAIF-V", "RLAIF-V-llava", "RLAIF-V-omni")),
                          "image": {"bytes": data, "path": f"{i}.jpg"},
                          "question": f"{_text(rng, 8)} What is shown in picture {i}?",
                          "chosen": _text(rng, 40), "rejected": _text(rng, 40),
                          "origin_dataset": rng.choice(("COCO", "VQAv2", "GQA")), "origin_split": json.dumps(meta),
                          "idx": str(100_000 + i), "image_path": f"images/{i}.jpg"})
            if len(batch) == 64:
                writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
                batch = []
        if batch:
            writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))


def child_ours(root: Path, work: Path) -> dict:
    import pyarrow as pa

    from pipeline.dedupe.decisions import hashes_table
    from pipeline.imaging import ImageStore
    from pipeline.rlaifv.export import build_export, mark_pairs
    from pipeline.rlaifv.parse import parse_rlaifv
    from pipeline.settings import QualitySettings, ZipLimits

    start = time.perf_counter()
    parsed = parse_rlaifv([root / SHARD], ZipLimits(), QualitySettings(), root=root, store=ImageStore(work / "store"))
    parse_s = time.perf_counter() - start
    sizes = dict(zip(parsed.images["image_key"].to_pylist(), parsed.images["bytes"].to_pylist()))
    hashes = hashes_table("rlaifv", parsed.hashed, sizes)
    clusters = pa.table({"dataset": pa.array([], pa.string()), "image_key": pa.array([], pa.string()),
                         "cluster_id": pa.array([], pa.string())})
    pairs = mark_pairs(parsed.pairs, clusters)
    result = build_export(pairs, parsed.images, work / "exports", work / "store")
    return {"seconds": time.perf_counter() - start, "parse_seconds": parse_s, "rows": parsed.pairs.num_rows,
            "images_ok": parsed.images.filter(pa.compute.equal(parsed.images["status"], "ok")).num_rows,
            "hashes": hashes.num_rows, "exported": result.rows, "trl_mb": result.trl.stat().st_size / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child_floor(root: Path) -> dict:
    from pipeline.staging import streaming_parquet

    start = time.perf_counter()
    rows = nbytes = 0
    for batch in streaming_parquet(root / SHARD).iter_batches(batch_size=64):
        rows += batch.num_rows
        nbytes += batch.nbytes
    return {"seconds": time.perf_counter() - start, "rows": rows,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(which: str, root: Path, work: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", which, str(root), str(work)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--keep", type=Path, help="build the shard here and reuse it on later runs")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-rlaifv-"))
    root = base / f"mirror-{args.rows}"
    shard = root / SHARD
    if not shard.is_file():
        t = time.perf_counter()
        make_shard(shard, args.rows)
        print(f"built {shard} ({args.rows:,} rows, {shard.stat().st_size / 2**30:.2f} GB) in {time.perf_counter() - t:.0f} s")
    size_gb = shard.stat().st_size / 2**30
    work = base / "work"
    try:
        floor = run_child("floor", root, work)
        shutil.rmtree(work, ignore_errors=True)
        ours = run_child("ours", root, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"RLAIF-V at upstream shape: one shard of {floor['rows']:,} rows, {size_gb:.2f} GB, embedded JPEGs")
    print(f"  floor   {floor['seconds']:7.1f} s  {floor['rows'] / floor['seconds']:8,.0f} rows/s  "
          f"peak RSS {floor['peak_rss_mb']:6.0f} MB   (stream the shard, nothing else)")
    print(f"  ours    {ours['seconds']:7.1f} s  {ours['rows'] / ours['seconds']:8,.0f} rows/s  "
          f"peak RSS {ours['peak_rss_mb']:6.0f} MB   (parse {ours['parse_seconds']:.1f} s: contract, decode + hash "
          f"{ours['images_ok']:,} images, keep them; then hashes table, marks, export of {ours['exported']:,} rows, "
          f"TRL file {ours['trl_mb']:.0f} MB)")
    ok = ours["peak_rss_mb"] < GOAL_MB
    print(f"  goal: memory < {GOAL_MB} MB: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        which, root, work = sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
        print(json.dumps(child_ours(root, work) if which == "ours" else child_floor(root)))
    else:
        sys.exit(main())
