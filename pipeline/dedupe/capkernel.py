"""The compiled loops of the candidate search's per-image cap (engine._nearest_of, engine._capped).

Each image keeps its k nearest candidate pairs (by distance, then by the other image's number);
a pair stays when either of its images keeps it. In phases, so that the pairs can come in
batches, read twice (engine._capped: search.NearPairs keeps them in DuckDB):

1. `add_counts`: each image's pairs counted per distance (int32, images x distances);
2. `limits`: each image's threshold, the distance of its k-th nearest (the number of distances:
   fewer than k pairs), and how many of its pairs are nearer;
3. `classify`: a pair nearer than either image's threshold stays (`below`); a pair at an image's
   threshold (`at`) is ranked among that image's ties;
4. `keep_ties`: over every pair at a threshold, each image keeps its ties up to its
   (k - nearer)-th other image, by number.

The only arrays they allocate are the counts and the pairs at a threshold: whole-array numpy of
the same arithmetic made half a dozen temporaries of every pair and of every image x distance,
fresh memory zeroed page by page. Nothing here knows what a dataset is.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def add_counts(a, b, dist, counts):
    """counts[v, d] += the pairs (a[i], b[i]) at distance d that image v is in."""
    for i in range(a.shape[0]):
        counts[a[i], dist[i]] += 1
        counts[b[i], dist[i]] += 1


@njit(cache=True, nogil=True)
def limits(counts, k, threshold, before):
    """Per image v: threshold[v], the distance of its k-th nearest pair (counts.shape[1]: it has
    fewer than k), and before[v], its pairs nearer than that."""
    levels = counts.shape[1]
    for v in range(counts.shape[0]):
        run, t = 0, 0
        while t < levels and run + counts[v, t] < k:
            run += counts[v, t]
            t += 1
        threshold[v] = t
        before[v] = run


@njit(cache=True, nogil=True)
def classify(a, b, dist, threshold, below, at):
    """below[i]: the pair is nearer than either image's threshold (it stays); at[i]: it lies at
    either image's threshold (it is ranked among that image's ties)."""
    for i in range(a.shape[0]):
        d = np.int64(dist[i])
        ta, tb = threshold[a[i]], threshold[b[i]]
        below[i] = d < ta or d < tb
        at[i] = d == ta or d == tb


@njit(cache=True, nogil=True)
def keep_ties(a, b, dist, below, threshold, before, k, keep):
    """Over every pair at some image's threshold (classify's `at`), each listed once: keep[i] when
    below[i], or when the pair is among its (k - before)-th other images, by number, for an image
    at whose threshold it lies."""
    n = a.shape[0]
    size = threshold.shape[0]
    offsets = np.zeros(size + 1, np.int64)
    for i in range(n):
        d = np.int64(dist[i])
        if d == threshold[a[i]]:
            offsets[a[i] + 1] += 1
        if d == threshold[b[i]]:
            offsets[b[i] + 1] += 1
    for v in range(size):
        offsets[v + 1] += offsets[v]
    others = np.empty(offsets[size], np.int64)
    fill = offsets[:size].copy()
    for i in range(n):
        d = np.int64(dist[i])
        if d == threshold[a[i]]:
            others[fill[a[i]]] = b[i]
            fill[a[i]] += 1
        if d == threshold[b[i]]:
            others[fill[b[i]]] = a[i]
            fill[b[i]] += 1
    cutoff = np.full(size, -1, np.int64)
    for v in range(size):
        lo, hi = offsets[v], offsets[v + 1]
        if hi > lo and k > before[v]:
            ties = np.sort(others[lo:hi])
            cutoff[v] = ties[min(k - before[v], hi - lo) - 1]
    for i in range(n):
        d = np.int64(dist[i])
        keep[i] = below[i] or (d == threshold[a[i]] and b[i] <= cutoff[a[i]]) or (
            d == threshold[b[i]] and a[i] <= cutoff[b[i]])


@njit(cache=True, nogil=True)
def nearest_keep(a, b, dist, k, size, keep):
    """keep[i] = True for each pair (a[i], b[i]) at distance dist[i] (a pair listed once, nodes
    below `size`, distances >= 0) that is among the k nearest of a[i] or of b[i], ranked by
    distance, then by the other image's number: the four phases over pairs held at once."""
    n = a.shape[0]
    levels = 1
    for i in range(n):
        levels = max(levels, np.int64(dist[i]) + 1)
    counts = np.zeros((size, levels), np.int32)
    add_counts(a, b, dist, counts)
    threshold = np.empty(size, np.int64)
    before = np.empty(size, np.int64)
    limits(counts, k, threshold, before)
    below = np.empty(n, np.bool_)
    at = np.empty(n, np.bool_)
    classify(a, b, dist, threshold, below, at)
    for i in range(n):
        keep[i] = below[i]
    idx = np.flatnonzero(at)
    tied = np.empty(idx.shape[0], np.bool_)
    keep_ties(a[idx], b[idx], dist[idx], below[idx], threshold, before, k, tied)
    for j in range(idx.shape[0]):
        keep[idx[j]] = tied[j]


def warm() -> None:
    """Compile (or load from the cache) the loops for the types the engine passes."""
    keep = np.zeros(1, np.bool_)
    nearest_keep(np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(1, np.int16), 1, 2, keep)
