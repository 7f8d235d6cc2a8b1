"""The `hf` source's download machinery: each dataset's recipe (which repos, which files, which
revision) lives in its own package (`pipeline/<dataset>/source.py`) and calls the helpers here.

- Hub datasets (`HubFiles`, `fetch_hub_files`): the revision is pinned, the repo is listed with
  `huggingface_hub` at that commit, the wanted files are fetched with our own ranged download (a
  killed download resumes on the next run) and verified against the Hub's size and sha256 ETag.
- GitHub files at a fixed commit (`GitHubFiles`, `fetch_github_files`), fetched with urllib from
  the raw-file host, by the same resumable download.

What was fetched is pinned in `{raw_root}/sources.lock.json`, one entry per repository, e.g.:

    {"facebook/MMRB2_image": {"revision": "<commit sha>", "file": "image.zip",
                              "zip": {"sha256": "...", "size": 123}},
     "mm-eval/VisualPRM400K": {"revision": "<commit sha>",
                               "files": {"data/train-00000-of-00001.parquet": {"sha256": "...", "size": 123}}},
     "facebookresearch/MMRB2": {"revision": "<commit>",
                                "files": {"t2i_response_only.json": {"sha256": "...", "size": 123},
                                          "new_task_release.json": {"absent": true}}}}

A Hub revision is resolved from `main` once and then reused, so a later upstream push never
changes the data silently; delete that entry (or pass a revision) to move on deliberately.
Files recorded there and still matching on disk are not downloaded again (no request at all).
Each fetch rewrites only its own entries, so fetches of different datasets may share the file.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import Callable

from pipeline import env
from pipeline.sources.base import ChecksumCache, SourceError, sha256_file

LOCK_FILE = "sources.lock.json"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"

# Downloads: attempts per file within one call, and the pause between them (seconds).
DOWNLOAD_ATTEMPTS = 3
RETRY_PAUSE = 0.5
HTTP_TIMEOUT = 60.0
PROGRESS_SECONDS = 10.0  # how often a long download reports progress
_CHUNK = 1 << 16
_COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")

Log = Callable[[str], None]


def _endpoint(hf_endpoint: str | None) -> str | None:
    return (hf_endpoint or env.hf_endpoint() or "").rstrip("/") or None


# --- lock file ---------------------------------------------------------------------------------


def _read_lock(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SourceError(
            f"hf source: cannot read the lock file {path} ({exc}); fix it, or delete it to re-pin "
            f"the Hub datasets on their current main and re-check every downloaded file"
        ) from exc
    if not isinstance(data, dict):
        raise SourceError(f"hf source: lock file {path} does not hold a JSON object; fix or delete it")
    return data


def _save_lock_entry(path: Path, lock: dict, key: str) -> None:
    """Write `lock[key]` to the lock file. The other entries are taken as they are on disk now:
    a fetch of another dataset may have pinned its own entry since this one read the file."""
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = None
    if not isinstance(current, dict):
        current = {k: v for k, v in lock.items() if k != key}
    current[key] = lock[key]
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


# --- Hub datasets: pinned revision, listed files, verified ranged downloads ----------------------


@dataclass(frozen=True)
class HubFiles:
    """Which files to take from one Hub dataset and how its lock entry records them. They land in
    `{raw_root}/{repo}/{path in the repo}`, the upstream layout."""

    repo: str
    wanted: str  # what `select` looks for, for messages
    knob: str  # how to pin another revision, for messages
    select: Callable[[list[str]], list[str]]  # the repo's files -> the ones to fetch, in order
    local_globs: tuple[str, ...]  # local files of that kind; those not selected are stale
    recorded: Callable[[dict], dict[str, dict | None] | None]  # entry -> {path: {sha256, size}}, None if unlisted
    record: Callable[[dict, dict], None]  # store {path: {sha256, size}} of every selected file in the entry


def fetch_hub_files(
    raw_root: Path,
    cache: ChecksumCache,
    files: HubFiles,
    *,
    revision: str | None = None,
    hf_endpoint: str | None = None,
    token: str | None = None,
    log: Log = lambda s: None,
) -> tuple[str, list[str]]:
    """Download (or reuse) the files `files` selects from one Hub dataset into
    `raw_root/{repo}/`, pinned and verified as described above. Returns (commit sha, repo paths)."""
    raw_root = Path(raw_root)
    raw_root.mkdir(parents=True, exist_ok=True)
    lock_path = raw_root / LOCK_FILE
    return _fetch_pinned_files(raw_root, files, _read_lock(lock_path), lock_path, cache, endpoint=_endpoint(hf_endpoint),
                               token=token, revision=revision, log=log)


def record_files(entry: dict, records: dict) -> None:
    entry["files"] = dict(sorted(records.items()))


def _fetch_pinned_files(
    raw_root: Path,
    spec: HubFiles,
    lock: dict,
    lock_path: Path,
    cache: ChecksumCache,
    *,
    endpoint: str | None,
    token: str | None,
    revision: str | None,
    log: Log,
) -> tuple[str, list[str]]:
    """Pin the revision, list and select the files, download and verify them, record them.

    `revision` (a commit sha, or a branch/tag resolved to one) wins over the one locked in
    `lock_path`; with neither, `main` is resolved and locked before anything is downloaded, so an
    interrupted first fetch cannot drift to a newer main. An explicit revision is locked only once
    it has delivered every file. Files recorded for the pinned commit and still matching on disk
    cost no request. Returns (commit sha, the selected repo paths).
    """
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    shown_endpoint = endpoint or _default_endpoint()
    entry = dict(lock.get(spec.repo) or {})
    locked = entry.get("revision")

    if revision:
        sha = revision if _COMMIT_SHA.fullmatch(revision) else _resolve_revision(api, spec, revision, shown_endpoint)
        if locked not in (None, sha):
            log(f"hf: {spec.repo} pinned to {sha} (was locked at {locked})")
        if locked != sha:
            entry = {"revision": sha}
    elif locked:
        sha = locked
        log(f"hf: {spec.repo} locked at {sha} ({lock_path})")
    else:
        sha = _resolve_revision(api, spec, "main", shown_endpoint)
        entry = {"revision": sha}
        log(f"hf: {spec.repo} main is {sha}; locking it in {lock_path}")
        lock[spec.repo] = entry
        _save_lock_entry(lock_path, lock, spec.repo)

    records = spec.recorded(entry)
    if records is None:
        try:
            listed = api.list_repo_files(spec.repo, repo_type="dataset", revision=sha)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a SourceError with advice
            raise _hub_error("list the files of", f"{spec.repo}@{sha}", exc, shown_endpoint, lock_path, spec) from exc
        selected = spec.select(listed)
        if not selected:
            raise SourceError(
                f"hf source: dataset {spec.repo} at revision {sha} has no {spec.wanted}; "
                f"files seen: {sorted(listed) or 'none'}. Check the repo on {shown_endpoint}, pin a "
                f"revision that has them ({spec.knob}), or download them by hand and use the local source"
            )
        records = dict.fromkeys(selected)

    local_dir = raw_root / spec.repo
    done: dict[str, dict] = {}
    for name, rec in records.items():
        dest = local_dir / name
        if _matches(dest, rec, cache):
            log(f"hf: {name} at {sha} already complete ({rec['size']} bytes)")
            done[name] = rec
            continue
        part = dest.with_name(dest.name + ".part")
        if locked not in (None, sha) and part.exists():
            log(f"hf: removing {part}, a partial download of another revision")
            part.unlink()
        dest.parent.mkdir(parents=True, exist_ok=True)
        done[name] = _download_verified(
            spec, sha, name, dest, endpoint=endpoint, token=token, shown_endpoint=shown_endpoint,
            lock_path=lock_path, cache=cache, log=log,
        )

    # Files of the same kind that the pinned revision does not list are stale: they would shadow
    # or add to what the inventory finds.
    keep = {local_dir / name for name in records} | {local_dir / (name + ".part") for name in records}
    for pattern in spec.local_globs:
        for stale in sorted({*local_dir.glob(pattern), *local_dir.glob(pattern + ".part")}):
            if stale not in keep and stale.is_file():
                log(f"hf: removing stale {stale} ({spec.repo}@{sha} does not list it)")
                stale.unlink()

    spec.record(entry, done)
    lock[spec.repo] = entry
    _save_lock_entry(lock_path, lock, spec.repo)
    return sha, list(records)


def _download_verified(
    spec: HubFiles, sha: str, name: str, dest: Path, *, endpoint, token, shown_endpoint, lock_path, cache, log
) -> dict:
    """Our own ranged download of one pinned file, so a killed download resumes next run
    (huggingface_hub only resumes within one call). The Hub's metadata gives size and, for LFS
    files, the sha256 to verify against; a file already on disk that matches both is kept. Only a
    download that matches them is moved into place: a damaged one is discarded and fetched again,
    a bounded number of times, and the file already at `dest` stays as it was."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(spec.repo, name, repo_type="dataset", revision=sha, endpoint=endpoint)
    what = f"{spec.repo}@{sha}/{name}"
    try:
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
    except Exception as exc:  # noqa: BLE001
        raise _hub_error("read the metadata of", what, exc, shown_endpoint, lock_path, spec) from exc
    etag = (meta.etag or "").strip('"').lower()
    expected = etag if _SHA256.fullmatch(etag) else None

    if expected and dest.is_file() and dest.stat().st_size == meta.size and cache.sha256(dest) == expected:
        log(f"hf: {what} is already on disk and matches the Hub; not downloading it again")
        return {"sha256": expected, "size": meta.size}

    def damage(part: Path) -> str | None:
        size = part.stat().st_size
        if meta.size is not None and size != meta.size:
            return f"{size} bytes arrived, the Hub says {meta.size}"
        if expected and (digest := sha256_file(part)) != expected:
            return f"sha256 {digest} does not match the Hub's ETag {expected}"
        return None

    log(f"hf: fetching {what} ({meta.size} bytes)")
    _download(
        url, dest, log, headers=_auth_header(token), location=meta.location, check=damage,
        damaged=lambda problem: (
            f"hf source: {name} of {spec.repo} at revision {sha} failed verification on all "
            f"{DOWNLOAD_ATTEMPTS} attempts ({problem}); the damaged bytes were discarded. Run again "
            f"later; if it persists, pin another revision ({spec.knob}) or use the local source"
        ),
    )
    if expected:
        cache.remember(dest, expected)  # just verified; a 2 GB zip is not hashed twice
    return {"sha256": expected or cache.sha256(dest), "size": dest.stat().st_size}


