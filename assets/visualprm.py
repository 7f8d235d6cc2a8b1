"""VisualPRM400K assets: raw files → parsed samples/steps + label stats → images → training export."""

from typing import Optional

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.contract import enforce
from pipeline.quarantine import QUARANTINE_SCHEMA, quarantine_table
from pipeline.visualprm.contract import contracts
from pipeline.resources import RewardhouseResource
from pipeline.visualprm.source import fetch_visualprm
from pipeline.visualprm.source import image_roots, prm_image_root, prm_image_zips, prm_jsonl_files, prm_parquet_files
from pipeline.sources.base import RawSnapshot
from pipeline.staging import Export, Staged, read_staged, write_staged
from pipeline import datasets
from pipeline.decontam.records import excluded_reason, removed_by_leak, sample_leaks
from pipeline.dedupe.decisions import hashes_table, mark_samples
from pipeline.dedupe.executor import Executor
from pipeline.visualprm.export import META_FILE, build_export
from pipeline.visualprm.images import DATASET, ImageStore, inventory_prm_images
from pipeline.dedupe.ray_executor import RayUnavailable
from pipeline.visualprm.parse import parse_prm
from pipeline.visualprm.readers import connect, load_jsonl_input, load_parquet_input, refused_files
from pipeline.visualprm.stats import label_stats

from assets.common import bars, export_metadata, fetch_output, plain_counts, preview, progress_logger, reuse_or_run, snapshot_of, staging_key

RAW, STAGED, IMAGES, DEDUPE = "raw", "staged", "images", "dedupe"


@dg.asset(group_name=RAW, kinds={"python", "file"}, code_version="1", owners=["team:data"], tags={"dataset": "visualprm"})
def visualprm_raw(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource) -> dg.Output[Optional[RawSnapshot]]:
    """VisualPRM400K raw files (parquet shards, or InternVL jsonl + images), checksummed.
    None when a local folder holds neither form."""
    return fetch_output(context, fetch_visualprm, rewardhouse, "VisualPRM400K")


@dg.asset(group_name=STAGED, kinds={"duckdb", "parquet"}, code_version="3", tags={"dataset": "visualprm"})
def visualprm_samples(
    context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, visualprm_raw: Optional[RawSnapshot]
) -> dg.Output[Staged]:
    """`messages` parsed into prm_samples and prm_steps (vectorised, in DuckDB), plus
    prm_label_stats; rows of unknown shape are quarantined with a reason, and a file that drifted,
    held nothing or gave no sample is refused whole (stage `file`)."""
    snapshot = snapshot_of(visualprm_raw)
    settings = rewardhouse.settings()
    out = rewardhouse.layout().staging / "visualprm_samples" / staging_key(snapshot, {"threshold": settings.prm_label_threshold}, context)

    def compute():
        con = connect()
        if snapshot is not None and prm_parquet_files(snapshot):
            rejected = load_parquet_input(con, prm_parquet_files(snapshot))
        elif snapshot is not None:
            rejected = load_jsonl_input(con, prm_jsonl_files(snapshot))
        else:
            rejected = load_parquet_input(con, [])
        tables = parse_prm(con, threshold=settings.prm_label_threshold)
        parsed_out = tables.pop("quarantine").cast(QUARANTINE_SCHEMA)
        checked = enforce(DATASET, tables, contracts(settings.quality))  # the record contract, per sample
        tables = checked.tables
        whole = refused_files(con, tables["prm_samples"])  # a file that held nothing or gave no sample
        tables["quarantine"] = pa.concat_tables([quarantine_table(rejected), parsed_out,
                                                 quarantine_table(checked.rejected + whole)])
        stats = tables["prm_label_stats"] = label_stats(tables["prm_samples"])
        paths = write_staged(out, tables)
        # prm_samples is published by visualprm_export, once dedupe has marked duplicates.
        internal = {"prm_samples": paths.pop("prm_samples")}
        metadata = {
            **plain_counts(tables),
            "label_distribution": bars([(r["source"], r["positive_rate"], f"{r['positive_rate']:.1%} + of {r['steps']} steps")
                                        for r in stats.to_pylist()]),
            "steps_per_sample": steps_histogram(tables["prm_samples"]),
            "preview": preview(tables["prm_steps"], columns=["sample_id", "step_index", "label", "text"]),
        }
        return Staged(tables=paths, internal=internal, present=snapshot is not None), metadata

    return reuse_or_run(context, out, compute)


