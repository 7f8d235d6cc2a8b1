"""The DuckDB warehouse: one schema per kept release, `main` views on the current one.

The file is rebuilt beside the live one, fsynced and swapped in with os.replace under the store's
writer lock, so readers never see a half-built warehouse and writers never undo each other. Tables
are copied into DuckDB (not views on Parquet paths), so the file works read-only from any working
directory and even after the data root moves.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, NamedTuple

import duckdb
import pyarrow as pa

from pipeline.stopping import critical_section
from warehouse.store import Manifest, Pin, PublishError, ReleaseStore, fsync, write_failure

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


def connect_readonly(db_path: Path, limits: SessionLimits | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only session on the warehouse, with the reader conveniences above, that can touch no
    other file (no COPY … TO, ATTACH, read_csv, extension install) and cannot be talked out of it:
    DuckDB's external access is off and its configuration locked."""
    return lock_session(duckdb.connect(str(db_path), read_only=True), limits)


SPILL_PREFIX = "rewardhouse-sql-"


def spill_folder(base: Path):
    """A reader's own folder for DuckDB to spill to, under `base`, removed on the way out; one a
    killed reader left is removed by the next reader (pipeline.spill)."""
    from pipeline.spill import spill_folder as folder

    return folder(base, SPILL_PREFIX)


class QueryStopped(Exception):
    """A reader's query was interrupted: `reason` is "timeout" or "interrupt"; `by` is the
    KeyboardInterrupt (or subclass: a SIGTERM's) that stopped it, None for a timeout."""

    def __init__(self, reason: str, seconds: float, by: BaseException | None = None):
        super().__init__(reason)
        self.reason, self.seconds, self.by = reason, seconds, by


def _shortest32(v):
    """A FLOAT (32-bit) value as the shortest decimal that reads back to it: 0.9998779, not the
    0.9998779296875 its widening to a Python float spells."""
    import struct

    if not isinstance(v, float) or v != v or v in (float("inf"), float("-inf")):
        return v
    for digits in range(6, 10):
        text = f"{v:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == v:
            return float(text)
    return v


def _float32_shortest(types, rows: list[tuple]) -> list[tuple]:
    single = [i for i, t in enumerate(types) if str(t) == "FLOAT"]
    if not single:
        return rows
    out = []
    for row in rows:
        row = list(row)
        for i in single:
            row[i] = _shortest32(row[i])
        out.append(tuple(row))
    return out


def run_query(con: duckdb.DuckDBPyConnection, query: str, timeout: float | None) -> tuple[list[str], list[tuple]] | None:
    """Run `query` and fetch its rows, interruptibly: DuckDB holds the calling thread until the
    query ends, so the query runs on a worker thread while this one waits, and a timeout or Ctrl-C
    (KeyboardInterrupt here) interrupts DuckDB, which stops at its next vector. Returns (columns,
    rows), or None for a statement without a result; QueryStopped when interrupted."""
    import threading
    import time

    done: dict = {}
    # Waiting on an Event, not Thread.join: a join cut short by KeyboardInterrupt takes the thread
    # for ended while it still runs inside DuckDB.
    finished = threading.Event()

    def work() -> None:
        rel = None
        try:
            rel = con.sql(query)
            done["result"] = None if rel is None else (rel.columns, _float32_shortest(rel.types, rel.fetchall()))
        except BaseException as exc:  # handed to the waiting thread, raised there
            # Without its traceback: a frame holding the relation keeps the connection busy.
            done["error"] = exc.with_traceback(None)
        finally:
            del rel
            finished.set()

    started = time.monotonic()
    threading.Thread(target=work, name="rewardhouse-sql", daemon=True).start()
    reason, by = None, None
    try:
        while not finished.is_set():
            left = None if timeout is None else timeout - (time.monotonic() - started)
            if left is not None and left <= 0:
                reason = "timeout"
                break
            finished.wait(0.2 if left is None else min(0.2, left))
    except KeyboardInterrupt as exc:
        reason, by = "interrupt", exc
    if reason is not None:
        con.interrupt()  # DuckDB stops at its next vector; again if the query had not begun yet
        while not finished.wait(0.5):
            con.interrupt()
        if "result" not in done:  # else it ended just as it was stopped: the rows are whole
            raise QueryStopped(reason, time.monotonic() - started, by)
    if "error" in done:
        raise done["error"]
    return done["result"]


@dataclass(frozen=True)
class SessionLimits:
    """What one reader's session may take: DuckDB's memory limit (`4GB`, `25%`), where it spills
    (a folder outside the data root, so a reader never fills the disk a publish needs) and how much
    it may spill there."""

    memory_limit: str
    temp_directory: Path
    max_temp_size: str


def lock_session(con: duckdb.DuckDBPyConnection, limits: SessionLimits | None = None) -> duckdb.DuckDBPyConnection:
    """Add the reader conveniences and the session's limits, then shut the session off from every
    other file for good (the limits are part of the locked configuration)."""
    con.execute("set enable_progress_bar = false")  # a long query's bar would land among the rows (settings.quiet_duckdb)
    for statement in _SESSION_MACROS:
        con.execute(statement)
    if limits is not None:
        con.execute(f"set memory_limit = {_sql_str(limits.memory_limit)}")
        con.execute(f"set temp_directory = {_sql_str(str(limits.temp_directory))}")
        con.execute(f"set max_temp_directory_size = {_sql_str(limits.max_temp_size)}")
    con.execute("set enable_external_access = false")
    con.execute("set lock_configuration = true")
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


