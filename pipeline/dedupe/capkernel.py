"""The compiled loops of the candidate search's per-image cap (engine._nearest_of, engine._capped).

Each image keeps its k nearest candidate pairs (by distance, then by the other image's number);
a pair stays when either of its images keeps it. In phases, so that the pairs can come in
batches, read three times (engine._capped: search.NearPairs keeps them in DuckDB):

1. `add_counts`: each image's pairs counted per distance (int32, images x distances); then
   `limits`: each image's threshold, the distance of its k-th nearest (the number of distances:
   fewer than k pairs), and how many of its pairs are nearer;
2. `rank_ties`: among the pairs at an image's threshold, its k - nearer smallest other images,
   in a max-heap of that many slots per image (`tie_slots`); `cutoffs` reads each one's largest;
3. `keep_at`: a pair stays when it is nearer than either image's threshold, or at an image's
   threshold with the other image's number at most that image's cut-off.

Memory is the counts and at most k slots per image, whatever the pairs: thousands of images of
one hash, whose every pair is a tie, hold no more than a spread family. Nothing here knows what a
dataset is.
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
def tie_slots(threshold, before, k, levels, offsets):
    """The bounded buffers of `rank_ties`: image v gets k - before[v] slots when it has a threshold
    (k pairs or more), none otherwise; offsets (size + 1) says where each image's slots start.
    Returns the slots in all (at most k per image, whatever the pairs)."""
    size = threshold.shape[0]
    offsets[0] = 0
    for v in range(size):
        offsets[v + 1] = offsets[v] + (k - before[v] if threshold[v] < levels and k > before[v] else 0)
    return offsets[size]


@njit(cache=True, nogil=True)
def rank_ties(a, b, dist, threshold, offsets, heap, used):
    """Each image's smallest other numbers among its pairs at its threshold, as many as its slots
    (tie_slots), kept in a max-heap per image while batches of pairs come: memory is the slots,
    never the ties. After the last batch, `cutoffs` reads each image's cut-off."""
    for i in range(a.shape[0]):
        d = np.int64(dist[i])
        for side in range(2):
            v = a[i] if side == 0 else b[i]
            x = b[i] if side == 0 else a[i]
            if d != threshold[v]:
                continue
            lo, cap = offsets[v], offsets[v + 1] - offsets[v]
            if cap == 0:
                continue
            n = used[v]
            if n < cap:  # sift up
                j = n
                heap[lo + j] = x
                while j > 0:
                    parent = (j - 1) // 2
                    if heap[lo + parent] >= heap[lo + j]:
                        break
                    heap[lo + parent], heap[lo + j] = heap[lo + j], heap[lo + parent]
                    j = parent
                used[v] = n + 1
            elif x < heap[lo]:  # replace the largest, sift down
                heap[lo] = x
                j = 0
                while True:
                    left, right, top = 2 * j + 1, 2 * j + 2, j
                    if left < cap and heap[lo + left] > heap[lo + top]:
                        top = left
                    if right < cap and heap[lo + right] > heap[lo + top]:
                        top = right
                    if top == j:
                        break
                    heap[lo + top], heap[lo + j] = heap[lo + j], heap[lo + top]
                    j = top


@njit(cache=True, nogil=True)
def cutoffs(offsets, heap, used, cutoff):
    """Each image's cut-off: the largest other number it keeps among its ties (-1: none)."""
    for v in range(cutoff.shape[0]):
        cutoff[v] = heap[offsets[v]] if used[v] > 0 else -1


@njit(cache=True, nogil=True)
def keep_at(a, b, dist, threshold, cutoff, keep):
    """keep[i]: the pair is nearer than either image's threshold, or at an image's threshold and
    among the others that image keeps (its number at most the image's cut-off)."""
    for i in range(a.shape[0]):
        d = np.int64(dist[i])
        ta, tb = threshold[a[i]], threshold[b[i]]
        keep[i] = d < ta or d < tb or (d == ta and b[i] <= cutoff[a[i]]) or (d == tb and a[i] <= cutoff[b[i]])


@njit(cache=True, nogil=True)
def nearest_keep(a, b, dist, k, size, keep):
    """keep[i] = True for each pair (a[i], b[i]) at distance dist[i] (a pair listed once, nodes
    below `size`, distances >= 0) that is among the k nearest of a[i] or of b[i], ranked by
    distance, then by the other image's number: the phases over pairs held at once."""
    levels = 1
    for i in range(a.shape[0]):
        levels = max(levels, np.int64(dist[i]) + 1)
    counts = np.zeros((size, levels), np.int32)
    add_counts(a, b, dist, counts)
    threshold = np.empty(size, np.int64)
    before = np.empty(size, np.int64)
    limits(counts, k, threshold, before)
    offsets = np.empty(size + 1, np.int64)
    heap = np.empty(tie_slots(threshold, before, k, levels, offsets), np.int64)
    used = np.zeros(size, np.int64)
    rank_ties(a, b, dist, threshold, offsets, heap, used)
    cutoff = np.empty(size, np.int64)
    cutoffs(offsets, heap, used, cutoff)
    keep_at(a, b, dist, threshold, cutoff, keep)


def warm() -> None:
    """Compile (or load from the cache) every loop for the types the engine passes (int64 image
    numbers, int16 distances): engine._capped's phases and engine._nearest_of's nearest_keep."""
    a, b, d = np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(1, np.int16)
    keep = np.zeros(1, np.bool_)
    nearest_keep(a, b, d, 1, 2, keep)
    counts = np.zeros((2, 2), np.int32)
    add_counts(a, b, d, counts)
    threshold, before, offsets = np.empty(2, np.int64), np.empty(2, np.int64), np.empty(3, np.int64)
    limits(counts, 1, threshold, before)
    heap, used = np.empty(tie_slots(threshold, before, 1, 2, offsets), np.int64), np.zeros(2, np.int64)
    rank_ties(a, b, d, threshold, offsets, heap, used)
    cutoff = np.empty(2, np.int64)
    cutoffs(offsets, heap, used, cutoff)
    keep_at(a, b, d, threshold, cutoff, keep)
