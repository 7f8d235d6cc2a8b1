"""VisualPRM400K `messages` → labelled samples and steps, vectorised in DuckDB (no Dagster).

The exact shape of `messages` in mm-eval/VisualPRM400K is not confirmed (../shared/SOURCES.md), so
three known shapes are recognised and anything else is quarantined with a reason:

- `internvl`: InternVL's PRM conversation, `[{"from": "system"}, {"from": "human", "value":
  "### Question:\\n<image>\\n{q}\\n\\n### Solution Process:\\n{step_0}"}, {"from": "gpt", "value":
  "+"}, {"from": "human", "value": "{step_1}"}, {"from": "gpt", "value": "-"}, ...]`;
- `chat`: the same with `role`/`content` (system/user/assistant); `content` may be a string or a
  list of parts whose `text` fields are concatenated (image parts carry none);
- `raw`: the VisualPRM400K-v1.1-Raw object `{image, question, answer, steps_with_score: [{step,
  score, num_mc_correct, num_mc_total}]}`, label "+" iff score > threshold (upstream: 0.0).

Input: a DuckDB relation `prm_input(sample_id, source_hint, messages, image_refs VARCHAR[],
row_order)`. Every rule is a set-based query over all rows at once: 50,000 rows parse in about a
second (see `make bench`).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

DATASET = "visualprm"
FORMATS = ("internvl", "chat", "raw")

# One pass per concern; each `problem_*` view yields (sample_id, rank, reason) and a row's first
# problem (lowest rank, then turn) is its quarantine reason.
_SQL = r"""
-- Each document's JSON type in one parse (`try`: null where it is not JSON); valid_json is
-- json_valid's answer (null for a null document).
create or replace temp table prm_rows as
select sample_id, source_hint, messages, coalesce(image_refs, []) as image_refs, row_order,
       case when messages is not null then jtype is not null end as valid_json, jtype
from (select *, try(json_type(messages)) as jtype from prm_input);

create or replace temp table prm_problems (sample_id varchar, row_order bigint, rank int, reason varchar);

insert into prm_problems
select coalesce(nullif(sample_id, ''), '#row' || row_order), row_order, 0,
       case when sample_id is null or sample_id = '' then 'missing sample id'
            else 'duplicate sample id (first seen at row ' || first_row || ')' end
from (select *, min(row_order) over (partition by sample_id) as first_row from prm_rows)
where sample_id is null or sample_id = '' or row_order <> first_row;

insert into prm_problems
select sample_id, row_order, 1,
       case when not valid_json then 'messages is not valid JSON'
            when jtype = 'OBJECT' then 'JSON object without a steps_with_score list'
            else 'unrecognised messages shape: a JSON ' || lower(jtype) end
from prm_rows
where not valid_json
   or jtype not in ('ARRAY', 'OBJECT')
   or (jtype = 'OBJECT' and coalesce(json_type(messages, '$.steps_with_score'), '') <> 'ARRAY');

insert into prm_problems
select sample_id, row_order, 5, 'image reference ' || (list_position(list_transform(image_refs, lambda r: coalesce(r, '') = ''), true) - 1)
       || ' is empty (no path and no bytes)'
from prm_rows
where list_bool_or(list_transform(image_refs, lambda r: coalesce(r, '') = ''));

-- Conversations: one row per turn. Each document is parsed once, into structs; a turn that is
-- not an object comes out as all-null fields. Leading system turns are counted, so a turn's
-- position `n` in the dialogue needs no window.
create or replace temp table prm_dialog as
with conv as (
    select sample_id, row_order,
           json_transform(messages, '[{"from": "VARCHAR", "value": "VARCHAR", "role": "VARCHAR", "content": "JSON"}]') as turns
    from prm_rows where valid_json and jtype = 'ARRAY'
), flat as (
    select sample_id, row_order,
           len(list_filter(turns, lambda t: lower(coalesce(t."from", t.role)) = 'system')) as n_system,
           unnest(turns) as e, generate_subscripts(turns, 1) - 1 as turn_idx
    from conv
), fields as (
    select sample_id, row_order, n_system, turn_idx,
           case when e."from" is not null or e.value is not null then 'internvl'
                when e.role is not null or e.content is not null then 'chat' end as style,
           lower(coalesce(e."from", e.role)) as role_raw,
           coalesce(e.value,
                    case json_type(e.content)
                        when 'VARCHAR' then e.content->>'$'
                        when 'ARRAY' then array_to_string(
                            list_filter(json_extract_string(e.content, '$[*].text'), lambda x: x is not null), '')
                    end) as text
    from flat
)
select *, case when role_raw = 'system' then 'system'
               when role_raw in ('human', 'user') then 'user'
               when role_raw in ('gpt', 'assistant') then 'assistant' end as role,
       turn_idx + 1 - n_system as n
