"""Quarantine rows: every rejected record, archive entry or image, with the stage that refused it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

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
# unreadable annotation file or shard, a shard whose schema drifted, a file with no records or with
# every record refused): it blocks the release unless a setting lets it publish.
FILE_STAGE = "file"


@dataclass(frozen=True)
class Rejection:
    dataset: str
    stage: str
    record_key: str
    reason: str


def whole_file_faults(dataset: str, counts: Iterable[tuple[str, int, int]], noun: str = "rows") -> list[Rejection]:
    """Stage-`file` rows for files that were read but gave nothing. `counts` holds, per file read
    whole, (name, records it held, records that survived parsing and the record contract). A file
    with no records, or with every record refused, would publish an empty or shrunken table that
    looks complete, so it is refused whole (and blocks) like an unreadable one; a dataset whose
    records were all refused has every one of its files here."""
    out = []
    for name, records, kept in counts:
        if records == 0:
            out.append(Rejection(dataset, FILE_STAGE, name, f"holds no {noun}: nothing to publish"))
        elif kept == 0:
            out.append(Rejection(dataset, FILE_STAGE, name,
                                 f"nothing usable: all of its {noun} ({records}) were refused, each with its own quarantine row"))
    return out


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
