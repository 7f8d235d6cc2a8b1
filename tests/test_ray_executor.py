"""Hashing on a local Ray cluster (two CPUs, bound to 127.0.0.1) equals the local path bit for bit."""

from __future__ import annotations

import zipfile

import pytest

from dedupe_images import photo, encode
from pipeline.dedupe.hashing import hash_zip
from pipeline.dedupe.ray_executor import RayUnavailable, connect, hash_zip_ray
from pipeline.settings import ZipLimits


@pytest.fixture(scope="module")
def ray_local():
    ray = connect(None, num_cpus=2)
    yield ray
    ray.shutdown()


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

    assert signal.getsignal(signal.SIGTERM) is not None
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    ray_local.shutdown()
    connect(None, num_cpus=2)
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_an_unreachable_cluster_is_one_line_naming_the_address(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(RayUnavailable, match="no Ray cluster at 127.0.0.1:9") as caught:
        connect("127.0.0.1:9")
    assert "\n" not in str(caught.value)
