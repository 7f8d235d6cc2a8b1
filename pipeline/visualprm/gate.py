"""VisualPRM's own rules at the release gate (its DatasetSpec names them): the step labels and
their distribution, and the distributions its drift check compares with the previous release."""

from __future__ import annotations

from pipeline.gate import ERROR, CheckOutcome, violations
from pipeline.settings import QualitySettings

# Drift signals (category, count): labels per source, and steps per sample.
LABEL_DISTRIBUTION = ("select coalesce(p.source, '(unknown)') || ' ' || s.label, count(*) "
                      "from prm_steps s join prm_samples p using (sample_id) group by 1")
STEPS_DISTRIBUTION = "select n_steps::varchar, count(*) from prm_samples group by 1"


def step_labels(con, q: QualitySettings) -> CheckOutcome:
    """Labels only "+"/"-", 1..max_steps steps per sample, no sample without steps, and positive
    rates (overall, and per source with enough samples) within bounds."""
    rules = [
        ("label not + or -", "select sample_id, step_index, label from prm_steps where label is null or label not in ('+', '-')"),
        (f"steps per sample outside 1..{q.max_steps}",
         f"select sample_id, n_steps from prm_samples where n_steps is null or n_steps < 1 or n_steps > {q.max_steps}"),
        ("sample without steps", "select p.sample_id from prm_samples p anti join prm_steps s using (sample_id)"),
        ("n_steps disagrees with prm_steps",
         "select p.sample_id from prm_samples p join (select sample_id, count(*) n from prm_steps group by 1) s using (sample_id) where s.n <> p.n_steps"),
    ]
    bad = violations(con, rules)
    steps = con.execute("select count(*), count(*) filter (where label = '+') from prm_steps").fetchone()
    details: dict = {"violations": bad, "steps": steps[0]}
    if steps[0]:
        rate = steps[1] / steps[0]
        details["positive_rate"] = round(rate, 6)
        lo, hi = q.positive_rate
        if not lo <= rate <= hi:
            bad["overall positive rate out of bounds"] = {"count": 1, "sample": [f"{rate:.4f} not in [{lo}, {hi}]"]}
        lo, hi = q.source_positive_rate
        per_source = con.execute(
            f"""select coalesce(p.source, '(unknown)'), count(distinct p.sample_id), avg((s.label = '+')::double)
                from prm_steps s join prm_samples p using (sample_id) group by 1
                having count(distinct p.sample_id) >= {int(q.min_source_samples)} order by 1"""
        ).fetchall()
        details["source_positive_rate"] = {src: round(r, 6) for src, _, r in per_source}
        out = [f"{src}: {r:.4f}" for src, _, r in per_source if not lo <= r <= hi]
        if out:
            bad["source positive rate out of bounds"] = {"count": len(out), "sample": out[:5]}
    return CheckOutcome("step_label_distribution", not bad, ERROR, details)
