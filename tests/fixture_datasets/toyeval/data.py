"""The fixture eval set's source (sample / local), sample, parser and review reader."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pyarrow as pa

from pipeline.settings import QualitySettings, ZipLimits
from pipeline.staging import streaming_parquet
from tests.fixture_datasets import kit
from tests.fixture_datasets.toyeval.spec import GLOB, NAME, REPO, SHARD, contracts

SAMPLE = f"{REPO}/data/part-000.parquet"
PAIRS = 40
BAD = f"{NAME}:7"  # chosen "C": quarantined by the record contract
SCHEMA = pa.schema([(n, pa.string()) for n in SHARD.required if n != "image"] + [("image", kit.IMAGE)])
_C = contracts(QualitySettings())
PAIRS_SCHEMA = pa.schema([(n, pa.string()) for n in _C[f"{NAME}_pairs"].columns])
IMAGES_SCHEMA = kit.images_schema(_C[f"{NAME}_images"])


def question(k: int) -> str:
    """Pair k's question (the fixture train set copies one of them)."""
    return kit.sentence(random.Random(9_000 + k), 14)


def picture(k: int) -> bytes:
    """Pair k's picture (the fixture train set copies one of them)."""
    return kit.picture(5_000 + k)


def write_sample(root: Path) -> None:
    rng = random.Random(3)
    rows = [{"id": f"{NAME}:{k}", "question": question(k), "answer_a": kit.sentence(rng, 8),
             "answer_b": kit.sentence(rng, 8), "chosen": "C" if f"{NAME}:{k}" == BAD else rng.choice("AB"),
             "image": {"bytes": picture(k), "path": f"{k}.png"}} for k in range(PAIRS)]
    kit.write_shard(Path(root) / SAMPLE, rows, SCHEMA)


SOURCE = kit.Source(NAME, REPO, GLOB, write_sample)
fetch, shards = SOURCE.fetch, SOURCE.shards
_record = kit.record_maker(NAME, ("question", "answer_a", "answer_b", "chosen"))


def parse(files: list[Path], limits: ZipLimits, quality: QualitySettings, root: Path | None = None) -> kit.Parsed:
    return kit.parse_shards(NAME, files, SHARD, PAIRS_SCHEMA, IMAGES_SCHEMA, f"{NAME}_pairs", contracts(quality),
                            _record, limits, root=root)


def sample_records(root: Path) -> dict[str, pa.Table]:
    write_sample(Path(root))
    return {f"{NAME}_pairs": parse([Path(root) / SAMPLE], ZipLimits(), QualitySettings()).records}


def review_images(snap, tables: dict, layout, keys):
    wanted = set(keys)
    for path in shards(snap):
        for batch in streaming_parquet(path).iter_batches(batch_size=32, columns=["image"]):
            for image in batch.column(0).to_pylist():
                data = (image or {}).get("bytes")
                key = data and f"sha256:{hashlib.sha256(data).hexdigest()}"
                if key in wanted:
                    wanted.discard(key)
                    yield key, data
