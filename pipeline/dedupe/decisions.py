"""Dedupe decisions over hashed images of both datasets (plain Python + DuckDB, no Dagster).

- `duplicate_clusters`: the engine's clusters (engine.py: candidate search, verification,
  clusters without chaining); only clusters of two or more images are listed; `kind` says which
  rule accepted each member against the canonical (exact | near | crop | overlay) and `score` its
  verification score; the canonical rule is in clusters.py.
- `contamination`: images of a train set that are the same bytes as, or an accepted pair with, an
  image of an eval set, directly (never through a third image); every eval set against every
  train set the caller names (the pipeline: the registry's), each row naming both datasets.
- Samples: VisualPRM rollouts share images by design, so a *sample* is a duplicate only when its
  images (by cluster), its normalised question and its normalised steps all equal those of an
  earlier sample (row order); the earliest one is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from pipeline.dedupe.engine import ROUTES, Dedupe, Forced, dedupe, phash_distance
from pipeline.dedupe.hashing import THUMB_BYTES, HashedImage, is_flat
from pipeline.settings import quiet_duckdb

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
# What the engine reads beside the published hashes (staged, not published): region hashes, the
# flat flag and the verification signature (hashing.THUMB_BYTES: luma 64x64, chroma 32x32).
SIGNATURE_SCHEMA = pa.schema(
    list(HASHES_SCHEMA)
    + [
        ("crop_hash", pa.int64()),
        ("top_hash", pa.int64()),
        ("bottom_hash", pa.int64()),
        ("flat", pa.bool_()),
        ("chroma_cb", pa.float32()),
        ("chroma_cr", pa.float32()),
        ("thumb", pa.binary(THUMB_BYTES)),
        ("fine", pa.binary()),  # images with a plain background: the 256 px luma, compressed (fine.py); else null
        ("robust_hash", pa.int64()),  # pictures (no plain background): the robust route's hash (hashing.py); else null
    ]
)


def hashes_table(dataset: str, hashed: list[HashedImage], sizes: dict[str, int]) -> pa.Table:
    """Signature rows (SIGNATURE_SCHEMA) for the images of one dataset that decoded (`sizes`:
    bytes by key). `published_hashes` keeps the published columns."""
    ok = [h for h in hashed if h.error is None]
    values = {
        "dataset": [dataset] * len(ok), "image_key": [h.key for h in ok], "sha256": [h.sha256 for h in ok],
        "phash": [h.phash for h in ok], "dhash": [h.dhash for h in ok], "width": [h.width for h in ok],
        "height": [h.height for h in ok], "bytes": [sizes.get(h.key) for h in ok],
        "crop_hash": [h.crop_hash for h in ok], "top_hash": [h.top_hash for h in ok],
        "bottom_hash": [h.bottom_hash for h in ok],
        "flat": [is_flat(np.frombuffer(h.thumb, np.uint8)) if h.flat is None else h.flat for h in ok],
        "chroma_cb": [h.chroma_cb for h in ok], "chroma_cr": [h.chroma_cr for h in ok],
        "fine": [h.fine for h in ok], "robust_hash": [h.robust_hash for h in ok],
    }
    columns = []
    for field in SIGNATURE_SCHEMA:
        if field.name == "thumb":  # one join into one buffer: an Arrow builder grows it by copies, each
            # a fresh buffer zeroed page by page on first touch (0.2 s for 3,000 images, this 0.04 s)
            if any(len(h.thumb) != field.type.byte_width for h in ok):
                raise ValueError(f"a thumbnail is not {field.type.byte_width} bytes")
            columns.append(pa.FixedSizeBinaryArray.from_buffers(field.type, len(ok),
                                                                [None, pa.py_buffer(b"".join(h.thumb for h in ok))]))
        else:
            columns.append(pa.array(values[field.name], field.type))
    return pa.Table.from_arrays(columns, schema=SIGNATURE_SCHEMA)


def published_hashes(signatures: pa.Table) -> pa.Table:
    return signatures.select(HASHES_SCHEMA.names)


CLUSTERS_SCHEMA = pa.schema(
    [
        ("cluster_id", pa.string()),
        ("dataset", pa.string()),
        ("image_key", pa.string()),
        ("is_canonical", pa.bool_()),
        ("distance_to_canonical", pa.int32()),
        ("kind", pa.string()),  # exact | near | crop | overlay; NULL for the canonical itself
        ("score", pa.float32()),  # verification score against the canonical (1 for exact); NULL for the canonical
    ]
)
CONTAMINATION_SCHEMA = pa.schema(
    [
        ("train_dataset", pa.string()),
        ("train_image_key", pa.string()),
        ("eval_dataset", pa.string()),
        ("eval_image_key", pa.string()),
        ("distance", pa.int32()),  # pHash Hamming distance
        ("kind", pa.string()),  # exact | near | crop | overlay
        ("score", pa.float32()),
    ]
)


# Rows per row group of a staged signatures file, and per batch read or copied (~5 MB of thumbnails).
# Arrow's pool (mimalloc) maps a buffer of more than a few MB afresh each time and the system
# zeroes every page of it on first touch: batches of 1,024 (20 MB) took a full-scale copy of the
# signatures 1.2-2.3 s, batches of 256 0.3-0.5 s, with less memory held.
SIGNATURE_BATCH = 256


def gather_signatures(folder: Path, sources: list[str]) -> str:
    """The signatures of every dataset as one staged table under `folder`: the sources linked as
    its parts when each has SIGNATURE_SCHEMA (as every step that decodes images writes it; 300 MB
    not copied at full scale, staging.link_staged), else copied batch by batch into one file cast
    to it. Returns what read_signatures and thumb_file read."""
    import pyarrow.parquet as pq

    from pipeline.staging import link_staged, write_staged_stream

    if all(pq.read_schema(p).equals(SIGNATURE_SCHEMA) for p in sources):
        return link_staged(Path(folder) / "image_signatures", sources)
    return write_staged_stream(Path(folder) / "image_signatures.parquet", sources, SIGNATURE_SCHEMA,
                               batch_rows=SIGNATURE_BATCH)


def read_signatures(path: str, columns: list[str]) -> pa.Table:
    """`columns` of a staged signatures table (one file, or a folder of parts: staging.parts_of),
    each part cast to SIGNATURE_SCHEMA's types, in order."""
    import pyarrow.parquet as pq

    from pipeline.staging import parts_of

    schema = pa.schema([SIGNATURE_SCHEMA.field(c) for c in columns])
    return pa.concat_tables([pq.read_table(p, columns=columns).cast(schema) for p in parts_of(path)])


