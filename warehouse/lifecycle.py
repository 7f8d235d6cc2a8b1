"""The release lifecycle on any data root: tags, rollback (and its pin) and retention.

    rewardhouse tag NAME [RELEASE]     name a release (default: the current one); names are unique
    rewardhouse untag NAME
    rewardhouse rollback RELEASE       make an older whole release current again, and pin it
    rewardhouse rollback --unpin       let runs make their releases current again
    rewardhouse gc --dry-run           also lists the releases `keep_releases` would prune

A local root keeps them beside the releases (`releases/tags/NAME`, `releases/PIN`), written under
the writer lock like a publish; a bucket root in the bucket (`releases/tags/NAME` by create-only
put, `releases/PIN`, CURRENT by compare-and-swap). The rules (docs/releases.md):

- A tag names one release; a second tag of a name that names another release is refused. A tagged
  release is never pruned. A tag works wherever a release id does.
- A rollback checks the release against its manifest (every table and file present, with its
  checksum on a local root, its size in a bucket), writes the pin, points the warehouse at it and
  swaps CURRENT, in that order: killed at any step, CURRENT names a whole release (the old one or
  the new one), and running the rollback again finishes it.
- While pinned, a run writes its release (queryable by id) but leaves CURRENT, says so in its log
  and in `warehouse_release`'s metadata, and prunes nothing; `--unpin` ends that.
- Retention: all but the newest `keep_releases` are pruned after a publish, never the current,
  pinned or a tagged one, and only once CURRENT has not changed for `release_grace_minutes` (a
  reader that read CURRENT just before a publish may still be reading the release it named).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pipeline.checksums import sha256_file
from pipeline.settings import Layout
from warehouse.store import MANIFEST, Pin, ReleaseStore


class RollbackRefused(ValueError):
    """The release does not match its manifest (a file missing or changed): it is not made current."""


@dataclass(frozen=True)
class Rolled:
    release: str
    previous: str | None
    pin: Pin


def _bucket(layout: Layout):
    from warehouse.objectstore import ObjectReleaseStore, Root

    return ObjectReleaseStore(Root.parse(layout.remote))


def resolve(ref: str | None, layout: Layout) -> str:
    """A release id or tag name (None: the current release) -> a release id; LookupError otherwise."""
    if layout.remote:
        bucket = _bucket(layout)
        if ref is None:
            rid = bucket.current()
            if rid is None:
                raise LookupError(f"no current release under {layout.remote}")
            return rid
        tags = bucket.tags()
        if ref in tags:
            return tags[ref]
        if bucket.manifest(ref) is not None:
            return ref
        raise LookupError(f"no release or tag {ref!r} under {layout.remote} (tags: {', '.join(tags) or 'none'})")
    store = ReleaseStore(layout.releases)
    if ref is None:
        rid = store.current()
        if rid is None:
            raise LookupError(f"no current release under {layout.releases}; run `rewardhouse run` first")
        return rid
    return store.resolve(ref)


def tags(layout: Layout) -> dict[str, str]:
    return _bucket(layout).tags() if layout.remote else ReleaseStore(layout.releases).tags()


def pin(layout: Layout) -> Pin | None:
    return _bucket(layout).pin() if layout.remote else ReleaseStore(layout.releases).pin()


def tag(layout: Layout, name: str, ref: str | None = None) -> tuple[str, bool]:
    """Name the release `ref` (default: the current one); returns (release id, newly tagged)."""
    rid = resolve(ref, layout)
    store = _bucket(layout) if layout.remote else ReleaseStore(layout.releases)
    return rid, store.tag(name, rid)


def untag(layout: Layout, name: str) -> str:
    return (_bucket(layout) if layout.remote else ReleaseStore(layout.releases)).untag(name)


def verify_local(store: ReleaseStore, release_id: str) -> list[str]:
    """What in a local release does not match its manifest (empty: whole)."""
    folder = store.path(release_id)
    manifest = store.manifest(release_id)
    problems = []
    entries = [(e["file"], e) for e in manifest.tables.values()] + list(manifest.files.items())
    for rel, entry in entries:
        file = folder / rel
        if not file.is_file():
            problems.append(f"{rel} is missing")
        elif file.stat().st_size != entry["bytes"] or sha256_file(file) != entry["sha256"]:
            problems.append(f"{rel} differs from its manifest")
    for rel, summary in manifest.bulk.items():
        present = [p for p in (folder / rel).rglob("*") if p.is_file()] if (folder / rel).is_dir() else []
        if len(present) != summary["files"] or sum(p.stat().st_size for p in present) != summary["bytes"]:
            problems.append(f"{rel}/ holds {len(present)} files, its manifest says {summary['files']}")
    return problems


def verify_bucket(bucket, release_id: str) -> list[str]:
    """What in a bucket's release does not match its manifest: every object present with its size."""
    body = bucket.manifest(release_id)
    if body is None:
        return [f"{MANIFEST} is missing"]
    there = {m["path"]: m["size"] for m in bucket._metas(bucket.root.key("releases", release_id))}
    problems = []
    entries = [(e["file"], e) for e in body.get("tables", {}).values()] + list(body.get("files", {}).items())
    for rel, entry in entries:
        size = there.get(bucket.root.key("releases", release_id, rel))
        if size is None:
            problems.append(f"{rel} is missing")
        elif size != entry["bytes"]:
            problems.append(f"{rel} differs from its manifest ({size} bytes, not {entry['bytes']})")
    database = body.get("database")
    if database and bucket.root.key("releases", release_id, database["file"]) not in there:
        problems.append(f"{database['file']} is missing")
    return problems


