"""Dedupe on the sample release: every planted copy is clustered, contamination and duplicate
rollouts are marked, the export leaves them out and the manifest says how many."""

import json

import duckdb
import pytest

from conftest import published_home
from pipeline.cli import main

# What the sample generators plant, written out (pipeline/*/sample.py are the code under test too).
MMRB2_EXACT = ("chameleon_ef9a2d51-9f2c-41b1-bff9-857c56cd516e_1861549491225900207_gpt-imagen-agent_2414_gpt-image-agent_414_0.jpg",
               "chameleon_e5107129-7e4f-4a40-861b-4b6b11ab566b_-794683830333257013_gemini-2.0-flash_6552_gpt-gemini-agent_552_2.jpg")
MMRB2_PAIRS = (
    ("evalmuse_02718_-2890980219122741248_imagen4-ultra_4505_imagen4-ultra_505_0.jpg",
     "evalmuse_02718_-2890980219122741248_imagen4-ultra_4505_imagen4-ultra_505_1.jpg"),
    MMRB2_EXACT,
    ("interleavedeval__2747862600049231019_gpt-imagen-agent_6797_gpt-gemini-agent_797_1.jpg",
     "hq-edit_318_-2263586102388815385_gemini-2.5-flash_5508_flux-kontext_508_0.jpg"),
    ("wise_412_3591808398015666109_imagen3_5161_gemini-2.0-flash_161_0.jpg",
     "isgbench_0412_-8328960670581685083_gemini-2.0-flash_2757_gemini-2.0-flash_757_1.jpg"),
)
EXACT_DUPLICATE_PATHS = ("MathV360K/data_images/34384.jpg", "MathV360K/data_images/16422.jpg")
NEAR_DUPLICATE_PATHS = ("geoqa+/images/5627.png", "geoqa+/images/1508.png")
CROPPED_COPY = ("CLEVR_math/images/CLEVR_train_048334.png", "CLEVR_math/images/CLEVR_train_020057.png")
BRIGHTENED_COPY = ("CLEVR_math/images/CLEVR_train_042207.png", "CLEVR_math/images/CLEVR_train_031570.png")
LOOKALIKE_PAIRS = (("geoqa+/images/10579.png", "geoqa+/images/11111.png"),
                   ("chartqa/train/png/two_col_38228.png", "chartqa/train/png/two_col_15672.png"))
