"""End to end through the CLI and Dagster: after a good release, a source folder full of hostile
zip entries, images and records. Every hostile item is a quarantine row with its stage and reason,
nothing lands outside the data root, and the refused run leaves the previous release current and
byte-for-byte intact."""

from __future__ import annotations

import io
import json
import stat
import warnings
import zipfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import published_home, stand_in_jpeg, tree_digests
from pipeline.cli import main
from pipeline.mmrb2.layout import ANNOTATION_DIR, IMAGE_DIR
from pipeline.mmrb2.sample import write_sample
from pipeline.visualprm.source import PARQUET_DIR
from pipeline.visualprm.sample import write_visualprm_sample
from pipeline.vlrb import sample as vlrb_sample
from run_control import finish, start

BENCH = Path(ANNOTATION_DIR)
SHARDS = Path(PARQUET_DIR) / "data"


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """(base, source folder, data root) with one good release published from the folder."""
    base = tmp_path_factory.mktemp("hostile")
    src = base / "src"
    write_sample(src)
    write_visualprm_sample(src)
    with published_home(base / "home", "--source", "local", "--path", str(src)) as home:
        yield base, src, home


def q(home: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


def files_under(root: Path, skip: Path) -> set[Path]:
    return {p for p in root.rglob("*") if skip not in p.parents and p != skip}


def plant_hostile_input(src: Path, home: Path) -> dict[tuple[str, str, str], str]:
    """Hostile zip entries, images and records in the source folder; returns the quarantine rows
    they must produce, (dataset, stage, record_key) -> a part of the reason."""
    (taken,) = q(home, "select image_name from mmrb2_images where status = 'ok' and referenced order by image_name limit 1")[0]
    png = io.BytesIO()
    Image.new("RGB", (300, 250), "white").save(png, "PNG")  # 75,000 pixels, above the limit set below
    with zipfile.ZipFile(src / IMAGE_DIR / "image.zip", "a") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name": planted on purpose
        zf.writestr("../escape.jpg", stand_in_jpeg(1))
        zf.writestr("/abs_escape.jpg", stand_in_jpeg(2))
        link = zipfile.ZipInfo("images/link.jpg")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "../../../../etc/passwd")
        zf.writestr(f"images/{taken}", stand_in_jpeg(3))  # a second, different copy of a referenced image
        zf.writestr("images/bomb.png", png.getvalue())
        zf.writestr("images/note.jpg", "a caption, not a picture")

    path = src / BENCH / "reasoning_response_only.json"
    doc = json.loads(path.read_text())
    n = len(doc["pairs"])
    edit_pair = json.loads((src / BENCH / "edit_response_only.json").read_text())["pairs"][0]
    surrogate = json.loads(json.dumps(doc["pairs"][0]))
    surrogate["id"] = "hostile-surrogate"
    surrogate["response_a"]["response_content"] = [["text", "\udc80"]]
    doc["pairs"] += [["not", "a", "pair"], edit_pair, surrogate]
    path.write_text(json.dumps(doc))

    first_id = pq.read_table(next((src / SHARDS).glob("train-*.parquet")), columns=["id"]).column("id")[0].as_py()
    pq.write_table(pa.table({"id": ["drift-1"], "conversation": ["[]"]}), src / SHARDS / "train-90000-of-90001.parquet")
    pq.write_table(pa.table({"id": [first_id, "no-steps"], "messages": ["[]", "[]"]}), src / SHARDS / "train-90001-of-90001.parquet")

    return {
        ("mmrb2", "unpack", "../escape.jpg"): "path escapes the archive root",
        ("mmrb2", "unpack", "/abs_escape.jpg"): "absolute path in archive",
        ("mmrb2", "unpack", "images/link.jpg"): "symlink entry",
        ("mmrb2", "unpack", f"images/{taken}"): "ambiguous, every copy refused",
        ("mmrb2", "resolve", taken): "referenced image not found in the archive",
        ("mmrb2", "decode", "bomb.png"): "300x250 image has 75000 pixels, above the max_image_pixels limit of 60000",
        ("mmrb2", "decode", "note.jpg"): "UnidentifiedImageError: not an image format Pillow reads",
        ("mmrb2", "parse", f"reasoning_response_only.json#{n}"): "pair is not an object",
        ("mmrb2", "parse", edit_pair["id"]): "duplicate pair id (first seen in task edit)",
        ("mmrb2", "parse", "hostile-surrogate"): "lone surrogate",
        ("visualprm", "file", "train-90000-of-90001.parquet"): "parquet lacks column(s) messages",
        ("visualprm", "parse", first_id): "duplicate sample id (first seen at row 1)",
        ("visualprm", "parse", "no-steps"): "conversation has no steps",
    }


