"""The `local` source: a folder that mirrors the upstream repositories, used in place."""

from __future__ import annotations

from pathlib import Path

from pipeline.settings import MMRB2_TASKS
from pipeline.sources.base import ANNOTATION_DIR, ChecksumCache, RawSnapshot, find_image_zip, snapshot_from_layout


def mmrb2_present(path: Path) -> bool:
    """Any MMRB2 file at all: then every required one must be there."""
    return find_image_zip(path) is not None or any(
        (path / ANNOTATION_DIR / f"{t}_response_only.json").is_file() for t in MMRB2_TASKS
    )


def fetch_local(path: Path, cache: ChecksumCache) -> RawSnapshot | None:
    """The MMRB2 files under `path`, or None when the folder holds none of them."""
    if not mmrb2_present(path):
        return None
    return snapshot_from_layout(path, "local", cache, revisions={"local": str(path.resolve())})
