"""Where the review page finds the bytes of an image it shows, per dataset (each dataset's spec
names its reader as `review_images`), and which records use an image (`image_records`).

A reader is `reader(snapshot, tables, layout, keys) -> Iterator[(image_key, bytes)]`: `snapshot`
is the dataset's RawSnapshot, `tables` the candidate's Parquet files by table name, `keys` the
image keys wanted. Only images that decoded (they are hashed) are asked for."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Iterator

import duckdb
import pyarrow as pa


def _lookup(parquet: Path, key_column: str, keys: Iterable[str], columns: str) -> list[tuple]:
    con = duckdb.connect()
    try:
        con.register("wanted", pa.table({"k": pa.array(list(keys), pa.string())}))
        return con.execute(f"select {key_column}, {columns} from read_parquet(?) t "
                           f"where {key_column} in (select k from wanted)", [str(parquet)]).fetchall()
    finally:
        con.close()


def mmrb2_images(snapshot, tables: dict, layout, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """Entries of the image zip, read in place (never extracted)."""
    from pipeline.archives import open_zip

    zip_path = snapshot.image_zip if snapshot else None
    if zip_path is None or "mmrb2_images" not in tables:
        return
    found = _lookup(tables["mmrb2_images"], "image_name", keys, "zip_entry")
    with open_zip(Path(zip_path)) as zf:
        for key, entry in sorted(found, key=lambda r: r[1] or ""):
            if entry:
                yield key, zf.read(entry)


def visualprm_images(snapshot, tables: dict, layout, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """Files of the content-addressed image store the inventory kept them in."""
    if "prm_images" not in tables:
        return
    for key, rel in _lookup(tables["prm_images"], "image_key", keys, "store_path"):
        path = layout.image_store / rel if rel else None
        if path is not None and path.is_file():
            yield key, path.read_bytes()


def vlrb_images(snapshot, tables: dict, layout, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """Images embedded in the parquet rows (keyed by their sha256), streamed a batch at a time."""
    from pipeline.staging import streaming_parquet
    from pipeline.vlrb.source import shards

    wanted = set(keys)
    for path in shards(snapshot):
        if not wanted:
            return
        pf = streaming_parquet(path)
        if "image" not in pf.schema_arrow.names:
            continue
        for batch in pf.iter_batches(batch_size=64, columns=["image"]):
            for image in batch.column(0).to_pylist():
                data = image.get("bytes") if isinstance(image, dict) else None
                if data is None:
                    continue
                key = f"sha256:{hashlib.sha256(data).hexdigest()}"
                if key in wanted:
                    wanted.discard(key)
                    yield key, data
