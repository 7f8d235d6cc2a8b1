"""`rewardhouse sql` is bounded: a timeout, a memory limit, spill files outside the data root
with a size limit, and Ctrl-C stops the query. Real processes on a real DuckDB file."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from pipeline.cli import main

BIN = Path(sys.executable).parent
RUNAWAY = "select sum(hash(range)) from range(100000000000)"


@pytest.fixture
def reader_home(tmp_path) -> dict[str, str]:
    """A data root holding a warehouse file (a real DuckDB file, no run needed) and a spill base."""
    home = tmp_path / "data"
    home.mkdir()
    with duckdb.connect(str(home / "warehouse.duckdb")) as con:
        con.execute("create table numbers as select range as n from range(1000)")
    (tmp_path / "spill").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWARDHOUSE_")}
    env.update(REWARDHOUSE_HOME=str(home), REWARDHOUSE_SQL_TEMP=str(tmp_path / "spill"), PYTHONUNBUFFERED="1")
    return env


def sql(env: dict, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "rewardhouse"), "sql", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_runaway_query_stops_at_its_timeout_in_one_line(reader_home):
    started = time.monotonic()
    done = sql({**reader_home, "REWARDHOUSE_SQL_TIMEOUT": "1"}, RUNAWAY)
    took = time.monotonic() - started

    assert done.returncode == 124 and done.stdout == ""
    assert one_line(done.stderr).startswith("rewardhouse: query stopped after 1 s (timeout 1 s)")
    assert took < 60  # without a timeout this query runs for hours
    # The option wins over the environment.
    assert sql({**reader_home, "REWARDHOUSE_SQL_TIMEOUT": "1"}, "--timeout", "30", "select sum(n) from numbers",
               "--format", "csv").stdout.splitlines() == ["sum(n)", "499500"]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _default_signals() -> None:
    # As from a terminal: SIGINT not ignored (a suite started as a background job ignores it, and
    # a child inherits that).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "query interrupted after "),
                                              (signal.SIGTERM, 143, "query stopped by SIGTERM after ")],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_interrupts_a_running_query(reader_home, tmp_path, sig, code, said):
    proc = subprocess.Popen([str(BIN / "rewardhouse"), "sql", "--timeout", "0", RUNAWAY], env=reader_home,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals)
    spill = tmp_path / "spill"
    try:
        # The reader makes its spill folder just before it connects; then the query burns CPU.
        deadline = time.monotonic() + 60
        while not list(spill.glob("rewardhouse-sql-*/.lock")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        base = _cpu_seconds(proc.pid)
        while _cpu_seconds(proc.pid) - base < 1.5:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(sig)
        interrupted = time.monotonic()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - interrupted < 10
    assert proc.returncode == code and out == ""
    assert one_line(err).startswith(f"rewardhouse: {said}")
    assert list(spill.iterdir()) == []  # its spill folder went with it


def test_limits_are_in_force_and_spills_go_outside_the_data_root(reader_home, tmp_path):
    query = ("select current_setting('memory_limit'), current_setting('temp_directory'), "
             "current_setting('max_temp_directory_size')")
    done = sql({**reader_home, "REWARDHOUSE_SQL_TEMP_LIMIT": "512MiB"}, "--memory-limit", "300MB", query,
               "--format", "csv")
    assert done.returncode == 0, done.stderr
    memory, temp, temp_limit = done.stdout.splitlines()[1].split(",")
    assert memory == "286.1 MiB" and temp_limit == "512.0 MiB"
    assert Path(temp).parent == tmp_path / "spill" and Path(temp).name.startswith("rewardhouse-sql-")
    assert list((tmp_path / "spill").iterdir()) == []
    assert sorted(p.name for p in Path(reader_home["REWARDHOUSE_HOME"]).iterdir()) == ["warehouse.duckdb"]

    # A query that must spill more than it may is refused in one line, and leaves nothing behind.
    big_sort = "select count(*) from (select range from range(5000000) order by hash(range))"
    done = sql({**reader_home, "REWARDHOUSE_SQL_TEMP_LIMIT": "1MB"}, "--memory-limit", "32MB", big_sort)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("rewardhouse: query ran out of memory (limit 32MB")
    assert list((tmp_path / "spill").iterdir()) == []
    # Given room to spill, the same query answers.
    done = sql({**reader_home, "REWARDHOUSE_SQL_TEMP_LIMIT": "4GB"}, "--memory-limit", "32MB", big_sort, "--format", "csv")
    assert done.returncode == 0 and done.stdout.splitlines()[1] == "5000000", done.stderr


@pytest.mark.parametrize("extra, env, named", [
    (["--timeout", "soon"], {}, "--timeout='soon'"),
    (["--timeout", "-3"], {}, "--timeout='-3'"),
    (["--memory-limit", "lots"], {}, "--memory-limit='lots'"),
    ([], {"REWARDHOUSE_SQL_TIMEOUT": "x"}, "REWARDHOUSE_SQL_TIMEOUT='x'"),
    ([], {"REWARDHOUSE_SQL_MEMORY_LIMIT": "abc"}, "REWARDHOUSE_SQL_MEMORY_LIMIT='abc'"),
    ([], {"REWARDHOUSE_SQL_TEMP_LIMIT": "9 parsecs"}, "REWARDHOUSE_SQL_TEMP_LIMIT='9 parsecs'"),
])
def test_a_bad_limit_is_one_line_naming_it(reader_home, monkeypatch, capsys, extra, env, named):
    for key, value in {**reader_home, **env}.items():
        monkeypatch.setenv(key, value)
    assert main(["sql", *extra, "select 1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and named in one_line(err)


def test_spills_inside_the_data_root_are_refused(reader_home, monkeypatch, capsys):
    inside = Path(reader_home["REWARDHOUSE_HOME"]) / "tmp"
    for key, value in {**reader_home, "REWARDHOUSE_SQL_TEMP": str(inside)}.items():
        monkeypatch.setenv(key, value)
    assert main(["sql", "select 1"]) == 2
    assert "is inside the data root" in one_line(capsys.readouterr().err)
    assert not inside.exists()


def test_a_killed_readers_spill_folder_is_removed_by_the_next_one(reader_home, tmp_path):
    spill = tmp_path / "spill"
    dead = spill / "rewardhouse-sql-dead"  # its reader was killed: nobody holds its lock
    dead.mkdir()
    (dead / ".lock").touch()
    (dead / "duckdb_temp_storage-0.tmp").write_bytes(b"x" * 1000)
    busy = spill / "rewardhouse-sql-busy"  # a reader at work holds its lock
    busy.mkdir()
    with open(busy / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = sql(reader_home, "select 1")
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in spill.iterdir()) == ["rewardhouse-sql-busy"]


def test_a_query_error_keeps_duckdbs_hint_in_its_one_line(reader_home):
    done = sql(reader_home, "select * from number")
    assert done.returncode == 2
    assert one_line(done.stderr) == ('rewardhouse: query failed: Catalog Error: Table with name number does not exist! '
                                     'Did you mean "numbers"?')
    done = sql(reader_home, "select m from numbers")
    assert done.returncode == 2 and 'Candidate bindings: "n"' in one_line(done.stderr)


def test_a_float_column_prints_as_the_shortest_decimal_of_its_32_bits(reader_home):
    done = sql(reader_home, "select 0.9999::float as score, 0.1::float as tenth, 0.9999::double as wide", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["score,tenth,wide", "0.9999,0.1,0.9999"]


def test_a_reader_that_stops_reading_gets_no_broken_pipe(reader_home):
    cmd = f"'{BIN / 'rewardhouse'}' sql 'select * from range(200000)' | head -1"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], env=reader_home, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stderr == "" and done.stdout.startswith("range"), (done.returncode, done.stderr)
