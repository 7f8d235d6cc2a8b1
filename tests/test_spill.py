"""pipeline.spill: DuckDB spill folders that a dead owner cannot leave behind."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from pipeline.spill import UNLOCKED_GRACE, SpillFolder, remove_abandoned, spill_folder


def test_abandoned_folders_go_and_held_or_starting_ones_stay(tmp_path):
    def folder(name, lock=True, age=0.0):
        f = tmp_path / name
        f.mkdir()
        (f / "duckdb_temp_storage-0.tmp").write_bytes(b"x" * 100)
        if lock:
            (f / ".lock").touch()
        if age:
            t = time.time() - age
            os.utime(f, (t, t))
        return f

    dead = folder("p-dead")  # its owner died: nobody holds the lock
    starting = folder("p-starting", lock=False)  # an owner between mkdtemp and its lock
    stale = folder("p-stale", lock=False, age=UNLOCKED_GRACE + 30)  # killed before it locked
    other = folder("q-dead")  # another prefix: not ours to judge
    held = folder("p-held")
    with open(held / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        remove_abandoned(tmp_path, "p-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p-held", "p-starting", "q-dead"]
    assert not dead.exists() and not stale.exists() and other.exists() and starting.exists()


def test_a_folder_is_locked_while_held_and_removed_on_close(tmp_path):
    with spill_folder(tmp_path / "base", "p-") as path:
        assert path.parent == tmp_path / "base" and path.name.startswith("p-")
        fd = os.open(path / ".lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        remove_abandoned(tmp_path / "base", "p-")  # held: it stays
        assert path.is_dir()
    assert list((tmp_path / "base").iterdir()) == []
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with pytest.raises(OSError):
        SpillFolder(blocked, "p-")


def test_a_folder_being_made_is_never_taken_for_abandoned(tmp_path, monkeypatch):
    """Another user's clean-up that runs while a folder is being made (between its creation and its
    lock) leaves it alone: its `.lock` appears only once it is held."""
    import pipeline.spill as spill

    rename, seen = os.rename, []

    def rename_after_a_cleanup(src, dst):
        remove_abandoned(tmp_path, "p-")  # as another process would, at the worst moment
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        rename(src, dst)

    monkeypatch.setattr(spill.os, "rename", rename_after_a_cleanup)
    with spill_folder(tmp_path, "p-") as path:
        assert seen == [[path.name]] and (path / ".lock").is_file()
        monkeypatch.setattr(spill.os, "rename", rename)
        remove_abandoned(tmp_path, "p-")
        assert path.is_dir()


def test_a_search_needs_no_temp_folder_of_its_own_making(tmp_path, monkeypatch):
    """The candidate search does not create a missing TMPDIR: it runs without the memory limit."""
    import tempfile

    import numpy as np

    from pipeline.dedupe import search
    from pipeline.dedupe.search import NearPairs

    missing = tmp_path / "gone"
    monkeypatch.setattr(tempfile, "tempdir", str(missing))
    monkeypatch.setattr(search, "BRUTE_MAX", 0)  # the joins (20 hashes are otherwise compared pair by pair)
    with NearPairs(np.arange(20, dtype=np.int64), np.zeros(20, dtype=np.int64), 2) as found:
        assert found.spill is None and len(found.table()) == 190
    assert not missing.exists()
