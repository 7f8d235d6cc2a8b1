"""Image facts from bytes: dimensions, format, and whether the file decodes at all."""

from __future__ import annotations

import io
import warnings

from PIL import Image

EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp", "TIFF": "tif"}


def inspect_image(data: bytes) -> tuple[int | None, int | None, str | None, str | None]:
    """(width, height, format, problem): decode fully, so a truncated file is caught, and treat
    Pillow's decompression-bomb warning as an error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                size, fmt = im.size, im.format
                im.load()
        return size[0], size[1], fmt, None
    except Exception as exc:  # Pillow raises many types for bad bytes; all mean "corrupt"
        return None, None, None, f"{type(exc).__name__}: {exc}"


def extension(fmt: str | None) -> str:
    return EXTENSIONS.get(fmt or "", "bin")
