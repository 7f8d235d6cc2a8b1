"""MMRB2 assets: raw files → parsed annotation tables → image inventory."""


import functools
import hashlib
import warnings
from pathlib import Path
from typing import Optional

import dagster as dg
import pyarrow as pa

from pipeline.dedupe.decisions import hashes_table
from pipeline.dedupe.executor import Executor
from pipeline.dedupe.hashing import ZipHasher, default_workers
from pipeline.dedupe.ray_executor import RayUnavailable
from pipeline.contract import enforce
from pipeline.mmrb2.contract import contracts
from pipeline.mmrb2.images import DATASET, inventory_images
from pipeline.mmrb2.parse import parse_mmrb2
from pipeline.mmrb2.tasks import PARTITION_KEYS, TaskImages, images_by_task, owned_by_any
from pipeline.quarantine import quarantine_table
from pipeline.resources import RewardhouseResource
from pipeline.mmrb2.source import fetch_mmrb2
from pipeline.sources.base import RawSnapshot
from pipeline.staging import Staged, link_staged, read_staged, write_staged
from pipeline.zipread import scan_zip

from assets.common import (
    to_metadata, bars, fetch_output, plain_counts, preview, progress_logger, recorded, reuse_or_compute,
    reuse_or_compute_parts, reuse_or_run, snapshot_of, staging_key,
)

RAW, STAGED, IMAGES = "raw", "staged", "images"


@dg.asset(group_name=RAW, kinds={"python", "file"}, code_version="1", owners=["team:data"], tags={"dataset": "mmrb2"})
def mmrb2_raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[Optional[RawSnapshot]]:
    """The upstream MMRB2 files (image zip + annotation JSONs) from the configured source, checksummed.
    None when a local folder holds no MMRB2 files at all."""
    return fetch_output(context, fetch_mmrb2, rewardhouse, "MMRB2")


@dg.asset(group_name=STAGED, kinds={"python", "parquet"}, code_version="3")
def mmrb2_annotations(
    context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, mmrb2_raw: Optional[RawSnapshot]
) -> dg.Output[Staged]:
    """Pairs, response items and prompt items parsed from the annotation files; a record that
    cannot be parsed, or breaks its record contract (pipeline/mmrb2/contract.py: value sets, per
    task human_annotations shapes, ...), is quarantined with its items, and the rest goes on; a
    file that held no pairs or gave none is refused whole (stage `file`)."""
    snapshot = snapshot_of(mmrb2_raw)
    out = rewardhouse.layout().staging / "mmrb2_annotations" / staging_key(snapshot, None, context)

    def compute():
        parsed = parse_mmrb2(snapshot.annotations(), snapshot.path("new_task_release")) if snapshot else parse_mmrb2({})
        checked = enforce(DATASET, parsed.tables(), contracts(rewardhouse.settings().quality))
        tables = checked.tables
        tables["quarantine"] = quarantine_table(parsed.rejected + checked.rejected + parsed.refused_files(tables["mmrb2_pairs"]))
        pairs = tables["mmrb2_pairs"]
        tasks = pairs.group_by("task").aggregate([("pair_id", "count")]).to_pylist() if pairs.num_rows else []
        value = Staged(tables=write_staged(out, tables), present=snapshot is not None)
        metadata = {
            **plain_counts(tables),
            "pairs_per_task": {t["task"]: t["pair_id_count"] for t in tasks},
            "preview": preview(pairs, columns=["pair_id", "task", "model_a", "model_b", "chosen"]),
        }
        return value, metadata

    return reuse_or_run(context, out, compute)


MMRB2_PARTITIONS = dg.StaticPartitionsDefinition(list(PARTITION_KEYS))
UNREFERENCED = "unreferenced"  # the part of the zip no task owns; done by mmrb2_images


def _task_images(mmrb2_annotations: Staged) -> dict[str, TaskImages]:
    staged = read_staged({k: mmrb2_annotations.tables[k] for k in ("mmrb2_pairs", "mmrb2_response_items", "mmrb2_prompt_items")})
    return images_by_task(staged["mmrb2_pairs"], staged["mmrb2_response_items"], staged["mmrb2_prompt_items"])


