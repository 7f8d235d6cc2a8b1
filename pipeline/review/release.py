"""The review page of a release candidate: its decision tables, the records that use each image
(each dataset's `image_records` SQL), image bytes from each dataset's `review_images` reader, and
the leaks between records with the text of each record shown (each dataset's `record_text` SQL)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import datasets
from pipeline.dedupe.decisions import SIGNATURE_BATCH
from pipeline.review.page import RecordId, RecordLeaks, ReviewInput, ReviewStats, write_review
from pipeline.review.thumbnails import ThumbnailStore
from pipeline.spec import load
from pipeline.settings import quiet_duckdb

RECORDS_SCHEMA = pa.schema([("dataset", pa.string()), ("image_key", pa.string()), ("record", pa.string()),
                            ("in_export", pa.bool_())])


def _read(tables: dict[str, Path], name: str, columns=None) -> pa.Table | None:
    return pq.read_table(tables[name], columns=columns) if name in tables else None


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _connect(tables: dict[str, Path]) -> duckdb.DuckDBPyConnection:
    """A connection with a view per table of the candidate."""
    con = quiet_duckdb(duckdb.connect())
    for name, path in tables.items():
        con.execute(f'create view "{name}" as select * from read_parquet({_sql_str(str(path))})')
    return con


def records_table(tables: dict[str, Path], keys: pa.Table) -> pa.Table:
    """(dataset, image_key, record, in_export) for the images in `keys` (dataset, image_key)."""
    con = _connect(tables)
    try:
        con.register("shown", keys)
        parts = []
        for spec in datasets.DATASETS:
            if spec.image_records and all(t in tables for t in spec.tables()):
                parts.append(f"select '{spec.name}' as dataset, image_key, record::varchar as record, in_export "
                             f"from ({spec.image_records}) where image_key in "
                             f"(select image_key from shown where dataset = '{spec.name}')")
        if not parts:
            return RECORDS_SCHEMA.empty_table()
        return con.sql(" union all ".join(parts) + " order by 1, 2, 3").to_arrow_table().cast(RECORDS_SCHEMA)
    finally:
        con.close()


def record_texts(tables: dict[str, Path], wanted: list[RecordId]) -> dict[RecordId, str]:
    """The text that identifies each record in `wanted` (dataset, record key), by its dataset's
    `record_text` SQL over the candidate's tables; records without one are left out. A dataset
    whose tables the candidate lacks has no texts here."""
    specs = {d.name: d for d in datasets.DATASETS if d.record_text}
    keys = pa.table({"dataset": pa.array([d for d, _ in wanted], pa.string()),
                     "record": pa.array([k for _, k in wanted], pa.string())})
    out: dict[RecordId, str] = {}
    con = _connect(tables)
    try:
        con.register("wanted", keys)
        for name in sorted({d for d, _ in wanted} & specs.keys()):
            try:
                rows = con.execute(
                    f"select record::varchar, text::varchar from ({specs[name].record_text}) "
                    f"where record::varchar in (select record from wanted where dataset = ?) and text is not null",
                    [name]).fetchall()
            except duckdb.CatalogException:  # a table of that dataset is not in this candidate
                continue
            out.update(((name, record), text) for record, text in rows)
    finally:
        con.close()
    return out


def stored_signatures(path: Path | None, batch_rows: int = SIGNATURE_BATCH):
    """A `Signatures` lookup over the staged image signatures (image_hashes' internal table):
    the thumbnails of a page are made from them instead of reading the images again. Read in
    batches of `batch_rows` (a signature is 18 KB; decisions.SIGNATURE_BATCH), keeping only the wanted rows."""
    def lookup(shas: set[str]) -> dict[str, tuple[bytes, int, int]]:
        from pipeline.staging import parts_of, streamed

        found: dict[str, tuple[bytes, int, int]] = {}
        if path is None or not Path(path).exists():
            return found
        wanted = pa.array(sorted(shas), pa.string())
        batches = (b for p in parts_of(path) for b in streamed(p, batch_rows, ["sha256", "thumb", "width", "height"]))
        for batch in batches:
            keep = pc.is_in(batch.column(0), value_set=wanted)
            for row in pa.Table.from_batches([batch]).filter(keep).to_pylist():
                found.setdefault(row["sha256"], (row["thumb"], row["width"], row["height"]))
        return found

    return lookup


def review_release(out: Path, tables: dict[str, Path], snapshots: dict, layout, release_id: str,
                   schema: str | None, signatures: Path | None = None) -> ReviewStats:
    """Write the review page of a candidate whose tables are the Parquet files `tables`;
    `signatures`: the staged image signatures, which the thumbnails are made from."""
    hashes = _read(tables, "image_hashes", ["dataset", "image_key", "sha256", "width", "height", "bytes"])
    clusters = _read(tables, "duplicate_clusters")
    contamination = _read(tables, "contamination")
    near = _read(tables, "dedupe_near_misses")
    shown = pa.concat_tables([
        clusters.select(["dataset", "image_key"]),
        contamination.select(["train_dataset", "train_image_key"]).rename_columns(["dataset", "image_key"]),
        contamination.select(["eval_dataset", "eval_image_key"]).rename_columns(["dataset", "image_key"]),
        near.select(["dataset_a", "image_key_a"]).rename_columns(["dataset", "image_key"]),
        near.select(["dataset_b", "image_key_b"]).rename_columns(["dataset", "image_key"]),
    ])
    specs = {d.name: d for d in datasets.DATASETS}

    def reader(dataset: str, keys: list[str]):
        spec = specs.get(dataset)
        if spec is None or not spec.review_images:
            return iter(())
        return load(spec.review_images)(snapshots.get(dataset), tables, layout, keys)

    data = ReviewInput(
        title="rewardhouse: dedupe and contamination review",
        subtitle=", ".join(d.name for d in datasets.DATASETS),
        images=hashes, clusters=clusters, contamination=contamination, near_misses=near,
        overrides=_read(tables, "dedupe_overrides"), records=records_table(tables, shown),
        release_id=release_id, schema=schema,
        record_leaks=RecordLeaks(_read(tables, "record_contamination"), _read(tables, "eval_overlap"),
                                 lambda wanted: record_texts(tables, wanted)),
        leak_overrides=_read(tables, "leak_overrides"),
        signatures=stored_signatures(signatures) if signatures else None,
    )
    return write_review(out / "index.html", data, reader, ThumbnailStore(layout.root))
