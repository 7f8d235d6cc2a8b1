"""The release store: immutable, content-addressed folders of Parquet plus a manifest.

    {root}/releases/{release_id}/{table}.parquet
    {root}/releases/{release_id}/manifest.json
    {root}/releases/CURRENT            the id of the current release (the commit point)

Publishing writes into a hidden temporary folder, fsyncs, renames it into place, then swaps
CURRENT with os.replace. A crash at any step leaves the previous release whole and current.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Callable
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.sources.base import sha256_file

CURRENT = "CURRENT"
MANIFEST = "manifest.json"


def release_id_for(input_checksums: dict, code_version: str, settings: dict) -> str:
    """Same inputs, code and settings → same id; so an unchanged re-run publishes nothing."""
    blob = json.dumps(
        {"inputs": input_checksums, "code": code_version, "settings": settings},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Manifest:
    release_id: str
    created_at: str
    code_version: str
    sources: dict
    settings: dict
    tables: dict  # table -> {"rows": int, "file": str, "sha256": str, "bytes": int}
    files: dict = field(default_factory=dict)  # other file -> {"sha256": str, "bytes": int}
    bulk: dict = field(default_factory=dict)  # content-addressed folder -> {"files": int, "bytes": int}
    summary: dict = field(default_factory=dict)  # what the release's decisions did, e.g. export removals

    @property
    def row_counts(self) -> dict[str, int]:
        return {t: v["rows"] for t, v in self.tables.items()}

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2, sort_keys=True)

    @classmethod
    def load(cls, path: Path) -> "Manifest":
        return cls(**json.loads(path.read_text()))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _place(root: Path, rel: str) -> Path:
    target = (root / rel).resolve()
    if root.resolve() not in target.parents:
        raise ValueError(f"release file {rel!r} would land outside the release folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


class ReleaseStore:
    def __init__(self, releases_dir: Path):
        self.dir = releases_dir

    def path(self, release_id: str) -> Path:
        return self.dir / release_id

    def exists(self, release_id: str) -> bool:
        return (self.path(release_id) / MANIFEST).is_file()

    def current(self) -> str | None:
        try:
            rid = (self.dir / CURRENT).read_text().strip()
        except OSError:
            return None
        return rid if rid and self.exists(rid) else None

    def manifest(self, release_id: str) -> Manifest:
        return Manifest.load(self.path(release_id) / MANIFEST)

    def list(self) -> list[Manifest]:
        """Complete releases, newest first. Half-written temporaries are invisible."""
        if not self.dir.is_dir():
            return []
        out = []
        for child in self.dir.iterdir():
            if child.name.startswith(".") or not (child / MANIFEST).is_file():
                continue
            try:
                out.append(Manifest.load(child / MANIFEST))
            except (OSError, ValueError, TypeError):
                continue
        return sorted(out, key=lambda m: (m.created_at, m.release_id), reverse=True)

    def publish(
        self,
        release_id: str,
        tables: dict[str, pa.Table | Path],
        *,
        code_version: str,
        sources: dict,
        settings: dict,
        files: dict[str, Path] | None = None,
        bulk: dict[str, dict[str, Path]] | None = None,
        rendered: dict[str, Callable[[Path], bytes]] | None = None,
        summary: dict | None = None,
    ) -> tuple[Manifest, bool]:
        """Publish atomically; returns (manifest, published). An existing id is only made current.

        `files` are copied in (relative path → staged file) and checksummed one by one; `bulk` are
        content-addressed folders (folder → {relative path → file}), hard-linked where possible and
        summarised by count; `rendered` files are produced from the release's final path (an
        export's meta that must point at the published folder)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.exists(release_id):
            self.set_current(release_id)
            return self.manifest(release_id), False

        tmp = self.dir / f".tmp-{release_id}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            entries = {}
            for name, table in sorted(tables.items()):
                file = tmp / f"{name}.parquet"
                if isinstance(table, Path):  # an already written Parquet file: copied, not re-encoded
                    shutil.copyfile(table, file)
                    rows = pq.ParquetFile(file).metadata.num_rows
                else:
                    pq.write_table(table, file, compression="zstd")
                    rows = table.num_rows
                with open(file, "rb+") as fh:
                    os.fsync(fh.fileno())
                entries[name] = {
                    "rows": rows,
                    "file": file.name,
                    "sha256": sha256_file(file),
                    "bytes": file.stat().st_size,
                }
            final = self.path(release_id)
            extra = {}
            for rel, src in sorted((files or {}).items()):
                target = _place(tmp, rel)
                shutil.copyfile(src, target)
                extra[rel] = {"sha256": sha256_file(target), "bytes": target.stat().st_size}
            for rel, render in sorted((rendered or {}).items()):
                target = _place(tmp, rel)
                _write_durable(target, render(final))
                extra[rel] = {"sha256": sha256_file(target), "bytes": target.stat().st_size}
            bulk_summary = {}
            for folder, members in sorted((bulk or {}).items()):
                total = 0
                for rel, src in members.items():
                    target = _place(tmp, f"{folder}/{rel}")
                    try:
                        os.link(src, target)  # content-addressed and immutable: sharing the inode is safe
                    except OSError:
                        shutil.copyfile(src, target)
                    total += target.stat().st_size
                bulk_summary[folder] = {"files": len(members), "bytes": total}
            manifest = Manifest(
                release_id=release_id,
                created_at=datetime.now(timezone.utc).isoformat(timespec="microseconds"),
                code_version=code_version,
                sources=sources,
                settings=settings,
                tables=entries,
                files=extra,
                bulk=bulk_summary,
                summary=summary or {},
            )
            _write_durable(tmp / MANIFEST, manifest.to_json().encode())
            _fsync_dir(tmp)
            os.rename(tmp, final)
            _fsync_dir(self.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.set_current(release_id)
        return manifest, True

    def set_current(self, release_id: str) -> None:
        tmp = self.dir / f".{CURRENT}.{uuid.uuid4().hex[:8]}"
        _write_durable(tmp, (release_id + "\n").encode())
        os.replace(tmp, self.dir / CURRENT)
        _fsync_dir(self.dir)

    def sweep_temporaries(self) -> list[str]:
        """Remove leftovers of publishes that crashed; they were never visible."""
        removed = []
        if self.dir.is_dir():
            for child in self.dir.iterdir():
                if child.name.startswith((".tmp-", f".{CURRENT}.")):
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
                    removed.append(child.name)
        return removed

    def prune(self, keep: int) -> list[str]:
        """Delete all but the newest `keep` releases (never the current one); 0 keeps all."""
        if keep <= 0:
            return []
        current = self.current()
        doomed = [m.release_id for m in self.list()[keep:] if m.release_id != current]
        for rid in doomed:
            shutil.rmtree(self.path(rid))
        return doomed
