"""The `hf` source against a real HTTP server on 127.0.0.1 (tests/hf_server.py), never the internet."""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import zipfile
from pathlib import Path

import pytest
from hf_server import FakeHub

from pipeline.settings import MMRB2_ANNOTATION_COMMIT, MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO, MMRB2_TASKS
from pipeline.mmrb2.source import fetch_mmrb2_hf
from pipeline.sources import hf as hf_source
from pipeline.sources.base import ChecksumCache, SourceError

TASK_FILES = [f"{t}_response_only.json" for t in MMRB2_TASKS]
NEW_TASK = "new_task_release.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_zip(tag: str = "v1") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("images/0_0.jpg", f"jpeg-0-{tag}".encode() * 8)
        zf.writestr("images/1_0.jpg", f"jpeg-1-{tag}".encode() * 8)
    return buf.getvalue()


def annotation_files(with_new_task: bool = True) -> dict[str, bytes]:
    files = {name: json.dumps({"task": name.split("_")[0], "pairs": []}).encode() for name in TASK_FILES}
    if with_new_task:
        files[NEW_TASK] = json.dumps({"pairs": []}).encode()
    return files


def publish(hub: FakeHub, *, zip_names=("image.zip",), zip_bytes: bytes | None = None, with_new_task=True):
    """Put an MMRB2-shaped upstream on the fake hub; returns (image commit sha, served bytes by file name)."""
    zip_bytes = zip_bytes or make_zip()
    repo_files = {"README.md": b"# MMRB2 images\n", **{name: zip_bytes for name in zip_names}}
    sha = hub.add_dataset_commit(MMRB2_IMAGE_REPO, repo_files)
    notes = annotation_files(with_new_task)
    hub.add_raw_files(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT, {f"benchmark/{n}": b for n, b in notes.items()})
    return sha, {**notes, **{name: zip_bytes for name in zip_names}}


@pytest.fixture
def raw_root(tmp_path) -> Path:
    return tmp_path / "raw" / "hf"


@pytest.fixture
def cache(tmp_path) -> ChecksumCache:
    return ChecksumCache(tmp_path / "raw" / "checksums.json")


def fetch(hub: FakeHub, raw_root: Path, cache: ChecksumCache, **kwargs):
    return fetch_mmrb2_hf(raw_root, cache, hf_endpoint=hub.url, github_raw_base=hub.url, **kwargs)


def read_lock(raw_root: Path) -> dict:
    return json.loads((raw_root / "sources.lock.json").read_text())


# --- (a) fresh fetch ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "zip_names, expected",
    [(("image.zip",), "image.zip"), (("images.zip",), "images.zip"), (("images.zip", "image.zip"), "image.zip")],
)
def test_fresh_fetch_lays_out_files_with_served_checksums(hub, raw_root, cache, zip_names, expected):
    sha, served = publish(hub, zip_names=zip_names)

    snap = fetch(hub, raw_root, cache)

    assert snap.source == "hf"
    assert snap.image_zip == (raw_root / "facebook/MMRB2_image" / expected).resolve()
    assert not any((raw_root / "facebook/MMRB2_image" / n).exists() for n in zip_names if n != expected)
    bench = (raw_root / "facebookresearch/MMRB2/benchmark").resolve()
    assert snap.annotations() == {t: bench / f"{t}_response_only.json" for t in MMRB2_TASKS}
    assert snap.path("new_task_release") == bench / NEW_TASK
    expected_sums = {
        "image_zip": sha256(served[expected]),
        **{f"annotations:{t}": sha256(served[f"{t}_response_only.json"]) for t in MMRB2_TASKS},
        "new_task_release": sha256(served[NEW_TASK]),
    }
    assert snap.checksums() == expected_sums
    assert snap.revisions == {MMRB2_IMAGE_REPO: sha, MMRB2_ANNOTATION_REPO: MMRB2_ANNOTATION_COMMIT}
    origins = {f.role: f.origin for f in snap.files}
    assert origins["image_zip"] == f"{MMRB2_IMAGE_REPO}@{sha}/{expected}"
    assert origins["annotations:t2i"] == (
        f"{hub.url}/{MMRB2_ANNOTATION_REPO}/{MMRB2_ANNOTATION_COMMIT}/benchmark/t2i_response_only.json"
    )
    assert zipfile.ZipFile(snap.image_zip).namelist() == ["images/0_0.jpg", "images/1_0.jpg"]
    assert not list(raw_root.rglob("*.part")) and not list(raw_root.rglob("*.incomplete"))
    # Each file body was fetched exactly once.
    assert sorted(Path(r.path).name for r in hub.body_gets()) == sorted([expected, *TASK_FILES, NEW_TASK])


