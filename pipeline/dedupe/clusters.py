"""Duplicate clusters from near pairs, and the canonical image of each cluster.

Clusters are the connected components of the graph whose edges are the exact + near pairs
(`near_pairs` pairs identical hashes at distance 0 too), so "near" is transitive: a chain
a~b~c is one cluster even when a and c are farther apart than the radius.

Canonical rule (deterministic; the first criterion that differs decides):

1. the largest resolution, width * height (unknown sizes last);
2. the largest file, in bytes (unknown last);
3. dataset order: "mmrb2" before "visualprm" (eval images win ties), any other dataset after
   those, alphabetically;
4. the smallest image_key (then the smallest node, so the order is total even on repeated keys).

`cluster_id` is the first 16 hex characters of sha256("<dataset>/<image_key>") of the canonical:
stable across runs and releases as long as the same image stays canonical, and independent of
node numbering. `kind` is "exact" for a member whose sha256 equals the canonical's, "near" for
the others, NULL for the canonical itself; `distance_to_canonical` is the Hamming distance of
the member's hash to the canonical's (0 for the canonical; it can exceed the search radius
because clusters are transitive).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

DATASET_ORDER = ("mmrb2", "visualprm")
MEMBER_COLUMNS = ("node", "cluster", "dataset", "image_key", "sha256", "width", "height", "bytes", "hash")


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


def _check_members(members: pa.Table) -> None:
    missing = [c for c in MEMBER_COLUMNS if c not in members.column_names]
    if missing:
        raise ValueError(f"members lack column(s) {', '.join(missing)}; have {', '.join(members.column_names)}")


def _ranked_sql() -> str:
    order = " ".join(f"when '{d}' then {i}" for i, d in enumerate(DATASET_ORDER))
    return f"""
        select *, row_number() over (
            partition by cluster
            order by width::bigint * height::bigint desc nulls last,
                     bytes desc nulls last,
                     case dataset {order} else {len(DATASET_ORDER)} end,
                     dataset, image_key, node
        ) as canonical_rank
        from members
    """


def choose_canonical(members: pa.Table) -> pa.Table:
    """The canonical member of each cluster (rule in the module docstring): columns cluster,
    node, dataset, image_key, sorted by cluster."""
    _check_members(members)
    con = duckdb.connect()
    try:
        con.register("members", members)
        return con.sql(
            f"select cluster, node, dataset, image_key from ({_ranked_sql()}) where canonical_rank = 1 order by cluster"
        ).to_arrow_table()
    finally:
        con.close()


def canonical_table(members: pa.Table) -> pa.Table:
    """members (columns node, cluster, dataset, image_key, sha256, width, height, bytes, hash,
    and any others, kept) plus cluster_id, is_canonical, distance_to_canonical, kind; sorted by
    cluster, then in canonical order (the canonical first)."""
    _check_members(members)
    con = duckdb.connect()
    try:
        con.register("members", members)
        return con.sql(
            f"""
            with ranked as ({_ranked_sql()}),
            canon as (
                select cluster, dataset as c_dataset, image_key as c_key, sha256 as c_sha, hash as c_hash
                from ranked where canonical_rank = 1
            )
            select m.* exclude (canonical_rank),
                   left(sha256(c.c_dataset || '/' || c.c_key), 16) as cluster_id,
                   m.canonical_rank = 1 as is_canonical,
                   bit_count(xor(m.hash, c.c_hash))::integer as distance_to_canonical,
                   case when m.canonical_rank = 1 then null
                        when m.sha256 = c.c_sha then 'exact'
                        else 'near' end as kind
            from ranked m join canon c using (cluster)
            order by m.cluster, m.canonical_rank
            """
        ).to_arrow_table()
    finally:
        con.close()
