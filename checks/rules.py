"""The release gate's own checks (plain Python + DuckDB, no Dagster): referential integrity, drift
against the previous release, dedupe sanity, quarantine budget, unusable upstream files; and each
dataset's own rules (its DatasetSpec's `gate`, e.g. VisualPRM's step-label distribution).

Each returns a CheckOutcome; severity ERROR means the release must not be published.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from pipeline.gate import ERROR, WARN, CheckOutcome, psi, violations
from pipeline.settings import quiet_duckdb, QualitySettings

# The outcome type and helpers live in pipeline/gate.py (datasets' own rules use them too).
__all__ = ["ERROR", "WARN", "CheckOutcome", "psi", "violations"]


def connect(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    con = quiet_duckdb(duckdb.connect())
    for name, table in tables.items():
        con.register(name, table)
    return con


def dataset_rules(con, q: QualitySettings, datasets_=None) -> list[CheckOutcome]:
    """Every dataset's own gate rules (DatasetSpec.gate), in registry order."""
    from pipeline import datasets
    from pipeline.spec import load

    return [load(rule.run)(con, q) for d in (datasets_ or datasets.DATASETS) for rule in d.gate]


def referential_integrity(con) -> CheckOutcome:
    """Every reference resolves or is quarantined with a reason; every child row has its parent:
    each dataset's own rules (its DatasetSpec.integrity) and those of the shared dedupe tables."""
    from pipeline import datasets

    rules = [rule for d in datasets.DATASETS for rule in d.integrity] + [
        ("cluster member not hashed",
         "select c.dataset, c.image_key from duplicate_clusters c anti join image_hashes h using (dataset, image_key)"),
        ("contamination key not hashed",
         """select x.train_image_key from contamination x
            where not exists (select 1 from image_hashes h where h.dataset = x.train_dataset and h.image_key = x.train_image_key)
               or not exists (select 1 from image_hashes h where h.dataset = x.eval_dataset and h.image_key = x.eval_image_key)"""),
    ]
    if _has(con, "record_contamination"):  # every leak names records its datasets published
        for d in datasets.DATASETS:
            key = d.tables()[d.record_table].record_key
            side = "train" if d.role == "train" else "eval"
            rules.append((f"{d.name} leak names no {d.record_table} row",
                          f"""select x.{side}_key from record_contamination x where x.{side}_dataset = '{d.name}'
                              and not exists (select 1 from {d.record_table} r where r.{key}::varchar = x.{side}_key)"""))
    bad = violations(con, rules)
    return CheckOutcome("referential_integrity", not bad, ERROR, {"violations": bad, "rules": len(rules)})


def drift(con, previous: duckdb.DuckDBPyConnection | None, previous_id: str | None, row_counts: dict,
          previous_counts: dict | None, q: QualitySettings, datasets_=None) -> CheckOutcome:
    """Each dataset's drift signals (DatasetSpec.drift: categorical distributions, compared by
    PSI) against the previous release, and row-count change per table. A signal whose tables the
    previous release did not have (a dataset new in this release) is noted, not compared."""
    from pipeline import datasets

    if previous is None:
        return CheckOutcome("drift_vs_previous", True, q.drift_severity, {"note": "first release: nothing to compare"})
    details: dict = {"previous_release": previous_id}
    drifted = {}
    for name, sql in (s for d in (datasets_ or datasets.DATASETS) for s in d.drift):
        now = dict(con.execute(sql).fetchall())
        try:
            before = dict(previous.execute(sql).fetchall())
        except duckdb.CatalogException:
            details.setdefault("new_in_this_release", []).append(name)
            continue
        if not now and not before:
            continue
        value = psi(before, now)
        details[name] = round(value, 6)
        if value > q.drift_psi:
            drifted[name] = round(value, 6)
    changes = {}
    for table, rows in sorted(row_counts.items()):
        old = (previous_counts or {}).get(table)
        if old:
            change = abs(rows - old) / old
            if change > q.drift_row_change:
                changes[table] = {"previous": old, "now": rows, "change": round(change, 4)}
    if changes:
        drifted["row_counts"] = changes
    details["drifted"] = drifted
    return CheckOutcome("drift_vs_previous", not drifted, q.drift_severity, details)


