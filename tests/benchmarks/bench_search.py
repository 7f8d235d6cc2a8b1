"""Benchmark: exact Hamming-radius search (pipeline.dedupe.search.near_pairs) against brute force.

Input: n uniformly random 64-bit hashes, then 1,000 planted pairs whose distances cycle through
0..r (pair k: a random hash and a copy with k % (r+1) random bits flipped, written over random
slots). For each (n, r) it reports the best-of-k time, pairs found, recall of the planted pairs
(must be 100 %), candidates the joins verified, and peak RSS. At 100k the numpy brute force
(blocked XOR + popcount over all n(n-1)/2 pairs) runs too: its time, the speedup, and whether
both return the very same pair list. Each run is its own process, so peak RSS is its own; imports
are paid before the clock. Then the engine's whole candidate search (five routes, the per-image
caps) at 1M images, uniform and crowded, and on images that are all look-alikes of 40 families at
20k, 40k and 80k images, where the pairs grow with the square of n: its peak RSS must not (the
search's pairs stay in DuckDB, kept to search.MEMORY_LIMIT, and are read back in batches).

Usage: python tests/benchmarks/bench_search.py [r ...]   (default: 8 10)
"""

from __future__ import annotations

import hashlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import pipeline  # noqa: E402,F401  (its process settings, before NumPy loads, as in every rewardhouse process)

PLANTED = 1_000
FAMILIES = 40  # the `families` mix: every image in one of these, its pairs growing with the square of n
TARGET_SECONDS = 30.0


def make_hashes(n: int, r: int, seed: int = 42):
    import numpy as np

    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 1 << 64, size=n, dtype=np.uint64)
    slots = rng.choice(n, size=2 * PLANTED, replace=False)
    planted = []
    for k in range(PLANTED):
        i, j = int(slots[2 * k]), int(slots[2 * k + 1])
        flip = 0
        for bit in rng.choice(64, size=k % (r + 1), replace=False):
            flip |= 1 << int(bit)
        hashes[j] = hashes[i] ^ np.uint64(flip)
        planted.append((min(i, j), max(i, j)))
    return hashes.view(np.int64), planted


def popcount64(x):
    import numpy as np

    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    table = np.array([bin(v).count("1") for v in range(256)], dtype=np.uint8)
    return table[x.view(np.uint8)].reshape(*x.shape, 8).sum(axis=-1, dtype=np.uint8)


def brute_force(hashes, r: int, block: int = 128):
    """Every pair within r by XOR + popcount over all pairs, a block of rows at a time."""
    import numpy as np

    u = hashes.view(np.uint64)
    n = len(u)
    a_parts, b_parts, d_parts = [], [], []
    for start in range(0, n, block):
        rows = u[start : start + block]
        dist = popcount64(rows[:, None] ^ u[None, start:])
        i, j = np.nonzero(dist <= r)
        upper = j > i  # column j is node start + j; row i is node start + i
        a_parts.append(start + i[upper])
        b_parts.append(start + j[upper])
        d_parts.append(dist[i[upper], j[upper]])
    a, b, d = np.concatenate(a_parts), np.concatenate(b_parts), np.concatenate(d_parts)
    order = np.lexsort((b, a))
    return a[order], b[order], d[order]


def digest(a, b, d) -> str:
    import numpy as np

    h = hashlib.sha256()
    for col in (a, b, d):
        h.update(np.ascontiguousarray(col, dtype=np.int64).tobytes())
    return h.hexdigest()[:12]


