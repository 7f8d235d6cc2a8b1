"""Folders DuckDB spills to, one per user of it, none left behind by a process that dies.

DuckDB removes its spill files only when its connection closes; a process killed while it spills
leaves them. Each folder here holds a lock file its owner keeps locked (flock) while it lives: the
kernel drops the lock when the owner dies, however it dies, so the next `SpillFolder` with the same
prefix in the same place removes the folders whose lock it can take. Generic: the warehouse's SQL
readers and the candidate search each name their own prefix.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

UNLOCKED_GRACE = 60.0  # seconds a folder without its lock file yet is left alone (its owner starting)


class SpillFolder:
    """A new folder `prefix`XXXX under `base`, locked by this process until `close()`, which removes
    it. Abandoned folders of the same prefix are removed first. `make_base`: create `base` when it
    is missing (else a missing `base` is an OSError, as is a folder that cannot be made). The lock
    file is locked under another name and then renamed `.lock`, so no other process can find a
    `.lock` that is not held yet."""

    def __init__(self, base: Path, prefix: str, make_base: bool = True):
        base = Path(base)
        if make_base:
            base.mkdir(parents=True, exist_ok=True)
        remove_abandoned(base, prefix)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        self._lock = None
        try:
            lock = open(self.path / ".lock.new", "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                os.rename(self.path / ".lock.new", self.path / ".lock")
            except BaseException:
                lock.close()
                raise
            self._lock = lock
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> "SpillFolder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def remove_abandoned(base: Path, prefix: str) -> None:
    """Remove the folders `prefix`* under `base` whose lock nobody holds (their owner is gone), and
    those without a lock file untouched for UNLOCKED_GRACE (an owner killed before it made one)."""
    for old in Path(base).glob(prefix + "*"):
        try:
            fd = os.open(old / ".lock", os.O_RDWR)  # never created here: only its owner makes it
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
        except FileNotFoundError:  # not locked yet: an owner starting now, unless it is old
            try:
                if time.time() - old.stat().st_mtime < UNLOCKED_GRACE:
                    continue
            except OSError:  # gone already
                continue
        except OSError:  # held: its owner is at work
            continue
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def spill_folder(base: Path, prefix: str) -> Iterator[Path]:
    """A SpillFolder's path for the block."""
    with SpillFolder(base, prefix) as folder:
        yield folder.path
