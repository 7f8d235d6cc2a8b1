"""Raw sources: `sample` (generated offline miniature), `local` (a mirror folder), `hf` (download).

Each dataset has its own fetch, in its package (`pipeline/<dataset>/source.py`, named by its
DatasetSpec), built on the helpers here; all three sources leave the upstream layout behind. A `local`
folder may hold one dataset and not the other: a dataset with none of its files there is absent
(None), one with only some of its files is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pipeline.settings import Layout, Settings
from pipeline.sources.base import ChecksumCache, SourceError

SOURCES = ("sample", "local", "hf")
Log = Callable[[str], None]


def checksum_cache(layout: Layout) -> ChecksumCache:
    return ChecksumCache(layout.raw / "checksums.json")


def local_path(settings: Settings) -> Path:
    if not settings.local_path:
        raise SourceError("the local source needs a path: rewardhouse run --source local --path DIR")
    path = Path(settings.local_path).expanduser()
    if not path.is_dir():
        raise SourceError(f"local source path {path} is not a directory; pass --path DIR mirroring the upstream layout")
    return path


def check_source(source: str) -> None:
    if source not in SOURCES:
        raise SourceError(f"unknown source {source!r}; choose one of {', '.join(SOURCES)}")


def fetch_by_source(settings: Settings, layout: Layout, snapshot: Callable, *, write_sample: Callable[[Path], object],
                    sample_version: tuple[str, str], hf: Callable[[ChecksumCache], object]):
    """The sample/local part every dataset's fetch shares: the sample written under raw/sample and
    inventoried, a local mirror inventoried in place (`snapshot(root, source, cache, revisions=...)`
    returns None when it does not hold the dataset), else `hf(cache)`."""
    check_source(settings.source)
    cache = checksum_cache(layout)
    if settings.source == "sample":
        root = layout.raw_source("sample")
        write_sample(root)
        return snapshot(root, "sample", cache, revisions=dict([sample_version]))
    if settings.source == "local":
        path = local_path(settings)
        return snapshot(path, "local", cache, revisions={"local": str(path.resolve())})
    return hf(cache)

