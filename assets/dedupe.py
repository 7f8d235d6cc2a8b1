"""Dedupe assets: hashes and verification signatures of every image of every dataset → clusters
and contamination, by the one engine (pipeline/dedupe/engine.py)."""

import time

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import datasets
from pipeline.dedupe.decisions import (
    HASHES_SCHEMA, OVERRIDES_APPLIED_SCHEMA, SIGNATURE_SCHEMA, find_duplicates, gather_signatures, near_misses,
    read_signatures, thumb_file,
)
from pipeline.review.overrides import OverridesError, load as load_overrides, unusable_overrides
from pipeline.dedupe.engine import ENGINE_VERSION
from pipeline.resources import RewardhouseResource
from pipeline.staging import Staged, parts_of, read_staged, write_staged, write_text_atomic
from pipeline.stopping import stop_point

from assets.common import bars, md, plain_counts, preview, reuse_or_run, staging_key

GROUP = "dedupe"


IMAGE_ASSETS = tuple(dict.fromkeys(d.image_asset for d in datasets.DATASETS))


@dg.asset(group_name=GROUP, kinds={"python", "parquet"}, code_version="3",
          ins={name: dg.AssetIn(name) for name in IMAGE_ASSETS})
def image_hashes(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, **images: Staged) -> dg.Output[Staged]:
    """sha256, 64-bit pHash and dHash, width and height of every decodable image of every dataset
    in the registry, gathered from the steps that read them: each image is decoded once, where it
    is checked (e.g. `mmrb2_task_images` per task, straight from the zip; `visualprm_images`;
    `vlrb_pairs`). Beside the published table, the engine's signatures (region hashes, flat flag,
    64x64 thumbnail) are staged."""
    sources = [part for name in IMAGE_ASSETS for part in parts_of(images[name].internal["image_hashes"])]
    key = staging_key(None, {name: images[name].internal for name in IMAGE_ASSETS}, context)
    out = rewardhouse.layout().staging / "image_hashes" / key

    def compute():
        published = pa.concat_tables([pq.read_table(p, columns=HASHES_SCHEMA.names) for p in sources])
        tables = {"image_hashes": published.cast(HASHES_SCHEMA)}
        signatures = gather_signatures(out / "internal", sources)
        counts = published.group_by("dataset").aggregate([("image_key", "count")]).to_pylist()
        metadata = {**plain_counts(tables), **{f"hashed_{c['dataset']}": c["image_key_count"] for c in counts},
                    "preview": preview(published, columns=["dataset", "image_key", "phash", "width", "height"])}
        return Staged(tables=write_staged(out, tables), internal={"image_signatures": signatures}), metadata

    return reuse_or_run(context, out, compute)


