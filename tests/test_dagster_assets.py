"""The Dagster glue: definitions load, every asset materializes on the sample, checks report."""

import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from checks.outcomes import REQUIRED_CHECKS
from pipeline.definitions import defs
from pipeline.resources import RewardhouseResource
from pipeline.mmrb2.sample import CORRUPT_IMAGE, MISSING_IMAGE, sample_facts

REPO = Path(__file__).resolve().parents[1]


def test_definitions_hold_the_mmrb2_assets_checks_and_refresh_job():
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"mmrb2_raw", "mmrb2_annotations", "mmrb2_images", "warehouse_release"} <= keys
    # the refresh job (what the schedule, the sensor and `rewardhouse run` launch) builds every asset
    assert defs.resolve_job_def("refresh").asset_layer.executable_asset_keys == set(
        defs.resolve_asset_graph().get_all_asset_keys())


def test_materialize_sample_publishes_release_and_runs_checks(tmp_path):
    resource = RewardhouseResource(source="sample", home=str(tmp_path))
    assets = [a for a in defs.assets]
    result = dg.materialize(assets + list(defs.asset_checks), resources={"rewardhouse": resource})
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    # Planted faults are quarantined with reasons, so every check passes on the sample.
    assert checks["mmrb2_pairs_well_formed"] is True
    assert set(checks) == {"mmrb2_pairs_well_formed", *REQUIRED_CHECKS}
    assert all(checks.values()), {k: v for k, v in checks.items() if not v}

    facts = sample_facts()
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from mmrb2_pairs").fetchone()[0] == sum(facts.pairs_per_task.values())
        status = dict(con.execute("select image_name, status from mmrb2_images").fetchall())
        assert status[CORRUPT_IMAGE] == "corrupt" and status[MISSING_IMAGE] == "missing"
        quarantined = con.execute("select stage, record_key from quarantine where dataset = 'mmrb2' order by stage").fetchall()
    assert quarantined == [("decode", CORRUPT_IMAGE), ("resolve", MISSING_IMAGE)]


