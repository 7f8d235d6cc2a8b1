"""Releases on S3-compatible object storage, published atomically without rename.

A bucket has no rename, so a release is made visible by two conditional writes:

1. every object of the release is written first, under `releases/<id>/…` (immutable: the id is
   derived from the content, so a second writer of the same id writes the same bytes);
2. its manifest last, with a create-only put (`If-None-Match: *`): a release without a manifest
   does not exist for readers, and a manifest is never overwritten;
3. `CURRENT` replaced by compare-and-swap (`If-Match` on the ETag read before, or create-only when
   there is none yet). A publisher names the release it built on (`expect_current`): when CURRENT
   no longer names it, whether another publisher moved it long before or in the same instant, it
   gets `PublishConflict` naming the release that won.

The outcome of a publish is what CURRENT says after the swap: a swap whose answer was lost is
read back, and counts as done when CURRENT names the release.

A publish killed at any moment leaves the previous release current and complete; its objects
without a manifest are leftovers that `sweep` removes. A store that ignores conditional writes
cannot give these guarantees: `check_conditional_writes` finds out once and refuses it.

Configured by the standard AWS variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`); credentials are passed to the client and nowhere else.
Every failure of the client leaves this module as an `ObjectStoreError` of one line naming the
endpoint, the bucket and what to check (`pipeline.sources.objects.store_error`). Needs the
`scale` extra (obstore).
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from pipeline import env
from pipeline.sources.objects import ObjectStoreError, client_config, client_errors

CURRENT = "CURRENT"
MANIFEST = "manifest.json"
TAGS = "tags"
PIN = "PIN"
SUPPORTED = "AWS S3, Cloudflare R2, MinIO, Ceph RGW"
UPLOAD_THREADS = 16
# Objects of a release without a manifest are a killed publish's leftovers only once they are this
# old: younger ones may belong to a publish in flight on another machine.
LEFTOVER_GRACE_SECONDS = 3600.0


class UnsupportedStore(ObjectStoreError):
    """The store accepts conditional writes but does not honour them."""


class PublishConflict(ObjectStoreError):
    """Another publisher changed CURRENT (or wrote the manifest) first."""


class PublishOutcomeUnknown(ObjectStoreError):
    """The swap of CURRENT got no answer and CURRENT could not be read back."""


@dataclass(frozen=True)
class Root:
    """`s3://bucket/prefix`: where a data root lives in a bucket."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> "Root":
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ObjectStoreError(f"{url!r} is not an object-store root; expected s3://bucket/prefix")
        return cls(parsed.netloc, parsed.path.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p and p.strip("/"))

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")


def open_store(root: Root):
    """An obstore S3 client for `root`'s bucket, configured from the AWS environment."""
    from obstore.store import S3Store

    client = client_config()
    # Keys come from the AWS_* environment, which obstore reads itself; they are never copied here.
    return S3Store(root.bucket, config={"conditional_put": "etag", **client["config"]},
                   client_options=client["client_options"])


def polars_options() -> dict:
    """The same endpoint and region for polars' own S3 reader (keys: from the environment, read by it)."""
    endpoint = env.aws_endpoint_url()
    options = {"aws_endpoint_url": endpoint, "aws_region": env.aws_region()}
    if endpoint and endpoint.startswith("http://"):
        options["aws_allow_http"] = "true"
    return {k: v for k, v in options.items() if v}


