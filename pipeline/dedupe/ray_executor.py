"""The image work on a Ray cluster instead of the local process pool.

`hash_zip_ray` hashes (key, entry) items of a zip the way `hashing.hash_zip` does, but each chunk
is a Ray task that opens the archive itself and reads only its own entries (the zip is a shared
file every node can read), returning hashes, never image bytes, to the driver. Results are those
of the local path, bit for bit. A task whose worker dies is retried (`max_retries`); a cluster
that cannot be reached is one line naming the address.
"""

from __future__ import annotations

import signal
import threading
import time
import zipfile
from pathlib import Path

from pipeline.dedupe.hashing import Chunk, HashedImage, Progress, _chunks, _hash_entries
from pipeline.settings import ZipLimits

TASK_RETRIES = 3


class RayUnavailable(RuntimeError):
    """No Ray cluster at the configured address."""


def connect(address: str | None = None, *, num_cpus: int | None = None):
    """Join the cluster at `address` ("auto", "ray://host:port", "host:port"), or start a local
    one bound to 127.0.0.1 when None; returns the ray module."""
    import ray

    if ray.is_initialized():
        return ray
    # ray.init installs its own SIGTERM/SIGINT handlers in the driver; a run's stop handling
    # (pipeline/stopping.py) must stay in charge, so they are put back afterwards.
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    except Exception as exc:  # ray raises ConnectionError, RuntimeError, ... for an unreachable head
        raise RayUnavailable(f"no Ray cluster at {address or 'a local instance'}: {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:200]}") from None
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in saved.items():
                signal.signal(sig, handler)
    return ray


def _zip_chunk(zip_path: str, chunk: Chunk, limits: ZipLimits) -> list[tuple[int, HashedImage]]:
    with zipfile.ZipFile(zip_path) as zf:
        return _hash_entries(zf, chunk, limits)


def hash_zip_ray(zip_path: Path, items: list[tuple[str, str]], limits: ZipLimits, *, address: str | None = None,
                 chunk: int = 64, progress: Progress | None = None) -> list[HashedImage]:
    """`hashing.hash_zip` on Ray: results in item order; `progress(done, total, rate)` as chunks finish."""
    ray = connect(address)
    with zipfile.ZipFile(zip_path) as zf:
        offsets = {info.filename: info.header_offset for info in zf.infolist()}
    jobs = sorted(((i, key, name) for i, (key, name) in enumerate(items)), key=lambda j: offsets.get(j[2], -1))
    workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(max_retries=TASK_RETRIES)(_zip_chunk)
    limits_ref = ray.put(limits)
    pending = [task.remote(str(zip_path), c, limits_ref) for c in _chunks(jobs, chunk, workers)]
    results: list[HashedImage | None] = [None] * len(jobs)
    done, start = 0, time.perf_counter()
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        for i, hashed in ray.get(ready[0]):
            results[i] = hashed
            done += 1
        if progress:
            progress(done, len(jobs), done / max(time.perf_counter() - start, 1e-9))
    return results  # type: ignore[return-value]