# --- (b) no second download ---------------------------------------------------------------------


def test_second_fetch_downloads_nothing(hub, raw_root, cache):
    publish(hub)
    first = fetch(hub, raw_root, cache)
    hub.clear_log()

    second = fetch(hub, raw_root, cache)

    assert hub.body_gets() == []
    assert hub.requests == []  # pinned commit + recorded checksums: not even a HEAD or a listing
    assert second.checksums() == first.checksums()
    assert second.revisions == first.revisions


def test_a_changed_annotation_file_is_fetched_again(hub, raw_root, cache):
    _, served = publish(hub)
    fetch(hub, raw_root, cache)
    t2i = raw_root / "facebookresearch/MMRB2/benchmark/t2i_response_only.json"
    t2i.write_bytes(b'{"pairs": ["edited by hand"]}')
    hub.clear_log()

    snap = fetch(hub, raw_root, cache)

    assert [Path(r.path).name for r in hub.body_gets()] == ["t2i_response_only.json"]
    assert snap.checksums()["annotations:t2i"] == sha256(served["t2i_response_only.json"])


def test_zip_lost_from_disk_is_fetched_again(hub, raw_root, cache):
    _, served = publish(hub)
    fetch(hub, raw_root, cache)
    (raw_root / "facebook/MMRB2_image/image.zip").unlink()
    hub.clear_log()

    snap = fetch(hub, raw_root, cache)

    assert [Path(r.path).name for r in hub.body_gets()] == ["image.zip"]
    assert snap.checksums()["image_zip"] == sha256(served["image.zip"])


# --- (c) resume -----------------------------------------------------------------------------------


def _resumed_from(requests) -> list[int]:
    return [int(m.group(1)) for r in requests if r.range and (m := re.fullmatch(r"bytes=(\d+)-", r.range))]


def test_interrupted_zip_download_is_resumed_with_range(hub, raw_root, cache):
    _, served = publish(hub)
    size = len(served["image.zip"])
    assert size > 300
    hub.drop_connection_after("image.zip", 150)

    snap = fetch(hub, raw_root, cache)

    gets = hub.body_gets("image.zip")
    assert [(r.status, r.range) for r in gets] == [(200, None), (206, "bytes=150-")]
    assert snap.checksums()["image_zip"] == sha256(served["image.zip"])
    assert snap.image_zip.read_bytes() == served["image.zip"]
    assert not list((raw_root / "facebook/MMRB2_image").rglob("*.part"))


def test_zip_download_killed_in_one_run_resumes_in_the_next(hub, raw_root, cache, monkeypatch):
    _, served = publish(hub)
    monkeypatch.setattr(hf_source, "DOWNLOAD_ATTEMPTS", 1)
    hub.drop_connection_after("image.zip", 120)

    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache)
    assert "image.zip" in str(err.value) and "next run resumes" in str(err.value)
    assert (raw_root / "facebook/MMRB2_image/image.zip.part").stat().st_size == 120

    snap = fetch(hub, raw_root, cache)
    assert [(r.status, r.range) for r in hub.body_gets("image.zip")] == [(200, None), (206, "bytes=120-")]
    assert snap.checksums()["image_zip"] == sha256(served["image.zip"])


def test_interrupted_annotation_download_is_resumed_with_range(hub, raw_root, cache):
    _, served = publish(hub)
    hub.drop_connection_after("edit_response_only.json", 10)
    messages: list[str] = []

    snap = fetch(hub, raw_root, cache, log=messages.append)

    gets = hub.body_gets("edit_response_only.json")
    assert [(r.status, r.range) for r in gets] == [(200, None), (206, "bytes=10-")]
    assert snap.checksums()["annotations:edit"] == sha256(served["edit_response_only.json"])
    assert any("resuming edit_response_only.json.part at byte 10" in m for m in messages)


