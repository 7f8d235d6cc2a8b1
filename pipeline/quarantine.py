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


@dataclass(frozen=True)
class Rejection:
    dataset: str
    stage: str
    record_key: str
    reason: str


def quarantine_table(rows: list[Rejection]) -> pa.Table:
    return pa.Table.from_pylist(
        [r.__dict__ for r in rows],
        schema=QUARANTINE_SCHEMA,
    )
