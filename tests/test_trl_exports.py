"""The training exports in TRL's dataset types load with Hugging Face `datasets`, as a trainer
takes them: every train set of the registry with an export, its rows and features checked against
the release's own tables."""

import json

import duckdb
import pytest

from conftest import published_home
from pipeline import datasets
from warehouse.store import ReleaseStore

TRAIN_EXPORTS = [d for d in datasets.DATASETS if d.role == "train" and d.export_asset]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    with published_home(tmp_path_factory.mktemp("trl")) as root:
        store = ReleaseStore(root / "releases")
        rid = store.current()
        yield store.path(rid), json.loads((store.path(rid) / "manifest.json").read_text())


def trl_file(release, name):
    folder, manifest = release
    (rel,) = [f for f in manifest["summary"]["exports"][name]["files"] if f.endswith("_trl.parquet")]
    return folder / rel


@pytest.mark.parametrize("spec", TRAIN_EXPORTS, ids=lambda d: d.name)
def test_each_train_export_loads_with_datasets_with_image_features(release, spec):
    import datasets as hf

    folder, manifest = release
    loaded = hf.load_dataset("parquet", data_files=str(trl_file(release, spec.name)), split="train",
                             cache_dir=str(folder.parent.parent / "hf-cache"))
    assert loaded.num_rows == manifest["summary"]["exports"][spec.name]["rows"] > 0
    assert isinstance(loaded.features["images"].feature, hf.Image)
    key = spec.tables()[spec.record_table].record_key
    con = duckdb.connect()
    kept = {r[0] for r in con.execute(
        f"select {key} from read_parquet(?) where in_export", [str(folder / f"{spec.record_table}.parquet")]).fetchall()}
    assert set(loaded["id"]) == kept  # the records the export keeps, no more, no fewer
    first = loaded[0]
    assert first["images"] and all(im.size[0] > 0 for im in first["images"])  # decoded as pictures


def test_visualprm_rows_are_stepwise_supervision_matching_prm_steps(release):
    import datasets as hf

    folder, _ = release
    loaded = hf.load_dataset("parquet", data_files=str(trl_file(release, "visualprm")), split="train",
                             cache_dir=str(folder.parent.parent / "hf-cache"))
    assert loaded.features["labels"].feature.dtype == "bool"
    steps = duckdb.connect().execute(
        "select sample_id, list(text order by step_index), list(label = '+' order by step_index) from read_parquet(?) group by 1",
        [str(folder / "prm_steps.parquet")]).fetchall()
    by_id = {s: (t, lab) for s, t, lab in steps}
    for row in loaded.select(range(min(20, loaded.num_rows))):
        assert (row["completions"], row["labels"]) == by_id[row["id"]]
    assert not all(all(r) for r in loaded["labels"])  # the "-" steps are there as False
