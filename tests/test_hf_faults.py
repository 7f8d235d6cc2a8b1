"""Faults of the hf download against a real HTTP server on 127.0.0.1 (tests/hf_server.py): a
connection cut mid-file, a downloading process killed mid-file, bytes that do not match the Hub's
sha256 ETag, and the latter end to end through `rewardhouse run --source hf`."""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import duckdb
import pytest
from conftest import serve_hub_datasets
from hf_server import FakeHub

from pipeline.cli import main
from pipeline.settings import MMRB2_ANNOTATION_COMMIT, MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO, MMRB2_TASKS, VISUALPRM_REPO
from pipeline.sources.base import ChecksumCache, SourceError
from pipeline.sources.hf import DOWNLOAD_ATTEMPTS
from pipeline.mmrb2.sample import write_sample
from pipeline.mmrb2.source import fetch_mmrb2_hf
from pipeline.visualprm.sample import PARQUET_RELPATH, write_visualprm_sample

REPO = Path(__file__).resolve().parents[1]
CHUNK = 1 << 16  # the downloader's read size


def stored_zip(tag: str, payload: int = 400_000) -> bytes:
    """A real zip several read chunks long (incompressible, stored)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("images/0_0.jpg", random.Random(tag).randbytes(payload))
    return buf.getvalue()


def publish(hub: FakeHub, zip_bytes: bytes) -> str:
    notes = {f"benchmark/{t}_response_only.json": json.dumps({"pairs": []}).encode() for t in MMRB2_TASKS}
    hub.add_raw_files(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT, notes)
    return hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"README.md": b"# images\n", "image.zip": zip_bytes})


@pytest.fixture
def raw_root(tmp_path) -> Path:
    return tmp_path / "raw" / "hf"


def fetch(hub: FakeHub, raw_root: Path, **kwargs):
    cache = ChecksumCache(raw_root.parent / "checksums.json")
    return fetch_mmrb2_hf(raw_root, cache, hf_endpoint=hub.url, github_raw_base=hub.url, **kwargs)


def zip_gets(hub: FakeHub) -> list[tuple[int, str | None]]:
    return [(r.status, r.range) for r in hub.body_gets("image.zip")]


def test_connection_cut_mid_chunk_resumes_from_that_byte_and_is_byte_identical(hub, raw_root):
    data = stored_zip("cut")
    publish(hub, data)
    hub.drop_connection_after("image.zip", 100_000)

    snap = fetch(hub, raw_root)

    assert zip_gets(hub) == [(200, None), (206, "bytes=100000-")]
    assert snap.image_zip.read_bytes() == data
    assert snap.checksums()["image_zip"] == hashlib.sha256(data).hexdigest()
    assert not list(raw_root.rglob("*.part"))


_CHILD = """
import sys
from pathlib import Path
from pipeline.sources.base import ChecksumCache
from pipeline.mmrb2.source import fetch_mmrb2_hf
raw, url = Path(sys.argv[1]), sys.argv[2]
fetch_mmrb2_hf(raw, ChecksumCache(raw.parent / "checksums.json"), hf_endpoint=url, github_raw_base=url)
"""


def test_killed_download_process_is_resumed_from_its_part_file_by_the_next_run(hub, raw_root, tmp_path):
    data = stored_zip("kill")
    publish(hub, data)
    hub.hold_after("image.zip", 3 * CHUNK)  # the transfer stalls there: the process is killed mid-file
    part = raw_root / MMRB2_IMAGE_REPO / "image.zip.part"
    errors = tmp_path / "child.err"

    with open(errors, "wb") as err:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(raw_root), hub.url], cwd=REPO, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while not (part.is_file() and part.stat().st_size >= 3 * CHUNK):
            assert child.poll() is None, errors.read_text()
            assert time.monotonic() < deadline, f"no partial download appeared; {errors.read_text()}"
            time.sleep(0.05)
        child.kill()
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        hub.release()
    kept = part.stat().st_size
    assert kept == 3 * CHUNK and not (raw_root / MMRB2_IMAGE_REPO / "image.zip").exists()

    snap = fetch(hub, raw_root)

    assert zip_gets(hub) == [(200, None), (206, f"bytes={kept}-")]
    assert snap.image_zip.read_bytes() == data
    assert not part.exists()


def test_bytes_not_matching_the_etag_are_retried_then_refused_and_the_old_zip_stays(hub, raw_root):
    old = stored_zip("old")
    old_sha = publish(hub, old)
    first = fetch(hub, raw_root)
    new_sha = hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": stored_zip("new")})
    hub.serve_damaged("image.zip")
    hub.clear_log()
    messages: list[str] = []

    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, image_revision=new_sha, log=messages.append)

    msg = str(err.value)
    assert "\n" not in msg
    assert "image.zip" in msg and new_sha in msg and "failed verification" in msg and "sha256" in msg
    retries = [m for m in messages if "damaged download discarded" in m]
    assert [re.search(r"attempt (\d+/\d+)", m).group(1) for m in retries] == [
        f"{i}/{DOWNLOAD_ATTEMPTS}" for i in range(1, DOWNLOAD_ATTEMPTS + 1)
    ]
    assert len(hub.body_gets("image.zip")) == DOWNLOAD_ATTEMPTS
    # Nothing damaged is left where a run would take it, and the pinned snapshot is intact.
    assert sorted(p.name for p in (raw_root / MMRB2_IMAGE_REPO).iterdir()) == ["image.zip"]
    assert (raw_root / MMRB2_IMAGE_REPO / "image.zip").read_bytes() == old
    lock = json.loads((raw_root / "sources.lock.json").read_text())[MMRB2_IMAGE_REPO]
    assert lock["revision"] == old_sha and lock["zip"]["sha256"] == hashlib.sha256(old).hexdigest()

    hub.clear_log()
    again = fetch(hub, raw_root)
    assert hub.requests == []
    assert again.checksums() == first.checksums() and again.revisions == first.revisions


def test_bytes_damaged_once_are_fetched_again_and_kept_once_they_match(hub, raw_root):
    data = stored_zip("once")
    publish(hub, data)
    hub.serve_damaged("image.zip", times=1)
    messages: list[str] = []

    snap = fetch(hub, raw_root, log=messages.append)

    assert zip_gets(hub) == [(200, None), (200, None)]
    assert snap.image_zip.read_bytes() == data
    assert sum("damaged download discarded" in m and "attempt 1/" in m for m in messages) == 1


def test_cli_run_on_damaged_bytes_fails_in_one_line_and_keeps_the_release(hub, home, tmp_path, monkeypatch, capfd):
    upstream = tmp_path / "upstream"
    write_sample(upstream)
    write_visualprm_sample(upstream)
    zip_bytes = (upstream / MMRB2_IMAGE_REPO / "image.zip").read_bytes()
    hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": zip_bytes})
    bench = upstream / MMRB2_ANNOTATION_REPO / "benchmark"
    hub.add_raw_files(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT,
                      {f"benchmark/{p.name}": p.read_bytes() for p in bench.glob("*.json")})
    hub.add_dataset_commit(VISUALPRM_REPO, {PARQUET_RELPATH[len(VISUALPRM_REPO) + 1:]: (upstream / PARQUET_RELPATH).read_bytes()})
    serve_hub_datasets(hub, upstream)
    monkeypatch.setenv("REWARDHOUSE_GITHUB_RAW", hub.url)
    assert main(["run", "--source", "hf"]) == 0
    current = (home / "releases" / "CURRENT").read_text().strip()
    capfd.readouterr()

    buf = io.BytesIO(zip_bytes)
    with zipfile.ZipFile(buf, "a") as zf:
        zf.comment = b"a later upstream commit"
    bad_sha = hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": buf.getvalue()})
    hub.serve_damaged("image.zip")

    code = main(["run", "--source", "hf", "--set", f"hf_image_revision={bad_sha}"])

    out, err = capfd.readouterr()
    assert code != 0
    assert "Traceback" not in out + err
    named = [line for line in err.splitlines() if "image.zip" in line and bad_sha in line]
    assert len(named) == 1 and "failed verification" in named[0], err
    assert (home / "releases" / "CURRENT").read_text().strip() == current
    assert (home / "raw" / "hf" / MMRB2_IMAGE_REPO / "image.zip").read_bytes() == zip_bytes
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select release_id from releases where is_current").fetchall() == [(current,)]

    hub.clear_log()
    assert main(["run", "--source", "hf"]) == 0
    assert "unchanged (no new release)" in capfd.readouterr().out
    assert hub.body_gets() == []
