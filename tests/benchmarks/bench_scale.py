"""Benchmark: the scale-out paths against the local ones, measured in the same run.

    local pool    pipeline.dedupe.hashing.hash_zip, 2 worker processes (the machine's pool)
    ray           pipeline.dedupe.ray_executor.hash_zip_ray on a local Ray instance with 2 worker
                  CPUs bound to 127.0.0.1; its start-up (ray.init, the workers' first import)
                  is timed apart from the work
    ray from S3   the same, every task reading its entries by range from moto's S3 server
    read disk     the image zip read front to back from local disk (page cache warm, as the
                  pool sees it after the corpus is written)
    read S3       the same bytes from moto's standalone server on 127.0.0.1: one streamed GET,
                  and 4 MB range reads through the seekable reader the Ray tasks use

moto is a Python server: the S3 figures are a floor set by it, not by S3, R2 or MinIO.
Results of every path are compared with the local pool's, hash for hash.

Usage: python tests/benchmarks/bench_scale.py [n_images]   (default 3000)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from bench_hashing import SIZES, make_corpus  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    from pipeline.dedupe.hashing import hash_zip
    from pipeline.dedupe.ray_executor import connect, hash_zip_ray
    from pipeline.settings import ZipLimits
    from pipeline.sources.objects import open_object
    from tests.s3_server import aws_env, make_bucket, start_moto

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    workers = 2
    limits = ZipLimits()
    moto, endpoint = start_moto()
    os.environ.update(aws_env(endpoint))  # before Ray starts: its workers inherit the environment
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder, zip_path = Path(tmp) / "images", Path(tmp) / "images.zip"
            make_corpus(folder, zip_path, n)
            size = zip_path.stat().st_size
            entries = [(p.name, f"images/{p.name}") for p in sorted(folder.iterdir())]
            print(f"scale-out: {n} photo-like JPEGs ({', '.join(f'{w}x{h}' for w, h in SIZES)}), "
                  f"a {size / 1e6:.0f} MB zip; {workers} workers each way, {os.cpu_count()} cores")

            import obstore
            from obstore.store import S3Store

            bucket = make_bucket(endpoint, "bench-scale")
            store = S3Store(bucket, config={"endpoint": endpoint, "region": "us-east-1"}, client_options={"allow_http": True})
            _, put_s = timed(lambda: obstore.put(store, "images.zip", zip_path))
            url = f"s3://{bucket}/images.zip"

            ray, start_s = timed(lambda: connect(None, num_cpus=workers))
            # The workers' first task pays their imports: once, apart from the work.
            _, first_s = timed(lambda: hash_zip_ray(zip_path, entries[:workers * 4], limits, chunk=4))

            best: dict[str, float] = {}
            results: dict[str, list] = {}
            for _ in range(2):  # interleaved, the better time counts (the machine may be shared)
                for name, fn in (("local pool", lambda: hash_zip(zip_path, entries, limits, workers=workers)),
                                 ("ray", lambda: hash_zip_ray(zip_path, entries, limits)),
                                 ("ray from S3", lambda: hash_zip_ray(url, entries, limits))):
                    out, s = timed(fn)
                    results[name] = out
                    best[name] = min(best.get(name, s), s)
            ray.shutdown()

            def read_disk():
                with open(zip_path, "rb") as fh:
                    while fh.read(4 << 20):
                        pass

            def read_stream():
                for _chunk in obstore.get(store, "images.zip"):
                    pass

            def read_ranges():
                with open_object(url) as fh:
                    while fh.read(4 << 20):
                        pass

            reads: dict[str, float] = {}
            for _ in range(2):
                for name, fn in (("read disk", read_disk), ("read S3 stream", read_stream), ("read S3 4MB ranges", read_ranges)):
                    _, s = timed(fn)
                    reads[name] = min(reads.get(name, s), s)
    finally:
        moto.terminate()
        moto.wait(10)

    print(f"  ray start-up (init + workers' first task): {start_s:.1f}s + {first_s:.1f}s   (upload of the zip to S3: {put_s:.1f}s)")
    for name, s in best.items():
        same = results[name] == results["local pool"]
        print(f"  {name:<12} {s:6.2f}s  {n / s:6.0f} images/s   hashes == local pool: {same}")
    print(f"  ray / local pool time {best['ray'] / best['local pool']:.2f}x,  ray from S3 / local pool "
          f"{best['ray from S3'] / best['local pool']:.2f}x   (same 2 cores: the cost of Ray's scheduling, not a speed-up)")
    for name, s in reads.items():
        print(f"  {name:<20} {s:6.2f}s  {size / s / 1e6:7.0f} MB/s")
    print(f"  S3 stream / disk time {reads['read S3 stream'] / reads['read disk']:.1f}x,  "
          f"S3 ranges / disk {reads['read S3 4MB ranges'] / reads['read disk']:.1f}x   (moto on loopback)")


if __name__ == "__main__":
    main()
