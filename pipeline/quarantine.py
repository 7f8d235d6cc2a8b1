"""Quarantine rows: every rejected record, archive entry or image, with the stage that refused it."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

QUARANTINE_SCHEMA = pa.schema(
    [
        ("dataset", pa.string()),
        ("stage", pa.string()),
        ("record_key", pa.string()),
        ("reason", pa.string()),
    ]
)


# A whole upstream file that cannot be used (an archive refused as a zip bomb or not a zip, an
# unreadable annotation file or shard): it blocks the release unless a setting lets it publish.
FILE_STAGE = "file"


@dataclass(frozen=True)
class Rejection:
    dataset: str
    stage: str
    record_key: str
    reason: str


def utf8_text(text: str) -> str:
    """`text` as valid UTF-8: lone surrogates (a non-UTF-8 file name, a JSON escape such as
    "\\udc80") become visible backslash escapes instead of failing the Arrow write."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def quarantine_table(rows: list[Rejection]) -> pa.Table:
    """Keys and reasons quote hostile input, so they are made valid UTF-8 first."""
    return pa.Table.from_pylist(
        [{**r.__dict__, "record_key": utf8_text(r.record_key), "reason": utf8_text(r.reason)} for r in rows],
        schema=QUARANTINE_SCHEMA,
    )
