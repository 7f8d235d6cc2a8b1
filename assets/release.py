"""Release assets: assemble a candidate from the staged tables, let the blocking checks judge it
(checks/release.py), then publish an immutable release and refresh the warehouse."""

import json
import os
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from checks.outcomes import CHECKS_DIR, REQUIRED_CHECKS, read_outcomes
from pipeline import datasets
from pipeline.quarantine import QUARANTINE_SCHEMA
from pipeline.resources import RewardhouseResource
from pipeline.settings import TRANSFORM_VERSION
from pipeline.staging import CANDIDATE_FILE, Candidate, Staged, write_staged, write_text_atomic
from pipeline.spec import load
from warehouse.diff import changelog_hook, changelog_markdown
from warehouse.duck import publish_release
from warehouse.store import ReleaseStore, release_id_for

from assets.common import snapshot_of

GROUP = "release"

QUALITY_SCHEMA = pa.schema(
    [("release_id", pa.string()), ("check", pa.string()), ("passed", pa.bool_()), ("severity", pa.string()), ("details", pa.string())]
)


def collect_tables(staged: list[Staged]) -> dict[str, pa.Table]:
    """Merge staged outputs; `quarantine` rows from every stage are concatenated into one table."""
    tables: dict[str, pa.Table] = {}
    quarantine = [QUARANTINE_SCHEMA.empty_table()]
    for item in staged:
        for name, table in item.read().items():
            if name == "quarantine":
                quarantine.append(table.cast(QUARANTINE_SCHEMA))
            elif name in tables:
                raise ValueError(f"table {name} is staged twice")
            else:
                tables[name] = table
    tables["quarantine"] = pa.concat_tables(quarantine)
    return tables


# The candidate's inputs, from the registry: every dataset's raw snapshot and staged outputs, then
# the shared dedupe outputs.
RAW_INPUTS = {d.name: d.raw_asset for d in datasets.DATASETS}
STAGED_INPUTS = tuple(dict.fromkeys([a for d in datasets.DATASETS for a in d.staged_assets]
                                    + ["image_hashes", "image_dedupe", "record_contamination"]))
# Every train set's training export (a train set may bring none).
EXPORTS = {d.name: d.export_asset for d in datasets.DATASETS if d.export_asset}


@dg.asset(group_name="quality", kinds={"parquet"}, code_version="3",
          ins={name: dg.AssetIn(name) for name in dict.fromkeys((*RAW_INPUTS.values(), *STAGED_INPUTS, *EXPORTS.values()))})
def release_candidate(rewardhouse: RewardhouseResource, **inputs) -> dg.Output[Candidate]:
    """Every table of the next release, its content-derived id, sources and exports, staged
    together so the blocking checks can judge the release as a whole before anything is published."""
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    raws = {name: snapshot_of(inputs[asset]) for name, asset in RAW_INPUTS.items()}
    sources = {
        name: {"source": s.source, "revisions": s.revisions, "files": s.checksums()} if s else {"absent": True}
        for name, s in raws.items()
    }
    # The settings, and what steps read from files for the release id, as each step read it once
    # (the digest of the reviewers' decisions image_dedupe applied): never read again here.
    fingerprint = settings.fingerprint()
    for name in STAGED_INPUTS:
        fingerprint.update(inputs[name].fingerprint)
    release_id = release_id_for({name: s.checksums() if s else None for name, s in raws.items()},
                                TRANSFORM_VERSION, fingerprint)
    built_on = _read_bucket_current(layout) if layout.remote else None
    folder = layout.staging / "candidates" / release_id
    # A candidate is judged afresh on every run: stale outcomes must not vouch for it.
    for old in (folder / CHECKS_DIR).glob("*.json") if (folder / CHECKS_DIR).is_dir() else []:
        old.unlink()
    stamps = _input_stamps([inputs[name] for name in STAGED_INPUTS])
    written = _written_tables(folder, release_id, stamps)
    if written is None:
        tables = collect_tables([inputs[name] for name in STAGED_INPUTS])
        written = write_staged(folder / "tables", tables)
        rows = {t: v.num_rows for t, v in tables.items()}
        write_text_atomic(folder / INPUTS_FILE, json.dumps(stamps, sort_keys=True))
    else:  # the same id and the same staged files: the tables an earlier run wrote here stand
        rows = {t: pq.read_metadata(path).num_rows for t, path in written.items()}
    candidate = Candidate(
        release_id=release_id,
        dir=str(folder),
        tables=written,
        sources=sources,
        settings=fingerprint,
        exports={name: inputs[asset].to_record() for name, asset in EXPORTS.items()},
        built_on=built_on,
    )
    write_text_atomic(folder / CANDIDATE_FILE, candidate.to_json())
    return dg.Output(
        candidate,
        metadata={"release_id": release_id, **{f"rows_{t}": dg.MetadataValue.int(n) for t, n in rows.items()}},
    )


