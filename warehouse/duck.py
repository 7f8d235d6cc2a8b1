"""The DuckDB warehouse: one schema per kept release, `main` views on the current one.

The file is rebuilt beside the live one and swapped in with os.replace, so readers never see a
half-built warehouse. Tables are copied into DuckDB (not views on Parquet paths), so the file
works read-only from any working directory and even after the data root moves.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import duckdb

from warehouse.store import Manifest, ReleaseStore

META_TABLE = "_rewardhouse"
SQL_DIR = Path(__file__).resolve().parent / "sql"


def schema_for(release_id: str) -> str:
    return f"release_{release_id}"


def _quote(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# DuckDB 2 dropped avg() over BOOLEAN; `avg(label = '+')` is the natural way to ask for a positive
# rate, so reader sessions get it back. Every other argument type passes straight to the built-in.
_SESSION_MACROS = (
    "create or replace temp macro avg(x BOOLEAN) as system.main.avg(x::double), (x) as system.main.avg(x)",
)


def connect_readonly(db_path: Path) -> duckdb.DuckDBPyConnection:
    """A read-only session on the warehouse, with the reader conveniences above."""
    con = duckdb.connect(str(db_path), read_only=True)
    for statement in _SESSION_MACROS:
        con.execute(statement)
    return con


def warehouse_release(db_path: Path) -> str | None:
    """The release the warehouse's `main` views point at, or None when absent/unreadable."""
    if not db_path.is_file():
        return None
    try:
        with duckdb.connect(str(db_path), read_only=True) as con:
            row = con.execute(f"select current_release from main.{META_TABLE}").fetchone()
    except duckdb.Error:
        return None
    return row[0] if row else None


def sync_warehouse(store: ReleaseStore, db_path: Path) -> str | None:
    """Make the warehouse reflect the store: a schema per release, main views on CURRENT."""
    current = store.current()
    manifests = store.list()
    tmp = db_path.with_name(f".{db_path.name}.{uuid.uuid4().hex[:8]}")
    if db_path.is_file() and warehouse_release(db_path) is not None:
        shutil.copy2(db_path, tmp)
    try:
        with duckdb.connect(str(tmp)) as con:
            _sync(con, store, manifests, current)
            con.execute("checkpoint")
        os.replace(tmp, db_path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            if leftover.exists():
                leftover.unlink()
    return current


def _sync(con: duckdb.DuckDBPyConnection, store: ReleaseStore, manifests: list[Manifest], current: str | None) -> None:
    kept = {m.release_id: m for m in manifests}
    existing = {
        r[0]
        for r in con.execute(
            "select schema_name from information_schema.schemata where schema_name like 'release\\_%' escape '\\'"
        ).fetchall()
    }
    for schema in existing - {schema_for(r) for r in kept}:
        con.execute(f"drop schema {_quote(schema)} cascade")
    for rid, manifest in kept.items():
        schema = schema_for(rid)
        if schema in existing:
            continue
        con.execute(f"create schema {_quote(schema)}")
        for table, entry in manifest.tables.items():
            file = store.path(rid) / entry["file"]
            con.execute(
                f"create table {_quote(schema)}.{_quote(table)} as select * from read_parquet({_sql_str(str(file))})"
            )

    # main: views on the current release; drop views of tables the current release lacks.
    for (view,) in con.execute(
        "select view_name from duckdb_views() where schema_name = 'main' and not internal"
    ).fetchall():
        con.execute(f"drop view main.{_quote(view)}")
    if current is not None:
        for table in kept[current].tables:
            con.execute(
                f"create view main.{_quote(table)} as select * from {_quote(schema_for(current))}.{_quote(table)}"
            )
        # Derived views, one per file in warehouse/sql/, over the current release's tables; a view
        # over a dataset this release does not carry is left out.
        for file in sorted(SQL_DIR.glob("*.sql")):
            try:
                con.execute(f"create view main.{_quote(file.stem)} as {file.read_text()}")
            except duckdb.CatalogException:
                continue

    con.execute(
        """
        create or replace table main.releases (
            release_id varchar primary key,
            created_at timestamptz,
            is_current boolean,
            schema_name varchar,
            code_version varchar,
            sources json,
            settings json,
            row_counts json
        )
        """
    )
    for m in manifests:
        con.execute(
            "insert into main.releases values (?, ?::timestamptz, ?, ?, ?, ?::json, ?::json, ?::json)",
            [
                m.release_id,
                m.created_at,
                m.release_id == current,
                schema_for(m.release_id),
                m.code_version,
                json.dumps(m.sources, sort_keys=True),
                json.dumps(m.settings, sort_keys=True),
                json.dumps(m.row_counts, sort_keys=True),
            ],
        )
    con.execute(f"create or replace table main.{META_TABLE} as select ?::varchar as current_release", [current])
