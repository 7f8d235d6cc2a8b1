"""Thumbnails for the review page: made once per image content, a few KB each.

A thumbnail is keyed by the source image's sha256 (`thumbs/ab/<sha256>.jpg`), so an image that
appears in many clusters, pairs or releases is reduced once. The JPEG decoder's draft mode
decodes a large JPEG at 1/2–1/8 scale, so reducing costs a fraction of a full decode. The
longest side is `max_side` pixels; quality steps down until the file fits `max_bytes`. Where the
image's verification signature is at hand (the review page of a release), the thumbnail is made
from it, without reading the image again (`thumbnail_from_signature`).
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
        return _jpeg(im, max_bytes)


def _jpeg(im: Image.Image, max_bytes: int) -> bytes:
    out = b""
    for quality in QUALITIES:
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=quality, optimize=True)
        out = buf.getvalue()
        if len(out) <= max_bytes:
            break
    return out


def thumbnail_size(width: int, height: int, max_side: int = MAX_SIDE) -> tuple[int, int]:
    """The size Pillow's `Image.thumbnail((max_side, max_side))` gives an image of this size."""
    if width <= max_side and height <= max_side:
        return width, height
    if width >= height:
        return max_side, max(1, round(height * max_side / width))
    return max(1, round(width * max_side / height)), max_side


def thumbnail_from_signature(signature: bytes, width: int, height: int, max_side: int = MAX_SIDE,
                             max_bytes: int = MAX_BYTES) -> bytes:
    """A thumbnail made from an image's stored verification signature (pipeline/dedupe/hashing.py:
    its luma at DETAIL_SIDE x DETAIL_SIDE and its Cb and Cr at CHROMA_SIDE x CHROMA_SIDE, taken
    from the one decode that hashed it) instead of reading and decoding the image again: the
    colour planes brought to the luma's size, then the square brought back to the image's aspect
    at `make_thumbnail`'s size. Softer than one made from the bytes (the luma has 128 px a side,
    the colour 32), which a review thumbnail can afford."""
    from pipeline.dedupe.hashing import CHROMA_SIDE, DETAIL_SIDE

    luma_bytes, chroma_bytes = DETAIL_SIDE * DETAIL_SIDE, CHROMA_SIDE * CHROMA_SIDE
    if len(signature) != luma_bytes + 2 * chroma_bytes:
        raise ValueError(f"a signature has {luma_bytes + 2 * chroma_bytes} bytes, not {len(signature)}")
    y = Image.frombytes("L", (DETAIL_SIDE, DETAIL_SIDE), signature[:luma_bytes])
    cb, cr = (Image.frombytes("L", (CHROMA_SIDE, CHROMA_SIDE), signature[luma_bytes + k * chroma_bytes:
                                                                          luma_bytes + (k + 1) * chroma_bytes])
              .resize((DETAIL_SIDE, DETAIL_SIDE), Image.Resampling.BILINEAR) for k in (0, 1))
    square = Image.merge("YCbCr", (y, cb, cr)).convert("RGB")
    return _jpeg(square.resize(thumbnail_size(width, height, max_side), Image.Resampling.LANCZOS), max_bytes)


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