class ObjectReleaseStore:
    """The release store of a data root in a bucket (see the module docstring)."""

    def __init__(self, root: Root, store=None):
        self.root = root
        with client_errors(str(root), root.bucket, "cannot set up the S3 client for"):
            self.store = store if store is not None else open_store(root)
        self._checked = False

    # --- primitives --------------------------------------------------------------------------------
    def _failing(self, doing: str):
        """A failure of the client in the block: one line naming the endpoint and the bucket."""
        return client_errors(str(self.root), self.root.bucket, doing)

    def _get(self, key: str) -> tuple[bytes, str] | None:
        import obstore
        from obstore.exceptions import NotFoundError

        with self._failing("cannot read"):
            try:
                result = obstore.get(self.store, key)
            except (NotFoundError, FileNotFoundError) as exc:
                if "NoSuchBucket" in str(exc):  # not an absent object: the whole root is missing
                    raise
                return None
            return bytes(result.bytes()), result.meta["e_tag"]

    def _put(self, key: str, data: bytes, mode=None) -> str:
        import obstore

        with self._failing("cannot write to"):
            return obstore.put(self.store, key, data, mode=mode)["e_tag"]

    def _create(self, key: str, data: bytes) -> str | None:
        """Create-only put: the new ETag, or None when the key exists."""
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            return self._put(key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return None

    def _swap(self, key: str, data: bytes, etag: str) -> str | None:
        """Put only if the object still has `etag`: the new ETag, or None when it changed."""
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            return self._put(key, data, mode={"e_tag": etag})
        except (AlreadyExistsError, PreconditionError):
            return None

    def _keys(self, prefix: str) -> list[str]:
        return [meta["path"] for meta in self._metas(prefix)]

    def _metas(self, prefix: str) -> list[dict]:
        import obstore

        with self._failing("cannot list"):
            return [meta for batch in obstore.list(self.store, prefix=prefix + "/") for meta in batch]

    def upload(self, files: dict[str, Path], prefix: str) -> int:
        """Put local files under `prefix` (relative key → file), streamed and several at a time;
        returns the bytes written."""
        import obstore

        def put(item: tuple[str, Path]) -> int:
            rel, path = item
            obstore.put(self.store, self.root.key(prefix, rel), Path(path))
            return Path(path).stat().st_size

        with self._failing("cannot write to"), ThreadPoolExecutor(UPLOAD_THREADS) as pool:
            return sum(pool.map(put, sorted(files.items())))

    def mirror(self, folder: Path, prefix: str) -> int:
        """Copy a local folder to `prefix`, skipping objects already there with the same size
        (staged work and validation results are written once under unique names); returns the
        number of files copied."""
        if not folder.is_dir():
            return 0
        there = {m["path"]: m["size"] for m in self._metas(self.root.key(prefix))}
        todo = {}
        for path in folder.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                rel = path.relative_to(folder).as_posix()
                if there.get(self.root.key(prefix, rel)) != path.stat().st_size:
                    todo[rel] = path
        self.upload(todo, prefix)
        return len(todo)

    def download(self, key: str, target: Path) -> Path:
        """One object to a local file, written beside and renamed into place."""
        import obstore

        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "wb") as out, self._failing(f"cannot read {key} from"):
                for chunk in obstore.get(self.store, self.root.key(key)):
                    out.write(chunk)
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
        return target

    # --- the store's promise -----------------------------------------------------------------------
    def check_conditional_writes(self) -> None:
        """Refuse a store that ignores If-None-Match / If-Match (checked once per store object)."""
        if self._checked:
            return
        probe = self.root.key(".rewardhouse", f"probe-{uuid.uuid4().hex}")
        try:
            first = self._create(probe, b"1")
            second = self._create(probe, b"2")
            stale = self._swap(probe, b"3", '"0000000000000000"') if first else None
        finally:
            self._delete([probe])
        if first is None or second is not None or stale is not None:
            raise UnsupportedStore(
                f"object store at {self.root} does not honour conditional writes (a create-only put of an "
                f"existing object or a put with a stale If-Match succeeded): releases cannot be published "
                f"atomically there; use a store that supports them ({SUPPORTED})")
        self._checked = True

    # --- releases ------------------------------------------------------------------------------------
    def current(self) -> str | None:
        got = self._get(self.root.key("releases", CURRENT))
        return got[0].decode().strip() or None if got else None

    def manifest(self, release_id: str) -> dict | None:
        got = self._get(self.root.key("releases", release_id, MANIFEST))
        return json.loads(got[0]) if got else None

    def releases(self) -> list[str]:
        """Published releases (those with a manifest), by id."""
        suffix = "/" + MANIFEST
        return sorted(k.split("/")[-2] for k in self._keys(self.root.key("releases")) if k.endswith(suffix))

    def current_and_releases(self) -> tuple[str | None, list[str]]:
        """CURRENT, then the published releases, in that order: a manifest is written before CURRENT
        names its release, so a listing taken after reading CURRENT holds that release, even when a
        publish moves CURRENT in between. A listing that still lacks it (a store whose listings lag)
        is read once more with CURRENT; then ObjectStoreError."""
        for _ in range(2):
            current = self.current()
            ids = self.releases()
            if current is None or current in ids:
                return current, ids
        raise ObjectStoreError(f"{self.root}: CURRENT names release {current}, which has no manifest there "
                               f"(releases: {', '.join(ids) or 'none'}); try again, and if it stays so, check "
                               f"{self.root.key('releases', CURRENT)}")

    def publish(self, release_id: str, files: dict[str, Path], manifest: dict, *, expect_current: str | None = ...,
                make_current: bool = True) -> bool:
        """Write the release's objects, then its manifest (create-only), then move CURRENT to it by
        compare-and-swap (with `make_current` False, CURRENT is left alone and False returned). `expect_current` is the release the caller built on (None: the bucket had
        none; default: whatever is current when the publish starts); when CURRENT no longer names it,
        PublishConflict. Returns False when the release is already current (nothing to do, whatever
        it was built on). The outcome is what CURRENT says after the swap (`_settle`)."""
        self.check_conditional_writes()
        current_key = self.root.key("releases", CURRENT)
        before = self._get(current_key)
        seen = before[0].decode().strip() if before else None
        if seen == release_id:
            return False
        built_on = seen if expect_current is ... else expect_current
        if seen != built_on:  # another publisher moved it since the run read it: nothing is uploaded
            raise PublishConflict(self._moved(release_id, seen, built_on))
        self.upload(files, f"releases/{release_id}")
        body = json.dumps({**manifest, "release_id": release_id}, indent=2, sort_keys=True).encode()
        if self._create(self.root.key("releases", release_id, MANIFEST), body) is None:
            existing = self.manifest(release_id) or {}
            if existing.get("files_sha256") != manifest.get("files_sha256"):
                raise PublishConflict(f"release {release_id} already has a different manifest in {self.root}")
        if not make_current:  # written and readable by its id; CURRENT stays (a rollback's pin)
            return False
        try:
            swapped = (self._create(current_key, release_id.encode()) if before is None
                       else self._swap(current_key, release_id.encode(), before[1]))
        except ObjectStoreError as exc:
            return self._settle(release_id, built_on, exc)
        return True if swapped is not None else self._settle(release_id, built_on, None)

    def _settle(self, release_id: str, built_on: str | None, failure: ObjectStoreError | None) -> bool:
        """A swap that was refused (`failure` None) or got no answer: CURRENT decides. The store may
        have applied a swap whose answer was lost (and the client's retry of it then refused as
        stale), so CURRENT naming this release means it was published."""
        try:
            now = self.current()
        except ObjectStoreError as exc:
            raise PublishOutcomeUnknown(
                f"release {release_id}: whether it was made current is unknown (the swap of CURRENT in {self.root} got "
                f"no clear answer, and reading CURRENT back failed: {exc}); check with `rewardhouse releases`") from None
        if now == release_id:
            return True
        if failure is not None and now == built_on:  # the swap did not happen: a failed publish, not a lost race
            raise failure
        raise PublishConflict(self._moved(release_id, now, built_on))

    def _moved(self, release_id: str, now: str | None, built_on: str | None) -> str:
        return (f"release {release_id} not published: {self.root} moved to {now or 'no release'} since this run "
                f"read {built_on or 'no release'}; run again on the new current")

    # --- tags, the rollback pin, rollback and retention ----------------------------------------------
    def current_since(self) -> float | None:
        """When CURRENT last changed (epoch seconds), None when there is none."""
        import obstore
        from obstore.exceptions import NotFoundError

        with self._failing("cannot read"):
            try:
                return obstore.head(self.store, self.root.key("releases", CURRENT))["last_modified"].timestamp()
            except (NotFoundError, FileNotFoundError):
                return None

    def tags(self) -> dict[str, str]:
        """Tag name -> release id, one object per tag under releases/tags/."""
        out = {}
        for key in self._keys(self.root.key("releases", TAGS)):
            got = self._get(key)
            if got and got[0].strip():
                out[key.rsplit("/", 1)[-1]] = got[0].decode().strip()
        return dict(sorted(out.items()))

    def tag(self, name: str, release_id: str) -> bool:
        """Name a release by a create-only put (two taggers of one name: one wins); False when the
        name already names it; TagExists when it names another."""
        from warehouse.store import TagExists, check_tag_name

        check_tag_name(name)
        if self.manifest(release_id) is None:
            raise LookupError(f"no release {release_id!r} in {self.root}")
        self.check_conditional_writes()
        key = self.root.key("releases", TAGS, name)
        if self._create(key, release_id.encode()) is not None:
            return True
        held = (self._get(key) or (b"", ""))[0].decode().strip()
        if held == release_id:
            return False
        raise TagExists(f"tag {name!r} already names release {held} in {self.root}; `rewardhouse untag {name}` first")

    def untag(self, name: str) -> str:
        key = self.root.key("releases", TAGS, name)
        got = self._get(key)
        if got is None:
            raise KeyError(f"no tag {name!r} in {self.root} (tags: {', '.join(self.tags()) or 'none'})")
        self._delete([key])
        return got[0].decode().strip()

    def pin(self):
        from warehouse.store import Pin

        got = self._get(self.root.key("releases", PIN))
        try:
            body = json.loads(got[0]) if got else None
            return Pin(body["release"], body["since"]) if body else None
        except (ValueError, KeyError, TypeError):
            return None

    def set_pin(self, release_id: str):
        from datetime import datetime, timezone

        from warehouse.store import Pin

        pin = Pin(release_id, datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self._put(self.root.key("releases", PIN), json.dumps(pin.__dict__).encode())
        return pin

    def clear_pin(self):
        pin = self.pin()
        self._delete([self.root.key("releases", PIN)])
        return pin

    def swap_current(self, release_id: str) -> str | None:
        """Make `release_id` current by compare-and-swap on the CURRENT read here (create-only when
        there is none); returns the release it replaced. PublishConflict when another writer moved
        CURRENT in between (read back, as a publish does)."""
        self.check_conditional_writes()
        key = self.root.key("releases", CURRENT)
        before = self._get(key)
        seen = before[0].decode().strip() if before else None
        if seen == release_id:
            return seen
        try:
            swapped = self._create(key, release_id.encode()) if before is None else self._swap(key, release_id.encode(), before[1])
        except ObjectStoreError as exc:
            self._settle(release_id, seen, exc)
            return seen
        if swapped is None:
            self._settle(release_id, seen, None)
        return seen

    def prunable(self, keep: int, grace: float, current: str | None = None) -> list[str]:
        """What `prune` deletes: all but the newest `keep` releases (by manifest time), never the
        current (`current`, else CURRENT read here), the pinned or a tagged one, and nothing while
        CURRENT changed less than `grace` seconds ago (a reader that read CURRENT just before may
        still read the release it named). Read it before a publish swaps CURRENT."""
        from warehouse.store import prune_candidates, retired_long_enough

        if keep <= 0 or not retired_long_enough(self.current_since(), grace):
            return []
        now_current, ids = self.current_and_releases()
        bodies = [(b.get("created_at", ""), rid) for rid in ids if (b := self.manifest(rid))]
        newest = [rid for _, rid in sorted(bodies, reverse=True)]
        if current is not None:  # the release about to be published counts as the newest
            newest = [current] + [rid for rid in newest if rid != current]
        pin = self.pin()
        protected = {current or now_current, now_current, *self.tags().values(), *([pin.release] if pin else [])}
        return prune_candidates(newest, keep, protected)

    def discard(self, release_ids: list[str]) -> list[str]:
        """Delete releases: each one's manifest first (it stops existing for readers at once; the
        objects left are a killed publish's leftovers to `sweep`), then CURRENT, the pin and the tags
        are read again, and a release one of them names after all (a rollback that raced the prune)
        gets its manifest back, then the rest of its objects go. Returns the ids deleted."""
        gone = []
        for rid in release_ids:
            key = self.root.key("releases", rid, MANIFEST)
            got = self._get(key)
            if got is None:
                continue
            self._delete([key])
            pin = self.pin()
            if rid in {self.current(), *self.tags().values(), *([pin.release] if pin else [])}:
                self._create(key, got[0])
                continue
            self._delete(self._keys(self.root.key("releases", rid)))
            gone.append(rid)
        return gone

    def sweep(self, min_age: float = LEFTOVER_GRACE_SECONDS) -> list[str]:
        """Remove the objects of releases that never got a manifest (killed publishes), except the
        current one and those written in the last `min_age` seconds (a publish in flight
        elsewhere); returns their ids."""
        metas = self._metas(self.root.key("releases"))
        published = set(self.releases())
        current = self.current()
        base = len(self.root.key("releases").split("/"))
        partial: dict[str, list[dict]] = {}
        for meta in metas:
            parts = meta["path"].split("/")
            if len(parts) > base + 1 and parts[base] != TAGS:
                partial.setdefault(parts[base], []).append(meta)
        now = time.time()
        swept = [rid for rid, objs in partial.items() if rid not in published and rid != current
                 and all(now - o["last_modified"].timestamp() >= min_age for o in objs)]
        self._delete([o["path"] for rid in swept for o in partial[rid]])
        return sorted(swept)

    def _delete(self, keys: list[str]) -> None:
        import obstore

        with self._failing("cannot delete from"):
            for start in range(0, len(keys), 1000):
                obstore.delete(self.store, keys[start:start + 1000])
