"""The review page's reader of VL-RewardBench images (its DatasetSpec names it as `review_images`)."""

from __future__ import annotations

import hashlib
from typing import Iterable, Iterator

from pipeline.staging import streaming_parquet
from pipeline.vlrb.source import shards


def vlrb_images(snapshot, tables: dict, layout, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
    """Images embedded in the parquet rows (keyed by their sha256), streamed a batch at a time."""
    wanted = set(keys)
    for path in shards(snapshot):
        if not wanted:
            return
        pf = streaming_parquet(path)
        if "image" not in pf.schema_arrow.names:
            continue
        for batch in pf.iter_batches(batch_size=64, columns=["image"]):
            for image in batch.column(0).to_pylist():
                data = image.get("bytes") if isinstance(image, dict) else None
                if data is None:
                    continue
                key = f"sha256:{hashlib.sha256(data).hexdigest()}"
                if key in wanted:
                    wanted.discard(key)
                    yield key, data
