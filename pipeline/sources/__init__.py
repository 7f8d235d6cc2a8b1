"""Raw sources: `sample` (generated offline miniature), `local` (a mirror folder), `hf` (download)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from pipeline.settings import Layout, Settings
from pipeline.sources.base import ChecksumCache, RawSnapshot, SourceError

SOURCES = ("sample", "local", "hf")


def fetch(settings: Settings, layout: Layout, log: Callable[[str], None] = lambda s: None) -> RawSnapshot:
    cache = ChecksumCache(layout.raw / "checksums.json")
    if settings.source == "sample":
        from pipeline.sources.sample import fetch_sample

        return fetch_sample(layout.raw_source("sample"), cache)
    if settings.source == "local":
        from pipeline.sources.local import fetch_local

        if not settings.local_path:
            raise SourceError("the local source needs a path: rewardhouse run --source local --path DIR")
        return fetch_local(Path(settings.local_path).expanduser(), cache)
    if settings.source == "hf":
        from pipeline.sources.hf import fetch_hf

        # HF_ENDPOINT / HF_TOKEN as huggingface_hub reads them; the raw-file host can be redirected
        # too (a mirror, or a loopback server in tests).
        base = os.environ.get("REWARDHOUSE_GITHUB_RAW", "https://raw.githubusercontent.com")
        return fetch_hf(layout.raw_source("hf"), cache, github_raw_base=base, log=log)
    raise SourceError(f"unknown source {settings.source!r}; choose one of {', '.join(SOURCES)}")
