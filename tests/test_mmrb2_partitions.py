"""MMRB2's image work partitioned by task: the split is exact (pure tests), and in Dagster a
changed task redoes only its own partition, a run of one partition publishes, and a missing
partition is a clear failure rather than a half-built table."""

from __future__ import annotations

import json
import os
import zipfile

import dagster as dg
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import shared_mmrb2
from pipeline.definitions import defs
from pipeline.mmrb2.images import inventory_images
from pipeline.staging import parts_of
from pipeline.mmrb2.parse import parse_mmrb2
from pipeline.mmrb2.tasks import PARTITION_KEYS, images_by_task, owned_by_any
from pipeline.schedules import all_partitions_tags
from pipeline.quarantine import quarantine_table
from pipeline.settings import MMRB2_TASKS, ZipLimits
from pipeline.mmrb2.sample import write_sample

BENCH = "facebookresearch/MMRB2/benchmark"
ZIP = "facebook/MMRB2_image/image.zip"


def _parsed(root):
    files = {t: root / BENCH / f"{t}_response_only.json" for t in MMRB2_TASKS}
    return parse_mmrb2(files, root / BENCH / "new_task_release.json")


def _by_task(parsed):
    t = parsed.tables()
    return images_by_task(t["mmrb2_pairs"], t["mmrb2_response_items"], t["mmrb2_prompt_items"])


def test_tasks_own_disjoint_names_that_cover_every_reference():
    real = shared_mmrb2()
    parsed = parse_mmrb2({t: real / f"{t}_response_only.json" for t in MMRB2_TASKS}, real / "new_task_release.json")
    parts = _by_task(parsed)
    owned = [parts[t].referenced | parts[t].optional for t in MMRB2_TASKS]
    assert sum(len(o) for o in owned) == len(set().union(*owned))  # disjoint
    assert set().union(*(parts[t].referenced for t in MMRB2_TASKS)) == parsed.response_images()
    assert set().union(*owned) == parsed.response_images() | parsed.prompt_images()
    # The real files: every shipped prompt image belongs to an edit pair.
    assert {t for t in MMRB2_TASKS if parts[t].optional} == {"edit"}
    assert len(parts["edit"].optional) == len(parsed.prompt_images() - parsed.response_images())
    assert owned_by_any(parts).referenced == parsed.response_images()


def _sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_partition_inventories_add_up_to_the_whole_zip(tmp_path):
    write_sample(tmp_path)
    with zipfile.ZipFile(tmp_path / ZIP, "a") as zf:  # an entry no pair references, and a refused one
        zf.writestr("images/stray.jpg", b"not really a jpeg")
        zf.writestr("../escape.jpg", b"x")
    parsed = _parsed(tmp_path)
    referenced, optional = parsed.response_images(), parsed.prompt_images()
    whole, whole_rejected, _ = inventory_images(tmp_path / ZIP, referenced, ZipLimits(), optional=optional)

    by_task = _by_task(parsed)
    parts, rejected = [], []
    for names in by_task.values():
        table, rej, _ = inventory_images(tmp_path / ZIP, set(names.referenced), ZipLimits(), optional=set(names.optional),
                                      scope="referenced")
        assert "stray.jpg" not in table["image_name"].to_pylist()
        parts.append(table)
        rejected += rej
    rest = owned_by_any(by_task)
    table, rej, _ = inventory_images(tmp_path / ZIP, set(rest.referenced), ZipLimits(), optional=set(rest.optional),
                                  scope="unreferenced")
    assert table["image_name"].to_pylist() == ["stray.jpg"]
    assert {(r.stage, r.record_key) for r in rej} == {("unpack", "../escape.jpg"), ("decode", "stray.jpg")}
    parts.append(table)
    rejected += rej
    assert _sorted_rows(pa.concat_tables(parts)) == _sorted_rows(whole)
    assert _sorted_rows(quarantine_table(rejected)) == _sorted_rows(quarantine_table(whole_rejected))
    assert whole.num_rows > 50


