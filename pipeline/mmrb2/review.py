"""The review page's reader of MMRB2 images (its DatasetSpec names it as `review_images`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from pipeline.archives import open_zip
from pipeline.review.sources import lookup


def mmrb2_images(snapshot, tables: dict, layout, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """Entries of the image zip, read in place (never extracted)."""
    zip_path = snapshot.image_zip if snapshot else None
    if zip_path is None or "mmrb2_images" not in tables:
        return
    found = lookup(tables["mmrb2_images"], "image_name", keys, "zip_entry")
    with open_zip(Path(zip_path)) as zf:
        for key, entry in sorted(found, key=lambda r: r[1] or ""):
            if entry:
                yield key, zf.read(entry)