class ThumbColumn:
    """`thumbs[rows]` over a table's fixed-size binary thumbnail column; `thumbs.fine(rows)` the
    packed 256 px lumas of the second look (None where an image has none) from its `fine` column."""

    def __init__(self, column: pa.ChunkedArray | pa.Array, fine: pa.ChunkedArray | pa.Array | None = None):
        # one chunk (hashes_table's) is read in place: combining copies it, and a fresh buffer of
        # 18 KB a row is zeroed page by page on first touch (0.5 s for 3,000 images)
        if isinstance(column, pa.ChunkedArray):
            arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        else:
            arr = column
        if arr.null_count:
            raise ValueError("thumbnail column has nulls")
        width = arr.type.byte_width
        self.data = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * width:(arr.offset + len(arr)) * width]
        self.data = self.data.reshape(len(arr), width)
        self._fine = fine

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return self.data[rows]

    def fine(self, rows: np.ndarray) -> list:
        if self._fine is None:
            return [None] * len(rows)
        return [self._fine[int(r)].as_py() for r in rows]


class ThumbFile:
    """The same over files written from a staged signatures file (thumb_file): the thumbnails as
    one memory-mapped array, the packed 256 px lumas one after the other with their offsets."""

    def __init__(self, thumbs: np.ndarray, fine: np.ndarray, offsets: np.ndarray):
        self.thumbs, self._fine, self._offsets = thumbs, fine, offsets

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        return self.thumbs[rows]

    def fine(self, rows: np.ndarray) -> list:
        out = []
        for r in np.asarray(rows, np.int64):
            lo, hi = self._offsets[r], self._offsets[r + 1]
            out.append(self._fine[lo:hi].tobytes() if hi > lo else None)
        return out


