"""The `hf` source: download MMRB2 from upstream into the upstream layout.

- Images: the Hugging Face dataset `facebook/MMRB2_image` (one zip, `image.zip` or `images.zip`),
  found with `huggingface_hub` at a pinned commit and fetched with our own ranged download, so a
  killed download resumes on the next run; the Hub's size and sha256 ETag verify the result.
- Annotations: `facebookresearch/MMRB2` on GitHub at `MMRB2_ANNOTATION_COMMIT`, fetched with urllib
  from the raw-file host.

What was fetched is pinned in `{raw_root}/sources.lock.json`:

    {"facebook/MMRB2_image": {"revision": "<commit sha>", "file": "image.zip"},
     "facebookresearch/MMRB2": {"revision": "<commit>",
                                "files": {"t2i_response_only.json": {"sha256": "...", "size": 123},
                                          "new_task_release.json": {"absent": true}}}}

The image revision is resolved from `main` once and then reused, so a later upstream push never
changes the data silently; delete that entry (or pass `image_revision`) to move on deliberately.
Annotation files recorded there and still matching on disk are not downloaded again.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPException
from pathlib import Path
from typing import Callable

from pipeline.settings import (
    MMRB2_ANNOTATION_COMMIT,
    MMRB2_ANNOTATION_REPO,
    MMRB2_IMAGE_REPO,
    MMRB2_IMAGE_ZIP_NAMES,
    MMRB2_TASKS,
)
from pipeline.sources.base import (
    ANNOTATION_DIR,
    IMAGE_DIR,
    NEW_TASK_FILE,
    ChecksumCache,
    RawSnapshot,
    SourceError,
    snapshot_from_layout,
)

# Commit of facebook/MMRB2_image to download. None means "lock on first fetch": the first fetch
# resolves `main` to its commit sha and records it in sources.lock.json; later fetches reuse it.
MMRB2_IMAGE_REVISION: str | None = None

LOCK_FILE = "sources.lock.json"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"

# Downloads: attempts per file within one call, and the pause between them (seconds).
DOWNLOAD_ATTEMPTS = 3
RETRY_PAUSE = 0.5
HTTP_TIMEOUT = 60.0
_CHUNK = 1 << 16
_COMMIT_SHA = re.compile(r"[0-9a-f]{40}")

Log = Callable[[str], None]


def fetch_hf(
    raw_root: Path,
    cache: ChecksumCache,
    *,
    hf_endpoint: str | None = None,
    github_raw_base: str = "https://raw.githubusercontent.com",
    image_revision: str | None = None,
    token: str | None = None,
    log: Log = lambda s: None,
) -> RawSnapshot:
    """Download (or reuse) the MMRB2 image zip and annotation files under `raw_root`.

    `hf_endpoint` defaults to `HF_ENDPOINT`, then huggingface.co; `token` defaults to `HF_TOKEN`
    (as huggingface_hub reads it). Raises SourceError with what failed and what to do.
    """
    raw_root = Path(raw_root)
    raw_root.mkdir(parents=True, exist_ok=True)
    hf_endpoint = (hf_endpoint or os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None
    lock_path = raw_root / LOCK_FILE
    lock = _read_lock(lock_path)

    image_sha, zip_name = _fetch_image_zip(
        raw_root, lock, lock_path, cache, endpoint=hf_endpoint, token=token, image_revision=image_revision, log=log
    )
    annotation_origins = _fetch_annotations(raw_root, lock, lock_path, cache, github_raw_base.rstrip("/"), log)

    origins = {"image_zip": f"{MMRB2_IMAGE_REPO}@{image_sha}/{zip_name}", **annotation_origins}
    return snapshot_from_layout(
        raw_root,
        "hf",
        cache,
        origins=origins,
        revisions={MMRB2_IMAGE_REPO: image_sha, MMRB2_ANNOTATION_REPO: MMRB2_ANNOTATION_COMMIT},
    )


# --- lock file ---------------------------------------------------------------------------------


def _read_lock(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"hf source: cannot read the lock file {path} ({exc}); fix it, or delete it to re-pin "
            f"{MMRB2_IMAGE_REPO} on its current main and re-check the annotation files"
        ) from exc
    if not isinstance(data, dict):
        raise SourceError(f"hf source: lock file {path} does not hold a JSON object; fix or delete it")
    return data


def _write_lock(path: Path, lock: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


# --- images: Hugging Face ----------------------------------------------------------------------


def _fetch_image_zip(
    raw_root: Path,
    lock: dict,
    lock_path: Path,
    cache: ChecksumCache,
    *,
    endpoint: str | None,
    token: str | None,
    image_revision: str | None,
    log: Log,
) -> tuple[str, str]:
    """Pin the revision, pick the zip, download it; returns (commit sha, zip file name)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    shown_endpoint = endpoint or _default_endpoint()
    entry = dict(lock.get(MMRB2_IMAGE_REPO) or {})
    requested = image_revision or MMRB2_IMAGE_REVISION

    if requested:
        sha = requested if _COMMIT_SHA.fullmatch(requested) else _resolve_revision(api, requested, shown_endpoint)
        if entry.get("revision") not in (None, sha):
            log(f"hf: {MMRB2_IMAGE_REPO} pinned to {sha} (was locked at {entry['revision']})")
        if entry.get("revision") != sha:
            entry = {"revision": sha}
    elif entry.get("revision"):
        sha = entry["revision"]
        log(f"hf: {MMRB2_IMAGE_REPO} locked at {sha} ({lock_path})")
    else:
        sha = _resolve_revision(api, "main", shown_endpoint)
        entry = {"revision": sha}
        log(f"hf: {MMRB2_IMAGE_REPO} main is {sha}; locking it in {lock_path}")
        # Record the pin before downloading, so an interrupted first fetch cannot drift to a newer main.
        lock[MMRB2_IMAGE_REPO] = entry
        _write_lock(lock_path, lock)

    zip_name = entry.get("file")
    if zip_name not in MMRB2_IMAGE_ZIP_NAMES:
        try:
            files = api.list_repo_files(MMRB2_IMAGE_REPO, repo_type="dataset", revision=sha)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a SourceError with advice
            raise _hub_error("list the files of", f"{MMRB2_IMAGE_REPO}@{sha}", exc, shown_endpoint, lock_path) from exc
        zip_name = next((n for n in MMRB2_IMAGE_ZIP_NAMES if n in files), None)
        if zip_name is None:
            raise SourceError(
                f"hf source: dataset {MMRB2_IMAGE_REPO} at revision {sha} has no "
                f"{' or '.join(MMRB2_IMAGE_ZIP_NAMES)}; files seen: {sorted(files) or 'none'}. "
                f"Check the repo on {shown_endpoint}, pin a revision that has the zip (image_revision), "
                f"or download it by hand and use the local source"
            )
        entry["file"] = zip_name

    local_dir = raw_root / IMAGE_DIR
    local_dir.mkdir(parents=True, exist_ok=True)
    dest = local_dir / zip_name
    if _matches(dest, entry.get("zip"), cache):
        log(f"hf: {dest.name} at {sha} already complete ({entry['zip']['size']} bytes)")
    else:
        _download_zip(dest, sha, zip_name, endpoint=endpoint, token=token, shown_endpoint=shown_endpoint,
                      lock_path=lock_path, cache=cache, entry=entry, log=log)

    # A zip under the other accepted name would shadow or confuse the inventory: it is stale.
    for other in MMRB2_IMAGE_ZIP_NAMES:
        stale = local_dir / other
        if other != zip_name and stale.is_file():
            log(f"hf: removing stale {stale} (the pinned revision ships {zip_name})")
            stale.unlink()
    # An explicitly requested revision is locked only once it has delivered the zip.
    lock[MMRB2_IMAGE_REPO] = entry
    _write_lock(lock_path, lock)
    return sha, zip_name



