"""`rewardhouse run` refuses settings it could never run with at once, in one line (exit 2), before
a run is created, not minutes into the run where they are first used."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.cli import main

CLI = Path(sys.executable).with_name("rewardhouse")


def test_an_out_of_range_max_distance_is_refused_at_once_and_no_run_is_created(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "REWARDHOUSE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "PYTHONWARNINGS": "ignore"}
    started = time.monotonic()
    done = subprocess.run([str(CLI), "run", "--max-distance", "99"], env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr == "rewardhouse: invalid setting: dedupe_max_distance (--max-distance) must be within 0..32, not 99\n"
    assert not (home / "dagster" / "history").exists()  # no run storage, so no run
    assert took < 20, f"refused after {took:.1f}s"  # the imports (Dagster's take ~4 s), nothing more
    print(f"refused in {took:.1f}s")


@pytest.mark.parametrize("argv,said", [
    (["--max-distance", "-1"], "dedupe_max_distance (--max-distance) must be within 0..32, not -1"),
    (["--workers", "-2"], "workers (--workers) must be 0 (every core) or more, not -2"),
    (["--set", "max_image_pixels=0"], "max_image_pixels must be a positive integer, not 0"),
    (["--set", "dedupe_max_distance=33"], "dedupe_max_distance (--max-distance) must be within 0..32, not 33"),
    (["--set", "drift_severity=fatal"], "drift_severity must be WARN or ERROR, not 'FATAL'"),
    (["--set", "positive_rate_min=high"], "positive_rate_min='high': Input should be a valid number"),
    (["--set", "executor=gpu"], "executor must be one of"),
    (["--source", "local", "--path", "{tmp}/missing"], "--path {tmp}/missing: no such folder"),
])
def test_settings_that_cannot_run_are_refused_before_the_run(tmp_path, monkeypatch, capsys, argv, said):
    home = tmp_path / "home"
    monkeypatch.setenv("REWARDHOUSE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    assert main(["run", *(a.replace("{tmp}", str(tmp_path)) for a in argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rewardhouse: ") and said.replace("{tmp}", str(tmp_path)) in err, err
    assert not (home / "dagster" / "history").exists()


@pytest.mark.parametrize("name, value, said", [
    ("REWARDHOUSE_MAX_IMAGE_PIXELS", "abc", "REWARDHOUSE_MAX_IMAGE_PIXELS='abc': expected a whole number"),
    ("REWARDHOUSE_PRM_LABEL_THRESHOLD", "x", "REWARDHOUSE_PRM_LABEL_THRESHOLD='x': expected a number"),
    ("REWARDHOUSE_DEDUPE_MAX_DISTANCE", "8.5", "REWARDHOUSE_DEDUPE_MAX_DISTANCE='8.5': expected a whole number"),
    ("REWARDHOUSE_WORKERS", "all", "REWARDHOUSE_WORKERS='all': expected a whole number"),
])
def test_an_unreadable_environment_variable_is_one_line_naming_it(tmp_path, name, value, said):
    # a process of its own: the settings' defaults are read from the environment at first import
    home = tmp_path / "home"
    env = {**os.environ, "REWARDHOUSE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), name: value,
           "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([str(CLI), "run"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == f"rewardhouse: {said}\n", done.stderr[-3000:]
    assert not (home / "dagster" / "history").exists()


@pytest.mark.parametrize("command", [["releases"], ["gc"], ["status"], ["run"]])
def test_a_data_root_that_is_a_file_is_said_so(tmp_path, monkeypatch, capsys, command):
    home = tmp_path / "not-a-folder"
    home.write_text("x")
    monkeypatch.setenv("REWARDHOUSE_HOME", str(home))
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err == (f"rewardhouse: REWARDHOUSE_HOME={home} is a file, not a folder: point it at a folder (created when "
                   "missing) or a bucket root (s3://...)\n"), err
    assert home.read_text() == "x"


@pytest.mark.parametrize("command", [["releases"], ["sql", "select 1"], ["run"]])
def test_a_bucket_root_without_the_scale_extra_names_the_extra(monkeypatch, capsys, command):
    import importlib.util

    from pipeline import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "obstore" else real(name, *a))
    monkeypatch.setenv("REWARDHOUSE_HOME", "s3://bucket/root")
    assert not cli._has_module("obstore")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`scale` extra" in err and "uv sync --extra scale" in err, err


def test_the_end_of_a_run_counts_what_it_published_and_its_commands_work_as_printed(tmp_path, monkeypatch, capsys):
    """The closing lines: records per dataset and the quarantine per dataset and stage, as the
    warehouse holds them; the two `try` commands, pasted into a new shell whose PATH has neither
    rewardhouse nor a duckdb CLI, print the example query's rows."""
    import duckdb

    from pipeline import datasets
    from pipeline.cli import EXAMPLE_SQL

    home = tmp_path / "home"
    monkeypatch.setenv("REWARDHOUSE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    assert main(["run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    held = "; ".join(f"{d.name}: {con.execute(f'select count(*) from {d.record_table}').fetchone()[0]} {d.record_noun}"
                     for d in datasets.DATASETS)
    assert f"published: {held}" in lines
    per = {}
    for dataset, stage, n in con.execute("select dataset, stage, count(*) from quarantine group by all order by all").fetchall():
        per.setdefault(dataset, []).append(f"{stage} {n}")
    quarantined = next(line for line in lines if line.startswith("quarantined"))
    for dataset, stages in per.items():
        assert f"{dataset} " in quarantined and ", ".join(stages) in quarantined, (dataset, stages, quarantined)
    expected = con.execute(EXAMPLE_SQL).fetchall()
    con.close()
    commands = lines[lines.index("try:") + 1:lines.index("try:") + 3]
    assert len(commands) == 2
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for command in commands:
        done = subprocess.run(["bash", "-c", command.strip()], env=bare, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        for task, pairs, _ in expected:
            assert task in done.stdout and str(pairs) in done.stdout, (command, done.stdout)