def _auth_header(token: str | None) -> dict[str, str]:
    from huggingface_hub.utils import get_token

    token = token or get_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def _resolve_revision(api, spec: HubFiles, revision: str, shown_endpoint: str) -> str:
    try:
        sha = api.repo_info(spec.repo, repo_type="dataset", revision=revision).sha
    except Exception as exc:  # noqa: BLE001
        raise _hub_error("resolve", f"{spec.repo}@{revision}", exc, shown_endpoint, None, spec) from exc
    if not sha:
        raise SourceError(
            f"hf source: {shown_endpoint} returned no commit sha for {spec.repo}@{revision}; "
            f"check that HF_ENDPOINT points to a Hugging Face Hub"
        )
    return sha


def _default_endpoint() -> str:
    try:
        from huggingface_hub import constants

        return constants.ENDPOINT
    except Exception:  # noqa: BLE001
        return DEFAULT_HF_ENDPOINT


def _hub_error(
    action: str, what: str, exc: Exception, endpoint: str, lock_path: Path | None, spec: HubFiles
) -> SourceError:
    """Turn a huggingface_hub / transport exception into a SourceError that says what to do."""
    from huggingface_hub import errors

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, errors.GatedRepoError):
        hint = (
            f"the dataset is gated: accept its terms at {endpoint}/datasets/{spec.repo} "
            f"and set HF_TOKEN to a token of that account"
        )
    elif isinstance(exc, errors.RepositoryNotFoundError) or status in (401, 403):
        hint = (
            f"the repo was not found or needs authentication: set HF_TOKEN (or pass token=) and "
            f"check that HF_ENDPOINT ({endpoint}) is right"
        )
    elif isinstance(exc, errors.RevisionNotFoundError):
        where = f", or remove the {spec.repo} entry from {lock_path} to re-pin on main" if lock_path else ""
        hint = f"that revision does not exist: fix {spec.knob}{where}"
    elif isinstance(exc, getattr(errors, "RemoteEntryNotFoundError", ())):
        hint = f"the file is not in the repo at that revision: pin another revision ({spec.knob})"
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


