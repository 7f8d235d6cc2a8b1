"""The Python consumer API: a release's tables as polars LazyFrames.

    from warehouse import load
    steps = load("prm_steps")                    # the current release
    pairs = load("vlrb_pairs", release="3f2a…")  # a given release, by id or tag name
    steps.filter(pl.col("label") == "-").group_by("sample_id").len().collect()

`load` scans the release's Parquet file (nothing is read until `collect`, and only the columns and
row groups a query needs). Releases are immutable, so a LazyFrame keeps answering the same even
after a newer release becomes current. Read-only: no lock is taken, nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from pipeline import env
from pipeline.settings import Layout
from warehouse.store import ReleaseStore


def _store(home: str | Path | None) -> ReleaseStore:
    return ReleaseStore(Layout(Path(home).expanduser() if home else None).releases)


def release_path(release: str | None = None, home: str | Path | None = None) -> Path:
    """The folder of `release` (default: the current one) under the data root (`home`, else
    REWARDHOUSE_HOME, else data/). LookupError when there is none."""
    store = _store(home)
    rid = store.resolve(release) if release else store.current()
    if rid is None:
        raise LookupError(f"no current release under {store.path('').parent}; run `rewardhouse run` first")
    return store.path(rid)


def tables(release: str | None = None, home: str | Path | None = None) -> list[str]:
    """The table names of a release."""
    return sorted(p.stem for p in release_path(release, home).glob("*.parquet"))


def load(table: str, release: str | None = None, home: str | Path | None = None):
    """`table` of `release` (default: the current release) as a polars LazyFrame. `home` (or
    REWARDHOUSE_HOME) may be an object-store root, `s3://bucket/prefix`: the Parquet file is then
    scanned in place, by range, with the AWS_* settings of the environment (a bucket that cannot
    be read: `warehouse.objectstore.ObjectStoreError`, one line naming the endpoint and bucket)."""
    import polars as pl

    root = str(home) if home is not None else (env.home() or "")
    if root.startswith("s3://"):
        return _load_remote(table, release, root)
    folder = release_path(release, home)
    path = folder / f"{table}.parquet"
    if not path.is_file():
        raise KeyError(f"release {folder.name} has no table {table!r}; tables: {', '.join(tables(folder.name, home))}")
    return pl.scan_parquet(path)


def _load_remote(table: str, release: str | None, url: str):
    import polars as pl

    from warehouse.objectstore import ObjectReleaseStore, Root, polars_options

    root = Root.parse(url)
    store = ObjectReleaseStore(root)
    rid = store.tags().get(release, release) if release else store.current()
    if rid is None:
        raise LookupError(f"no current release under {root}; publish one first")
    manifest = store.manifest(rid)
    if manifest is None and release is None:  # CURRENT named a release not readable yet: read both once more
        rid = store.current() or rid
        manifest = store.manifest(rid)
    if manifest is None:
        raise LookupError(f"no release {rid!r} under {root}; releases: {', '.join(store.releases()) or 'none'}")
    tables = manifest.get("tables", {})
    if tables and table not in tables:
        raise KeyError(f"release {rid} has no table {table!r}; tables: {', '.join(sorted(tables))}")
    return pl.scan_parquet(f"s3://{root.bucket}/{root.key('releases', rid, table + '.parquet')}", storage_options=polars_options())

