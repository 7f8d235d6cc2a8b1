"""The `local` source: a folder that mirrors the upstream repositories, used in place."""

from __future__ import annotations

from pathlib import Path

from pipeline.sources.base import ChecksumCache, RawSnapshot, SourceError, snapshot_from_layout


def fetch_local(path: Path, cache: ChecksumCache) -> RawSnapshot:
    if not path.is_dir():
        raise SourceError(f"local source path {path} is not a directory; pass --path DIR mirroring the upstream layout")
    return snapshot_from_layout(path, "local", cache, revisions={"local": str(path.resolve())})
