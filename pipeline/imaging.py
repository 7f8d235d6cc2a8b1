"""Image facts from bytes: dimensions, format, and whether the file decodes at all."""

from __future__ import annotations

import io
import warnings
from contextlib import contextmanager
from typing import Iterator

from PIL import Image, UnidentifiedImageError

from pipeline.settings import DEFAULT_MAX_IMAGE_PIXELS

EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tif"}
NOT_AN_IMAGE = "UnidentifiedImageError: not an image format Pillow reads"


@contextmanager
def open_image(data: bytes, max_pixels: int | None = None) -> Iterator[Image.Image]:
    """Image.open on bytes behind the decompression-bomb guard, which is never off.

    An image with more than `max_pixels` pixels (the `max_image_pixels` setting) raises
    DecompressionBombError naming the limit, from the header alone, before any pixel is decoded.
    None keeps Pillow's own Image.MAX_IMAGE_PIXELS, its warning made an error (and the default
    limit if someone set it to None). Pillow's hard error above twice its own limit stays on."""
    limit = max_pixels or Image.MAX_IMAGE_PIXELS or DEFAULT_MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        # With an explicit limit the check below decides, naming that limit; Pillow's warning names its own.
        warnings.simplefilter("error" if max_pixels is None else "ignore", Image.DecompressionBombWarning)
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
            if width * height > limit:
                raise Image.DecompressionBombError(
                    f"{width}x{height} image has {width * height} pixels, above the max_image_pixels limit of {limit}"
                )
            yield im


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