def _has(con, table: str) -> bool:
    return bool(con.execute("select count(*) from information_schema.tables where table_name = ?", [table]).fetchone()[0])


WARN_ONLY = ("dedupe_sanity",)  # rule checks whose failure is a warning whatever the settings


def dedupe_sanity(con, q: QualitySettings) -> CheckOutcome:
    largest = con.execute("select coalesce(max(n), 0) from (select count(*) n from duplicate_clusters group by cluster_id)").fetchone()[0]
    clusters = con.execute("select count(distinct cluster_id) from duplicate_clusters").fetchone()[0]
    contaminated = con.execute("select count(*), count(distinct train_image_key), count(distinct eval_image_key) from contamination").fetchone()
    details = {"clusters": clusters, "largest_cluster": largest, "max_cluster_size": q.max_cluster_size,
               "contamination_pairs": contaminated[0], "contaminated_train_images": contaminated[1],
               "eval_images_copied": contaminated[2]}
    if _has(con, "record_contamination"):  # leaks per record: pairs and train records, per class and eval set
        rows = con.execute("""select leak, eval_dataset, count(*), count(distinct train_dataset || ':' || train_key)
                              from record_contamination group by all order by 1, 2""").fetchall()
        details["record_leaks"] = {f"{leak} {ev}": {"pairs": n, "train_records": t} for leak, ev, n, t in rows}
        details["record_leaks_by_class"] = {c: sum(v["pairs"] for k, v in details["record_leaks"].items()
                                                   if k.split(" ")[0] == c) for c in ("text", "image", "full")}
    if _has(con, "eval_overlap"):
        details["eval_overlap_pairs"] = con.execute("select count(*) from eval_overlap").fetchone()[0]
    return CheckOutcome("dedupe_sanity", largest <= q.max_cluster_size, WARN, details)


def quarantine_budget(con, q: QualitySettings) -> CheckOutcome:
    """Quarantined share of each dataset's records (its record stages) and of its images (its
    image stages), datasets as the registry describes them. Export exclusions are decisions, not
    rejections, and unusable files are judged by `upstream_files`: neither is counted."""
    from pipeline import datasets

    def stages(names) -> str:
        return ", ".join(f"'{s}'" for s in names)

    parts = []
    for d in datasets.DATASETS:
        parts.append(f"""select '{d.name}' as dataset, 'records' as kind, (select count(*) from {d.record_table}) as kept,
                   (select count(*) from quarantine where dataset = '{d.name}' and stage in ({stages(d.record_stages)})) as rejected""")
        parts.append(f"""select '{d.name}', 'images', (select count(*) from {d.image_table} where status = 'ok'),
                   (select count(*) from quarantine where dataset = '{d.name}' and stage in ({stages(d.image_stages)}))""")
    sql = f"""with records as ({" union all ".join(parts)})
    select dataset, kind, kept, rejected, rejected / nullif(kept + rejected, 0) as share from records order by 1, 2"""
    rows = con.execute(sql).fetchall()
    shares = {f"{d} {k}": {"kept": kept, "quarantined": rej, "share": round(share or 0.0, 6)} for d, k, kept, rej, share in rows}
    over = {k: v for k, v in shares.items() if v["share"] > q.quarantine_budget}
    return CheckOutcome("quarantine_budget", not over, q.budget_severity,
                        {"budget": q.quarantine_budget, "shares": shares, "over_budget": sorted(over)})


def upstream_files(con, allow_unusable: bool = False) -> CheckOutcome:
    """No whole upstream file was refused (an image archive that is a zip bomb or not a zip, an
    unreadable annotation file or shard). Such a file leaves a dataset silently incomplete, so it
    blocks the release unless the `allow_unusable_files` setting says to publish without it."""
    from pipeline.quarantine import FILE_STAGE

    rows = con.execute(
        f"select dataset, record_key, reason from quarantine where stage = '{FILE_STAGE}' order by 1, 2").fetchall()
    files = [{"dataset": d, "file": f, "reason": r} for d, f, r in rows]
    return CheckOutcome("upstream_files", not files, WARN if allow_unusable else ERROR,
                        {"unusable_files": files, "allow_unusable_files": allow_unusable})