def test_partial_annotation_left_by_an_earlier_run_is_resumed(hub, raw_root, cache):
    _, served = publish(hub)
    data = served["interleaved_response_only.json"]
    bench = raw_root / "facebookresearch/MMRB2/benchmark"
    bench.mkdir(parents=True)
    (bench / "interleaved_response_only.json.part").write_bytes(data[:7])
    # The lock says this folder belongs to the pinned commit, so the partial file is trusted.
    (raw_root / "sources.lock.json").write_text(
        json.dumps({MMRB2_ANNOTATION_REPO: {"revision": MMRB2_ANNOTATION_COMMIT, "files": {}}})
    )

    snap = fetch(hub, raw_root, cache)

    gets = hub.body_gets("interleaved_response_only.json")
    assert [(r.status, r.range) for r in gets] == [(206, "bytes=7-")]
    assert snap.checksums()["annotations:interleaved"] == sha256(data)
    assert not (bench / "interleaved_response_only.json.part").exists()


def test_resume_starts_over_when_the_server_ignores_range(hub, raw_root, cache):
    _, served = publish(hub)
    hub.honour_range = False
    bench = raw_root / "facebookresearch/MMRB2/benchmark"
    bench.mkdir(parents=True)
    (bench / "t2i_response_only.json.part").write_bytes(b"garbage that must not survive")
    (raw_root / "sources.lock.json").write_text(
        json.dumps({MMRB2_ANNOTATION_REPO: {"revision": MMRB2_ANNOTATION_COMMIT, "files": {}}})
    )

    snap = fetch(hub, raw_root, cache)

    assert [(r.status, r.range) for r in hub.body_gets("t2i_response_only.json")] == [(200, "bytes=29-")]
    assert snap.checksums()["annotations:t2i"] == sha256(served["t2i_response_only.json"])


def test_annotation_that_keeps_failing_keeps_its_part_and_says_so(hub, raw_root, cache, monkeypatch):
    publish(hub)
    monkeypatch.setattr(hf_source, "DOWNLOAD_ATTEMPTS", 1)
    hub.drop_connection_after("reasoning_response_only.json", 5)

    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache)

    msg = str(err.value)
    assert "reasoning_response_only.json" in msg and MMRB2_ANNOTATION_COMMIT in msg
    assert "next run resumes" in msg
    assert (raw_root / "facebookresearch/MMRB2/benchmark/reasoning_response_only.json.part").stat().st_size == 5

    fetch(hub, raw_root, cache)  # the next run completes it
    assert [r.range for r in hub.body_gets("reasoning_response_only.json")] == [None, "bytes=5-"]


# --- (d) revision locking -------------------------------------------------------------------------


def test_first_fetch_locks_the_image_revision_and_later_fetches_keep_it(hub, raw_root, cache):
    old_sha, served = publish(hub)
    fetch(hub, raw_root, cache)
    assert read_lock(raw_root)[MMRB2_IMAGE_REPO] == {
        "revision": old_sha, "file": "image.zip", "zip": {"sha256": sha256(served["image.zip"]), "size": len(served["image.zip"])}
    }
    assert read_lock(raw_root)[MMRB2_ANNOTATION_REPO]["files"]["t2i_response_only.json"]["sha256"] == sha256(
        served["t2i_response_only.json"]
    )

    new_zip = make_zip("v2")
    new_sha = hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"images.zip": new_zip})  # upstream main moves
    hub.clear_log()
    snap = fetch(hub, raw_root, cache)

    assert snap.revisions[MMRB2_IMAGE_REPO] == old_sha
    assert snap.checksums()["image_zip"] == sha256(served["image.zip"])
    assert not any("/revision/" in r.path for r in hub.requests)  # main was not even asked
    assert read_lock(raw_root)[MMRB2_IMAGE_REPO]["revision"] == old_sha

    # Moving on is explicit: pin the new commit.
    snap = fetch(hub, raw_root, cache, image_revision=new_sha)
    assert snap.revisions[MMRB2_IMAGE_REPO] == new_sha
    assert snap.image_zip.name == "images.zip"
    assert snap.checksums()["image_zip"] == sha256(new_zip)
    assert not (raw_root / "facebook/MMRB2_image/image.zip").exists()
    assert read_lock(raw_root)[MMRB2_IMAGE_REPO] == {
        "revision": new_sha, "file": "images.zip", "zip": {"sha256": sha256(new_zip), "size": len(new_zip)}
    }


