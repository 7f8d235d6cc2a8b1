"""`prm_label_stats`: per source and overall, the label distribution of the parsed samples."""

from __future__ import annotations

import duckdb
from pipeline.settings import quiet_duckdb
import pyarrow as pa

_STATS_SQL = """
with per_sample as (
    select p.sample_id, coalesce(p.source, '(unknown)') as source, p.n_steps, p.n_positive,
           p.first_negative_step, (p.first_negative_step = p.n_steps - 1) as first_negative_is_last
    from samples p
), scoped as (
    select 'source' as scope, source, * exclude (source) from per_sample
    union all
    select 'overall', '(all)', * exclude (source) from per_sample
)
select scope, source,
       count(*)::bigint as samples,
       sum(n_steps)::bigint as steps,
       round(sum(n_positive) / sum(n_steps), 6) as positive_rate,
       min(n_steps)::integer as steps_min,
       quantile_disc(n_steps, 0.25)::integer as steps_p25,
       quantile_disc(n_steps, 0.5)::integer as steps_median,
       quantile_disc(n_steps, 0.75)::integer as steps_p75,
       max(n_steps)::integer as steps_max,
       round(avg(n_steps), 4) as steps_mean,
       histogram(n_steps)::json::varchar as steps_histogram,
       count(first_negative_step)::bigint as samples_with_negative,
       round(count(*) filter (where first_negative_is_last) / count(*), 6) as first_negative_last_share,
       round(count(*) filter (where first_negative_is_last) / nullif(count(first_negative_step), 0), 6)
           as first_negative_last_share_of_negative
from scoped
group by scope, source
order by scope = 'overall', source
"""

STATS_SCHEMA = pa.schema(
    [
        ("scope", pa.string()), ("source", pa.string()), ("samples", pa.int64()), ("steps", pa.int64()),
        ("positive_rate", pa.float64()), ("steps_min", pa.int32()), ("steps_p25", pa.int32()),
        ("steps_median", pa.int32()), ("steps_p75", pa.int32()), ("steps_max", pa.int32()),
        ("steps_mean", pa.float64()), ("steps_histogram", pa.string()), ("samples_with_negative", pa.int64()),
        ("first_negative_last_share", pa.float64()), ("first_negative_last_share_of_negative", pa.float64()),
    ]
)


def label_stats(samples: pa.Table) -> pa.Table:
    """Samples, steps, positive rate, steps-per-sample distribution and the share of samples whose
    first negative step is their last (high under upstream's early stop), per source and overall."""
    if samples.num_rows == 0:
        return STATS_SCHEMA.empty_table()
    con = quiet_duckdb(duckdb.connect())
    con.register("samples", samples)
    return con.sql(_STATS_SQL).to_arrow_table().cast(STATS_SCHEMA)
