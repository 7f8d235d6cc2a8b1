"""VisualPRM400K raw files: inventory of a folder that holds the dataset in an upstream layout.

Two upstream forms are recognised under a source root:

    {root}/mm-eval/VisualPRM400K/data/train-*.parquet      parquet form (the Hub release)
    {root}/OpenGVLab/VisualPRM400K/**/*_prm.jsonl          InternVL form: annotations,
    {root}/OpenGVLab/VisualPRM400K/**/*.zip                image archives,
    {root}/OpenGVLab/VisualPRM400K/**/<anything else>      and loose images

Roles in the RawSnapshot (paths relative to the source root, posix):

    prm_parquet:<relpath>      one per parquet shard, sorted by name
    prm_jsonl:<relpath>        one per annotation file
    prm_images_zip:<relpath>   one per image zip
    prm_images_listing         the InternVL folder itself; sha256 digests the sorted
                               (path relative to that folder, size) pairs of every loose file,
                               size is their total: loose images change the release id without
                               each image being hashed

The parquet form wins when both are present. Neither present -> `snapshot_visualprm` returns None.

The `hf` source downloads the parquet form from the Hub (`fetch_visualprm_hf`, through the pinned,
verified, resumable downloads of pipeline/sources/hf.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from pipeline.settings import VISUALPRM_REPO, VISUALPRM_UPSTREAM_REPO
from pipeline.settings import Layout, Settings
from pipeline.sources import Log, fetch_by_source
from pipeline.sources.base import ChecksumCache, RawFile, RawSnapshot, SourceError
from pipeline.sources.hf import HubFiles, fetch_hub_files, record_files

PARQUET_DIR = Path(VISUALPRM_REPO)
UPSTREAM_DIR = Path(VISUALPRM_UPSTREAM_REPO)
PARQUET_GLOB = "data/train-*.parquet"  # relative to the repo folder, as the Hub lists it
JSONL_SUFFIX = "_prm.jsonl"

PARQUET_ROLE = "prm_parquet"
JSONL_ROLE = "prm_jsonl"
ZIP_ROLE = "prm_images_zip"
LISTING_ROLE = "prm_images_listing"

# The parquet form's commit on the Hub. None means "lock on first fetch": the first fetch resolves
# `main` to its commit sha and records it in sources.lock.json; later fetches reuse it.
VISUALPRM_REVISION: str | None = None

_SHARD = re.compile(r"data/train-[^/]*\.parquet")
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"
_PARQUET_MAGIC = b"PAR1"


def is_parquet_shard(relpath: str) -> bool:
    """True for a repo-relative path the parquet form consists of (`data/train-*.parquet`)."""
    return _SHARD.fullmatch(relpath) is not None


def snapshot_visualprm(
    root: Path,
    source: str,
    cache: ChecksumCache,
    *,
    origins: dict[str, str] | None = None,
    revisions: dict | None = None,
) -> RawSnapshot | None:
    """Inventory VisualPRM400K under `root`; None when neither upstream form is there.

    A form that is there but damaged (an empty shard, a git-lfs pointer instead of the data, a
    folder with no annotations) raises SourceError naming the file and what to do.
    """
    root = Path(root).resolve()
    origins = origins or {}
    found = _parquet_form(root, source) or _internvl_form(root, source)
    if found is None:
        _refuse_partial_folders(root, source)
        return None
    files = [
        RawFile(
            role=role,
            path=str(path),
            sha256=digest or cache.sha256(path),
            size=size if size is not None else path.stat().st_size,
            origin=origins.get(role, str(path)),
        )
        for role, path, digest, size in found
    ]
    cache.save()
    return RawSnapshot(source=source, root=str(root), files=tuple(files), revisions=dict(revisions or {}))


# (role, path, sha256 if already known, size if already known)
_Found = list[tuple[str, Path, str | None, int | None]]


def _parquet_form(root: Path, source: str) -> _Found | None:
    folder = root / PARQUET_DIR
    shards = sorted(p for p in folder.glob(PARQUET_GLOB) if p.is_file())
    if not shards:
        return None
    for shard in shards:
        _check_data_file(shard, source, parquet=True)
    return [(f"{PARQUET_ROLE}:{p.relative_to(root).as_posix()}", p, None, None) for p in shards]


def _internvl_form(root: Path, source: str) -> _Found | None:
    folder = root / UPSTREAM_DIR
    if not folder.is_dir():
        return None
    jsonl, zips, loose = [], [], []
    for path, size in _walk(folder):
        name = path.name
        if name.endswith(JSONL_SUFFIX):
            jsonl.append(path)
        elif name.lower().endswith(".zip"):
            zips.append(path)
        else:
            loose.append((path.relative_to(folder).as_posix(), size))
    if not jsonl:
        return None
    for path in [*jsonl, *zips]:
        _check_data_file(path, source, parquet=False)
    found: _Found = [(f"{JSONL_ROLE}:{p.relative_to(root).as_posix()}", p, None, None) for p in sorted(jsonl)]
    found += [(f"{ZIP_ROLE}:{p.relative_to(root).as_posix()}", p, None, None) for p in sorted(zips)]
    found.append((LISTING_ROLE, folder, listing_digest(loose), sum(size for _, size in loose)))
    return found


def listing_digest(pairs: list[tuple[str, int]]) -> str:
    """sha256 of the sorted (relative path, size) pairs, as a compact JSON array."""
    text = json.dumps(sorted([rel, size] for rel, size in pairs), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _walk(folder: Path):
    """(path, size) of every file below `folder`, skipping dot-files and dot-folders (tool caches
    such as `.cache/huggingface`); symlinked folders are followed once."""
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            try:
                st = path.stat()
            except OSError:  # a dangling symlink is not a file of the dataset
                continue
            if os.path.isfile(path):
                yield path, st.st_size


def _check_data_file(path: Path, source: str, *, parquet: bool) -> None:
    size = path.stat().st_size
    if size == 0:
        raise SourceError(
            f"{source} source: VisualPRM400K file {path} is empty (0 bytes); "
            f"download it again or remove it"
        )
    with open(path, "rb") as fh:
        head = fh.read(len(_LFS_POINTER))
        if head == _LFS_POINTER:
            raise SourceError(
                f"{source} source: VisualPRM400K file {path} is a git-lfs pointer, not the data; "
                f"run `git lfs pull` in that clone (or download the file) and try again"
            )
        if parquet:
            fh.seek(max(size - len(_PARQUET_MAGIC), 0))
            tail = fh.read(len(_PARQUET_MAGIC))
            if head[: len(_PARQUET_MAGIC)] != _PARQUET_MAGIC or tail != _PARQUET_MAGIC:
                raise SourceError(
                    f"{source} source: VisualPRM400K shard {path} is not a complete parquet file "
                    f"(no PAR1 magic at both ends; truncated?); download it again or remove it"
                )


def _refuse_partial_folders(root: Path, source: str) -> None:
    """A dataset folder with files but neither form's data files is an error, not 'absent'."""
    for folder, expected in (
        (root / PARQUET_DIR, f"{PARQUET_DIR.as_posix()}/{PARQUET_GLOB}"),
        (root / UPSTREAM_DIR, f"{UPSTREAM_DIR.as_posix()}/**/*{JSONL_SUFFIX}"),
    ):
        if folder.is_dir() and next(_walk(folder), None) is not None:
            raise SourceError(
                f"{source} source: {folder} holds files but no {expected} (and the other VisualPRM400K "
                f"form is not under {root} either); complete the download or remove the folder"
            )