def test_hostile_source_is_quarantined_and_the_refused_run_leaves_the_release_intact(released, monkeypatch, capsys):
    base, src, home = released
    monkeypatch.setenv("REWARDHOUSE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    current = (home / "releases" / "CURRENT").read_text().strip()
    release_before = tree_digests(home / "releases" / current)
    warehouse_before = q(home, "select release_id, is_current, row_counts from releases")
    expected = plant_hostile_input(src, home)
    outside_before = {p: p.stat().st_mtime_ns for p in files_under(base, home)}
    candidates_before = set((home / "staging" / "candidates").iterdir())

    # A strict quarantine budget makes the hostile input refuse the release.
    code = main(["run", "--source", "local", "--path", str(src), "--set", "max_image_pixels=60000", "--set", "budget_severity=ERROR"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert "check quarantine_budget failed" in err and "the previous release stays current" in err

    # The previous release is still current, whole and served.
    assert (home / "releases" / "CURRENT").read_text().strip() == current
    assert tree_digests(home / "releases" / current) == release_before
    assert q(home, "select release_id, is_current, row_counts from releases") == warehouse_before
    assert sorted(p.name for p in (home / "releases").iterdir() if not p.name.startswith(".")) == sorted(["CURRENT", current])

    # Nothing was written outside the data root: no escaped entry, no touched or new file.
    assert {p: p.stat().st_mtime_ns for p in files_under(base, home)} == outside_before
    assert not list(base.rglob("*escape*")) and not Path("/abs_escape.jpg").exists()
    assert not (base.parent / "escape.jpg").exists()

    # The refused candidate holds a quarantine row, with stage and reason, for every hostile item.
    (candidate,) = set((home / "staging" / "candidates").iterdir()) - candidates_before
    rows = pq.read_table(candidate / "tables" / "quarantine.parquet").to_pylist()
    got = {(r["dataset"], r["stage"], r["record_key"]): r["reason"] for r in rows}
    missing = {k: v for k, v in expected.items() if k not in got or v not in got[k]}
    assert not missing, {k: got.get(k) for k in missing}
    assert all(r["reason"] for r in rows)


def test_a_drifted_eval_shard_blocks_the_run_and_is_named_last(released):
    """A VL-RewardBench shard whose rankings became strings does not publish an empty eval set:
    the run exits 1, publishes nothing, and its last lines name the file and the drifted column."""
    base, _, home = released
    mirror = base / "drifted"
    write_sample(mirror)  # the same bytes as the published run's: that work is reused
    write_visualprm_sample(mirror)
    vlrb_sample.write_vlrb_sample(mirror)
    shard = mirror / vlrb_sample.RELPATH
    table = pq.read_table(shard)
    ranks = pa.array([[str(r) for r in pair] for pair in table["human_ranking"].to_pylist()], pa.list_(pa.string()))
    pq.write_table(table.set_column(table.schema.get_field_index("human_ranking"), "human_ranking", ranks), shard)
    current = (home / "releases" / "CURRENT").read_text().strip()
    releases_before = sorted(p.name for p in (home / "releases").iterdir())
    warehouse_before = q(home, "select release_id, is_current from releases order by 1")

    code, out, err = finish(start(home, "--source", "local", "--path", str(mirror)))
    assert code == 1 and "Traceback" not in err and "published" not in out, (out, err)
    assert err.rstrip("\n").splitlines()[-2:] == [
        "rewardhouse: blocked by upstream files that could not be used (fix them, or publish without them: "
        "--set allow_unusable_files=true):",
        f"rewardhouse: unusable upstream file: vlrb {vlrb_sample.RELPATH}: "
        "parquet schema drift: column human_ranking is list<string>, expected list<int>",
    ]
    assert (home / "releases" / "CURRENT").read_text().strip() == current
    assert sorted(p.name for p in (home / "releases").iterdir()) == releases_before
    assert q(home, "select release_id, is_current from releases order by 1") == warehouse_before
