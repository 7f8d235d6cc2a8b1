"""VisualPRM images: embedded bytes from the parquet `media` column, or path references resolved
against a local image folder or zip. Every image with bytes lands once, content-addressed, in an
image store (`{sha256[:2]}/{sha256}.{ext}`) that exports link from; ~4 rollouts share one image.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
import zipfile
from pathlib import Path, PurePosixPath
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.dedupe.hashing import HashedImage, hash_bytes
from pipeline.imaging import extension
from pipeline.quarantine import FILE_STAGE, Rejection
from pipeline.settings import ZipLimits
from pipeline.staging import streaming_parquet
from pipeline.visualprm.readers import parquet_problem
from pipeline.zipread import is_within, read_entry, scan_zip

DATASET = "visualprm"

PRM_IMAGES_SCHEMA = pa.schema(
    [
        ("image_key", pa.string()),
        ("origin", pa.string()),  # embedded | path
        ("sha256", pa.string()),
        ("bytes", pa.int64()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("format", pa.string()),
        ("status", pa.string()),  # ok | corrupt | unresolved
        ("store_path", pa.string()),  # relative to the image store, when the bytes were kept
        ("problem", pa.string()),  # why it is corrupt
    ]
)


def store_relpath(sha256: str, fmt: str | None) -> str:
    return f"{sha256[:2]}/{sha256}.{extension(fmt)}"


class ImageStore:
    """Content-addressed files; writing the same content twice is a no-op."""

    def __init__(self, root: Path):
        self.root = root

    def put(self, sha256: str, fmt: str | None, data: bytes) -> str:
        rel = store_relpath(sha256, fmt)
        target = self.root / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
            tmp.write_bytes(data)
            os.replace(tmp, target)
        return rel


def _embedded(files: list[Path]):
    """Yield (key, bytes) for each embedded image, streaming the `media` column batch by batch.
    Path-only entries are filtered out with Arrow compute, not looped over."""
    for f in files:
        if parquet_problem(f):  # the reader has already quarantined a shard it cannot read
            continue
        pf = streaming_parquet(f)
        if "media" not in pf.schema_arrow.names:
            continue
        for batch in pf.iter_batches(batch_size=256, columns=["media"]):
            items = pc.list_flatten(batch.column(0))
            if len(items) == 0:
                continue
            data = pc.struct_field(items, "bytes")
            keep = pc.is_valid(data)
            if not pc.any(keep).as_py():
                continue
            data = pc.filter(data, keep)
            paths = pc.filter(pc.struct_field(items, "path"), keep)
            for path, blob in zip(paths.to_pylist(), data.to_pylist()):
                key = path or f"sha256:{hashlib.sha256(blob).hexdigest()}"
                yield key, blob


class PathResolver:
    """Find a referenced relative path under the dataset folder or its `images/` subfolder (the
    upstream InternVL layout keeps images beside `annotations/`), or inside image zips (entries
    may carry one extra leading folder, e.g. `images/MathV360K/...`)."""

    def __init__(self, root: Path | None, zips: list[Path], limits: ZipLimits):
        self.bases = [root, root / "images"] if root is not None else []
        self.limits = limits
        self.index: dict[str, tuple[Path, zipfile.ZipInfo]] = {}
        self.rejected: list[Rejection] = []
        for z in zips:
            scan = scan_zip(z, limits)
            if scan.archive_error:
                self.rejected.append(Rejection(DATASET, FILE_STAGE, z.name, scan.archive_error))
            for entry, reason in scan.refused:
                self.rejected.append(Rejection(DATASET, "unpack", f"{z.name}!{entry}", reason))
            for info in scan.entries.values():
                name = info.filename
                self.index.setdefault(name, (z, info))
                parts = PurePosixPath(name).parts
                if len(parts) > 1:
                    self.index.setdefault(str(PurePosixPath(*parts[1:])), (z, info))
        self._open: dict[Path, zipfile.ZipFile] = {}

    def read(self, ref: str) -> tuple[bytes | None, str | None]:
        """(bytes, problem); (None, None) when the reference is simply not found."""
        for base in self.bases if not ref.startswith("sha256:") else []:
            candidate = base / ref
            if is_within(base, ref) and candidate.is_file():
                size = candidate.stat().st_size
                if size > self.limits.max_entry_bytes:
                    return None, f"{size} bytes exceeds the {self.limits.max_entry_bytes}-byte limit"
                return candidate.read_bytes(), None
        hit = self.index.get(ref)
        if hit is None:
            return None, None
        z, info = hit
        if z not in self._open:
            self._open[z] = zipfile.ZipFile(z)
        try:
            return read_entry(self._open[z], info, self.limits), None
        except Exception as exc:  # a damaged entry is a corrupt image, not a crash
            return None, f"unreadable zip entry: {exc}"

    def close(self) -> None:
        for zf in self._open.values():
            zf.close()


def _row(key: str, origin: str, data: bytes | None, problem: str | None, store: ImageStore,
         max_pixels: int) -> tuple[dict, HashedImage | None]:
    """The inventory row of one reference, and its hashes when it decodes: the one reduced-scale
    decode that hashes an image is also its check (see `pipeline.mmrb2.images.inventory_images`)."""
    row = {"image_key": key, "origin": origin, "sha256": None, "bytes": None, "width": None,
           "height": None, "format": None, "status": "unresolved", "store_path": None, "problem": None}
    if data is None and problem is None:
        return row, None
    hashed = None
    if data is not None:
        hashed = hash_bytes(key, data, max_pixels)
        row.update(sha256=hashed.sha256, bytes=len(data), width=hashed.width, height=hashed.height,
                   format=hashed.format)
        problem = hashed.error
    if problem is None:
        row["status"] = "ok"
        row["store_path"] = store.put(row["sha256"], row["format"], data)
        return row, hashed
    row.update(status="corrupt", problem=problem, width=None, height=None)
    return row, None


def inventory_prm_images(
    refs: set[str],
    parquet_files: list[Path],
    image_root: Path | None,
    image_zips: list[Path],
    limits: ZipLimits,
    store: ImageStore,
    progress: Callable[[int, int, float], None] | None = None,
) -> tuple[pa.Table, list[Rejection], list[HashedImage]]:
    """Every embedded image and every path reference: resolved, decoded once (checksum, size,
    format, ok|corrupt|unresolved, and pHash/dHash for the decodable ones), kept in the store.
    `progress(done, total, images per second)` every 500 images (the total counts the references
    and the embedded images seen so far)."""
    rows: dict[str, dict] = {}
    hashes: dict[str, HashedImage] = {}
    rejected: list[Rejection] = []
    started, unreferenced = time.monotonic(), 0

    def add(key: str, origin: str, data: bytes | None, problem: str | None) -> None:
        nonlocal unreferenced
        rows[key], hashed = _row(key, origin, data, problem, store, limits.max_image_pixels)
        if hashed is not None:
            hashes[key] = hashed
        unreferenced += key not in refs
        if progress and len(rows) % 500 == 0:
            progress(len(rows), len(refs) + unreferenced, len(rows) / max(time.monotonic() - started, 1e-9))

    for key, data in _embedded(parquet_files):
        if key not in rows:
            add(key, "embedded", data, None)
    resolver = PathResolver(image_root, image_zips, limits)
    rejected.extend(resolver.rejected)
    try:
        for ref in sorted(refs - rows.keys()):
            add(ref, "path", *resolver.read(ref))
    finally:
        resolver.close()
    if progress and rows:
        progress(len(rows), len(rows), len(rows) / max(time.monotonic() - started, 1e-9))
    for row in rows.values():
        if row["status"] == "corrupt":
            rejected.append(Rejection(DATASET, "decode", row["image_key"], row["problem"]))
    table = pa.Table.from_pylist(sorted(rows.values(), key=lambda r: r["image_key"]), schema=PRM_IMAGES_SCHEMA)
    return table, rejected, [hashes[k] for k in sorted(hashes)]
