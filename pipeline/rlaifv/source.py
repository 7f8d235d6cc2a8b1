"""RLAIF-V raw files, from any source, in the upstream layout:

    {root}/openbmb/RLAIF-V-Dataset/RLAIF-V-Dataset_*.parquet

The shards sit at the repository's root (about 14 of them, 0.75-1.1 GB each, images embedded).
`sample` writes the generated miniature (pipeline/rlaifv/sample.py), `local --path DIR` takes the
shards under DIR (absent when there are none), `hf` downloads them from the Hub at a pinned
revision (`hf_revisions[REPO]`, else the one locked in sources.lock.json, else `main` locked now),
all of them or, with `hf_shards[REPO] = N`, the first N by name: a subset that is the same on every
machine, for trying the pipeline without fetching 13 GB.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.rlaifv.layout import PARQUET_GLOB, REPO
from pipeline.settings import Layout, Settings
from pipeline.sources.base import ChecksumCache, RawSnapshot, SourceError

ROLE = "rlaifv_parquet"
_SHARD = re.compile(r"RLAIF-V-Dataset_[^/]*\.parquet")


def is_shard(relpath: str) -> bool:
    return _SHARD.fullmatch(relpath) is not None


def shards(snapshot: RawSnapshot | None) -> list[Path]:
    return [Path(f.path) for f in snapshot.files if f.role.startswith(ROLE + ":")] if snapshot else []


def select_shards(names: list[str], limit: int | None = None) -> list[str]:
    """The repo's shards by name, the first `limit` of them when set."""
    found = sorted(n for n in names if is_shard(n))
    return found if limit is None else found[:limit]


def recorded_shards(entry: dict, limit: int | None) -> dict[str, dict] | None:
    """The shards a lock entry recorded that still answer `limit`, or None to list the repo again.
    The entry notes the limit it was fetched under (`shard_limit`, None: every shard), so a larger
    limit, or none after a limited fetch, is not mistaken for the whole repo."""
    files = entry.get("files")
    if not isinstance(files, dict) or not files:
        return None
    took = entry.get("shard_limit")
    if limit is None:
        return dict(files) if took is None else None
    if took is None or took >= limit:
        return {name: files[name] for name in sorted(files)[:limit]}
    return None


def snapshot_rlaifv(root: Path, source: str, cache: ChecksumCache, *, origins: dict | None = None,
                    revisions: dict | None = None) -> RawSnapshot | None:
    """The shards under `root` in the upstream layout, checksummed; None when there are none."""
    from pipeline.sources import snapshot_shards

    return snapshot_shards(root, REPO, PARQUET_GLOB, ROLE, "RLAIF-V", source, cache, origins=origins, revisions=revisions)


def fetch_rlaifv(settings: Settings, layout: Layout, log=lambda s: None) -> RawSnapshot | None:
    from pipeline.rlaifv.sample import SAMPLE_VERSION, write_rlaifv_sample
    from pipeline.sources import fetch_by_source

    return fetch_by_source(settings, layout, snapshot_rlaifv, write_sample=write_rlaifv_sample,
                           sample_version=("rlaifv_sample", SAMPLE_VERSION),
                           hf=lambda cache: _fetch_hf(settings, layout, cache, log))


def _fetch_hf(settings: Settings, layout: Layout, cache: ChecksumCache, log) -> RawSnapshot:
    from pipeline.sources.hf import HubFiles, fetch_hub_files, record_files

    limit = settings.hf_shard_limit(REPO)

    def record(entry: dict, records: dict) -> None:
        record_files(entry, records)
        entry["shard_limit"] = limit

    hub = HubFiles(
        repo=REPO, wanted=PARQUET_GLOB, knob=f"hf_revisions[{REPO}]",
        select=lambda names: select_shards(names, limit), local_globs=(PARQUET_GLOB,),
        recorded=lambda e: recorded_shards(e, limit), record=record,
    )
    raw = layout.raw_source("hf")
    sha, names = fetch_hub_files(raw, cache, hub, revision=settings.hf_revision(REPO), log=log)
    if limit is not None:
        log(f"hf: {REPO}: the first {len(names)} shard(s) by name (hf_shards[{REPO}] = {limit})")
    origins = {f"{ROLE}:{REPO}/{n}": f"{REPO}@{sha}/{n}" for n in names}
    snap = snapshot_rlaifv(raw, "hf", cache, origins=origins, revisions={REPO: sha})
    if snap is None:
        raise SourceError(f"hf source: the {REPO} shards downloaded to {raw} are gone; run again")
    return snap