def test_dagster_finds_the_code_location_from_pyproject_without_flags(tmp_path):
    exe = Path(sys.executable).with_name("dagster")
    out = subprocess.run(
        [str(exe), "definitions", "validate"], cwd=REPO, capture_output=True, text=True, timeout=300,
        env={"PATH": str(exe.parent), "DAGSTER_HOME": str(tmp_path), "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Validation successful for code location rewardhouse" in out.stderr + out.stdout


def test_unchanged_input_reuses_staged_work_and_reports_data_versions(tmp_path):
    resource = RewardhouseResource(source="sample", home=str(tmp_path))
    everything = list(defs.assets) + list(defs.asset_checks)
    def candidate_files():
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in tmp_path.glob("staging/candidates/*/tables/*.parquet")}

    with dg.DagsterInstance.ephemeral() as instance:
        first = dg.materialize(everything, resources={"rewardhouse": resource}, instance=instance)
        written = candidate_files()
        second = dg.materialize(everything, resources={"rewardhouse": resource}, instance=instance)
    # the same release id: the candidate's tables an earlier run wrote are neither read nor written again
    assert written and candidate_files() == written
    (a,), (b,) = first.asset_materializations_for_node("release_candidate"), second.asset_materializations_for_node("release_candidate")
    assert {k: v.value for k, v in a.metadata.items()} == {k: v.value for k, v in b.metadata.items()}
    heavy = ["mmrb2_annotations", "mmrb2_images", "visualprm_samples", "visualprm_images", "image_hashes", "image_dedupe", "visualprm_export"]
    for name in heavy:
        (a,) = first.asset_materializations_for_node(name)
        (b,) = second.asset_materializations_for_node(name)
        assert a.metadata["reused"].value is False and b.metadata["reused"].value is True, name
        assert a.tags["dagster/data_version"] == b.tags["dagster/data_version"], name
    (release,) = second.asset_materializations_for_node("warehouse_release")
    assert release.metadata["published"].value is False
    gx = next(e for e in second.get_asset_check_evaluations() if e.check_name == "gx_prm_steps")
    assert "reused_from_release" in gx.metadata["details"].value


def test_bumping_an_assets_code_version_redoes_its_staged_work(tmp_path):
    """The reuse key holds the asset's own code_version: after a parser fix and a bump, the staged
    folder of the old code is not reused."""
    from assets.mmrb2 import mmrb2_annotations, mmrb2_raw

    resource = RewardhouseResource(source="sample", home=str(tmp_path))

    def reused(annotations) -> bool:
        result = dg.materialize([mmrb2_raw, annotations], resources={"rewardhouse": resource}, instance=instance)
        (event,) = [m for m in result.get_asset_materialization_events() if m.asset_key.to_user_string() == "mmrb2_annotations"]
        return event.materialization.metadata["reused"].value

    bumped = dg.asset(name="mmrb2_annotations", group_name="staged", code_version="999")(
        mmrb2_annotations.op.compute_fn.decorated_fn)
    assert mmrb2_annotations.code_versions_by_key[mmrb2_annotations.key] != "999"
    with dg.instance_for_test() as instance:
        assert reused(mmrb2_annotations) is False
        assert reused(mmrb2_annotations) is True  # unchanged input and code: reused
        assert reused(bumped) is False  # same input, new code version: redone
        assert reused(bumped) is True


def test_dg_check_defs_and_make_validate_from_the_repository_root(tmp_path):
    """Dagster's dg CLI loads the project from [tool.dg] with no DAGSTER_HOME set (dagster.yaml
    names no variable), directly and as `make validate` runs it."""
    import os
    import shutil

    from pipeline.settings import REPO_ROOT

    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["REWARDHOUSE_HOME"] = str(tmp_path / "home")
    dg_cli = Path(sys.executable).with_name("dg")
    done = subprocess.run([str(dg_cli), "check", "defs"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "All definitions loaded successfully" in done.stdout + done.stderr, \
        (done.stdout + done.stderr)[-3000:]
    if shutil.which("uv") is None or shutil.which("make") is None:
        pytest.skip("make validate needs make and uv on PATH (dg check defs passed)")
    done = subprocess.run(["make", "-s", "validate"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "All definitions loaded successfully" in done.stdout + done.stderr, \
        (done.stdout + done.stderr)[-3000:]


def test_only_checks_that_can_fail_with_error_are_marked_blocking():
    """The UI labels a blocking check as such: a rule that only ever warns (dedupe_sanity) is not
    one; every GX suite and every rule whose severity can be ERROR is."""
    from checks.rules import WARN_ONLY

    specs = {spec.name: spec for checks in defs.asset_checks for spec in checks.check_specs}
    assert WARN_ONLY and all(not specs[name].blocking for name in WARN_ONLY)
    assert all(spec.blocking for name, spec in specs.items() if name not in WARN_ONLY), \
        sorted(n for n, s in specs.items() if not s.blocking)


def test_a_candidate_is_reused_only_whole_for_its_release_id_and_its_staged_files(tmp_path):
    import json

    from assets.release import INPUTS_FILE, _written_tables
    from pipeline.staging import CANDIDATE_FILE

    folder = tmp_path / "candidates" / "abc"
    (folder / "tables").mkdir(parents=True)
    for name in ("t1", "t2"):
        (folder / "tables" / f"{name}.parquet").write_bytes(b"x")
    stamps = {"/staging/a/t1.parquet": [10, 123], "/staging/b/t2.parquet": [20, 456]}
    (folder / INPUTS_FILE).write_text(json.dumps(stamps))
    assert _written_tables(folder, "abc", stamps) is None  # no record: a run died before writing it
    (folder / CANDIDATE_FILE).write_text(json.dumps({"release_id": "abc", "tables": {"t1": "/elsewhere/t1.parquet",
                                                                                     "t2": "/elsewhere/t2.parquet"}}))
    assert _written_tables(folder, "abc", stamps) == {n: str(folder / "tables" / f"{n}.parquet") for n in ("t1", "t2")}
    assert _written_tables(folder, "other", stamps) is None
    # a staged file rewritten since (a fix, or by hand): gathered again
    assert _written_tables(folder, "abc", {**stamps, "/staging/b/t2.parquet": [20, 457]}) is None
    (folder / "tables" / "t2.parquet").unlink()
    assert _written_tables(folder, "abc", stamps) is None  # a table is gone: all are written again
    (folder / CANDIDATE_FILE).write_text("{not json")
    assert _written_tables(folder, "abc", stamps) is None
