"""The fixture train set's source (sample / local), sample, parser, export and gate rule.

Planted in the sample (FACTS): one pair over a copy of a fixture-eval picture (an image leak), one
asking a fixture-eval question word for word (a text leak), both left out of the export; one pair
with an empty chosen answer, quarantined by the record contract."""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pyarrow as pa

from pipeline.gate import ERROR, CheckOutcome
from pipeline.imaging import ImageStore
from pipeline.settings import QualitySettings, ZipLimits
from tests.fixture_datasets import kit
from tests.fixture_datasets.toyeval import data as toyeval
from tests.fixture_datasets.toytrain.spec import GLOB, NAME, REPO, SHARD, contracts

SAMPLE = f"{REPO}/data/part-000.parquet"
PAIRS = 60
FACTS = {"image_leak": (f"{NAME}:11", f"{toyeval.NAME}:2"), "text_leak": (f"{NAME}:23", f"{toyeval.NAME}:4"),
         "bad": f"{NAME}:31"}
TRL_FILE = f"{NAME}_train_trl.parquet"
SCHEMA = pa.schema([(n, pa.string()) for n in SHARD.required if n != "image"] + [("image", kit.IMAGE)])
_C = contracts(QualitySettings())
_PARSED = ("pair_id", "question", "chosen", "rejected", "image_key")
PAIRS_SCHEMA = pa.schema([(n, pa.string()) for n in _PARSED])
IMAGES_SCHEMA = kit.images_schema(_C[f"{NAME}_images"])


def _index(pair_id: str) -> int:
    return int(pair_id.rsplit(":", 1)[1])


def write_sample(root: Path) -> None:
    rng = random.Random(4)
    rows = []
    for k in range(PAIRS):
        pid = f"{NAME}:{k}"
        image = toyeval.picture(_index(FACTS["image_leak"][1])) if pid == FACTS["image_leak"][0] else kit.picture(7_000 + k)
        q = toyeval.question(_index(FACTS["text_leak"][1])) if pid == FACTS["text_leak"][0] else kit.sentence(rng, 14)
        rows.append({"id": pid, "question": q, "chosen": "" if pid == FACTS["bad"] else kit.sentence(rng, 9),
                     "rejected": kit.sentence(rng, 9), "image": {"bytes": image, "path": f"{k}.png"}})
    kit.write_shard(Path(root) / SAMPLE, rows, SCHEMA)


SOURCE = kit.Source(NAME, REPO, GLOB, write_sample)
fetch, shards = SOURCE.fetch, SOURCE.shards
_record = kit.record_maker(NAME, ("question", "chosen", "rejected"))


def parse(files: list[Path], limits: ZipLimits, quality: QualitySettings, root: Path | None = None,
          store: ImageStore | None = None) -> kit.Parsed:
    return kit.parse_shards(NAME, files, SHARD, PAIRS_SCHEMA, IMAGES_SCHEMA, f"{NAME}_pairs", contracts(quality),
                            _record, limits, root=root, store=store)


def sample_records(root: Path) -> dict[str, pa.Table]:
    write_sample(Path(root))
    return {f"{NAME}_pairs": parse([Path(root) / SAMPLE], ZipLimits(), QualitySettings()).records}


def write_export(pairs: pa.Table, images: pa.Table, out_dir: Path, image_store: Path) -> tuple[Path, int]:
    """TRL's preference Parquet of the pairs given (those kept), pictures embedded from the store."""
    from pipeline.trl import PREFERENCE, TrlWriter, assistant_turn, store_reader, user_turn

    con = duckdb.connect()
    con.register("p", pairs.select(["pair_id", "question", "chosen", "rejected", "image_key"]))
    con.register("i", images.select(["image_key", "store_path"]))
    rows = con.execute("""select pair_id, question, chosen, rejected, store_path
                          from (select row_number() over () as pos, * from p) join i using (image_key)
                          where store_path is not null order by pos""").fetchall()
    path = out_dir / TRL_FILE
    with TrlWriter(path, PREFERENCE, store_reader(image_store)) as writer:
        for pair_id, question, chosen, rejected, store_path in rows:
            writer.add({"id": pair_id, "prompt": user_turn(question, 1), "chosen": assistant_turn(chosen),
                        "rejected": assistant_turn(rejected), "images": [store_path]})
    return path, len(rows)


def answers_differ(con, quality: QualitySettings) -> CheckOutcome:
    """The gate rule it brings: no published pair prefers an answer to itself."""
    same = con.execute(f"select pair_id from {NAME}_pairs where chosen = rejected order by 1").fetchall()
    return CheckOutcome(f"{NAME}_answers_differ", not same, ERROR,
                        {"pairs": con.execute(f"select count(*) from {NAME}_pairs").fetchone()[0],
                         "same_answer": [r[0] for r in same[:10]]})
