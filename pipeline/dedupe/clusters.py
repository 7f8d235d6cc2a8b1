"""Connected components of a pair graph, and the canonical image of a cluster.

The engine (engine.py) starts its clusters from the connected components of the accepted pairs
and then checks every member against the canonical image (no chaining).

Canonical rule (deterministic; the first criterion that differs decides):

1. the largest resolution, width * height (unknown sizes last);
   (the engine then puts first the image with the most pairs in its component accepted as the
   same pixels, near or crop, then the most accepted at all: the original of several copies
   rather than a captioned or brightened copy)
2. the largest file, in bytes (unknown last);
3. dataset order: the order the caller gives (the pipeline gives the registry's eval sets before
   its train sets, in registry order, so eval images win ties); any other dataset after those,
   alphabetically;
4. the smallest image_key (then the smallest node, so the order is total even on repeated keys).

`cluster_id` is the first 16 hex characters of sha256("<dataset>/<image_key>") of the canonical:
stable across runs and releases as long as the same image stays canonical, and independent of
node numbering.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np


def _compress(parent: np.ndarray) -> np.ndarray:
    """Full path compression by pointer jumping: afterwards every node points at its root."""
    while True:
        grand = parent[parent]
        if np.array_equal(grand, parent):
            return parent
        parent = grand


def connected_components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Component label of each node 0..n-1 for the undirected edges (a[i], b[i]); a component's
    label is its smallest node.

    Vectorised union-find: each round compresses every path (pointer jumping), then hooks the
    larger root of every edge whose ends still have different roots onto the smallest root it
    meets (`np.minimum.at`). Union is by smaller index rather than by size: parents only ever
    point to smaller nodes, so a root is the smallest node of its tree (the label wanted), and
    full compression makes tree height irrelevant. Each round removes at least one root, and in
    practice a round roughly halves the roots of every component."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be 1-D arrays of the same length, got {a.shape} and {b.shape}")
    if a.size and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= n):
        raise ValueError(f"edge endpoints must be nodes 0..{n - 1}")
    parent = np.arange(n, dtype=np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = lo != hi
    lo, hi = lo[keep], hi[keep]
    while lo.size:
        parent = _compress(parent)
        ra, rb = parent[lo], parent[hi]
        open_ = ra != rb
        if not open_.any():
            break
        # Edges inside one tree never matter again.
        lo, hi, ra, rb = lo[open_], hi[open_], ra[open_], rb[open_]
        np.minimum.at(parent, np.maximum(ra, rb), np.minimum(ra, rb))
    return _compress(parent)


def canonical_rank(dataset: list, image_key: list, width: np.ndarray, height: np.ndarray, size: np.ndarray,
                   dataset_order: Sequence[str] = ()) -> np.ndarray:
    """Each image's place in the canonical order (the rule in the module docstring; 0 is the best),
    datasets ranked as in `dataset_order`. Unknown width/height/bytes are NaN or negative and come last."""
    width, height, size = (np.asarray(x, np.float64) for x in (width, height, size))
    area = np.nan_to_num(width * height, nan=-1.0)
    size = np.nan_to_num(size, nan=-1.0)
    order_of = {d: i for i, d in enumerate(dataset_order)}
    ds_rank = np.array([order_of.get(d, len(dataset_order)) for d in dataset])
    ds_name = np.unique(np.array(dataset, dtype=object), return_inverse=True)[1]
    keys = np.unique(np.array(image_key, dtype=object), return_inverse=True)[1]
    order = np.lexsort((np.arange(len(dataset)), keys, ds_name, ds_rank, -size, -area))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank


def cluster_id(dataset: str, image_key: str) -> str:
    """A cluster's id: the first 16 hex characters of sha256("<dataset>/<image_key>") of its canonical."""
    return hashlib.sha256(f"{dataset}/{image_key}".encode()).hexdigest()[:16]
