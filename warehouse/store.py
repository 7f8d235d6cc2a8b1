"""The release store: immutable, content-addressed folders of Parquet plus a manifest.

    {root}/releases/{release_id}/{table}.parquet
    {root}/releases/{release_id}/manifest.json
    {root}/releases/CURRENT            the id of the current release (the commit point)
    {root}/releases/tags/{name}        a tag: the id of the release it names (one file per name)
    {root}/releases/PIN                set by a rollback: the release CURRENT stays on until unpinned
    {root}/releases/.writer.lock       held (flock) by the one process writing releases or the warehouse;
                                       it names its holder (pid, host, since when)

Publishing writes into a hidden temporary folder, fsyncs, renames it into place, then swaps
CURRENT with os.replace. A crash at any step leaves the previous release whole and current.
Pruning renames a release out of sight before deleting it, so no half-deleted release is ever
listed. Writers in different processes take turns on the lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.liveness import Busy, Holder, read_holder
from pipeline.checksums import sha256_file
from pipeline.stopping import stop_point
from pipeline.unwritable import notice

CURRENT = "CURRENT"
MANIFEST = "manifest.json"
TAGS = "tags"
PIN = "PIN"
CHANGES = "CHANGES.md"  # a release's changelog, beside its manifest
WRITER_LOCK = ".writer.lock"
TMP_PREFIX = ".tmp-"
LOCK_POLL_SECONDS = 0.25
LOCK_REPORT_SECONDS = 5.0

log = logging.getLogger(__name__)


class PublishError(OSError):
    """A release or the warehouse could not be written (no space, no permission, ...); the message
    names what and where, and the previous release is still whole and current."""


def write_failure(what: str, exc: BaseException) -> PublishError:
    """`what` failed because of `exc`, in one line: the reason and the path it happened on. A full
    disk or an unwritable folder is told to the run's watchers too (`pipeline.unwritable`)."""
    notice(exc)
    if isinstance(exc, OSError) and exc.strerror:
        files = [str(f) for f in (exc.filename, exc.filename2) if f]
        reason = exc.strerror + (f" ({' -> '.join(files)})" if files else "")
    else:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return PublishError(f"{what}: {reason}")


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
    changes: dict = field(default_factory=dict)  # its diff against the release it replaced (warehouse.diff.changelog)

    @property
    def row_counts(self) -> dict[str, int]:
        return {t: v["rows"] for t, v in self.tables.items()}

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2, sort_keys=True)

    @classmethod
    def load(cls, path: Path) -> "Manifest":
        return cls(**json.loads(path.read_text()))


def fsync(path: Path) -> None:
    """Flush a file's data, or a folder's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Every folder under root, deepest first, so each new entry is on disk before its parent's."""
    for folder, _, _ in sorted(os.walk(root), key=lambda w: w[0].count(os.sep), reverse=True):
        fsync(Path(folder))


def _write_durable(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


class _Hold:
    """This process's hold on one lock file: a thread lock in front of the flock, and its depth."""

    def __init__(self) -> None:
        self.guard = threading.RLock()
        self.fd: int | None = None
        self.depth = 0


_holds: dict[str, _Hold] = {}
_holds_guard = threading.Lock()


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str, on_wait: Callable[[str], None] | None = None, *, wait: bool = True,
                   label: str = "", every: float = LOCK_REPORT_SECONDS) -> Iterator[None]:
    """Exclusive across processes (flock; the kernel drops it when the holder dies, however it
    dies), re-entrant within one thread so publish, prune and the warehouse sync can nest under a
    caller's hold. The holder writes who it is into the file (`Holder`: pid, host, `label`, since
    when). A caller that finds it held sleeps, and says through `on_wait` what it waits for (`what`)
    and who holds it, at once and every `every` seconds; with `wait=False` it raises Busy with
    that line instead."""
    key = os.path.abspath(path)
    with _holds_guard:
        hold = _holds.setdefault(key, _Hold())
    with hold.guard:
        if hold.depth == 0:
            hold.fd = _acquire(Path(key), what, on_wait, wait, label, every)
        hold.depth += 1
        try:
            yield
        finally:
            hold.depth -= 1
            if hold.depth == 0 and hold.fd is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(hold.fd, 0)  # free: no holder to name
                os.close(hold.fd)
                hold.fd = None


