"""The InternVL training export of VisualPRM: `{id, image, conversations}` JSONL + Parquet + meta.

Conversation layout, as InternVL's `item2conv_prm` writes it: the PRM system prompt; a human turn
`### Question:\\n<image>\\n{question}\\n\\n### Solution Process:\\n{step_0}`; then gpt "+"/"-"
alternating with one human turn per further step. Images are the release's own content-addressed
copies under `exports/images/`, so the meta's `root` is the exports folder. A sample whose image
is unresolved or corrupt cannot be trained on: it is left out with a quarantine row (stage export).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from pipeline.quarantine import Rejection
from pipeline.settings import quiet_duckdb

DATASET = "visualprm"
EXPORT_NAME = "visualprm_train"
IMAGES_DIR = "images"
META_FILE = f"exports/{EXPORT_NAME}_meta.json"  # release-relative, made at publish time (release_meta)

# InternVL's PRM system prompt, verbatim from OpenGVLab/InternVL
# internvl_chat/tools/reasoning_data_pipeline/utils/constants.py (format fidelity).
PRM_SYSTEM_PROMPT = """You are an advanced AI assistant, designed to serve as a process supervision model. In this task, I will provide a problem statement followed by the first step of the solution process. For each subsequent turn, I will give you a new step in the solution. Your role is to assess whether the solution process is correct up to the current step.

- In the **first round**, I will input the problem and the first step of the solution process.
- In **each subsequent round**, I will provide the next step in the solution.

For each step, you should:

- Respond with **"+"** if you believe the solution process is correct up to this step.
- Respond with **"-"** if you detect any issues or errors in the process up to this step.

Please note:
- Only respond with **"+"** or **"-"**. Do not provide any additional explanations, comments, or justifications.

Your task is to verify the accuracy and correctness of each step in the given solution process."""

_EXPORT_SQL = """
create or replace temp table x_refs as
select s.sample_id, r.pos, r.ref, i.status, i.store_path, i.problem
from samples s, unnest(s.image_refs) with ordinality as r(ref, pos)
left join images i on i.image_key = r.ref;

create or replace temp table x_excluded as
select sample_id, arg_min(
           'image ' || ref || ' is ' || coalesce(status, 'unknown')
           || case when status = 'unresolved' then ' (' || coalesce(problem, 'not found') || ')' else '' end,
           pos) as reason,
       arg_min(status, pos) as status
from x_refs where status is distinct from 'ok' group by sample_id;

create or replace temp table x_turns as
select st.sample_id, st.step_index * 2 + k.k as pos,
       case when k.k = 0 then 'human' else 'gpt' end as "from",
       case when k.k = 1 then st.label
            when st.step_index = 0 then '### Question:' || chr(10) || repeat('<image>' || chr(10), len(s.image_refs))
                 || s.question || chr(10) || chr(10) || '### Solution Process:' || chr(10) || st.text
            else st.text end as value
from steps st join samples s using (sample_id), (values (0), (1)) k(k)
anti join x_excluded x on x.sample_id = st.sample_id;

create or replace temp table x_rows as
select s.sample_id as id, s.row_no,
       coalesce((select list('images/' || r.store_path order by r.pos) from x_refs r where r.sample_id = s.sample_id), [])
           as image,
       list_prepend({'from': 'system', 'value': $system},
                    list({'from': t."from", 'value': t.value} order by t.pos)) as conversations