def steps_histogram(samples: pa.Table) -> dict:
    if samples.num_rows == 0:
        return bars([])
    counts = samples.group_by("n_steps").aggregate([("sample_id", "count")]).sort_by("n_steps").to_pylist()
    top = max(c["sample_id_count"] for c in counts)
    return bars([(f"{c['n_steps']} steps", c["sample_id_count"] / top, str(c["sample_id_count"])) for c in counts])


# 2: the output carries the image roots' signature it was built with (Staged.fingerprint).
@dg.asset(group_name=IMAGES, kinds={"python", "parquet"}, code_version="2", tags={"dataset": "visualprm"})
def visualprm_images(
    context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, visualprm_raw: Optional[RawSnapshot],
    visualprm_samples: Staged,
) -> dg.Output[Staged]:
    """Every referenced image: embedded bytes decoded, path references resolved against the local
    image folder/zips; each image with bytes is kept once in the content-addressed image store. The
    one decode that checks an image also hashes it, for the dedupe step."""
    snapshot = snapshot_of(visualprm_raw)
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    # The roots' archives as this step sees them, once: its key and the release id both take this.
    roots_read = {"image_roots": settings.image_roots_signature()}
    out = layout.staging / "visualprm_images" / staging_key(snapshot, {**settings.fingerprint(), **roots_read}, context)

    def compute():
        samples = read_staged(visualprm_samples.internal)["prm_samples"]
        refs = set(pc.list_flatten(samples["image_refs"]).to_pylist())
        executor = Executor.from_settings(settings)
        roots = image_roots(settings)
        hub = {}
        hub_rejected = []
        if settings.source == "hf" and settings.hf_images and snapshot:
            root, report, hub_rejected = _resolve_from_hub(context, layout, settings, snapshot, refs)
            roots.append(root)
            hub = {"hf_images": report.as_dict()}
        if roots:
            context.log.info("visualprm images: image roots, in order: " + ", ".join(map(str, roots)))
        if executor.on_ray:
            context.log.info(f"visualprm images: reading and hashing on {executor.describe()}")
        try:
            table, rejected, hashed = inventory_prm_images(
                refs,
                prm_parquet_files(snapshot) if snapshot else [],
                prm_image_root(snapshot) if snapshot else None,
                prm_image_zips(snapshot) if snapshot else [],
                settings.zip_limits,
                ImageStore(layout.image_store),
                progress=progress_logger(context, "visualprm images: read and hashed"),
                executor=executor if executor.on_ray else None,
                image_roots=roots,
            )
        except RayUnavailable as exc:
            raise dg.Failure(description=str(exc)) from None
        tables = {"prm_images": table, "quarantine": quarantine_table(rejected + hub_rejected)}
        hashes = hashes_table(DATASET, hashed, dict(zip(table["image_key"].to_pylist(), table["bytes"].to_pylist())))
        internal = {"image_hashes": hashes}
        status = table.column("status").to_pylist()
        metadata = {
            **plain_counts(tables),
            **{f"images_{s}": status.count(s) for s in ("ok", "corrupt", "unresolved")},
            "hashed": hashes.num_rows,
            **hub,
            "preview": preview(table, columns=["image_key", "origin", "width", "height", "status"]),
        }
        return Staged(tables=write_staged(out, tables), internal=write_staged(out / "internal", internal),
                      fingerprint=roots_read if settings.image_roots else {}), metadata

    return reuse_or_run(context, out, compute)


def _resolve_from_hub(context, layout, settings, snapshot, refs: set[str]):
    """Fetch from OpenGVLab's archive on the Hub, by range, the images that path references need
    and the shards do not carry, into the image store; returns (the root they make, the report,
    rejections)."""
    from pipeline.sources.hf import _OPENER, _auth_header, _endpoint
    from pipeline.sources.http_archive import RangeError
    from pipeline.visualprm.hub_images import IMAGE_REPO, hub_parts, open_archive, resolve_from_hub
    from pipeline.visualprm.images import embedded_keys

    wanted = refs - embedded_keys(prm_parquet_files(snapshot))
    endpoint = _endpoint(None)
    try:
        sha, names = hub_parts(IMAGE_REPO, settings.hf_revision(IMAGE_REPO), endpoint, None)
        source = open_archive(IMAGE_REPO, sha, names, endpoint, _auth_header(None), _OPENER)
        index = layout.raw_source("hf") / IMAGE_REPO / "fetched.json"
        report, rejected, root = resolve_from_hub(wanted, ImageStore(layout.image_store), index, source, IMAGE_REPO, sha,
                                                  budget_bytes=int(settings.hf_images_budget_gb * 1e9), log=context.log.info)
    except (RangeError, OSError, Exception) as exc:  # the Hub's own errors too: one line, naming the repo
        raise dg.Failure(description=f"hf images: {IMAGE_REPO}: {' '.join(str(exc).split())[:300]}") from None
    return root, report, rejected


