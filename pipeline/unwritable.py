"""A data root that cannot be written: a full disk, a quota, a read-only file system.

Such a failure can surface anywhere in a run and in many shapes: an OSError with its errno (and
often the file), pyarrow's and DuckDB's errors that carry the errno only in their text, and SQLite
(Dagster's run storage), which says "database or disk is full" or "disk I/O error" and never which
file. `find` recognises all of them in an exception's chain, `find_in_text` in the messages Dagster
keeps of a failed step, and both say what is known of where it happened.

Where our code writes (a publish, a staged table) it also calls `notice`, which tells whoever is
`watching` at once: on its way up, the failure may never reach the run's event log (SQLite is on
the same full disk), and the command running the run wants the path, and to free its reserve.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

# A permission error is not among them: it is reported where it happens, naming the file.
ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
# Their C library wording, as it appears inside other libraries' messages (pyarrow, DuckDB).
_WORDS = {os.strerror(code).lower(): code for code in ERRNOS}
# SQLite's own words for the same conditions (it never names the file).
_SQLITE = {
    "database or disk is full": "No space left on device (SQLite: database or disk is full)",
    "disk i/o error": "Disk I/O error (SQLite: a full disk, or a failing one)",
    "attempt to write a readonly database": "Cannot write (SQLite: attempt to write a readonly database)",
}
_ERRNO_TEXT = re.compile(r"\[errno (\d+)\] ([^:\]\n]+?)(?:: '([^'\n]+)'(?: -> '([^'\n]+)')?)?(?=$|[\n.:;\]]| \()",
                         re.IGNORECASE)
# A path as messages quote it: "…", '…', or (…) as `warehouse.store.write_failure` writes it.
_TWO_PATHS = re.compile(r"\((/[^()\n]+?) -> (/[^()\n]+?)\)")
_QUOTED_PATH = re.compile(r"""["'(](/[^"'()\n]+?)(?:["')]| -> )""")


@dataclass(frozen=True)
class Unwritable:
    reason: str  # the system's words for it, e.g. "No space left on device"
    path: str | None  # the file or folder it happened on, when known
    database: bool = False  # said by SQLite: somewhere in the Dagster home, file unknown

    def where(self, data_root: str, dagster_home: str) -> str:
        """The path to name: the failing one, else the folder it must be in."""
        if self.path:
            return self.path
        return dagster_home if self.database else data_root


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def find(exc: BaseException) -> Unwritable | None:
    """Such a failure in `exc`'s chain (itself, then its causes): the first link that names its
    path, else the first one found (a wrapper's message may name the file its cause does not)."""
    hits = []
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in ERRNOS:
            # Of two paths (a copy, a rename, a link) the second is the one written to.
            hits.append(Unwritable(os.strerror(link.errno), _path(link.filename2 or link.filename)))
        elif (hit := find_in_text(str(link))) is not None:
            hits.append(hit)
    return next((h for h in hits if h.path), hits[0] if hits else None)


def find_in_text(text: str) -> Unwritable | None:
    """Such a failure in an error message (an exception kept as text by Dagster, a DuckDB or
    pyarrow error, SQLite's words)."""
    lowered = text.lower()
    for words, reason in _SQLITE.items():
        if words in lowered:
            return Unwritable(reason, None, database=True)
    for match in _ERRNO_TEXT.finditer(text):
        code = int(match.group(1))
        if code in ERRNOS:
            path = _path(match.group(4) or match.group(3)) or _quoted_path(text)
            return Unwritable(os.strerror(code), path)
    for words, code in _WORDS.items():
        if words in lowered:
            return Unwritable(os.strerror(code), _quoted_path(text))
    return None


def find_in_texts(texts: Iterable[str]) -> Unwritable | None:
    """The first of `texts` that holds such a failure, preferring one that names its path."""
    found = None
    for text in texts:
        hit = find_in_text(text)
        if hit is not None and (found is None or (hit.path and not found.path)):
            found = hit
    return found


def _path(name) -> str | None:
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    return str(name) if name else None


def _quoted_path(text: str) -> str | None:
    match = _TWO_PATHS.search(text) or _QUOTED_PATH.search(text)
    return match.groups()[-1] if match else None


def naming(exc: OSError, path) -> OSError:
    """`exc` with `path` as its file when it names none (a failed write() does not say what it
    was writing), so the one line reporting it can."""
    if exc.filename or exc.errno is None:
        return exc
    named = OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path))
    named.__cause__ = exc
    return named


_watchers: list[Callable[[Unwritable], None]] = []


@contextlib.contextmanager
def watching(callback: Callable[[Unwritable], None]) -> Iterator[None]:
    """Call `callback` with each such failure `notice` is told of while the block runs."""
    _watchers.append(callback)
    try:
        yield
    finally:
        _watchers.remove(callback)


def notice(exc: BaseException) -> None:
    """Tell the watchers of `exc` if it is such a failure (then it is raised as usual)."""
    problem = find(exc) if _watchers else None
    if problem is not None:
        for callback in list(_watchers):
            callback(problem)
