"""`rewardhouse gc`: staged work unused for a while goes, releases and the current candidate stay,
and a later run simply rebuilds what it needs."""

from __future__ import annotations

import os
import time

from conftest import tree_digests
from pipeline.cli import main
from pipeline.gc import GX_STORES, collect_garbage, validation_runs, work_folders
from pipeline.settings import Layout
from warehouse.store import ReleaseStore


def _age(folder, days: float) -> None:
    old = time.time() - days * 86_400
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (old, old))


def test_gc_removes_only_stale_staged_work_and_a_rerun_rebuilds_it(home, capsys):
    assert main(["run"]) == 0
    layout = Layout()
    current = ReleaseStore(layout.releases).current()
    releases_before = tree_digests(layout.releases)
    units = work_folders(layout.staging)
    candidate = layout.staging / "candidates" / current
    assert candidate in units and len(units) >= 10
    # A crash left a folder of staged files without a result record.
    unfinished = layout.staging / "image_hashes" / "deadbeefdeadbeef"
    unfinished.mkdir(parents=True)
    (unfinished / "image_hashes.parquet").write_bytes(b"partial")

    # GX results of the current release stay; an older release's results and pages go.
    current_runs = validation_runs(layout.root / "quality")
    assert current_runs and all(r.name.startswith(current) for r in current_runs)
    older = []
    for store in GX_STORES:
        run = layout.root / "quality" / "gx" / store / "mmrb2_pairs" / "0123456789abcdef-00000000"
        (run / "20250101T000000.000000Z").mkdir(parents=True)
        (run / "20250101T000000.000000Z" / "rewardhouse-mmrb2_pairs.json").write_text("{}")
        older.append(run)

    for folder in [*units, unfinished, *older, *current_runs]:
        _age(folder, 10)
    fresh = units[0] if units[0] != candidate else units[1]
    (fresh / "_result.json").touch()  # used just now

    capsys.readouterr()
    assert main(["gc", "--dry-run"]) == 0
    assert "would remove" in capsys.readouterr().out
    assert sorted(work_folders(layout.staging)) == sorted([*units, unfinished])

    assert main(["gc", "--older-than", "7"]) == 0
    out = capsys.readouterr().out
    left = work_folders(layout.staging)
    assert sorted(left) == sorted([candidate, fresh])
    assert f"removed {len(units) + 1 - 2 + 2} folder(s) of staged work and validation results unused for 7 days" in out
    assert tree_digests(layout.releases) == releases_before  # releases are never touched
    assert validation_runs(layout.root / "quality") == current_runs

    # The next run rebuilds what it needs and publishes nothing new: same inputs, same release.
    assert main(["run"]) == 0
    assert "unchanged (no new release)" in capsys.readouterr().out
    assert ReleaseStore(layout.releases).current() == current
    # Everything it used is fresh again: a week-old cutoff removes nothing now.
    report = collect_garbage(layout, 7, current_release=current)
    assert report.removed == [] and report.kept == len(units)
    # With no age limit everything but the current release's candidate goes.
    report = collect_garbage(layout, 0, current_release=current, now=time.time() + 1)
    assert work_folders(layout.staging) == [candidate] and report.freed > 0