def lock_holder(path: Path) -> Holder | None:
    """Who holds the lock file at `path` now, or None if nobody does."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_holder(path) or Holder(pid=0, host="?", boot_id="", started=None, since=0.0, label="unknown")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def waiting_line(what: str, path: Path) -> str:
    holder = read_holder(path)
    who = holder.describe() if holder else "another process"
    return f"waiting for {what}: held by {who} ({path})"


def _acquire(path: Path, what: str, on_wait: Callable[[str], None] | None, wait: bool, label: str,
             every: float) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise write_failure(f"cannot open the lock file {path}", exc) from exc
    try:
        said = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            line = waiting_line(what, path)
            if not wait:
                raise Busy(line.replace("waiting for", "busy:", 1))
            now = time.monotonic()
            if on_wait is not None and (said is None or now - said >= every):
                on_wait(line)
                said = now
            stop_point()
            time.sleep(LOCK_POLL_SECONDS)  # sleep, never spin: the holder may take minutes
        record = Holder.me(label).to_json().encode()
        with contextlib.suppress(OSError):  # who holds it is for people; the flock is the lock
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _place(root: Path, rel: str) -> Path:
    target = (root / rel).resolve()
    if root.resolve() not in target.parents:
        raise ValueError(f"release file {rel!r} would land outside the release folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


TAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RELEASE_ID = re.compile(r"[0-9a-f]{16}")


def check_tag_name(name: str) -> str:
    """A tag is a name people type: letters, digits, '.', '_', '-' (64 at most, not starting with a
    punctuation mark), and never something that reads as a release id."""
    if not TAG_NAME.fullmatch(name or "") or RELEASE_ID.fullmatch(name):
        raise ValueError(f"{name!r} is not a tag name: use letters, digits, '.', '_' and '-' (up to 64, starting with "
                         "a letter or digit), and not 16 hex digits (that reads as a release id)")
    return name


class TagExists(ValueError):
    """The name already tags a release (tags are unique; untag it first)."""


@dataclass(frozen=True)
class Pin:
    """A rollback's pin: CURRENT stays on `release` until unpinned; `since` is when (UTC, ISO)."""

    release: str
    since: str

    def line(self) -> str:
        return (f"pinned to release {self.release} by a rollback on {self.since}: runs write their releases but "
                f"do not make them current (`rewardhouse rollback --unpin` to resume)")


def retired_long_enough(current_since: float | None, grace: float, now: float | None = None) -> bool:
    """Whether every release out of CURRENT has been out of it for `grace` seconds: CURRENT last
    changed at `current_since` (epoch seconds; None: no release was ever current), and a release
    not current now left CURRENT at that change or before it."""
    return grace <= 0 or current_since is None or (now if now is not None else time.time()) - current_since >= grace


def prune_candidates(newest_first: list[str], keep: int, protected: set) -> list[str]:
    """All but the newest `keep` releases, except `protected` ones (the current, the pinned and the
    tagged); `keep` 0 keeps all."""
    if keep <= 0:
        return []
    return [rid for rid in newest_first[keep:] if rid not in protected]


