"""The image work on a Ray cluster instead of the local process pool.

Each chunk of items is a Ray task that reads its own bytes: a zip's entries through its own
handle on the archive (a file every node can read, or an object in a bucket read by range), or
its own files on a shared file system. Tasks send back hashes, never image bytes. The chunks and
the per-item function are those of the local path (`pipeline.dedupe.hashing`), so the results are
the same bit for bit. A task whose worker dies is retried (`TASK_RETRIES`); a cluster that cannot
be reached, or is lost, is one line naming its address.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
import zipfile
from pathlib import Path

from pipeline.dedupe.hashing import Chunk, HashedImage, Progress, _chunks, _hash_entries, _hash_file_chunk
from pipeline.settings import ZipLimits
from pipeline.sources.objects import open_local_or_object

TASK_RETRIES = 3
PROBE_SECONDS = 3.0  # how long the head's port may take to accept a connection
LOST_AFTER_SECONDS = 15.0  # the head unreachable this long while tasks are pending: the cluster is lost


class RayUnavailable(RuntimeError):
    """No Ray cluster at the configured address, or it was lost during the work."""


def _where(address: str | None) -> str:
    return f"the Ray cluster at {address}" if address else "a local Ray instance"


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def head_endpoint(address: str | None) -> tuple[str, int] | None:
    """(host, port) of the head a `host:port` or `ray://host:port` address names; None for a
    local instance or "auto" (Ray finds that one itself, and says at once when there is none)."""
    if not address or address == "auto":
        return None
    rest = address.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"Ray address {address!r} is not host:port, ray://host:port or auto")
    return host, int(port)


def reachable(endpoint: tuple[str, int], timeout: float = PROBE_SECONDS) -> bool:
    try:
        socket.create_connection(endpoint, timeout).close()
        return True
    except OSError:
        return False


def connect(address: str | None = None, *, num_cpus: int | None = None):
    """Join the cluster at `address` ("auto", "ray://host:port", "host:port"), or start a local
    one bound to 127.0.0.1 when None; returns the ray module."""
    if address is None and "ray" not in sys.modules:
        # Ray swaps 127.0.0.1 for the machine's outward address unless told that this is not a
        # cluster (the switch is named after the platforms where that is the default); a local
        # instance then listens on loopback only.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        # Under `uv run`, Ray would package the working folder and build a copy of the environment
        # for its workers (1.6 GB in its temp folder, seconds per start); a local instance's
        # workers run this interpreter, whose environment is installed already.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    if ray.is_initialized():
        return ray
    endpoint = head_endpoint(address)
    # Ray itself retries an unreachable head for minutes; a closed port is known in an instant.
    if endpoint is not None and not reachable(endpoint):
        raise RayUnavailable(f"no Ray cluster at {address}: nothing accepts connections on {endpoint[0]}:{endpoint[1]}")
    # ray.init installs its own SIGTERM/SIGINT handlers in the driver; a run's stop handling
    # (pipeline/stopping.py) must stay in charge, so they are put back afterwards.
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if address:
            # A head on this machine's loopback: this driver is a node of that address too (Ray
            # would otherwise pick the machine's outward address, which the head may not serve).
            local = {"_node_ip_address": "127.0.0.1"} if endpoint and endpoint[0] in ("127.0.0.1", "localhost") else {}
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, **local)
        else:
            # "local": always a new instance of its own, never a cluster that `ray start` left behind.
            # quiet: Ray's own start-up lines (the instance, its token) are not this command's to say
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                     log_to_driver=False, logging_level=logging.ERROR)
    except Exception as exc:  # ray raises ConnectionError, RuntimeError, ... for an unreachable head
        raise RayUnavailable(f"no Ray cluster at {address or 'a local instance'}: {_one_line(exc)}") from None
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in saved.items():
                signal.signal(sig, handler)
    return ray


def _zip_chunk(source: str, chunk: Chunk, limits: ZipLimits) -> list[tuple[int, HashedImage]]:
    with open_local_or_object(source) as fh, zipfile.ZipFile(fh) as zf:
        return _hash_entries(zf, chunk, limits)


def _files_chunk(chunk: Chunk, max_pixels: int | None) -> list[tuple[int, HashedImage]]:
    return _hash_file_chunk(chunk, max_pixels)


def _run(ray, address: str | None, calls: list[tuple], function, total: int,
         progress: Progress | None) -> list[HashedImage]:
    task = ray.remote(max_retries=TASK_RETRIES, retry_exceptions=False)(function)
    results: list[HashedImage | None] = [None] * total
    done, start = 0, time.perf_counter()
    endpoint = head_endpoint(address)
    unreachable_since = None
    try:
        pending = [task.remote(*args) for args in calls]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=PROBE_SECONDS)
            if not ready:  # no task finished for a while: is the head still there?
                if endpoint is not None and not reachable(endpoint):
                    unreachable_since = unreachable_since or time.monotonic()
                    if time.monotonic() - unreachable_since >= LOST_AFTER_SECONDS:
                        raise RayUnavailable(f"lost the Ray cluster at {address}: its head has not answered for "
                                             f"{LOST_AFTER_SECONDS:.0f} s, {len(pending)} tasks pending")
                else:
                    unreachable_since = None
                continue
            part = ray.get(ready[0])
            for i, hashed in part:
                results[i] = hashed
            done += len(part)
            if progress:
                progress(done, total, done / max(time.perf_counter() - start, 1e-9))
    except ray.exceptions.RayError as exc:
        raise RayUnavailable(f"image work on {_where(address)} failed: {_one_line(exc)}") from None
    return results  # type: ignore[return-value]


def hash_zip_ray(zip_path: Path | str, items: list[tuple[str, str]], limits: ZipLimits, *,
                 address: str | None = None, chunk: int = 64, progress: Progress | None = None) -> list[HashedImage]:
    """`hashing.hash_zip` on Ray: `zip_path` a file every node can read or `s3://bucket/key`;
    results in item order; `progress(done, total, rate)` as chunks finish."""
    with open_local_or_object(zip_path) as fh, zipfile.ZipFile(fh) as zf:
        offsets = {info.filename: info.header_offset for info in zf.infolist()}
    ray = connect(address)
    jobs = sorted(((i, key, name) for i, (key, name) in enumerate(items)), key=lambda j: offsets.get(j[2], -1))
    workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    limits_ref = ray.put(limits)
    calls = [(str(zip_path), c, limits_ref) for c in _chunks(jobs, chunk, workers)]
    return _run(ray, address, calls, _zip_chunk, len(jobs), progress)


def hash_files_ray(items: list[tuple[str, Path]], *, address: str | None = None, chunk: int = 64,
                   progress: Progress | None = None, max_image_pixels: int | None = None) -> list[HashedImage]:
    """`hashing.hash_files` on Ray: the paths must be readable on every node (a shared file system)."""
    ray = connect(address)
    jobs = [(i, key, str(path)) for i, (key, path) in enumerate(items)]
    workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    calls = [(c, max_image_pixels) for c in _chunks(jobs, chunk, workers)]
    return _run(ray, address, calls, _files_chunk, len(jobs), progress)


def map_tasks(function, calls: list[tuple], address: str | None = None, progress: Progress | None = None) -> list:
    """`function(*args)` for each of `calls` as Ray tasks; the outputs in call order.
    `progress(done, total, rate)` counts finished calls."""
    ray = connect(address)
    if not calls:
        return []
    wrapped = [(i, *args) for i, args in enumerate(calls)]
    outputs = _run(ray, address, wrapped, _indexed(function), len(calls), progress)
    return outputs


def _indexed(function):
    """`function`, answering [(i, output)] as `_run` collects results."""
    def call(i, *args):
        return [(i, function(*args))]
    call.__name__ = call.__qualname__ = function.__name__
    return call
