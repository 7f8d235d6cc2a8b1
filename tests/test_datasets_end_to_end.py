"""The datasets of the registry, end to end with the CLI: the embedded sample publishes all
of them; a local mirror with any subset works; a bad record is quarantined and the rest
publishes; a whole upstream file that cannot be used blocks the release, named in the last lines."""

from __future__ import annotations

import json
import shutil

import duckdb
import polars as pl
import pytest

from conftest import published_home
from pipeline import datasets
from pipeline.cli import main
from pipeline.mmrb2.sample import write_sample
from pipeline.mmrb2.layout import ANNOTATION_DIR, IMAGE_DIR
from pipeline.rlaifv import sample as rlaifv_sample
from pipeline.spec import load as load_ref
from pipeline.vlrb import sample as vlrb_sample
from warehouse import load

WRITERS = {d.name: load_ref(d.sample) for d in datasets.DATASETS}  # each writes its sample in the upstream layout


def q(home, sql):
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.fixture(scope="module")
def sample_home(tmp_path_factory):
    with published_home(tmp_path_factory.mktemp("three")) as home:
        yield home


def test_the_sample_publishes_every_dataset_of_the_registry(sample_home, capsys, monkeypatch):
    counts = {d.name: q(sample_home, f"select count(*) from {d.record_table}")[0][0] for d in datasets.DATASETS}
    assert all(counts.values()), counts
    manifest = json.loads(next((sample_home / "releases").glob("*/manifest.json")).read_text())
    assert set(manifest["sources"]) == set(datasets.names())
    assert set(manifest["summary"]["exports"]) == {d.name for d in datasets.DATASETS if d.export_asset}
    monkeypatch.setenv("REWARDHOUSE_HOME", str(sample_home))
    assert main(["releases"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("; ".join(f"{d.name}: {counts[d.name]} {d.record_noun}" for d in datasets.DATASETS))


def test_the_vlrb_sample_publishes_its_planted_facts(sample_home):
    # The VL-RewardBench sample: 101 rows, 5 quarantined (4 break the record contract, 1 repeats an id).
    assert q(sample_home, "select count(*) from vlrb_pairs") == [(96,)]
    assert q(sample_home, "select chosen, count(*) from vlrb_pairs group by 1 order by 1") == [("A", 50), ("B", 46)]
    assert q(sample_home, "select count(*), count(*) filter (where status = 'corrupt') from vlrb_images") == [(98, 1)]
    assert q(sample_home, "select count(*) from image_hashes where dataset = 'vlrb'") == [(97,)]
    rows = q(sample_home, "select eval_dataset, train_image_key from contamination where train_dataset = 'visualprm' order by 1")
    assert [r[0] for r in rows] == ["mmrb2", "vlrb"] and rows[1][1] == "ai2d/abc_images/2524.png"
    quarantined = {k for (k,) in q(sample_home, "select record_key from quarantine where dataset = 'vlrb' and stage = 'parse'")}
    assert quarantined == {"VLRB_0003", "VLRB_0009", "VLRB_0014", "VLRB_0017", "VLRB_0024"}
    manifest = json.loads(next((sample_home / "releases").glob("*/manifest.json")).read_text())
    removed = manifest["summary"]["export"]["removed"]
    assert set(removed["contaminated_by"]) == set(datasets.eval_sets()) and removed["contaminated_by"]["vlrb"] >= 1
    # The export leaves out the samples over the VL-RewardBench copy, and those whose question it copies.
    leaked = q(sample_home, """select count(*) from prm_samples where list_contains(image_refs, 'ai2d/abc_images/2524.png')
                                and is_contaminated and not in_export""")
    (text_copies,) = vlrb_sample.facts().text_leak.values()
    assert leaked[0][0] + len(text_copies) == removed["contaminated_by"]["vlrb"]


def test_the_planted_question_copies_are_text_and_full_leaks_left_out_of_the_export(sample_home):
    facts = vlrb_sample.facts()
    rows = q(sample_home, """select train_key, eval_key, leak, text_overlap, image_kind from record_contamination
                             where eval_dataset = 'vlrb' and train_dataset = 'visualprm' order by 2, 1""")
    by_eval = {}
    for train, ev, leak, overlap, kind in rows:
        by_eval.setdefault(ev, {})[train] = (leak, overlap, kind)
    # every rollout of the group whose question was copied, and only those, with the right eval pair
    (text_pair, text_copies), = facts.text_leak.items()
    (full_pair, full_copies), = facts.full_leak.items()
    assert set(by_eval[text_pair]) == set(text_copies)
    assert {v[0] for v in by_eval[text_pair].values()} == {"text"}
    assert all(v[1] >= 0.8 and v[2] is None for v in by_eval[text_pair].values())
    assert set(by_eval[full_pair]) == set(full_copies)
    assert {v[0] for v in by_eval[full_pair].values()} == {"full"}
    assert set(by_eval) == {text_pair, full_pair}  # no sibling of either template, no stock prompt
    out = dict(q(sample_home, "select sample_id, excluded_reason from prm_samples where not in_export"))
    for s in text_copies:
        assert out[s] == f"text leak of vlrb:{text_pair}"
    for s in full_copies:
        assert out[s].startswith("full leak of ") and f"vlrb:{full_pair}" in out[s]
    manifest = json.loads(next((sample_home / "releases").glob("*/manifest.json")).read_text())
    leaks = manifest["summary"]["export"]["removed"]["leaks"]
    assert leaks["text"]["vlrb"] == len(text_copies) and leaks["full"]["vlrb"] == len(full_copies)
    assert leaks["image"]["mmrb2"] >= 1  # the planted MMRB2 picture copy: a generic prompt, an image leak


def test_consumers_load_a_table_as_a_polars_lazyframe(sample_home):
    frame = load("vlrb_pairs", home=sample_home)
    assert isinstance(frame, pl.LazyFrame)
    counts = frame.group_by("chosen").len().sort("chosen").collect()
    assert counts["len"].sum() == 96
    steps = load("prm_steps", home=sample_home).filter(pl.col("label") == "-").select(pl.len()).collect().item()
    assert steps == q(sample_home, "select count(*) from prm_steps where label = '-'")[0][0]
    with pytest.raises(KeyError, match="has no table 'nope'"):
        load("nope", home=sample_home)
    with pytest.raises(LookupError, match="no release or tag 'feedbeef'"):
        load("vlrb_pairs", release="feedbeef", home=sample_home)


def test_the_rlaifv_copy_of_a_vlrb_picture_is_an_image_leak_left_out_of_its_export(sample_home):
    """The textbook leak: a VL-RewardBench picture taken from RLAIF-V's training pairs. The sample
    plants one (scaled by 1.08, re-encoded): found as contamination, left out of both of RLAIF-V's
    export files, and counted in the manifest."""
    eval_pair, train_pair = rlaifv_sample.facts().contaminated
    leaks = q(sample_home, """select train_key, eval_key, leak from record_contamination
                              where train_dataset = 'rlaifv' and eval_dataset = 'vlrb'""")
    assert (train_pair, eval_pair, "image") in leaks
    (in_export, reason), = q(sample_home, f"select in_export, excluded_reason from rlaifv_pairs where pair_id = '{train_pair}'")
    assert not in_export and reason == f"image leak of vlrb:{eval_pair}"
    folder = next((sample_home / "releases").glob("*/manifest.json")).parent
    exported = [json.loads(line)["id"] for line in (folder / "exports" / "rlaifv_train.jsonl").read_text().splitlines()]
    assert train_pair not in exported
    assert exported == [k for (k,) in q(sample_home, "select pair_id from rlaifv_pairs where in_export order by row_in_file")] \
        or sorted(exported) == sorted(k for (k,) in q(sample_home, "select pair_id from rlaifv_pairs where in_export"))
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["summary"]["exports"]["rlaifv"]["removed"]["leaks"]["image"]["vlrb"] >= 1


@pytest.mark.parametrize("present", [("vlrb",), ("mmrb2", "visualprm"), ("rlaifv", "vlrb")], ids="+".join)
def test_a_local_mirror_with_any_subset_publishes(present, tmp_path, home, capsys):
    mirror = tmp_path / "mirror"
    for name in present:
        WRITERS[name](mirror)
    assert main(["run", "--source", "local", "--path", str(mirror)]) == 0
    counts = {d.name: q(home, f"select count(*) from {d.record_table}")[0][0] for d in datasets.DATASETS}
    assert {k for k, n in counts.items() if n} == set(present)
    sources = json.loads(q(home, "select sources from releases")[0][0])
    assert {k for k, v in sources.items() if not v.get("absent")} == set(present)
    capsys.readouterr()
    assert main(["releases"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    for name in set(datasets.names()) - set(present):
        assert f"{name}: absent" in line


def test_a_bad_mmrb2_record_is_quarantined_and_the_rest_publishes(tmp_path, home):
    """A reasoning pair carrying human_annotations as a list of three integers (the shape of the
    other three tasks) passes the parser's own checks; the record contract refuses it."""
    mirror = tmp_path / "mirror"
    write_sample(mirror)
    path = mirror / ANNOTATION_DIR / "reasoning_response_only.json"
    doc = json.loads(path.read_text())
    bad = doc["pairs"][0]
    bad["human_annotations"] = [3, 4, 5]
    path.write_text(json.dumps(doc, indent=2))
    assert main(["run", "--source", "local", "--path", str(mirror)]) == 0
    assert q(home, f"select count(*) from mmrb2_pairs where pair_id = '{bad['id']}'") == [(0,)]
    assert q(home, f"select count(*) from mmrb2_response_items where pair_id = '{bad['id']}'") == [(0,)]
    assert q(home, "select count(*) from mmrb2_pairs") == [(28,)]  # the sample's 29 pairs, less the bad one
    ((stage, reason),) = q(home, f"select stage, reason from quarantine where record_key = '{bad['id']}'")
    assert stage == "parse" and reason.startswith("record contract: mmrb2_pairs.human_annotations must match the JSON shape reasoning")
    assert reason.endswith("(got '[3, 4, 5]')")


def _mirror_with_broken(tmp_path, broken: str):
    mirror = tmp_path / "mirror"
    for write in WRITERS.values():
        write(mirror)
    if broken == "image zip":
        (mirror / IMAGE_DIR / "image.zip").write_bytes(b"this is not a zip")
        return mirror, "image.zip", "unreadable archive: File is not a zip file"
    (mirror / ANNOTATION_DIR / "t2i_response_only.json").write_text('{"pairs": [')
    return mirror, "t2i_response_only.json", "unreadable JSON"


@pytest.mark.parametrize("broken", ["image zip", "annotation file"])
def test_a_file_that_cannot_be_used_blocks_by_default_and_is_named_last(broken, tmp_path, home, capsys):
    good = tmp_path / "good"
    for write in WRITERS.values():
        write(good)
    assert main(["run", "--source", "local", "--path", str(good)]) == 0
    current = (home / "releases" / "CURRENT").read_text()
    mirror, name, reason = _mirror_with_broken(tmp_path, broken)
    capsys.readouterr()

    assert main(["run", "--source", "local", "--path", str(mirror)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"rewardhouse: unusable upstream file: mmrb2 {name}: {reason}"), err[-3:]
    assert "blocked by upstream files that could not be used" in err[-2]
    assert "Traceback" not in "\n".join(err)
    assert (home / "releases" / "CURRENT").read_text() == current

    assert main(["run", "--source", "local", "--path", str(mirror), "--set", "allow_unusable_files=true"]) == 0
    out, err = capsys.readouterr()
    assert "published" in out and err.strip().splitlines()[-1].startswith(f"rewardhouse: unusable upstream file: mmrb2 {name}")
    ((passed, severity),) = q(home, "select passed, severity from quality_results where \"check\" = 'upstream_files'")
    assert (passed, severity) == (False, "WARN")
    shutil.rmtree(mirror)
