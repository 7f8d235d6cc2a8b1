"""Benchmark: verification throughput, candidate pairs judged per second, as the engine batches them.

The pairs are the candidate pairs of a generated set (photo-like pictures and flat figures from
tests/dedupe_images.py, each with edited copies and look-alikes of one template), so the mix holds
copies that are accepted at the whole frame, crops that need the alignment search, overlays, and
look-alikes that are refused. The pool of pairs is repeated until `--pairs` pairs have been judged
(default 100,000), batch by batch through `pipeline.dedupe.engine.verify` as the engine calls it;
memory stays at one batch. Printed: pairs per second, the time for the whole, the share accepted,
and the share that needed the alignment search, against the goal of 100,000 pairs in 5 s.

    python tests/benchmarks/bench_verify.py [--pairs 100000] [--images 300]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import pipeline  # noqa: E402,F401  (its process settings, before NumPy loads, as in every rewardhouse process)

GOAL_PAIRS, GOAL_SECONDS = 100_000, 5.0


def corpus(images: int) -> dict[str, bytes]:
    """Bases (photos, bar charts, pies, pages) with 1-2 edited copies each and look-alikes."""
    import random

    from tests.dedupe_images import (bar_chart, blur, caption, caption_bar, crop, encode, grey, half, photo, pie_chart,
                                     text_page)

    rng = random.Random(5)
    edits = [lambda im: encode(im, "JPEG", 40), lambda im: encode(half(im), "PNG"),
             lambda im: encode(crop(im, 0.04), "JPEG", 90), lambda im: encode(caption(im), "JPEG", 90),
             lambda im: encode(caption_bar(im), "JPEG", 90), lambda im: encode(blur(im), "JPEG", 90),
             lambda im: encode(grey(im), "JPEG", 90)]
    makers = [lambda i: photo(100 + i), lambda i: bar_chart([rng.uniform(0.1, 0.9) for _ in range(5)]),
              lambda i: pie_chart([rng.uniform(1, 5) for _ in range(4)]), lambda i: text_page(1000 + i)]
    out = {}
    for i in range(images):
        im = makers[i % len(makers)](i)
        out[f"b{i}.png"] = encode(im)
        for k, edit in enumerate(rng.sample(edits, rng.randint(1, 2))):
            out[f"b{i}_e{k}.img"] = edit(im)
    return out


def main() -> int:
    import numpy as np

    from pipeline.dedupe.decisions import ThumbColumn
    from pipeline.dedupe.engine import BATCH, candidate_pairs, verify
    from pipeline.dedupe.hashing import hash_bytes
    from pipeline.dedupe.decisions import hashes_table

    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=GOAL_PAIRS)
    parser.add_argument("--images", type=int, default=300, help="base images of the generated set")
    args = parser.parse_args()

    files = corpus(args.images)
    hashed = [hash_bytes(k, v) for k, v in files.items()]
    rows = hashes_table("bench", [h for h in hashed if h.error is None], {k: len(v) for k, v in files.items()})
    cols = {c: rows[c].to_numpy() for c in ("phash", "crop_hash", "top_hash", "bottom_hash")}
    pairs = candidate_pairs(cols["phash"], cols["crop_hash"], cols["top_hash"], cols["bottom_hash"],
                            ~rows["flat"].to_numpy(zero_copy_only=False), 8)
    thumbs = ThumbColumn(rows["thumb"], rows["fine"])  # the second look reads the fine lumas, as in the engine
    thumbs.region_hashes = np.stack([cols["top_hash"], cols["bottom_hash"]], axis=1)  # the banner test's hint
    aspect = (rows["width"].to_numpy() / rows["height"].to_numpy()).astype(np.float64)
    chroma = np.stack([rows["chroma_cb"].to_numpy(), rows["chroma_cr"].to_numpy()], 1).astype(np.float64)
    print(f"verification: {rows.num_rows} images, {len(pairs)} candidate pairs in the pool, "
          f"judged until {args.pairs:,} pairs (batches of {BATCH})")
    if len(pairs) == 0:
        print("  no candidate pairs: nothing to measure")
        return 1
    reps = -(-args.pairs // len(pairs))
    a = np.tile(pairs.a, reps)[:args.pairs]
    b = np.tile(pairs.b, reps)[:args.pairs]
    verify(a[:64], b[:64], thumbs, aspect=aspect, chroma=chroma)  # warm-up (imports, caches)
    start = time.perf_counter()
    accepted, _, _ = verify(a, b, thumbs, aspect=aspect, chroma=chroma)
    seconds = time.perf_counter() - start
    rate = args.pairs / seconds
    print(f"  {args.pairs:,} pairs in {seconds:.1f} s: {rate:,.0f} pairs/s; {accepted.mean() * 100:.1f} % accepted")
    print(f"  goal: {GOAL_PAIRS:,} pairs in <= {GOAL_SECONDS:.0f} s ({GOAL_PAIRS / GOAL_SECONDS:,.0f} pairs/s): "
          f"{'met' if rate >= GOAL_PAIRS / GOAL_SECONDS else f'not met ({GOAL_PAIRS / rate:.0f} s for {GOAL_PAIRS:,})'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
