"""RLAIF-V's own rules at the release gate (its DatasetSpec names them), and its drift signal."""

from __future__ import annotations

from pipeline.gate import ERROR, CheckOutcome, violations
from pipeline.settings import QualitySettings

# Drift signal (category, count): pairs per ds_name.
DS_NAME_DISTRIBUTION = "select coalesce(ds_name, '(none)'), count(*) from rlaifv_pairs group by 1"


def pair_rules(con, q: QualitySettings) -> CheckOutcome:
    """Every pair prefers one text over another (chosen and rejected both non-empty, and not the
    same text), names its source, and no source (ds_name) holds more than `max_source_share` of
    the pairs."""
    rules = [
        ("chosen equals rejected", "select pair_id from rlaifv_pairs where trim(chosen) = trim(rejected)"),
        ("empty text", """select pair_id from rlaifv_pairs where coalesce(trim(question), '') = ''
                          or coalesce(trim(chosen), '') = '' or coalesce(trim(rejected), '') = ''"""),
        ("no ds_name", "select pair_id from rlaifv_pairs where coalesce(trim(ds_name), '') = ''"),
    ]
    bad = violations(con, rules)
    total = con.execute("select count(*) from rlaifv_pairs").fetchone()[0]
    shares = dict(con.execute("""select coalesce(ds_name, '(none)'), round(count(*) / sum(count(*)) over (), 6)
                                 from rlaifv_pairs group by 1 order by 2 desc, 1""").fetchall())
    over = [f"{name}: {share:.4f}" for name, share in shares.items() if share > q.max_source_share]
    if over:
        bad["one ds_name holds too many pairs"] = {"count": len(over), "sample": over[:5]}
    return CheckOutcome("rlaifv_pair_rules", not bad, ERROR,
                        {"violations": bad, "pairs": total, "ds_name_share": shares, "max_source_share": q.max_source_share})