def rollback(layout: Layout, ref: str, on_wait: Callable[[str], None] | None = None) -> Rolled:
    """Make the release `ref` current again and pin it (module docstring). RollbackRefused when it
    does not match its manifest; LookupError when there is no such release."""
    if layout.remote:
        return _rollback_bucket(layout, ref)
    from pipeline.stopping import critical_section
    from warehouse.duck import sync_warehouse

    store = ReleaseStore(layout.releases)
    with store.writer_lock(on_wait):
        store.sweep_temporaries()  # what a killed publish or rollback left
        rid = store.resolve(ref)
        problems = verify_local(store, rid)
        if problems:
            raise RollbackRefused(f"release {rid} is not whole, not rolled back to: {'; '.join(problems)}")
        with critical_section():
            previous = store.current()
            pinned = store.set_pin(rid)
            sync_warehouse(store, layout.warehouse, current=rid)
            store.set_current(rid)
    return Rolled(rid, previous, pinned)


def _rollback_bucket(layout: Layout, ref: str) -> Rolled:
    bucket = _bucket(layout)
    rid = resolve(ref, layout)
    problems = verify_bucket(bucket, rid)
    if problems:
        raise RollbackRefused(f"release {rid} in {layout.remote} is not whole, not rolled back to: {'; '.join(problems)}")
    pinned = bucket.set_pin(rid)
    previous = bucket.swap_current(rid)
    if bucket.manifest(rid) is None:  # a prune took it in the same instant: CURRENT goes back
        if previous is not None:
            bucket.swap_current(previous)
        bucket.clear_pin()
        raise RollbackRefused(f"release {rid} was pruned from {layout.remote} during the rollback; "
                              f"CURRENT is back on {previous or 'no release'}")
    return Rolled(rid, previous, pinned)


def unpin(layout: Layout, on_wait: Callable[[str], None] | None = None) -> Pin | None:
    """End a rollback's pin (CURRENT stays where it is); returns the pin that was set, if any."""
    if layout.remote:
        return _bucket(layout).clear_pin()
    store = ReleaseStore(layout.releases)
    with store.writer_lock(on_wait):
        return store.clear_pin()


def prunable(layout: Layout, keep: int, grace: float) -> list[str]:
    """What the next publish would prune now (for `gc --dry-run`)."""
    if layout.remote:
        return _bucket(layout).prunable(keep, grace)
    store = ReleaseStore(layout.releases)
    return store.prunable(keep, store.current(), grace)


def prune(layout: Layout, keep: int, grace: float, on_wait: Callable[[str], None] | None = None) -> list[str]:
    """Prune now, by the same rules as after a publish; returns the releases deleted."""
    if layout.remote:
        bucket = _bucket(layout)
        return bucket.discard(bucket.prunable(keep, grace))
    from warehouse.duck import sync_warehouse

    store = ReleaseStore(layout.releases)
    with store.writer_lock(on_wait):
        doomed = store.prunable(keep, store.current(), grace)
        if doomed:
            sync_warehouse(store, layout.warehouse, without=doomed)
            store.discard(doomed)
    return doomed
