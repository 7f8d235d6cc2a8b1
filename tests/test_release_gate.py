"""The release gate: blocking checks run before publishing; when one fails nothing is published,
the previous release stays current and the warehouse keeps serving it."""

import shutil

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import published_home
from pipeline.cli import main
from pipeline.definitions import defs
from pipeline.resources import RewardhouseResource

UPSTREAM = dg.AssetSelection.all() - dg.AssetSelection.assets("release_candidate", "warehouse_release")
GATE = dg.AssetSelection.assets("release_candidate", "dedupe_review", "warehouse_release")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A first release from the sample, then every upstream asset re-materialized with another
    setting (so the next candidate has a new id), ready for the gate to judge."""
    with published_home(tmp_path_factory.mktemp("gate")) as root:
        with dg.DagsterInstance.from_config(str(root / "dagster")) as instance:
            result = dg.materialize(list(defs.assets) + list(defs.asset_checks), selection=UPSTREAM,
                                    instance=instance, resources={"rewardhouse": resource(root)})
            assert result.success
        yield root


def resource(root) -> RewardhouseResource:
    return RewardhouseResource(home=str(root), dedupe_max_distance=6)


def current(root):
    with duckdb.connect(str(root / "warehouse.duckdb"), read_only=True) as con:
        return con.execute("select release_id from releases where is_current").fetchall(), \
            con.execute("select count(*) from releases").fetchone()[0]


def judge(root):
    with dg.DagsterInstance.from_config(str(root / "dagster")) as instance:
        return dg.materialize(list(defs.assets) + list(defs.asset_checks), selection=GATE, instance=instance,
                              resources={"rewardhouse": resource(root)}, raise_on_error=False)


def staged(root, asset: str, table: str):
    (path,) = sorted((root / "staging" / asset).glob(f"*/{table}.parquet"), key=lambda p: p.stat().st_mtime)[-1:]
    return path


@pytest.fixture
def corrupt(home):
    """Replace a staged table for one test and put it back afterwards."""
    saved = []

    def apply(asset, table, change):
        path = staged(home, asset, table)
        backup = path.with_suffix(".bak")
        shutil.copyfile(path, backup)
        saved.append((path, backup))
        pq.write_table(change(pq.read_table(path)), path)

    yield apply
    for path, backup in saved:
        shutil.move(backup, path)


def set_column(table: pa.Table, name: str, values) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, table.schema.field(name).type))


def assert_blocked(root, before, result, check):
    failed = {e.check_name for e in result.get_asset_check_evaluations() if not e.passed}
    assert check in failed
    assert not result.asset_materializations_for_node("warehouse_release")
    assert current(root) == before


def test_label_x_blocks_the_release(home, corrupt):
    before = current(home)

    def label_x(t):
        labels = t["label"].to_pylist()
        labels[0] = "x"
        return set_column(t, "label", labels)

    corrupt("visualprm_samples", "prm_steps", label_x)
    result = judge(home)
    assert_blocked(home, before, result, "gx_prm_steps")
    assert "step_label_distribution" in {e.check_name for e in result.get_asset_check_evaluations() if not e.passed}


def test_duplicate_pair_id_blocks_the_release(home, corrupt):
    before = current(home)
    corrupt("mmrb2_annotations", "mmrb2_pairs", lambda t: pa.concat_tables([t, t.slice(0, 1)]))
    assert_blocked(home, before, judge(home), "gx_mmrb2_pairs")


def test_dangling_image_reference_blocks_the_release(home, corrupt):
    before = current(home)

    def dangle(t):
        names = t["image_name"].to_pylist()
        names[next(i for i, n in enumerate(names) if n)] = "nowhere_0.jpg"
        return set_column(t, "image_name", names)

    corrupt("mmrb2_annotations", "mmrb2_response_items", dangle)
    assert_blocked(home, before, judge(home), "referential_integrity")


def test_forty_point_jump_in_positive_rate_blocks_the_release(home, corrupt):
    before = current(home)

    def flip(t):
        labels = t["label"].to_pylist()
        for i in [i for i, l in enumerate(labels) if l == "+"][: int(0.4 * len(labels))]:
            labels[i] = "-"
        return set_column(t, "label", labels)

    corrupt("visualprm_samples", "prm_steps", flip)
    result = judge(home)
    assert_blocked(home, before, result, "step_label_distribution")
    drift = next(e for e in result.get_asset_check_evaluations() if e.check_name == "drift_vs_previous")
    assert not drift.passed and drift.severity == dg.AssetCheckSeverity.WARN


def test_clean_candidate_passes_and_publishes_with_quality_results(home):
    before_id, before_n = current(home)
    result = judge(home)
    assert result.success and result.asset_materializations_for_node("warehouse_release")
    now_id, now_n = current(home)
    assert now_n == before_n + 1 and now_id != before_id
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        rows = con.execute('select count(*), bool_and(passed or severity = \'WARN\') from quality_results').fetchone()
        drift = con.execute("""select details from quality_results where "check" = 'drift_vs_previous'""").fetchone()[0]
    from checks.outcomes import GX_TABLES, RULE_CHECKS

    assert rows == (len(GX_TABLES) + len(RULE_CHECKS), True) and before_id[0][0] in drift  # a GX suite per table + the rules


def test_cli_says_which_check_blocked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("REWARDHOUSE_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    assert main(["run", "--set", "positive_rate_min=0.95"]) == 1
    err = capsys.readouterr().err
    assert "check step_label_distribution failed: overall positive rate out of bounds" in err
    assert "no release published (blocking checks failed)" in err and "Traceback" not in err
    assert not (tmp_path / "releases" / "CURRENT").exists()
