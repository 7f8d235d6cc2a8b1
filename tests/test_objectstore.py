"""Atomic publish on object storage, against moto's standalone S3 server on 127.0.0.1 (a real
HTTP server, no in-process patching): create-only manifest, CAS on CURRENT, racing publishers,
a killed publish, and a store that ignores conditional writes refused."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.s3_server import Proxy, aws_env, make_bucket, start_moto
from warehouse.objectstore import ObjectReleaseStore, PublishConflict, Root, UnsupportedStore


@pytest.fixture(scope="module")
def s3_server():
    proc, url = start_moto()
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def bucket(s3_server, monkeypatch, request):
    name = make_bucket(s3_server, f"b{abs(hash(request.node.name)) % 10**8}")
    for key, value in aws_env(s3_server).items():
        monkeypatch.setenv(key, value)
    return name


def release_files(tmp_path: Path, tag: str) -> dict[str, Path]:
    files = {}
    for rel in ("things.parquet", "exports/train.jsonl"):
        path = tmp_path / tag / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"{tag}:{rel}".encode())
        files[rel] = path
    return files


def test_publish_writes_objects_then_manifest_then_current(bucket, tmp_path):
    store = ObjectReleaseStore(Root.parse(f"s3://{bucket}/data"))
    assert store.current() is None and store.releases() == []
    assert store.publish("r1", release_files(tmp_path, "r1"), {"files_sha256": "a"}) is True
    assert store.current() == "r1" and store.releases() == ["r1"]
    assert store.manifest("r1")["release_id"] == "r1"
    assert store.publish("r1", release_files(tmp_path, "r1"), {"files_sha256": "a"}) is False  # already current
    assert store.publish("r2", release_files(tmp_path, "r2"), {"files_sha256": "b"}) is True
    assert (store.current(), store.releases()) == ("r2", ["r1", "r2"])
    keys = sorted(store._keys("data/releases/r2"))
    assert keys == ["data/releases/r2/exports/train.jsonl", "data/releases/r2/manifest.json", "data/releases/r2/things.parquet"]


def test_two_publishers_racing_from_the_same_current_exactly_one_wins(bucket, tmp_path):
    root = Root.parse(f"s3://{bucket}/race")
    ObjectReleaseStore(root).publish("base", release_files(tmp_path, "base"), {"files_sha256": "0"})
    barrier, results = threading.Barrier(2), {}

    def publish(rid: str) -> None:
        store = ObjectReleaseStore(root)
        store.check_conditional_writes()
        barrier.wait()
        try:
            results[rid] = store.publish(rid, release_files(tmp_path, rid), {"files_sha256": rid}, expect_current="base")
        except PublishConflict as exc:
            results[rid] = str(exc)

    threads = [threading.Thread(target=publish, args=(rid,)) for rid in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [rid for rid, r in results.items() if r is True]
    assert len(winners) == 1, results
    loser = next(rid for rid in results if rid not in winners)
    assert "run again on the new current" in results[loser] and "\n" not in results[loser]
    assert ObjectReleaseStore(root).current() == winners[0]


def test_a_publish_killed_before_its_manifest_leaves_the_previous_release_and_is_swept(bucket, tmp_path):
    root = Root.parse(f"s3://{bucket}/killed")
    store = ObjectReleaseStore(root)
    store.publish("good", release_files(tmp_path, "good"), {"files_sha256": "g"})
    # What a publish killed after its objects and before its manifest leaves behind.
    for rel, path in release_files(tmp_path, "half").items():
        store._put(root.key("releases", "half", rel), path.read_bytes())
    assert store.current() == "good" and store.releases() == ["good"]
    assert store.sweep() == []  # young: it may be a publish in flight on another machine
    assert len(store._keys(root.key("releases", "half"))) == 2
    assert store.sweep(min_age=0) == ["half"]
    assert store._keys(root.key("releases", "half")) == [] and store.releases() == ["good"]


def test_a_manifest_is_never_overwritten(bucket, tmp_path):
    store = ObjectReleaseStore(Root.parse(f"s3://{bucket}/m"))
    store.publish("r1", release_files(tmp_path, "r1"), {"files_sha256": "a"})
    store.publish("r2", release_files(tmp_path, "r2"), {"files_sha256": "b"})
    with pytest.raises(PublishConflict, match="already has a different manifest"):
        store.publish("r1", release_files(tmp_path, "r1"), {"files_sha256": "other"})
    assert store.manifest("r1")["files_sha256"] == "a" and store.current() == "r2"


def test_a_store_that_ignores_conditional_writes_is_refused_once_with_one_line(bucket, monkeypatch, tmp_path, s3_server):
    proxy = Proxy(s3_server, strip_conditions=True)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        store = ObjectReleaseStore(Root.parse(f"s3://{bucket}/weak"))
        with pytest.raises(UnsupportedStore) as caught:
            store.publish("r1", release_files(tmp_path, "r1"), {"files_sha256": "a"})
        message = str(caught.value)
        assert "does not honour conditional writes" in message and "MinIO" in message and "\n" not in message
        assert store.current() is None and store.releases() == []  # nothing was published
    finally:
        proxy.close()


def test_root_urls():
    root = Root.parse("s3://bucket/some/prefix/")
    assert (root.bucket, root.prefix, root.key("releases", "CURRENT")) == ("bucket", "some/prefix", "some/prefix/releases/CURRENT")
    with pytest.raises(Exception, match="expected s3://bucket/prefix"):
        Root.parse("/local/path")


def test_consumers_load_a_release_table_straight_from_the_bucket(bucket, tmp_path):
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    from warehouse import load

    path = tmp_path / "things.parquet"
    pq.write_table(pa.table({"id": list(range(1000)), "label": ["+", "-"] * 500}), path, row_group_size=100)
    store = ObjectReleaseStore(Root.parse(f"s3://{bucket}/data"))
    store.publish("r1", {"things.parquet": path}, {"files_sha256": "x", "tables": {"things": {"rows": 1000}}})
    frame = load("things", home=f"s3://{bucket}/data")
    assert isinstance(frame, pl.LazyFrame)
    assert frame.filter(pl.col("label") == "-").select(pl.len()).collect().item() == 500
    with pytest.raises(KeyError, match="has no table 'nope'"):
        load("nope", home=f"s3://{bucket}/data")
    with pytest.raises(LookupError, match="no release 'r9'"):
        load("things", release="r9", home=f"s3://{bucket}/data")
