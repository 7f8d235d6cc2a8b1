"""VisualPRM images: embedded bytes from the parquet `media` column, or path references resolved
against a local image folder or zip. Every image with bytes lands once, content-addressed, in an
image store (`{sha256[:2]}/{sha256}.{ext}`) that exports link from; ~4 rollouts share one image.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
import zipfile
from pathlib import Path, PurePosixPath
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.dedupe.hashing import HashedImage, hash_bytes
from pipeline.imaging import ImageStore
from pipeline.quarantine import FILE_STAGE, Rejection
from pipeline.settings import ZipLimits
from pipeline.staging import streaming_parquet
from pipeline.visualprm.readers import parquet_problem
from pipeline.archives import open_zip
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
        ("located_at", pa.string()),  # a path reference: the file, or archive!entry, that answered it
    ]
)


def _media_items(batch: pa.RecordBatch):
    """(key, bytes) of the embedded images in one batch of the `media` column; path-only entries
    are filtered out with Arrow compute, not looped over."""
    items = pc.list_flatten(batch.column(0))
    if len(items) == 0:
        return
    data = pc.struct_field(items, "bytes")
    keep = pc.is_valid(data)
    if not pc.any(keep).as_py():
        return
    data = pc.filter(data, keep)
    paths = pc.filter(pc.struct_field(items, "path"), keep)
    for path, blob in zip(paths.to_pylist(), data.to_pylist()):
        yield path or f"sha256:{hashlib.sha256(blob).hexdigest()}", blob


def _media_file(f: Path):
    """The shard as a streaming reader when it has a readable `media` column, else None."""
    if parquet_problem(f):  # the reader has already quarantined a shard it cannot read
        return None
    pf = streaming_parquet(f)
    return pf if "media" in pf.schema_arrow.names else None


def _media_batches(units: list[tuple[str, int]]):
    """The `media` column of the (shard, row group) units (`_embedded_row_groups`), batch by batch."""
    for file, group in itertools.groupby(units, key=lambda u: u[0]):
        pf = streaming_parquet(Path(file))
        yield from pf.iter_batches(batch_size=256, columns=["media"], row_groups=[rg for _, rg in group])


def _embedded(units: list[tuple[str, int]]):
    """Yield (key, bytes) for each embedded image of the (shard, row group) units."""
    for batch in _media_batches(units):
        yield from _media_items(batch)


def _embedded_unit(file: str, row_group: int, store_root: str, max_pixels: int) -> list[tuple[str, dict, HashedImage | None]]:
    """One row group's embedded images, read, checked, hashed and stored where it runs (a Ray
    task: it reads its own bytes and returns rows and hashes, never images)."""
    store, seen, out = ImageStore(Path(store_root)), set(), []
    for key, blob in _embedded([(file, row_group)]):
        if key not in seen:
            seen.add(key)
            out.append((key, *_row(key, "embedded", blob, None, store, max_pixels)))
    return out


def _embedded_row_groups(files: list[Path]) -> tuple[list[tuple[str, int]], int]:
    """The (shard, row group) units that hold embedded bytes, and how many bytes (compressed) they
    hold, from the shards' footers: a row group whose `bytes` leaf is all null (path references
    only, nine in ten upstream) is not read at all."""
    units, size = [], 0
    for f in files:
        pf = _media_file(f)
        if pf is None:
            continue
        meta = pf.metadata
        leaves = [i for i in range(meta.num_columns)
                  if meta.schema.column(i).path.startswith("media.") and meta.schema.column(i).path.endswith(".bytes")]
        for rg in range(meta.num_row_groups):
            chunks = [meta.row_group(rg).column(i) for i in leaves]
            stats = [c.statistics for c in chunks]
            if chunks and all(st is not None and st.has_null_count and st.null_count == c.num_values
                              for c, st in zip(chunks, stats)):
                continue
            units.append((str(f), rg))
            size += sum(c.total_compressed_size for c in chunks)
    return units, size


def describe(location: tuple) -> str:
    """Where a reference was found, as `prm_images.located_at` says it: a file or object, or archive!entry."""
    if location[0] == "zip":
        return f"{location[1]}!{location[2].filename}"
    return location[1]  # a file, an object, or ("hub", where it came from, the stored file)


def archive_name(url: str) -> bool:
    """An archive (`….zip`, `….zip_aa`) rather than a prefix of loose images."""
    from pipeline.archives import SPLIT

    name = url.rstrip("/").rpartition("/")[2]
    return name.endswith(".zip") or SPLIT.match(name) is not None


def _object_keys(prefix_url: str) -> list[str]:
    """Every object under `s3://bucket/prefix/`, as s3:// URLs."""
    import obstore

    from pipeline.sources.objects import bucket_store

    bucket, _, prefix = prefix_url[len("s3://"):].rstrip("/").partition("/")
    store = bucket_store(bucket)
    return [f"s3://{bucket}/{m['path']}" for batch in obstore.list(store, prefix=prefix or None) for m in batch]


