"""Benchmark: inventory of an MMRB2-like image zip, against peers measured in the same run.

    ours      pipeline.mmrb2.images.inventory_images, one process: stream each entry, sha256,
              one decode that validates it and gives pHash + dHash (what an MMRB2 task partition does)
    ours2     the same over 2 worker processes (the pipeline's default on 2 cores)
    two_pass  the design before it: stream + sha256 + full decode to validate, then read and
              decode every entry again to hash it (one process)
    floor     read every entry through zipfile and sha256 it, no decoding (the I/O + inflate floor)
    naive     extract the whole zip to disk, then open + decode + sha256 each file (no hashes)

Each runs in its own process so peak RSS (ru_maxrss) is its own (ours2's worker processes,
started by a fork server, are not in its figure; each holds one entry at a time). Prints seconds, images/s, peak
RSS and the ratios. Usage: python tests/benchmarks/bench_mmrb2_images.py [n_images]
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def generated_jpeg(rng: random.Random, noise: int = 40, quality: int = 85) -> bytes:
    """A JPEG of MMRB2's generated-image sizes: grain and sharp-edged blobs of colour."""
    from PIL import Image, ImageDraw

    w, h = rng.choice([(512, 384), (640, 480), (768, 512)])
    im = Image.effect_noise((w, h), noise).convert("RGB")
    draw = ImageDraw.Draw(im)
    for _ in range(12):
        x, y = rng.randrange(w), rng.randrange(h)
        draw.ellipse([x, y, x + rng.randrange(20, 200), y + rng.randrange(20, 200)],
                     fill=tuple(rng.randrange(256) for _ in range(3)))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def make_zip(path: Path, n: int) -> None:
    rng = random.Random(7)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i in range(n):
            zf.writestr(f"images/pair{i // 4}_{i % 4}.jpg", generated_jpeg(rng))


def run_ours(zip_path: Path, workers: int = 1) -> int:
    from pipeline.mmrb2.images import inventory_images
    from pipeline.settings import ZipLimits

    with zipfile.ZipFile(zip_path) as zf:
        names = {n[len("images/"):] for n in zf.namelist()}
    table, _, hashed = inventory_images(zip_path, names, ZipLimits(), workers=workers)
    assert len(hashed) == table.num_rows
    return table.num_rows


def run_two_pass(zip_path: Path) -> int:
    from PIL import Image

    from pipeline.dedupe.hashing import hash_zip
    from pipeline.settings import ZipLimits

    n = 0
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            data = zf.read(info)
            hashlib.sha256(data).hexdigest()
            with Image.open(io.BytesIO(data)) as im:
                im.load()
            n += 1
        items = [(i.filename, i.filename) for i in zf.infolist()]
    assert all(r.error is None for r in hash_zip(zip_path, items, ZipLimits(), workers=1))
    return n


def run_floor(zip_path: Path) -> int:
    n = 0
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            hashlib.sha256(zf.read(info)).hexdigest()
            n += 1
    return n


def run_naive(zip_path: Path) -> int:
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(tmp)
        n = 0
        for file in sorted(Path(tmp).rglob("*.jpg")):
            data = file.read_bytes()
            hashlib.sha256(data).hexdigest()
            with Image.open(file) as im:
                im.load()
            n += 1
    return n


def child(which: str, zip_path: str) -> None:
    # Imports (and pyarrow's lazy pandas import) are paid before the clock starts, by every peer.
    import pyarrow as pa
    from PIL import Image  # noqa: F401

    import pipeline.mmrb2.images  # noqa: F401

    pa.Table.from_pylist([{"a": 1}])
    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    peers = {"ours": run_ours, "ours2": lambda z: run_ours(z, workers=2), "two_pass": run_two_pass,
             "floor": run_floor, "naive": run_naive}
    rows = peers[which](Path(zip_path))
    seconds = time.perf_counter() - start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"which": which, "rows": rows, "seconds": seconds, "peak_rss_mb": rss_mb, "growth_mb": rss_mb - base_mb}))


def measure(which: str, zip_path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", which, str(zip_path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1200
    with tempfile.TemporaryDirectory() as tmp:
        zip_path = Path(tmp) / "image.zip"
        t = time.perf_counter()
        make_zip(zip_path, n)
        size_mb = zip_path.stat().st_size / 1e6
        print(f"mmrb2 images: {n} JPEGs, zip {size_mb:.1f} MB (generated in {time.perf_counter() - t:.1f}s)")
        results = {w: measure(w, zip_path) for w in ("floor", "naive", "two_pass", "ours", "ours2")}
    for w, r in results.items():
        print(f"  {w:<8} {r['seconds']:7.2f}s  {r['rows'] / r['seconds']:8.0f} images/s  "
              f"peak RSS {r['peak_rss_mb']:5.0f} MB (+{r['growth_mb']:.0f} MB while working)")
    ours = results["ours"]
    print(f"  ours/floor time {ours['seconds'] / results['floor']['seconds']:.2f}x, "
          f"ours/naive time {ours['seconds'] / results['naive']['seconds']:.2f}x, "
          f"ours/two_pass time {ours['seconds'] / results['two_pass']['seconds']:.2f}x, "
          f"ours2/two_pass time {results['ours2']['seconds'] / results['two_pass']['seconds']:.2f}x, "
          f"ours memory growth / zip size {ours['growth_mb'] / size_mb:.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
