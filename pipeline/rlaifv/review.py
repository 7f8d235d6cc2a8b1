"""The review page's reader of RLAIF-V images (its DatasetSpec names it as `review_images`)."""

from __future__ import annotations

from typing import Iterable, Iterator

from pipeline.review.sources import from_image_store


def rlaifv_images(snapshot, tables: dict, layout, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """The files of the content-addressed image store the parser kept them in (the shards are
    not read again)."""
    if "rlaifv_images" in tables:
        yield from from_image_store(tables["rlaifv_images"], layout, keys)