INPUTS_FILE = "inputs.json"  # the staged files a candidate's tables were gathered from: path -> [size, mtime_ns]


def _input_stamps(staged: list[Staged]) -> dict[str, list[int]]:
    """Size and modification time of every staged table file the candidate gathers."""
    stamps = {}
    for item in staged:
        for path in item.tables.values():
            st = os.stat(path)
            stamps[str(path)] = [st.st_size, st.st_mtime_ns]
    return stamps


def _written_tables(folder: Path, release_id: str, stamps: dict[str, list[int]]) -> dict[str, str] | None:
    """The tables of the candidate an earlier run staged in `folder` for this release id, when its
    record (written last, atomically) names them, every file is there, and they were gathered from
    the very staged files `stamps` describes (same paths, sizes and modification times: a staged
    file rewritten since, by a fix or by hand, makes the candidate again); else None. An unchanged
    rerun then neither reads nor writes them again (0.7 s of a full-scale rerun)."""
    try:
        saved = json.loads((folder / CANDIDATE_FILE).read_text())
        names = list(saved["tables"]) if saved.get("release_id") == release_id else []
        if json.loads((folder / INPUTS_FILE).read_text()) != stamps:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    paths = {name: folder / "tables" / f"{name}.parquet" for name in names}
    if not paths or not all(p.is_file() for p in paths.values()):
        return None
    return {name: str(p) for name, p in paths.items()}


def _renderer(ref: str, export):
    """A publish-time file of an export: made from the release's final folder."""
    return lambda final: load(ref)(final, export)


def export_summary(exports: dict) -> dict:
    """The manifest's summary of the training exports: `exports` per train set (rows, what was left
    out and why, its files); `export` repeats the first train set's entry, as releases before
    there were several exports wrote it."""
    per_set = {name: {"dataset": e.dataset or name, "rows": e.rows, "removed": e.removed,
                      "files": sorted([*e.exports, *e.render])} for name, e in exports.items()}
    out: dict = {"exports": per_set}
    if per_set:
        out["export"] = {k: v for k, v in next(iter(per_set.values())).items() if k != "files"}
    return out


def _read_bucket_current(layout) -> str | None:
    """The bucket's current release, read once per run (and brought into the scratch store for the
    drift check): the candidate carries it to the publish, which refuses to move CURRENT from
    anything else."""
    from warehouse.objectstore import ObjectStoreError
    from warehouse.remote import hydrate

    try:
        return hydrate(layout)
    except ObjectStoreError as exc:
        raise dg.Failure(description=str(exc)) from None


REVIEW_DIR = "review"


@dg.asset(group_name="dedupe", kinds={"html"}, code_version="1",
          ins={"release_candidate": dg.AssetIn(), "image_hashes": dg.AssetIn(),
               **{name: dg.AssetIn(name) for name in RAW_INPUTS.values()}})
