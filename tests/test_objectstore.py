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


# --- a run's publish, by what the bucket says ------------------------------------------------------
CURRENT_KEY = r"/releases/CURRENT$"


def scratch_release(tmp_path: Path, monkeypatch, url: str, rid: str, machine: str):
    """A run's scratch folder holding its built release `rid` (one small table), as
    warehouse_release leaves it before the publish to the bucket."""
    import pyarrow as pa

    from pipeline.settings import Layout
    from warehouse.duck import publish_release
    from warehouse.store import ReleaseStore

    monkeypatch.setenv("REWARDHOUSE_SCRATCH", str(tmp_path / machine))
    layout = Layout(url)
    table = pa.table({"sample_id": [rid] * 3, "step_index": [0, 1, 2], "label": ["+", "-", "+"]})
    publish_release(ReleaseStore(layout.releases), layout.warehouse, rid, {"prm_steps": table},
                    code_version="t", sources={}, settings={"machine": machine})
    (layout.staging / "work").mkdir(parents=True)
    (layout.staging / "work" / "staged.txt").write_text(rid)
    return layout


def test_a_run_built_on_a_release_another_run_has_since_replaced_is_refused_in_one_line(bucket, tmp_path, monkeypatch):
    from warehouse.remote import publish_remote

    url = f"s3://{bucket}/seq"
    ObjectReleaseStore(Root.parse(url)).publish("base", release_files(tmp_path, "base"), {"files_sha256": "0"})
    first, second = (scratch_release(tmp_path, monkeypatch, url, rid, rid) for rid in ("first", "second"))
    # Both runs read CURRENT = base when they started; the first publishes completely, then the second.
    assert publish_remote(first, "first", "base", say=lambda _: None).published is True
    with pytest.raises(PublishConflict) as caught:
        publish_remote(second, "second", "base", say=lambda _: None)
    assert str(caught.value) == (f"release second not published: {url} moved to first since this run read base; "
                                 "run again on the new current")
    store = ObjectReleaseStore(Root.parse(url))
    assert store.current() == "first" and store.releases() == ["base", "first"]  # nothing of the loser uploaded
    # A run whose release is already the current one has nothing to move, whatever it read.
    assert publish_remote(first, "first", "base", say=lambda _: None).published is False
    assert store.current() == "first"


def test_a_swap_whose_answer_is_lost_is_published_when_current_names_the_release(bucket, tmp_path, monkeypatch, s3_server):
    from warehouse.remote import publish_remote

    url = f"s3://{bucket}/lost"
    ObjectReleaseStore(Root.parse(url)).publish("base", release_files(tmp_path, "base"), {"files_sha256": "0"})
    layout = scratch_release(tmp_path, monkeypatch, url, "next", "builder")
    proxy = Proxy(s3_server)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        lost = proxy.fault("PUT", CURRENT_KEY)  # the store applies the swap; its answer never arrives
        outcome = publish_remote(layout, "next", "base", say=lambda _: None)
        assert lost.hits >= 1 and (outcome.published, outcome.warning) == (True, None)
        assert ObjectReleaseStore(Root.parse(url)).current() == "next"
    finally:
        proxy.close()


def test_a_copy_failing_after_the_swap_is_published_with_a_warning(bucket, tmp_path, monkeypatch, s3_server):
    from warehouse.remote import publish_remote

    url = f"s3://{bucket}/copy"
    layout = scratch_release(tmp_path, monkeypatch, url, "next", "builder")
    proxy = Proxy(s3_server)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        proxy.fault("PUT", r"/copy/staging/", status=403, code="AccessDenied", times=None)
        outcome = publish_remote(layout, "next", None, say=lambda _: None)
        assert outcome.published is True and ObjectReleaseStore(Root.parse(url)).current() == "next"
        assert outcome.warning.startswith(f"release next is current in {url}, but the staged work and quality results "
                                          "were not copied there") and "\n" not in outcome.warning
    finally:
        proxy.close()


def test_a_swap_with_no_answer_and_current_unreadable_is_reported_as_unknown(bucket, tmp_path, monkeypatch, s3_server):
    from warehouse.objectstore import PublishOutcomeUnknown
    from warehouse.remote import publish_remote

    url = f"s3://{bucket}/unknown"
    layout = scratch_release(tmp_path, monkeypatch, url, "next", "builder")
    proxy = Proxy(s3_server)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        proxy.fault("PUT", CURRENT_KEY)  # the swap applied, its answer lost
        proxy.fault("GET", CURRENT_KEY, status=403, code="AccessDenied", times=None, skip=1)  # read once, then refused
        with pytest.raises(PublishOutcomeUnknown) as caught:
            publish_remote(layout, "next", None, say=lambda _: None)
        message = str(caught.value)
        assert message.startswith("release next: whether it was made current is unknown") and "\n" not in message
        assert message.endswith("check with `rewardhouse releases`")
    finally:
        proxy.close()