# --- GitHub files at a fixed commit, and the download both kinds use ---------------------------


def _origin(url: str) -> tuple[str, str]:
    split = urllib.parse.urlsplit(url)
    return split.scheme.lower(), split.netloc.lower()


class _NoAuthAcrossHosts(urllib.request.HTTPRedirectHandler):
    """Follow redirects (the Hub sends files to a CDN) without carrying the token to another origin."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_NoAuthAcrossHosts)


class _NotFound(Exception):
    pass


class _Retry(Exception):
    """A transient failure: the next attempt resumes from the .part file."""


class _Damaged(_Retry):
    """A complete download that failed its check; the .part file is gone, the next attempt starts over."""


class _Fatal(Exception):
    pass


@dataclass(frozen=True)
class GitHubFiles:
    """Files of one folder of a GitHub repository at a fixed commit, read from the raw-file host
    (`{base}/{repo}/{commit}/{folder}/{name}`). They land in `{raw_root}/{repo}/{folder}/`, the
    upstream layout; the lock entry records each one, or that an optional one is not there."""

    repo: str
    commit: str
    folder: str  # in the repo
    knob: str  # where the commit is pinned, for messages
    files: tuple[tuple[str, str, bool], ...]  # (role, file name, required)


def fetch_github_files(raw_root: Path, cache: ChecksumCache, files: GitHubFiles, *, base: str,
                       log: Log = lambda s: None) -> dict[str, str]:
    """Download (or reuse) `files` under `raw_root`; returns role -> URL of the files there (an
    optional file the repo does not have is left out). Raises SourceError for a required one."""
    raw_root = Path(raw_root)
    lock_path = raw_root / LOCK_FILE
    lock = _read_lock(lock_path)
    base = base.rstrip("/")
    repo, commit = files.repo, files.commit
    dest_dir = raw_root / repo / files.folder
    dest_dir.mkdir(parents=True, exist_ok=True)
    entry = lock.get(repo) or {}
    if entry.get("revision") != commit:
        # Files recorded (and partial downloads left) for another commit are not this commit's.
        for part in dest_dir.glob("*.part"):
            part.unlink()
        entry = {"revision": commit, "files": {}}
    records: dict = entry.setdefault("files", {})
    lock[repo] = entry

    origins: dict[str, str] = {}
    for role, name, required in files.files:
        url = f"{base}/{repo}/{commit}/{files.folder}/{name}"
        dest = dest_dir / name
        rec = records.get(name)
        if rec and rec.get("absent") and not required:
            log(f"hf: {name} is not in {repo}@{commit} (recorded in {lock_path.name})")
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
                    f"{files.knob} ({commit}) exists in {repo} and still has "
                    f"{files.folder}/{name}, and that github_raw_base ({base}) is right"
                ) from None
            log(f"hf: optional {name} not found at {url} (404); continuing without it")
            if dest.exists():
                log(f"hf: removing {dest}, which is not part of commit {commit}")
                dest.unlink()
            records[name] = {"absent": True}
            _save_lock_entry(lock_path, lock, repo)
            continue
        records[name] = {"sha256": cache.sha256(dest), "size": dest.stat().st_size}
        _save_lock_entry(lock_path, lock, repo)
        origins[role] = url
    _save_lock_entry(lock_path, lock, repo)
    return origins


def _matches(path: Path, rec: dict | None, cache: ChecksumCache) -> bool:
    if not rec or "sha256" not in rec or not path.is_file():
        return False
    return path.stat().st_size == rec.get("size") and cache.sha256(path) == rec["sha256"]


def _download(
    url: str,
    dest: Path,
    log: Log,
    headers: dict | None = None,
    location: str | None = None,
    check: Callable[[Path], str | None] | None = None,
    damaged: Callable[[str], str] | None = None,
) -> None:
    """Download url to dest through `dest.part`, resuming a partial file with a Range request.

    `check` judges a complete `.part` (None when good, else what is wrong); only a good one is
    moved to `dest`. `damaged` words the error when every attempt failed the check.
    """
    part = dest.with_name(dest.name + ".part")
    source = location or url
    if _origin(source) != _origin(url):  # the Hub sends LFS files to a CDN: the token stays with the Hub
        headers = {k: v for k, v in (headers or {}).items() if k.lower() != "authorization"}
    reason = "no attempt made"
    failure: _Retry | None = None
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        try:
            _download_once(source, part, log, headers or {})
            if check is not None and (problem := check(part)):
                part.unlink()
                raise _Damaged(problem)
        except _Retry as exc:
            failure, reason = exc, str(exc)
            what = "damaged download discarded, " if isinstance(exc, _Damaged) else ""
            log(f"hf: {dest.name}: {what}{reason} (attempt {attempt}/{DOWNLOAD_ATTEMPTS})")
            if attempt < DOWNLOAD_ATTEMPTS:
                time.sleep(RETRY_PAUSE)
            continue
        except _Fatal as exc:
            failure, reason = None, str(exc)
            break
        os.replace(part, dest)
        return
    if isinstance(failure, _Damaged) and damaged is not None:
        raise SourceError(damaged(reason))
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
        started = last = time.monotonic()
        try:
            with open(part, mode) as fh:
                while block := resp.read(_CHUNK):
                    fh.write(block)
                    received += len(block)
                    now = time.monotonic()
                    if now - last >= PROGRESS_SECONDS:
                        last = now
                        log(_progress_line(part.name[: -len(".part")], offset + received, total, received / (now - started)))
        except (HTTPException, OSError) as exc:
            raise _Retry(f"connection lost after {offset + received} bytes ({type(exc).__name__})") from None
    if total is not None and offset + received != total:
        raise _Retry(f"connection closed after {offset + received} of {total} bytes")


def _progress_line(name: str, done: int, total: int | None, rate: float) -> str:
    if total:
        eta = (total - done) / rate if rate > 0 else 0.0
        return f"hf: {name}: {done / 1e6:.0f}/{total / 1e6:.0f} MB ({rate / 1e6:.1f} MB/s, ETA {eta:.0f}s)"
    return f"hf: {name}: {done / 1e6:.0f} MB ({rate / 1e6:.1f} MB/s)"


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) from `bytes first-last/total`; (None, None) if unusable."""
    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+|\*)", (value or "").strip())
    if not match:
        return None, None
    return int(match.group(1)), None if match.group(2) == "*" else int(match.group(2))