# 5: the output carries the digest of the decisions it applied (Staged.fingerprint).
# 6: and the decisions it read, for record_contamination (Staged.internal["overrides"]).
@dg.asset(group_name=GROUP, kinds={"duckdb", "parquet"}, code_version="6")
def image_dedupe(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, image_hashes: Staged) -> dg.Output[Staged]:
    """Candidate pairs from the exact multi-index search (pHash, crop and top/bottom region hashes
    within the radius), each verified on the thumbnails (near | crop | overlay, with a score);
    clusters whose every member is verified against the canonical image (no chaining); and
    train images that are the same as, or a verified near-copy of, an image of an eval set
    (every eval set against every train set of the registry)."""
    settings = rewardhouse.settings()
    # The reviewers' decisions are read here, once per run; the digest of what was applied goes
    # with the output to the release id, so a file changed later in the run waits for the next.
    try:
        overrides = load_overrides(settings.overrides)
    except OverridesError as exc:
        raise dg.Failure(description=unusable_overrides(exc)) from None
    digest = overrides.digest()
    fingerprint = {"overrides": digest} if digest else {}  # none: release ids as before overrides existed
    signatures = image_hashes.internal["image_signatures"]
    key = staging_key(None, {"h": image_hashes.tables, "s": signatures, "r": settings.dedupe_max_distance,
                             "engine": ENGINE_VERSION, "overrides": digest}, context)
    out = rewardhouse.layout().staging / "image_dedupe" / key

    def compute():
        rows = read_signatures(signatures, [c for c in SIGNATURE_SCHEMA.names if c not in ("thumb", "fine")])
        thumbs = thumb_file(signatures, out / "internal" / "thumbs.npy")
        start = time.perf_counter()
        clusters, contamination, result = find_duplicates(
            rows, settings.dedupe_max_distance, eval_sets=datasets.eval_sets(), train_sets=datasets.train_sets(),
            thumbs=thumbs, stop=stop_point, overrides=overrides)
        seconds = time.perf_counter() - start
        applied = result.applied if result is not None else OVERRIDES_APPLIED_SCHEMA.empty_table()
        tables = {"duplicate_clusters": clusters, "contamination": contamination,
                  "dedupe_near_misses": near_misses(rows, result), "dedupe_overrides": applied}
        kinds = clusters.group_by(["dataset", "kind"]).aggregate([("image_key", "count")]).to_pylist() if clusters.num_rows else []
        n_clusters = len(set(clusters["cluster_id"].to_pylist()))
        n = max(rows.num_rows, 1)
        summary = [(f"{k['dataset']} {k['kind'] or 'canonical'}", k["image_key_count"] / n,
                    f"{k['image_key_count']} of {rows.num_rows} hashed images") for k in kinds]
        engine = {}
        if result is not None:
            engine = {
                "candidates": result.candidates,
                "candidates_beyond_per_image_cap": result.capped,
                "verified": result.verified,
                "rejected_by_verification": result.candidates - result.verified,
                "checked_against_canonical": result.clustering.late_checks,
                "split_off_no_chaining": result.clustering.split_off,
                "flat_images_exact_only": result.flat_nodes,
            }
        metadata = {
            **plain_counts(tables),
            "max_distance": settings.dedupe_max_distance,
            "clusters": n_clusters,
            **engine,
            "engine_seconds": round(seconds, 3),
            "dedupe_summary": bars(summary + [("contamination pairs", min(contamination.num_rows / n, 1.0),
                                                str(contamination.num_rows))]),
            **{f"contamination_{ev}": contamination["eval_dataset"].to_pylist().count(ev) for ev in datasets.eval_sets()},
            "contamination_preview": preview(contamination),
            "overrides": md(_overrides_md(overrides, applied)),
        }
        # The decisions as read here, handed on to record_contamination (text leaks): never read twice.
        decisions = out / "internal" / "overrides.json"
        write_text_atomic(decisions, overrides.to_json())
        return Staged(tables=write_staged(out, tables), internal={"overrides": str(decisions)},
                      fingerprint=fingerprint), metadata

    return reuse_or_run(context, out, compute)


# The asset of each dataset whose staged tables hold its records (their texts and images).
RECORD_ASSETS = {d.name: d.record_asset for d in datasets.DATASETS if d.record_asset}


@dg.asset(group_name=GROUP, kinds={"duckdb", "parquet"}, code_version="1",
          ins={name: dg.AssetIn(name) for name in ("image_dedupe", *dict.fromkeys(RECORD_ASSETS.values()))})
