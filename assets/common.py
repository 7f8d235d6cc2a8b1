"""Small helpers the asset modules share: staging keys and metadata."""

import hashlib
import json
from typing import Optional

import dagster as dg
import pyarrow as pa

from pipeline.settings import TRANSFORM_VERSION
from pipeline.sources.base import RawSnapshot


def staging_key(snapshot: Optional[RawSnapshot], extra: Optional[dict] = None) -> str:
    """Staged outputs are keyed by what they were built from, so reruns overwrite like with like."""
    inputs = snapshot.checksums() if snapshot else None
    blob = json.dumps({"inputs": inputs, "code": TRANSFORM_VERSION, **(extra or {})}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def row_counts(tables: dict[str, pa.Table]) -> dict:
    return {f"rows_{name}": dg.MetadataValue.int(t.num_rows) for name, t in tables.items()}


def raw_metadata(snapshot: Optional[RawSnapshot]) -> dict:
    if snapshot is None:
        return {"present": False}
    md = {f"sha256 {f.role}": f.sha256 for f in snapshot.files}
    md["present"] = True
    md["source"] = snapshot.source
    md["root"] = dg.MetadataValue.path(snapshot.root)
    md["bytes"] = dg.MetadataValue.int(sum(f.size for f in snapshot.files))
    return md


def snapshot_of(raw: Optional[dict]) -> Optional[RawSnapshot]:
    return RawSnapshot.from_dict(raw) if raw else None
