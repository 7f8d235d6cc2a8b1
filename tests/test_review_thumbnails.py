"""Review-page thumbnails: bounded in pixels and bytes, made once per content, corrupt bytes None."""

from __future__ import annotations

import hashlib
import io

import pytest
from PIL import Image

from dedupe_images import encode, photo
from pipeline.review.thumbnails import MAX_BYTES, MAX_SIDE, ThumbnailStore, make_thumbnail

pytestmark = pytest.mark.fast


def big_photo(w: int, h: int, fmt: str, mode: str = "RGB") -> bytes:
    im = Image.open(io.BytesIO(encode(photo(7), "PNG"))).convert(mode).resize((w, h))
    buf = io.BytesIO()
    im.save(buf, fmt, **({"quality": 92} if fmt == "JPEG" else {}))
    return buf.getvalue()


@pytest.mark.parametrize("w,h,fmt,mode", [(1600, 1200, "JPEG", "RGB"), (768, 1024, "PNG", "RGBA"), (90, 40, "PNG", "P")])
def test_a_thumbnail_is_a_small_jpeg_within_the_bounds(w, h, fmt, mode):
    thumb = make_thumbnail(big_photo(w, h, fmt, mode))
    with Image.open(io.BytesIO(thumb)) as im:
        assert im.format == "JPEG" and max(im.size) == min(MAX_SIDE, max(w, h))
        assert abs(im.size[0] / im.size[1] - w / h) < 0.05  # the aspect ratio is kept
    assert len(thumb) <= MAX_BYTES


def test_the_store_reduces_one_content_once_and_refuses_non_images(tmp_path):
    data = big_photo(1024, 768, "JPEG")
    sha = hashlib.sha256(data).hexdigest()
    store = ThumbnailStore(tmp_path)
    calls = []
    load = lambda: calls.append(1) or data  # noqa: E731
    assert store.get(sha, load) == f"thumbs/{sha[:2]}/{sha}.jpg"
    assert store.get(sha, load) == f"thumbs/{sha[:2]}/{sha}.jpg" and calls == [1]
    assert store.get("0" * 64, lambda: b"not an image") is None and not store.path("0" * 64).exists()