def _download_zip(dest: Path, sha: str, zip_name: str, *, endpoint, token, shown_endpoint, lock_path, cache, entry, log) -> None:
    """Our own ranged download of the pinned file, so a killed 2 GB download resumes next run
    (huggingface_hub only resumes within one call). The Hub's metadata gives size and, for
    LFS files, the sha256 to verify against."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(MMRB2_IMAGE_REPO, zip_name, repo_type="dataset", revision=sha, endpoint=endpoint)
    what = f"{MMRB2_IMAGE_REPO}@{sha}/{zip_name}"
    try:
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
    except Exception as exc:  # noqa: BLE001
        raise _hub_error("read the metadata of", what, exc, shown_endpoint, lock_path) from exc
    auth = _auth_header(token)
    log(f"hf: fetching {what} ({meta.size} bytes)")
    _download(url, dest, log, headers=auth, location=meta.location)
    size = dest.stat().st_size
    digest = cache.sha256(dest)
    etag = (meta.etag or "").strip('"').lower()
    problem = None
    if meta.size is not None and size != meta.size:
        problem = f"{size} bytes on disk, the Hub says {meta.size}"
    elif re.fullmatch(r"[0-9a-f]{64}", etag) and digest != etag:
        problem = f"sha256 {digest} does not match the Hub's {etag}"
    if problem:
        dest.unlink()
        raise SourceError(f"hf source: downloaded {what} is damaged ({problem}); it was removed, run again")
    entry["zip"] = {"sha256": digest, "size": size}


def _auth_header(token: str | None) -> dict[str, str]:
    from huggingface_hub.utils import get_token

    token = token or get_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def _resolve_revision(api, revision: str, shown_endpoint: str) -> str:
    try:
        sha = api.repo_info(MMRB2_IMAGE_REPO, repo_type="dataset", revision=revision).sha
    except Exception as exc:  # noqa: BLE001
        raise _hub_error("resolve", f"{MMRB2_IMAGE_REPO}@{revision}", exc, shown_endpoint, None) from exc
    if not sha:
        raise SourceError(
            f"hf source: {shown_endpoint} returned no commit sha for {MMRB2_IMAGE_REPO}@{revision}; "
            f"check that HF_ENDPOINT points to a Hugging Face Hub"
        )
    return sha


def _default_endpoint() -> str:
    try:
        from huggingface_hub import constants

        return constants.ENDPOINT
    except Exception:  # noqa: BLE001
        return DEFAULT_HF_ENDPOINT


def _hub_error(action: str, what: str, exc: Exception, endpoint: str, lock_path: Path | None) -> SourceError:
    """Turn a huggingface_hub / transport exception into a SourceError that says what to do."""
    from huggingface_hub import errors

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, errors.GatedRepoError):
        hint = (
            f"the dataset is gated: accept its terms at {endpoint}/datasets/{MMRB2_IMAGE_REPO} "
            f"and set HF_TOKEN to a token of that account"
        )
    elif isinstance(exc, errors.RepositoryNotFoundError) or status in (401, 403):
        hint = (
            f"the repo was not found or needs authentication: set HF_TOKEN (or pass token=) and "
            f"check that HF_ENDPOINT ({endpoint}) is right"
        )
    elif isinstance(exc, errors.RevisionNotFoundError):
        where = f", or remove the {MMRB2_IMAGE_REPO} entry from {lock_path} to re-pin on main" if lock_path else ""
        hint = f"that revision does not exist: fix image_revision / MMRB2_IMAGE_REVISION{where}"
    elif isinstance(exc, getattr(errors, "RemoteEntryNotFoundError", ())):
        hint = "the file is not in the repo at that revision: pin another revision (image_revision)"
    elif isinstance(exc, (errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError)):
        hint = (
            f"the Hub at {endpoint} could not be reached: check the network and HF_ENDPOINT, "
            f"unset HF_HUB_OFFLINE, then run again"
        )
    else:
        hint = (
            f"check the network and HF_ENDPOINT ({endpoint}), set HF_TOKEN if the repo needs it, "
            f"then run again"
        )
    detail = " ".join(str(exc).split())[:400] or "no detail"
    return SourceError(
        f"hf source: could not {action} {what} from {endpoint}: {type(exc).__name__}: {detail} -- to fix: {hint}"
    )


# --- annotations: GitHub raw -------------------------------------------------------------------


class _NoAuthAcrossHosts(urllib.request.HTTPRedirectHandler):
    """Follow redirects (the Hub sends files to a CDN) without carrying the token to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_NoAuthAcrossHosts)


