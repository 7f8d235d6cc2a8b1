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
from pipeline.sources.base import ChecksumCache, RawFile, RawSnapshot, SourceError

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



_LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def snapshot_shards(root: Path, repo: str, glob: str, role: str, title: str, source: str, cache: ChecksumCache, *,
                    origins: dict | None = None, revisions: dict | None = None) -> RawSnapshot | None:
    """The data shards of a Hub repo under `root` in the upstream layout (`root/repo/glob`),
    checksummed, each as role `<role>:<path under root>`; None when there are none. A folder that
    holds files but no shard is an error (an unfinished download), and so is a git-lfs pointer in
    place of a shard (a clone without `git lfs pull`), each in one line naming the dataset."""
    root = root.resolve()
    folder = root / repo
    found = sorted(p for p in folder.glob(glob) if p.is_file())
    if not found:
        if folder.is_dir() and any(p.is_file() for p in folder.rglob("*")):
            raise SourceError(f"{source} source: {folder} holds files but no {glob}; "
                              "complete the download or remove the folder")
        return None
    files = []
    for path in found:
        with open(path, "rb") as fh:
            if fh.read(len(_LFS_POINTER)) == _LFS_POINTER:
                raise SourceError(f"{source} source: {title} file {path} is a git-lfs pointer, not the data; "
                                  "run `git lfs pull` in that clone (or download the file) and try again")
        tagged = f"{role}:{path.relative_to(root).as_posix()}"
        files.append(RawFile(role=tagged, path=str(path), sha256=cache.sha256(path), size=path.stat().st_size,
                             origin=(origins or {}).get(tagged, str(path))))
    cache.save()
    return RawSnapshot(source=source, root=str(root), files=tuple(files), revisions=dict(revisions or {}))
