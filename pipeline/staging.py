"""Staged tables: Parquet files between assets, keyed by the input they were built from."""

from __future__ import annotations

import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.unwritable import naming, notice

# A staged folder that holds a finished result records it in this file; its mtime is the folder's
# last use (written when built, touched when reused), which `rewardhouse gc` goes by.
RESULT_FILE = "_result.json"
# A release candidate's description, rewritten by every run that stages it.
CANDIDATE_FILE = "candidate.json"


@dataclass(frozen=True)
class Staged:
    """What an asset that stages tables hands to the assets after it: its published tables and
    the files only later assets read, each by name. `present` is False for a dataset the source
    does not hold (its tables are empty)."""

    tables: dict[str, str] = field(default_factory=dict)  # published table -> Parquet path
    internal: dict[str, str] = field(default_factory=dict)  # staged for later assets only
    present: bool = True
    # What the step read that belongs in the release id beside the settings (the digest of the
    # reviewers' decisions it applied): read once, where it is used, and handed on from here.
    fingerprint: dict = field(default_factory=dict)

    def files(self) -> list[str]:
        """Every file the hand-off points at (a reused record is valid only if all exist)."""
        return [*self.tables.values(), *self.internal.values()]

    def read(self) -> dict[str, pa.Table]:
        return read_staged(self.tables)

    def to_record(self) -> dict:
        return {"kind": type(self).__name__, **asdict(self)}

    @staticmethod
    def from_record(record: dict) -> "Staged | None":
        """The hand-off a reuse record holds, or None for a record of another shape (older code)."""
        kinds = {cls.__name__: cls for cls in (Staged, Export)}
        cls = kinds.get(record.get("kind")) if isinstance(record, dict) else None
        if cls is None:
            return None
        fields = {k: v for k, v in record.items() if k != "kind"}
        try:
            return cls(**fields)
        except TypeError:
            return None


@dataclass(frozen=True)
class Export(Staged):
    """A training export: besides its tables, the files to publish (release-relative path ->
    staged file), the images they link (exports/-relative path -> image store file), its row
    count and what it left out; `render`: files made at publish time from the release's final
    folder (release-relative path -> "module:function(release_dir, export) -> bytes", e.g. a meta
    file that must name where the release lives)."""

    exports: dict[str, str] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    removed: dict = field(default_factory=dict)
    dataset: str = ""
    render: dict[str, str] = field(default_factory=dict)

    def files(self) -> list[str]:
        return [*super().files(), *self.exports.values(), *self.images.values()]


@dataclass(frozen=True)
class Candidate:
    """The next release as staged for the gate: its id, folder, tables, sources, settings and exports."""

    release_id: str
    dir: str
    tables: dict[str, str]
    sources: dict
    settings: dict
    exports: dict  # train set -> Export.to_record() of its training export
    # A bucket root: the release its CURRENT named when this run read it (None: it had none). The
    # candidate is judged against it, and the publish moves CURRENT only if it still names it.
    built_on: str | None = None

    def read(self) -> dict[str, pa.Table]:
        return read_staged(self.tables)

    def to_json(self) -> str:
        import json

        return json.dumps(asdict(self), indent=2, sort_keys=True)


def _leaves(name: str, t: pa.DataType):
    """(Parquet column path, Arrow type) of each leaf under a field, as pyarrow names them."""
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _leaves(f"{name}.{t.field(i).name}", t.field(i).type)
    elif pa.types.is_map(t):
        yield from _leaves(f"{name}.key_value.key", t.key_type)
        yield from _leaves(f"{name}.key_value.value", t.item_type)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _leaves(f"{name}.list.element", t.value_type)
    else:
        yield name, t


def parquet_options(schema: pa.Schema) -> dict:
    """How a staged table is written: zstd, except its binary columns (image bytes, signatures,
    zlib blobs), stored plain and without a dictionary. Their bytes are near random already:
    zstd saved a fifth of a full-scale `image_hashes` (18 KB signatures of photos) and cost 1.5 s
    to write and as much to read, each time a step passes the table on."""
    leaves = [leaf for f in schema for leaf in _leaves(f.name, f.type)]
    binary = {path for path, t in leaves if pa.types.is_binary(t) or pa.types.is_large_binary(t)
              or pa.types.is_fixed_size_binary(t)}
    if not binary:
        return {"compression": "zstd"}
    return {"compression": {path: "none" if path in binary else "zstd" for path, _ in leaves},
            "use_dictionary": [path for path, _ in leaves if path not in binary]}


