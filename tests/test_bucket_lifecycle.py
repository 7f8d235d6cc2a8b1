"""Tags, rollback (and its pin) and retention on a bucket root, against moto's standalone S3 server
on 127.0.0.1: create-only tags, rollback by compare-and-swap, a run held by the pin, pruning by
`keep_releases` with its grace, a rollback racing a prune, and a rollback killed at every request."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.test_objectstore import bucket, s3_server, scratch_release  # noqa: F401 (fixtures)
from pipeline.settings import Layout
from warehouse import lifecycle
from warehouse.objectstore import ObjectReleaseStore, Root
from warehouse.remote import publish_remote
from warehouse.store import TagExists

HELPER = Path(__file__).resolve().parent / "publish_helper.py"
QUIET = lambda _: None  # noqa: E731


def _published(tmp_path, monkeypatch, url: str, *rids: str, keep: int = 0, grace: float = 0.0) -> ObjectReleaseStore:
    """Runs that publish `rids` to the bucket one after the other, each built on the one before."""
    store = ObjectReleaseStore(Root.parse(url))
    for rid in rids:
        layout = scratch_release(tmp_path, monkeypatch, url, rid, rid)
        assert publish_remote(layout, rid, store.current(), QUIET, keep=keep, grace=grace).published is True
    return store


def test_a_tag_is_created_once_and_reads_as_its_release(bucket, tmp_path, monkeypatch):
    url = f"s3://{bucket}/data"
    store = _published(tmp_path, monkeypatch, url, "r1", "r2")
    layout = Layout(url)
    barrier, results = threading.Barrier(2), {}

    def tag(rid: str) -> None:
        barrier.wait()
        try:
            results[rid] = lifecycle.tag(layout, "gold", rid)
        except TagExists as exc:
            results[rid] = str(exc)

    threads = [threading.Thread(target=tag, args=(rid,)) for rid in ("r1", "r2")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    winner = store.tags()["gold"]
    loser = "r2" if winner == "r1" else "r1"
    assert results[winner] == (winner, True)
    assert results[loser] == f"tag 'gold' already names release {winner} in {url}; `rewardhouse untag gold` first"
    assert lifecycle.resolve("gold", layout) == winner
    from warehouse import load

    assert load("prm_steps", release="gold", home=url).collect()["sample_id"].to_list() == [winner] * 3
    assert lifecycle.untag(layout, "gold") == winner and store.tags() == {}
    assert store.sweep(min_age=0) == []  # tags are not a release's leftovers


def test_rollback_swaps_current_pins_and_holds_the_next_run_until_unpinned(bucket, tmp_path, monkeypatch):
    url = f"s3://{bucket}/data"
    store = _published(tmp_path, monkeypatch, url, "r1", "r2")
    layout = Layout(url)
    rolled = lifecycle.rollback(layout, "r1")
    assert (rolled.release, rolled.previous, store.current(), store.pin().release) == ("r1", "r2", "r1", "r1")
    # the next run writes its release, leaves CURRENT and says why
    run = scratch_release(tmp_path, monkeypatch, url, "r3", "r3")
    said = []
    outcome = publish_remote(run, "r3", "r1", said.append, keep=1)
    assert (outcome.published, outcome.held.release, outcome.pruned) == (False, "r1", ())
    assert store.current() == "r1" and store.manifest("r3") is not None
    assert any(line.startswith("release r3 written (not current) to") for line in said)
    assert lifecycle.unpin(layout).release == "r1" and store.pin() is None and store.current() == "r1"
    assert publish_remote(run, "r3", "r1", QUIET).published is True and store.current() == "r3"
    # a release whose objects do not match its manifest is not rolled back to
    store._delete([store.root.key("releases", "r2", "prm_steps.parquet")])
    with pytest.raises(lifecycle.RollbackRefused, match=f"release r2 in {url} is not whole.*prm_steps.parquet is missing"):
        lifecycle.rollback(layout, "r2")
    assert store.current() == "r3" and store.pin() is None


def test_retention_keeps_the_newest_the_current_and_tagged_and_waits_out_the_grace(bucket, tmp_path, monkeypatch):
    url = f"s3://{bucket}/data"
    store = _published(tmp_path, monkeypatch, url, "r1", "r2", "r3", keep=2)
    # the previous CURRENT (r2) is kept by count; r1 went when r3 was published
    assert store.releases() == ["r2", "r3"] and store._keys(store.root.key("releases", "r1")) == []
    lifecycle.tag(Layout(url), "keepme", "r2")
    _published(tmp_path, monkeypatch, url, "r4", keep=1)  # r3 was current until this swap: not pruned; r2 tagged
    assert store.releases() == ["r2", "r3", "r4"]
    _published(tmp_path, monkeypatch, url, "r5", keep=1, grace=3600)  # CURRENT moved a moment ago: nothing
    assert store.releases() == ["r2", "r3", "r4", "r5"]
    # `gc --keep-releases`: the same rules, now; within the grace of the last swap nothing, then all but
    # the newest, the current and the tagged
    assert lifecycle.prunable(Layout(url), 1, 600.0) == []
    assert lifecycle.prunable(Layout(url), 1, 0.0) == ["r4", "r3"]
    assert lifecycle.prune(Layout(url), 1, 0.0) == ["r4", "r3"]
    assert store.releases() == ["r2", "r5"] and store.current() == "r5"
    assert store._keys(store.root.key("releases", "r3")) == [] and store.sweep(min_age=0) == []


def test_a_rollback_racing_a_prune_keeps_its_release(bucket, tmp_path, monkeypatch):
    url = f"s3://{bucket}/data"
    store = _published(tmp_path, monkeypatch, url, "r1", "r2")
    delete = store._delete
    raced = []

    def delete_then_roll_back(keys):  # the prune deletes r1's manifest; a rollback to r1 lands right then
        delete(keys)
        if not raced:
            raced.append(True)
            ObjectReleaseStore(store.root).swap_current("r1")

    monkeypatch.setattr(store, "_delete", delete_then_roll_back)
    assert store.discard(["r1"]) == []  # it saw CURRENT name r1 after all and put the manifest back
    assert store.current() == "r1" and store.manifest("r1") is not None
    assert lifecycle.verify_bucket(store, "r1") == []


def _steps(events: list[str]) -> list[str]:
    seen: collections.Counter[str] = collections.Counter()
    return [f"{name}#{seen.update([name]) or seen[name]}" for name in events]


def _kill_at(command: list[str], step: str, env: dict) -> None:
    """Run the helper's command until it is about to take `step`, and SIGKILL it there."""
    proc = subprocess.Popen(command + ["--pause-at", step], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline().strip()
    assert line.startswith(f"event {step} "), (line, proc.stderr.read() if proc.poll() is not None else "")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)


