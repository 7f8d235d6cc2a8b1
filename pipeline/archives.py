"""Image archives as upstream publishes them: one zip, or one zip cut into byte parts by `split`
(`images.zip_aa`, `images.zip_ab`, …; OpenGVLab tells users to `cat images.zip_* > images.zip`).
Split parts are read in place as one archive through a virtual concatenated file: no
concatenated copy is ever written, and a part is opened only when a read reaches it.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path
from typing import BinaryIO

SPLIT = re.compile(r"^(?P<stem>.+\.zip)_(?P<part>[a-z]{2,3})$")


class ArchiveError(OSError):
    """The parts of a split archive are not all there (the message names what is missing)."""


def _next_suffix(suffix: str) -> str:
    letters = list(suffix)
    i = len(letters) - 1
    while i >= 0:
        if letters[i] != "z":
            letters[i] = chr(ord(letters[i]) + 1)
            return "".join(letters)
        letters[i] = "a"
        i -= 1
    return "a" + "".join(letters)


def split_part_names(name: str, siblings: list[str], where: str) -> list[str]:
    """The names of the parts that make up the archive `name`, among the file names `siblings` of
    its folder (`where` names that folder in messages): `name` itself, or for a split archive named
    by its first part (`images.zip_aa`) every part, in order. A gap in the sequence, or a name that
    is not the first part, is an ArchiveError. Used for files and for objects in a bucket alike."""
    match = SPLIT.match(name)
    if match is None:
        return [name]
    stem, first = match["stem"], match["part"]
    if first.strip("a"):
        raise ArchiveError(f"{where}/{name} is not the first part of a split archive; name {stem}_{'a' * len(first)}")
    found = sorted(n for n in siblings if n.startswith(stem + "_") and SPLIT.match(n) and len(n) == len(name))
    expected, parts = first, []
    for part in found:
        suffix = SPLIT.match(part)["part"]
        if suffix != expected:
            raise ArchiveError(f"split archive {where}/{stem}: part {stem}_{expected} is missing (found {part})")
        parts.append(part)
        expected = _next_suffix(expected)
    if not parts:
        raise ArchiveError(f"{where}/{name}: no such file")
    return parts


def split_parts(path: Path) -> list[Path]:
    """split_part_names for a file: the parts beside it, as paths."""
    if SPLIT.match(path.name) is None:
        return [path]
    siblings = [p.name for p in path.parent.glob(f"{SPLIT.match(path.name)['stem']}_*")]
    return [path.parent / n for n in split_part_names(path.name, siblings, str(path.parent))]


def is_split(path: Path) -> bool:
    return SPLIT.match(path.name) is not None


def archive_size(path: Path) -> int:
    return sum(p.stat().st_size for p in split_parts(path))


class RandomAccessFile(io.RawIOBase):
    """A read-only, seekable raw file of `size` bytes; subclasses implement `readinto` from `pos`."""

    size = 0
    pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos


class ConcatFile(RandomAccessFile):
    """Several files read as one, each part opened when a read first reaches it: local files, or
    any seekable readers `open_part(i)` gives (parts of `sizes` bytes)."""

    def __init__(self, parts: list[Path], sizes: list[int] | None = None, open_part=None):
        self.parts = parts
        self.sizes = sizes if sizes is not None else [p.stat().st_size for p in parts]
        self.starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.size = sum(self.sizes)
        self.pos = 0
        self.open_part = open_part or (lambda i: open(self.parts[i], "rb"))
        self.handles: dict[int, BinaryIO] = {}

    def _part(self, index: int) -> BinaryIO:
        if index not in self.handles:
            self.handles[index] = self.open_part(index)
        return self.handles[index]

    def readinto(self, buffer) -> int:
        view, done = memoryview(buffer), 0
        while done < len(view) and self.pos < self.size:
            index = next(i for i in range(len(self.sizes) - 1, -1, -1) if self.starts[i] <= self.pos)
            fh = self._part(index)
            fh.seek(self.pos - self.starts[index])
            got = fh.readinto(view[done:done + min(len(view) - done, self.starts[index] + self.sizes[index] - self.pos)])
            if not got:
                break
            done += got
            self.pos += got
        return done

    def close(self) -> None:
        for fh in self.handles.values():
            fh.close()
        self.handles.clear()
        super().close()


def open_archive(path: Path) -> BinaryIO:
    """A seekable binary file over the whole archive `path` names (see `split_parts`)."""
    parts = split_parts(path)
    if len(parts) == 1 and not is_split(path):
        return open(path, "rb")
    return io.BufferedReader(ConcatFile(parts), buffer_size=1 << 16)  # type: ignore[return-value]


class SplitZipFile(zipfile.ZipFile):
    """A zip read through `open_archive`; closing it closes the parts."""

    def __init__(self, path: Path):
        self._parts = open_archive(path)
        try:
            super().__init__(self._parts)
        except BaseException:
            self._parts.close()
            raise

    def close(self) -> None:
        try:
            super().close()
        finally:
            parts = getattr(self, "_parts", None)  # absent when opening the parts failed
            if parts is not None:
                parts.close()


def open_zip(path: Path) -> zipfile.ZipFile:
    """`zipfile.ZipFile` over an archive or a split archive named by its first part."""
    return SplitZipFile(path) if is_split(path) else zipfile.ZipFile(path)
