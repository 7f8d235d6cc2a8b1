"""Thumbnails for the review page: made once per image content, a few KB each.

A thumbnail is keyed by the source image's sha256 (`thumbs/ab/<sha256>.jpg`), so an image that
appears in many clusters, pairs or releases is reduced once. The JPEG decoder's draft mode
decodes a large JPEG at 1/2–1/8 scale, so reducing costs a fraction of a full decode. The
longest side is `max_side` pixels; quality steps down until the file fits `max_bytes`.
"""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path

from PIL import Image

from pipeline.imaging import open_image

MAX_SIDE = 160
MAX_BYTES = 8 * 1024
QUALITIES = (75, 60, 45, 30)


def thumbnail_relpath(sha256: str) -> str:
    return f"thumbs/{sha256[:2]}/{sha256}.jpg"


def make_thumbnail(data: bytes, max_side: int = MAX_SIDE, max_bytes: int = MAX_BYTES,
                   max_pixels: int | None = None) -> bytes:
    """A JPEG of at most `max_side` pixels a side and, quality permitting, `max_bytes` bytes.
    Raises what Pillow raises for bytes that are not an image (callers show a placeholder)."""
    with open_image(data, max_pixels) as im:
        im.draft("RGB", (max_side, max_side))
        im = im.convert("RGBA") if im.mode in ("P", "LA") else im
        if im.mode == "RGBA":  # flatten transparency on white, as a page shows it
            flat = Image.new("RGB", im.size, "white")
            flat.paste(im, mask=im.getchannel("A"))
            im = flat
        im = im.convert("RGB")
        im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        out = b""
        for quality in QUALITIES:
            buf = io.BytesIO()
            im.save(buf, "JPEG", quality=quality, optimize=True)
            out = buf.getvalue()
            if len(out) <= max_bytes:
                break
        return out


class ThumbnailStore:
    """Content-addressed thumbnails under `root`; asking twice for one image reduces it once."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, sha256: str) -> Path:
        return self.root / thumbnail_relpath(sha256)

    def get(self, sha256: str, load) -> str | None:
        """The thumbnail's path relative to `root` for the image with `sha256`, made from `load()`'s
        bytes when it is not there yet; None when the bytes are not an image."""
        if not self.path(sha256).is_file():
            try:
                data = make_thumbnail(load())
            except Exception:  # a corrupt or missing image: the page shows a placeholder
                return None
            self.put(sha256, data)
        return thumbnail_relpath(sha256)

    def put(self, sha256: str, thumbnail: bytes) -> str:
        """Store a made thumbnail under its image's sha256 (written under a temporary name, renamed)."""
        target = self.path(sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
        tmp.write_bytes(thumbnail)
        os.replace(tmp, target)
        return thumbnail_relpath(sha256)
