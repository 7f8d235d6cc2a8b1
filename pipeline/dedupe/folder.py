"""`rewardhouse dedupe DIR`: the dedupe engine on any folder of images."""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

from pipeline.dedupe.clusters import canonical_table
from pipeline.dedupe.decisions import cluster_hashes
from pipeline.dedupe.hashing import hash_files

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp"}
CSV_HEADER = ("path", "cluster_id", "is_canonical", "distance")


@dataclass
class FolderDedupe:
    rows: list[tuple[str, str, bool, int]] = field(default_factory=list)  # sorted by path
    errors: list[tuple[str, str]] = field(default_factory=list)

    @property
    def clusters(self) -> int:
        return len({r[1] for r in self.rows})

    @property
    def duplicates(self) -> int:
        return sum(1 for r in self.rows if not r[2])

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(CSV_HEADER)
        writer.writerows((p, c, "true" if canon else "false", d) for p, c, canon, d in self.rows)
        return buf.getvalue()


def image_files(root: Path) -> list[Path]:
    """Every image under root, recursively, by suffix (case-insensitive), in a stable order."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if Path(name).suffix.lower() in IMAGE_SUFFIXES:
                found.append(Path(dirpath) / name)
    return found


def dedupe_folder(
    root: Path, max_distance: int, workers: int | None = None, progress: Callable[[int, int, float], None] | None = None
) -> FolderDedupe:
    files = image_files(root)
    results = hash_files([(p.relative_to(root).as_posix(), p) for p in files], workers=workers, progress=progress)
    out = FolderDedupe(errors=[(r.key, r.error) for r in results if r.error])
    ok = [r for r in results if not r.error]
    if not ok:
        return out
    n = len(ok)
    hashes = np.array([r.phash for r in ok], dtype=np.int64)
    labels = cluster_hashes(hashes, max_distance)[0]
    members = pa.table(
        {
            "node": pa.array(np.arange(n, dtype=np.int64)),
            "cluster": pa.array(labels.astype(np.int64)),
            "dataset": pa.array(["folder"] * n),
            "image_key": pa.array([r.key for r in ok]),
            "sha256": pa.array([r.sha256 for r in ok]),
            "width": pa.array([r.width for r in ok], pa.int32()),
            "height": pa.array([r.height for r in ok], pa.int32()),
            "bytes": pa.array([(root / r.key).stat().st_size for r in ok], pa.int64()),
            "hash": pa.array(hashes),
        }
    )
    table = canonical_table(members)
    out.rows = sorted(
        zip(
            table["image_key"].to_pylist(),
            table["cluster_id"].to_pylist(),
            table["is_canonical"].to_pylist(),
            table["distance_to_canonical"].to_pylist(),
        )
    )
    return out