from fields;

insert into prm_problems
select sample_id, row_order, 2,
       case when style is null then 'turn ' || turn_idx || ' is not a {from, value} or {role, content} object'
            when role is null then 'turn ' || turn_idx || ' has unknown role ' || coalesce(chr(39) || role_raw || chr(39), 'null')
            when text is null then 'turn ' || turn_idx || ' has no text'
            when role = 'system' then 'system turn ' || turn_idx || ' inside the conversation'
            when role = 'user' then 'step ' || ((n - 2) // 2) || ' has no label'
            else 'label at turn ' || turn_idx || ' follows no step' end
from prm_dialog
where style is null or role is null or text is null
   or (role = 'system' and turn_idx >= n_system)
   or (role = 'user' and n % 2 = 0) or (role = 'assistant' and n % 2 = 1);

insert into prm_problems
select sample_id, row_order, 3, reason from (
    select sample_id, row_order,
           count(*) filter (where role <> 'system') as turns,
           count(distinct style) as styles,
           max(n) filter (where role <> 'system') as last_n,
           bool_or(role = 'user' and n = 1 and text not like '%### Solution Process:%') as no_marker,
           case when count(*) filter (where role <> 'system') = 0 then 'conversation has no steps'
                when count(distinct style) > 1 then 'turns mix from/value and role/content keys'
                when max(n) filter (where role <> 'system') % 2 = 1
                     then 'step ' || ((max(n) filter (where role <> 'system') - 1) // 2) || ' has no label'
                when bool_or(role = 'user' and n = 1 and text not like '%### Solution Process:%')
                     then 'first human turn lacks ''### Solution Process:'''
           end as reason
    from prm_dialog group by all
) where reason is not null;

insert into prm_problems
select sample_id, row_order, 4,
       'label ''' || text || ''' of step ' || ((n - 2) // 2) || ' is neither ''+'' nor ''-'''
from prm_dialog
where role = 'assistant' and n % 2 = 0 and trim(text) not in ('+', '-');

-- Raw form: one row per scored step.
create or replace temp table prm_raw_steps as
select r.sample_id, r.row_order, s.i - 1 as step_index, s.e->>'step' as text,
       try_cast(s.e->>'score' as double) as mc_score,
       try_cast(s.e->>'num_mc_correct' as integer) as num_mc_correct,
       try_cast(s.e->>'num_mc_total' as integer) as num_mc_total
from prm_rows r, unnest(json_extract(r.messages, '$.steps_with_score[*]')) with ordinality as s(e, i)
where r.valid_json and r.jtype = 'OBJECT' and json_type(r.messages, '$.steps_with_score') = 'ARRAY';

insert into prm_problems
select sample_id, row_order, 2,
       case when text is null then 'step ' || step_index || ' has no text'
            else 'step ' || step_index || ' has no numeric score' end
from prm_raw_steps where text is null or mc_score is null;

-- An empty array: the one conversation with no turn in prm_dialog (no third parse of the text).
insert into prm_problems
select r.sample_id, r.row_order, 3, 'conversation has no steps'
from prm_rows r anti join prm_dialog d on d.row_order = r.row_order
where r.valid_json and r.jtype = 'ARRAY';

insert into prm_problems
select r.sample_id, r.row_order, 3, 'steps_with_score is empty'
from prm_rows r
where r.valid_json and r.jtype = 'OBJECT' and json_type(r.messages, '$.steps_with_score') = 'ARRAY'
  and json_array_length(r.messages, '$.steps_with_score') = 0;

create or replace temp table prm_rejected as
select sample_id, row_order, arg_min(reason, rank) as reason
from prm_problems group by all;

create or replace temp table prm_good as
select r.sample_id, r.source_hint, r.image_refs, r.row_order, r.jtype,
       case when r.jtype = 'OBJECT' then r.messages end as messages  -- only the raw form is read again
from prm_rows r anti join prm_rejected x on r.row_order = x.row_order;

-- Steps of the good rows, both families.
create or replace temp table prm_steps_all as
select d.sample_id, (d.n - 1) // 2 as step_index,
       case when d.n = 1 then regexp_extract(d.text, '(?s)### Solution Process:\n?(.*)$', 1) else d.text end as text,
       trim(l.text) as label,
       null::double as mc_score, null::integer as num_mc_correct, null::integer as num_mc_total
from prm_dialog d
join prm_dialog l on l.row_order = d.row_order and l.role = 'assistant' and l.n = d.n + 1
semi join prm_good g on g.row_order = d.row_order
where d.role = 'user'
union all
select s.sample_id, s.step_index, s.text, case when s.mc_score > $threshold then '+' else '-' end,
       s.mc_score, s.num_mc_correct, s.num_mc_total
from prm_raw_steps s semi join prm_good g on g.row_order = s.row_order;

create or replace temp table prm_samples_all as
with firsts as (
    select d.row_order, max(d.style) as message_format,
           regexp_replace(
               regexp_extract(max(d.text), '(?s)^\s*(?:### Question:[ \t]*\n?)?(.*?)\n*### Solution Process:', 1),
               '^(?:[ \t]*<image>[ \t]*\n)+', '') as question
    from prm_dialog d semi join prm_good g on g.row_order = d.row_order
    where d.role = 'user' and d.n = 1 group by d.row_order
), counts as (
    select sample_id, count(*) as n_steps,
           count(*) filter (where label = '+') as n_positive,
           count(*) filter (where label = '-') as n_negative,
           min(step_index) filter (where label = '-') as first_negative_step
    from prm_steps_all group by sample_id
)
select g.sample_id,
       g.row_order,
       coalesce(g.source_hint,
                case when len(refs.image_refs) > 0 and contains(refs.image_refs[1], '/')
                     then split_part(refs.image_refs[1], '/', 1) end) as source,
       coalesce(f.question, g.messages->>'question') as question,
       refs.image_refs,
       c.n_steps::integer as n_steps, c.n_positive::integer as n_positive, c.n_negative::integer as n_negative,
       c.first_negative_step::integer as first_negative_step,
       coalesce(f.message_format, 'raw') as message_format,
       case when g.jtype = 'OBJECT' then g.messages->>'answer' end as answer
from prm_good g
join counts c using (sample_id)
left join firsts f on f.row_order = g.row_order
cross join lateral (
    select case when len(g.image_refs) > 0 then g.image_refs
                when g.jtype = 'OBJECT' and json_type(g.messages, '$.image') = 'VARCHAR' then [g.messages->>'image']
                when g.jtype = 'OBJECT' and json_type(g.messages, '$.image') = 'ARRAY'
                     then list_filter(json_extract_string(g.messages, '$.image[*]'), lambda x: x is not null)
                else []::varchar[] end as image_refs
) refs;
"""

SAMPLES_SQL = """
select sample_id, source, question, image_refs, n_steps, n_positive, n_negative, first_negative_step,
       message_format, answer, row_order as row_index
from prm_samples_all order by row_order
"""
STEPS_SQL = """
select s.sample_id, s.step_index::integer as step_index, s.text, s.label, s.mc_score, s.num_mc_correct, s.num_mc_total
from prm_steps_all s join prm_samples_all p using (sample_id) order by p.row_order, s.step_index
"""
QUARANTINE_SQL = f"""
select '{DATASET}' as dataset, 'parse' as stage, sample_id as record_key, reason
from prm_rejected order by row_order
"""


def parse_prm(con: duckdb.DuckDBPyConnection, threshold: float = 0.0) -> dict[str, pa.Table]:
    """Parse the `prm_input` relation visible to `con`; returns prm_samples, prm_steps, quarantine."""
    for statement in _SQL.replace("$threshold", repr(float(threshold))).split(";\n"):
        if statement.strip():
            con.execute(statement)
    return {
        "prm_samples": con.sql(SAMPLES_SQL).to_arrow_table(),
        "prm_steps": con.sql(STEPS_SQL).to_arrow_table(),
        "quarantine": con.sql(QUARANTINE_SQL).to_arrow_table(),
    }


def sample_records(root) -> dict[str, pa.Table]:
    """The record tables this parser makes of the embedded sample (written under `root`), its
    record contract enforced (DatasetSpec.sample_records: tests derive their cases from it)."""
    from pathlib import Path

    from pipeline.contract import enforce
    from pipeline.settings import QualitySettings
    from pipeline.visualprm.contract import contracts
    from pipeline.visualprm.readers import connect, load_parquet_input
    from pipeline.visualprm.sample import PARQUET_RELPATH, write_visualprm_sample

    write_visualprm_sample(Path(root))
    con = connect()
    load_parquet_input(con, [Path(root) / PARQUET_RELPATH])
    tables = parse_prm(con)
    tables.pop("quarantine")
    return enforce("visualprm", tables, contracts(QualitySettings())).tables