def test_rollback_killed_at_every_request_leaves_a_whole_current_release(bucket, tmp_path, monkeypatch):
    url = f"s3://{bucket}/data"
    store = _published(tmp_path, monkeypatch, url, "r1", "r2")
    env = {**os.environ, "REWARDHOUSE_SCRATCH": str(tmp_path / "cli")}
    command = [sys.executable, str(HELPER), url, "0", "--rollback", "r1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    steps = [s for s in _steps(json.loads(done.stdout)["events"]) if s.startswith(("obstore.put", "obstore.delete"))]
    assert len(steps) >= 2, steps  # the pin, CURRENT (and the conditional-write probe)
    outcomes = collections.Counter()
    for step in steps:
        store.swap_current("r2")
        store.clear_pin()
        _kill_at(command, step, env)
        current, pin = store.current(), store.pin()
        assert current in ("r1", "r2") and lifecycle.verify_bucket(store, current) == []
        outcomes[(current, pin.release if pin else None)] += 1
        again = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert again.returncode == 0, again.stderr
        assert (store.current(), store.pin().release) == ("r1", "r1")
    print(f"\n{len(steps)} kills: (CURRENT, pin) {dict(outcomes)}")
    assert outcomes[("r2", "r1")] >= 1, outcomes  # killed between the pin and the swap: the old release, whole


def test_prune_killed_at_every_request_leaves_whole_releases_and_the_rest_is_swept(bucket, tmp_path, monkeypatch):
    url = f"s3://{bucket}/data"
    store = _published(tmp_path, monkeypatch, url, "r1", "r2", "r3")
    env = {**os.environ, "REWARDHOUSE_SCRATCH": str(tmp_path / "cli")}
    command = [sys.executable, str(HELPER), url, "0", "--prune", "--keep", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pruned"] == ["r1"]
    steps = [s for s in _steps(json.loads(done.stdout)["events"]) if s.startswith(("obstore.put", "obstore.delete"))]
    assert len(steps) >= 2, steps  # the manifest, then the objects
    for k, step in enumerate(steps):
        _published(tmp_path, monkeypatch, url, f"s{k}")
        before = store.releases()
        _kill_at(command, step, env)
        after = store.releases()
        assert set(after) <= set(before) and store.current() == f"s{k}" and store.current() in after
        for rid in after:  # every release still listed is whole
            assert lifecycle.verify_bucket(store, rid) == [], rid
        store.sweep(min_age=0)  # a manifest gone, objects left: a killed publish's leftovers
        again = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert again.returncode == 0, again.stderr
        assert len(store.releases()) == 2 and store.sweep(min_age=0) == []


def test_tag_killed_at_every_request_leaves_the_tag_or_nothing(bucket, tmp_path, monkeypatch):
    url = f"s3://{bucket}/data"
    store = _published(tmp_path, monkeypatch, url, "r1", "r2")
    env = {**os.environ, "REWARDHOUSE_SCRATCH": str(tmp_path / "cli")}
    command = [sys.executable, str(HELPER), url, "0", "--tag", "gold=r1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["tagged"] is True, done.stderr
    steps = [s for s in _steps(json.loads(done.stdout)["events"]) if s.startswith(("obstore.put", "obstore.delete"))]
    assert steps, steps
    for step in steps:
        store.untag("gold")
        _kill_at(command, step, env)
        assert store.tags() in ({}, {"gold": "r1"}), step
        again = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert again.returncode == 0, again.stderr
        assert store.tags() == {"gold": "r1"} and store.current() == "r2"