def write_staged(directory: Path, tables: dict[str, pa.Table]) -> dict[str, str]:
    """Write each table atomically (tmp + rename) and return {table: path}."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, table in tables.items():
        final = directory / f"{name}.parquet"
        tmp = directory / f".{name}.{uuid.uuid4().hex[:8]}.parquet"
        try:
            pq.write_table(table, tmp, **parquet_options(table.schema))
            os.replace(tmp, final)
        except OSError as exc:  # a full disk: leave no partial file, and say which one it was
            tmp.unlink(missing_ok=True)
            notice(named := naming(exc, final))
            raise named from exc
        paths[name] = str(final)
    return paths


def write_text_atomic(path: Path, text: str) -> None:
    """A small record (a candidate, a check outcome) written whole or not at all: a run killed
    while writing it leaves the previous version, never half a file."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        notice(named := naming(exc, path))
        raise named from exc


def read_staged(paths: dict[str, str]) -> dict[str, pa.Table]:
    return {name: pq.read_table(path) for name, path in paths.items()}


def streaming_parquet(path) -> pq.ParquetFile:
    """A Parquet file to read batch by batch in bounded memory. pyarrow's default pre-buffering
    keeps what it read ahead for the whole scan: iterating a 550 MB shard of embedded images in
    64-row batches peaked at 774 MB RSS with it, 242 MB without (1 MB read buffer)."""
    return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)


def streamed(path: str | Path, batch_rows: int, columns: list[str] | None = None):
    """A Parquet file's record batches, read as a stream: buffered reads and no pre-buffering, so
    memory holds about one batch, not a whole row group (Arrow otherwise reads every column chunk
    of the row groups ahead into its pool, which for a thumbnail column is hundreds of MB)."""
    return pq.ParquetFile(path, buffer_size=1 << 22, pre_buffer=False).iter_batches(batch_size=batch_rows,
                                                                                     columns=columns)


PART = "part-{:04d}.parquet"  # a gathered table's files, in order (link_staged)


def link_staged(directory: Path, sources: list[str]) -> str:
    """Staged Parquet files gathered into `directory` as its parts (PART, in the order given)
    without copying their bytes: hard links, since a staged file is never written again (removing
    the original leaves the link whole), a copy where the file system cannot link. Made under a
    temporary name and renamed into place, so the folder is whole or absent. Returns the folder,
    which `parts_of` reads back as the list of files."""
    import shutil

    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir(parents=True)
        for k, source in enumerate(sources):
            target = tmp / PART.format(k)
            try:
                os.link(source, target)
            except OSError:  # another file system, or one without hard links
                shutil.copyfile(source, target)
        if directory.exists():  # left by a run that died before recording it: not in use
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        notice(named := naming(exc, directory))
        raise named from exc
    return str(directory)


def parts_of(path: str | Path) -> list[str]:
    """The Parquet files a staged table is: the parts of a folder made by link_staged, in order, or
    the one file."""
    path = Path(path)
    if path.is_dir():
        return [str(p) for p in sorted(path.glob("part-*.parquet"))]
    return [str(path)]


BATCH_BYTES = 4 << 20  # a streamed copy's batches hold about this much (see batch_rows_for)


def batch_rows_for(sources: list[str], most: int = 8192) -> int:
    """Rows per batch that hold about BATCH_BYTES of the widest source (from its footer): Arrow's
    pool maps a buffer of more than a few MB afresh each time and every page of it is zeroed on
    first touch, so 8,192 rows of 18 KB image signatures (150 MB a batch) copied 260 MB in
    1-3.5 s, batches of 256 in 0.3 s."""
    widest = 0.0
    for source in sources:
        meta = pq.ParquetFile(source).metadata
        if meta.num_rows:
            size = sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
            widest = max(widest, size / meta.num_rows)
    return max(16, min(most, int(BATCH_BYTES // widest))) if widest else most


def write_staged_stream(path: Path, sources: list[str], schema: pa.Schema, batch_rows: int | None = None) -> str:
    """Concatenate staged Parquet files into one, batch by batch (memory: one batch, not the
    tables; `batch_rows` by default from batch_rows_for), written to a temporary name and renamed
    into place."""
    if batch_rows is None:
        batch_rows = batch_rows_for(sources)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.parquet")
    try:
        with pq.ParquetWriter(tmp, schema, **parquet_options(schema)) as writer:
            for source in sources:
                for batch in streamed(source, batch_rows, schema.names):
                    writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: leave no partial file, and say which one it was
        tmp.unlink(missing_ok=True)
        notice(named := naming(exc, path))
        raise named from exc
    finally:
        pa.default_memory_pool().release_unused()
    return str(path)