def _fetch(location: tuple, limits: ZipLimits, open_zips: dict) -> tuple[bytes | None, str | None]:
    """The bytes at a location `PathResolver.locate` found: ("file", path) or ("zip", zip, info)."""
    if location[0] == "file":
        return Path(location[1]).read_bytes(), None
    if location[0] == "hub":
        return Path(location[2]).read_bytes(), None
    if location[0] == "object":
        from pipeline.sources.objects import open_object

        with open_object(location[1]) as fh:
            data = fh.read(limits.max_entry_bytes + 1)
        if len(data) > limits.max_entry_bytes:
            return None, f"more than the {limits.max_entry_bytes}-byte limit"
        return data, None
    z, info = location[1], location[2]
    if z not in open_zips:
        if z.startswith("s3://"):  # an archive in a bucket: its entries read by range
            from pipeline.sources.objects import open_object_archive

            open_zips[z] = zipfile.ZipFile(open_object_archive(z))
        else:
            open_zips[z] = open_zip(Path(z))
    try:
        return read_entry(open_zips[z], info, limits), None
    except Exception as exc:  # a damaged entry is a corrupt image, not a crash
        return None, f"unreadable zip entry: {exc}"


def _path_unit(located: list[tuple[str, tuple]], store_root: str, limits: ZipLimits) -> list[tuple[str, dict, HashedImage | None]]:
    """Path references at their locations, read, checked, hashed and stored where it runs (a Ray task)."""
    open_zips: dict = {}
    try:
        return [out for _, out in _path_chunk([(i, ref, location) for i, (ref, location) in enumerate(located)],
                                              store_root, limits, open_zips)]
    finally:
        for zf in open_zips.values():
            zf.close()


def _usable_entries(archive: Path, limits: ZipLimits, rejected: list[Rejection]) -> list[zipfile.ZipInfo]:
    """The entries of an archive that may be read; a refused archive or entry is a rejection."""
    scan = scan_zip(archive, limits)
    name = str(archive).rsplit("/", 1)[-1]
    if scan.archive_error:
        rejected.append(Rejection(DATASET, FILE_STAGE, name, scan.archive_error))
    for entry, reason in scan.refused:
        rejected.append(Rejection(DATASET, "unpack", f"{name}!{entry}", reason))
    return list(scan.entries.values())


def suffix_matches(by_name: dict[str, list[tuple[tuple[str, ...], object]]], ref: str) -> tuple[list, int]:
    """The values of `by_name` (file name -> [(path parts, value)]) whose path shares the longest
    suffix with `ref`, whole components and a folder plus the file name at least; and that length."""
    parts = PurePosixPath(ref).parts
    if not parts or ".." in parts or ref.startswith("/"):
        return [], 0
    best, found = 0, []
    for candidate, value in by_name.get(parts[-1], ()):
        shared = 0
        while shared < min(len(parts), len(candidate)) and parts[-1 - shared] == candidate[-1 - shared]:
            shared += 1
        if shared < min(2, len(parts), len(candidate)):
            continue  # a shared file name in another folder is no match
        if shared > best:
            best, found = shared, [value]
        elif shared == best:
            found.append(value)
    return found, best


def embedded_keys(parquet_files: list[Path]) -> set[str]:
    """The keys of the images the shards carry themselves (what needs no image root), as
    `_media_items` names them: the path, read straight from Arrow, and only for an embedded image
    without a path the sha256 of its bytes (no other image is turned into a Python object). Only
    the row groups whose footers say they hold embedded bytes are read (`_embedded_row_groups`)."""
    keys: set[str] = set()
    for batch in _media_batches(_embedded_row_groups(parquet_files)[0]):
        items = pc.list_flatten(batch.column(0))
        if len(items) == 0:
            continue
        data, paths = pc.struct_field(items, "bytes"), pc.struct_field(items, "path")
        embedded = pc.is_valid(data)
        named = pc.fill_null(pc.and_(pc.is_valid(paths), pc.not_equal(paths, "")), False)
        keys.update(pc.filter(paths, pc.and_(embedded, named)).to_pylist())
        for blob in pc.filter(data, pc.and_(embedded, pc.invert(named))).to_pylist():
            keys.add(f"sha256:{hashlib.sha256(blob).hexdigest()}")
    return keys


