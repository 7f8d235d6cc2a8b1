"""Tags, rollback (and its pin) and retention on a local data root: the rules of
warehouse/lifecycle.py, a rollback and a prune killed at every step, a reader holding the
warehouse open through a rollback."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from publish_helper import publish, release_id, row_counts, stage
from pipeline.settings import Layout
from test_fault_publish import assert_consistent
from warehouse import lifecycle
from warehouse.api import load
from warehouse.duck import connect_readonly, publish_release, warehouse_release
from warehouse.store import CURRENT, ReleaseStore, TagExists

HELPER = Path(__file__).resolve().parent / "publish_helper.py"


def _releases(root: Path, *seqs: int, keep: int = 0) -> ReleaseStore:
    for seq in seqs:
        stage(root, seq)
        publish(root, seq, keep)
    return ReleaseStore(root / "releases")


def _served_rows(root: Path) -> dict[str, int]:
    with connect_readonly(root / "warehouse.duckdb") as con:
        return {t: con.execute(f'select count(*) from main."{t}"').fetchone()[0] for t in row_counts(0)}


def test_tags_are_unique_names_that_work_wherever_an_id_does(tmp_path):
    root = tmp_path / "home"
    store = _releases(root, 1, 2)
    layout = Layout(root)
    assert lifecycle.tag(layout, "baseline", "r0001") == ("r0001", True)
    assert lifecycle.tag(layout, "baseline", "r0001") == ("r0001", False)  # the same again: nothing to do
    with pytest.raises(TagExists, match="tag 'baseline' already names release r0001"):
        lifecycle.tag(layout, "baseline", "r0002")
    assert lifecycle.tag(layout, "latest") == ("r0002", True)  # default: the current release
    assert store.tags() == {"baseline": "r0001", "latest": "r0002"}
    for bad in ("", "-x", "a/b", "..", "x" * 65, "0123456789abcdef"):
        with pytest.raises(ValueError, match="is not a tag name"):
            lifecycle.tag(layout, bad, "r0001")
    with pytest.raises(LookupError, match="no release or tag 'nope'"):
        lifecycle.tag(layout, "other", "nope")
    # a tag reads as its release, through the Python API too
    assert store.resolve("baseline") == "r0001" == lifecycle.resolve("baseline", layout)
    assert load("steps", release="baseline", home=root).collect().height == row_counts(1)["steps"]
    assert lifecycle.untag(layout, "baseline") == "r0001"
    with pytest.raises(KeyError, match="no tag 'baseline'"):
        lifecycle.untag(layout, "baseline")
    with pytest.raises(LookupError):
        load("steps", release="baseline", home=root)


def test_rollback_pins_until_unpinned_and_runs_say_so(tmp_path):
    root = tmp_path / "home"
    store = _releases(root, 1, 2, 3)
    layout = Layout(root)
    rolled = lifecycle.rollback(layout, "r0001")
    assert (rolled.release, rolled.previous) == ("r0001", "r0003")
    assert store.current() == "r0001" == warehouse_release(root / "warehouse.duckdb")
    assert _served_rows(root) == row_counts(1)
    assert store.pin().release == "r0001"

    # pinned: the next publish writes its release (queryable by id) and leaves CURRENT, prunes nothing
    stage(root, 4)
    held = publish_release(store, root / "warehouse.duckdb", "r0004",
                           {n: root / "staging" / "4" / f"{n}.parquet" for n in row_counts(0)}, keep=1,
                           code_version="test", sources={}, settings={})
    assert (held.published, held.pruned, held.held.release) == (False, [], "r0001")
    assert "rewardhouse rollback --unpin" in held.held.line()
    assert store.current() == "r0001" and store.exists("r0004")
    assert _served_rows(root) == row_counts(1)
    with connect_readonly(root / "warehouse.duckdb") as con:
        assert con.execute('select count(*) from release_r0004.steps').fetchone()[0] == row_counts(4)["steps"]
    # an unchanged rerun of the newer release is held too: never silently re-published
    again = publish(root, 3, 0)
    assert again["published"] is False and store.current() == "r0001"

    assert lifecycle.unpin(layout).release == "r0001"
    assert store.pin() is None and store.current() == "r0001"  # unpinning moves nothing
    assert publish(root, 4, 0)["published"] is True
    assert store.current() == "r0004"


def test_rollback_refuses_a_release_that_does_not_match_its_manifest(tmp_path):
    root = tmp_path / "home"
    store = _releases(root, 1, 2)
    layout = Layout(root)
    victim = store.path("r0001") / "steps.parquet"
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(lifecycle.RollbackRefused, match="release r0001 is not whole, not rolled back to: "
                                                        "steps.parquet differs from its manifest"):
        lifecycle.rollback(layout, "r0001")
    assert store.current() == "r0002" and store.pin() is None
    (store.path("r0001") / "exports" / "train.jsonl").unlink()
    with pytest.raises(lifecycle.RollbackRefused, match="exports/train.jsonl is missing"):
        lifecycle.rollback(layout, "r0001")
    with pytest.raises(LookupError, match="no release or tag 'r0009'"):
        lifecycle.rollback(layout, "r0009")


def test_retention_keeps_current_pinned_and_tagged_releases_and_waits_out_the_grace(tmp_path):
    root = tmp_path / "home"
    store = _releases(root, 1, 2, 3, 4)
    layout = Layout(root)
    lifecycle.tag(layout, "first", "r0001")
    # CURRENT changed a moment ago: within the grace nothing goes, whatever `keep` says
    assert lifecycle.prunable(layout, 1, grace=600) == []
    old = time.time() - 3600
    os.utime(store.dir / CURRENT, (old, old))
    assert lifecycle.prunable(layout, 1, grace=600) == ["r0003", "r0002"]  # not r0001 (tagged), not r0004 (current)
    lifecycle.rollback(layout, "r0002")
    os.utime(store.dir / CURRENT, (old, old))
    assert lifecycle.prunable(layout, 1, grace=600) == ["r0003"]  # r0002 is current and pinned now
    assert lifecycle.prune(layout, 1, grace=600) == ["r0003"]
    assert [m.release_id for m in store.list()] == ["r0004", "r0002", "r0001"]
    with connect_readonly(root / "warehouse.duckdb") as con:
        schemas = {r[0] for r in con.execute("select schema_name from information_schema.schemata").fetchall()}
    assert "release_r0003" not in schemas and "release_r0004" in schemas
    assert assert_consistent(root) == ("r0002", "r0002")
    # a publish prunes by the same rules, read before its swap: the release current until the swap
    # stays (it leaves CURRENT only now); one publish later it goes, if CURRENT stayed put that long
    lifecycle.unpin(layout)

    def publish_seq(seq: int):
        stage(root, seq)
        return publish_release(store, root / "warehouse.duckdb", release_id(seq),
                               {n: root / "staging" / str(seq) / f"{n}.parquet" for n in row_counts(0)}, keep=1,
                               grace=600, code_version="test", sources={}, settings={})

    done = publish_seq(5)
    assert done.published and done.pruned == ["r0004"]  # not r0002: current until this swap
    done = publish_seq(6)
    assert done.published and done.pruned == []  # CURRENT moved a moment ago: nothing
    os.utime(store.dir / CURRENT, (old, old))
    done = publish_seq(7)
    assert done.pruned == ["r0005", "r0002"]  # not r0006, current until this swap; r0001 tagged
    assert [m.release_id for m in store.list()] == ["r0007", "r0006", "r0001"]


def test_a_reader_holding_the_warehouse_open_keeps_a_whole_view_through_a_rollback(tmp_path):
    root = tmp_path / "home"
    _releases(root, 1, 2)
    reader = duckdb.connect(str(root / "warehouse.duckdb"), read_only=True)
    try:
        before = reader.execute("select count(*) from main.steps").fetchone()[0]
        lifecycle.rollback(Layout(root), "r0001")
        assert reader.execute("select count(*) from main.steps").fetchone()[0] == before == row_counts(2)["steps"]
        assert reader.execute("select current_release from _rewardhouse").fetchone()[0] == "r0002"
    finally:
        reader.close()
    assert _served_rows(root) == row_counts(1)


def _helper(root: Path, *args: str) -> list[str]:
    return [sys.executable, str(HELPER), str(root), "0", *args]


def _events(root: Path, *args: str) -> list[str]:
    done = subprocess.run(_helper(root, *args), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["events"]


def _kill_at(root: Path, event: str, *args: str) -> None:
    proc = subprocess.Popen(_helper(root, *args, "--pause-at", event), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith(f"event {event} "), (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)


def _steps(events: list[str]) -> list[str]:
    seen: collections.Counter[str] = collections.Counter()
    out = []
    for name in events:
        seen[name] += 1
        out.append(f"{name}#{seen[name]}")
    return out


def test_rollback_killed_at_every_step_leaves_a_whole_current_release_and_finishes_when_run_again(tmp_path):
    root = tmp_path / "home"
    store = _releases(root, 1, 2, 3)
    layout = Layout(root)
    steps = _steps(_events(root, "--rollback", "r0001"))  # calibration: a whole rollback, then back
    lifecycle.rollback(layout, "r0003")
    lifecycle.unpin(layout)
    assert len(steps) >= 8, steps
    outcomes = collections.Counter()
    for step in steps:
        _kill_at(root, step, "--rollback", "r0001")
        current, served = assert_consistent(root)
        assert current in ("r0003", "r0001") and served in ("r0003", "r0001")
        outcomes[(current, served, store.pin().release if store.pin() else None)] += 1
        again = subprocess.run(_helper(root, "--rollback", "r0001"), capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert assert_consistent(root) == ("r0001", "r0001") and store.pin().release == "r0001"
        assert not [p.name for p in store.dir.iterdir() if p.name.startswith((".tmp-", f".{CURRENT}.", ".PIN."))]
        assert not list(root.glob(".warehouse.duckdb.*"))
        lifecycle.rollback(layout, "r0003")
        lifecycle.unpin(layout)
    # killed before the pin, after the pin but before the warehouse, and between the warehouse and CURRENT
    assert outcomes[("r0003", "r0003", None)] and outcomes[("r0003", "r0003", "r0001")], outcomes
    assert outcomes[("r0003", "r0001", "r0001")], outcomes
    print(f"\n{len(steps)} kills: (CURRENT, served, pin) {dict(outcomes)}")


def test_prune_killed_at_every_step_leaves_whole_releases(tmp_path):
    root = tmp_path / "home"
    _releases(root, 1, 2, 3, 4, 5)
    steps = _steps(_events(root, "--prune", "--keep", "4"))  # calibration: prunes r0001
    assert len(steps) >= 4, steps
    for k, step in enumerate(steps):
        _releases(root, 10 + k)
        before = [m.release_id for m in ReleaseStore(root / "releases").list()]
        _kill_at(root, step, "--prune", "--keep", "4")
        after = [m.release_id for m in ReleaseStore(root / "releases").list()]
        assert after in (before, before[:4]), (step, before, after)
        assert assert_consistent(root)[0] == release_id(10 + k)
        assert _events(root, "--prune", "--keep", "4") is not None
        assert len(ReleaseStore(root / "releases").list()) == 4


def test_tag_killed_at_every_step_leaves_the_tag_or_nothing(tmp_path):
    root = tmp_path / "home"
    store = _releases(root, 1, 2)
    steps = _steps(_events(root, "--tag", "gold=r0001"))
    lifecycle.untag(Layout(root), "gold")
    assert len(steps) >= 3, steps  # the file written and flushed, linked into place, the folder flushed
    for step in steps:
        _kill_at(root, step, "--tag", "gold=r0001")
        assert store.tags() in ({}, {"gold": "r0001"}), step  # never a half-written tag
        assert _events(root, "--tag", "gold=r0001") is not None and store.tags() == {"gold": "r0001"}
        assert not [p.name for p in (store.dir / "tags").iterdir() if p.name.startswith(".")]
        lifecycle.untag(Layout(root), "gold")


def test_tag_and_rollback_wait_for_a_publish_in_flight_and_say_who_holds_the_lock(tmp_path):
    root = tmp_path / "home"
    _releases(root, 1, 2)
    stage(root, 3)
    publisher = subprocess.Popen([sys.executable, str(HELPER), str(root), "3", "--pause-at", "os.rename#1"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert publisher.stdout.readline().startswith("event os.rename#1 ")  # holds the writer lock, mid-publish
    env = {**os.environ, "REWARDHOUSE_HOME": str(root)}
    cli = Path(sys.executable).with_name("rewardhouse")
    waiting = [subprocess.Popen([str(cli), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for argv in (["tag", "gold", "r0001"], ["rollback", "r0001"])]
    for proc in waiting:
        line = proc.stderr.readline()
        assert "waiting for the warehouse writer: held by" in line and f"pid {publisher.pid}" in line, line
        assert proc.poll() is None
    publisher.stdin.write("\n")
    publisher.stdin.flush()
    assert publisher.wait(60) == 0
    outs = [proc.communicate(timeout=60) for proc in waiting]
    assert [p.returncode for p in waiting] == [0, 0], outs
    store = ReleaseStore(root / "releases")
    assert store.tags() == {"gold": "r0001"} and store.current() == "r0001" and store.exists("r0003")
    assert assert_consistent(root) == ("r0001", "r0001")
