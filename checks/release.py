"""Blocking checks on the release candidate: GX suites per table and the gate's own rules.

Every check also writes its outcome next to the candidate, so `warehouse_release` can refuse a
candidate that was not judged and store the results in `quality_results`.
"""

import dagster as dg
import duckdb

from checks import rules
from checks.outcomes import GX_TABLES, RULE_CHECKS, write_outcome
from pipeline.datasets import DATASETS
from pipeline.gate import CheckOutcome
from pipeline.resources import RewardhouseResource
from pipeline.staging import Candidate
from pipeline.stopping import stop_point
from warehouse.duck import schema_for
from warehouse.store import ReleaseStore


_RULE_DESCRIPTIONS = {
    "referential_integrity": "every referenced image is inventoried or quarantined; every step, item and cluster member has its parent",
    **{rule.name: f"{d.title}: {rule.description}" for d in DATASETS for rule in d.gate},
    "drift_vs_previous": "each dataset's distributions (PSI: e.g. VisualPRM's step labels and steps per sample) and "
                         "row counts against the previous release",
    "dedupe_sanity": "no duplicate cluster above the size bound; contamination reported (image pairs, and leaks per "
                     "record by class and eval set)",
    "quarantine_budget": "quarantined share of each dataset's records and images under the budget",
    "upstream_files": "no whole upstream file (archive, annotation file, shard) was refused; "
                      "blocks unless allow_unusable_files",
}


def _result(outcome: CheckOutcome, extra: dict | None = None) -> dg.AssetCheckResult:
    severity = dg.AssetCheckSeverity.ERROR if outcome.severity == rules.ERROR else dg.AssetCheckSeverity.WARN
    return dg.AssetCheckResult(
        check_name=outcome.check,
        passed=outcome.passed,
        severity=severity,
        metadata={"details": dg.MetadataValue.json(outcome.details), **(extra or {})},
    )


def _previous(store: ReleaseStore, warehouse, candidate: Candidate, remote: bool):
    """(connection with the previous release's schema as default, its id, its row counts) or Nones.
    On a bucket root the previous release is the one the run read from the bucket (brought into
    the scratch store then), not whatever else the scratch folder holds."""
    manifests = [m for m in store.list() if m.release_id != candidate.release_id]
    if remote:
        prev = next((m for m in manifests if m.release_id == candidate.built_on), None)
    else:
        current = store.current()
        prev = next((m for m in manifests if m.release_id == current), manifests[0] if manifests else None)
    if prev is None or not warehouse.is_file():
        return None, None, None
    try:
        con = duckdb.connect(str(warehouse), read_only=True)
        schema = schema_for(prev.release_id)
        if not con.execute("select count(*) from information_schema.schemata where schema_name = ?", [schema]).fetchone()[0]:
            con.close()
            return None, None, None
        con.execute(f"set schema '{schema}'")
    except duckdb.Error:
        return None, None, None
    return con, prev.release_id, prev.row_counts


def _published_verdicts(layout, candidate: Candidate, names) -> list[CheckOutcome] | None:
    """A candidate whose release is already published is the same content, judged before: its
    stored quality_results are its verdicts (an unchanged nightly run need not re-validate). On a
    bucket root only when the bucket serves it: a release built in the scratch folder but beaten
    to the bucket was judged against a previous release that is no longer the current one."""
    store = ReleaseStore(layout.releases)
    if not store.exists(candidate.release_id):
        return None
    if layout.remote and candidate.built_on != candidate.release_id:
        return None
    path = store.path(candidate.release_id) / "quality_results.parquet"
    if not path.is_file():
        return None
    import json

    import pyarrow.parquet as pq

    stored = {r["check"]: r for r in pq.read_table(path).to_pylist()}
    if not set(names) <= set(stored):
        return None
    return [CheckOutcome(n, stored[n]["passed"], stored[n]["severity"], {**json.loads(stored[n]["details"]), "reused_from_release": candidate.release_id})
            for n in names]


@dg.multi_asset_check(
    # a check that only ever warns is not marked blocking (the UI would label it so); the others
    # block when their severity (fixed, or chosen by a setting) is ERROR
    specs=[dg.AssetCheckSpec(name, asset="release_candidate", blocking=name not in rules.WARN_ONLY,
                             description=_RULE_DESCRIPTIONS[name]) for name in RULE_CHECKS],
)
def release_rules(context: dg.AssetCheckExecutionContext, rewardhouse: RewardhouseResource, release_candidate: Candidate):
    settings, layout = rewardhouse.settings(), rewardhouse.layout()
    reused = _published_verdicts(layout, release_candidate, RULE_CHECKS)
    if reused is not None:
        for outcome in reused:
            write_outcome(release_candidate, outcome)
            yield _result(outcome)
        return
    q = settings.quality
    tables = release_candidate.read()
    con = rules.connect(tables)
    # On a bucket root, release_candidate brought the bucket's current release into the scratch store.
    previous, previous_id, previous_counts = _previous(ReleaseStore(layout.releases), layout.warehouse, release_candidate,
                                                       bool(layout.remote))
    try:
        outcomes = [
            rules.referential_integrity(con),
            *rules.dataset_rules(con, q),
            rules.drift(con, previous, previous_id, {t: v.num_rows for t, v in tables.items()}, previous_counts, q),
            rules.dedupe_sanity(con, q),
            rules.quarantine_budget(con, q),
            rules.upstream_files(con, settings.allow_unusable_files),
        ]
    finally:
        if previous is not None:
            previous.close()
    for outcome in outcomes:
        write_outcome(release_candidate, outcome)
        yield _result(outcome)


@dg.multi_asset_check(
    specs=[dg.AssetCheckSpec(f"gx_{t}", asset="release_candidate", blocking=True,
                             description=f"great_expectations suite of {t}: schema, nullability, keys, value sets, ranges")
           for t in GX_TABLES],
)
def release_gx_suites(context: dg.AssetCheckExecutionContext, rewardhouse: RewardhouseResource, release_candidate: Candidate):
    settings, layout = rewardhouse.settings(), rewardhouse.layout()
    reused = _published_verdicts(layout, release_candidate, [f"gx_{t}" for t in GX_TABLES])
    if reused is not None:
        for outcome in reused:
            write_outcome(release_candidate, outcome)
            yield _result(outcome)
        return
    from checks.suites import import_in_background, validate_tables

    importing = import_in_background()  # while the tables are read
    tables = release_candidate.read()
    importing.join()
    run_name = f"{release_candidate.release_id}-{context.run.run_id[:8]}"
    results, docs = validate_tables(tables, layout.root / "quality", run_name, settings.quality,
                                    between=stop_point)
    extra = {"data_docs": dg.MetadataValue.path(str(docs))} if docs else {}
    for table in GX_TABLES:
        r = results.get(table)
        if r is None:
            outcome = CheckOutcome(f"gx_{table}", False, rules.ERROR, {"error": f"table {table} is not in the candidate"})
        else:
            outcome = CheckOutcome(
                f"gx_{table}", r.passed, rules.ERROR,
                {"rows": r.rows, "expectations": r.evaluated,
                 "failures": [f.__dict__ for f in r.failures], "data_docs": str(docs) if docs else None},
            )
        write_outcome(release_candidate, outcome)
        yield _result(outcome, extra)