class Published(NamedTuple):
    manifest: Manifest
    published: bool  # CURRENT moved to the release
    pruned: list[str]  # releases deleted by the retention rule
    held: Pin | None = None  # a rollback's pin kept CURRENT where it is (the release is written, not current)


def publish_release(
    store: ReleaseStore,
    db_path: Path,
    release_id: str,
    tables: dict[str, pa.Table | Path],
    *,
    keep: int = 0,
    grace: float = 0.0,
    on_wait: Callable[[str], None] | None = None,
    changelog: Callable[[ReleaseStore, str, dict], Callable] | None = None,
    **publish_args: Any,
) -> Published:
    """Publish a release and point the warehouse at it, as one writer (`publish_args` as for
    ReleaseStore.publish; all but the newest `keep` releases are pruned, 0 keeps all, under
    ReleaseStore.prunable's rules with `grace`). The release folder is put in place and the
    warehouse rebuilt on it before CURRENT is swapped, and pruned folders go last, so a failure or
    crash at any step leaves CURRENT and the warehouse's main views on a complete release, the
    previous one until the swap. While a rollback's pin holds CURRENT on another release, the
    release is written and queryable by its id, CURRENT stays, nothing is pruned, and `held` says
    why. `changelog(store, release_id, publish_args)`, called under the lock, gives the store's
    `changes` hook: a new release's manifest keeps its diff against the release current then
    (warehouse.diff.changelog_hook). Waiting for the writer lock can be
    interrupted; from there on a stop signal waits until the publish is done (`critical_section`)."""
    with store.writer_lock(on_wait), critical_section():
        store.sweep_temporaries()
        pin = store.pin()
        was_current = store.current() == release_id
        if changelog is not None:
            publish_args["changes"] = changelog(store, release_id, publish_args)
        manifest, written = store.publish(release_id, tables, make_current=False, **publish_args)
        if pin is not None and pin.release != release_id and store.exists(pin.release):
            sync_warehouse(store, db_path, current=store.current())
            return Published(manifest, False, [], pin)
        # Published: CURRENT moves to it, whether its folder is new or was left whole by a publish
        # cut short before its swap (a full disk, a kill): what CURRENT says decides.
        published = written or not was_current
        pruned = store.prunable(keep, release_id, grace)
        sync_warehouse(store, db_path, current=release_id, without=pruned)
        try:
            store.set_current(release_id)
        except OSError as exc:
            raise write_failure(f"could not make release {release_id} current in {store.dir}", exc) from exc
        try:
            store.discard(pruned)
        except OSError as exc:
            raise write_failure(f"release {release_id} is current, but pruning {', '.join(pruned)} failed",
                                exc) from exc
    return Published(manifest, published, pruned)


def sync_warehouse(
    store: ReleaseStore, db_path: Path, current: str | None = None, without: Collection[str] = ()
) -> str | None:
    """Make the warehouse reflect the store: a schema per release (but those `without`, about to
    be pruned), main views on `current` (by default the store's CURRENT)."""
    with store.writer_lock():
        sweep_warehouse_temporaries(db_path)
        current = current or store.current()
        manifests = [m for m in store.list() if m.release_id not in without]
        tmp = db_path.with_name(f".{db_path.name}.{uuid.uuid4().hex[:8]}")
        try:
            if db_path.is_file() and warehouse_release(db_path) is not None:
                shutil.copy2(db_path, tmp)
            with duckdb.connect(str(tmp)) as con:
                _sync(con, store, manifests, current)
                con.execute("checkpoint")
            fsync(tmp)
            os.replace(tmp, db_path)
            fsync(db_path.parent)
        except (OSError, duckdb.Error) as exc:  # a full disk surfaces as either, often a failed commit
            if isinstance(exc, PublishError):
                raise
            kept = warehouse_release(db_path)
            raise write_failure(
                f"could not rebuild the warehouse {db_path} on release {current} "
                f"({f'it still serves release {kept}' if kept else 'no warehouse was written'})", exc
            ) from exc
        finally:
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                leftover.unlink(missing_ok=True)
    return current


def sweep_warehouse_temporaries(db_path: Path) -> list[str]:
    """Half-built copies left by a writer that died; only call under the store's writer lock."""
    removed = []
    for leftover in sorted(db_path.parent.glob(f".{db_path.name}.*")):
        leftover.unlink(missing_ok=True)
        removed.append(leftover.name)
    return removed


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


def write_release_database(release_dir: Path, manifest: Manifest, out: Path) -> Path:
    """One release as a DuckDB file of its own: its tables in `main`, the derived views of
    warehouse/sql/ over them. Immutable like the release, so a reader anywhere can attach it
    read-only (`rewardhouse sql` against an object-store root does)."""
    out.unlink(missing_ok=True)
    with duckdb.connect(str(out)) as con:
        for table, entry in sorted(manifest.tables.items()):
            file = release_dir / entry["file"]
            con.execute(f"create table main.{_quote(table)} as select * from read_parquet({_sql_str(str(file))})")
        for file in sorted(SQL_DIR.glob("*.sql")):
            try:
                con.execute(f"create view main.{_quote(file.stem)} as {file.read_text()}")
            except duckdb.CatalogException:
                continue
        con.execute(f"create table main.{META_TABLE} as select ?::varchar as current_release", [manifest.release_id])
        con.execute("checkpoint")
    return out
