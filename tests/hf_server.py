"""A loopback stand-in for the Hugging Face Hub and raw.githubusercontent.com, for tests.

It speaks the few endpoints huggingface_hub 2.x uses to pin a revision, list a dataset and
download one file, plus a GitHub-raw-like path, all from in-memory bytes:

    GET  /api/datasets/{ns}/{name}[/revision/{rev}]     repo info: {"id", "sha", "siblings"}
    GET  /api/datasets/{ns}/{name}/tree/{rev}[/{dir}]   tree listing (?recursive=true|false)
    HEAD /datasets/{ns}/{name}/resolve/{rev}/{path}     ETag, X-Repo-Commit, Content-Length
    GET  /datasets/{ns}/{name}/resolve/{rev}/{path}     the bytes; honours `Range` (206)
    GET  /{owner}/{repo}/{commit}/{path}                GitHub raw; 404 for anything unknown
    GET  /lfs/{sha256}                                  a CDN's blob (see `serve_lfs_from`)

Every request is logged (method, path, Range header, status) so a test can assert that nothing
was downloaded twice or that a download was resumed. Faults, per file name:
`drop_connection_after` makes the next body stop after N bytes with the connection closed, like a
network failure; `hold_after` sends N bytes and then stalls until `release()`, so a test can kill
the client mid-transfer; `serve_damaged` changes a byte of the body while HEAD and the ETag still
describe the real file, like a corrupting proxy.

    with FakeHub() as hub:
        sha = hub.add_dataset_commit("org/data", {"image.zip": b"..."})
        hub.add_raw_files("org/code", "abc123", {"benchmark/x.json": b"{}"})
        ...  # point HF_ENDPOINT and the raw base at hub.url
        assert not hub.body_gets()
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

# Files served as LFS objects (ETag = sha256, `lfs` block in the tree), as the Hub does for zips.
LFS_SUFFIXES = (".zip", ".parquet", ".bin", ".safetensors")


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    method: str
    path: str  # URL path, percent-decoded, without the query string
    query: str
    range: str | None  # the Range header, if any
    status: int
    authorization: str | None = None

    @property
    def is_file_body(self) -> bool:
        """A GET that returned (part of) a file: a Hub /resolve/ URL or a GitHub raw URL."""
        return self.method == "GET" and self.status in (200, 206) and not self.path.startswith("/api/")


@dataclass
class _Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    def resolve(self, revision: str) -> str | None:
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.commits else None


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def etag_for(path: str, data: bytes) -> str:
    """The ETag the Hub gives a file: sha256 for LFS objects, the git blob sha1 otherwise."""
    return hashlib.sha256(data).hexdigest() if path.endswith(LFS_SUFFIXES) else git_blob_sha1(data)


class FakeHub:
    """Threaded HTTP server on 127.0.0.1 (free port); use as a context manager or start()/stop().

    token: when set, every Hub endpoint (not GitHub raw) answers 401 unless sent
           `Authorization: Bearer <token>`, like a private or gated repo.
    honour_range: set False to make the server ignore Range headers (always 200, whole file).
    """

    def __init__(self, *, token: str | None = None, honour_range: bool = True):
        self.token = token
        self.honour_range = honour_range
        self._datasets: dict[str, _Repo] = {}
        self._raw: dict[str, bytes] = {}  # "owner/repo/commit/path" -> bytes
        self._faults: dict[str, int] = {}  # file name (end of URL path) -> bytes sent before dropping
        self._holds: dict[str, int] = {}  # file name -> bytes sent before stalling
        self._damaged: dict[str, float] = {}  # file name -> GETs left to damage
        self._released = threading.Event()
        self._cdn: FakeHub | None = None
        self._blobs: dict[str, bytes] = {}  # sha256 -> bytes, served at /lfs/{sha256}
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- content ---------------------------------------------------------------------------------

    def add_dataset_commit(self, repo_id: str, files: dict[str, bytes], *, branch: str = "main") -> str:
        """Add a commit holding exactly `files` to a dataset repo, move `branch` to it, return its sha."""
        with self._lock:
            repo = self._datasets.setdefault(repo_id, _Repo())
            digest = hashlib.sha1(f"{repo_id}#{len(repo.commits)}".encode())
            for path in sorted(files):
                digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
            sha = digest.hexdigest()
            repo.commits[sha] = dict(files)
            repo.refs[branch] = sha
            return sha

    def add_raw_files(self, repo: str, commit: str, files: dict[str, bytes]) -> None:
        """Serve files at /{repo}/{commit}/{path}, as raw.githubusercontent.com does."""
        with self._lock:
            for path, data in files.items():
                self._raw[f"{repo}/{commit}/{path}"] = data

    def remove_raw_file(self, repo: str, commit: str, path: str) -> None:
        with self._lock:
            self._raw.pop(f"{repo}/{commit}/{path}", None)

    def drop_connection_after(self, filename: str, nbytes: int) -> None:
        """One shot: the next GET whose path ends with `/filename` sends `nbytes` of the body and hangs up."""
        with self._lock:
            self._faults[filename] = nbytes

    def hold_after(self, filename: str, nbytes: int) -> None:
        """One shot: the next GET of `/filename` sends `nbytes` of the body, then stalls (connection
        open, nothing sent) until `release()` or `stop()`."""
        with self._lock:
            self._holds[filename] = nbytes
        self._released.clear()

    def release(self) -> None:
        """End every stalled transfer (its connection is closed)."""
        self._released.set()

    def serve_damaged(self, filename: str, times: int | None = None) -> None:
        """The next `times` GETs of `/filename` (every one when None) get its bytes with the last byte
        changed; HEAD, Content-Length and the ETag still describe the real file."""
        with self._lock:
            self._damaged[filename] = float("inf") if times is None else times

    def serve_lfs_from(self, cdn: "FakeHub") -> None:
        """Answer /resolve/ of LFS files as the Hub does: a 302 to `cdn` (another origin) with the
        file's sha256 and size in X-Linked-Etag / X-Linked-Size; `cdn` serves it without a token."""
        self._cdn = cdn

    # -- request log -----------------------------------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def clear_log(self) -> None:
        with self._lock:
            self._requests.clear()

    def body_gets(self, filename: str | None = None) -> list[Request]:
        """GETs that returned file bytes, optionally only those of one file name."""
        return [
            r
            for r in self.requests
            if r.is_file_body and (filename is None or r.path.endswith("/" + filename))
        ]

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeHub is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeHub":
        if self._server is not None:
            return self
        handler = type("BoundHandler", (_Handler,), {"hub": self})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="FakeHub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- used by the handler ---------------------------------------------------------------------

    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    def _take_fault(self, path: str) -> int | None:
        with self._lock:
            for name in list(self._faults):
                if path.endswith("/" + name):
                    return self._faults.pop(name)
        return None

    def _take_hold(self, path: str) -> int | None:
        with self._lock:
            for name in list(self._holds):
                if path.endswith("/" + name):
                    return self._holds.pop(name)
        return None

    def _take_damage(self, path: str) -> bool:
        with self._lock:
            for name, left in self._damaged.items():
                if path.endswith("/" + name) and left > 0:
                    self._damaged[name] = left - 1
                    return True
        return False

    def _blob(self, oid: str) -> bytes | None:
        with self._lock:
            return self._blobs.get(oid)

    def _add_blob(self, data: bytes) -> str:
        oid = hashlib.sha256(data).hexdigest()
        with self._lock:
            self._blobs[oid] = data
        return oid

    def _dataset(self, repo_id: str) -> _Repo | None:
        with self._lock:
            return self._datasets.get(repo_id)

    def _raw_file(self, key: str) -> bytes | None:
        with self._lock:
            return self._raw.get(key)