from (select *, row_number() over () as row_no from samples) s
join x_turns t using (sample_id)
group by s.sample_id, s.row_no;
"""


@dataclass
class ExportResult:
    rows: int
    jsonl: Path
    parquet: Path
    trl: Path | None = None  # the same rows in TRL's stepwise-supervision type (pipeline/trl.py)
    image_files: dict[str, str] = field(default_factory=dict)  # export-relative path -> store path
    excluded: list[Rejection] = field(default_factory=list)
    unresolved_by_source: dict[str, int] = field(default_factory=dict)  # samples left out for an unresolved image


TRL_FILE = f"{EXPORT_NAME}_trl.parquet"


def build_export(samples: pa.Table, steps: pa.Table, images: pa.Table, out_dir: Path,
                 image_store: Path | None = None) -> ExportResult:
    """The InternVL files of the samples given (those the export keeps), and, given the image
    store, the same rows as TRL stepwise supervision (`visualprm_train_trl.parquet`: the question,
    the steps, their labels as bools, the images embedded)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    con = quiet_duckdb(duckdb.connect())
    con.register("samples", samples.select(["sample_id", "question", "image_refs", "source"]))
    con.register("steps", steps.select(["sample_id", "step_index", "text", "label"]))
    con.register("images", images.select(["image_key", "status", "store_path", "problem"]))
    system = "'" + PRM_SYSTEM_PROMPT.replace("'", "''") + "'"
    for statement in _EXPORT_SQL.replace("$system", system).split(";\n"):
        if statement.strip():
            con.execute(statement)

    jsonl = out_dir / f"{EXPORT_NAME}.jsonl"
    lines = con.sql(
        """
        select case when len(image) = 0 then json_object('id', id, 'conversations', conversations)
                    when len(image) = 1 then json_object('id', id, 'image', image[1], 'conversations', conversations)
                    else json_object('id', id, 'image', image, 'conversations', conversations) end::varchar
        from x_rows order by row_no
        """
    ).fetchall()
    with open(jsonl, "w", encoding="utf-8") as fh:
        for (line,) in lines:
            fh.write(line)
            fh.write("\n")
    parquet = out_dir / f"{EXPORT_NAME}.parquet"
    con.execute(
        f"copy (select id, image, conversations from x_rows order by row_no) to '{str(parquet).replace(chr(39), chr(39) * 2)}'"
        " (format parquet, compression zstd)"
    )
    trl = _write_trl(con, out_dir / TRL_FILE, image_store) if image_store is not None else None
    image_files = {f"{IMAGES_DIR}/{p}": p for (p,) in con.sql("select distinct store_path from x_refs where status = 'ok'").fetchall()}
    excluded = [Rejection(DATASET, "export", key, reason)
                for key, reason in con.sql("select sample_id, reason from x_excluded order by sample_id").fetchall()]
    unresolved = dict(con.sql("""select coalesce(s.source, '(none)'), count(*)::int from x_excluded x join samples s using (sample_id)
                                 where x.status = 'unresolved' group by 1 order by 1""").fetchall())
    return ExportResult(rows=len(lines), jsonl=jsonl, parquet=parquet, trl=trl, image_files=image_files,
                        excluded=excluded, unresolved_by_source=unresolved)


def _write_trl(con, path: Path, image_store: Path) -> Path:
    """The exported samples in TRL's stepwise-supervision type, in the InternVL files' order,
    streamed from DuckDB a batch at a time."""
    from pipeline.trl import STEPWISE, TrlWriter, store_reader

    cursor = con.execute("""
        select s.sample_id, s.question,
               (select list(st.text order by st.step_index) from steps st where st.sample_id = s.sample_id),
               (select list(st.label = '+' order by st.step_index) from steps st where st.sample_id = s.sample_id),
               coalesce((select list(r.store_path order by r.pos) from x_refs r where r.sample_id = s.sample_id), [])
        from x_rows x join samples s on s.sample_id = x.id order by x.row_no""")
    with TrlWriter(path, STEPWISE, store_reader(image_store)) as writer:
        while batch := cursor.fetchmany(1024):
            for sample_id, question, texts, labels, images in batch:
                writer.add({"id": sample_id, "prompt": question, "completions": texts, "labels": labels, "images": images})
    return path


def release_meta(release_dir: Path, export) -> bytes:
    """The meta file as the release publishes it (staging.Export.render): in its exports folder."""
    return render_meta(release_dir / "exports", export.rows)


def render_meta(exports_dir: Path, rows: int) -> bytes:
    """InternVL meta: `{name: {root, annotation, data_augment, repeat_time, length}}`, pointing at
    the published release's own folder."""
    meta = {
        EXPORT_NAME: {
            "root": str(exports_dir),
            "annotation": str(exports_dir / f"{EXPORT_NAME}.jsonl"),
            "data_augment": False,
            "repeat_time": 1,
            "length": rows,
        }
    }
    return (json.dumps(meta, indent=2) + "\n").encode()