def _run(instance, mirror, home, **kwargs):
    job = defs.resolve_job_def("refresh")
    config = {"source": "local", "local_path": str(mirror), "home": str(home)}
    return job.execute_in_process(instance=instance, run_config={"resources": {"rewardhouse": {"config": config}}},
                                  raise_on_error=False, **kwargs)


def _task_mats(result) -> dict:
    """Per-partition metadata of the run's mmrb2_task_images step (one materialization per partition)."""
    mats = result.asset_materializations_for_node("mmrb2_task_images")
    assert {m.partition for m in mats} == set(mats[0].metadata["partitions"].value)
    return mats[0].metadata["partitions"].value


def _drop_first_pair(mirror, task: str) -> str:
    path = mirror / BENCH / f"{task}_response_only.json"
    doc = json.loads(path.read_text())
    dropped = doc["pairs"].pop(0)["id"]
    path.write_text(json.dumps(doc))
    return dropped


def test_a_changed_task_redoes_only_its_partition_and_one_partition_publishes(tmp_path):
    mirror = tmp_path / "mirror"
    write_sample(mirror)
    home = tmp_path / "home"
    with dg.DagsterInstance.ephemeral() as instance:
        first = _run(instance, mirror, home, tags=all_partitions_tags())
        assert first.success
        assert set(_task_mats(first)) == set(PARTITION_KEYS)
        assert not any(m["reused"] for m in _task_mats(first).values())
        assert instance.get_materialized_partitions(dg.AssetKey("mmrb2_task_images")) == set(PARTITION_KEYS)
        release_1 = (home / "releases" / "CURRENT").read_text().strip()
        # mmrb2_images gathers the parts' signatures as links to the parts' own files, not copies:
        # every row of every part, once
        staging = home / "staging"
        (gathered,) = staging.glob("mmrb2_images/*/internal/image_hashes")
        parts = sorted(staging.glob("mmrb2_task_images/*/*/image_hashes.parquet"))
        assert len(parts) == len(PARTITION_KEYS) + 1  # and the zip's unreferenced entries
        linked = parts_of(gathered)
        assert len(linked) == len(parts)
        assert {os.stat(p).st_ino for p in linked} == {os.stat(p).st_ino for p in parts}
        whole = pa.concat_tables([pq.read_table(p) for p in linked])
        assert whole.num_rows > 0
        assert whole.sort_by("image_key").equals(pa.concat_tables([pq.read_table(p) for p in parts]).sort_by("image_key"))

        # One edit pair fewer: only the edit partition's images change. Backfilling that one
        # partition is enough for a complete release; the other tasks' work is not redone.
        dropped = _drop_first_pair(mirror, "edit")
        second = _run(instance, mirror, home, partition_key="edit")
        assert second.success
        assert list(_task_mats(second)) == ["edit"]  # only the edit partition ran
        assert _task_mats(second)["edit"]["reused"] is False
        release_2 = (home / "releases" / "CURRENT").read_text().strip()
        assert release_2 != release_1
        with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
            assert con.execute("select count(*) from mmrb2_pairs where pair_id = ?", [dropped]).fetchone() == (0,)
            # Its images are still in the zip, now as entries no pair references.
            orphans = con.execute("select distinct referenced from mmrb2_images where image_name like ?", [dropped + "_%"]).fetchall()
        assert orphans == [(False,)]

        # Everything again: all four partitions are reused, nothing is recomputed or republished.
        third = _run(instance, mirror, home, tags=all_partitions_tags())
        assert third.success and all(m["reused"] for m in _task_mats(third).values())
        (release,) = third.asset_materializations_for_node("warehouse_release")
        assert release.metadata["published"].value is False

        # A t2i change, but only edit is materialized: the combined table refuses to mix inputs.
        _drop_first_pair(mirror, "t2i")
        fourth = _run(instance, mirror, home, partition_key="edit")
        assert not fourth.success
        failure = next(e for e in fourth.all_events if e.event_type_value == "STEP_FAILURE")
        message = failure.step_failure_data.user_failure_data.description
        assert "mmrb2_task_images" in message and "partition(s) t2i:" in message
        assert (home / "releases" / "CURRENT").read_text().strip() == release_2
