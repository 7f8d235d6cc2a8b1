"""MMRB2's raw files, from any source, in the upstream layout (identical for sample, local and hf):

    {root}/facebook/MMRB2_image/image.zip            (or images.zip)
    {root}/facebookresearch/MMRB2/benchmark/{t2i,edit,interleaved,reasoning}_response_only.json
    {root}/facebookresearch/MMRB2/benchmark/new_task_release.json   (optional)

`fetch_mmrb2` takes them from the configured source: the generated sample, a local mirror (absent
when it holds no MMRB2 file; an error when it holds only some), or the Hub and GitHub
(pipeline/sources/hf.py).
"""

from __future__ import annotations

from pathlib import Path

from pipeline import env
from pipeline.settings import MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO, MMRB2_IMAGE_ZIP_NAMES, MMRB2_TASKS, Layout, Settings
from pipeline.sources import Log, check_source, checksum_cache, local_path
from pipeline.sources.base import ChecksumCache, RawFile, RawSnapshot, SourceError

ANNOTATION_DIR = Path(MMRB2_ANNOTATION_REPO) / "benchmark"
IMAGE_DIR = Path(MMRB2_IMAGE_REPO)
NEW_TASK_FILE = "new_task_release.json"


def find_image_zip(root: Path) -> Path | None:
    for name in MMRB2_IMAGE_ZIP_NAMES:
        p = root / IMAGE_DIR / name
        if p.is_file():
            return p
    return None


def snapshot_from_layout(
    root: Path,
    source: str,
    cache: ChecksumCache,
    origins: dict[str, str] | None = None,
    revisions: dict | None = None,
) -> RawSnapshot:
    """Inventory a folder in the upstream layout; missing required files raise SourceError."""
    root = root.resolve()
    origins = origins or {}
    wanted: list[tuple[str, Path | None, bool]] = [("image_zip", find_image_zip(root), True)]
    for task in MMRB2_TASKS:
        wanted.append((f"annotations:{task}", root / ANNOTATION_DIR / f"{task}_response_only.json", True))
    wanted.append(("new_task_release", root / ANNOTATION_DIR / NEW_TASK_FILE, False))

    files, missing = [], []
    for role, path, required in wanted:
        if path is None or not path.is_file():
            if required:
                missing.append(role)
            continue
        files.append(
            RawFile(
                role=role,
                path=str(path),
                sha256=cache.sha256(path),
                size=path.stat().st_size,
                origin=origins.get(role, str(path)),
            )
        )
    cache.save()
    if missing:
        expect = {
            "image_zip": f"{IMAGE_DIR}/image.zip (or images.zip)",
            **{f"annotations:{t}": f"{ANNOTATION_DIR}/{t}_response_only.json" for t in MMRB2_TASKS},
        }
        lines = ", ".join(expect[m] for m in missing)
        raise SourceError(f"{source} source at {root} is missing: {lines}")
    return RawSnapshot(source=source, root=str(root), files=tuple(files), revisions=dict(revisions or {}))


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


def fetch_mmrb2(settings: Settings, layout: Layout, log: Log = lambda s: None) -> RawSnapshot | None:
    """MMRB2's raw files (image zip + annotation JSONs)."""
    check_source(settings.source)
    cache = checksum_cache(layout)
    if settings.source == "sample":
        from pipeline.mmrb2.sample import fetch_sample

        return fetch_sample(layout.raw_source("sample"), cache)
    if settings.source == "local":
        return fetch_local(local_path(settings), cache)
    from pipeline.sources.hf import fetch_hf

    # HF_ENDPOINT / HF_TOKEN as huggingface_hub reads them; the raw-file host can be redirected
    # too (a mirror, or a loopback server in tests).
    base = env.github_raw("https://raw.githubusercontent.com")
    return fetch_hf(layout.raw_source("hf"), cache, github_raw_base=base, image_revision=settings.hf_image_revision, log=log)
