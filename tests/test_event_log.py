"""pipeline/event_log.py: Dagster's SQLite event log keeps one engine per file, and every event a
run stores is still there, in runs before and after a fork, after a wipe, past MAX_ENGINES files."""

from __future__ import annotations

import os
import sqlite3

import dagster as dg
import pytest

from pipeline import event_log


@dg.asset
def tiny(context):
    for i in range(5):
        context.log.info(f"line {i}")
    return 1


def _run(instance) -> str:
    result = dg.materialize([tiny], instance=instance)
    assert result.success
    return result.run_id


def _messages(instance, run_id: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id)]


@pytest.fixture
def instance(tmp_path):
    assert event_log.install()
    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        yield inst
    event_log.close_all()


def test_engines_are_kept_and_every_event_is_stored(instance):
    first = _run(instance)
    assert event_log._engines, "the run's event files are open once, not per event"
    again = _run(instance)
    for run_id in (first, again):
        messages = _messages(instance, run_id)
        assert [m for m in messages if m.startswith("line ")] == [f"line {i}" for i in range(5)]
        assert instance.get_run_by_id(run_id).is_success


def test_a_forked_child_writes_on_its_own_engines_and_the_parent_goes_on(instance):
    before = _run(instance)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's engines are forgotten, its own are opened
        code = 1
        try:
            os.close(read)
            child_run = _run(instance)
            os.write(write, child_run.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    child_run = os.read(read, 100).decode()
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    after = _run(instance)
    for run_id in (before, child_run, after):
        assert [m for m in _messages(instance, run_id) if m.startswith("line ")] == [f"line {i}" for i in range(5)]
    history = instance.get_ref().local_artifact_storage_data.config_dict["base_dir"]
    for db in (p for p in _files(history) if p.endswith(".db")):
        assert sqlite3.connect(db).execute("pragma integrity_check").fetchone() == ("ok",)


def _files(root: str):
    for folder, _, names in os.walk(root):
        yield from (os.path.join(folder, n) for n in names)


def test_past_max_engines_the_oldest_file_is_closed_and_reopened(instance, monkeypatch):
    monkeypatch.setattr(event_log, "MAX_ENGINES", 2)  # the index and one run's file
    runs = [_run(instance) for _ in range(4)]
    assert len(event_log._engines) <= event_log.MAX_ENGINES
    for run_id in runs:
        assert sum(m.startswith("line ") for m in _messages(instance, run_id)) == 5


def test_wipe_closes_the_engines_before_deleting_the_files(instance):
    _run(instance)
    instance.wipe()
    # the run files are gone and no engine points at one (wipe reopens the index only)
    assert all(os.path.exists(url.split("sqlite:///", 1)[1]) for url in event_log._engines)
    run_id = _run(instance)
    assert sum(m.startswith("line ") for m in _messages(instance, run_id)) == 5
