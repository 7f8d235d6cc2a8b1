"""Inventory the images an MMRB2 release references: checksum, size, dimensions, decode status and hashes."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Callable

import pyarrow as pa

from pipeline.dedupe.hashing import HashedImage, ZipHasher, hash_zip
from pipeline.quarantine import FILE_STAGE, Rejection
from pipeline.settings import ZipLimits
from pipeline.zipread import ZipScan, scan_zip

DATASET = "mmrb2"

IMAGES_SCHEMA = pa.schema(
    [
        ("image_name", pa.string()),
        ("sha256", pa.string()),
        ("bytes", pa.int64()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("format", pa.string()),
        ("status", pa.string()),  # ok | corrupt | missing
        ("referenced", pa.bool_()),
        ("zip_entry", pa.string()),
    ]
)


def _lookup_names(name: str) -> tuple[str, ...]:
    # Prompt images may be referenced with a folder (`synthetic_images/x.jpg`) yet stored flat.
    base = PurePosixPath(name).name
    return (name,) if base == name else (name, base)


def _entry_key(stored: str) -> str:
    return stored[len("images/"):] if stored.startswith("images/") else stored


def inventory_images(
    zip_path: Path | None,
    referenced: set[str],
    limits: ZipLimits,
    optional: set[str] = frozenset(),
    progress: Callable[[int, int, float], None] | None = None,
    scope: str = "all",
    workers: int = 1,
    executor=None,
    scan: ZipScan | None = None,
    hasher: ZipHasher | None = None,
) -> tuple[pa.Table, list[Rejection], list[HashedImage]]:
    """One row per archive entry and per `referenced` name (missing ones included; `optional`
    names get a row only when the archive has them), the rejections, and the hashes of the
    decodable images.

    `scope` narrows that to a part of the work (see mmrb2/tasks.py): "referenced" keeps the
    entries that answer a referenced or optional name, and the missing names; "unreferenced"
    keeps the other entries and the faults of the archive itself. The two together are "all".

    Each entry is read and decoded once, in `workers` processes: the decode that hashes it is also
    the check that it is a whole image (a truncated JPEG fails the reduced-scale decode exactly as
    it fails a full one), and it gives the size and format. Hashes come back keyed by image name.
    `scan`: `scan_zip(zip_path, limits)` when the caller has it (a step doing several parts);
    `hasher`: a `ZipHasher` of this archive to hash with (its pool and open archive serve all the
    step's parts), else one for this call."""
    if scope not in ("all", "referenced", "unreferenced"):
        raise ValueError(f"unknown scope {scope!r}")
    rejected: list[Rejection] = []
    rows: dict[str, dict] = {}
    if zip_path is None:
        # No archive (the dataset is absent): nothing to inventory; any reference is missing.
        scan_entries, refused, archive_error = {}, [], ("no image archive" if referenced else None)
    else:
        scan = scan if scan is not None else scan_zip(zip_path, limits)  # a caller's, read once for its parts
        scan_entries, refused, archive_error = scan.entries, scan.refused, scan.archive_error
    if scope == "referenced":
        archive_error, refused = None, []
    if archive_error:
        rejected.append(Rejection(DATASET, FILE_STAGE, str(zip_path.name if zip_path else "-"), archive_error))
    for entry, reason in refused:
        rejected.append(Rejection(DATASET, "unpack", entry, reason))

    # Which archive entry answers each referenced name.
    wanted: dict[str, str] = {}
    for name in sorted(referenced | set(optional)):
        hit = next((n for n in _lookup_names(name) if n in scan_entries), None)
        if hit is not None:
            wanted.setdefault(hit, name)
    infos = list(scan_entries.values())
    if scope != "all":
        infos = [i for i in infos if (_entry_key(i.filename) in wanted) == (scope == "referenced")]
    names = [wanted.get(_entry_key(i.filename), _entry_key(i.filename)) for i in infos]
    work = [(n, i.filename) for n, i in zip(names, infos)]
    if not infos:
        results = []
    elif executor is not None:  # the process pool or a Ray cluster (pipeline/dedupe/executor.py)
        results = executor.hash_zip(zip_path, work, limits, progress=progress)
    elif hasher is not None:
        results = hasher.hash(work, progress)
    else:
        results = hash_zip(zip_path, work, limits, workers=workers, progress=progress)
    hashed = []
    for info, r in zip(infos, results):  # hash_zip answers in item order
        row = {
            "image_name": r.key, "sha256": r.sha256, "bytes": info.file_size, "width": r.width, "height": r.height,
            "format": r.format, "status": "ok" if r.error is None else "corrupt",
            "referenced": _entry_key(info.filename) in wanted, "zip_entry": info.filename,
        }
        if r.error is None:
            hashed.append(r)
        else:
            row["width"] = row["height"] = None
            rejected.append(Rejection(DATASET, "decode", r.key, r.error))
        rows[r.key] = row
    for name in sorted(referenced - rows.keys() if scope != "unreferenced" else ()):
        rows[name] = {
            "image_name": name, "sha256": None, "bytes": None, "width": None, "height": None,
            "format": None, "status": "missing", "referenced": True, "zip_entry": None,
        }
        rejected.append(Rejection(DATASET, "resolve", name, "referenced image not found in the archive"))
    table = pa.Table.from_pylist(sorted(rows.values(), key=lambda r: r["image_name"]), schema=IMAGES_SCHEMA)
    return table, rejected, hashed
