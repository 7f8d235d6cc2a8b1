"""A Ray cluster of its own (`ray start --head` on 127.0.0.1, token authentication as Ray 2.59+
does by default), joined by address from a separate driver process: the work runs there, and
when the head is killed in the middle of it the driver fails with one line naming the address
instead of hanging in Ray's reconnect loop."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from dedupe_images import encode, photo
from pipeline.dedupe.ray_executor import reachable
from tests.s3_server import free_port

RAY = Path(sys.executable).with_name("ray")
DRIVER = """
import sys
from pipeline.dedupe.ray_executor import RayUnavailable, hash_zip_ray
from pipeline.settings import ZipLimits
items = [(str(i), f"i/{i}.jpg") for i in range(int(sys.argv[3]))]
try:
    hash_zip_ray(sys.argv[1], items, ZipLimits(), address=sys.argv[2], chunk=2,
                 progress=lambda done, total, rate: print("progress", done, flush=True))
    print("finished")
except RayUnavailable as exc:
    print(f"rewardhouse: {exc}")
    sys.exit(1)
"""


@pytest.mark.timeout(300)
def test_a_lost_cluster_fails_the_work_with_one_line_naming_the_address(tmp_path):
    z = tmp_path / "images.zip"
    n = 300
    with zipfile.ZipFile(z, "w") as zf:
        for i in range(n):
            zf.writestr(f"i/{i}.jpg", encode(photo(i), "JPEG", 95))
    port = free_port()
    # A cluster on loopback only (Ray otherwise swaps 127.0.0.1 for the machine's outward address).
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_AUTH_TOKEN": secrets.token_hex(16), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    head = subprocess.Popen([str(RAY), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--node-ip-address=127.0.0.1", "--include-dashboard=false"],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not reachable(("127.0.0.1", port), 0.2):
            assert head.poll() is None and time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(0.1)
        address = f"127.0.0.1:{port}"
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(z), address, str(n)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = driver.stdout.readline()
        assert first.startswith("progress"), driver.communicate(timeout=30)
    finally:
        os.killpg(head.pid, signal.SIGKILL)  # the head and every process of its node
        head.wait(30)
    out, err = driver.communicate(timeout=120)
    assert driver.returncode == 1, out + err[-2000:]
    lines = [line for line in out.splitlines() if line.startswith("rewardhouse:")]
    assert lines == [lines[0]] and f"lost the Ray cluster at {address}" in lines[0], out
    assert "finished" not in out and "Traceback" not in err