_CONTAMINATION_SQL = """
with images as (select * from images_in),
same_node as (
    select t.dataset as train_dataset, t.image_key as train_image_key, e.dataset as eval_dataset,
           e.image_key as eval_image_key, t.row as tr, e.row as er, 'exact' as kind, 1.0::float as score
    from images t join images e on t.node = e.node
    where t.dataset in (select * from train_sets) and e.dataset in (select * from eval_sets)
),
node_pairs as (
    select a as va, b as vb, kind, score from accepted union all select b, a, kind, score from accepted
),
verified as (
    select t.dataset, t.image_key, e.dataset, e.image_key, t.row, e.row, p.kind, p.score
    from node_pairs p
    join images t on t.node = p.va and t.dataset in (select * from train_sets)
    join images e on e.node = p.vb and e.dataset in (select * from eval_sets)
)
select * from same_node
union all select * from verified
order by 1, 2, 3, 4
"""


def contamination_table(hashes: pa.Table, result: Dedupe, eval_sets: Sequence[str], train_sets: Sequence[str]) -> pa.Table:
    """Contamination rows for `eval_sets` x `train_sets`."""
    import duckdb  # here: `rewardhouse dedupe DIR` never loads it

    con = quiet_duckdb(duckdb.connect())
    try:
        con.register("images_in", pa.table({
            "row": pa.array(np.arange(hashes.num_rows, dtype=np.int64)),
            "dataset": hashes["dataset"], "image_key": hashes["image_key"],
            "node": pa.array(result.node_of_row)}))
        con.register("accepted", result.accepted)
        con.register("eval_sets", pa.table({"name": pa.array(list(eval_sets), pa.string())}))
        con.register("train_sets", pa.table({"name": pa.array(list(train_sets), pa.string())}))
        found = con.sql(_CONTAMINATION_SQL).to_arrow_table()
    finally:
        con.close()
    phash = hashes["phash"].to_numpy(zero_copy_only=False).astype(np.int64)
    tr, er = found["tr"].to_numpy(), found["er"].to_numpy()
    return pa.table({
        "train_dataset": found["train_dataset"], "train_image_key": found["train_image_key"],
        "eval_dataset": found["eval_dataset"], "eval_image_key": found["eval_image_key"],
        "distance": pa.array(phash_distance(phash[tr], phash[er]).astype(np.int32)),
        "kind": found["kind"], "score": found["score"].cast(pa.float32()),
    }, schema=CONTAMINATION_SCHEMA)


def run_engine(signatures: pa.Table, max_distance: int, thumbs=None, stop=None, forced: Forced | None = None,
               rule=None, dataset_order: Sequence[str] = ()) -> Dedupe:
    """The engine over signature rows; `thumbs` defaults to the table's own signature column;
    `rule` (verify.Rule) defaults to verify.DEFAULT_RULE; `dataset_order` as in engine.dedupe."""
    from pipeline.dedupe.verify import DEFAULT_RULE

    if thumbs is None:
        thumbs = ThumbColumn(signatures["thumb"], signatures["fine"] if "fine" in signatures.column_names else None)
    return dedupe(signatures, thumbs, max_distance, stop, forced, rule or DEFAULT_RULE, dataset_order)


# ---- reviewer overrides (pipeline/review/overrides.py) ------------------------------------------

OVERRIDES_APPLIED_SCHEMA = pa.schema([
    ("number", pa.int32()),  # the decision's place in the file (1-based)
    ("decision", pa.string()),  # not_duplicates | not_leak | duplicates
    ("images", pa.string()),  # the names as written (images; records for a text not_leak), joined by " | "
    ("reason", pa.string()), ("by", pa.string()), ("at", pa.string()),
    ("applied", pa.bool_()),
    ("effect", pa.string()),  # what it changed in this release, or why it could not apply
])