def child(which: str, n: int, r: int, repeats: int) -> None:
    import numpy as np

    from pipeline.dedupe.search import band_layout, band_radii, count_candidates, near_pairs

    hashes, planted = make_hashes(n, r)
    ids = np.arange(n, dtype=np.int64)
    near_pairs(ids[:1000], hashes[:1000], r)  # DuckDB's first-connection cost, outside the clock
    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        if which == "ours":
            table = near_pairs(ids, hashes, r)
            a, b, d = table["a"].to_numpy(), table["b"].to_numpy(), table["distance"].to_numpy()
        else:
            a, b, d = brute_force(hashes, r)
        times.append(time.perf_counter() - start)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    found = set(zip(a.tolist(), b.tolist()))
    out = {
        "which": which, "n": n, "r": r, "seconds": min(times), "all_seconds": times, "pairs": len(a),
        "recall": sum(p in found for p in planted) / len(planted), "digest": digest(a, b, d),
        "peak_rss_mb": rss_mb, "growth_mb": rss_mb - base_mb,
    }
    if which == "ours":
        layout = band_layout(r, n_hashes=n)
        out["bands"] = [w for _, w in layout]
        out["radii"] = band_radii(r, layout)
        out["candidates"] = count_candidates(hashes, r)
    print(json.dumps(out))


