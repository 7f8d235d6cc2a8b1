"""Images embedded in parquet rows (Hugging Face `Image()`: a struct of bytes and a path), checked
once each: keyed by content (`sha256:<hex>`, the same key in every mirror), decoded and hashed
for dedupe over a thread pool (Pillow's decode and resize let go of the GIL), kept in the image
store when an export needs them. Generic: a dataset's parser hands in its batches' rows."""

from __future__ import annotations

import hashlib

from pipeline.dedupe.hashing import HashedImage, hash_bytes
from pipeline.imaging import ImageStore
from pipeline.quarantine import Rejection
from pipeline.settings import ZipLimits


def check_images(dataset: str, rows: list[dict], seen: dict, limits: ZipLimits, pool,
                 store: ImageStore | None = None, column: str = "image") -> tuple[list, dict]:
    """Each row's image key (None without embedded bytes), and the batch's images not in `seen`,
    checked and hashed over the pool's threads: key -> `check_image`'s result. The caller takes
    them in row order, so rows and quarantine come out as when each was checked in turn."""
    keys, todo = [], {}
    for row in rows:
        image = row.get(column)
        data = image.get("bytes") if isinstance(image, dict) else None
        key = None if data is None else f"sha256:{hashlib.sha256(data).hexdigest()}"
        keys.append(key)
        if key is not None and key not in seen:
            todo.setdefault(key, data)
    return keys, dict(zip(todo, pool.map(lambda item: check_image(dataset, item[0], item[1], limits, store), todo.items())))


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