class SuffixIndex:
    """Files (or entries) by file name; `locate` answers a reference with the one whose path shares
    the longest suffix with it (see `suffix_matches`), or says why none: two best matches are
    ambiguous. Subclasses fill `by_name` through `_add`."""

    root: object = None

    def __init__(self) -> None:
        self.by_name: dict[str, list[tuple[tuple[str, ...], tuple]]] = {}
        self.rejected: list[Rejection] = []

    def _add(self, parts: tuple[str, ...], location: tuple) -> None:
        self.by_name.setdefault(parts[-1], []).append((parts, location))

    def locate(self, ref: str) -> tuple[tuple | None, str | None]:
        parts = PurePosixPath(ref).parts
        found, best = suffix_matches(self.by_name, ref)
        if len(found) > 1:
            return None, (f"ambiguous in image root {self.root}: {len(found)} files end in "
                          f"{'/'.join(parts[-best:])!r}")
        return (found[0], None) if found else (None, None)


class RootIndex(SuffixIndex):
    """One image root the user gave (`--images`): a folder, a zip, or a split zip named by its
    first part. Its files are indexed by file name; a reference resolves to the file whose path
    shares the longest suffix with it (whole path components), so an archive with an extra top
    folder (`VisualPRM400K/images/Geometry3K/...`) or a reference with one
    (`images/Geometry3K/...`) still meet; the match must take in a folder as well as the file
    name (`train/18027/image.png` is not `train/18809/image.png`). Two best matches are
    ambiguous: unresolved, with why."""

    def __init__(self, root: Path | str, limits: ZipLimits):
        super().__init__()
        self.root = root
        if str(root).startswith("s3://") and not archive_name(str(root)):
            for key in _object_keys(str(root)):  # loose images under a prefix of a bucket
                self._add(tuple(key[len(str(root).rstrip("/")) + 1:].split("/")), ("object", key))
        elif not str(root).startswith("s3://") and Path(root).is_dir():
            root = Path(root)
            for folder, _, names in os.walk(root):
                for name in names:
                    path = Path(folder) / name
                    self._add(path.relative_to(root).parts, ("file", str(path)))
        else:
            for info in _usable_entries(root, limits, self.rejected):
                self._add(PurePosixPath(info.filename).parts, ("zip", str(root), info))


class PathResolver:
    """Find a referenced relative path under the dataset folder or its `images/` subfolder (the
    upstream InternVL layout keeps images beside `annotations/`), or inside image zips (entries
    may carry one extra leading folder, e.g. `images/MathV360K/...`), then in the image roots
    the user gave, in order (see RootIndex)."""

    def __init__(self, root: Path | None, zips: list[Path], limits: ZipLimits, image_roots: list[Path] = ()):
        self.bases = [root, root / "images"] if root is not None else []
        self.limits = limits
        self.index: dict[str, tuple[Path, zipfile.ZipInfo]] = {}
        self.rejected: list[Rejection] = []
        for z in zips:
            for info in _usable_entries(z, limits, self.rejected):
                name = info.filename
                self.index.setdefault(name, (z, info))
                parts = PurePosixPath(name).parts
                if len(parts) > 1:
                    self.index.setdefault(str(PurePosixPath(*parts[1:])), (z, info))
        self.roots = [r if hasattr(r, "locate") else RootIndex(r, limits) for r in image_roots]
        for r in self.roots:
            self.rejected.extend(r.rejected)

    def locate(self, ref: str) -> tuple[tuple | None, str | None]:
        """(location, problem) of a reference: ("file", path) or ("zip", zip, info); (None,
        problem) when it is refused; (None, None) when it is simply not found."""
        for base in self.bases if not ref.startswith("sha256:") else []:
            candidate = base / ref
            # a stat first: most references resolve nowhere, and is_within resolves every link
            if candidate.is_file() and is_within(base, ref):
                size = candidate.stat().st_size
                if size > self.limits.max_entry_bytes:
                    return None, f"{size} bytes exceeds the {self.limits.max_entry_bytes}-byte limit"
                return ("file", str(candidate)), None
        hit = self.index.get(ref)
        if hit is not None:
            return ("zip", str(hit[0]), hit[1]), None
        for root in self.roots:
            location, problem = root.locate(ref)
            if location is not None or problem is not None:
                return location, problem
        return None, None