class _NotFound(Exception):
    pass


class _Retry(Exception):
    """A transient failure: the next attempt resumes from the .part file."""


class _Fatal(Exception):
    pass


def _fetch_annotations(
    raw_root: Path, lock: dict, lock_path: Path, cache: ChecksumCache, base: str, log: Log
) -> dict[str, str]:
    """Fetch the task files (required) and new_task_release.json (optional); returns role -> URL."""
    commit = MMRB2_ANNOTATION_COMMIT
    dest_dir = raw_root / ANNOTATION_DIR
    dest_dir.mkdir(parents=True, exist_ok=True)
    entry = lock.get(MMRB2_ANNOTATION_REPO) or {}
    if entry.get("revision") != commit:
        # Files recorded (and partial downloads left) for another commit are not this commit's.
        for part in dest_dir.glob("*.part"):
            part.unlink()
        entry = {"revision": commit, "files": {}}
    records: dict = entry.setdefault("files", {})
    lock[MMRB2_ANNOTATION_REPO] = entry

    wanted = [(f"annotations:{t}", f"{t}_response_only.json", True) for t in MMRB2_TASKS]
    wanted.append(("new_task_release", NEW_TASK_FILE, False))
    origins: dict[str, str] = {}
    for role, name, required in wanted:
        url = f"{base}/{MMRB2_ANNOTATION_REPO}/{commit}/{ANNOTATION_DIR.name}/{name}"
        dest = dest_dir / name
        rec = records.get(name)
        if rec and rec.get("absent") and not required:
            log(f"hf: {name} is not in {MMRB2_ANNOTATION_REPO}@{commit} (recorded in {lock_path.name})")
            continue
        if _matches(dest, rec, cache):
            origins[role] = url
            continue
        try:
            _download(url, dest, log)
        except _NotFound:
            if required:
                raise SourceError(
                    f"hf source: {name} was not found at {url} (HTTP 404). Check that "
                    f"MMRB2_ANNOTATION_COMMIT ({commit}) exists in {MMRB2_ANNOTATION_REPO} and still has "
                    f"benchmark/{name}, and that github_raw_base ({base}) is right"
                ) from None
            log(f"hf: optional {name} not found at {url} (404); continuing without it")
            if dest.exists():
                log(f"hf: removing {dest}, which is not part of commit {commit}")
                dest.unlink()
            records[name] = {"absent": True}
            _write_lock(lock_path, lock)
            continue
        records[name] = {"sha256": cache.sha256(dest), "size": dest.stat().st_size}
        _write_lock(lock_path, lock)
        origins[role] = url
    _write_lock(lock_path, lock)
    return origins


