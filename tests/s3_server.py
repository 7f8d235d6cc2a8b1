"""A real S3 protocol server for the tests: moto's standalone server (`moto_server`) on 127.0.0.1,
started as a subprocess (no in-process patching), and a loopback proxy in front of it that can
hold chosen requests, so a test decides exactly when a publisher is "mid-publish", strip the
conditional headers (a store that ignores them), or fault chosen requests: apply one and lose its
answer, or answer with an S3 error without passing it on."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent
KEY_ID, SECRET = "rewardhouse-test-key", "rewardhouse-test-secret-4f2a"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def make_bucket(endpoint: str, name: str) -> str:
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT"))
    return name


def aws_env(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": "us-east-1"}


class Hold:
    """Requests matching `method` and the `path` pattern are held when they arrive. `arrived` is
    set once `count` of them are held; then `release(forward=True)` sends them on, and
    `release(forward=False)` drops them (the connection is closed, nothing reaches the server)."""

    def __init__(self, method: str, path: str, count: int = 1):
        self.method, self.pattern, self.count = method, re.compile(path), count
        self.held = 0
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.forward = True
        self.lock = threading.Lock()

    def matches(self, method: str, path: str) -> bool:
        return method == self.method and bool(self.pattern.search(path.split("?")[0]))

    def wait_here(self) -> bool:
        with self.lock:
            self.held += 1
            if self.held >= self.count:
                self.arrived.set()
        self.go.wait(120)
        return self.forward

    def release(self, forward: bool = True) -> None:
        self.forward = forward
        self.go.set()


class Fault:
    """Requests matching `method` and the `path` pattern, after the first `skip` of them and at
    most `times` (None: all): with `status` None, passed on to the server and then the connection
    closed without an answer (the server applied the request, the client never hears so); with a
    `status`, answered with that S3 error `code`, never reaching the server."""

    def __init__(self, method: str, path: str, status: int | None = None, code: str = "InternalError",
                 times: int | None = 1, skip: int = 0):
        self.method, self.pattern, self.status, self.code = method, re.compile(path), status, code
        self.times, self.skip, self.hits = times, skip, 0
        self.lock = threading.Lock()

    def take(self, method: str, path: str) -> bool:
        if method != self.method or not self.pattern.search(path.split("?")[0]):
            return False
        with self.lock:
            self.hits += 1
            return self.hits > self.skip and (self.times is None or self.hits - self.skip <= self.times)


class Proxy:
    """Forwards to `upstream`; `holds`, then `faults`, are consulted per request; `strip_conditions`
    drops If-None-Match / If-Match. `requests` records (method, path) of every request seen."""

    def __init__(self, upstream: str, strip_conditions: bool = False):
        self.upstream, self.strip = upstream, strip_conditions
        self.holds: list[Hold] = []
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.requests.append((self.command, self.path))
                for hold in list(proxy.holds):
                    if hold.matches(self.command, self.path) and not hold.wait_here():
                        self.close_connection = True
                        return
                fault = next((f for f in list(proxy.faults) if f.take(self.command, self.path)), None)
                if fault is not None and fault.status is not None:
                    error = f"<?xml version='1.0'?><Error><Code>{fault.code}</Code><Message>injected</Message></Error>"
                    self.send_response(fault.status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error.encode())
                    return
                skip = {"host"} | ({"if-none-match", "if-match"} if proxy.strip else set())
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                # urllib would label a bare body as a form, which the server then parses as one.
                headers.setdefault("Content-Type", self.headers.get("Content-Type") or "application/octet-stream")
                req = urllib.request.Request(proxy.upstream + self.path, data=body if self.command in ("PUT", "POST") else None,
                                             headers=headers, method=self.command)
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        status, out, reply = resp.status, resp.read(), resp.headers
                except urllib.error.HTTPError as exc:
                    status, out, reply = exc.code, exc.read(), exc.headers
                if fault is not None:  # applied upstream; its answer is lost
                    self.close_connection = True
                    return
                self.send_response(status)
                for k, v in reply.items():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)) if self.command != "HEAD" else reply.get("Content-Length", "0"))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self, method: str, path: str, count: int = 1) -> Hold:
        hold = Hold(method, path, count)
        self.holds.append(hold)
        return hold

    def fault(self, method: str, path: str, status: int | None = None, code: str = "InternalError",
              times: int | None = 1, skip: int = 0) -> Fault:
        fault = Fault(method, path, status, code, times, skip)
        self.faults.append(fault)
        return fault

    def close(self) -> None:
        for hold in self.holds:
            hold.release(False)
        self.server.shutdown()
