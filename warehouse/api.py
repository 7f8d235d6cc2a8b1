"""The Python consumer API: a release's tables as polars LazyFrames.

    from warehouse import load
    steps = load("prm_steps")                    # the current release
    pairs = load("vlrb_pairs", release="3f2a…")  # a given release
    steps.filter(pl.col("label") == "-").group_by("sample_id").len().collect()

`load` scans the release's Parquet file (nothing is read until `collect`, and only the columns and
row groups a query needs). Releases are immutable, so a LazyFrame keeps answering the same even
after a newer release becomes current. Read-only: no lock is taken, nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.settings import Layout
from warehouse.store import ReleaseStore


def _store(home: str | Path | None) -> ReleaseStore:
    return ReleaseStore(Layout(Path(home).expanduser() if home else None).releases)


def release_path(release: str | None = None, home: str | Path | None = None) -> Path:
    """The folder of `release` (default: the current one) under the data root (`home`, else
    REWARDHOUSE_HOME, else data/). LookupError when there is none."""
    store = _store(home)
    rid = release or store.current()
    if rid is None:
        raise LookupError(f"no current release under {store.path('').parent}; run `rewardhouse run` first")
    if not store.exists(rid):
        known = ", ".join(m.release_id for m in store.list()) or "none"
        raise LookupError(f"no release {rid!r}; releases: {known}")
    return store.path(rid)


def tables(release: str | None = None, home: str | Path | None = None) -> list[str]:
    """The table names of a release."""
    return sorted(p.stem for p in release_path(release, home).glob("*.parquet"))


def load(table: str, release: str | None = None, home: str | Path | None = None):
    """`table` of `release` (default: the current release) as a polars LazyFrame."""
    import polars as pl

    folder = release_path(release, home)
    path = folder / f"{table}.parquet"
    if not path.is_file():
        raise KeyError(f"release {folder.name} has no table {table!r}; tables: {', '.join(tables(folder.name, home))}")
    return pl.scan_parquet(path)
