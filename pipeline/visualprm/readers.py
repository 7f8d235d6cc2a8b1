"""Load VisualPRM400K raw files into the parser's `prm_input` relation.

Two upstream forms: parquet shards (`id`, `media` list<struct<bytes, path>>, `messages`) and
InternVL jsonl (`{"id": -1, "image": ..., "conversations": [...]}`, one file per origin dataset).
A file that cannot be read at all, or a shard whose columns drifted from the upstream format
(contract.SHARD), becomes a quarantine row (stage `file`), never a crash. Beside `prm_input` each
reader leaves `prm_input_files` (file_no, name, records): what each file read whole held, so
`refused_files` can name a file that held nothing or gave no sample.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.quarantine import FILE_STAGE, Rejection, utf8_text, whole_file_faults
from pipeline.visualprm.contract import SHARD
from pipeline.settings import quiet_duckdb

DATASET = "visualprm"

INPUT_SCHEMA = pa.schema(
    [
        ("sample_id", pa.string()),
        ("source_hint", pa.string()),
        ("messages", pa.string()),
        ("image_refs", pa.list_(pa.string())),
        ("row_order", pa.int64()),
    ]
)


_JSON_KINDS = {"ARRAY": "array", "OBJECT": "object", "VARCHAR": "string", "NULL": "null", "BOOLEAN": "boolean"}


def _sql_list(paths: list[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def parquet_problem(path: Path) -> str | None:
    """Why a shard cannot be parsed as the mm-eval/VisualPRM400K parquet form, or None."""
    return SHARD.parquet_problem(path)


def _files_table(con: duckdb.DuckDBPyConnection, counts: list[tuple[int, str, int]]) -> None:
    con.execute("create or replace temp table prm_input_files (file_no integer, name varchar, records bigint)")
    if counts:
        con.executemany("insert into prm_input_files values (?, ?, ?)", counts)


def load_parquet_input(con: duckdb.DuckDBPyConnection, files: list[Path]) -> list[Rejection]:
    """Create `prm_input` from parquet shards, streaming (DuckDB reads them; nothing is held in Python).

    Each shard's schema is checked against contract.SHARD first, so a shard whose columns drifted
    (an `id` that is no longer text, a `messages` or `media` of another type) is refused (stage
    `file`) whole and no id is ever cast; the others are read one by one (one without `media` too),
    and one DuckDB cannot read is refused whole too. An image reference is its path, or
    `sha256:<hex>` of the embedded bytes when the path is empty."""
    rejected, counts = [], []
    con.execute(
        """create or replace temp table prm_shard_rows (sample_id varchar, source_hint varchar, messages varchar,
                                                       image_refs varchar[], filename varchar, file_row_number bigint,
                                                       file_no integer)"""
    )
    for file_no, f in enumerate(files):
        problem = parquet_problem(f)
        if problem is None:
            media = (
                "list_transform(media, lambda m: coalesce(nullif(m.path::varchar, ''), 'sha256:' || sha256(m.bytes::blob)))"
                if "media" in pq.read_schema(f).names
                else "[]::varchar[]"
            )
            # A `messages` column that is already structured (not a JSON string) is turned back into JSON text.
            try:
                (inserted,) = con.execute(
                    f"""
                    insert into prm_shard_rows
                    select id::varchar, null::varchar,
                           case when typeof(messages) = 'VARCHAR' then messages::varchar else to_json(messages)::varchar end,
                           {media}, filename, file_row_number, {file_no}
                    from read_parquet({_sql_list([f])}, filename = true, file_row_number = true)
                    """
                ).fetchone()
                counts.append((file_no, f.name, inserted))
            except duckdb.Error as exc:
                problem = f"unreadable parquet: {str(exc).splitlines()[0]}"
        if problem:
            rejected.append(Rejection(DATASET, FILE_STAGE, f.name, problem))
    con.execute(
        """
        create or replace temp table prm_input as
        select sample_id, source_hint, messages, image_refs,
               row_number() over (order by filename, file_row_number) as row_order, file_no
        from prm_shard_rows
        """
    )
    _files_table(con, counts)
    return rejected


def load_jsonl_input(con: duckdb.DuckDBPyConnection, files: list[Path]) -> list[Rejection]:
    """Create `prm_input` from InternVL `*_prm.jsonl` files.

    Upstream writes `"id": -1` on every line, so a sample is named `{file stem}:{line number}`
    (1-based), and its source is the file stem without `_prm` (`MathV360K_prm.jsonl` → MathV360K).
    Lines are read as text here; all JSON work happens in DuckDB. A line that is not UTF-8, is
    JSON but not an object, or has an `image` that is neither a path nor a list of paths is
    quarantined (stage `read`); invalid JSON is left to the parser, which says so."""
    ids, hints, lines, file_nos = [], [], [], []
    rejected, counts = [], []
    for file_no, f in enumerate(files):
        stem = utf8_text(f.stem)
        hint = stem[: -len("_prm")] if stem.endswith("_prm") else stem
        records = 0
        try:
            with open(f, "rb") as fh:
                for number, raw in enumerate(fh, start=1):
                    try:
                        text = raw.decode("utf-8").strip()
                    except UnicodeDecodeError as exc:
                        records += 1
                        rejected.append(Rejection(DATASET, "read", f"{stem}:{number}",
                                                  f"line is not valid UTF-8 ({exc.reason} at byte {exc.start})"))
                        continue
                    if not text:
                        continue
                    records += 1
                    ids.append(f"{stem}:{number}")
                    hints.append(hint)
                    lines.append(text)
                    file_nos.append(file_no)
        except OSError as exc:
            rejected.append(Rejection(DATASET, FILE_STAGE, utf8_text(f.name), f"unreadable file: {exc}"))
            continue
        counts.append((file_no, utf8_text(f.name), records))
    con.register("prm_jsonl_lines", pa.table({"sample_id": pa.array(ids, pa.string()), "source_hint": pa.array(hints, pa.string()),
                                              "line": pa.array(lines, pa.string()), "pos": pa.array(range(len(ids)), pa.int64()),
                                              "file_no": pa.array(file_nos, pa.int32())}))
    con.execute(
        """
        create or replace temp table prm_jsonl_misfits as
        select sample_id, pos, json_type(line) <> 'OBJECT' as not_object,
               case when json_type(line) <> 'OBJECT' then json_type(line) else json_type(line, '$.image') end as found
        from prm_jsonl_lines
        where json_valid(line)
          and (json_type(line) <> 'OBJECT' or json_type(line, '$.image') not in ('VARCHAR', 'ARRAY', 'NULL'))
        """
    )
    for sid, not_object, found in con.execute("select sample_id, not_object, found from prm_jsonl_misfits order by pos").fetchall():
        kind = _JSON_KINDS.get(found, "number")
        reason = f"line is a JSON {kind}, expected an object" if not_object else f"image is a JSON {kind}, expected a path or a list of paths"
        rejected.append(Rejection(DATASET, "read", sid, reason))
    con.execute(
        """
        create or replace temp table prm_input as
        select sample_id, source_hint,
               case when json_valid(line) and json_type(line, '$.conversations') = 'ARRAY'
                    then (line->'conversations')::varchar else line end as messages,
               case when not json_valid(line) then []::varchar[]
                    when json_type(line, '$.image') = 'VARCHAR' then [line->>'image']
                    when json_type(line, '$.image') = 'ARRAY'
                         then list_filter(json_extract_string(line, '$.image[*]'), lambda x: x is not null)
                    else []::varchar[] end as image_refs,
               row_number() over (order by pos) as row_order, file_no
        from prm_jsonl_lines anti join prm_jsonl_misfits using (pos)
        """
    )
    con.unregister("prm_jsonl_lines")
    _files_table(con, counts)
    return rejected


def refused_files(con: duckdb.DuckDBPyConnection, samples: pa.Table) -> list[Rejection]:
    """Stage-`file` rows for the files `prm_input` was loaded from that held no records, or whose
    records all failed to become a sample of `samples` (prm_samples once parsed and checked against
    the record contract: its `row_index` is the input's `row_order`)."""
    con.register("prm_kept_rows", samples.select(["row_index"]))
    try:
        rows = con.execute(
            """
            select f.name, f.records, count(k.row_index)
            from prm_input_files f
            left join prm_input i using (file_no)
            left join prm_kept_rows k on k.row_index = i.row_order
            group by f.file_no, f.name, f.records order by f.file_no
            """
        ).fetchall()
    finally:
        con.unregister("prm_kept_rows")
    return whole_file_faults(DATASET, rows)


def connect() -> duckdb.DuckDBPyConnection:
    return quiet_duckdb(duckdb.connect())
