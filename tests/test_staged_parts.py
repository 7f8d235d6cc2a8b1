"""assets.common.reuse_or_compute_parts: parts computed in turn, each written on a background
thread while the next computes (the MMRB2 image step's partitions). Real files, real threads."""

from __future__ import annotations

import logging
import threading

import pyarrow as pa
import pytest

from assets.common import recorded, reuse_or_compute_parts
from pipeline.staging import read_staged, write_staged

log = logging.getLogger("test")


def _tables(key: str) -> dict:
    return {"t": pa.table({"key": [key] * 3, "n": [1, 2, 3]})}


def test_each_part_is_written_while_the_next_one_computes_and_recorded_after_its_files(tmp_path):
    second_started = threading.Event()
    seen = {}

    def write(folder, tables):
        if folder.name == "a":  # the first part's write waits for the second part's compute
            seen["overlap"] = second_started.wait(10)
            seen["a recorded while writing"] = recorded(folder) is not None
        return write_staged(folder, tables)

    def compute(key):
        def run():
            if key == "b":
                second_started.set()
            return _tables(key), {"rows": 3, "key": key}
        return run

    parts = {k: (tmp_path / k, compute(k)) for k in ("a", "b", "c")}
    out = reuse_or_compute_parts(log, parts, write)
    assert seen == {"overlap": True, "a recorded while writing": False}
    assert list(out) == ["a", "b", "c"]
    for key, (value, plain, reused) in out.items():
        assert not reused and plain == {"rows": 3, "key": key}
        assert read_staged(value.tables)["t"]["key"].to_pylist() == [key] * 3
        assert recorded(tmp_path / key) == value

    again = reuse_or_compute_parts(log, {k: (tmp_path / k, lambda: pytest.fail("recomputed")) for k in "abc"}, write)
    assert all(reused for _, _, reused in again.values())
    assert {k: v[0] for k, v in again.items()} == {k: v[0] for k, v in out.items()}


def test_a_failed_write_stops_the_next_part_and_leaves_its_own_part_unrecorded(tmp_path):
    computed = []
    b_started = threading.Event()

    def write(folder, tables):
        if folder.name == "a":
            b_started.wait(10)
            raise OSError(28, "No space left on device")
        return write_staged(folder, tables)

    def compute(key):
        def run():
            computed.append(key)
            if key == "b":  # long enough for a's write to have failed before c would start
                b_started.set()
                threading.Event().wait(0.5)
            return _tables(key), {}
        return run

    with pytest.raises(OSError, match="No space left"):
        reuse_or_compute_parts(log, {k: (tmp_path / k, compute(k)) for k in "abc"}, write)
    assert computed == ["a", "b"]
    assert recorded(tmp_path / "a") is None


def test_an_error_while_computing_waits_for_the_write_under_way_which_is_recorded(tmp_path):
    class Stopped(Exception):
        pass

    writing = threading.Event()
    finished = []

    def write(folder, tables):
        writing.set()
        threading.Event().wait(0.5)  # still writing when the next part fails
        paths = write_staged(folder, tables)
        finished.append(folder.name)
        return paths

    def compute(key):
        def run():
            if key == "b":
                writing.wait(10)
                raise Stopped
            return _tables(key), {}
        return run

    with pytest.raises(Stopped):
        reuse_or_compute_parts(log, {k: (tmp_path / k, compute(k)) for k in "ab"}, write)
    assert finished == ["a"]  # the step raised only after the write it started had ended
    assert recorded(tmp_path / "a") is not None and recorded(tmp_path / "b") is None


def test_two_parts_may_not_share_a_folder(tmp_path):
    with pytest.raises(ValueError, match="a folder of its own"):
        reuse_or_compute_parts(log, {"a": (tmp_path / "x", lambda: ({}, {})), "b": (tmp_path / "x", lambda: ({}, {}))},
                               write_staged)
    assert list(tmp_path.iterdir()) == []