# --- RawSnapshot accessors -----------------------------------------------------------------------


def _role_paths(snap: RawSnapshot, kind: str) -> list[Path]:
    return [Path(f.path) for f in snap.files if f.role.startswith(kind + ":")]


def prm_parquet_files(snap: RawSnapshot) -> list[Path]:
    return _role_paths(snap, PARQUET_ROLE)


def prm_jsonl_files(snap: RawSnapshot) -> list[Path]:
    return _role_paths(snap, JSONL_ROLE)


def prm_image_zips(snap: RawSnapshot) -> list[Path]:
    return _role_paths(snap, ZIP_ROLE)


def prm_image_root(snap: RawSnapshot) -> Path | None:
    """Where relative image paths resolve: the repo folder of whichever form the snapshot holds."""
    if prm_parquet_files(snap):
        return Path(snap.root) / PARQUET_DIR
    if prm_jsonl_files(snap) or snap.path(LISTING_ROLE) is not None:
        return Path(snap.root) / UPSTREAM_DIR
    return None


def upstream_image_archives(local_path: str | None) -> list[Path]:
    """OpenGVLab's image archives in a local mirror, by themselves: for each
    `DIR/OpenGVLab/VisualPRM400K*/` folder, its `images.zip`, or the first part of a split one
    (`images.zip_aa`, read in place with the parts beside it)."""
    if not local_path:
        return []
    found = []
    for folder in sorted((Path(local_path).expanduser() / "OpenGVLab").glob("VisualPRM400K*")):
        for name in ("images.zip", "images.zip_aa"):
            if (folder / name).is_file():
                found.append(folder / name)
                break
    return found