def _matches(path: Path, rec: dict | None, cache: ChecksumCache) -> bool:
    if not rec or "sha256" not in rec or not path.is_file():
        return False
    return path.stat().st_size == rec.get("size") and cache.sha256(path) == rec["sha256"]


def _download(url: str, dest: Path, log: Log, headers: dict | None = None, location: str | None = None) -> None:
    """Download url to dest through `dest.part`, resuming a partial file with a Range request."""
    part = dest.with_name(dest.name + ".part")
    reason = "no attempt made"
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        try:
            _download_once(location or url, part, log, headers or {})
        except _Retry as exc:
            reason = str(exc)
            log(f"hf: {dest.name}: {reason} (attempt {attempt}/{DOWNLOAD_ATTEMPTS})")
            if attempt < DOWNLOAD_ATTEMPTS:
                time.sleep(RETRY_PAUSE)
            continue
        except _Fatal as exc:
            reason = str(exc)
            break
        os.replace(part, dest)
        return
    kept = f"; {part.stat().st_size} bytes are kept in {part} and the next run resumes" if part.exists() else ""
    raise SourceError(
        f"hf source: could not download {dest.name} from {url}: {reason}{kept}. "
        f"Check network access to that host (or the github_raw_base setting), then run again"
    )


def _download_once(url: str, part: Path, log: Log, extra_headers: dict) -> None:
    """One request; leaves a complete file at `part` or raises _Retry / _Fatal / _NotFound."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "rewardhouse", "Accept-Encoding": "identity", **extra_headers}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    try:
        resp = _OPENER.open(urllib.request.Request(url, headers=headers), timeout=HTTP_TIMEOUT)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 404:
            raise _NotFound() from None
        if exc.code == 416 and offset:
            part.unlink()
            raise _Retry("the server refused to resume the partial file; starting over") from None
        if exc.code in (408, 429) or exc.code >= 500:
            raise _Retry(f"HTTP {exc.code} {exc.reason}") from None
        raise _Fatal(f"HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, HTTPException, OSError) as exc:
        raise _Retry(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from None

    with resp:
        if resp.status == 206:
            start, total = _content_range(resp.headers.get("Content-Range"))
            if start != offset:
                part.unlink()
                raise _Retry(f"the server answered the resume with {resp.headers.get('Content-Range')!r}; starting over")
            mode = "ab"
            log(f"hf: resuming {part.name} at byte {offset}")
        else:
            offset, mode = 0, "wb"
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        received = 0
        try:
            with open(part, mode) as fh:
                while block := resp.read(_CHUNK):
                    fh.write(block)
                    received += len(block)
        except (HTTPException, OSError) as exc:
            raise _Retry(f"connection lost after {offset + received} bytes ({type(exc).__name__})") from None
    if total is not None and offset + received != total:
        raise _Retry(f"connection closed after {offset + received} of {total} bytes")


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) from `bytes first-last/total`; (None, None) if unusable."""
    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", (value or "").strip())
    if not match:
        return None, None
    return int(match.group(1)), None if match.group(2) == "*" else int(match.group(2))
