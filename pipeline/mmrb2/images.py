"""Inventory the images an MMRB2 release references: checksum, size, dimensions, decode status."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path, PurePosixPath
from typing import Callable

import pyarrow as pa

from pipeline.imaging import inspect_image
from pipeline.quarantine import Rejection
from pipeline.settings import ZipLimits
from pipeline.zipread import iter_entries, scan_zip

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
) -> tuple[pa.Table, list[Rejection]]:
    """One row per archive entry and per `referenced` name (missing ones included); `optional`
    names get a row only when the archive has them.

    `scope` narrows that to a part of the work (see mmrb2/tasks.py): "referenced" keeps the
    entries that answer a referenced or optional name, and the missing names; "unreferenced"
    keeps the other entries and the faults of the archive itself. The two together are "all"."""
    if scope not in ("all", "referenced", "unreferenced"):
        raise ValueError(f"unknown scope {scope!r}")
    rejected: list[Rejection] = []
    rows: dict[str, dict] = {}
    if zip_path is None:
        # No archive (the dataset is absent): nothing to inventory; any reference is missing.
        scan_entries, refused, archive_error = {}, [], ("no image archive" if referenced else None)
    else:
        scan = scan_zip(zip_path, limits)
        scan_entries, refused, archive_error = scan.entries, scan.refused, scan.archive_error
    if scope == "referenced":
        archive_error, refused = None, []
    if archive_error:
        rejected.append(Rejection(DATASET, "unpack", str(zip_path.name if zip_path else "-"), archive_error))
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
    if infos:
        started = time.monotonic()
        for done, (info, data, error) in enumerate(iter_entries(zip_path, infos, limits), start=1):
            if progress and (done % 500 == 0 or done == len(infos)):
                progress(done, len(infos), done / max(time.monotonic() - started, 1e-9))
            stored = info.filename
            key = _entry_key(stored)
            name = wanted.get(key, key)
            row = {
                "image_name": name,
                "sha256": None,
                "bytes": info.file_size,
                "width": None,
                "height": None,
                "format": None,
                "status": "corrupt",
                "referenced": key in wanted,
                "zip_entry": stored,
            }
            if error is None:
                row["sha256"] = hashlib.sha256(data).hexdigest()
                row["bytes"] = len(data)
                row["width"], row["height"], row["format"], error = inspect_image(data, limits.max_image_pixels)
            if error is None:
                row["status"] = "ok"
            else:
                rejected.append(Rejection(DATASET, "decode", name, error))
            rows[name] = row
    for name in sorted(referenced - rows.keys() if scope != "unreferenced" else ()):
        rows[name] = {
            "image_name": name, "sha256": None, "bytes": None, "width": None, "height": None,
            "format": None, "status": "missing", "referenced": True, "zip_entry": None,
        }
        rejected.append(Rejection(DATASET, "resolve", name, "referenced image not found in the archive"))
    table = pa.Table.from_pylist(sorted(rows.values(), key=lambda r: r["image_name"]), schema=IMAGES_SCHEMA)
    return table, rejected
