"""Faults during a publish: the publishing process killed just before each of its steps, a full disk, an
unwritable releases folder. Each time CURRENT names a whole release, the warehouse opens read-only
on a whole release, and the next publish recovers."""

from __future__ import annotations

import collections
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from publish_helper import assert_release_complete, release_id, row_counts, stage
from warehouse.duck import connect_readonly, warehouse_release
from warehouse.store import CURRENT, ReleaseStore

HELPER = Path(__file__).resolve().parent / "publish_helper.py"
CLI = Path(sys.executable).with_name("rewardhouse")
KEEP = 3


def assert_consistent(root: Path) -> tuple[str, str]:
    """CURRENT names a complete release, every listed release is complete, and the warehouse opens
    read-only with main views holding the row counts of the release it says it serves; returns
    (current, served)."""
    store = ReleaseStore(root / "releases")
    current = store.current()
    assert current is not None and (store.dir / CURRENT).read_text().strip() == current
    for manifest in store.list():
        assert_release_complete(store, manifest.release_id)
        assert manifest.row_counts == row_counts(int(manifest.release_id[1:])), manifest.release_id
    with connect_readonly(root / "warehouse.duckdb") as con:
        served = con.execute("select current_release from _rewardhouse").fetchone()[0]
        counts = {t: con.execute(f'select count(*) from main."{t}"').fetchone()[0] for t in row_counts(0)}
        (recorded,) = con.execute("select row_counts from releases where release_id = ?", [served]).fetchone()
    assert counts == row_counts(int(served[1:])) == json.loads(recorded), served
    return current, served


def _command(root: Path, seq: int, *extra: str) -> list[str]:
    return [sys.executable, str(HELPER), str(root), str(seq), "--keep", str(KEEP), *extra]


def _publish(root: Path, seq: int, *extra: str) -> subprocess.CompletedProcess:
    stage(root, seq)
    return subprocess.run(_command(root, seq, *extra), capture_output=True, text=True, timeout=120)