class _Response(Exception):
    """Raised inside the handler to answer with an error status."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects; every answer has Content-Length
    hub: FakeHub  # set on the bound subclass

    def do_GET(self) -> None:
        self._dispatch(head=False)

    def do_HEAD(self) -> None:
        self._dispatch(head=True)

    def log_message(self, format: str, *args) -> None:  # keep test output quiet
        pass

    # -- routing ---------------------------------------------------------------------------------

    def _dispatch(self, head: bool) -> None:
        split = urlsplit(self.path)
        self._path = unquote(split.path)
        self._query = split.query
        parts = [unquote(p) for p in split.path.strip("/").split("/")]
        try:
            if parts[:2] == ["api", "datasets"] and len(parts) >= 4:
                self._check_token()
                self._api(parts[2] + "/" + parts[3], parts[4:], head)
            elif parts[:1] == ["datasets"] and len(parts) >= 6 and parts[3] == "resolve":
                self._check_token()
                self._resolve(parts[1] + "/" + parts[2], parts[4], "/".join(parts[5:]), head)
            elif parts[0] == "lfs" and len(parts) == 2:
                blob = self.hub._blob(parts[1])
                if blob is None:
                    raise _Response(404, "404: Not Found")
                self._send_file(blob, {"ETag": f'"{parts[1]}"'}, head)
            elif len(parts) >= 4:
                data = self.hub._raw_file("/".join(parts))
                if data is None:
                    raise _Response(404, "404: Not Found")
                self._send_file(data, {}, head)
            else:
                raise _Response(404, "404: Not Found")
        except _Response as err:
            body = json.dumps({"error": str(err)}).encode()
            self._send(err.status, body, {"Content-Type": "application/json", **err.headers}, head)

    def _check_token(self) -> None:
        if self.hub.token and self.headers.get("Authorization") != f"Bearer {self.hub.token}":
            raise _Response(401, "Invalid username or password.", {"X-Error-Code": "RepoNotFound"})

    def _repo_at(self, repo_id: str, revision: str) -> tuple[str, dict[str, bytes]]:
        repo = self.hub._dataset(repo_id)
        if repo is None:
            raise _Response(404, "Repository not found", {"X-Error-Code": "RepoNotFound"})
        sha = repo.resolve(revision)
        if sha is None:
            raise _Response(404, f"Invalid rev id: {revision}", {"X-Error-Code": "RevisionNotFound"})
        return sha, repo.commits[sha]

    def _api(self, repo_id: str, rest: list[str], head: bool) -> None:
        if not rest or (rest[0] == "revision" and len(rest) == 2):
            sha, files = self._repo_at(repo_id, rest[1] if rest else "main")
            siblings = [{"rfilename": p} for p in sorted(files)]
            self._send_json({"id": repo_id, "sha": sha, "private": bool(self.hub.token), "siblings": siblings}, head)
        elif rest[0] == "tree" and len(rest) >= 2:
            sha, files = self._repo_at(repo_id, rest[1])
            recursive = parse_qs(self._query).get("recursive", ["false"])[0].lower() == "true"
            self._send_json(_tree(files, "/".join(rest[2:]), recursive), head)
        else:
            raise _Response(404, "Not Found")

    def _resolve(self, repo_id: str, revision: str, path: str, head: bool) -> None:
        sha, files = self._repo_at(repo_id, revision)
        if path not in files:
            raise _Response(404, "Entry not found", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": sha})
        data = files[path]
        cdn = self.hub._cdn
        if cdn is not None and path.endswith(LFS_SUFFIXES):
            oid = cdn._add_blob(data)
            linked = {"X-Linked-Etag": f'"{oid}"', "X-Linked-Size": str(len(data)), "X-Repo-Commit": sha}
            self._send(302, b"", {"Location": f"{cdn.url}/lfs/{oid}", "ETag": f'"{git_blob_sha1(data)}"', **linked}, head)
            return
        self._send_file(data, {"ETag": f'"{etag_for(path, data)}"', "X-Repo-Commit": sha}, head)

    # -- answers ---------------------------------------------------------------------------------

    def _send_json(self, payload, head: bool) -> None:
        self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json"}, head)

    def _send_file(self, data: bytes, headers: dict[str, str], head: bool) -> None:
        headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes", **headers}
        wanted = self.headers.get("Range") if self.hub.honour_range else None
        if wanted is None:
            self._send(200, data, headers, head)
            return
        span = _parse_range(wanted, len(data))
        if span is None:
            raise _Response(416, "Range Not Satisfiable", {"Content-Range": f"bytes */{len(data)}"})
        start, end = span
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self._send(206, data[start : end + 1], headers, head)

    def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
        self.hub._record(
            Request(
                method=self.command,
                path=self._path,
                query=self._query,
                range=self.headers.get("Range"),
                status=status,
                authorization=self.headers.get("Authorization"),
            )
        )
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        if status in (200, 206) and body and self.hub._take_damage(self._path):
            body = body[:-1] + bytes([body[-1] ^ 0xFF])
        cut = self.hub._take_fault(self._path) if status in (200, 206) else None
        if cut is not None and cut < len(body):
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True  # the server then closes the socket: a truncated body
            return
        hold = self.hub._take_hold(self._path) if status in (200, 206) else None
        if hold is not None and hold < len(body):
            self.wfile.write(body[:hold])
            self.wfile.flush()
            self.hub._released.wait(timeout=120)
            self.close_connection = True
            return
        self.wfile.write(body)


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """`bytes=a-`, `bytes=a-b` or `bytes=-n` as an inclusive (start, end); None if unsatisfiable."""
    spec = value.strip()
    if not spec.startswith("bytes=") or "," in spec:
        return None
    first, _, last = spec[len("bytes=") :].partition("-")
    try:
        if first == "":
            start, end = max(size - int(last), 0), size - 1
        else:
            start = int(first)
            end = min(int(last), size - 1) if last else size - 1
    except ValueError:
        return None
    if start >= size or start > end:
        return None
    return start, end


def _tree(files: dict[str, bytes], under: str, recursive: bool) -> list[dict]:
    """Tree entries as the Hub lists them: files (with `lfs` for LFS objects) and directories."""
    prefix = under.strip("/") + "/" if under.strip("/") else ""
    entries: dict[str, dict] = {}
    for path in sorted(files):
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix) :].split("/")
        # Directories between `under` and the file (only the first one unless recursive).
        for depth in range(1, len(rest) if recursive else min(len(rest), 2)):
            folder = prefix + "/".join(rest[:depth])
            entries.setdefault(folder, {"type": "directory", "oid": git_blob_sha1(folder.encode()), "path": folder})
        if len(rest) > 1 and not recursive:
            continue
        data = files[path]
        entry = {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": path}
        if path.endswith(LFS_SUFFIXES):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        entries[path] = entry
    return list(entries.values())
