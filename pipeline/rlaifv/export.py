"""The training export of RLAIF-V: which pairs go in, and their files.

Marks (`mark_pairs`): a pair repeats another when it shows the same picture (the same image, or
one of a near-duplicate cluster of the shared dedupe) and asks the same question (lower-cased,
spaces collapsed): the first in the set's order is kept, the others are `duplicate_of` it, whatever
their answers (a second preference over one question and picture weighs that question twice).

Files (`build_export`), for the pairs kept:

    rlaifv_train.jsonl          InternVL's preference (MPO) layout: {id, image, question, chosen,
                                rejected}, the question led by `<image>`, the image a path under
                                the exports folder (the release's own content-addressed copy)
    rlaifv_train_trl.parquet    TRL's preference type (pipeline/trl.py), images embedded

A pair whose image did not decode cannot be trained on: it is left out with a quarantine row
(stage export), as VisualPRM's samples are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from pipeline.quarantine import Rejection
from pipeline.settings import quiet_duckdb

DATASET = "rlaifv"
EXPORT_NAME = "rlaifv_train"
IMAGES_DIR = "images"
TRL_FILE = f"{EXPORT_NAME}_trl.parquet"

_NORMALISED = "regexp_replace(lower(trim({0})), '\\s+', ' ', 'g')"


def mark_pairs(pairs: pa.Table, clusters: pa.Table) -> pa.Table:
    """rlaifv_pairs plus `image_cluster` (the duplicate cluster of its image, NULL when alone),
    `is_duplicate` and `duplicate_of` (the first pair over the same picture and question)."""
    con = quiet_duckdb(duckdb.connect())
    con.register("pairs", pairs)
    con.register("clusters", clusters.select(["dataset", "image_key", "cluster_id"]))
    question = _NORMALISED.format("p.question")
    return con.sql(f"""
        with numbered as (select row_number() over () as pos, * from pairs),
        keyed as (
            select p.pos, c.cluster_id as image_cluster,
                   coalesce(c.cluster_id, p.image_key) as picture, {question} as asked
            from numbered p left join clusters c on c.dataset = '{DATASET}' and c.image_key = p.image_key
        ),
        firsts as (
            select k.pos, k.image_cluster,
                   first_value(n.pair_id) over (partition by k.picture, k.asked order by k.pos) as first_id
            from keyed k join numbered n using (pos)
        )
        select n.* exclude (pos), f.image_cluster,
               n.image_key is not null and f.first_id <> n.pair_id as is_duplicate,
               case when n.image_key is not null and f.first_id <> n.pair_id then f.first_id end as duplicate_of
        from numbered n join firsts f using (pos)
        order by n.pos
    """).to_arrow_table()


@dataclass
class ExportResult:
    rows: int
    jsonl: Path
    trl: Path
    image_files: dict[str, str] = field(default_factory=dict)  # export-relative path -> store path
    excluded: list[Rejection] = field(default_factory=list)


def build_export(pairs: pa.Table, images: pa.Table, out_dir: Path, image_store: Path) -> ExportResult:
    """The files of the pairs given (those the export keeps), in their order."""
    from pipeline.trl import PREFERENCE, TrlWriter, assistant_turn, store_reader, user_turn

    out_dir.mkdir(parents=True, exist_ok=True)
    con = quiet_duckdb(duckdb.connect())
    con.register("pairs", pairs.select(["pair_id", "question", "chosen", "rejected", "image_key"]))
    con.register("images", images.select(["image_key", "status", "store_path"]))
    con.execute("""
        create temp table x as
        select row_number() over () as pos, p.*, i.status, i.store_path from pairs p
        left join images i using (image_key)""")
    excluded = [Rejection(DATASET, "export", key, f"image {image} is {status or 'unknown'}")
                for key, image, status in con.execute(
                    "select pair_id, image_key, status from x where store_path is null order by pos").fetchall()]
    jsonl, trl = out_dir / f"{EXPORT_NAME}.jsonl", out_dir / TRL_FILE
    cursor = con.execute("""select pair_id, question, chosen, rejected, store_path from x
                            where store_path is not null order by pos""")
    rows, files = 0, {}
    with open(jsonl, "w", encoding="utf-8") as fh, TrlWriter(trl, PREFERENCE, store_reader(image_store)) as writer:
        while batch := cursor.fetchmany(1024):
            for pair_id, question, chosen, rejected, store_path in batch:
                image = f"{IMAGES_DIR}/{store_path}"
                files[image] = store_path
                fh.write(json.dumps({"id": pair_id, "image": image, "question": f"<image>\n{question}",
                                     "chosen": chosen, "rejected": rejected}, ensure_ascii=False) + "\n")
                writer.add({"id": pair_id, "prompt": user_turn(question, 1), "chosen": assistant_turn(chosen),
                            "rejected": assistant_turn(rejected), "images": [store_path]})
                rows += 1
    return ExportResult(rows=rows, jsonl=jsonl, trl=trl, image_files=files, excluded=excluded)
