"""The `local` source: a folder mirroring the upstream repositories, used in place."""

from pathlib import Path

import pytest

from pipeline.settings import MMRB2_IMAGE_REPO
from pipeline.sources.base import ChecksumCache, SourceError, sha256_file
from pipeline.mmrb2.source import fetch_local
from pipeline.mmrb2.sample import write_sample


def test_images_zip_name_is_accepted_and_files_are_checksummed(tmp_path):
    write_sample(tmp_path / "m")
    zdir = tmp_path / "m" / MMRB2_IMAGE_REPO
    (zdir / "image.zip").rename(zdir / "images.zip")
    snap = fetch_local(tmp_path / "m", ChecksumCache(tmp_path / "c.json"))
    assert snap.image_zip.name == "images.zip"
    assert snap.checksums()["image_zip"] == sha256_file(zdir / "images.zip")
    assert {f.role for f in snap.files} == {"image_zip", "annotations:t2i", "annotations:edit",
                                           "annotations:interleaved", "annotations:reasoning", "new_task_release"}


def test_checksum_cache_hashes_an_unchanged_file_once(tmp_path, monkeypatch):
    import hashlib

    write_sample(tmp_path / "m")
    hashed = []

    def counting(path):
        hashed.append(Path(path).name)
        return sha256_file(path)

    monkeypatch.setattr("pipeline.sources.base.sha256_file", counting)
    first = fetch_local(tmp_path / "m", ChecksumCache(tmp_path / "c.json"))
    # The first fetch hashes each of the six files once.
    assert sorted(hashed) == sorted(["image.zip", "t2i_response_only.json", "edit_response_only.json",
                                     "interleaved_response_only.json", "reasoning_response_only.json",
                                     "new_task_release.json"])
    hashed.clear()
    second = fetch_local(tmp_path / "m", ChecksumCache(tmp_path / "c.json"))  # a fresh cache object reads the saved one
    assert hashed == []
    assert second.checksums() == first.checksums()
    zip_path = tmp_path / "m" / MMRB2_IMAGE_REPO / "image.zip"
    assert first.checksums()["image_zip"] == hashlib.sha256(zip_path.read_bytes()).hexdigest()
    # A changed file is hashed again.
    (tmp_path / "m" / "facebookresearch/MMRB2/benchmark/t2i_response_only.json").write_text('{"pairs": []}')
    third = fetch_local(tmp_path / "m", ChecksumCache(tmp_path / "c.json"))
    assert hashed == ["t2i_response_only.json"]
    assert third.checksums()["annotations:t2i"] == hashlib.sha256(b'{"pairs": []}').hexdigest()


def test_missing_annotation_file_names_what_is_missing(tmp_path):
    write_sample(tmp_path / "m")
    (tmp_path / "m" / "facebookresearch/MMRB2/benchmark/edit_response_only.json").unlink()
    with pytest.raises(SourceError, match="missing: facebookresearch/MMRB2/benchmark/edit_response_only.json"):
        fetch_local(tmp_path / "m", ChecksumCache(tmp_path / "c.json"))
