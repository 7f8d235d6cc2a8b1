"""MMRB2's upstream layout under a source root (identical for sample, local and hf), and the
inventory of a folder that holds it:

    {root}/facebook/MMRB2_image/image.zip            (or images.zip)
    {root}/facebookresearch/MMRB2/benchmark/{t2i,edit,interleaved,reasoning}_response_only.json
    {root}/facebookresearch/MMRB2/benchmark/new_task_release.json   (optional)

Both the sample (which writes it) and the source (which fetches into it) read these names.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.settings import MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO, MMRB2_IMAGE_ZIP_NAMES, MMRB2_TASKS
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