# --- readers -----------------------------------------------------------------------------------------
def manifest_body(digest: str, created_at: str) -> dict:
    return {"files_sha256": digest, "created_at": created_at, "code_version": "t", "sources": {}, "settings": {},
            "tables": {}}


def test_a_reader_that_starts_mid_publish_finds_the_release_current_names(bucket, tmp_path, monkeypatch, s3_server):
    from warehouse.remote import manifests

    url = f"s3://{bucket}/read"
    publisher = ObjectReleaseStore(Root.parse(url))  # straight to the server
    publisher.publish("r1", release_files(tmp_path, "r1"), manifest_body("a", "1"))
    proxy = Proxy(s3_server)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        hold = proxy.hold("GET", CURRENT_KEY)
        got = {}
        reader = threading.Thread(target=lambda: got.update(result=manifests(url)))
        reader.start()
        assert hold.arrived.wait(30)
        # While the reader is between its first request and the next, a publish completes.
        publisher.publish("r2", release_files(tmp_path, "r2"), manifest_body("b", "2"))
        hold.release()
        reader.join(30)
        found, current = got["result"]
        assert current == "r2" and [m.release_id for m in found] == ["r2", "r1"]
    finally:
        proxy.close()


def test_a_current_release_missing_from_the_listing_is_read_once_more_then_refused(bucket, tmp_path, monkeypatch, s3_server):
    from warehouse.objectstore import ObjectStoreError

    url = f"s3://{bucket}/lag"
    direct = ObjectReleaseStore(Root.parse(url))
    direct.publish("r1", release_files(tmp_path, "r1"), {"files_sha256": "a"})
    current = direct.root.key("releases", "CURRENT")
    direct._put(current, b"ghost")  # CURRENT names a release the listing does not hold (yet)
    proxy = Proxy(s3_server)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        listing = proxy.hold("GET", rf"^/{bucket}$")
        got = {}
        reader = threading.Thread(target=lambda: got.update(result=ObjectReleaseStore(Root.parse(url)).current_and_releases()))
        reader.start()
        assert listing.arrived.wait(30)
        direct._put(current, b"r1")  # the store catches up
        listing.release()
        reader.join(30)
        assert got["result"] == ("r1", ["r1"])
        assert proxy.requests.count(("GET", f"/{bucket}/lag/releases/CURRENT")) == 2
        proxy.holds.remove(listing)
        direct._put(current, b"ghost")  # and one that stays missing: one line, after one more read
        with pytest.raises(ObjectStoreError, match=r"CURRENT names release ghost, which has no manifest there \(releases: r1\)"):
            ObjectReleaseStore(Root.parse(url)).current_and_releases()
    finally:
        proxy.close()


def test_bucket_errors_are_one_line_naming_endpoint_bucket_and_what_to_check(bucket, monkeypatch, s3_server):
    from warehouse import load
    from warehouse.objectstore import ObjectStoreError
    from warehouse.remote import manifests

    with pytest.raises(ObjectStoreError) as missing:
        load("things", home="s3://no-such-bucket/data")
    assert str(missing.value) == (f"cannot read s3://no-such-bucket/data (endpoint {s3_server}, bucket no-such-bucket): "
                                  "the bucket no-such-bucket does not exist there; check the bucket in "
                                  "s3://no-such-bucket/data, AWS_ENDPOINT_URL and AWS_REGION")
    proxy = Proxy(s3_server)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        for method in ("GET", "PUT"):
            proxy.fault(method, ".", status=403, code="InvalidAccessKeyId", times=None)
        with pytest.raises(ObjectStoreError) as denied:
            manifests(f"s3://{bucket}/data")
        assert str(denied.value).startswith(f"cannot read s3://{bucket}/data (endpoint {proxy.url}, bucket {bucket}): "
                                            "access denied; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        assert "\n" not in str(denied.value)
    finally:
        proxy.close()


def test_an_overrides_file_in_a_missing_bucket_is_refused_not_read_as_no_decisions(bucket, s3_server):
    from pipeline.review.overrides import Overrides, OverridesError, load, save

    assert load(f"s3://{bucket}/data/overrides.json").decisions == []  # no file: no decisions
    for attempt in (lambda: load("s3://no-such-bucket/data/overrides.json"),
                    lambda: save("s3://no-such-bucket/data/overrides.json", Overrides())):
        with pytest.raises(OverridesError) as caught:
            attempt()
        message = str(caught.value)
        assert "\n" not in message and f"(endpoint {s3_server}, bucket no-such-bucket): the bucket no-such-bucket " \
                                       "does not exist there" in message, message