def dedupe_review(context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, release_candidate: Candidate,
                  image_hashes: Staged, **raw) -> dg.Output[dict]:
    """A static HTML page of the candidate's dedupe decisions (pipeline/review): every
    contamination pair side by side, the largest clusters and a sample of the others, a sample of
    the near-misses, the reviewers' overrides and what they did; thumbnails made once per image
    content, from the signature the one decode of each image stored (no second read). Published
    with the release as `releases/<id>/review/index.html`."""
    from pipeline.review.release import review_release
    from warehouse.duck import schema_for

    layout = rewardhouse.layout()
    candidate = release_candidate
    snapshots = {name: snapshot_of(raw[asset]) for name, asset in RAW_INPUTS.items()}
    out = Path(candidate.dir) / REVIEW_DIR
    signatures = image_hashes.internal.get("image_signatures")
    stats = review_release(out, {k: Path(v) for k, v in candidate.tables.items()}, snapshots, layout,
                           candidate.release_id, schema_for(candidate.release_id),
                           Path(signatures) if signatures else None)
    context.log.info(f"review page {stats.path}: {stats.contamination_pairs} contamination pairs, {stats.clusters_shown} of "
                     f"{stats.clusters} clusters, {stats.near_misses_shown} near-misses, {stats.thumbnails_made} thumbnails "
                     f"made, in {stats.seconds:.1f} s")
    return dg.Output({"dir": str(out), "release_id": candidate.release_id}, metadata=review_metadata(stats, out))


def review_metadata(stats, out: Path) -> dict:
    """The page's link and a preview of the top contamination pairs. Dagster's markdown keeps only
    http(s) image sources (its sanitiser drops file: and data: URLs), so the preview is a table."""
    lines = ["| train image | eval image | thumbnails (in the page's folder) |", "|---|---|---|"]
    for train, ev in stats.top_pairs:
        lines.append(f"| {train[0]}:{train[1]} | {ev[0]}:{ev[1]} | {train[6] or '-'} · {ev[6] or '-'} |")
    return {
        "review_page": dg.MetadataValue.path(str(stats.path)),
        "review_url": dg.MetadataValue.url(stats.path.resolve().as_uri()),
        "contamination_pairs": stats.contamination_pairs,
        "clusters": stats.clusters,
        "clusters_shown": stats.clusters_shown,
        "near_misses_shown": stats.near_misses_shown,
        "overrides": stats.overrides,
        "thumbnails_made": stats.thumbnails_made,
        "page_bytes": stats.page_bytes,
        "seconds": round(stats.seconds, 2),
        "top_contamination": dg.MetadataValue.md("\n".join(lines) if stats.top_pairs else "no contamination pair"),
    }


