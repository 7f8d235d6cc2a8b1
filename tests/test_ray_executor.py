"""Hashing on a local Ray cluster (two worker CPUs, bound to 127.0.0.1) equals the local path bit
for bit, for a zip on disk, a zip read by range from moto's S3 server, and files; a worker killed
in the middle of a task is survived (its task is retried)."""

from __future__ import annotations

import os
import signal
import threading
import time
import zipfile
from pathlib import Path

import pytest

from dedupe_images import photo, encode
from pipeline.dedupe.executor import Executor
from pipeline.dedupe.hashing import hash_files, hash_zip
from pipeline.dedupe.ray_executor import RayUnavailable, connect, hash_zip_ray
from pipeline.settings import ZipLimits
from tests.s3_server import Proxy, aws_env, make_bucket, start_moto


@pytest.fixture(scope="module")
def s3():
    """The S3 server, and the AWS settings in the environment before Ray starts its workers
    (they inherit it: credentials reach them by the environment, never through Ray)."""
    proc, url = start_moto()
    proxy = Proxy(url)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in aws_env(proxy.url).items():
            mp.setenv(key, value)
        yield url, proxy
    proxy.close()
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def ray_local(s3):
    ray = connect(None, num_cpus=2)
    yield ray
    ray.shutdown()


def test_the_local_ray_instance_has_two_worker_cpus_on_loopback(ray_local):
    assert [(n["NodeManagerAddress"], n["Resources"]["CPU"]) for n in ray_local.nodes()] == [("127.0.0.1", 2.0)]


def make_zip(path: Path, n: int, quality: int = 85) -> list[tuple[str, str]]:
    items = []
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(n):
            zf.writestr(f"images/{i}.jpg", encode(photo(i), "JPEG", quality))
            items.append((f"{i}.jpg", f"images/{i}.jpg"))
    return items


