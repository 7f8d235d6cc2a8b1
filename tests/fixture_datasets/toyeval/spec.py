"""A fixture eval set that exists only in the tests: its dataset contract and tables.

Upstream format: `fixture/toy-eval/data/part-*.parquet`, one row per judgement pair (id, question,
answer_a, answer_b, chosen, image as HF `Image()`). No Hub repository: `sample` and `local` only."""

import pyarrow as pa

from pipeline.contract import STRING, FileColumns, TableContract, in_set, not_null, regex, unique
from pipeline.settings import QualitySettings
from pipeline.spec import EVAL, DatasetSpec
from tests.fixture_datasets.kit import images_contract, spec_fields

NAME = "toyeval"
REPO = "fixture/toy-eval"
GLOB = "data/part-*.parquet"

SHARD = FileColumns(required={"id": pa.string(), "question": pa.string(), "answer_a": pa.string(),
                              "answer_b": pa.string(), "chosen": pa.string(),
                              "image": pa.struct([("bytes", pa.binary()), ("path", pa.string())])})


def contracts(q: QualitySettings) -> dict[str, TableContract]:
    pairs = TableContract(f"{NAME}_pairs", {
        "pair_id": STRING, "question": STRING, "answer_a": STRING, "answer_b": STRING, "chosen": STRING,
        "image_key": STRING,
    }, (
        *not_null("pair_id", "question", "answer_a", "answer_b", "chosen", "image_key"),
        *unique("pair_id"),
        *regex("question", r"\S", notes="non-empty text"),
        *in_set("chosen", ("A", "B")),
        *regex("image_key", r"^sha256:[0-9a-f]{64}$", notes="sha256:<64 hex digits>"),
    ), record_key="pair_id", description="one row per judgement pair over one picture")
    images = images_contract(f"{NAME}_images")
    return {c.name: c for c in (pairs, images)}


SPEC = DatasetSpec(
    **spec_fields(NAME, REPO, GLOB),
    title="Toy eval (test fixture)",
    role=EVAL,
    contracts=contracts,
    staged_assets=(f"{NAME}_pairs",),
    image_records=f"select image_key, pair_id as record, null::boolean as in_export from {NAME}_pairs",
    review_images="tests.fixture_datasets.toyeval.data:review_images",
    description="a fixture: judgement pairs over one generated picture each",
)
