"""The raw-source interface: every source leaves files in the upstream layout and says what it
left (a RawSnapshot of checksummed files by role). Each dataset's own layout is in its package
(pipeline/<dataset>/source.py)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.checksums import sha256_file
from pipeline.settings import MMRB2_TASKS



class SourceError(RuntimeError):
    """A source cannot deliver its files; the message says which file and what to do."""


@dataclass(frozen=True)
class RawFile:
    role: str  # "image_zip", "annotations:<task>", "new_task_release"
    path: str  # absolute path on disk
    sha256: str
    size: int
    origin: str  # where it came from: a URL, repo@revision/path, or a local path


@dataclass(frozen=True)
class RawSnapshot:
    source: str
    root: str
    files: tuple[RawFile, ...]
    revisions: dict = field(default_factory=dict)

    def path(self, role: str) -> Path | None:
        for f in self.files:
            if f.role == role:
                return Path(f.path)
        return None

    @property
    def image_zip(self) -> Path | None:
        return self.path("image_zip")

    def annotations(self) -> dict[str, Path]:
        return {t: p for t in MMRB2_TASKS if (p := self.path(f"annotations:{t}")) is not None}

    def checksums(self) -> dict[str, str]:
        return {f.role: f.sha256 for f in self.files}

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "root": self.root,
            "revisions": dict(self.revisions),
            "files": [asdict(f) for f in self.files],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "RawSnapshot":
        return cls(
            source=d["source"],
            root=d["root"],
            files=tuple(RawFile(**f) for f in d["files"]),
            revisions=dict(d.get("revisions", {})),
        )


class ChecksumCache:
    """Remembers sha256 by (path, size, mtime_ns) so a 2 GB zip is hashed once, not every run."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._entries = json.loads(path.read_text())
        except (OSError, ValueError):
            self._entries = {}

    def sha256(self, file: Path) -> str:
        st = file.stat()
        key = str(file.resolve())
        stamp = [st.st_size, st.st_mtime_ns]
        hit = self._entries.get(key)
        if hit and hit[:2] == stamp:
            return hit[2]
        digest = sha256_file(file)
        self._entries[key] = [*stamp, digest]
        return digest

    def remember(self, file: Path, digest: str) -> None:
        """Record a sha256 computed elsewhere (e.g. while verifying a download) for `file` as it is now."""
        st = file.stat()
        self._entries[str(file.resolve())] = [st.st_size, st.st_mtime_ns, digest]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._entries, indent=0, sort_keys=True))
        os.replace(tmp, self.path)


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write via a temporary file and os.replace; leave the file alone (and its mtime) if unchanged."""
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True
