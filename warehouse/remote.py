"""A data root in a bucket (`REWARDHOUSE_HOME=s3://bucket/prefix`): the glue between the local
build and the object store.

A run works in the root's local scratch folder exactly as on a local root, then `publish_remote`
puts the release in the bucket (objects, then the manifest create-only, then CURRENT by
compare-and-swap; see warehouse/objectstore.py) together with a DuckDB file of the release, and
copies the staged work and the quality results beside it. `hydrate` reads the bucket's CURRENT
once per run and brings that release into the scratch store, so the drift checks compare with what
the bucket serves; the publish then moves CURRENT only if it still names that release.
Readers (`rewardhouse sql`, `releases`, `warehouse.load`) need only the URL and credentials:
`connect_remote` attaches the release's DuckDB file read-only over a filesystem registered on the
connection, which fetches by range only the blocks a query reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import uuid
from typing import Callable

from pipeline.checksums import sha256_file
from pipeline.sources.objects import filesystem
from pipeline.settings import quiet_duckdb, Layout
from warehouse.objectstore import ObjectReleaseStore, ObjectStoreError, Root
from warehouse.store import MANIFEST, Manifest, ReleaseStore

DATABASE = "release.duckdb"
FS_PROTOCOL = "rewardhouse-s3"


def _store(remote: str) -> ObjectReleaseStore:
    return ObjectReleaseStore(Root.parse(remote))


def to_manifest(body: dict) -> Manifest:
    names = {f.name for f in dataclasses.fields(Manifest)}
    return Manifest(**{k: v for k, v in body.items() if k in names})


def content_digest(manifest: Manifest) -> str:
    """What the release holds, by checksum: equal for two publishers of the same release id."""
    from warehouse.store import CHANGES

    # the changelog depends on the release a publisher replaced, not on what the release holds
    blob = json.dumps({"tables": {t: e["sha256"] for t, e in manifest.tables.items()},
                       "files": {f: e["sha256"] for f, e in manifest.files.items() if f != CHANGES}, "bulk": manifest.bulk},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class RemotePublish:
    """What a publish to the bucket did: `published` False when the release already was current;
    `warning` when the release is current but the work kept beside it could not be copied."""

    published: bool
    warning: str | None = None
    pruned: tuple[str, ...] = ()
    held: object = None  # the bucket's rollback pin (warehouse.store.Pin) that kept CURRENT where it is


def publish_remote(layout: Layout, release_id: str, built_on: str | None,
                   say: Callable[[str], None] = print, keep: int = 0, grace: float = 0.0) -> RemotePublish:
    """Put the scratch store's release `release_id` in the bucket and make it current there, if
    CURRENT still names `built_on`, the release the run read when it started (None: the bucket had
    none). Then sweep old leftovers of killed publishes and copy the staged work and quality results:
    the release is current by then, so a failure there is a warning, not a failed publish.
    PublishConflict when another publisher moved CURRENT since the run read it;
    PublishOutcomeUnknown when the swap got no answer and CURRENT cannot be read back; any other
    failure of the store is an ObjectStoreError of one line. While the bucket's rollback pin names
    another release, the release is written (readable by its id) and CURRENT stays. Then all but
    the newest `keep` releases are pruned (ObjectReleaseStore.prunable, read before the swap)."""
    assert layout.remote is not None
    store = _store(layout.remote)
    pin = store.pin()
    held = pin if pin is not None and pin.release != release_id and store.manifest(pin.release) is not None else None
    doomed = [] if held else store.prunable(keep, grace, current=release_id)
    published = _publish_remote(layout, store, release_id, say, built_on, make_current=held is None)
    pruned = tuple(store.discard(doomed)) if doomed else ()
    if pruned:
        say(f"pruned from {layout.remote}: {', '.join(pruned)} (keep_releases {keep})")
    try:
        swept = store.sweep()
        if swept:
            say(f"swept leftovers of killed publishes from {layout.remote}: {', '.join(swept)}")
        copied = store.mirror(layout.staging, "staging") + store.mirror(layout.root / "quality", "quality")
    except (ObjectStoreError, OSError) as exc:
        return RemotePublish(published, f"release {release_id} is {'in' if held else 'current in'} {layout.remote}, "
                                        f"but the staged work and "
                                        f"quality results were not copied there ({exc}); the next run copies them",
                             pruned, held)
    say(f"staged work and quality results kept in {layout.remote} ({copied} new files)")
    return RemotePublish(published, None, pruned, held)


def _publish_remote(layout: Layout, store: ObjectReleaseStore, release_id: str, say: Callable[[str], None],
                    built_on: str | None, make_current: bool = True) -> bool:
    from warehouse.duck import write_release_database

    local = ReleaseStore(layout.releases)
    folder = local.path(release_id)
    manifest = local.manifest(release_id)
    work = layout.root / ".upload" / uuid.uuid4().hex[:8]
    work.mkdir(parents=True)
    try:
        database = write_release_database(folder, manifest, work / DATABASE)
        files = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST}
        files[DATABASE] = database
        body = {**manifest.__dict__, "files_sha256": content_digest(manifest),
                "database": {"file": DATABASE, "bytes": database.stat().st_size}}
        # Rendered files that name the release's folder (the InternVL meta) name its URL instead.
        url = f"{layout.remote}/releases/{release_id}"
        for rel in manifest.files:
            text = (folder / rel).read_text(errors="replace") if rel.endswith("_meta.json") else ""
            if str(folder) in text:
                moved = work / "rendered" / rel
                moved.parent.mkdir(parents=True, exist_ok=True)
                moved.write_text(text.replace(str(folder), url))
                files[rel] = moved
                body["files"] = {**body["files"], rel: {"sha256": sha256_file(moved), "bytes": moved.stat().st_size}}
        size = sum(p.stat().st_size for p in files.values())
        published = store.publish(release_id, files, body, expect_current=built_on, make_current=make_current)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    verb = "published to" if published else "already current in" if make_current else "written (not current) to"
    say(f"release {release_id} {verb} {layout.remote} ({len(files)} objects, {size / 1e6:.1f} MB)")
    return published


def hydrate(layout: Layout) -> str | None:
    """Read the bucket's CURRENT and make that release known to the scratch store (its tables and
    manifest, not its exported images), so checks that compare with the previous release see the
    one the bucket serves; returns its id (the release the run builds on, to be handed to
    `publish_remote`), or None when the bucket has none. Called once per run."""
    assert layout.remote is not None
    store = _store(layout.remote)
    rid = store.current()
    local = ReleaseStore(layout.releases)
    # the scratch store follows the bucket's rollback pin, so its own publish is held like the bucket's
    pin = store.pin()
    if local.pin() is not None:
        local.clear_pin()
    if rid is not None:
        _bring(layout, store, local, rid)
    if pin is not None and local.exists(pin.release):
        local.set_pin(pin.release)
    return rid


def _bring(layout: Layout, store: ObjectReleaseStore, local: ReleaseStore, rid: str) -> None:
    """Make the bucket's release `rid` the scratch store's current one, downloading its tables."""
    from warehouse.duck import publish_release, sync_warehouse

    if local.exists(rid):
        if local.current() != rid:
            local.set_current(rid)
            sync_warehouse(local, layout.warehouse)
        return
    body = store.manifest(rid)
    if body is None:
        raise ObjectStoreError(f"{layout.remote}: CURRENT names release {rid}, which has no manifest")
    manifest = to_manifest(body)
    work = layout.root / ".download" / uuid.uuid4().hex[:8]
    try:
        tables = {t: store.download(f"releases/{rid}/{e['file']}", work / e["file"]) for t, e in manifest.tables.items()}
        publish_release(local, layout.warehouse, rid, tables, code_version=manifest.code_version,
                        sources=manifest.sources, settings=manifest.settings, summary=manifest.summary)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def manifests(remote: str) -> tuple[list[Manifest], str | None]:
    """The bucket's releases, newest first, and the current one's id (read first: see
    `ObjectReleaseStore.current_and_releases`). ObjectStoreError of one line when the bucket
    cannot be read."""
    store = _store(remote)
    current, ids = store.current_and_releases()
    found = [to_manifest(body) for rid in ids if (body := store.manifest(rid))]
    return sorted(found, key=lambda m: (m.created_at, m.release_id), reverse=True), current


def sweep(remote: str, min_age: float) -> list[str]:
    return _store(remote).sweep(min_age)


class _BucketFS:
    """Built lazily: an fsspec filesystem (protocol `rewardhouse-s3`) that DuckDB can ATTACH a
    database through. DuckDB only hands `s3://` paths to its own httpfs extension, which cannot be
    installed offline; under its own protocol the same objects are read by obstore, by range."""

    cls = None

    @classmethod
    def make(cls):
        if cls.cls is None:
            import fsspec

            class BucketFS(fsspec.AbstractFileSystem):
                protocol = FS_PROTOCOL

                def __init__(self, **kwargs):
                    super().__init__(**kwargs)
                    self.inner = filesystem()

                def _open(self, path, mode="rb", **kwargs):
                    if mode != "rb":
                        raise PermissionError(f"{FS_PROTOCOL}:// is read-only")
                    return self.inner.open(self._strip_protocol(path), mode)

                def info(self, path, **kwargs):
                    return self.inner.info(self._strip_protocol(path))

                def ls(self, path, detail=True, **kwargs):
                    return self.inner.ls(self._strip_protocol(path), detail=detail)

                def modified(self, path):
                    return self.info(path)["last_modified"]  # obstore's key (read_parquet asks; ATTACH never did)

            cls.cls = BucketFS
        return cls.cls(skip_instance_cache=True)


def connect_remote(remote: str, release: str | None = None):
    """A read-only DuckDB session on a bucket's release (default: its current one): the release's
    DuckDB file attached read-only and made the default, `releases` listing the bucket's releases.
    Returns (connection, release id). LookupError when there is no such release; ObjectStoreError
    (one line) when the bucket cannot be read."""
    import duckdb

    root = Root.parse(remote)
    found, current = manifests(remote)
    rid = release or current
    if rid is None:
        raise LookupError(f"no current release under {remote}; run `rewardhouse run` with REWARDHOUSE_HOME={remote}")
    if rid not in {m.release_id for m in found}:
        raise LookupError(f"no release {rid!r} under {remote}; releases: {', '.join(m.release_id for m in found) or 'none'}")
    con = quiet_duckdb(duckdb.connect())
    con.register_filesystem(_BucketFS.make())
    url = f"{FS_PROTOCOL}://{root.bucket}/{root.key('releases', rid, DATABASE)}"
    try:
        con.execute(f"attach '{url.replace(chr(39), chr(39) * 2)}' as release (read_only)")
    except duckdb.Error as exc:
        con.close()
        raise ObjectStoreError(f"cannot open release {rid} in {remote} ({root.key('releases', rid, DATABASE)}): "
                               f"{(str(exc).strip().splitlines() or [''])[0][:300]}") from None
    con.execute("use release")
    con.execute("create temp table releases (release_id varchar, created_at timestamptz, is_current boolean, "
                "code_version varchar, row_counts json)")
    for m in found:
        con.execute("insert into temp.releases values (?, ?::timestamptz, ?, ?, ?::json)",
                    [m.release_id, m.created_at, m.release_id == current, m.code_version,
                     json.dumps(m.row_counts, sort_keys=True)])
    return con, rid