# A text not_leak (`of` text) names records, not images: the record_contamination step applies it
# (pipeline/decontam/overrides.py) and publishes its effect in `leak_overrides`.
TEXT_DECISION_EFFECT = "text leak decision: applied in record_contamination (leak_overrides)"


class _Names:
    """Resolve `<dataset>:<image_key>` / `sha256:<hex>` names against image rows (by dictionary:
    a file may hold hundreds of thousands of names)."""

    def __init__(self, rows: pa.Table):
        dataset, key, sha = (rows[c].to_pylist() for c in ("dataset", "image_key", "sha256"))
        self.by_name = dict(zip(zip(dataset, key), sha))
        self.by_sha: dict[str, list[tuple[str, str]]] = {}
        for name, s in zip(zip(dataset, key), sha):
            self.by_sha.setdefault(s, []).append(name)

    def sha_of(self, ref: str) -> str | None:
        head, _, rest = ref.partition(":")
        if head == "sha256":
            return rest.lower() if rest.lower() in self.by_sha else None
        return self.by_name.get((head, rest))

    def rows_of(self, ref: str) -> list[tuple[str, str]]:
        head, _, rest = ref.partition(":")
        if head == "sha256":
            return self.by_sha.get(rest.lower(), [])
        return [(head, rest)] if (head, rest) in self.by_name else []


def forced_pairs(overrides, rows: pa.Table) -> tuple[Forced, dict[int, str]]:
    """The engine's Forced pairs for the pair decisions (tagged with the decision's index), and
    for a decision that cannot be handed over, why."""
    names = _Names(rows)
    separate, join, notes = [], [], {}
    for i, d in enumerate(overrides.decisions):
        if d.decision == "not_leak":
            continue
        x, y = names.sha_of(d.images[0]), names.sha_of(d.images[1])
        if x is None or y is None:
            notes[i] = f"not applied: no hashed image named {d.images[0] if x is None else d.images[1]} in this release"
            continue
        (separate if d.decision == "not_duplicates" else join).append((x, y, i))
    return Forced(tuple(separate), tuple(join)), notes


def apply_not_leak(contamination: pa.Table, overrides, rows: pa.Table) -> tuple[pa.Table, dict[int, str]]:
    """Drop the contamination rows reviewers marked not a leak: (kept rows, effect by decision
    index). Each decision looks up its train image's rows, never scans them all. Text decisions
    name records, not images: they are not this step's."""
    names = _Names(rows)
    train = zip(contamination["train_dataset"].to_pylist(), contamination["train_image_key"].to_pylist())
    evals = list(zip(contamination["eval_dataset"].to_pylist(), contamination["eval_image_key"].to_pylist()))
    rows_of_train: dict[tuple[str, str], list[int]] = {}
    for row, name in enumerate(train):
        rows_of_train.setdefault(name, []).append(row)
    keep = np.ones(contamination.num_rows, bool)
    effects = {}
    for i, d in enumerate(overrides.decisions):
        if d.decision != "not_leak" or d.of == "text":
            continue
        t = names.rows_of(d.images[0])
        e = set(names.rows_of(d.images[1])) if len(d.images) > 1 else None
        if not t or (e is not None and not e):
            effects[i] = f"not applied: no hashed image named {d.images[0] if not t else d.images[1]} in this release"
            continue
        hit = [r for name in t for r in rows_of_train.get(name, ()) if e is None or evals[r] in e]
        n = int(keep[hit].sum())
        keep[hit] = False
        effects[i] = (f"applied: removed {n} contamination row{'s' * (n != 1)}" if n else
                      "applied: no contamination row matched (nothing to remove)")
    return contamination.filter(pa.array(keep)), effects