# mmrb2_task_images stages its parts and mmrb2_images reads them: both key the parts with this.
TASK_IMAGES_CODE_VERSION = "1"


def _image_folder(rewardhouse: RewardhouseResource, snapshot, part: str, names: TaskImages) -> Path:
    """A part's staged folder, keyed by the image zip's checksum and the part's own names only: a
    changed annotation file redoes the image work of its task, not of the others."""
    zip_sha = snapshot.checksums().get("image_zip") if snapshot else None
    key = staging_key(None, {"zip": zip_sha, "names": names.digest(), "settings": rewardhouse.settings().fingerprint(),
                             "asset_code": TASK_IMAGES_CODE_VERSION})
    return rewardhouse.layout().staging / "mmrb2_task_images" / part / key


def _image_part(context, rewardhouse: RewardhouseResource, snapshot, part: str, names: TaskImages, out: Path | None,
                scan=None, hasher=None):
    """One part of the zip: each image read straight from it and decoded once, in parallel, for
    its checksum, dimensions, decode status and hashes. A task's part is the names it owns; the
    `unreferenced` part is every other entry plus faults of the archive itself (`names` then lists
    what to leave out). Written under `out`; with `out` None, the tables and metadata are returned
    unwritten."""
    settings = rewardhouse.settings()
    executor = Executor.from_settings(settings)
    if executor.on_ray:
        context.log.info(f"mmrb2 images [{part}]: hashing on {executor.describe()}")
    try:
        images, rejected, hashed = inventory_images(
            snapshot.image_zip if snapshot else None, set(names.referenced), settings.zip_limits,
            optional=set(names.optional), progress=progress_logger(context, f"mmrb2 images [{part}]: read and hashed"),
            scope="unreferenced" if part == UNREFERENCED else "referenced", workers=settings.workers or default_workers(),
            executor=executor if executor.on_ray else None, scan=scan() if scan else None,
            hasher=hasher() if hasher and not executor.on_ray else None,
        )
    except RayUnavailable as exc:
        raise dg.Failure(description=str(exc)) from None
    hashes = hashes_table("mmrb2", hashed, dict(zip(images["image_name"].to_pylist(), images["bytes"].to_pylist())))
    tables = {"mmrb2_images": images, "quarantine": quarantine_table(rejected), "image_hashes": hashes}
    status = images.column("status").to_pylist()
    metadata = {"rows_mmrb2_images": images.num_rows, "rows_quarantine": len(rejected),
                "hashed": hashes.num_rows, **{f"images_{s}": status.count(s) for s in ("ok", "corrupt", "missing")}}
    if out is None:  # the caller writes them (reuse_or_compute_parts)
        return tables, metadata
    return Staged(tables=write_staged(out, tables)), metadata


with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.BetaWarning)  # backfill_policy is beta in Dagster 1.13
    _partitioned = dg.asset(
        group_name=IMAGES,
        kinds={"python", "parquet"},
        code_version=TASK_IMAGES_CODE_VERSION,
        tags={"dataset": "mmrb2"},
        partitions_def=MMRB2_PARTITIONS,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )


