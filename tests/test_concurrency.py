"""Several processes on one data root: `rewardhouse run`s queue, publishers take turns on the
warehouse writer lock, and readers with the warehouse open always see one whole release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from publish_helper import TABLES, assert_release_complete, release_id, row_counts, stage
from warehouse.duck import connect_readonly, warehouse_release
from warehouse.store import ReleaseStore

HERE = Path(__file__).resolve().parent
HELPER = HERE / "publish_helper.py"
CLI = Path(sys.executable).with_name("rewardhouse")

# One statement, so one snapshot: the release the warehouse serves and the row count of each table.
ANSWER_SQL = "select (select current_release from _rewardhouse), " + ", ".join(
    f'(select count(*) from main."{t}")' for t in TABLES
)

# A reader that opens the warehouse afresh for every query, until told to stop.
RECONNECTING_READER = f"""
import json, sys
from pathlib import Path
from warehouse.duck import connect_readonly
db, stop = Path(sys.argv[1]), Path(sys.argv[2])
while not stop.exists():
    try:
        with connect_readonly(db) as con:
            print(json.dumps(con.execute({ANSWER_SQL!r}).fetchone()), flush=True)
    except Exception as exc:
        print(json.dumps({{"error": repr(exc)}}), flush=True)
"""


def _fresh_answer(db: Path) -> tuple[str, dict[str, int]]:
    """What a new reader sees: the warehouse opened in a process of its own (a process shares one
    DuckDB instance per file, so a second connection here would share the held one's session)."""
    code = f"import json, sys\nfrom warehouse.duck import connect_readonly\n" \
           f"print(json.dumps(connect_readonly(sys.argv[1]).execute({ANSWER_SQL!r}).fetchone()))"
    out = subprocess.run([sys.executable, "-c", code, str(db)], cwd=HERE.parent, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return _answer(json.loads(out.stdout))


def _answer(row) -> tuple[str, dict[str, int]]:
    return row[0], dict(zip(TABLES, row[1:]))


def test_two_cli_runs_at_once_queue_and_both_succeed(tmp_path):
    root = tmp_path / "home"
    env = {**os.environ, "REWARDHOUSE_HOME": str(root), "DAGSTER_HOME": str(root / "dagster"), "PYTHONWARNINGS": "ignore"}
    runs = [subprocess.Popen([str(CLI), "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in runs]
    for code, out, err in results:
        assert code == 0, err[-3000:]
        assert "Traceback" not in err
    statuses = sorted(out.splitlines()[0].split(": ", 1)[1] for _, out, _ in results)
    assert statuses == ["published", "unchanged (no new release)"]
    waited = [err for _, _, err in results if "waiting for the data root" in err]
    assert len(waited) == 1 and f"rewardhouse: waiting for the data root {root}: held by pid " in waited[0]

    store = ReleaseStore(root / "releases")
    (manifest,) = store.list()
    assert store.current() == manifest.release_id == warehouse_release(root / "warehouse.duckdb")
    assert_release_complete(store, manifest.release_id)
    with connect_readonly(root / "warehouse.duckdb") as con:
        for table, rows in manifest.row_counts.items():
            assert con.execute(f'select count(*) from main."{table}"').fetchone()[0] == rows, table


def _helper(root: Path, seq: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HELPER), str(root), str(seq), "--keep", "0", *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _at(proc: subprocess.Popen, point: str) -> None:
    """Wait until the helper stops at `point` (it prints `event <point> ...`)."""
    line = proc.stdout.readline()
    assert line.startswith(f"event {point} "), (line, proc.poll())


def _go_on(proc: subprocess.Popen) -> None:
    proc.stdin.write("\n")
    proc.stdin.flush()


def test_two_publishers_at_once_take_turns_on_the_warehouse_writer(tmp_path):
    root = tmp_path / "home"
    for seq in (1, 2, 3):
        stage(root, seq)
    assert subprocess.run([sys.executable, str(HELPER), str(root), "1"], capture_output=True, timeout=120).returncode == 0
    # The first publisher is held inside the writer lock (before the first table is copied in); the
    # second then starts and says it waits; only then does the first go on. Driven by what the two
    # print, so it neither flakes nor tests less on a faster or slower machine.
    first = _helper(root, 2, "--pause-at", "shutil.copyfile#1")
    _at(first, "shutil.copyfile#1")
    second = _helper(root, 3)
    waited = second.stderr.readline()
    assert "waiting for the warehouse writer" in waited and f"held by pid {first.pid} " in waited, waited
    assert second.poll() is None
    _go_on(first)
    results = {seq: (*proc.communicate(timeout=120), proc.returncode) for seq, proc in ((2, first), (3, second))}
    for seq, (out, err, code) in results.items():
        assert code == 0, err
        assert json.loads(out.splitlines()[-1])["published"] is True
    waiter = 3

    store = ReleaseStore(root / "releases")
    assert [m.release_id for m in store.list()][-1] == "r0001" and len(store.list()) == 3
    for manifest in store.list():
        assert_release_complete(store, manifest.release_id)
    # The one that waited wrote last: CURRENT and the warehouse both name its release.
    assert store.current() == warehouse_release(root / "warehouse.duckdb") == release_id(waiter)
    with connect_readonly(root / "warehouse.duckdb") as con:
        schemas = {r[0] for r in con.execute("select schema_name from information_schema.schemata").fetchall()}
        assert _answer(con.execute(ANSWER_SQL).fetchone()) == (release_id(waiter), row_counts(waiter))
    assert {f"release_r000{seq}" for seq in (1, 2, 3)} <= schemas


def test_readers_see_one_whole_release_while_others_are_published(tmp_path):
    root, db = tmp_path / "home", tmp_path / "home" / "warehouse.duckdb"
    seqs = (1, 2, 3, 4)
    for seq in seqs:
        stage(root, seq)
    assert subprocess.run([sys.executable, str(HELPER), str(root), "1"], capture_output=True, timeout=120).returncode == 0
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", RECONNECTING_READER, str(db), str(stop)], cwd=HERE.parent,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = reader.stdout.readline()
    held = connect_readonly(db)
    held_answers = [_answer(held.execute(ANSWER_SQL).fetchone())]
    # Each publish is stopped at three moments (publish_helper's events): writing the release
    # folder, just before the warehouse swap, just before the CURRENT swap. At each, the held
    # connection and a fresh one are asked; the publish then goes on.
    points = ("shutil.copyfile#1", "os.replace#1", "os.replace#2")
    fresh_answers = []
    for seq in seqs[1:]:
        proc = _helper(root, seq, "--pause-at", ",".join(points))
        for point in points:
            _at(proc, point)
            held_answers.append(_answer(held.execute(ANSWER_SQL).fetchone()))
            fresh_answers.append((seq, point, _fresh_answer(db)[0]))
            _go_on(proc)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    held.close()
    assert fresh_answers == [
        (seq, point, release_id(seq - 1) if point != "os.replace#2" else release_id(seq))
        for seq in seqs[1:] for point in points
    ]  # the warehouse moves to a release in one swap, before CURRENT does
    lines = [first]
    deadline = time.monotonic() + 60
    while f'"{release_id(seqs[-1])}"' not in lines[-1] and time.monotonic() < deadline:
        lines.append(reader.stdout.readline())
    stop.touch()
    # Read on through the same buffered pipe (communicate() would read the raw pipe and skip what
    # readline() has buffered, cutting a line in two).
    rest = reader.stdout.read()
    err = reader.stderr.read()
    reader.wait(timeout=60)
    lines = [json.loads(line) for line in [*lines, *rest.splitlines()]]

    assert not [line for line in lines if isinstance(line, dict)], err
    answers = [_answer(line) for line in lines]
    # The held connection keeps the snapshot it opened: the first release, whole, throughout.
    assert len(held_answers) == 10 and set(map(json.dumps, held_answers)) == {json.dumps(("r0001", row_counts(1)))}
    store = ReleaseStore(root / "releases")
    for rid, counts in answers:
        assert counts == row_counts(int(rid[1:])) == store.manifest(rid).row_counts, rid
    served = [rid for rid, _ in answers]
    assert served == sorted(served), "a reader went back to an older release"
    assert served[0] == release_id(seqs[0]) and served[-1] == release_id(seqs[-1])
    print(f"\nheld reader: {len(held_answers)} answers; reconnecting reader: {len(answers)} answers over "
          f"{len(set(served))} releases")