def overrides_table(overrides, *effects: dict) -> pa.Table:
    """One row per decision of the file: what it did to this release (`effects`: by decision
    index, from each place a decision is applied; the first that names a decision wins). A text
    decision says where its effect is (`leak_overrides`)."""
    effect_of: dict = {}
    for found in reversed([e for e in effects if e]):
        effect_of.update(found)
    decisions = overrides.decisions
    effect = [TEXT_DECISION_EFFECT if d.of == "text" else effect_of.get(i, "applied") for i, d in enumerate(decisions)]
    return pa.table({
        "number": pa.array(range(1, len(decisions) + 1), pa.int32()),
        "decision": [d.decision for d in decisions],
        "images": [" | ".join(d.images) for d in decisions],
        "reason": [d.reason for d in decisions], "by": [d.by for d in decisions], "at": [d.at for d in decisions],
        "applied": [e.startswith("applied") for e in effect],
        "effect": effect,
    }, schema=OVERRIDES_APPLIED_SCHEMA)


def clusters_table(signatures: pa.Table, result: Dedupe) -> pa.Table:
    c = result.clusters
    rows = c["row"].to_numpy()
    return pa.table({
        "cluster_id": c["cluster_id"],
        "dataset": signatures["dataset"].take(rows), "image_key": signatures["image_key"].take(rows),
        "is_canonical": c["is_canonical"], "distance_to_canonical": c["distance_to_canonical"],
        "kind": c["kind"], "score": c["score"],
    }, schema=CLUSTERS_SCHEMA)


def find_duplicates(signatures: pa.Table, max_distance: int, *, eval_sets: Sequence[str], train_sets: Sequence[str],
                    thumbs=None, stop=None, overrides=None) -> tuple[pa.Table, pa.Table, Dedupe]:
    """(duplicate_clusters, contamination, the engine's result) for rows in SIGNATURE_SCHEMA;
    contamination is every eval set against every train set, and an eval image is canonical
    before a train image it ties with (datasets ranked: `eval_sets`, then `train_sets`). With
    `overrides` (review/overrides.py) the result's `applied` is their effect table."""
    if signatures.num_rows == 0:
        return CLUSTERS_SCHEMA.empty_table(), CONTAMINATION_SCHEMA.empty_table(), None
    forced, notes = forced_pairs(overrides, signatures) if overrides else (None, {})
    result = run_engine(signatures, max_distance, thumbs, stop, forced, dataset_order=(*eval_sets, *train_sets))
    contamination = contamination_table(signatures, result, eval_sets, train_sets)
    result.applied = OVERRIDES_APPLIED_SCHEMA.empty_table()
    if overrides:
        contamination, leak_effects = apply_not_leak(contamination, overrides, signatures)
        result.applied = overrides_table(overrides, notes, leak_effects, result.forced)
    return clusters_table(signatures, result), contamination, result


