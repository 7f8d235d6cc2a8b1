"""Load VisualPRM400K raw files into the parser's `prm_input` relation.

Two upstream forms: parquet shards (`id`, `media` list<struct<bytes, path>>, `messages`) and
InternVL jsonl (`{"id": -1, "image": ..., "conversations": [...]}`, one file per origin dataset).
A file that cannot be read at all becomes a quarantine row (stage `read`), never a crash.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.quarantine import Rejection

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


def _sql_list(paths: list[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def parquet_problem(path: Path) -> str | None:
    """Why a shard cannot be parsed as the mm-eval/VisualPRM400K parquet form, or None."""
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        return f"unreadable parquet: {exc}"
    names = set(schema.names)
    missing = [c for c in ("id", "messages") if c not in names]
    if missing:
        return f"parquet lacks column(s) {', '.join(missing)}; columns are {', '.join(schema.names)}"
    if "media" in names:
        media = schema.field("media").type
        if not (pa.types.is_list(media) or pa.types.is_large_list(media)) or not pa.types.is_struct(media.value_type):
            return f"media column is {media}, expected a list of {{bytes, path}} structs"
    return None


def load_parquet_input(con: duckdb.DuckDBPyConnection, files: list[Path]) -> list[Rejection]:
    """Create `prm_input` from parquet shards, streaming (DuckDB reads them; nothing is held in Python).

    An image reference is its path, or `sha256:<hex>` of the embedded bytes when the path is empty."""
    rejected, good = [], []
    for f in files:
        problem = parquet_problem(f)
        if problem:
            rejected.append(Rejection(DATASET, "read", f.name, problem))
        else:
            good.append(f)
    if not good:
        con.execute("create or replace temp table prm_input as select * from empty_input")
        return rejected
    has_media = all("media" in pq.read_schema(f).names for f in good)
    media = (
        "list_transform(media, lambda m: coalesce(nullif(m.path, ''), 'sha256:' || sha256(m.bytes)))"
        if has_media
        else "[]::varchar[]"
    )
    # A `messages` column that is already structured (not a JSON string) is turned back into JSON text.
    con.execute(
        f"""
        create or replace temp table prm_input as
        select id::varchar as sample_id, null::varchar as source_hint,
               case when typeof(messages) = 'VARCHAR' then messages::varchar else to_json(messages)::varchar end as messages,
               {media} as image_refs,
               row_number() over (order by filename, file_row_number) as row_order
        from read_parquet({_sql_list(good)}, filename = true, file_row_number = true, union_by_name = true)
        """
    )
    return rejected


def load_jsonl_input(con: duckdb.DuckDBPyConnection, files: list[Path]) -> list[Rejection]:
    """Create `prm_input` from InternVL `*_prm.jsonl` files.

    Upstream writes `"id": -1` on every line, so a sample is named `{file stem}:{line number}`
    (1-based), and its source is the file stem without `_prm` (`MathV360K_prm.jsonl` → MathV360K).
    Lines are read as text here; all JSON work happens in DuckDB."""
    ids, hints, lines = [], [], []
    rejected = []
    for f in files:
        hint = f.stem[: -len("_prm")] if f.stem.endswith("_prm") else f.stem
        try:
            with open(f, "rb") as fh:
                for number, raw in enumerate(fh, start=1):
                    text = raw.decode("utf-8", errors="replace").strip()
                    if not text:
                        continue
                    ids.append(f"{f.stem}:{number}")
                    hints.append(hint)
                    lines.append(text)
        except OSError as exc:
            rejected.append(Rejection(DATASET, "read", f.name, f"unreadable file: {exc}"))
    con.register("prm_jsonl_lines", pa.table({"sample_id": ids, "source_hint": hints, "line": lines}))
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
               row_number() over () as row_order
        from prm_jsonl_lines
        """
    )
    con.unregister("prm_jsonl_lines")
    return rejected


def connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("empty_input", INPUT_SCHEMA.empty_table())
    return con
