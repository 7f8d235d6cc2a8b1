"""Reviewers' text `not_leak` decisions (pipeline/review/overrides.py, `"of": "text"`) applied to
`record_contamination`.

A decision names a train record and, optionally, one eval record (`<dataset>:<record key>`). It
removes the *text* link of each pair it names: a `text` row is dropped; a `full` row keeps its
picture link and becomes an `image` row (its text columns NULL). Image decisions are the image
dedupe's (pipeline/dedupe/decisions.py) and are not looked at here. Set-wise in DuckDB: one join
of the decisions with the leaks, no Python loop over the leaks. Plain Python, no Dagster.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.dedupe.decisions import OVERRIDES_APPLIED_SCHEMA
from pipeline.settings import quiet_duckdb

_TEXT_COLUMNS = ("text_overlap", "matched_text", "longest_span")  # NULL once a row is an image leak only

_DECISIONS_SCHEMA = pa.schema([("number", pa.int32()), ("train_dataset", pa.string()), ("train_key", pa.string()),
                               ("eval_dataset", pa.string()), ("eval_key", pa.string())])


def _split(name: str) -> tuple[str, str]:
    dataset, _, key = name.partition(":")
    return dataset, key


def text_decisions(overrides) -> list[tuple[int, object]]:
    """(1-based place in the file, decision) of the text not_leak decisions."""
    return [(i, d) for i, d in enumerate(overrides.decisions, 1) if d.decision == "not_leak" and d.of == "text"]


def _effect(hits: int, full: int, train: str, eval_: str | None) -> str:
    if not hits:
        return f"not applied: no text leak of {train}" + (f" against {eval_}" if eval_ else "") + " in this release"
    out = f"applied: removed the text link of {hits} pair{'s' * (hits != 1)}"
    return out + (f" ({full} kept as an image leak)" if full else "")


def apply_text_not_leak(leaks: pa.Table, overrides) -> tuple[pa.Table, pa.Table]:
    """(`leaks` without the text links the decisions name, their effects in OVERRIDES_APPLIED_SCHEMA).

    `leaks` is record_contamination; the rows keep their order and the table its schema. The effects
    table has one row per text decision, numbered by its place in the file."""
    chosen = text_decisions(overrides)
    if not chosen:
        return leaks, OVERRIDES_APPLIED_SCHEMA.empty_table()
    rows = []
    for number, d in chosen:
        train = _split(d.images[0])
        evals = _split(d.images[1]) if len(d.images) > 1 else (None, None)
        rows.append({"number": number, "train_dataset": train[0], "train_key": train[1],
                     "eval_dataset": evals[0], "eval_key": evals[1]})
    decisions = pa.Table.from_pylist(rows, schema=_DECISIONS_SCHEMA)

    con = quiet_duckdb(duckdb.connect())
    try:
        keys = leaks.select(["train_dataset", "train_key", "eval_dataset", "eval_key", "leak"])
        con.register("leaks", keys.append_column("row", pa.array(np.arange(leaks.num_rows, dtype=np.int64))))
        con.register("decisions", decisions)
        # every (decision, leak row) it names; a row named twice is changed once
        con.execute("""
            create temp table hits as
            select d.number, l.row, l.leak
            from decisions d join leaks l
              on l.train_dataset = d.train_dataset and l.train_key = d.train_key
             and (d.eval_dataset is null or (l.eval_dataset = d.eval_dataset and l.eval_key = d.eval_key))
            where l.leak in ('text', 'full')
        """)
        per = {number: (hits, full) for number, hits, full in con.execute(
            "select number, count(*), count(*) filter (where leak = 'full') from hits group by number").fetchall()}
        named = con.sql("""
            select h.row is not null as named
            from leaks l left join (select distinct row from hits) h on h.row = l.row order by l.row
        """).to_arrow_table()["named"]
    finally:
        con.close()

    demote = pc.and_(named, pc.equal(leaks["leak"], "full"))
    drop = pc.and_(named, pc.equal(leaks["leak"], "text"))
    columns = []
    for field in leaks.schema:
        column = leaks[field.name]
        if field.name == "leak":
            column = pc.if_else(demote, pa.scalar("image", field.type), column)
        elif field.name in _TEXT_COLUMNS:
            column = pc.if_else(demote, pa.scalar(None, field.type), column)
        columns.append(column)
    kept = pa.Table.from_arrays(columns, schema=leaks.schema).filter(pc.invert(drop))

    effects = []
    for number, d in chosen:
        hits, full = per.get(number, (0, 0))
        effects.append(_effect(hits, full, d.images[0], d.images[1] if len(d.images) > 1 else None))
    table = pa.table({
        "number": pa.array([number for number, _ in chosen], pa.int32()),
        "decision": [d.decision for _, d in chosen],
        "images": [" | ".join(d.images) for _, d in chosen],
        "reason": [d.reason for _, d in chosen], "by": [d.by for _, d in chosen], "at": [d.at for _, d in chosen],
        "applied": [e.startswith("applied") for e in effects],
        "effect": effects,
    }, schema=OVERRIDES_APPLIED_SCHEMA)
    return kept, table
