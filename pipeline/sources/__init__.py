"""Raw sources: `sample` (generated offline miniature), `local` (a mirror folder), `hf` (download).

Each dataset has its own fetch; all three sources leave the upstream layout behind. A `local`
folder may hold one dataset and not the other: a dataset with none of its files there is absent
(None), one with only some of its files is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pipeline import env
from pipeline.settings import Layout, Settings
from pipeline.sources.base import ChecksumCache, RawSnapshot, SourceError

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


def _check(source: str) -> None:
    if source not in SOURCES:
        raise SourceError(f"unknown source {source!r}; choose one of {', '.join(SOURCES)}")


def fetch_mmrb2(settings: Settings, layout: Layout, log: Log = lambda s: None) -> RawSnapshot | None:
    """MMRB2's raw files (image zip + annotation JSONs)."""
    _check(settings.source)
    cache = checksum_cache(layout)
    if settings.source == "sample":
        from pipeline.mmrb2.sample import fetch_sample

        return fetch_sample(layout.raw_source("sample"), cache)
    if settings.source == "local":
        from pipeline.sources.local import fetch_local

        return fetch_local(local_path(settings), cache)
    from pipeline.sources.hf import fetch_hf

    # HF_ENDPOINT / HF_TOKEN as huggingface_hub reads them; the raw-file host can be redirected
    # too (a mirror, or a loopback server in tests).
    base = env.github_raw("https://raw.githubusercontent.com")
    return fetch_hf(layout.raw_source("hf"), cache, github_raw_base=base, image_revision=settings.hf_image_revision, log=log)


def fetch_visualprm(settings: Settings, layout: Layout, log: Log = lambda s: None) -> RawSnapshot | None:
    """VisualPRM400K's raw files (parquet shards, or InternVL jsonl + images)."""
    _check(settings.source)
    from pipeline.sources.visualprm import snapshot_visualprm

    cache = checksum_cache(layout)
    if settings.source == "sample":
        from pipeline.visualprm.sample import VISUALPRM_SAMPLE_VERSION, write_visualprm_sample

        root = layout.raw_source("sample")
        write_visualprm_sample(root)
        return snapshot_visualprm(root, "sample", cache, revisions={"visualprm_sample": VISUALPRM_SAMPLE_VERSION})
    if settings.source == "local":
        path = local_path(settings)
        return snapshot_visualprm(path, "local", cache, revisions={"local": str(path.resolve())})
    from pipeline.sources.hf import fetch_visualprm_hf

    return fetch_visualprm_hf(layout.raw_source("hf"), cache, revision=settings.hf_visualprm_revision, log=log)
