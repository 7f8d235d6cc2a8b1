"""VL-RewardBench raw files, from any source, in the upstream layout:

    {root}/MMInstruction/VL-RewardBench/data/test-*.parquet

`sample` writes the generated miniature (pipeline/vlrb/sample.py), `local --path DIR` takes the
shards under DIR (absent when there are none), `hf` downloads them from the Hub at a pinned
revision (`hf_revisions[REPO]`, else the one locked in sources.lock.json, else `main` locked now).
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.settings import Layout, Settings
from pipeline.sources.base import ChecksumCache, RawSnapshot, SourceError

REPO = "MMInstruction/VL-RewardBench"
PARQUET_GLOB = "data/test-*.parquet"
ROLE = "vlrb_parquet"
_SHARD = re.compile(r"data/test-[^/]*\.parquet")


def is_shard(relpath: str) -> bool:
    return _SHARD.fullmatch(relpath) is not None


def shards(snapshot: RawSnapshot | None) -> list[Path]:
    return [Path(f.path) for f in snapshot.files if f.role.startswith(ROLE + ":")] if snapshot else []


def snapshot_vlrb(root: Path, source: str, cache: ChecksumCache, *, origins: dict | None = None,
                  revisions: dict | None = None) -> RawSnapshot | None:
    """The shards under `root` in the upstream layout, checksummed; None when there are none."""
    from pipeline.sources import snapshot_shards

    return snapshot_shards(root, REPO, PARQUET_GLOB, ROLE, "VL-RewardBench", source, cache, origins=origins, revisions=revisions)


def fetch_vlrb(settings: Settings, layout: Layout, log=lambda s: None) -> RawSnapshot | None:
    from pipeline.sources import fetch_by_source
    from pipeline.vlrb.sample import SAMPLE_VERSION, write_vlrb_sample

    return fetch_by_source(settings, layout, snapshot_vlrb, write_sample=write_vlrb_sample,
                           sample_version=("vlrb_sample", SAMPLE_VERSION), hf=lambda cache: _fetch_hf(settings, layout, cache, log))


def _fetch_hf(settings: Settings, layout: Layout, cache: ChecksumCache, log) -> RawSnapshot:
    from pipeline.sources.hf import HubFiles, fetch_hub_files, record_files

    hub = HubFiles(
        repo=REPO, wanted=PARQUET_GLOB, knob=f"hf_revisions[{REPO}]",
        select=lambda names: sorted(n for n in names if is_shard(n)), local_globs=(PARQUET_GLOB,),
        recorded=lambda e: dict(e["files"]) if isinstance(e.get("files"), dict) and e["files"] else None,
        record=record_files,
    )
    raw = layout.raw_source("hf")
    sha, names = fetch_hub_files(raw, cache, hub, revision=settings.hf_revision(REPO), log=log)
    origins = {f"{ROLE}:{REPO}/{n}": f"{REPO}@{sha}/{n}" for n in names}
    snap = snapshot_vlrb(raw, "hf", cache, origins=origins, revisions={REPO: sha})
    if snap is None:
        raise SourceError(f"hf source: the {REPO} shards downloaded to {raw} are gone; run again")
    return snap