_MARK_SQL = r"""
with refs as (
    select s.sample_id, r.pos, coalesce(c.cluster_id, 'sha256:' || i.sha256, 'ref:' || r.ref) as image_id
    from samples s, unnest(s.image_refs) with ordinality as r(ref, pos)
    left join images i on i.image_key = r.ref
    left join (select * from clusters where dataset = 'visualprm') c on c.image_key = r.ref
), image_sig as (
    select sample_id, list(image_id order by pos) as image_ids from refs group by sample_id
), step_sig as (
    -- whitespace runs made one space (RE2's \s: tab, newline, form feed, return, space); the regex
    -- runs only on the texts that hold one to collapse (about 4 in 10 steps: a third of the time)
    select sample_id, list(case when contains(t, '  ') or contains(t, chr(10)) or contains(t, chr(9))
                                  or contains(t, chr(13)) or contains(t, chr(12))
                                then regexp_replace(t, '\s+', ' ', 'g') else t end order by step_index) as steps
    from (select sample_id, step_index, lower(trim(text)) as t from steps) group by sample_id
), contaminated as (
    select distinct s.sample_id from samples s, unnest(s.image_refs) as r(ref)
    join (select * from contamination where train_dataset = 'visualprm') x on x.train_image_key = r.ref
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
    import duckdb

    con = quiet_duckdb(duckdb.connect())
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


def thumb_file(signatures_path: str, out: Path, batch_rows: int = SIGNATURE_BATCH) -> ThumbFile:
    """The thumbnails of a staged signatures table (one file, or a folder of parts: staging.parts_of)
    as a memory-mapped (rows, THUMB_BYTES) uint8 array, and its packed 256 px lumas (`fine`) one
    after the other with (rows + 1) offsets, written batch by batch beside `out` with plain writes
    from the Arrow buffers (memory: about one batch, staging.streamed; nothing of the output stays
    mapped; the engine pages in what it verifies)."""
    import os
    import uuid

    import pyarrow.parquet as pq

    from pipeline.staging import parts_of, streamed

    parts = parts_of(signatures_path)
    files = [pq.ParquetFile(p) for p in parts]
    rows = sum(f.metadata.num_rows for f in files)
    width = THUMB_BYTES
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp = out.with_name(f".{out.stem}.{tag}.npy")
    fine_out, offsets_out = out.with_name(f"{out.stem}.fine.bin"), out.with_name(f"{out.stem}.fine.offsets.npy")
    fine_tmp = fine_out.with_name(f".{fine_out.name}.{tag}")
    offsets = np.zeros(rows + 1, np.int64)
    has_fine = all("fine" in f.schema_arrow.names for f in files)
    at = 0
    with open(tmp, "wb") as thumbs, open(fine_tmp, "wb") as blob:
        np.lib.format.write_array_header_1_0(thumbs, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)),
                                                     "fortran_order": False, "shape": (rows, width)})
        for batch in (b for p in parts for b in streamed(p, batch_rows, ["thumb", "fine"] if has_fine else ["thumb"])):
            part = ThumbColumn(batch.column(0)).data
            thumbs.write(part.tobytes())
            n = len(part)
            if has_fine:  # the binary column's own offsets and bytes (a null is a zero-length value)
                col = batch.column(1)
                ends = np.frombuffer(col.buffers()[1], np.int32)[col.offset:col.offset + n + 1].astype(np.int64)
                if ends[-1] > ends[0]:
                    blob.write(memoryview(col.buffers()[2])[ends[0]:ends[-1]])
                offsets[at + 1:at + n + 1] = offsets[at] + (ends[1:] - ends[0])
            else:
                offsets[at + 1:at + n + 1] = offsets[at]
            at += n
    pa.default_memory_pool().release_unused()  # the batches' memory back to the system, not kept by the pool
    if at != rows:
        raise ValueError(f"{signatures_path}: {at} thumbnails read of {rows} rows")
    np.save(offsets_out.with_name(f".{offsets_out.name}.{tag}"), offsets)
    os.replace(fine_tmp, fine_out)
    os.replace(offsets_out.with_name(f".{offsets_out.name}.{tag}.npy"), offsets_out)
    os.replace(tmp, out)
    fine_map = np.memmap(fine_out, np.uint8, mode="r") if offsets[-1] else np.zeros(0, np.uint8)
    return ThumbFile(np.load(out, mmap_mode="r"), fine_map, offsets)


NEAR_MISSES = 1000  # rejected candidate pairs kept for review (dedupe_near_misses), best scores first
NEAR_MISS_SCHEMA = pa.schema([
    ("dataset_a", pa.string()), ("image_key_a", pa.string()), ("dataset_b", pa.string()), ("image_key_b", pa.string()),
    ("route", pa.string()), ("route_distance", pa.int32()), ("score", pa.float32()),
])


def near_misses(rows: pa.Table, result) -> pa.Table:
    """The candidate pairs verification refused, best scores first (at most NEAR_MISSES)."""
    if result is None or len(result.rejected) == 0:
        return NEAR_MISS_SCHEMA.empty_table()
    r = result.rejected
    top = np.argsort(-r.score, kind="stable")[:NEAR_MISSES]
    rep = result.node_rep
    a, b = rep[r.a[top]], rep[r.b[top]]
    ds, keys = rows["dataset"], rows["image_key"]
    return pa.table({
        "dataset_a": ds.take(a), "image_key_a": keys.take(a), "dataset_b": ds.take(b), "image_key_b": keys.take(b),
        "route": pa.array([ROUTES[i] for i in r.route[top]]), "route_distance": pa.array(r.distance[top].astype(np.int32)),
        "score": pa.array(r.score[top], pa.float32()),
    }, schema=NEAR_MISS_SCHEMA)