def _row(key: str, origin: str, data: bytes | None, problem: str | None, store: ImageStore,
         max_pixels: int, located_at: str | None = None) -> tuple[dict, HashedImage | None]:
    """The inventory row of one reference, and its hashes when it decodes: the one reduced-scale
    decode that hashes an image is also its check (see `pipeline.mmrb2.images.inventory_images`)."""
    row = {"image_key": key, "origin": origin, "sha256": None, "bytes": None, "width": None,
           "height": None, "format": None, "status": "unresolved", "store_path": None, "problem": None,
           "located_at": None}
    if data is None and problem is None:
        return row, None
    row["located_at"] = located_at
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
    executor=None,
    image_roots: list[Path] = (),
) -> tuple[pa.Table, list[Rejection], list[HashedImage]]:
    """Every embedded image and every path reference: resolved, decoded once (checksum, size,
    format, ok|corrupt|unresolved, and pHash/dHash for the decodable ones), kept in the store.
    `progress(done, total, images per second)` every 500 images (the total counts the references
    and the embedded images seen so far). With a Ray `executor` (pipeline/dedupe/executor.py) each
    shard's row group, and each chunk of path references, is a task that reads, hashes and stores
    its own images: the image store must then be a folder every node sees. Same rows either way."""
    rows: dict[str, dict] = {}
    hashes: dict[str, HashedImage] = {}
    rejected: list[Rejection] = []
    started, unreferenced = time.monotonic(), 0

    def record(key: str, row: dict, hashed: HashedImage | None) -> None:
        nonlocal unreferenced
        rows[key] = row
        if hashed is not None:
            hashes[key] = hashed
        unreferenced += key not in refs
        if progress and len(rows) % 500 == 0:
            progress(len(rows), len(refs) + unreferenced, len(rows) / max(time.monotonic() - started, 1e-9))

    def add(key: str, origin: str, data: bytes | None, problem: str | None, located_at: str | None = None) -> None:
        record(key, *_row(key, origin, data, problem, store, limits.max_image_pixels, located_at))

    if executor is not None and executor.on_ray:
        _inventory_on_ray(refs, parquet_files, image_root, image_zips, limits, store, executor, rows, hashes,
                          rejected, progress, image_roots)
    else:
        for key, row, hashed in _read_embedded(parquet_files, store, limits.max_image_pixels):
            record(key, row, hashed)
        resolver = PathResolver(image_root, image_zips, limits, image_roots)
        rejected.extend(resolver.rejected)
        located = []
        for ref in sorted(refs - rows.keys()):
            location, problem = resolver.locate(ref)
            if location is None:
                add(ref, "path", None, problem)
            else:
                located.append((ref, location))
        for ref, row, hashed in _read_located(located, store, limits):
            record(ref, row, hashed)
    if progress and rows:
        progress(len(rows), len(rows), len(rows) / max(time.monotonic() - started, 1e-9))
    # An unresolved reference is a decision when no image root was given (the export leaves its
    # samples out), and a fault when roots were given and none holds it.
    searched = bool(image_roots or image_zips)
    for row in rows.values():
        if row["status"] == "corrupt":
            rejected.append(Rejection(DATASET, "decode", row["image_key"], row["problem"]))
        elif row["status"] == "unresolved" and row["problem"] is None:
            if searched:
                row["problem"] = "not found in the dataset folder or the image roots"
                rejected.append(Rejection(DATASET, "resolve", row["image_key"], row["problem"]))
            else:
                row["problem"] = "not embedded, and no image root was given (--images)"
    table = pa.Table.from_pylist(sorted(rows.values(), key=lambda r: r["image_key"]), schema=PRM_IMAGES_SCHEMA)
    return table, rejected, [hashes[k] for k in sorted(hashes)]


PATH_CHUNK = 64
_WORKER_ZIPS: dict = {}  # a pool worker's open archives, kept for its next chunks


def _path_chunk(chunk: list[tuple[int, str, tuple]], store_root: str, limits: ZipLimits,
                open_zips: dict | None = None) -> list[tuple[int, tuple[str, dict, HashedImage | None]]]:
    """(position, reference, location) items read, checked, hashed and stored where this runs;
    archives are opened once into `open_zips` (a pool worker's own, by default)."""
    store, zips = ImageStore(Path(store_root)), _WORKER_ZIPS if open_zips is None else open_zips
    return [(i, (ref, *_row(ref, "path", *_fetch(location, limits, zips), store, limits.max_image_pixels,
                            describe(location)))) for i, ref, location in chunk]