@_partitioned
def mmrb2_task_images(
    context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, mmrb2_raw: Optional[RawSnapshot],
    mmrb2_annotations: Staged,
) -> dg.MaterializeResult:
    """The image work of MMRB2, one partition per judgement task: each image the task's pairs
    reference is read straight from the zip (sha256, size, dimensions, ok|corrupt|missing) and the
    decodable ones hashed. Backfill one task from the UI to redo only its images; a run over every
    partition is a single step."""
    snapshot = snapshot_of(mmrb2_raw)
    names = _task_images(mmrb2_annotations)
    folders = {key: _image_folder(rewardhouse, snapshot, key, names[key]) for key in PARTITION_KEYS}
    ranged = context.has_partition_key or context.has_partition_key_range
    keys = context.partition_keys if ranged else list(PARTITION_KEYS)
    # the archive's central directory, read once for the partitions this run computes, and one
    # pool of workers (each opening the archive once) for all of them
    settings = rewardhouse.settings()
    scan = functools.cache(lambda: scan_zip(snapshot.image_zip, settings.zip_limits))
    hasher = functools.cache(lambda: ZipHasher(snapshot.image_zip, settings.zip_limits,
                                               settings.workers or default_workers()))
    zipped = bool(snapshot and snapshot.image_zip)
    try:
        # each part's staged files are written while the next part hashes (reuse_or_compute_parts)
        done = reuse_or_compute_parts(
            context.log,
            {key: (folders[key], lambda key=key: _image_part(context, rewardhouse, snapshot, key, names[key], None,
                                                             scan if zipped else None, hasher if zipped else None))
             for key in keys},
            write_staged)
        per_task = {key: {**plain, "reused": reused} for key, (_, plain, reused) in done.items()}
    finally:
        if hasher.cache_info().currsize:
            hasher().close()
    totals = {m: sum(t[m] for t in per_task.values()) for m in ("rows_mmrb2_images", "hashed", "images_ok", "images_corrupt", "images_missing")}
    metadata = {**totals, "partitions": dg.MetadataValue.json(per_task), "reused": all(t["reused"] for t in per_task.values()),
                "images_per_partition": bars([(k, t["rows_mmrb2_images"] / max(totals["rows_mmrb2_images"], 1),
                                               f"{t['images_ok']} ok, {t['images_corrupt']} corrupt, {t['images_missing']} missing")
                                              for k, t in per_task.items()])}
    version = hashlib.sha256("".join(folders[k].name for k in keys).encode()).hexdigest()[:16]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.MaterializeResult(metadata=to_metadata(metadata), data_version=dg.DataVersion(version))


@dg.asset(group_name=IMAGES, kinds={"python", "parquet"}, code_version="2", deps=[mmrb2_task_images])
def mmrb2_images(
    context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, mmrb2_raw: Optional[RawSnapshot],
    mmrb2_annotations: Staged,
) -> dg.Output[Staged]:
    """Every image in the zip and every response image: the task partitions of
    `mmrb2_task_images` gathered, plus the zip entries no pair references (read and hashed here,
    usually none) and faults of the archive itself. sha256, size, dimensions, ok|corrupt|missing
    (prompt images outside the zip are not faults; see parse.py), and the hashes for dedupe."""
    snapshot = snapshot_of(mmrb2_raw)
    names = _task_images(mmrb2_annotations)
    folders = {key: _image_folder(rewardhouse, snapshot, key, names[key]) for key in PARTITION_KEYS}
    parts = {key: recorded(folder) for key, folder in folders.items()}
    missing = [key for key, value in parts.items() if value is None]
    if missing:
        raise dg.Failure(description=f"mmrb2_task_images is not materialized for the current inputs in partition(s) "
                                     f"{', '.join(missing)}: materialize those partitions (or all) first")
    rest = owned_by_any(names)
    folders[UNREFERENCED] = _image_folder(rewardhouse, snapshot, UNREFERENCED, rest)
    parts[UNREFERENCED], _, _ = reuse_or_compute(
        context.log, folders[UNREFERENCED],
        lambda: _image_part(context, rewardhouse, snapshot, UNREFERENCED, rest, folders[UNREFERENCED]))
    out = rewardhouse.layout().staging / "mmrb2_images" / staging_key(None, {"parts": {k: f.name for k, f in folders.items()}}, context)

    def compute():
        # the parts' image_hashes (the signatures: about 19 KB an image, 260 MB at full scale) are
        # linked, not copied (staging.link_staged); the rest is small
        staged = {key: read_staged({n: p for n, p in value.tables.items() if n != "image_hashes"})
                  for key, value in parts.items()}
        images = pa.concat_tables([s["mmrb2_images"] for s in staged.values()]).sort_by("image_name")
        tables = {"mmrb2_images": images, "quarantine": pa.concat_tables([s["quarantine"] for s in staged.values()])}
        sources = [value.tables["image_hashes"] for value in parts.values()]
        hashes = link_staged(out / "internal" / "image_hashes", sources)
        status = images.column("status").to_pylist()
        metadata = {
            **plain_counts(tables),
            **{f"images_{s}": status.count(s) for s in ("ok", "corrupt", "missing")},
            "preview": preview(images, columns=["image_name", "width", "height", "format", "status"]),
        }
        return Staged(tables=write_staged(out, tables), internal={"image_hashes": hashes}), metadata

    return reuse_or_run(context, out, compute)
