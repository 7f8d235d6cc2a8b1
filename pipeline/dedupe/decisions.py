"""Dedupe decisions over hashed images of both datasets (plain Python + DuckDB, no Dagster).

- `duplicate_clusters`: union-find over every pair within the pHash radius (identical bytes are
  distance 0); only clusters of two or more images are listed; the canonical rule is in clusters.py.
- `contamination`: VisualPRM (train) images within the radius of an MMRB2 (eval) image.
- Samples: VisualPRM rollouts share images by design, so a *sample* is a duplicate only when its
  images (by cluster), its normalised question and its normalised steps all equal those of an
  earlier sample (row order); the earliest one is kept.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from pipeline.dedupe.clusters import canonical_table, connected_components
from pipeline.dedupe.hashing import HashedImage
from pipeline.dedupe.search import near_pairs

EVAL_DATASET, TRAIN_DATASET = "mmrb2", "visualprm"

HASHES_SCHEMA = pa.schema(
    [
        ("dataset", pa.string()),
        ("image_key", pa.string()),
        ("sha256", pa.string()),
        ("phash", pa.int64()),
        ("dhash", pa.int64()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("bytes", pa.int64()),
    ]
)


def hashes_table(dataset: str, hashed: list[HashedImage], sizes: dict[str, int]) -> pa.Table:
    """`image_hashes` rows for the images of one dataset that decoded (`sizes`: bytes by key)."""
    return pa.Table.from_pylist(
        [{"dataset": dataset, "image_key": h.key, "sha256": h.sha256, "phash": h.phash, "dhash": h.dhash,
          "width": h.width, "height": h.height, "bytes": sizes.get(h.key)} for h in hashed if h.error is None],
        schema=HASHES_SCHEMA,
    )


CLUSTERS_SCHEMA = pa.schema(
    [
        ("cluster_id", pa.string()),
        ("dataset", pa.string()),
        ("image_key", pa.string()),
        ("is_canonical", pa.bool_()),
        ("distance_to_canonical", pa.int32()),
        ("kind", pa.string()),  # exact | near; NULL for the canonical itself
    ]
)
CONTAMINATION_SCHEMA = pa.schema(
    [("train_image_key", pa.string()), ("eval_image_key", pa.string()), ("distance", pa.int32())]
)


def cluster_hashes(phash: np.ndarray, max_distance: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Table]:
    """Cluster labels for every image, searching over *distinct* hash values only.

    Many images can share one hash (exact copies; 4 rollouts embedding the same bytes), and
    listing every pair of a group of k would cost k^2. So the search runs on distinct values;
    images join their value's first image (a star), and near values join value to value.
    Returns (labels per image, distinct values, value index per image, value pairs a<b+distance)."""
    values, first, inverse = np.unique(phash, return_index=True, return_inverse=True)
    vpairs = near_pairs(np.arange(len(values), dtype=np.int64), values, max_distance)
    n = len(phash)
    star_a = np.arange(n, dtype=np.int64)
    star_b = first[inverse].astype(np.int64)
    a = np.concatenate([star_a, first[vpairs["a"].to_numpy()].astype(np.int64)])
    b = np.concatenate([star_b, first[vpairs["b"].to_numpy()].astype(np.int64)])
    return connected_components(n, a, b), values, inverse, vpairs


_CONTAMINATION_SQL = f"""
with value_pairs as (
    select a as va, b as vb, distance from vpairs
    union all select b, a, distance from vpairs
    union all select distinct v, v, 0 from images
)
select t.image_key as train_image_key, e.image_key as eval_image_key, p.distance::integer as distance
from value_pairs p
join images t on t.v = p.va and t.dataset = '{TRAIN_DATASET}'
join images e on e.v = p.vb and e.dataset = '{EVAL_DATASET}'
order by 1, 2
"""


def find_duplicates(hashes: pa.Table, max_distance: int) -> tuple[pa.Table, pa.Table]:
    """(duplicate_clusters, contamination) for a table in HASHES_SCHEMA."""
    n = hashes.num_rows
    if n == 0:
        return CLUSTERS_SCHEMA.empty_table(), CONTAMINATION_SCHEMA.empty_table()
    labels, _, inverse, vpairs = cluster_hashes(hashes["phash"].to_numpy(), max_distance)
    sizes = np.bincount(labels, minlength=n)
    members = hashes.append_column("node", pa.array(np.arange(n, dtype=np.int64)))
    members = members.append_column("cluster", pa.array(labels.astype(np.int64)))
    members = members.rename_columns([("hash" if c == "phash" else c) for c in members.column_names])
    members = members.filter(pa.array(sizes[labels] > 1))
    clusters = canonical_table(members).select(CLUSTERS_SCHEMA.names).cast(CLUSTERS_SCHEMA) if members.num_rows else CLUSTERS_SCHEMA.empty_table()

    con = duckdb.connect()
    con.register("vpairs", vpairs)
    con.register("images", pa.table({"dataset": hashes["dataset"], "image_key": hashes["image_key"], "v": pa.array(inverse.astype(np.int64))}))
    contamination = con.sql(_CONTAMINATION_SQL).to_arrow_table().cast(CONTAMINATION_SCHEMA)
    return clusters, contamination


_MARK_SQL = r"""
with refs as (
    select s.sample_id, r.pos, coalesce(c.cluster_id, 'sha256:' || i.sha256, 'ref:' || r.ref) as image_id
    from samples s, unnest(s.image_refs) with ordinality as r(ref, pos)
    left join images i on i.image_key = r.ref
    left join (select * from clusters where dataset = 'visualprm') c on c.image_key = r.ref
), image_sig as (
    select sample_id, list(image_id order by pos) as image_ids from refs group by sample_id
), step_sig as (
    select sample_id, list(regexp_replace(lower(trim(text)), '\s+', ' ', 'g') order by step_index) as steps
    from steps group by sample_id
), contaminated as (
    select distinct s.sample_id from samples s, unnest(s.image_refs) as r(ref)
    join contamination x on x.train_image_key = r.ref
), sig as (
    select s.sample_id, s.row_index,
           coalesce(g.image_ids, []) as image_clusters,
           regexp_replace(lower(trim(coalesce(s.question, ''))), '\s+', ' ', 'g') as question_norm,
           coalesce(t.steps, []) as steps_norm
    from samples s left join image_sig g using (sample_id) left join step_sig t using (sample_id)
)
select sig.sample_id, sig.image_clusters,
       first_value(sig.sample_id) over w as first_id,
       sig.sample_id in (select sample_id from contaminated) as is_contaminated
from sig
window w as (partition by sig.image_clusters, sig.question_norm, sig.steps_norm order by sig.row_index)
"""


def mark_samples(samples: pa.Table, steps: pa.Table, images: pa.Table, clusters: pa.Table, contamination: pa.Table) -> pa.Table:
    """prm_samples plus image_clusters, is_duplicate, duplicate_of, is_contaminated."""
    con = duckdb.connect()
    for name, table in (("samples", samples), ("steps", steps.select(["sample_id", "step_index", "text"])),
                        ("images", images.select(["image_key", "sha256"])), ("clusters", clusters),
                        ("contamination", contamination)):
        con.register(name, table)
    con.execute(f"create temp table marks as {_MARK_SQL}")
    return con.sql(
        """
        select s.*, m.image_clusters,
               m.first_id <> s.sample_id as is_duplicate,
               case when m.first_id <> s.sample_id then m.first_id end as duplicate_of,
               m.is_contaminated
        from samples s join marks m using (sample_id)
        order by s.row_index
        """
    ).to_arrow_table()
