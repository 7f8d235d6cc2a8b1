"""Read images straight out of a zip: streaming, bounded, and refusing hostile entries.

Nothing is extracted to disk. Each entry is read on its own through the zip's central directory,
with a hard cap on the bytes it may inflate to, so memory stays bounded by one image.
"""

from __future__ import annotations

import io
import lzma
import stat
import struct
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pipeline.settings import ZipLimits

IMAGE_PREFIX = "images/"
UTF8_NAME_FLAG = 0x800  # general-purpose bit 11: the entry name is UTF-8


class EntryTooLarge(Exception):
    pass


# What zipfile (and the codecs under it) raise for a damaged archive or entry: a refusal, never a crash.
READ_ERRORS = (EntryTooLarge, zipfile.BadZipFile, zlib.error, lzma.LZMAError, struct.error, OSError, EOFError,
               NotImplementedError, ValueError, RuntimeError)


@dataclass
class ZipScan:
    """The usable entries of an archive by image name, and the entries (or archive) refused."""

    entries: dict[str, zipfile.ZipInfo] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (entry name, reason)
    archive_error: str | None = None


def entry_problem(info: zipfile.ZipInfo, limits: ZipLimits) -> str | None:
    """Why an entry must not be read, or None."""
    name = info.filename
    if "\0" in info.orig_filename:
        return "NUL byte in entry name"
    if not name.isascii() and not info.flag_bits & UTF8_NAME_FLAG:
        return "entry name is neither ASCII nor flagged as UTF-8: its encoding is unknown"
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "absolute path in archive"
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        return "path escapes the archive root ('..')"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "symlink entry"
    if info.flag_bits & 0x1:
        return "encrypted entry"
    if info.file_size > limits.max_entry_bytes:
        return f"uncompressed size {info.file_size} bytes exceeds the {limits.max_entry_bytes}-byte limit"
    if info.file_size > limits.ratio_floor_bytes and info.file_size > limits.max_entry_ratio * max(info.compress_size, 1):
        return f"compression ratio {info.file_size / max(info.compress_size, 1):.0f}:1 exceeds {limits.max_entry_ratio:.0f}:1"
    return None


def image_name(entry_name: str) -> str:
    """Entries sit under `images/` upstream; a flat layout is accepted too."""
    return entry_name[len(IMAGE_PREFIX):] if entry_name.startswith(IMAGE_PREFIX) else entry_name


def scan_zip(path: Path, limits: ZipLimits) -> ZipScan:
    """The usable entries of an archive (a zip, or a split zip named by its first part), the
    refused ones with reasons, or why the whole archive is unusable."""
    from pipeline.archives import ArchiveError, archive_size, open_zip

    scan = ZipScan()
    try:
        if str(path).startswith("s3://"):  # an archive in a bucket, read by range
            from pipeline.sources.objects import open_object_archive

            try:
                with open_object_archive(str(path)) as fh:
                    size = fh.seek(0, io.SEEK_END)  # the archive's bytes, however many parts
                    with zipfile.ZipFile(fh) as zf:
                        infos = zf.infolist()
            except (ArchiveError, *READ_ERRORS):
                raise
            except Exception as exc:  # the object store's own errors (not found, denied, ...)
                raise ArchiveError(f"{path}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
        else:
            size = None
            with open_zip(path) as zf:
                infos = zf.infolist()
    except ArchiveError as exc:
        scan.archive_error = str(exc)
        return scan
    except READ_ERRORS as exc:
        scan.archive_error = f"unreadable archive: {exc}"
        return scan
    if not any(not i.is_dir() for i in infos):
        scan.archive_error = "empty archive: no files in it"
        return scan
    if len(infos) > limits.max_entries:
        scan.archive_error = f"{len(infos)} entries exceed the {limits.max_entries}-entry limit"
        return scan
    total = sum(i.file_size for i in infos)
    if total > limits.max_total_bytes:
        scan.archive_error = f"total uncompressed size {total} bytes exceeds the {limits.max_total_bytes}-byte limit"
        return scan
    archive_bytes = max(size if size is not None else archive_size(path), 1)
    if total > limits.ratio_floor_bytes and total > limits.max_entry_ratio * archive_bytes:
        scan.archive_error = (
            f"archive inflates {total / archive_bytes:.0f}:1 (limit {limits.max_entry_ratio:.0f}:1): refusing a zip bomb"
        )
        return scan
    files = [i for i in infos if not i.is_dir()]
    # Two entries for one image are ambiguous (and zipfile's by-name lookup returns the last one):
    # every copy is refused.
    copies = Counter(image_name(i.filename) for i in files)
    for info in files:
        name = image_name(info.filename)
        problem = entry_problem(info, limits)
        if problem is None and copies[name] > 1:
            problem = f"{copies[name]} entries for image {name!r}: ambiguous, every copy refused"
        if problem:
            scan.refused.append((info.filename, problem))
            continue
        scan.entries[name] = info
    return scan


def read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limits: ZipLimits, chunk: int = 1 << 16) -> bytes:
    """Inflate one entry, never past the declared size or the limit (a lying header is caught)."""
    cap = min(info.file_size, limits.max_entry_bytes)
    parts, got = [], 0
    with zf.open(info) as fh:
        while block := fh.read(chunk):
            got += len(block)
            if got > cap:
                raise EntryTooLarge(f"entry inflates past {cap} bytes")
            parts.append(block)
    return b"".join(parts)


def is_within(root: Path, name: str) -> bool:
    """True when joining `name` under `root` stays inside it (used before any extraction)."""
    try:
        target = (root / PurePosixPath(name)).resolve()
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop: not a path to follow
        return False
    return target == root.resolve() or root.resolve() in target.parents
