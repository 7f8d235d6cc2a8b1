"""Staged tables: Parquet files between assets, keyed by the input they were built from."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# A staged folder that holds a finished result records it in this file; its mtime is the folder's
# last use (written when built, touched when reused), which `rewardhouse gc` goes by.
RESULT_FILE = "_result.json"
# A release candidate's description, rewritten by every run that stages it.
CANDIDATE_FILE = "candidate.json"


def write_staged(directory: Path, tables: dict[str, pa.Table]) -> dict[str, str]:
    """Write each table atomically (tmp + rename) and return {table: path}."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, table in tables.items():
        final = directory / f"{name}.parquet"
        tmp = directory / f".{name}.{uuid.uuid4().hex[:8]}.parquet"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, final)
        paths[name] = str(final)
    return paths


def write_text_atomic(path: Path, text: str) -> None:
    """A small record (a candidate, a check outcome) written whole or not at all: a run killed
    while writing it leaves the previous version, never half a file."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_staged(paths: dict[str, str]) -> dict[str, pa.Table]:
    return {name: pq.read_table(path) for name, path in paths.items()}


def write_staged_stream(path: Path, sources: list[str], schema: pa.Schema, batch_rows: int = 8192) -> str:
    """Concatenate staged Parquet files into one, batch by batch (memory: one batch, not the
    tables), written to a temporary name and renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.parquet")
    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        for source in sources:
            for batch in pq.ParquetFile(source).iter_batches(batch_size=batch_rows, columns=schema.names):
                writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
    os.replace(tmp, path)
    return str(path)
