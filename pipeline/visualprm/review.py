"""The review page's reader of VisualPRM images (its DatasetSpec names it as `review_images`)."""

from __future__ import annotations

from typing import Iterable, Iterator

from pipeline.review.sources import from_image_store


def visualprm_images(snapshot, tables: dict, layout, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """Files of the content-addressed image store the inventory kept them in."""
    if "prm_images" not in tables:
        return
    yield from from_image_store(tables["prm_images"], layout, keys)
