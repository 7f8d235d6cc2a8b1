"""A reviewer's decision recorded while a run is past dedupe: that run publishes what dedupe
applied, under the id of those decisions, and the next run applies the new one in a new release.
Driven deterministically by materializing the run in two steps, the file changed in between."""

import dagster as dg
import duckdb
import pytest

from pipeline.definitions import defs
from pipeline.resources import RewardhouseResource
from pipeline.review import overrides as ov
from pipeline.settings import TRANSFORM_VERSION
from warehouse.store import ReleaseStore, release_id_for

# The sample's two VisualPRM contamination rows, each a train image the sample plants as a copy of an eval image.
FIRST = "visualprm:ai2d/abc_images/2524.png"
LATER = "visualprm:MathV360K/data_images/34505.jpg"
AFTER_DEDUPE = dg.AssetSelection.assets("release_candidate", "dedupe_review", "warehouse_release")
EVERYTHING = list(defs.assets) + list(defs.asset_checks)


def _published(result) -> dict:
    (mat,) = result.asset_materializations_for_node("warehouse_release")
    return {k: v.value for k, v in mat.metadata.items()}


def _release(root, release_id):
    manifest = ReleaseStore(root / "releases").manifest(release_id)
    with duckdb.connect(str(root / "warehouse.duckdb"), read_only=True) as con:
        schema = f"release_{release_id}"
        leaks = sorted(r[0] for r in con.execute(
            f"select train_image_key from {schema}.contamination where train_dataset = 'visualprm'").fetchall())
        applied = con.execute(f"select images, applied from {schema}.dedupe_overrides order by number").fetchall()
    return manifest, leaks, applied


def _id_of(manifest) -> str:
    """The id its recorded inputs and settings give: the id says what the release holds."""
    inputs = {name: None if s.get("absent") else s["files"] for name, s in manifest.sources.items()}
    return release_id_for(inputs, TRANSFORM_VERSION, manifest.settings)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("overrides_run")
    path = str(root / "overrides.json")
    resources = {"rewardhouse": RewardhouseResource(source="sample", home=str(root))}
    ov.add(path, "not_leak", [FIRST], reason="public diagram", by="ana")
    applied_digest = ov.load(path).digest()
    (root / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "dagster")) as instance:
        upstream = dg.materialize(EVERYTHING, selection=dg.AssetSelection.all() - AFTER_DEDUPE,
                                  instance=instance, resources=resources)
        assert upstream.success
        ov.add(path, "not_leak", [LATER], reason="recorded during the run", by="bo")  # the run is past dedupe
        during = dg.materialize(EVERYTHING, selection=AFTER_DEDUPE, instance=instance, resources=resources)
        assert during.success
        # The next run: what it does not reuse (everything upstream of dedupe is unchanged).
        following = dg.materialize(EVERYTHING, selection=dg.AssetSelection.assets("image_dedupe").downstream(),
                                   instance=instance, resources=resources)
        assert following.success
    yield root, applied_digest, ov.load(path).digest(), _published(during), _published(following)


def test_the_run_publishes_what_dedupe_applied_under_the_id_of_those_decisions(runs):
    root, applied_digest, _, during, _ = runs
    assert during["published"] is True
    manifest, leaks, applied = _release(root, during["release_id"])
    assert manifest.settings["overrides"] == applied_digest
    assert _id_of(manifest) == during["release_id"]
    assert leaks == ["MathV360K/data_images/34505.jpg"]  # the later decision is not in it
    assert applied == [(FIRST, True)]


def test_the_next_run_applies_the_new_decision_in_a_new_release(runs):
    root, applied_digest, new_digest, during, following = runs
    assert following["published"] is True and following["release_id"] != during["release_id"]
    manifest, leaks, applied = _release(root, following["release_id"])
    assert manifest.settings["overrides"] == new_digest != applied_digest
    assert _id_of(manifest) == following["release_id"]
    assert leaks == []
    assert applied == [(FIRST, True), (LATER, True)]


BROKEN = '{"format": 1, "revision": "two", "decisions": []}'


def test_a_run_refuses_an_unusable_file_before_it_starts(tmp_path, monkeypatch, capsys):
    from pipeline.cli import main

    monkeypatch.setenv("REWARDHOUSE_HOME", str(tmp_path))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("REWARDHOUSE_OVERRIDES", raising=False)
    (tmp_path / "overrides.json").write_text(BROKEN)
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err == (f"rewardhouse: reviewers' overrides cannot be used: {tmp_path}/overrides.json: `revision` must be a "
                   "whole number of 0 or more, got 'two'; fix or move the file, then run again\n")
    # No run: the Dagster home holds its settings file only, no run storage.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dagster", "overrides.json"]
    assert sorted(p.name for p in (tmp_path / "dagster").iterdir()) == ["dagster.yaml"]


def test_the_dedupe_step_fails_with_the_same_line_when_the_file_broke_after_the_start(tmp_path):
    from assets.dedupe import image_dedupe
    from pipeline.staging import Staged

    (tmp_path / "overrides.json").write_text(BROKEN)
    context = dg.build_asset_context(resources={"rewardhouse": RewardhouseResource(home=str(tmp_path))})
    with pytest.raises(dg.Failure) as failure:
        image_dedupe(context, image_hashes=Staged())
    assert failure.value.description == (
        f"reviewers' overrides cannot be used: {tmp_path}/overrides.json: `revision` must be a whole number of 0 or "
        "more, got 'two'; fix or move the file, then run again")
