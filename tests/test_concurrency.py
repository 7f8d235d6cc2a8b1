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


def test_two_publishers_at_once_take_turns_on_the_warehouse_writer(tmp_path):
    root = tmp_path / "home"
    for seq in (1, 2, 3):
        stage(root, seq)
    assert subprocess.run([sys.executable, str(HELPER), str(root), "1"], capture_output=True, timeout=120).returncode == 0
    procs = {}
    for seq in (2, 3):
        procs[seq] = subprocess.Popen([sys.executable, str(HELPER), str(root), str(seq), "--go", "--keep", "0"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert procs[seq].stdout.readline().strip() == "ready"
    for proc in procs.values():
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = {seq: (*proc.communicate(timeout=120), proc.returncode) for seq, proc in procs.items()}
    for seq, (out, err, code) in results.items():
        assert code == 0, err
        assert json.loads(out)["published"] is True
    (waiter,) = [seq for seq, (_, err, _) in results.items() if "waiting for the warehouse writer" in err]

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
    publisher = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from publish_helper import publish\n"
                               "for seq in map(int, sys.argv[2:]): publish(Path(sys.argv[1]), seq, keep=0)",
         str(root), *map(str, seqs[1:])],
        cwd=HERE, stderr=subprocess.PIPE, text=True,
    )
    while publisher.poll() is None:
        held_answers.append(_answer(held.execute(ANSWER_SQL).fetchone()))
        time.sleep(0.005)
    held.close()
    assert publisher.returncode == 0, publisher.stderr.read()
    lines = [first]
    deadline = time.monotonic() + 60
    while f'"{release_id(seqs[-1])}"' not in lines[-1] and time.monotonic() < deadline:
        lines.append(reader.stdout.readline())
    stop.touch()
    rest, err = reader.communicate(timeout=60)
    lines = [json.loads(line) for line in [*lines, *rest.splitlines()]]

    assert not [line for line in lines if isinstance(line, dict)], err
    answers = [_answer(line) for line in lines]
    # The held connection keeps the snapshot it opened: the first release, whole, throughout.
    assert len(held_answers) > 20 and set(map(json.dumps, held_answers)) == {json.dumps(("r0001", row_counts(1)))}
    store = ReleaseStore(root / "releases")
    for rid, counts in answers:
        assert counts == row_counts(int(rid[1:])) == store.manifest(rid).row_counts, rid
    served = [rid for rid, _ in answers]
    assert served == sorted(served), "a reader went back to an older release"
    assert served[0] == release_id(seqs[0]) and served[-1] == release_id(seqs[-1])
    print(f"\nheld reader: {len(held_answers)} answers; reconnecting reader: {len(answers)} answers over "
          f"{len(set(served))} releases")
