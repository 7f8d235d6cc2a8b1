"""Dagster's SQLite event log with one engine per database file, not one per event.

Dagster's `SqliteEventLogStorage` builds a SQLAlchemy engine, opens a connection, writes and
disposes of the engine for every event it stores: about 11 ms an event here, 400 events a run
(step starts, outputs, materializations, checks, log lines), so 3 of the 7 s of an unchanged
full-scale rerun were spent opening and closing SQLite files. `install()` keeps one engine per
file (a small pool of connections), and each event is still its own transaction, committed before
`store_event` returns: what a run that dies has written is what it had written before. Commits
skip the fsync of each transaction (synchronous=NORMAL on Dagster's WAL files, `_quick_commits`).

- A process forked with engines open forgets them in the child without closing them (SQLite
  connections must not cross a fork); the child opens its own.
- At most MAX_ENGINES files stay open per process (a long-lived process sees many runs' files);
  the least recently used is closed first.
- `wipe()` (which deletes the run files) closes the engines first.

Installed by pipeline.definitions, so every process that loads this code location (a CLI run, a
step process, the code server) stores events this way. Dagster's own processes (the webserver,
the daemon) keep its default. If Dagster's storage no longer looks as expected, nothing is changed.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager

MAX_ENGINES = 8

_engines: OrderedDict = OrderedDict()  # connection string -> Engine, most recently used last
_lock = threading.Lock()
_installed = False


def _engine(conn_string: str, timeout: float):
    import sqlalchemy as sa

    with _lock:
        engine = _engines.get(conn_string)
        if engine is not None:
            _engines.move_to_end(conn_string)
            return engine
        engine = _engines[conn_string] = sa.create_engine(conn_string, connect_args={"timeout": timeout})
        sa.event.listen(engine, "connect", _quick_commits)
        while len(_engines) > MAX_ENGINES:
            _, old = _engines.popitem(last=False)
            old.dispose()
        return engine


def _quick_commits(dbapi_connection, _record) -> None:
    """WAL files (Dagster sets journal_mode=WAL when it creates them) committed without an fsync
    each: a process that dies loses nothing it committed; only a power cut can lose the last
    transactions, never the database (SQLite's synchronous=NORMAL)."""
    if str(dbapi_connection.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def close_all() -> None:
    """Close every engine this process holds (the next event opens its file again)."""
    with _lock:
        while _engines:
            _engines.popitem()[1].dispose()


def _forget_after_fork() -> None:
    """In a forked child: drop the parent's engines without touching their connections."""
    global _lock
    _lock = threading.Lock()
    for engine in _engines.values():
        engine.dispose(close=False)
    _engines.clear()


def install() -> bool:
    """Make SqliteEventLogStorage keep its engines (module docstring). Returns whether it did."""
    global _installed
    if _installed:
        return True
    try:
        from dagster._core.storage.event_log.sqlite import sqlite_event_log as module
    except ImportError:
        return False
    storage = getattr(module, "SqliteEventLogStorage", None)
    timeout = getattr(module, "SQLITE_BUSY_TIMEOUT_SECONDS", None)
    needed = ("_connect", "_initdb", "conn_string_for_shard", "wipe")
    if storage is None or timeout is None or not all(hasattr(storage, name) for name in needed):
        return False
    wipe = storage.wipe

    @contextmanager
    def _connect(self, shard: str):
        with self._db_lock:
            engine = _engine(self.conn_string_for_shard(shard), timeout)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _wipe(self) -> None:
        close_all()
        wipe(self)

    storage._connect = _connect
    storage.wipe = _wipe
    os.register_at_fork(after_in_child=_forget_after_fork)
    _installed = True
    return True