def test_branch_name_as_image_revision_is_resolved_to_a_commit(hub, raw_root, cache):
    sha, _ = publish(hub)
    snap = fetch(hub, raw_root, cache, image_revision="main")
    assert snap.revisions[MMRB2_IMAGE_REPO] == sha
    assert read_lock(raw_root)[MMRB2_IMAGE_REPO]["revision"] == sha


def test_optional_new_task_release_may_be_missing(hub, raw_root, cache):
    publish(hub, with_new_task=False)
    messages: list[str] = []

    snap = fetch(hub, raw_root, cache, log=messages.append)

    assert snap.path("new_task_release") is None
    assert any(NEW_TASK in m and "404" in m for m in messages)
    assert read_lock(raw_root)[MMRB2_ANNOTATION_REPO]["files"][NEW_TASK] == {"absent": True}
    hub.clear_log()
    fetch(hub, raw_root, cache)
    assert hub.requests == []  # the 404 is recorded for this immutable commit


# --- (e) helpful failures -------------------------------------------------------------------------


def test_repo_without_a_zip_is_a_source_error_naming_what_was_seen(hub, raw_root, cache):
    sha = hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"README.md": b"hi", "data/test.parquet": b"PAR1"})

    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache)

    msg = str(err.value)
    assert MMRB2_IMAGE_REPO in msg and sha in msg
    assert "image.zip" in msg and "images.zip" in msg
    assert "README.md" in msg and "data/test.parquet" in msg


def test_404_on_a_required_annotation_is_a_source_error(hub, raw_root, cache):
    publish(hub)
    hub.remove_raw_file(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT, "benchmark/edit_response_only.json")

    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache)

    msg = str(err.value)
    assert "edit_response_only.json" in msg and "404" in msg
    assert f"{hub.url}/{MMRB2_ANNOTATION_REPO}/{MMRB2_ANNOTATION_COMMIT}/benchmark/edit_response_only.json" in msg
    assert "MMRB2_ANNOTATION_COMMIT" in msg


def test_private_repo_without_token_says_to_set_hf_token(hub, raw_root, cache):
    hub.token = "s3cret"
    publish(hub)

    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache)
    assert "HF_TOKEN" in str(err.value) and MMRB2_IMAGE_REPO in str(err.value)

    snap = fetch(hub, raw_root, cache, token="s3cret")
    assert snap.image_zip is not None
    hub_answers = [r for r in hub.requests if r.path.startswith(("/api/", "/datasets/")) and r.status == 200]
    assert hub_answers and all(r.authorization == "Bearer s3cret" for r in hub_answers)


def test_unknown_pinned_revision_is_a_source_error(hub, raw_root, cache):
    publish(hub)
    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache, image_revision="0" * 40)
    msg = str(err.value)
    assert "0" * 40 in msg and "image_revision" in msg
    assert not (raw_root / "sources.lock.json").exists()  # a revision that failed is not pinned


def test_unreachable_endpoint_is_a_source_error(raw_root, cache, hub):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"

    with pytest.raises(SourceError) as err:
        fetch_mmrb2_hf(raw_root, cache, hf_endpoint=dead, github_raw_base=dead)

    msg = str(err.value)
    assert dead in msg and "HF_ENDPOINT" in msg


def test_corrupt_lock_file_is_a_source_error(hub, raw_root, cache):
    raw_root.mkdir(parents=True)
    (raw_root / "sources.lock.json").write_text("{not json")
    with pytest.raises(SourceError, match="sources.lock.json"):
        fetch(hub, raw_root, cache)
