"""The compiled loop of the candidate search's per-image cap (engine._nearest_of).

Each image keeps its k nearest candidate pairs (by distance, then by the other image's number);
a pair stays when either of its images keeps it. Written as loops over the pairs so that the
only arrays it allocates are one count per image and distance (int32) and the pairs tied at an
image's k-th distance: the numpy expression of the same arithmetic made half a dozen temporaries
of every pair and of every image x distance, fresh memory the kernel zeroes page by page.
Nothing here knows what a dataset is.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def nearest_keep(a, b, dist, k, size, keep):
    """keep[i] = True for each pair (a[i], b[i]) at distance dist[i] (a pair listed once, nodes
    below `size`, distances >= 0) that is among the k nearest of a[i] or of b[i], ranked by
    distance, then by the other image's number. `keep` must be False on entry."""
    n = a.shape[0]
    levels = 1
    for i in range(n):
        levels = max(levels, np.int64(dist[i]) + 1)
    counts = np.zeros((size, levels), np.int32)
    for i in range(n):
        counts[a[i], dist[i]] += 1
        counts[b[i], dist[i]] += 1
    # an image's threshold: the distance of its k-th nearest (levels: it has fewer than k pairs);
    # before: how many of its pairs are nearer than that
    threshold = np.empty(size, np.int64)
    before = np.empty(size, np.int64)
    for v in range(size):
        run, t = 0, 0
        while t < levels and run + counts[v, t] < k:
            run += counts[v, t]
            t += 1
        threshold[v] = t
        before[v] = run
    # pairs nearer than either image's threshold stay; those at an image's threshold are ranked
    # among that image's ties by the other image's number
    offsets = np.zeros(size + 1, np.int64)
    for i in range(n):
        d = np.int64(dist[i])
        if d < threshold[a[i]] or d < threshold[b[i]]:
            keep[i] = True
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
    # each image keeps its ties up to its (k - before)-th other image: that one is its cut-off
    cutoff = np.full(size, -1, np.int64)
    for v in range(size):
        lo, hi = offsets[v], offsets[v + 1]
        if hi > lo:
            ties = np.sort(others[lo:hi])
            cutoff[v] = ties[min(k - before[v], hi - lo) - 1]
    for i in range(n):
        if not keep[i]:
            d = np.int64(dist[i])
            if (d == threshold[a[i]] and b[i] <= cutoff[a[i]]) or (d == threshold[b[i]] and a[i] <= cutoff[b[i]]):
                keep[i] = True


def warm() -> None:
    """Compile (or load from the cache) the loop for the types the engine passes."""
    keep = np.zeros(1, np.bool_)
    nearest_keep(np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(1, np.int16), 1, 2, keep)