def image_roots(settings: Settings) -> list[Path]:
    """Where path references resolve after the dataset's own folder: the configured roots in
    order, then (for `local`) the upstream archives of the mirror."""
    roots = [r if str(r).startswith("s3://") else Path(r).expanduser() for r in settings.image_roots]
    if settings.source == "local":
        roots += [a for a in upstream_image_archives(settings.local_path) if a not in roots]
    return roots


SHARD_FILES = HubFiles(
    repo=VISUALPRM_REPO,
    wanted=PARQUET_GLOB,
    knob="hf_visualprm_revision / VISUALPRM_REVISION",
    select=lambda files: sorted(f for f in files if is_parquet_shard(f)),
    local_globs=(PARQUET_GLOB,),
    recorded=lambda e: dict(e["files"]) if isinstance(e.get("files"), dict) and e["files"] else None,
    record=record_files,
)


def fetch_visualprm_hf(
    raw_root: Path,
    cache: ChecksumCache,
    *,
    hf_endpoint: str | None = None,
    revision: str | None = None,
    token: str | None = None,
    log: Log = lambda s: None,
) -> RawSnapshot:
    """Download (or reuse) the VisualPRM400K parquet shards into `raw_root/mm-eval/VisualPRM400K/`.

    The revision is `revision` (a commit sha, or a branch/tag resolved to one), else
    `VISUALPRM_REVISION`, else the one locked in `raw_root/sources.lock.json`, else `main` locked
    now. Shards the pinned revision no longer lists are removed. Raises SourceError.
    """
    sha, shards = fetch_hub_files(raw_root, cache, SHARD_FILES, revision=revision or VISUALPRM_REVISION,
                                  hf_endpoint=hf_endpoint, token=token, log=log)
    origins = {f"{PARQUET_ROLE}:{VISUALPRM_REPO}/{name}": f"{VISUALPRM_REPO}@{sha}/{name}" for name in shards}
    snap = snapshot_visualprm(raw_root, "hf", cache, origins=origins, revisions={VISUALPRM_REPO: sha})
    if snap is None:  # only if the shards vanished between download and inventory
        raise SourceError(f"hf source: the {VISUALPRM_REPO} shards downloaded to {raw_root} are gone; run again")
    return snap


def fetch_visualprm(settings: Settings, layout: Layout, log: Log = lambda s: None) -> RawSnapshot | None:
    """VisualPRM400K's raw files (parquet shards, or InternVL jsonl + images)."""
    from pipeline.visualprm.sample import VISUALPRM_SAMPLE_VERSION, write_visualprm_sample

    return fetch_by_source(
        settings, layout, snapshot_visualprm, write_sample=write_visualprm_sample,
        sample_version=("visualprm_sample", VISUALPRM_SAMPLE_VERSION),
        hf=lambda cache: fetch_visualprm_hf(layout.raw_source("hf"), cache, revision=settings.hf_visualprm_revision, log=log),
    )
