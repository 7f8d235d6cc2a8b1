"""VisualPRM through Dagster into a release: tables, label stats, export files and their round trip."""

import json
import re
import shutil

import duckdb
import pyarrow.parquet as pq
import pytest

from conftest import published_home
from pipeline.cli import main
from pipeline.visualprm.sample import (
    JSONL_UNRESOLVED_IMAGE,
    visualprm_sample_facts,
    write_internvl_jsonl_sample,
    write_visualprm_sample,
)
from pipeline.visualprm.parse import parse_prm
from pipeline.visualprm.readers import connect, load_jsonl_input

ISSUE_SQL = "select source, avg(label='+') from prm_steps join prm_samples using (sample_id) group by 1"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    with published_home(tmp_path_factory.mktemp("prm")) as root:
        (rid,) = [p.name for p in (root / "releases").iterdir() if not p.name.startswith(".") and p.is_dir()]
        yield root, root / "releases" / rid


def q(root, sql):
    with duckdb.connect(str(root / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_sample_tables_match_what_the_generator_planted(release):
    root, _ = release
    facts = visualprm_sample_facts()
    expected = {e.sample_id: e for e in facts.expected}
    rows = q(root, "select sample_id, source, question, image_refs, n_steps, n_positive, n_negative, first_negative_step, message_format from prm_samples")
    assert len(rows) == len(expected) == 236
    for sid, source, question, refs, n, pos, neg, first_neg, fmt in rows:
        e = expected[sid]
        assert (source, question, tuple(refs), n, fmt) == (e.source, e.question, e.image_refs, len(e.steps), e.message_format)
        assert (pos, neg) == (e.labels.count("+"), e.labels.count("-"))
        assert first_neg == (e.labels.index("-") if "-" in e.labels else None)
    steps = q(root, "select sample_id, list(label order by step_index), list(text order by step_index), list(mc_score order by step_index) from prm_steps group by 1")
    for sid, labels, texts, scores in steps:
        assert tuple(labels) == expected[sid].labels and tuple(texts) == expected[sid].steps
        assert tuple(scores) == expected[sid].mc_scores


def test_malformed_rows_are_quarantined_with_reasons(release):
    root, _ = release
    got = dict(q(root, "select record_key, reason from quarantine where dataset = 'visualprm' and stage = 'parse'"))
    assert got == {
        "scienceqa_00057_4": "messages is not valid JSON",
        "iconqa_00002_4": "label 'maybe' of step 1 is neither '+' nor '-'",
        "CLEVR_math_00047_4": "step 4 has no label",
        "chartqa_00033_3": "turn 0 is not a {from, value} or {role, content} object",
        "geoqa+_00028_4": "JSON object without a steps_with_score list",
    }


def test_issue_query_and_label_stats(release, capsys, monkeypatch):
    root, _ = release
    monkeypatch.setenv("REWARDHOUSE_HOME", str(root))
    assert main(["sql", ISSUE_SQL, "--format", "csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    rates = {line.split(",")[0]: float(line.split(",")[1]) for line in out[1:] if line.split(",")[0]}
    assert len(out) == 10  # header + 8 sources + the folderless row (source NULL)
    assert set(rates) >= {"MathV360K", "geoqa+", "ai2d", "chartqa", "CLEVR_math", "nlvr2", "scienceqa", "iconqa"}
    assert all(0 <= r <= 1 for r in rates.values())
    overall = q(root, "select samples, steps, positive_rate, steps_min, steps_max from prm_label_stats where scope = 'overall'")
    assert overall == [(236, 1478, round(1 - 148 / 1478, 6), 1, 16)]
    per_source = q(root, "select sum(samples), sum(steps) from prm_label_stats where scope = 'source'")
    assert per_source == [(236, 1478)]


def test_images_embedded_ok_corrupt_and_unresolved(release):
    root, _ = release
    facts = visualprm_sample_facts()
    status = dict(q(root, "select image_key, status from prm_images"))
    assert status[facts.corrupt_image_path] == "corrupt"
    assert {"ok", "unresolved", "corrupt"} == set(status.values())
    origins = dict(q(root, "select origin, count(*) from prm_images group by 1"))
    assert set(origins) == {"embedded", "path"}


def test_export_files_are_internvl_shaped_and_round_trip(release):
    root, rel = release
    exports = rel / "exports"
    meta = json.loads((exports / "visualprm_train_meta.json").read_text())
    lines = (exports / "visualprm_train.jsonl").read_text().splitlines()
    assert meta == {"visualprm_train": {"root": str(exports), "annotation": str(exports / "visualprm_train.jsonl"),
                                        "data_augment": False, "repeat_time": 1, "length": len(lines)}}
    records = [json.loads(line) for line in lines]
    assert records and all(set(r) == {"id", "image", "conversations"} for r in records)
    for r in records:
        images = r["image"] if isinstance(r["image"], list) else [r["image"]]
        assert all((exports / p).is_file() for p in images)
        conv = r["conversations"]
        assert conv[0]["from"] == "system" and [t["from"] for t in conv[1:]] == ["human", "gpt"] * ((len(conv) - 1) // 2)
        assert conv[1]["value"].startswith("### Question:\n" + "<image>\n" * len(images))
        assert all(t["value"] in ("+", "-") for t in conv[2::2])
    parquet = pq.read_table(exports / "visualprm_train.parquet").to_pylist()
    assert [p["id"] for p in parquet] == [r["id"] for r in records]

    # Parse the export back with the project's own parser: identical samples and labels.
    con = connect()
    load_jsonl_input(con, [exports / "visualprm_train.jsonl"])
    back = parse_prm(con)
    assert back["quarantine"].num_rows == 0
    original = {r[0]: r[1:] for r in q(root, "select sample_id, question, n_steps, first_negative_step from prm_samples")}
    steps = {}
    for r in q(root, "select sample_id, list(text order by step_index), list(label order by step_index) from prm_steps group by 1"):
        steps[r[0]] = (r[1], r[2])
    ids = [r["id"] for r in records]
    reparsed = back["prm_samples"].to_pylist()
    assert len(reparsed) == len(ids)
    by_line = {f"visualprm_train:{i + 1}": sid for i, sid in enumerate(ids)}
    back_steps = {}
    for s in back["prm_steps"].to_pylist():
        back_steps.setdefault(by_line[s["sample_id"]], ([], []))
        back_steps[by_line[s["sample_id"]]][0].append(s["text"])
        back_steps[by_line[s["sample_id"]]][1].append(s["label"])
    for s in reparsed:
        sid = by_line[s["sample_id"]]
        assert (s["question"], s["n_steps"], s["first_negative_step"]) == original[sid]
        assert back_steps[sid] == steps[sid]


def test_samples_with_unloadable_images_are_left_out_of_the_export_with_a_reason(release):
    root, _ = release
    exported = q(root, "select count(*) from prm_samples where in_export")[0][0]
    unloadable = q(root, "select count(*) from quarantine where stage = 'export' and dataset = 'visualprm'")[0][0]
    assert q(root, "select count(*) from prm_samples where not in_export and not is_duplicate and not is_contaminated") == [(unloadable,)]
    _, rel = release
    assert len((rel / "exports" / "visualprm_train.jsonl").read_text().splitlines()) == exported
    reasons = [r for (r,) in q(root, "select reason from quarantine where stage = 'export' and dataset = 'visualprm'")]
    unresolved = "is unresolved (not embedded, and no image root was given (--images))"
    assert len(reasons) == 146  # 141 samples over 36 path images the sample does not embed, 5 over one corrupt image
    assert sum(r == "image MathV360K/data_images/00958.jpg is corrupt" for r in reasons) == 5
    assert all(re.fullmatch(rf"image \S+ {re.escape(unresolved)}", r) for r in reasons
               if r != "image MathV360K/data_images/00958.jpg is corrupt")


def test_local_internvl_jsonl_form_with_images_in_a_folder_and_a_zip(tmp_path, home, capsys):
    facts = write_internvl_jsonl_sample(tmp_path / "mirror")
    assert main(["run", "--source", "local", "--path", str(tmp_path / "mirror")]) == 0
    capsys.readouterr()
    assert q(home, "select count(*) from prm_samples") == [(len(facts.expected),)]
    assert q(home, "select count(*) from mmrb2_pairs") == [(0,)]  # MMRB2 is absent from this mirror
    status = dict(q(home, "select image_key, status from prm_images"))
    assert status.pop(JSONL_UNRESOLVED_IMAGE) == "unresolved" and set(status.values()) == {"ok"}
    ids = {sid for (sid,) in q(home, "select sample_id from prm_samples")}
    assert ids == {e.sample_id for e in facts.expected}


def test_local_parquet_form_resolves_path_only_images_from_the_dataset_folder(tmp_path, home, capsys):
    write_visualprm_sample(tmp_path / "m")
    # Place one path-only image beside the shards, as a user who has the images would.
    sample = tmp_path / "m" / "mm-eval" / "VisualPRM400K"
    with duckdb.connect() as con:
        ref = con.execute(f"""select m.path from read_parquet('{sample}/data/*.parquet'), unnest(media) as t(m)
                              where m.bytes is null order by 1 limit 1""").fetchone()[0]
    (sample / ref).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(next((tmp_path / "m").rglob("*.parquet")), sample / "unrelated.bin")  # noise is ignored
    from PIL import Image
    Image.new("RGB", (9, 7), "red").save(sample / ref)
    assert main(["run", "--source", "local", "--path", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert q(home, f"select origin, status, width, height from prm_images where image_key = '{ref}'") == [("path", "ok", 9, 7)]


def test_label_threshold_setting_relabels_raw_steps_and_makes_a_new_release(release, tmp_path, monkeypatch, capsys):
    root, _ = release
    monkeypatch.setenv("REWARDHOUSE_HOME", str(root))
    monkeypatch.setenv("DAGSTER_HOME", str(root / "dagster"))
    before = q(root, "select count(*) from prm_steps where label = '+' and mc_score is not null")[0][0]
    assert main(["run", "--prm-label-threshold", "0.5"]) == 0
    assert "published" in capsys.readouterr().out
    after = q(root, "select count(*) from prm_steps where label = '+' and mc_score is not null")[0][0]
    wrong = q(root, "select count(*) from prm_steps where mc_score is not null and (label = '+') <> (mc_score > 0.5)")
    assert after < before and wrong == [(0,)]
    assert q(root, "select count(*) from releases") == [(2,)]