def task_pids(name: str) -> list[int]:
    """Ray worker processes running a task of `name` now (Ray titles a busy worker `ray::<name>`)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(f"ray::{name}".encode()):
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_ray_hashes_equal_the_local_path(ray_local, tmp_path):
    z = tmp_path / "images.zip"
    items = []
    with zipfile.ZipFile(z, "w") as zf:
        for i in range(40):
            zf.writestr(f"images/{i}.jpg", encode(photo(i), "JPEG", 85))
            items.append((f"{i}.jpg", f"images/{i}.jpg"))
        zf.writestr("images/broken.jpg", b"not an image")
        items.append(("broken.jpg", "images/broken.jpg"))
    items.append(("absent.jpg", "images/absent.jpg"))
    seen = []
    got = hash_zip_ray(z, items, ZipLimits(), chunk=8, progress=lambda d, t, r: seen.append((d, t)))
    assert got == hash_zip(z, items, ZipLimits(), workers=1)
    assert seen[-1] == (42, 42) and len(seen) >= 5
    assert got[40].error and got[41].error.startswith("no entry")


def test_joining_ray_leaves_the_run_s_signal_handlers_in_place(ray_local):
    import signal

    def the_runs_own(signum, frame):  # stands for the handlers a run installs (pipeline/stopping.py)
        pass

    saved = {sig: signal.signal(sig, the_runs_own) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        ray_local.shutdown()
        connect(None, num_cpus=2)
        assert {sig: signal.getsignal(sig) for sig in saved} == {sig: the_runs_own for sig in saved}
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_an_unreachable_cluster_is_one_line_naming_the_address(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(RayUnavailable, match="no Ray cluster at 127.0.0.1:9: nothing accepts connections") as caught:
        connect("127.0.0.1:9")  # at once: Ray's own retries would take minutes
    assert "\n" not in str(caught.value)


def test_ray_hashes_a_zip_read_by_range_from_the_s3_server_as_the_local_path_does(ray_local, s3, tmp_path):
    endpoint, proxy = s3
    z = tmp_path / "images.zip"
    items = make_zip(z, 48)
    import obstore
    from obstore.store import S3Store

    bucket = make_bucket(endpoint, "ray-zips")
    obstore.put(S3Store(bucket, config={"endpoint": endpoint, "region": "us-east-1"},
                        client_options={"allow_http": True}), "zips/images.zip", z)
    before = len(proxy.requests)
    got = hash_zip_ray(f"s3://{bucket}/zips/images.zip", items, ZipLimits(), chunk=8)
    assert got == hash_zip(z, items, ZipLimits(), workers=1)
    gets = [path for method, path in proxy.requests[before:] if method == "GET"]
    assert len(gets) >= 7 and all(path.startswith(f"/{bucket}/zips/images.zip") for path in gets)


def test_ray_hashes_files_as_the_local_path_does(ray_local, tmp_path):
    items = []
    for i in range(20):
        path = tmp_path / f"{i}.png"
        path.write_bytes(encode(photo(100 + i), "PNG"))
        items.append((path.name, path))
    items.append(("gone.png", tmp_path / "gone.png"))
    got = Executor("ray", chunk=4).hash_files(items)
    assert got == hash_files(items, workers=1)
    assert got[-1].error.startswith("unreadable file")


def test_a_ray_worker_killed_mid_task_is_survived(ray_local, tmp_path):
    z = tmp_path / "images.zip"
    items = make_zip(z, 160, quality=95)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(got=hash_zip_ray(z, items, ZipLimits(), chunk=4)))
    worker.start()
    killed = []
    deadline = time.monotonic() + 120
    while not killed and worker.is_alive() and time.monotonic() < deadline:
        for pid in task_pids("_zip_chunk"):  # a worker busy with one of our tasks
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            break
        time.sleep(0.001)
    worker.join(300)
    assert killed, "no worker was seen running a task"
    assert result["got"] == hash_zip(z, items, ZipLimits(), workers=1)


def test_visualprm_images_on_ray_are_the_local_inventory_row_for_row(ray_local, tmp_path):
    """Embedded images (several row groups, a key repeated across them, one without a path, one
    corrupt), a folder, a zip, a missing and a traversing reference: the same rows, rejections,
    hashes and stored files as the local path."""
    import filecmp

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.visualprm.images import ImageStore, inventory_prm_images

    media = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    a, b, c = (encode(photo(200 + i), "JPEG", 85) for i in range(3))
    rows = [[{"bytes": a, "path": "src/a.jpg"}], [{"bytes": encode(photo(210), "PNG"), "path": "src/p.png"}],
            [{"bytes": a, "path": "src/a.jpg"}], [{"bytes": None, "path": "src/b.jpg"}],
            [{"bytes": b"\xff\xd8broken", "path": "src/bad.jpg"}], [{"bytes": c, "path": None}]]
    shard = tmp_path / "train-0.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(len(rows))], "messages": ["[]"] * len(rows),
                             "media": pa.array(rows, type=media)}), shard,
                   row_group_size=2)
    root = tmp_path / "ds"
    (root / "images" / "src").mkdir(parents=True)
    (root / "images" / "src" / "b.jpg").write_bytes(b)
    with zipfile.ZipFile(root / "more.zip", "w") as zf:
        zf.writestr("images/src/z.jpg", c)
        zf.writestr("images/src/y.jpg", encode(photo(220), "JPEG", 80))
    refs = {"src/a.jpg", "src/b.jpg", "src/bad.jpg", "src/z.jpg", "src/y.jpg", "src/none.jpg", "../secret.jpg"}
    local = inventory_prm_images(refs, [shard], root, [root / "more.zip"], ZipLimits(), ImageStore(tmp_path / "local"))
    seen = []
    on_ray = inventory_prm_images(refs, [shard], root, [root / "more.zip"], ZipLimits(), ImageStore(tmp_path / "ray"),
                                  progress=lambda d, t, r: seen.append((d, t)), executor=Executor("ray"))
    assert on_ray[0].to_pylist() == local[0].to_pylist()
    assert on_ray[1:] == local[1:]
    statuses = sorted(r["status"] for r in local[0].to_pylist())
    assert statuses == ["corrupt", "ok", "ok", "ok", "ok", "ok", "ok", "unresolved", "unresolved"]
    stored = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.*"))
    assert len(stored) == 5 and stored == sorted(p.relative_to(tmp_path / "ray") for p in (tmp_path / "ray").rglob("*.*"))
    assert all(filecmp.cmp(tmp_path / "local" / p, tmp_path / "ray" / p, shallow=False) for p in stored)
    assert seen[-1][0] == seen[-1][1]


@pytest.mark.timeout(600)
def test_a_whole_run_on_ray_publishes_the_release_the_local_pool_does(tmp_path):
    """`rewardhouse run --executor ray` (a local Ray instance: no REWARDHOUSE_RAY_ADDRESS) against
    the same sample as a run on the process pool: the same release id, so the same bytes in every
    table, and the image work's progress in the run log."""
    import sqlite3

    from tests import run_control

    ids = {}
    for kind in ("local", "ray"):
        home = tmp_path / kind
        code, out, err = run_control.finish(run_control.start(home, "--executor", kind), 300)
        assert code == 0, err
        ids[kind] = next(line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("release "))
    assert ids["ray"] == ids["local"]
    (db,) = run_control.run_dbs(tmp_path / "ray")
    logged = [row[0] for row in sqlite3.connect(db).execute("select event from event_logs where step_key = 'mmrb2_task_images'")]
    assert any("hashing on a local Ray instance" in e for e in logged)
    prm = [row[0] for row in sqlite3.connect(db).execute("select event from event_logs where step_key = 'visualprm_images'")]
    assert any("reading and hashing on a local Ray instance" in e for e in prm)
    assert any("read and hashed" in e for e in logged)


def test_a_ray_dedupe_says_only_its_own_lines_and_copies_no_environment(tmp_path):
    """`rewardhouse dedupe DIR --executor ray` as a user runs it (under `uv run` when uv is there):
    no Ray start-up lines among its own, and no copy of the environment in Ray's temp folder (the
    workers of a local instance run this interpreter)."""
    import re
    import shutil
    import subprocess
    import sys
    import tempfile

    folder = tmp_path / "imgs"
    folder.mkdir()
    for seed in range(6):
        (folder / f"p{seed}.png").write_bytes(encode(photo(seed)))
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths have a length limit
    try:
        env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
        cli = Path(sys.executable).with_name("rewardhouse")
        repo = Path(__file__).resolve().parents[1]
        uv = shutil.which("uv")
        argv = ([uv, "run", "--frozen", "--extra", "scale", "rewardhouse"] if uv else [str(cli)])
        done = subprocess.run([*argv, "dedupe", str(folder), "--executor", "ray", "--output", str(tmp_path / "c.csv")],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        ours = [line for line in lines if re.match(r"(hashed \d+/6 images|6 images, )", line)]
        assert lines == ours, lines
        copied = sum(p.stat().st_size for p in ray_tmp.rglob("*") if p.is_file() and "runtime_resources" in p.parts)
        assert copied < 10 * 2**20, f"{copied / 2**20:.0f} MB under runtime_resources"
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
