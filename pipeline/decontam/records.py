"""Leaks per record: which train record copies which eval record, by its text, its picture, or both.

Image dedupe (pipeline/dedupe) says which train *image* copies which eval image; text matching
(text.py) says which train *text* copies which eval text. A user removes records, not images, so
both are brought to records here and joined on (train record, eval record):

    text   the train record's text copies the eval record's (text.py), its pictures do not
    image  a picture of the train record copies a picture of the eval record, its text does not
           (a generic prompt over a copied picture: the prompt is stock text, never matched)
    full   one pair of records linked by both

Each dataset says, in SQL over its own tables (its DatasetSpec), which text identifies a record
and which images a record uses; nothing here names a dataset. Set-wise in DuckDB: no Python loop
per record or per pair. Plain Python, no Dagster.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from pipeline.decontam.text import RECORD_TEXT_SCHEMA
from pipeline.settings import LEAK_CLASSES  # noqa: F401  (text | image | full)
from pipeline.settings import quiet_duckdb

RECORD_CONTAMINATION_SCHEMA = pa.schema([
    ("train_dataset", pa.string()),
    ("train_key", pa.string()),
    ("eval_dataset", pa.string()),
    ("eval_key", pa.string()),
    ("leak", pa.string()),  # text | image | full
    ("text_overlap", pa.float32()),  # share of the eval text's words the train text copies; NULL for an image leak
    ("matched_text", pa.string()),  # the longest span copied (normalised words); NULL for an image leak
    ("image_kind", pa.string()),  # exact | near | crop | overlay | override of the closest picture; NULL for a text leak
    ("longest_span", pa.int32()),  # words in matched_text; NULL for an image leak
    ("train_image_key", pa.string()),  # the pictures behind image_kind; NULL for a text leak
    ("eval_image_key", pa.string()),
])

# The same item in two eval sets: reported, never removed.
EVAL_OVERLAP_SCHEMA = pa.schema([
    ("dataset_a", pa.string()), ("key_a", pa.string()), ("dataset_b", pa.string()), ("key_b", pa.string()),
    ("leak", pa.string()), ("text_overlap", pa.float32()), ("matched_text", pa.string()), ("image_kind", pa.string()),
])

RECORD_IMAGES_SCHEMA = pa.schema([("dataset", pa.string()), ("image_key", pa.string()), ("record", pa.string())])

# exact bytes first, then the verification's kinds by how much of the picture is the same
_KIND_RANK = "case kind when 'exact' then 0 when 'override' then 1 when 'near' then 2 when 'crop' then 3 else 4 end"


def dataset_records(dataset: str, text_sql: str | None, images_sql: str | None,
                    tables: dict[str, str]) -> tuple[pa.Table, pa.Table]:
    """One dataset's record texts (dataset, key, text) and record images (dataset, image_key,
    record), by its SQL over its staged tables (name -> Parquet path; only what the SQL reads is
    read). No `text_sql`: no texts (the dataset is compared by its images only)."""
    con = quiet_duckdb(duckdb.connect())
    try:
        for name, path in tables.items():
            if str(path).endswith(".parquet"):
                quoted = str(path).replace("'", "''")
                con.execute(f'create view "{name}" as select * from read_parquet(\'{quoted}\')')
        texts = (con.sql(f"select ?::varchar as dataset, record::varchar as key, text::varchar as text "
                         f"from ({text_sql}) where text is not null", params=[dataset]).to_arrow_table()
                 if text_sql else RECORD_TEXT_SCHEMA.empty_table())
        images = (con.sql(f"select distinct ?::varchar as dataset, image_key::varchar as image_key, "
                          f"record::varchar as record from ({images_sql}) where image_key is not null",
                          params=[dataset]).to_arrow_table()
                  if images_sql else RECORD_IMAGES_SCHEMA.empty_table())
        return texts.cast(RECORD_TEXT_SCHEMA), images.cast(RECORD_IMAGES_SCHEMA)
    finally:
        con.close()


def image_links(contamination: pa.Table, record_images: pa.Table) -> pa.Table:
    """Image `contamination` rows brought to records: (train_dataset, train_key, eval_dataset,
    eval_key, image_kind, train_image_key, eval_image_key), one row per pair of records, the
    closest pair of pictures (exact before near, then the higher score)."""
    con = quiet_duckdb(duckdb.connect())
    con.register("contamination", contamination)
    con.register("record_images", record_images)
    return con.sql(f"""
        select t.dataset as train_dataset, t.record as train_key, e.dataset as eval_dataset, e.record as eval_key,
               arg_min(c.kind, ({_KIND_RANK}) * 10 - c.score) as image_kind,
               arg_min(c.train_image_key, ({_KIND_RANK}) * 10 - c.score) as train_image_key,
               arg_min(c.eval_image_key, ({_KIND_RANK}) * 10 - c.score) as eval_image_key
        from contamination c
        join record_images t on t.dataset = c.train_dataset and t.image_key = c.train_image_key
        join record_images e on e.dataset = c.eval_dataset and e.image_key = c.eval_image_key
        group by all
    """).to_arrow_table()


def record_contamination(text_leaks: pa.Table, images: pa.Table) -> pa.Table:
    """Text leaks (text.TEXT_LEAK_SCHEMA) and image links (`image_links`) joined per pair of
    records into RECORD_CONTAMINATION_SCHEMA, sorted."""
    con = quiet_duckdb(duckdb.connect())
    con.register("t", text_leaks)
    con.register("i", images)
    out = con.sql("""
        select coalesce(t.train_dataset, i.train_dataset) as train_dataset,
               coalesce(t.train_key, i.train_key) as train_key,
               coalesce(t.eval_dataset, i.eval_dataset) as eval_dataset,
               coalesce(t.eval_key, i.eval_key) as eval_key,
               case when t.train_key is not null and i.train_key is not null then 'full'
                    when t.train_key is not null then 'text' else 'image' end as leak,
               t.text_overlap::float as text_overlap, t.matched_text, i.image_kind,
               t.longest_span::integer as longest_span, i.train_image_key, i.eval_image_key
        from t full outer join i
          on t.train_dataset = i.train_dataset and t.train_key = i.train_key
         and t.eval_dataset = i.eval_dataset and t.eval_key = i.eval_key
        order by 1, 2, 3, 4
    """).to_arrow_table()
    return out.cast(RECORD_CONTAMINATION_SCHEMA)


def eval_image_links(clusters: pa.Table, record_images: pa.Table, eval_sets: tuple[str, ...]) -> pa.Table:
    """Pictures shared by records of two eval sets (one duplicate cluster): (dataset_a, key_a,
    dataset_b, key_b, image_kind), dataset_a < dataset_b."""
    con = quiet_duckdb(duckdb.connect())
    con.register("clusters", clusters)
    con.register("record_images", record_images)
    con.register("eval_sets", pa.table({"name": pa.array(list(eval_sets), pa.string())}))
    return con.sql(f"""
        with members as (
            select c.cluster_id, c.dataset, c.image_key, coalesce(c.kind, 'exact') as kind, coalesce(c.score, 1.0) as score
            from clusters c semi join eval_sets s on s.name = c.dataset
        )
        select ra.dataset as dataset_a, ra.record as key_a, rb.dataset as dataset_b, rb.record as key_b,
               arg_min(case when a.kind = 'exact' and b.kind = 'exact' then 'exact'
                            when a.kind = 'exact' then b.kind else a.kind end,
                       least(a.score, b.score) * -1) as image_kind
        from members a join members b on a.cluster_id = b.cluster_id and a.dataset < b.dataset
        join record_images ra on ra.dataset = a.dataset and ra.image_key = a.image_key
        join record_images rb on rb.dataset = b.dataset and rb.image_key = b.image_key
        group by all
    """).to_arrow_table()


def eval_overlap(text_leaks: pa.Table, images: pa.Table) -> pa.Table:
    """Text leaks between two eval sets (left = a) and `eval_image_links`, per pair of records."""
    con = quiet_duckdb(duckdb.connect())
    con.register("t", text_leaks)
    con.register("i", images)
    out = con.sql("""
        select coalesce(t.train_dataset, i.dataset_a) as dataset_a, coalesce(t.train_key, i.key_a) as key_a,
               coalesce(t.eval_dataset, i.dataset_b) as dataset_b, coalesce(t.eval_key, i.key_b) as key_b,
               case when t.train_key is not null and i.key_a is not null then 'full'
                    when t.train_key is not null then 'text' else 'image' end as leak,
               t.text_overlap::float as text_overlap, t.matched_text, i.image_kind
        from t full outer join i
          on t.train_dataset = i.dataset_a and t.train_key = i.key_a and t.eval_dataset = i.dataset_b and t.eval_key = i.key_b
        order by 1, 2, 3, 4
    """).to_arrow_table()
    return out.cast(EVAL_OVERLAP_SCHEMA)


def sample_leaks(records: pa.Table, key: str, leaks: pa.Table, dataset: str, keep: tuple[str, ...] = ()) -> pa.Table:
    """Per record of `records` (in its order, `key` its record key) of train set `dataset`:
    `leak`, the strongest class among its rows of `leaks` (full, then image, then text; NULL for
    none), `leaked_from` (the eval records it copies, 'dataset:key', sorted) and `leak_removed`:
    it has a leak of a class that `keep` does not keep."""
    con = quiet_duckdb(duckdb.connect())
    con.register("records_in", records.select([key]))
    con.register("leaks", leaks)
    con.register("keep_list", pa.table({"leak": pa.array(list(keep), pa.string())}))
    con.execute("create temp table r as select row_number() over () as pos, * from records_in")
    return con.sql(f"""
        with mine as (
            select train_key, leak, eval_dataset || ':' || eval_key as eval_ref,
                   leak not in (select leak from keep_list) as removing
            from leaks where train_dataset = ?
        ), per as (
            select train_key,
                   arg_min(leak, case leak when 'full' then 0 when 'image' then 1 else 2 end) as leak,
                   list(distinct eval_ref order by eval_ref) as leaked_from,
                   bool_or(removing) as leak_removed
            from mine group by train_key
        )
        select p.leak, p.leaked_from, coalesce(p.leak_removed, false) as leak_removed
        from r left join per p on p.train_key = r."{key}"
        order by r.pos
    """, params=[dataset]).to_arrow_table()


def removed_by_leak(leaks: pa.Table, dataset: str, kept: tuple[str, ...],
                    eval_sets: tuple[str, ...]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """What the training export of `dataset` leaves out for leaks, in records: per eval set (a
    record that copies two eval sets counts in both), and per leak class and eval set."""
    con = quiet_duckdb(duckdb.connect())
    con.register("leaks", leaks)
    con.register("keep_list", pa.table({"leak": pa.array(list(kept), pa.string())}))
    rows = con.execute("""
        select eval_dataset, leak, count(distinct train_key) as n, null as any_class from leaks
        where train_dataset = ? and leak not in (select leak from keep_list) group by all
        union all
        select eval_dataset, null, count(distinct train_key), true from leaks
        where train_dataset = ? and leak not in (select leak from keep_list) group by all
    """, [dataset, dataset]).fetchall()
    per_eval = {ev: 0 for ev in eval_sets}
    per_class = {c: {ev: 0 for ev in eval_sets} for c in LEAK_CLASSES}
    for ev, leak, n, any_class in rows:
        if any_class:
            per_eval[ev] = int(n)
        else:
            per_class.setdefault(leak, {})[ev] = int(n)
    return per_eval, per_class


def excluded_reason(records: pa.Table, duplicate: pa.ChunkedArray | pa.Array, leak: pa.ChunkedArray | pa.Array,
                    unavailable: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Why each record is out of the training export (NULL: it is in): its leak ('full leak of
    vlrb:VLRB_0007'), its duplicate ('duplicate of <key>'), its images ('image unavailable'),
    joined by '; '. `records` has `leak`, `leaked_from` and `duplicate_of`; the masks are the
    reasons that applied."""
    con = quiet_duckdb(duckdb.connect())
    con.register("r", records.select(["leak", "leaked_from", "duplicate_of"]).append_column(
        "by_dup", duplicate).append_column("by_leak", leak).append_column("by_image", unavailable))
    out = con.sql("""
        select nullif(concat_ws('; ',
                   case when by_leak then leak || ' leak of ' || array_to_string(leaked_from, ', ') end,
                   case when by_dup then 'duplicate of ' || duplicate_of end,
                   case when by_image then 'image unavailable' end), '') as reason
        from r
    """).to_arrow_table()
    return out["reason"].combine_chunks().cast(pa.string())