class ReleaseStore:
    def __init__(self, releases_dir: Path):
        self.dir = releases_dir

    def path(self, release_id: str) -> Path:
        return self.dir / release_id

    def writer_lock(self, on_wait: Callable[[str], None] | None = None) -> contextlib.AbstractContextManager[None]:
        """Held around publish, prune and the warehouse sync: one writer at a time per data root.
        A writer that has to wait says so, and who holds it, through `on_wait` (default: a logged
        warning) every few seconds."""
        return exclusive_lock(self.dir / WRITER_LOCK, "the warehouse writer", on_wait or log.warning)

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

    def publish(self, release_id: str, tables: dict[str, pa.Table | Path], *, make_current: bool = True,
                **contents) -> tuple[Manifest, bool]:
        """Publish atomically; returns (manifest, published). An existing id is only made current.
        `contents` are `_write`'s keywords. With `make_current=False` the release is put in place
        but CURRENT is left for the caller to swap (see `warehouse.duck.publish_release`)."""
        with self.writer_lock():
            try:
                manifest, published = self._write(release_id, tables, **contents)
                if make_current:
                    self.set_current(release_id)
            except PublishError:
                raise
            except OSError as exc:
                previous = self.current()
                raise write_failure(
                    f"could not publish release {release_id} in {self.dir} (nothing published; "
                    f"{f'release {previous} stays current' if previous else 'no release is current'})", exc
                ) from exc
        return manifest, published

    def _write(
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
        changes: Callable[[Path, dict], tuple[dict, bytes]] | None = None,
    ) -> tuple[Manifest, bool]:
        """Write the release folder beside the others and rename it into place. `files` are copied in
        (relative path → staged file) and checksummed one by one; `bulk` are content-addressed folders
        (folder → {relative path → file}), hard-linked where possible and summarised by count;
        `rendered` files are produced from the release's final path (an export's meta that must point
        at the published folder). `changes(folder, tables)` is called once the tables are written
        (the folder and their manifest entries) and returns the changelog for the manifest and the
        text of its CHANGES.md."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.exists(release_id):
            return self.manifest(release_id), False
        final = self.path(release_id)
        if final.exists():  # a folder without a manifest is debris of an older crash, never a release
            self._discard(final)

        tmp = self.dir / f"{TMP_PREFIX}{release_id}-{uuid.uuid4().hex[:8]}"
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
                fsync(file)
                entries[name] = {
                    "rows": rows,
                    "file": file.name,
                    "sha256": sha256_file(file),
                    "bytes": file.stat().st_size,
                }
            extra = {}
            for rel, src in sorted((files or {}).items()):
                target = _place(tmp, rel)
                shutil.copyfile(src, target)
                fsync(target)
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
                        fsync(target)
                    total += target.stat().st_size
                bulk_summary[folder] = {"files": len(members), "bytes": total}
            log = {}
            if changes is not None:
                log, text = changes(tmp, entries)
                _write_durable(tmp / CHANGES, text)
                extra[CHANGES] = {"sha256": sha256_file(tmp / CHANGES), "bytes": len(text)}
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
                changes=log,
            )
            _write_durable(tmp / MANIFEST, manifest.to_json().encode())
            _fsync_tree(tmp)
            os.rename(tmp, final)
            fsync(self.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return manifest, True

    def _discard(self, folder: Path) -> None:
        """Rename out of sight (atomic), then delete; a crash in between leaves only a temporary."""
        doomed = self.dir / f"{TMP_PREFIX}discard-{folder.name}-{uuid.uuid4().hex[:8]}"
        os.rename(folder, doomed)
        fsync(self.dir)
        shutil.rmtree(doomed)

    def set_current(self, release_id: str) -> None:
        with self.writer_lock():
            tmp = self.dir / f".{CURRENT}.{uuid.uuid4().hex[:8]}"
            try:
                _write_durable(tmp, (release_id + "\n").encode())
                os.replace(tmp, self.dir / CURRENT)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            fsync(self.dir)

    def sweep_temporaries(self) -> list[str]:
        """Remove leftovers of publishes and prunes that crashed; they were never visible. Under the
        writer lock, so another process's publish in flight is never taken for a leftover."""
        if not self.dir.is_dir():
            return []
        removed = []
        with self.writer_lock():
            for child in sorted(self.dir.iterdir()):
                if child.name.startswith((TMP_PREFIX, f".{CURRENT}.", f".{PIN}.")):
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
                    removed.append(child.name)
            if (self.dir / TAGS).is_dir():  # a tag being written
                for child in sorted((self.dir / TAGS).glob(".*")):
                    child.unlink(missing_ok=True)
                    removed.append(f"{TAGS}/{child.name}")
        return removed

    def prune(self, keep: int, grace: float = 0.0) -> list[str]:
        """Delete all but the newest `keep` releases (never the current, pinned or a tagged one, and
        none while CURRENT changed less than `grace` seconds ago); 0 keeps all."""
        with self.writer_lock():
            doomed = self.prunable(keep, self.current(), grace)
            self.discard(doomed)
        return doomed

    def prunable(self, keep: int, current: str | None, grace: float = 0.0) -> list[str]:
        """What `prune(keep, grace)` deletes once `current` is CURRENT. Read before CURRENT is swapped
        to `current`: the release current until then has been out of it for no time at all, so a
        swap within `grace` defers all pruning to a later publish (a reader that read CURRENT just
        before may still be reading the release it named)."""
        if keep <= 0 or not retired_long_enough(self.current_since(), grace):
            return []
        pin = self.pin()
        # the release current until now too: it leaves CURRENT at this swap, not `grace` ago
        protected = {current, self.current(), *self.tags().values(), *([pin.release] if pin else [])}
        return prune_candidates([m.release_id for m in self.list()], keep, protected)

    def current_since(self) -> float | None:
        """When CURRENT last changed (epoch seconds), None when there is none."""
        try:
            return (self.dir / CURRENT).stat().st_mtime
        except OSError:
            return None

    # --- tags and the rollback pin ---------------------------------------------------------------
    def tags(self) -> dict[str, str]:
        """Tag name -> release id (a tag whose release is gone is left out)."""
        folder = self.dir / TAGS
        if not folder.is_dir():
            return {}
        out = {}
        for file in sorted(folder.iterdir()):
            if file.name.startswith("."):
                continue
            with contextlib.suppress(OSError):
                rid = file.read_text().strip()
                if rid and self.exists(rid):
                    out[file.name] = rid
        return out

    def tag(self, name: str, release_id: str) -> bool:
        """Name a release; False when `name` already names it. TagExists when it names another."""
        check_tag_name(name)
        with self.writer_lock():
            self.sweep_temporaries()  # a tag (or publish) killed half-way leaves its temporary
            if not self.exists(release_id):
                raise LookupError(f"no release {release_id!r} in {self.dir}")
            folder = self.dir / TAGS
            folder.mkdir(parents=True, exist_ok=True)
            final = folder / name
            tmp = folder / f".{name}.{uuid.uuid4().hex[:8]}"
            try:
                _write_durable(tmp, (release_id + "\n").encode())
                try:
                    os.link(tmp, final)  # create-only: a name is never moved by a second tag
                except FileExistsError:
                    held = final.read_text().strip()
                    if held == release_id:
                        return False
                    raise TagExists(f"tag {name!r} already names release {held}; `rewardhouse untag {name}` first") from None
            finally:
                tmp.unlink(missing_ok=True)
            fsync(folder)
        return True

    def untag(self, name: str) -> str:
        """Remove a tag; returns the release it named. KeyError when there is no such tag."""
        with self.writer_lock():
            file = self.dir / TAGS / name
            try:
                rid = file.read_text().strip()
                file.unlink()
            except FileNotFoundError:
                raise KeyError(f"no tag {name!r} (tags: {', '.join(sorted(self.tags())) or 'none'})") from None
            fsync(file.parent)
        return rid

    def resolve(self, ref: str) -> str:
        """A release id or a tag name -> the release id; LookupError naming what exists."""
        tags = self.tags()
        if ref in tags:
            return tags[ref]
        if self.exists(ref):
            return ref
        known = ", ".join(m.release_id for m in self.list()) or "none"
        raise LookupError(f"no release or tag {ref!r} in {self.dir} (releases: {known}; "
                          f"tags: {', '.join(sorted(tags)) or 'none'})")

    def pin(self) -> Pin | None:
        try:
            body = json.loads((self.dir / PIN).read_text())
            return Pin(body["release"], body["since"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def set_pin(self, release_id: str) -> Pin:
        pin = Pin(release_id, datetime.now(timezone.utc).isoformat(timespec="seconds"))
        with self.writer_lock():
            tmp = self.dir / f".{PIN}.{uuid.uuid4().hex[:8]}"
            try:
                _write_durable(tmp, json.dumps(pin.__dict__).encode())
                os.replace(tmp, self.dir / PIN)
            finally:
                tmp.unlink(missing_ok=True)
            fsync(self.dir)
        return pin

    def clear_pin(self) -> Pin | None:
        with self.writer_lock():
            pin = self.pin()
            (self.dir / PIN).unlink(missing_ok=True)
            fsync(self.dir)
        return pin

    def discard(self, release_ids: list[str]) -> None:
        with self.writer_lock():
            for rid in release_ids:
                self._discard(self.path(rid))
