"""Images embedded in parquet rows (Hugging Face `Image()`: a struct of bytes and a path), checked
once each: keyed by content (`sha256:<hex>`, the same key in every mirror), decoded and hashed
for dedupe over a pool (`image_pool`: hashing's worker processes when the shards are large, else
threads), kept in the image store when an export needs them. Generic: a dataset's parser hands in
its batches' rows."""

from __future__ import annotations

import hashlib
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Iterable, Iterator

from pipeline.dedupe.hashing import HashedImage, hash_bytes
from pipeline.imaging import ImageStore
from pipeline.quarantine import Rejection
from pipeline.settings import ZipLimits


def check_images(dataset: str, rows: list[dict], seen, limits: ZipLimits, pool,
                 store: ImageStore | None = None, column: str = "image") -> tuple[list, dict]:
    """Each row's image key (None without embedded bytes), and the batch's images not in `seen`,
    checked and hashed over the pool (`image_pool`): key -> `check_image`'s result. The caller takes
    them in row order, so rows and quarantine come out as when each was checked in turn."""
    keys, todo, results = _submit(dataset, rows, seen, limits, pool, store, column)
    return keys, dict(zip(todo, results))


def checked_batches(dataset: str, batches: Iterable[list[dict]], seen, limits: ZipLimits, pool,
                    store: ImageStore | None = None, column: str = "image") -> Iterator[tuple[list, list, dict]]:
    """check_images over a stream of row batches, one batch ahead: batch i+1's images are handed to
    the pool before batch i is given back (its rows, keys and checked images), so the workers decode
    while the caller handles rows. `seen`: the caller's images kept so far (read as check_images
    reads it, live: the caller adds to it while it handles a batch). An image of batch i+1 that batch
    i has in flight is not handed over again: its check comes back with batch i+1 too, so a row of
    batch i that was dropped before it kept its image does not leave a later row without one. A
    batch that cannot be read raises after the batches before it have been given back. Memory: two
    batches."""
    it = iter(batches)
    pending = None  # (rows, keys, todo, results) of the batch in flight
    last: dict = {}  # the checks of the batch given back last
    while True:
        try:
            rows = next(it)
        except StopIteration:
            break
        except BaseException:
            if pending is not None:
                yield _collected(pending, last)
            raise
        in_flight = pending[2] if pending is not None else {}
        job = (rows, *_submit(dataset, rows, _Either(seen, in_flight), limits, pool, store, column))
        if pending is not None:
            done = _collected(pending, last)
            last = done[2]
            yield done
        pending = job
    if pending is not None:
        yield _collected(pending, last)


class _Either:
    """`key in` either container."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __contains__(self, key) -> bool:
        return key in self.first or key in self.second


def _collected(pending, last: dict) -> tuple[list, list, dict]:
    """A batch's rows, keys and checks: its own, and those its images had in the batch before."""
    rows, keys, todo, results = pending
    checked = dict(zip(todo, results))
    for key in keys:
        if key is not None and key not in checked and key in last:
            checked[key] = last[key]
    return rows, keys, checked


def _submit(dataset: str, rows: list[dict], seen, limits: ZipLimits, pool, store: ImageStore | None,
            column: str) -> tuple[list, dict, Iterator]:
    """The rows' image keys, the images to check (key -> bytes, not in `seen`) and their results
    as the pool gives them (an iterator: the work is handed to the pool here)."""
    keys, todo = [], {}
    for row in rows:
        image = row.get(column)
        data = image.get("bytes") if isinstance(image, dict) else None
        key = None if data is None else f"sha256:{hashlib.sha256(data).hexdigest()}"
        keys.append(key)
        if key is not None and key not in seen:
            todo.setdefault(key, data)
    check = partial(_check_item, dataset, limits, store)
    chunks = {"chunksize": POOL_CHUNK} if isinstance(pool, ProcessPoolExecutor) else {}
    return keys, todo, pool.map(check, todo.items(), **chunks)


POOL_BYTES = 8 << 20  # shards holding less than this (a few hundred small images) are checked on threads here
POOL_CHUNK = 4  # images per task handed to a worker process


@contextmanager
def image_pool(files: list[Path], name: str) -> Iterator[Executor]:
    """The pool `check_images` decodes a parser's images on: hashing's worker processes when the
    shards hold POOL_BYTES or more and there is more than one core, else `name`d threads, which
    start at once. The workers fork from hashing's fork server, which has the compiled loops
    loaded (and which every later hashing pool of the run forks from as well); threads in this
    process would hash their first images without those loops and then load them here. Once
    loaded, both decode about as fast (1,219 embedded images, 90 MB: 1.3-1.4 s either way on 2
    cores); in the first step of a run that hashes they differ (2.4 s on threads, 2.1 s on
    processes, docs/testing.md)."""
    from pipeline.dedupe.hashing import _process_pool, default_workers

    size = sum(Path(f).stat().st_size for f in files if Path(f).is_file())
    workers = default_workers()
    pool = _process_pool(workers) if workers > 1 and size >= POOL_BYTES else ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _check_item(dataset: str, limits: ZipLimits, store: ImageStore | None,
                item: tuple[str, bytes]) -> tuple[dict, HashedImage | None, Rejection | None]:
    return check_image(dataset, item[0], item[1], limits, store)


def check_image(dataset: str, key: str, data: bytes, limits: ZipLimits,
                store: ImageStore | None = None) -> tuple[dict, HashedImage | None, Rejection | None]:
    """An image's inventory row (image_key, sha256, bytes, width, height, format, status, and
    `store_path` given a store), its hashes when it decodes (its bytes then put in the store), and
    the rejection (stage `decode`) when it does not."""
    row = {"image_key": key, "sha256": key.split(":", 1)[1], "bytes": len(data), "width": None, "height": None,
           "format": None, "status": "corrupt", **({"store_path": None} if store is not None else {})}
    if len(data) > limits.max_entry_bytes:
        return row, None, Rejection(dataset, "decode", key, f"{len(data)} bytes exceeds the {limits.max_entry_bytes}-byte limit")
    h = hash_bytes(key, data, limits.max_image_pixels)
    if h.error is not None:
        return row, None, Rejection(dataset, "decode", key, h.error)
    row = {**row, "width": h.width, "height": h.height, "format": h.format, "status": "ok"}
    if store is not None:
        row["store_path"] = store.put(row["sha256"], h.format, data)
    return row, h, None