def record_contamination(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, **inputs: Staged) -> dg.Output[Staged]:
    """Every train record against every eval record, by text, by image, or both
    (pipeline/decontam): each dataset's identifying text (its `record_text`) normalised and matched
    by word n-grams, stock text left out; image `contamination` brought to the records that use the
    pictures (`record_images`). One row per pair of records: `record_contamination` (leak text |
    image | full). The same item in two eval sets goes to `eval_overlap`: reported, never removed.
    Reviewers' text `not_leak` decisions (as image_dedupe read them) drop a text link."""
    from pipeline.decontam.records import (
        EVAL_OVERLAP_SCHEMA, RECORD_CONTAMINATION_SCHEMA, dataset_records, eval_image_links, eval_overlap,
        image_links, record_contamination as joined,
    )
    from pipeline.decontam.text import RECORD_TEXT_SCHEMA, TextMatchSettings, text_leaks

    settings = rewardhouse.settings()
    match = TextMatchSettings.from_settings(settings)
    dedupe = inputs["image_dedupe"]
    records = {name: inputs[asset] for name, asset in RECORD_ASSETS.items()}
    key = staging_key(None, {"d": dedupe.tables, "o": dedupe.internal.get("overrides"),
                             "r": {n: [r.tables, r.internal] for n, r in records.items()},
                             "match": repr(match)}, context)
    out = rewardhouse.layout().staging / "record_contamination" / key

    def compute():
        texts, images = {}, []
        for spec in datasets.DATASETS:
            if spec.name in records:
                staged = records[spec.name]
                texts[spec.name], imgs = dataset_records(spec.name, spec.record_text, spec.record_images,
                                                         {**staged.tables, **staged.internal})
                images.append(imgs)
        images = pa.concat_tables(images) if images else None
        staged = read_staged({n: dedupe.tables[n] for n in ("contamination", "duplicate_clusters")})

        def side(names) -> pa.Table:
            parts = [texts[n] for n in names if n in texts]
            return pa.concat_tables(parts) if parts else RECORD_TEXT_SCHEMA.empty_table()

        start = time.perf_counter()
        text = text_leaks(side(datasets.train_sets()), side(datasets.eval_sets()), match)
        leaks = joined(text, image_links(staged["contamination"], images))
        leaks, effects = _text_decisions(leaks, dedupe.internal.get("overrides"))
        evals = datasets.eval_sets()
        between = [text_leaks(side([a]), side([b]), match) for i, a in enumerate(evals) for b in evals[i + 1:]]
        overlap = eval_overlap(pa.concat_tables(between) if between else text.schema.empty_table(),
                               eval_image_links(staged["duplicate_clusters"], images, evals))
        seconds = time.perf_counter() - start
        tables = {"record_contamination": leaks.cast(RECORD_CONTAMINATION_SCHEMA),
                  "eval_overlap": overlap.cast(EVAL_OVERLAP_SCHEMA), "leak_overrides": effects}
        counts = leaks.group_by(["eval_dataset", "leak"]).aggregate([("train_key", "count")]).to_pylist()
        n_texts = {name: t.num_rows for name, t in texts.items()}
        metadata = {
            **plain_counts(tables),
            **{f"texts_{name}": n for name, n in n_texts.items()},
            **{f"leaks_{c['eval_dataset']}_{c['leak']}": c["train_key_count"] for c in counts},
            "match_seconds": round(seconds, 3),
            "text_match": repr(match),
            "preview": preview(leaks, columns=["train_dataset", "train_key", "eval_dataset", "eval_key", "leak",
                                               "text_overlap", "image_kind", "matched_text"]),
        }
        return Staged(tables=write_staged(out, tables)), metadata

    return reuse_or_run(context, out, compute)


def _text_decisions(leaks: pa.Table, decisions_file: str | None) -> tuple[pa.Table, pa.Table]:
    """The reviewers' text `not_leak` decisions, as image_dedupe read them, applied to the leaks."""
    from pipeline.decontam.overrides import apply_text_not_leak
    from pipeline.review.overrides import Overrides, parse

    if decisions_file is None:
        overrides = Overrides()
    else:
        with open(decisions_file, encoding="utf-8") as f:
            overrides = parse(f.read(), decisions_file)
    return apply_text_not_leak(leaks, overrides)


OVERRIDES_SHOWN = 50  # rows of the metadata table; `dedupe_overrides` and the review page hold them all


def _overrides_md(overrides, applied: pa.Table) -> str:
    if not overrides:
        return f"No reviewer overrides (none in `{overrides.path}`)."
    lines = [f"{len(overrides.decisions)} decisions from `{overrides.path}` (revision {overrides.revision}):", "",
             "| # | decision | images | effect |", "|---|---|---|---|"]
    for r in applied.slice(0, OVERRIDES_SHOWN).to_pylist():
        lines.append(f"| {r['number']} | {r['decision']} | {r['images']} | {r['effect']} |")
    if applied.num_rows > OVERRIDES_SHOWN:
        lines += ["", f"… and {applied.num_rows - OVERRIDES_SHOWN} more in `dedupe_overrides`."]
    return "\n".join(lines)
