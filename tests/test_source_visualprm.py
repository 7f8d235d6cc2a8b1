"""VisualPRM400K raw sources: inventory of a local folder in either upstream form, and the `hf`
download of the parquet shards against the loopback Hub (tests/hf_server.py)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hf_server import FakeHub

from pipeline.settings import (
    MMRB2_ANNOTATION_COMMIT,
    MMRB2_ANNOTATION_REPO,
    MMRB2_IMAGE_REPO,
    MMRB2_TASKS,
    VISUALPRM_REPO,
    VISUALPRM_UPSTREAM_REPO,
)
from pipeline.mmrb2.source import fetch_mmrb2_hf
from pipeline.sources import hf as hf_source
from pipeline.sources.base import ChecksumCache, SourceError
from pipeline.visualprm import source as visualprm_source
from pipeline.visualprm.source import (
    fetch_visualprm_hf,
    prm_image_root,
    prm_image_zips,
    prm_jsonl_files,
    prm_parquet_files,
    snapshot_visualprm,
)

SHARD_0 = "data/train-00000-of-00002.parquet"
SHARD_1 = "data/train-00001-of-00002.parquet"

_MEDIA = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_shard(first_id: int, rows: int = 3, *, embed: bool = False) -> bytes:
    """A small parquet shard with the columns of mm-eval/VisualPRM400K."""
    ids, media, messages = [], [], []
    for i in range(first_id, first_id + rows):
        ids.append(f"vprm-{i:05d}")
        media.append([{"bytes": b"\xff\xd8fake-jpeg-%d" % i if embed else None, "path": f"images/ai2d/{i}.png"}])
        messages.append(
            json.dumps(
                [
                    {"from": "system", "value": "You are a PRM."},
                    {"from": "human", "value": f"### Question:\n<image>\nq{i}\n\n### Solution Process:\nstep 1"},
                    {"from": "gpt", "value": "+"},
                    {"from": "human", "value": "step 2"},
                    {"from": "gpt", "value": "-"},
                ]
            )
        )
    table = pa.table(
        {"id": pa.array(ids, pa.string()), "media": pa.array(media, _MEDIA), "messages": pa.array(messages, pa.string())}
    )
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def make_zip(names: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in names.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.fixture
def cache(tmp_path) -> ChecksumCache:
    return ChecksumCache(tmp_path / "raw" / "checksums.json")


# --- local: parquet form ---------------------------------------------------------------------------


def write_parquet_form(root: Path, shards: dict[str, bytes]) -> Path:
    for name, data in shards.items():
        path = root / VISUALPRM_REPO / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root / VISUALPRM_REPO


def test_parquet_form_lists_each_shard_with_its_checksum(tmp_path, cache):
    root = tmp_path / "mirror"
    shards = {SHARD_1: make_shard(3), SHARD_0: make_shard(0, embed=True)}
    folder = write_parquet_form(root, {**shards, "README.md": b"# card\n"})

    snap = snapshot_visualprm(root, "local", cache, revisions={"local": str(root)})

    assert snap is not None and snap.source == "local" and snap.revisions == {"local": str(root)}
    assert [f.role for f in snap.files] == [f"prm_parquet:{VISUALPRM_REPO}/{SHARD_0}", f"prm_parquet:{VISUALPRM_REPO}/{SHARD_1}"]
    assert snap.checksums() == {f"prm_parquet:{VISUALPRM_REPO}/{n}": sha256(d) for n, d in shards.items()}
    assert [f.size for f in snap.files] == [len(shards[SHARD_0]), len(shards[SHARD_1])]
    assert all(f.origin == f.path for f in snap.files)
    assert prm_parquet_files(snap) == [folder.resolve() / SHARD_0, folder.resolve() / SHARD_1]
    assert prm_jsonl_files(snap) == [] and prm_image_zips(snap) == []
    assert prm_image_root(snap) == folder.resolve()
    assert pq.read_table(prm_parquet_files(snap)[0]).column_names == ["id", "media", "messages"]


def test_empty_shard_is_a_source_error_naming_it(tmp_path, cache):
    root = tmp_path / "mirror"
    write_parquet_form(root, {SHARD_0: make_shard(0), SHARD_1: b""})
    with pytest.raises(SourceError, match=re.escape(SHARD_1.split("/")[-1]) + ".*empty"):
        snapshot_visualprm(root, "local", cache)


def test_git_lfs_pointer_or_truncated_shard_is_a_source_error(tmp_path, cache):
    root = tmp_path / "mirror"
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 123\n"
    write_parquet_form(root, {SHARD_0: pointer})
    with pytest.raises(SourceError, match="git lfs pull"):
        snapshot_visualprm(root, "local", cache)

    write_parquet_form(root, {SHARD_0: make_shard(0)[:-10]})
    with pytest.raises(SourceError, match="not a complete parquet file"):
        snapshot_visualprm(root, "local", cache)


# --- local: InternVL form --------------------------------------------------------------------------


def write_internvl_form(root: Path) -> Path:
    folder = root / VISUALPRM_UPSTREAM_REPO
    files = {
        "annotations/ai2d_prm.jsonl": b'{"id": 0, "image": "ai2d/0.png", "conversations": []}\n',
        "annotations/mavis_geo_prm.jsonl": b'{"id": 1, "image": "mavis/1.png", "conversations": []}\n',
        "images/ai2d.zip": make_zip({"ai2d/9.png": b"png-9"}),
        "images/ai2d/0.png": b"png-0",
        "images/mavis/1.png": b"png-one",
        "README.md": b"# VisualPRM400K\n",
        ".cache/huggingface/download/README.md.metadata": b"tool state",
    }
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def test_jsonl_form_lists_annotations_zips_and_a_digest_of_the_loose_files(tmp_path, cache):
    root = tmp_path / "mirror"
    folder = write_internvl_form(root).resolve()

    snap = snapshot_visualprm(root, "local", cache)

    up = VISUALPRM_UPSTREAM_REPO
    assert [f.role for f in snap.files] == [
        f"prm_jsonl:{up}/annotations/ai2d_prm.jsonl",
        f"prm_jsonl:{up}/annotations/mavis_geo_prm.jsonl",
        f"prm_images_zip:{up}/images/ai2d.zip",
        "prm_images_listing",
    ]
    sums = snap.checksums()
    assert sums[f"prm_jsonl:{up}/annotations/ai2d_prm.jsonl"] == sha256((folder / "annotations/ai2d_prm.jsonl").read_bytes())
    assert sums[f"prm_images_zip:{up}/images/ai2d.zip"] == sha256((folder / "images/ai2d.zip").read_bytes())
    listing = next(f for f in snap.files if f.role == "prm_images_listing")
    assert Path(listing.path) == folder
    # sha256 of the sorted (path, size) pairs as compact JSON:
    # [["README.md",16],["images/ai2d/0.png",5],["images/mavis/1.png",7]]
    assert listing.sha256 == "8aabb88b3ac692ef415f70b4293526cf5beff11544035d6aba12e73e802794d9"
    assert listing.size == 16 + 5 + 7
    assert prm_jsonl_files(snap) == [folder / "annotations/ai2d_prm.jsonl", folder / "annotations/mavis_geo_prm.jsonl"]
    assert prm_image_zips(snap) == [folder / "images/ai2d.zip"]
    assert prm_parquet_files(snap) == []
    assert prm_image_root(snap) == folder


def test_listing_digest_follows_loose_images_only(tmp_path, cache):
    root = tmp_path / "mirror"
    folder = write_internvl_form(root)

    def digest() -> str:
        return snapshot_visualprm(root, "local", cache).checksums()["prm_images_listing"]

    first = digest()
    assert digest() == first  # nothing changed
    (folder / ".cache/huggingface/download/other.metadata").write_bytes(b"more tool state")
    assert digest() == first

    (folder / "images/ai2d/0.png").write_bytes(b"png-0 re-encoded")  # a loose image changed size
    changed = digest()
    assert changed != first
    (folder / "images/ai2d/2.png").write_bytes(b"png-2")  # a loose image added
    added = digest()
    assert added not in (first, changed)
    (folder / "images/ai2d/2.png").rename(folder / "images/ai2d/3.png")  # renamed
    assert digest() not in (first, changed, added)


def test_parquet_form_wins_when_both_are_present(tmp_path, cache):
    root = tmp_path / "mirror"
    write_internvl_form(root)
    folder = write_parquet_form(root, {SHARD_0: make_shard(0)})

    snap = snapshot_visualprm(root, "local", cache)

    assert [f.role for f in snap.files] == [f"prm_parquet:{VISUALPRM_REPO}/{SHARD_0}"]
    assert prm_jsonl_files(snap) == [] and prm_image_root(snap) == folder.resolve()


def test_neither_form_means_absent(tmp_path, cache):
    root = tmp_path / "mirror"
    assert snapshot_visualprm(root, "local", cache) is None  # not even the folder
    (root / MMRB2_IMAGE_REPO).mkdir(parents=True)
    (root / MMRB2_IMAGE_REPO / "image.zip").write_bytes(make_zip({"images/0_0.jpg": b"x"}))
    (root / VISUALPRM_REPO / "data").mkdir(parents=True)  # empty folders are not a form either
    assert snapshot_visualprm(root, "local", cache) is None


def test_a_dataset_folder_without_its_data_files_is_a_source_error(tmp_path, cache):
    root = tmp_path / "mirror"
    (root / VISUALPRM_UPSTREAM_REPO / "images").mkdir(parents=True)
    (root / VISUALPRM_UPSTREAM_REPO / "images" / "0.png").write_bytes(b"png")
    with pytest.raises(SourceError, match=r"_prm\.jsonl"):
        snapshot_visualprm(root, "local", cache)


# --- hf ------------------------------------------------------------------------------------------


@pytest.fixture
def raw_root(tmp_path) -> Path:
    return tmp_path / "raw" / "hf"


def publish(hub: FakeHub, shards: dict[str, bytes], *, branch: str = "main") -> str:
    return hub.add_dataset_commit(VISUALPRM_REPO, {"README.md": b"# VisualPRM400K\n", **shards}, branch=branch)


def fetch(hub: FakeHub, raw_root: Path, cache: ChecksumCache, **kwargs):
    return fetch_visualprm_hf(raw_root, cache, hf_endpoint=hub.url, **kwargs)


def read_lock(raw_root: Path) -> dict:
    return json.loads((raw_root / "sources.lock.json").read_text())


def shard_dir(raw_root: Path) -> Path:
    return raw_root / VISUALPRM_REPO / "data"


def test_fresh_fetch_downloads_the_shards_and_locks_them(hub, raw_root, cache):
    shards = {SHARD_0: make_shard(0), SHARD_1: make_shard(3)}
    sha = publish(hub, shards)

    snap = fetch(hub, raw_root, cache)

    roles = {f"prm_parquet:{VISUALPRM_REPO}/{n}": n for n in shards}
    assert snap.source == "hf" and snap.revisions == {VISUALPRM_REPO: sha}
    assert snap.checksums() == {role: sha256(shards[n]) for role, n in roles.items()}
    assert {f.role: f.origin for f in snap.files} == {role: f"{VISUALPRM_REPO}@{sha}/{n}" for role, n in roles.items()}
    local = (raw_root / VISUALPRM_REPO).resolve()
    assert prm_parquet_files(snap) == [local / SHARD_0, local / SHARD_1]
    assert prm_image_root(snap) == local
    assert read_lock(raw_root)[VISUALPRM_REPO] == {
        "revision": sha,
        "files": {n: {"sha256": sha256(d), "size": len(d)} for n, d in shards.items()},
    }
    assert sorted(Path(r.path).name for r in hub.body_gets()) == [Path(SHARD_0).name, Path(SHARD_1).name]
    assert not (raw_root / VISUALPRM_REPO / "README.md").exists()  # only the shards are taken
    assert not list(raw_root.rglob("*.part"))


def test_second_fetch_makes_no_request(hub, raw_root, cache):
    publish(hub, {SHARD_0: make_shard(0), SHARD_1: make_shard(3)})
    first = fetch(hub, raw_root, cache)
    hub.clear_log()

    second = fetch(hub, raw_root, cache)

    assert hub.requests == []
    assert second.checksums() == first.checksums() and second.revisions == first.revisions


def test_shards_on_disk_are_kept_when_the_lock_is_lost(hub, raw_root, cache):
    shards = {SHARD_0: make_shard(0), SHARD_1: make_shard(3)}
    sha = publish(hub, shards)
    fetch(hub, raw_root, cache)
    (raw_root / "sources.lock.json").unlink()
    hub.clear_log()

    snap = fetch(hub, raw_root, cache)

    assert hub.body_gets() == []  # the Hub's size and sha256 vouch for the files already there
    assert snap.revisions == {VISUALPRM_REPO: sha}
    assert read_lock(raw_root)[VISUALPRM_REPO]["files"][SHARD_1] == {"sha256": sha256(shards[SHARD_1]), "size": len(shards[SHARD_1])}


def test_interrupted_shard_download_is_resumed_within_the_call(hub, raw_root, cache):
    shards = {SHARD_0: make_shard(0), SHARD_1: make_shard(3)}
    publish(hub, shards)
    name = Path(SHARD_1).name
    assert len(shards[SHARD_1]) > 300
    hub.drop_connection_after(name, 200)

    snap = fetch(hub, raw_root, cache)

    assert [(r.status, r.range) for r in hub.body_gets(name)] == [(200, None), (206, "bytes=200-")]
    assert snap.checksums()[f"prm_parquet:{VISUALPRM_REPO}/{SHARD_1}"] == sha256(shards[SHARD_1])


def test_shard_download_killed_in_one_run_resumes_in_the_next(hub, raw_root, cache, monkeypatch):
    shards = {SHARD_0: make_shard(0), SHARD_1: make_shard(3)}
    sha = publish(hub, shards)
    monkeypatch.setattr(hf_source, "DOWNLOAD_ATTEMPTS", 1)
    name = Path(SHARD_0).name
    hub.drop_connection_after(name, 150)

    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache)
    assert name in str(err.value) and "next run resumes" in str(err.value)
    assert (shard_dir(raw_root) / f"{name}.part").stat().st_size == 150
    assert read_lock(raw_root)[VISUALPRM_REPO] == {"revision": sha}  # pinned before downloading

    publish(hub, {SHARD_0: make_shard(100)})  # main moves meanwhile: the pin holds
    snap = fetch(hub, raw_root, cache)

    assert [(r.status, r.range) for r in hub.body_gets(name)] == [(200, None), (206, "bytes=150-")]
    assert snap.revisions == {VISUALPRM_REPO: sha}
    assert snap.checksums() == {f"prm_parquet:{VISUALPRM_REPO}/{n}": sha256(d) for n, d in shards.items()}
    assert not list(raw_root.rglob("*.part"))


def test_repo_without_train_shards_is_a_source_error_naming_what_was_seen(hub, raw_root, cache):
    sha = hub.add_dataset_commit(
        VISUALPRM_REPO, {"README.md": b"hi", "data/test-00000-of-00001.parquet": make_shard(0), "train.jsonl": b"{}"}
    )

    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache)

    msg = str(err.value)
    assert VISUALPRM_REPO in msg and sha in msg and "data/train-*.parquet" in msg
    assert "README.md" in msg and "data/test-00000-of-00001.parquet" in msg and "train.jsonl" in msg


def test_pinned_revision_stays_when_main_moves(hub, raw_root, cache):
    shards = {SHARD_0: make_shard(0), SHARD_1: make_shard(3)}
    old_sha = publish(hub, shards)
    fetch(hub, raw_root, cache)
    lock_before = read_lock(raw_root)

    publish(hub, {SHARD_0: make_shard(10), SHARD_1: make_shard(13)})
    hub.clear_log()
    snap = fetch(hub, raw_root, cache)

    assert snap.revisions == {VISUALPRM_REPO: old_sha}
    assert snap.checksums() == {f"prm_parquet:{VISUALPRM_REPO}/{n}": sha256(d) for n, d in shards.items()}
    assert hub.requests == []  # main was not even asked
    assert read_lock(raw_root) == lock_before


def test_shard_dropped_by_a_newly_pinned_revision_is_removed_locally(hub, raw_root, cache, monkeypatch):
    publish(hub, {SHARD_0: make_shard(0), SHARD_1: make_shard(3)})
    fetch(hub, raw_root, cache)
    only = "data/train-00000-of-00001.parquet"
    new_shard = make_shard(20)
    new_sha = publish(hub, {only: new_shard})
    # A partial download of a dropped shard is stale too.
    (shard_dir(raw_root) / "train-00009-of-00010.parquet.part").write_bytes(b"PAR1")

    monkeypatch.setattr(visualprm_source, "VISUALPRM_REVISION", new_sha)  # moving on is explicit
    snap = fetch(hub, raw_root, cache)

    assert snap.revisions == {VISUALPRM_REPO: new_sha}
    assert snap.checksums() == {f"prm_parquet:{VISUALPRM_REPO}/{only}": sha256(new_shard)}
    assert sorted(p.name for p in shard_dir(raw_root).iterdir()) == [Path(only).name]
    assert read_lock(raw_root)[VISUALPRM_REPO] == {
        "revision": new_sha, "files": {only: {"sha256": sha256(new_shard), "size": len(new_shard)}}
    }


def test_branch_name_as_revision_is_resolved_and_locked(hub, raw_root, cache):
    publish(hub, {SHARD_0: make_shard(0)})
    dev_sha = publish(hub, {SHARD_0: make_shard(5), SHARD_1: make_shard(8)}, branch="dev")

    snap = fetch(hub, raw_root, cache, revision="dev")

    assert snap.revisions == {VISUALPRM_REPO: dev_sha} and len(prm_parquet_files(snap)) == 2
    assert read_lock(raw_root)[VISUALPRM_REPO]["revision"] == dev_sha


def test_unknown_revision_is_a_source_error_and_is_not_locked(hub, raw_root, cache):
    publish(hub, {SHARD_0: make_shard(0)})
    with pytest.raises(SourceError) as err:
        fetch(hub, raw_root, cache, revision="f" * 40)
    assert "f" * 40 in str(err.value) and "VISUALPRM_REVISION" in str(err.value)
    assert not (raw_root / "sources.lock.json").exists()


def test_mmrb2_and_visualprm_share_the_lock_file(hub, raw_root, cache):
    shards = {SHARD_0: make_shard(0)}
    vprm_sha = publish(hub, shards)
    image_sha = hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": make_zip({"images/0_0.jpg": b"jpeg"})})
    notes = {f"benchmark/{t}_response_only.json": json.dumps({"pairs": []}).encode() for t in MMRB2_TASKS}
    hub.add_raw_files(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT, notes)

    fetch(hub, raw_root, cache)
    fetch_mmrb2_hf(raw_root, cache, hf_endpoint=hub.url, github_raw_base=hub.url)
    lock = read_lock(raw_root)
    assert lock[VISUALPRM_REPO]["revision"] == vprm_sha and lock[MMRB2_IMAGE_REPO]["revision"] == image_sha
    assert MMRB2_ANNOTATION_REPO in lock

    # A fetch that read the lock before another one wrote its entry does not drop that entry.
    stale = dict(lock)
    del stale[VISUALPRM_REPO]
    stale[MMRB2_IMAGE_REPO] = dict(stale[MMRB2_IMAGE_REPO], note="rewritten")
    hf_source._save_lock_entry(raw_root / "sources.lock.json", stale, MMRB2_IMAGE_REPO)
    lock = read_lock(raw_root)
    assert lock[VISUALPRM_REPO]["revision"] == vprm_sha and lock[MMRB2_IMAGE_REPO]["note"] == "rewritten"
    del lock[MMRB2_IMAGE_REPO]["note"]
    (raw_root / "sources.lock.json").write_text(json.dumps(lock))

    hub.clear_log()
    fetch(hub, raw_root, cache)
    fetch_mmrb2_hf(raw_root, cache, hf_endpoint=hub.url, github_raw_base=hub.url)
    assert hub.requests == []
