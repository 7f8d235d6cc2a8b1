"""The `local` source on the real annotation files, through Dagster and the CLI, into DuckDB."""

import json
import duckdb
import pytest

from conftest import SHARED, published_home
from pipeline.cli import main

JUDGEMENTS = sorted((SHARED / "judgements").glob("sample_task*.json"))


@pytest.fixture(scope="module")
def published(real_mirror, tmp_path_factory):
    with published_home(tmp_path_factory.mktemp("e2e"), "--source", "local", "--path", str(real_mirror)) as root:
        yield root


def q(root, sql):
    with duckdb.connect(str(root / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_pairs_are_4000_unique_1000_per_task_with_upstream_a_shares(published):
    assert q(published, "select count(*), count(distinct pair_id) from mmrb2_pairs") == [(4000, 4000)]
    rows = q(published, "select task, count(*), round(avg((chosen='A')::int) * 100, 1) from mmrb2_pairs group by 1 order by 1")
    assert rows == [("edit", 1000, 55.5), ("interleaved", 1000, 57.5), ("reasoning", 1000, 47.5), ("t2i", 1000, 53.2)]


def test_14017_image_items_all_resolved_with_names_intact(published):
    assert q(published, "select count(*) from mmrb2_response_items where kind = 'image'") == [(14017,)]
    resolved = q(published, """select count(*) from mmrb2_response_items i join mmrb2_images m using (image_name)
                               where i.kind = 'image' and m.status = 'ok'""")
    assert resolved == [(14017,)]
    spaced = q(published, "select count(*) from mmrb2_images where image_name like '% %' and status = 'ok'")
    assert spaced == [(42,)]  # measured on the real files: 42 response images have a space in their name
    example = "r2ibench_logical_Sufficient Conditional_27_-1350294928672806666_imagen4-ultra_4108_imagen4-ultra_108_0.jpg"
    assert q(published, f"select zip_entry from mmrb2_images where image_name = '{example}'") == [(f"images/{example}",)]
    assert q(published, "select count(*) from quarantine") == [(0,)]


def test_prompt_images_shipped_flat_resolve_with_colons_intact(published):
    # 119 prompt images ship in the zip (new_images/, synthetic_images/); the rest come from elsewhere.
    assert q(published, "select count(*), count(distinct pair_id) from mmrb2_prompt_items where kind = 'image'") == [(811, 534)]
    name = "synthetic_images/GPTGeminiAgent_gemini_2_5_flash_2025-09-18T23:05:33.756657_0.jpg"
    row = q(published, f"select status, zip_entry from mmrb2_images where image_name = '{name}'")
    assert row == [("ok", "images/GPTGeminiAgent_gemini_2_5_flash_2025-09-18T23:05:33.756657_0.jpg")]
    assert q(published, "select count(*) from mmrb2_images") == [(14017 + 119,)]


def test_rerun_on_unchanged_input_publishes_nothing(published, real_mirror, capsys, monkeypatch):
    monkeypatch.setenv("REWARDHOUSE_HOME", str(published))
    monkeypatch.setenv("DAGSTER_HOME", str(published / "dagster"))
    before = q(published, "select release_id from releases")
    assert main(["run", "--source", "local", "--path", str(real_mirror)]) == 0
    assert "unchanged (no new release)" in capsys.readouterr().out
    assert q(published, "select release_id from releases") == before and len(before) == 1
    assert len([p for p in (published / "releases").iterdir() if not p.name.startswith(".")]) == 2  # release + CURRENT


def test_score_reproduces_upstream_sample_figures(published, capsys, monkeypatch):
    monkeypatch.setenv("REWARDHOUSE_HOME", str(published))
    assert main(["score", *map(str, JUDGEMENTS)]) == 0
    lines = capsys.readouterr().out.splitlines()
    got = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert got == {"t2i": "53.20%", "edit": "55.50%", "interleaved": "57.50%", "reasoning": "47.50%", "overall": "53.42%"}


def test_score_of_ids_the_release_lacks_says_what_it_holds_and_how_to_load_the_rest(published, capsys, monkeypatch,
                                                                                    tmp_path):
    monkeypatch.setenv("REWARDHOUSE_HOME", str(published))
    judged = tmp_path / "judged.json"
    judged.write_text(json.dumps({"zz1": {"forward": [{"judgement": "A"}]}, "zz2": {"forward": [{"judgement": "B"}]}}))
    assert main(["score", str(judged)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none of the 2 judged pair ids is among the 4000 MMRB2 pairs" in err, err
    assert "rewardhouse run --source hf" in err


def test_sql_is_read_only_and_releases_lists_counts(published, capsys, monkeypatch):
    monkeypatch.setenv("REWARDHOUSE_HOME", str(published))
    assert main(["sql", "create table evil as select 1"]) == 2
    assert "read-only" in capsys.readouterr().err
    assert main(["sql", "select count(*) as n from mmrb2_pairs", "--format", "csv"]) == 0
    assert capsys.readouterr().out.strip() == "n\n4000"
    assert main(["releases"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("* ") and "mmrb2_pairs=4000" in out and "mmrb2_images=14136" in out


def test_local_source_with_a_bad_path_fails_with_a_clear_message(home, capsys, tmp_path):
    # Refused before a run is created: one line naming the path, exit 2.
    assert main(["run", "--source", "local", "--path", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no such folder ({tmp_path / 'nope'})" in err and "Traceback" not in err


def test_task_summary_view_reads_the_current_release(published):
    rows = q(published, "select task, pairs, chosen_a_pct, response_images, images_not_ok from mmrb2_task_summary")
    assert rows == [("edit", 1000, 55.5, 2003, 0), ("interleaved", 1000, 57.5, 5779, 0),
                    ("reasoning", 1000, 47.5, 4235, 0), ("t2i", 1000, 53.2, 2000, 0)]


def test_cli_runs_land_in_the_persistent_dagster_home_the_ui_reads(published):
    import dagster as dg

    with dg.DagsterInstance.from_config(str(published / "dagster")) as instance:
        runs = instance.get_runs()
    assert runs and {r.job_name for r in runs} == {"refresh"}
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