def _paused(root: Path, seq: int, event: str) -> tuple[subprocess.Popen, str]:
    """A publisher stopped just before `event` ("NAME#K": the K-th step of that name, see
    publish_helper), and the step's name; waits for the line it prints there, not for a time."""
    proc = subprocess.Popen(_command(root, seq, "--pause-at", event), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line.startswith(f"event {event} "), (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
    return proc, line.split(" ", 2)[2]


def _leftovers(root: Path) -> list[str]:
    releases = [p.name for p in (root / "releases").iterdir() if p.name.startswith((".tmp-", f".{CURRENT}."))]
    return releases + [p.name for p in root.glob(".warehouse.duckdb.*")]


def _stage_reached(root: Path, new: str, returncode: int) -> str:
    store = ReleaseStore(root / "releases")
    if returncode == 0:
        return "finished"
    if store.current() == new:
        return "after the CURRENT swap"
    if warehouse_release(root / "warehouse.duckdb") == new:
        return "warehouse swapped, CURRENT not yet"
    if store.exists(new):
        return "rebuilding the warehouse"
    if any(p.name.startswith(".tmp-") for p in store.dir.iterdir()):
        return "writing the release"
    return "before writing"


def test_sigkill_at_every_step_never_leaves_a_partial_release(tmp_path):
    root = tmp_path / "home"
    for seq in (1, 2):
        assert _publish(root, seq).returncode == 0
    # An unhindered publish lists its steps (events); then one publish is killed just before each
    # chosen step, found by the line the helper prints there, so a faster or slower machine kills
    # at the same moments.
    calibration = _publish(root, 3)
    assert calibration.returncode == 0, calibration.stderr
    events = json.loads(calibration.stdout)["events"]
    assert_consistent(root)
    # Every step but the content-addressed links (every 10th) and DuckDB statements (every 3rd):
    # fsyncs, copies, renames and replaces are where a half-done publish could show.
    # A step is named by its kind and its place among steps of that kind (NAME#K), which stays the
    # same step when a later publish also prunes old releases.
    seen = collections.Counter()
    chosen = []
    for name in events:
        seen[name] += 1
        if name == "os.link" and seen[name] % 10 != 1 or name == "duckdb.execute" and seen[name] % 3 != 1:
            continue
        chosen.append(f"{name}#{seen[name]}")
    stages: collections.Counter[str] = collections.Counter()
    killed_at: collections.Counter[str] = collections.Counter()
    left = 0
    trials_started = time.perf_counter()
    for k, event in enumerate(chosen):
        seq = 10 + k
        stage(root, seq)
        before_current, before_served = assert_consistent(root)
        proc, name = _paused(root, seq, event)
        killed_at[name] += 1
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        new = release_id(seq)
        stages[_stage_reached(root, new, proc.returncode)] += 1

        current, served = assert_consistent(root)
        # CURRENT and the warehouse move to the new release together; they part only when the kill
        # fell between the warehouse swap and the CURRENT swap, or had already parted them before.
        assert served == current or (served, current) in ((new, before_current), (before_served, before_current))
        assert current in (before_current, new) and served in (before_served, new)
        left += bool(_leftovers(root))
        shutil.rmtree(root / "staging" / str(seq))
    elapsed = time.perf_counter() - trials_started
    print(f"\n{len(chosen)} kills (of {len(events)} steps) in {elapsed:.1f}s: at {dict(killed_at)}; reached "
          f"{dict(stages)}; {left} left temporaries behind")
    assert len(chosen) >= 35
    assert stages["writing the release"] >= 10 and stages["rebuilding the warehouse"] >= 5, stages
    assert stages["warehouse swapped, CURRENT not yet"] >= 1, stages  # killed before os.replace of CURRENT

    done = _publish(root, 99)
    assert done.returncode == 0, done.stderr
    assert assert_consistent(root) == (release_id(99), release_id(99))
    assert _leftovers(root) == []
    assert len(ReleaseStore(root / "releases").list()) == KEEP


def test_full_disk_while_writing_a_release_publishes_nothing(tmp_path):
    root = tmp_path / "home"
    assert _publish(root, 1).returncode == 0
    # Any file over 256 KB fails with EFBIG, as on a full disk: every table of the release is bigger.
    failed = _publish(root, 2, "--fsize", str(256 * 1024))
    releases = root / "releases"
    assert failed.returncode == 3, failed.stderr
    assert failed.stderr.startswith(f"could not publish release r0002 in {releases} (nothing published; "
                                    "release r0001 stays current): File too large")
    assert len(failed.stderr.strip().splitlines()) == 1 and "Traceback" not in failed.stderr
    assert sorted(p.name for p in releases.iterdir()) == [".writer.lock", CURRENT, "r0001"]
    assert assert_consistent(root) == ("r0001", "r0001")

    assert _publish(root, 2).returncode == 0
    assert assert_consistent(root) == ("r0002", "r0002")


def test_full_disk_while_rebuilding_the_warehouse_leaves_both_on_the_previous_release(tmp_path):
    root = tmp_path / "home"
    assert _publish(root, 1).returncode == 0
    stage(root, 2)
    largest = max(p.stat().st_size for p in (root / "staging").rglob("*") if p.is_file())
    warehouse = (root / "warehouse.duckdb").stat().st_size
    limit = (largest + warehouse) // 2  # every release file fits, the warehouse does not
    assert largest < limit < warehouse

    failed = subprocess.run(_command(root, 2, "--fsize", str(limit)), capture_output=True, text=True, timeout=120)
    assert failed.returncode == 3, failed.stderr
    assert failed.stderr.startswith(f"could not rebuild the warehouse {root / 'warehouse.duckdb'} on release r0002 "
                                    "(it still serves release r0001): File too large")
    assert "Traceback" not in failed.stderr
    assert assert_consistent(root) == ("r0001", "r0001")
    assert _leftovers(root) == []

    again = subprocess.run(_command(root, 2), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["published"] is True  # its folder was already in place: this publish made it current
    assert assert_consistent(root) == ("r0002", "r0002")


PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3


def _drop_file_mode_overrides() -> None:
    """In the child, before exec: root keeps its uid but loses the capabilities that let it ignore
    file modes, so a read-only folder is read-only to it as to anyone."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_cli_names_an_unwritable_releases_folder_in_one_line(tmp_path):
    root = tmp_path / "home"
    env = {**os.environ, "REWARDHOUSE_HOME": str(root), "DAGSTER_HOME": str(root / "dagster"), "PYTHONWARNINGS": "ignore"}
    first = subprocess.run([str(CLI), "run"], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    store = ReleaseStore(root / "releases")
    before = store.current()
    entries = sorted(p.name for p in store.dir.iterdir())

    as_user = _drop_file_mode_overrides if os.geteuid() == 0 else None
    store.dir.chmod(0o555)
    try:
        probe = subprocess.run([sys.executable, "-c", f"open({str(store.dir / 'probe')!r}, 'w')"],
                               preexec_fn=as_user, capture_output=True, text=True)
        if probe.returncode == 0:
            pytest.skip("file modes are not enforced for this user here; cannot make the releases folder unwritable")
        # --keep-duplicates changes the release id: a new release must be written.
        failed = subprocess.run([str(CLI), "run", "--keep-duplicates"], env=env, preexec_fn=as_user,
                                capture_output=True, text=True, timeout=300)
    finally:
        store.dir.chmod(0o755)

    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    (error,) = [line for line in failed.stderr.splitlines() if line.startswith("rewardhouse: ")]
    assert error.startswith("rewardhouse: warehouse_release: could not publish release ")
    assert f"in {store.dir} (nothing published; release {before} stays current): Permission denied" in error
    assert "no release published (the run failed); the previous release stays current" in failed.stderr
    assert sorted(p.name for p in store.dir.iterdir()) == entries
    assert store.current() == before and warehouse_release(root / "warehouse.duckdb") == before
    assert_release_complete(store, before)


def test_cli_names_a_data_root_that_cannot_be_a_folder_in_one_line(tmp_path):
    # A file where the data root must be: every write under it fails, before any run starts.
    root = tmp_path / "home"
    root.write_text("not a folder")
    env = {**os.environ, "REWARDHOUSE_HOME": str(root), "PYTHONWARNINGS": "ignore"}
    env.pop("DAGSTER_HOME", None)
    failed = subprocess.run([str(CLI), "run"], env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 2  # refused before anything runs, as a setting that cannot run is
    assert "Traceback" not in failed.stderr
    (error,) = failed.stderr.strip().splitlines()
    assert error.startswith("rewardhouse: ") and str(root) in error, error
    assert root.read_text() == "not a folder" and sorted(p.name for p in tmp_path.iterdir()) == ["home"]
