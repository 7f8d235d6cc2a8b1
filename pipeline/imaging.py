"""Image facts from bytes: dimensions, format, and whether the file decodes at all."""

from __future__ import annotations

import io
import os
import uuid
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from PIL import Image, UnidentifiedImageError

from pipeline.settings import DEFAULT_MAX_IMAGE_PIXELS

EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tif"}
NOT_AN_IMAGE = "UnidentifiedImageError: not an image format Pillow reads"


@contextmanager
def open_image(data: bytes, max_pixels: int | None = None) -> Iterator[Image.Image]:
    """Image.open on bytes behind the decompression-bomb guard, which is never off.

    An image with more than `max_pixels` pixels (the `max_image_pixels` setting) raises
    DecompressionBombError naming that limit, from the header alone, before any pixel is decoded.
    None keeps Pillow's own Image.MAX_IMAGE_PIXELS (and the default limit if someone set it to
    None). Pillow's own guard stays on too: it refuses more than twice its limit inside
    Image.open, and that refusal is reworded to name the limit that applies, never Pillow's
    internal 2x."""
    limit = max_pixels or Image.MAX_IMAGE_PIXELS or DEFAULT_MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        # With an explicit limit the check below decides; without, Pillow's warning is the refusal.
        warnings.simplefilter("error" if max_pixels is None else "ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(io.BytesIO(data))
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            size = header_size(data)
            if size is None:
                raise
            raise bomb(size, limit) from exc
        with im:
            if im.size[0] * im.size[1] > limit:
                raise bomb(im.size, limit)
            yield im


def bomb(size: tuple[int, int], limit: int) -> Image.DecompressionBombError:
    """The refusal of an image of `size`: above `limit` (the max_image_pixels setting), or, with a
    limit raised past it, above the ceiling Pillow itself keeps (twice Image.MAX_IMAGE_PIXELS)."""
    width, height = size
    pixels = width * height
    if pixels > limit:
        return Image.DecompressionBombError(
            f"{width}x{height} image has {pixels} pixels, above the max_image_pixels limit of {limit}"
        )
    ceiling = 2 * (Image.MAX_IMAGE_PIXELS or DEFAULT_MAX_IMAGE_PIXELS)
    return Image.DecompressionBombError(
        f"{width}x{height} image has {pixels} pixels, above Pillow's own ceiling of {ceiling} "
        f"(twice PIL.Image.MAX_IMAGE_PIXELS), which max_image_pixels={limit} does not lift"
    )


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as the format plugins read them from the header, the way Image.open tries
    them but without its bomb check (which raises before the size can be asked for)."""
    Image.init()
    prefix = data[:16]
    for fmt in Image.ID:
        factory, accept = Image.OPEN[fmt]
        accepted = accept(prefix) if accept else True
        if not accepted or isinstance(accepted, str):  # a string is Pillow's "close, but not this"
            continue
        try:
            with factory(io.BytesIO(data), "") as im:
                return im.size
        except Exception:  # not this format after all: the next one, as Image.open does
            continue
    return None


def decode_problem(exc: Exception) -> str:
    """The reason an image was refused, reproducible from run to run."""
    if isinstance(exc, UnidentifiedImageError):  # its message names a BytesIO address
        return NOT_AN_IMAGE
    return f"{type(exc).__name__}: {exc}"


def inspect_image(data: bytes, max_pixels: int | None = None) -> tuple[int | None, int | None, str | None, str | None]:
    """(width, height, format, problem): decode fully, so a truncated file is caught; an image
    above the pixel limit is refused before decoding (see `open_image`). The inventories check
    images with the decode that hashes them (`dedupe.hashing.hash_bytes`); this full decode is the
    reference that check is tested against."""
    try:
        with open_image(data, max_pixels) as im:
            size, fmt = im.size, im.format
            im.load()
        return size[0], size[1], fmt, None
    except Exception as exc:  # Pillow raises many types for bad bytes; all mean "corrupt"
        return None, None, None, decode_problem(exc)


def extension(fmt: str | None) -> str:
    return EXTENSIONS.get(fmt or "", "bin")


def store_relpath(sha256: str, fmt: str | None) -> str:
    """Where an image lives in the content-addressed image store."""
    return f"{sha256[:2]}/{sha256}.{extension(fmt)}"


class ImageStore:
    """Content-addressed image files (`{sha256[:2]}/{sha256}.{ext}`) that every release's exports
    link from; writing the same content twice is a no-op, and a file appears whole or not at all."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def put(self, sha256: str, fmt: str | None, data: bytes) -> str:
        rel = store_relpath(sha256, fmt)
        target = self.root / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
            tmp.write_bytes(data)
            os.replace(tmp, target)
        return rel