CONTAMINATED = ("MathV360K/data_images/34505.jpg", "muirbench_14_gpt-4.1_1662_GPT5_Gemini_SketchpadAgent_1660_0.jpg")
VLRB_CONTAMINATED = "ai2d/abc_images/2524.png"
DUPLICATE_SAMPLE_IDS = ("chartqa_00007_1", "chartqa_00007_3")
ALL_PAIRS = [("mmrb2", p) for p in MMRB2_PAIRS] + [
    ("visualprm", p) for p in (EXACT_DUPLICATE_PATHS, NEAR_DUPLICATE_PATHS, CROPPED_COPY, BRIGHTENED_COPY)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    with published_home(tmp_path_factory.mktemp("dedupe")) as root:
        yield root


def q(root, sql, params=None):
    with duckdb.connect(str(root / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def test_hashes_are_integer_columns_usable_in_sql(root):
    assert q(root, "select typeof(phash), typeof(dhash) from image_hashes limit 1") == [("BIGINT", "BIGINT")]
    datasets = dict(q(root, "select dataset, count(*) from image_hashes group by 1"))
    assert datasets["mmrb2"] == 79 and datasets["visualprm"] > 0  # every decodable MMRB2 image
    # The SQL distance of a planted pair is the one computed in Python from the same two hashes.
    original, copy = CROPPED_COPY
    (sql_distance, a, b), = q(root, """select bit_count(xor(x.phash, y.phash)), x.phash, y.phash from image_hashes x, image_hashes y
                                     where x.image_key = ? and y.image_key = ?""", [original, copy])
    assert a != b and sql_distance == bin((a ^ b) & (2**64 - 1)).count("1") > 0


@pytest.mark.parametrize("dataset, pair", ALL_PAIRS, ids=[f"{d}:{p[1]}" for d, p in ALL_PAIRS])
def test_every_planted_copy_lands_in_the_cluster_of_its_original(root, dataset, pair):
    original, copy = pair
    rows = dict(q(root, "select image_key, cluster_id from duplicate_clusters where dataset = ? and image_key in (?, ?)",
                  [dataset, original, copy]))
    assert set(rows) == {original, copy} and rows[original] == rows[copy]


PLANTED_KINDS = {EXACT_DUPLICATE_PATHS: "exact", NEAR_DUPLICATE_PATHS: "near",
                 CROPPED_COPY: "crop", BRIGHTENED_COPY: "near"}


@pytest.mark.parametrize("pair, kind", PLANTED_KINDS.items(), ids=list(PLANTED_KINDS.values()))
def test_planted_copies_name_the_rule_that_accepted_them(root, pair, kind):
    rows = q(root, "select image_key, is_canonical, kind, score from duplicate_clusters where image_key in (?, ?)", list(pair))
    (canonical, member), = [(r, m) for r in rows for m in rows if r[1] and not m[1]]
    assert canonical[2:] == (None, None)
    assert member[2] == kind and (member[3] == 1.0 if kind == "exact" else 0.965 <= member[3] <= 1.0)


@pytest.mark.parametrize("pair", LOOKALIKE_PAIRS, ids=["geometry", "chart"])
def test_unrelated_look_alikes_stay_apart(root, pair):
    """Candidates of the search (test_source_visualprm_sample shows it) that verification refuses."""
    assert q(root, "select count(*) from image_hashes where image_key in (?, ?)", list(pair)) == [(2,)]
    clusters = q(root, "select image_key, cluster_id from duplicate_clusters where image_key in (?, ?)", list(pair))
    assert len({c for _, c in clusters}) == len(clusters)  # not in one cluster (or in none)
    assert q(root, "select count(*) from contamination where train_image_key in (?, ?)", list(pair)) == [(0,)]


def test_each_cluster_has_one_canonical_and_kinds_follow_bytes(root):
    assert q(root, "select count(*) from (select cluster_id from duplicate_clusters group by 1 having count(*) filter (where is_canonical) <> 1)") == [(0,)]
    exact = MMRB2_EXACT
    kinds = dict(q(root, "select image_key, coalesce(kind, 'canonical') from duplicate_clusters where image_key in (?, ?)", list(exact)))
    assert sorted(kinds.values()) == ["canonical", "exact"]


def test_the_planted_train_eval_near_copy_is_contamination(root):
    train, eval_ = CONTAMINATED
    rows = q(root, "select eval_dataset, distance, kind, score from contamination where train_image_key = ? and eval_image_key = ?",
             [train, eval_])
    assert len(rows) == 1 and rows[0][0] == "mmrb2" and rows[0][1] <= 8 and rows[0][2] == "near" and 0.965 <= rows[0][3] <= 1.0
    flagged = q(root, "select count(*) from prm_samples where is_contaminated")[0][0]
    users = q(root, "select count(*) from prm_samples where list_contains(image_refs, ?)", [train])[0][0]
    # the VL-RewardBench sample copies another training image (pipeline/vlrb/sample.py)
    vlrb_users = q(root, "select count(*) from prm_samples where list_contains(image_refs, ?)", [VLRB_CONTAMINATED])[0][0]
    # and the VL-RewardBench sample copies the question of one more group, by its text only
    from pipeline.vlrb.sample import facts as vlrb_facts

    (text_copies,) = vlrb_facts().text_leak.values()
    assert flagged == users + vlrb_users + len(text_copies) and users > 0 and vlrb_users > 0


def test_duplicate_rollout_is_marked_and_left_out_of_the_export(root):
    kept, dup = DUPLICATE_SAMPLE_IDS
    rows = dict((r[0], r[1:]) for r in q(root, "select sample_id, is_duplicate, duplicate_of, in_export from prm_samples where sample_id in (?, ?)", [kept, dup]))
    assert rows[dup][:2] == (True, kept) and rows[kept][:2] == (False, None)
    assert rows[dup][2] is False
    assert q(root, "select count(*) from prm_samples where is_duplicate") == [(1,)]
    rid = q(root, "select release_id from releases where is_current")[0][0]
    manifest = json.loads((root / "releases" / rid / "manifest.json").read_text())
    removed = manifest["summary"]["export"]["removed"]
    assert removed["duplicate"] == 1 and removed["contaminated"] == q(root, "select count(*) from prm_samples where is_contaminated")[0][0]
    exported = {json.loads(line)["id"] for line in (root / "releases" / rid / "exports" / "visualprm_train.jsonl").read_text().splitlines()}
    assert dup not in exported and not exported & {s for (s,) in q(root, "select sample_id from prm_samples where is_contaminated")}
    assert len(exported) == manifest["summary"]["export"]["rows"] == q(root, "select count(*) from prm_samples where in_export")[0][0]


def test_keep_settings_put_them_back(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("REWARDHOUSE_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    assert main(["run", "--keep-duplicates", "--keep-contaminated"]) == 0
    capsys.readouterr()
    kept, dup = DUPLICATE_SAMPLE_IDS
    assert q(tmp_path, "select in_export from prm_samples where sample_id = ?", [dup]) == [(True,)]
    assert q(tmp_path, "select count(*) from prm_samples where is_contaminated and not in_export") == [(0,)]
    # One leak class kept: the text-only copies come back (unless their pictures cannot be
    # loaded), the picture copies stay out, each with its reason.
    assert main(["run", "--keep-leaks", "text"]) == 0
    capsys.readouterr()
    rows = dict(q(tmp_path, "select sample_id, coalesce(excluded_reason, 'in') from prm_samples where leak is not null"))
    from pipeline.vlrb.sample import facts as vlrb_facts

    (text_copies,) = vlrb_facts().text_leak.values()
    assert all("leak" not in rows[s] for s in text_copies)
    assert {v.split(" leak of ")[0] for s, v in rows.items() if s not in text_copies} == {"full", "image"}