def _read_located(located: list[tuple[str, tuple]], store: ImageStore, limits: ZipLimits,
                  workers: int | None = None) -> list[tuple[str, dict, HashedImage | None]]:
    """Located path references read, checked, hashed and stored, in order: over hashing's process
    pool (PATH_CHUNK per task; this process takes chunks too while the pool starts) when there are
    SMALL_BATCH or more, else here. Each worker opens an archive once."""
    from functools import partial

    from pipeline.dedupe.hashing import SMALL_BATCH, _run, default_workers

    if workers is None:
        workers = default_workers() if len(located) >= SMALL_BATCH else 1
    jobs = [(i, ref, location) for i, (ref, location) in enumerate(located)]
    mine: dict = {}  # this process's archives, closed here
    try:
        return _run(jobs, PATH_CHUNK, partial(_path_chunk, store_root=str(store.root), limits=limits), workers,
                    local=partial(_path_chunk, store_root=str(store.root), limits=limits, open_zips=mine))
    finally:
        for zf in mine.values():
            zf.close()


EMBEDDED_CHUNK = 16  # embedded images per pool task
EMBEDDED_POOL_BYTES = 8 << 20  # less embedded data than this (a few hundred small images) is read here
EMBEDDED_WINDOW_BYTES = 64 << 20  # embedded bytes held at once: read ahead, then hashed over the pool


def _embedded_chunk(chunk: list[tuple[int, str, bytes]], store_root: str,
                    max_pixels: int) -> list[tuple[int, tuple[dict, HashedImage | None]]]:
    """(position, key, bytes) items checked, hashed and stored where this runs."""
    store = ImageStore(Path(store_root))
    return [(i, _row(key, "embedded", data, None, store, max_pixels)) for i, key, data in chunk]


def _read_embedded(parquet_files: list[Path], store: ImageStore, max_pixels: int,
                   workers: int | None = None) -> list[tuple[str, dict, HashedImage | None]]:
    """The shards' embedded images, the first occurrence of each key in shard order, checked,
    hashed and stored (only the row groups whose footers say they hold embedded bytes are read). They are read here in windows of EMBEDDED_WINDOW_BYTES (memory holds one
    window, never the shards), each window hashed over hashing's process pool (EMBEDDED_CHUNK
    images per task, one pool for all windows) when the shards' footers say they hold
    EMBEDDED_POOL_BYTES or more, else here. Decoding holds the GIL in parts, so threads did not
    overlap; processes do. The same rows either way."""
    from functools import partial

    from pipeline.dedupe.hashing import _process_pool, _run, default_workers

    units, size = _embedded_row_groups(parquet_files)  # the footers, read once
    if workers is None:
        workers = default_workers() if size >= EMBEDDED_POOL_BYTES else 1
    work = partial(_embedded_chunk, store_root=str(store.root), max_pixels=max_pixels)
    pool = _process_pool(workers) if workers > 1 else None
    out: list[tuple[str, dict, HashedImage | None]] = []
    window: list[tuple[str, bytes]] = []

    def flush() -> None:
        jobs = [(i, key, data) for i, (key, data) in enumerate(window)]
        done = _run(jobs, EMBEDDED_CHUNK, work, workers, local=work, pool=pool)
        out.extend((key, row, hashed) for (key, _), (row, hashed) in zip(window, done))
        window.clear()

    taken: set[str] = set()
    held = 0
    try:
        for key, data in _embedded(units):
            if key in taken:
                continue
            taken.add(key)
            window.append((key, data))
            held += len(data)
            if held >= EMBEDDED_WINDOW_BYTES:
                flush()
                held = 0
        flush()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return out


def _inventory_on_ray(refs, parquet_files, image_root, image_zips, limits, store, executor, rows, hashes, rejected,
                      progress, image_roots) -> None:
    """`inventory_prm_images` with the reading, hashing and storing done by Ray tasks: first the
    embedded images (one task per row group; the first occurrence of a key wins, in shard order,
    as in the local path), then the references they do not answer (located here, read there)."""
    from pipeline.dedupe.ray_executor import map_tasks

    def keep(outputs) -> None:
        for out in outputs:
            for key, row, hashed in out:
                if key not in rows:
                    rows[key] = row
                    if hashed is not None:
                        hashes[key] = hashed

    units = [(file, rg, str(store.root), limits.max_image_pixels) for file, rg in _embedded_row_groups(parquet_files)[0]]
    keep(map_tasks(_embedded_unit, units, executor.address, progress))
    resolver = PathResolver(image_root, image_zips, limits, image_roots)
    rejected.extend(resolver.rejected)
    located = []
    for ref in sorted(refs - rows.keys()):
        location, problem = resolver.locate(ref)
        if location is None:
            rows[ref], _ = _row(ref, "path", None, problem, store, limits.max_image_pixels)
        else:
            located.append((ref, location))
    calls = [(located[s:s + PATH_CHUNK], str(store.root), limits) for s in range(0, len(located), PATH_CHUNK)]
    keep(map_tasks(_path_unit, calls, executor.address, progress))