def engine_child(mix: str, n: int, r: int) -> None:
    """The engine's whole candidate search (five routes: pHash and crop hashes in one search, top and
    bottom hashes in two more, the robust hashes of the pictures in a fourth; the per-image cap) over
    n images. `mix`: "random" (uniform hashes, every image a picture), or "crowded": 30 % flat images
    (left out of the search) and 30 % look-alike figures (3,000 templates, each image its template
    with up to 5 bits flipped on every route; figures have no robust hash). 1,000 planted
    pHash pairs at distances 0..r among the uniform rows must all be found."""
    import numpy as np

    from pipeline.dedupe.engine import candidate_pairs

    rng = np.random.default_rng(7)
    cols = [rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64) for _ in range(5)]
    searchable = np.ones(n, bool)
    crowded = np.zeros(n, bool)
    if mix == "families":  # every image in one of FAMILIES look-alike families: cliques of pairs
        for c in cols:
            templates = rng.integers(-2**63, 2**63 - 1, FAMILIES, dtype=np.int64)
            masks = np.zeros(n, np.uint64)
            for _ in range(3):
                masks |= np.uint64(1) << rng.integers(0, 64, n).astype(np.uint64)
            c[:] = (templates[rng.integers(0, FAMILIES, n)].view(np.uint64) ^ masks).view(np.int64)
        candidate_pairs(*(c[:1000] for c in cols[:4]), searchable[:1000], r)
        start = time.perf_counter()
        pairs = candidate_pairs(*cols[:4], searchable, r, robust=cols[4], robust_ok=searchable)
        seconds = time.perf_counter() - start
        print(json.dumps({"mix": mix, "n": n, "r": r, "seconds": seconds, "candidates": len(pairs),
                          "capped": pairs.capped, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    if mix == "crowded":
        searchable = rng.random(n) >= 0.3
        crowded = searchable & (rng.random(n) < 0.43)
        idx = np.flatnonzero(crowded)
        which = rng.integers(0, 3000, len(idx))
        for c in cols:
            templates = rng.integers(-2**63, 2**63 - 1, 3000, dtype=np.int64)
            masks = np.zeros(len(idx), np.uint64)
            for _ in range(5):
                masks |= np.uint64(1) << rng.integers(0, 64, len(idx)).astype(np.uint64)
            c[idx] = (templates[which].view(np.uint64) ^ masks).view(np.int64)
    plain = np.flatnonzero(searchable & ~crowded)
    slots = rng.choice(plain, 2 * PLANTED, replace=False)
    planted = []
    for k in range(PLANTED):
        a, b = slots[2 * k], slots[2 * k + 1]
        flip = rng.choice(64, k % (r + 1), replace=False)
        cols[0][b] = cols[0][a] ^ np.int64(sum(1 << int(x) for x in flip) - (1 << 64 if 63 in flip else 0))
        planted.append((min(a, b), max(a, b)))
    routes, robust, pictures = cols[:4], cols[4], ~crowded
    candidate_pairs(*(c[:1000] for c in routes), searchable[:1000], r)  # DuckDB's first connection, outside the clock
    start = time.perf_counter()
    pairs = candidate_pairs(*routes, searchable, r, robust=robust, robust_ok=pictures)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the recall check's own sets
    planted_found = np.isin(np.array([a * n + b for a, b in planted]), pairs.a * n + pairs.b).mean()
    print(json.dumps({"mix": mix, "n": n, "r": r, "seconds": seconds, "candidates": len(pairs), "capped": pairs.capped,
                      "searched": int(searchable.sum()), "recall": float(planted_found), "peak_rss_mb": peak}))


def measure(which: str, n: int, r: int, repeats: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", which, str(n), str(r), str(repeats)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    radii = [int(x) for x in sys.argv[1:]] or [8, 10]
    print(f"search: uniform random 64-bit hashes + {PLANTED} planted pairs at distances 0..r; "
          f"best of k runs, each (n, r) in its own process")
    verdicts = []
    for r in radii:
        print(f"r = {r}")
        small = measure("ours", 100_000, r, 3)
        brute = measure("brute", 100_000, r, 1)
        big = measure("ours", 1_000_000, r, 2)
        for res in (small, brute, big):
            name = "brute" if res["which"] == "brute" else "ours"
            line = (f"  {name:<5} n={res['n']:>9,}  {res['seconds']:7.2f}s  pairs {res['pairs']:>6,}  "
                    f"recall {res['recall']:.1%}  peak RSS {res['peak_rss_mb']:5.0f} MB "
                    f"(+{res['growth_mb']:.0f} MB while working)")
            if name == "ours":
                all_pairs = res["n"] * (res["n"] - 1) // 2
                line += (f"  candidates {res['candidates']:,} ({res['candidates'] / all_pairs:.2e} of all pairs)"
                         f"  bands {res['bands']} radii {res['radii']}")
            print(line)
        same = small["digest"] == brute["digest"]
        print(f"  100k: ours == brute force pair for pair: {'yes' if same else 'NO'}; "
              f"speedup {brute['seconds'] / small['seconds']:.0f}x; brute force at 1M (n^2 extrapolation) "
              f"~{brute['seconds'] * 100:,.0f}s, ours {big['seconds']:.1f}s")
        ok = big["seconds"] < TARGET_SECONDS and big["recall"] == 1.0 and small["recall"] == 1.0 and same
        verdicts.append(f"r={r}: 1M in {big['seconds']:.1f}s -> target < {TARGET_SECONDS:.0f}s "
                        f"{'MET' if ok else 'NOT MET'}")
    print("target (1M hashes searched in < 30 s on this machine, recall 100 %): " + "; ".join(verdicts))

    from pipeline.settings import DEFAULT_MAX_DISTANCE

    r = DEFAULT_MAX_DISTANCE
    print(f"\nengine candidate search: 1M images, five routes (pHash + crop hash, top, bottom, robust), radius {r}, "
          "each in its own process")
    for mix in ("random", "crowded"):
        out = subprocess.run([sys.executable, __file__, "--engine", mix, "1000000", str(r)],
                             capture_output=True, text=True, check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  {mix:<8} {res['seconds']:6.1f}s  searched {res['searched']:,} of {res['n']:,}  candidates "
              f"{res['candidates']:,} (+{res['capped']:,} findings beyond the per-image caps)  planted recall {res['recall']:.1%}  "
              f"peak RSS {res['peak_rss_mb']:.0f} MB  -> target < {TARGET_SECONDS:.0f}s "
              f"{'MET' if res['seconds'] < TARGET_SECONDS and res['recall'] == 1.0 else 'NOT MET'}")
    print(f"\nengine candidate search on look-alike families only (every image in one of {FAMILIES}, up to 3 bits "
          "from its template on every route): the pairs grow with the square of n, memory must not")
    for n in (20_000, 40_000, 80_000):
        out = subprocess.run([sys.executable, __file__, "--engine", "families", str(n), str(r)],
                             capture_output=True, text=True, check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  n={n:>6,} {res['seconds']:6.1f}s  findings {res['candidates'] + res['capped']:>12,}  "
              f"candidates {res['candidates']:,}  peak RSS {res['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--engine":
        engine_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
