"""Where the review page finds the bytes of an image it shows: each dataset brings its own reader
(`pipeline/<dataset>/review.py`, named by its DatasetSpec as `review_images`), and says which
records use an image (`image_records`). What the readers share is here.

A reader is `reader(snapshot, tables, layout, keys) -> Iterator[(image_key, bytes)]`: `snapshot`
is the dataset's RawSnapshot, `tables` the candidate's Parquet files by table name, `keys` the
image keys wanted. Only images that decoded (they are hashed) are asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

import duckdb
from pipeline.settings import quiet_duckdb
import pyarrow as pa


def lookup(parquet: Path, key_column: str, keys: Iterable[str], columns: str) -> list[tuple]:
    """(key, *columns) of the rows of a Parquet file whose `key_column` is one of `keys`."""
    con = quiet_duckdb(duckdb.connect())
    try:
        con.register("wanted", pa.table({"k": pa.array(list(keys), pa.string())}))
        return con.execute(f"select {key_column}, {columns} from read_parquet(?) t "
                           f"where {key_column} in (select k from wanted)", [str(parquet)]).fetchall()
    finally:
        con.close()


def from_image_store(inventory: Path, layout, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """The files of the content-addressed image store that an inventory table (`image_key`,
    `store_path`) says it kept the images in."""
    for key, rel in lookup(inventory, "image_key", keys, "store_path"):
        path = layout.image_store / rel if rel else None
        if path is not None and path.is_file():
            yield key, path.read_bytes()