def review_files(review_dir: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """A staged review folder as the publish step takes it: the page (checksummed) and thumbnails (linked)."""
    thumbs = {p.relative_to(review_dir / "thumbs").as_posix(): p for p in sorted((review_dir / "thumbs").rglob("*.jpg"))}
    return {f"{REVIEW_DIR}/index.html": review_dir / "index.html"}, thumbs


@dg.asset(group_name=GROUP, kinds={"duckdb", "parquet"}, code_version="2", pool="warehouse")
def warehouse_release(
    context: dg.AssetExecutionContext, rewardhouse: RewardhouseResource, release_candidate: Candidate,
    dedupe_review: dict,
) -> dg.MaterializeResult:
    """Publish the judged candidate as an immutable release (with its check results in
    `quality_results`) and point the warehouse at it. Runs only when no blocking check failed."""
    layout, settings = rewardhouse.layout(), rewardhouse.settings()
    candidate = release_candidate
    release_id = candidate.release_id
    outcomes = read_outcomes(candidate)
    missing = sorted(set(REQUIRED_CHECKS) - set(outcomes))
    if missing:
        raise dg.Failure(description=f"release {release_id} was not judged: checks {', '.join(missing)} have no result; "
                                     "materialize release_candidate together with its checks")
    blocking = sorted(name for name, o in outcomes.items() if not o["passed"] and o["severity"] == "ERROR")
    if blocking:
        raise dg.Failure(description=f"release {release_id} blocked by failed checks: {', '.join(blocking)}")

    # The candidate's Parquet files are published as they are; only quality_results is new.
    tables: dict = {name: Path(path) for name, path in candidate.tables.items()}
    tables["quality_results"] = pa.Table.from_pylist(
        [{"release_id": release_id, "check": name, "passed": o["passed"], "severity": o["severity"],
          "details": json.dumps(o["details"], sort_keys=True)} for name, o in sorted(outcomes.items())],
        schema=QUALITY_SCHEMA,
    )
    exports = {name: Staged.from_record(record) for name, record in candidate.exports.items()}
    if dedupe_review.get("release_id") != release_id:
        raise dg.Failure(description=f"the review page was made for release {dedupe_review.get('release_id')}, "
                                     f"not {release_id}; materialize dedupe_review with the candidate")
    review_page, review_thumbs = review_files(Path(dedupe_review["dir"]))
    store = ReleaseStore(layout.releases)
    manifest, published, pruned, held = publish_release(
        store,
        layout.warehouse,
        release_id,
        tables,
        keep=settings.keep_releases,
        grace=settings.release_grace_minutes * 60,
        changelog=changelog_hook,
        on_wait=context.log.warning,
        code_version=TRANSFORM_VERSION,
        sources=candidate.sources,
        settings=candidate.settings,
        files={**{rel: Path(p) for e in exports.values() for rel, p in e.exports.items()}, **review_page},
        # the exports' images are content-addressed: train sets that show one image share its file
        bulk={"exports/images": {rel[len("images/"):]: Path(p) for e in exports.values() for rel, p in e.images.items()},
              f"{REVIEW_DIR}/thumbs": review_thumbs},
        rendered={rel: _renderer(ref, e) for e in exports.values() for rel, ref in e.render.items()},
        summary=export_summary(exports),
    )
    if held:  # a rollback pinned CURRENT: said on every run until unpinned, never silently undone
        context.log.warning(f"release {release_id} written but not made current: {held.line()}")
    else:
        context.log.info(
            f"release {release_id} {'published' if published else 'unchanged, nothing new published'}"
            + (f"; pruned {', '.join(pruned)}" if pruned else "")
        )
    remote = {}
    if layout.remote:  # the bucket is the data root: the release goes there, atomically
        from warehouse.objectstore import ObjectStoreError, PublishOutcomeUnknown
        from warehouse.remote import publish_remote

        try:
            outcome = publish_remote(layout, release_id, candidate.built_on, context.log.info,
                                     keep=settings.keep_releases, grace=settings.release_grace_minutes * 60)
        except PublishOutcomeUnknown as exc:
            raise dg.Failure(description=str(exc), metadata={"publish_outcome": "unknown"}) from None
        except ObjectStoreError as exc:
            raise dg.Failure(description=str(exc)) from None
        published, held = outcome.published, outcome.held
        if held:
            context.log.warning(f"release {release_id} written to {layout.remote} but not made current: {held.line()}")
        remote = {"remote": dg.MetadataValue.url(f"{layout.remote}/releases/{release_id}")}
        if outcome.warning:
            context.log.warning(outcome.warning)
            remote["warning"] = outcome.warning
    return dg.MaterializeResult(
        metadata={
            "release_id": release_id,
            "published": published,
            **({"pinned": held.line()} if held else {}),
            "changes": dg.MetadataValue.md(changelog_markdown(manifest.changes)),
            **remote,
            "warehouse": dg.MetadataValue.path(str(layout.warehouse)),
            "release_dir": dg.MetadataValue.path(str(store.path(release_id))),
            "review_page": dg.MetadataValue.path(str(store.path(release_id) / REVIEW_DIR / "index.html")),
            **{f"rows_{t}": dg.MetadataValue.int(n) for t, n in manifest.row_counts.items()},
        }
    )