@dg.asset(group_name=DEDUPE, kinds={"python", "file"}, code_version="3", tags={"dataset": "visualprm"})
def visualprm_export(
    context: dg.AssetExecutionContext,
    rewardhouse: RewardhouseResource,
    visualprm_samples: Staged,
    visualprm_images: Staged,
    image_dedupe: Staged,
    record_contamination: Staged,
) -> dg.Output[Export]:
    """prm_samples with their dedupe marks (duplicate rollout; `leak`: the sample copies an eval
    record by its question, its picture or both, from record_contamination) and why a sample is
    out of the export, and the InternVL training files: `visualprm_train.jsonl` + `.parquet` (+ meta
    at publish time). Duplicates and every leak class are left out unless a setting keeps them;
    samples whose images cannot be loaded are left out with a quarantine row."""
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    kept = settings.kept_leaks
    key = staging_key(None, {"s": visualprm_samples.internal, "i": visualprm_images.tables,
                             "d": image_dedupe.tables, "l": record_contamination.tables,
                             "keep": [settings.export_keep_duplicates, sorted(kept)]},
                      context)
    out = layout.staging / "visualprm_export" / key

    def compute():
        staged = read_staged({**visualprm_samples.internal, **visualprm_samples.tables,
                              **visualprm_images.tables, **image_dedupe.tables,
                              "record_contamination": record_contamination.tables["record_contamination"]})
        leaks = staged["record_contamination"]
        samples = mark_samples(staged["prm_samples"], staged["prm_steps"], staged["prm_images"],
                               staged["duplicate_clusters"], staged["contamination"])
        marks = sample_leaks(samples, "sample_id", leaks, DATASET, kept)
        samples = samples.set_column(samples.schema.get_field_index("is_contaminated"), "is_contaminated",
                                     pc.is_valid(marks["leak"]))
        samples = samples.append_column("leak", marks["leak"]).append_column("leaked_from", marks["leaked_from"])
        drop_duplicate = pc.and_(samples["is_duplicate"], pa.scalar(not settings.export_keep_duplicates))
        drop_contaminated = marks["leak_removed"]
        keep = pc.invert(pc.or_(drop_duplicate, drop_contaminated))
        removed = {  # a sample may be both a duplicate and contaminated: dedupe_total counts it once
            "duplicate": pc.sum(drop_duplicate).as_py() or 0,
            "contaminated": pc.sum(drop_contaminated).as_py() or 0,
            "dedupe_total": samples.num_rows - (pc.sum(keep).as_py() or 0),
        }
        # Per eval set and per leak class: the samples left out because they copy a record of that
        # set (a sample that copies two eval sets counts in both; `contaminated` counts it once).
        removed["contaminated_by"], removed["leaks"] = removed_by_leak(leaks, DATASET, kept, datasets.eval_sets())
        result = build_export(samples.filter(keep), staged["prm_steps"], staged["prm_images"], out / "exports",
                              image_store=layout.image_store)
        removed["image_unavailable"] = len(result.excluded)
        removed["unresolved_by_source"] = result.unresolved_by_source
        excluded_ids = pa.array([r.record_key for r in result.excluded], pa.string())
        unavailable = pc.is_in(samples["sample_id"], value_set=excluded_ids)
        in_export = pc.and_(keep, pc.invert(unavailable))
        samples = samples.append_column("in_export", in_export)
        samples = samples.append_column("excluded_reason", excluded_reason(samples, drop_duplicate, drop_contaminated, unavailable))
        value = Export(
            tables=write_staged(out, {"prm_samples": samples, "quarantine": quarantine_table(result.excluded)}),
            exports={f"exports/{p.name}": str(p) for p in (result.jsonl, result.parquet, result.trl)},
            images={rel: str(layout.image_store / src) for rel, src in result.image_files.items()},
            rows=result.rows,
            removed=removed,
            dataset=DATASET,
            render={META_FILE: "pipeline.visualprm.export:release_meta"},
        )
        metadata = {**export_metadata(result.rows, len(result.image_files), removed),
                    "preview": preview(samples, columns=["sample_id", "source", "n_steps", "is_duplicate", "leak", "in_export",
                                                         "excluded_reason"])}
        return value, metadata

    return reuse_or_run(context, out, compute)
