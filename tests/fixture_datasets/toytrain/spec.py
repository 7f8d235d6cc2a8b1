"""A fixture train set that exists only in the tests: its dataset contract and tables.

Upstream format: `fixture/toy-train/data/part-*.parquet`, one row per preference pair (id,
question, chosen, rejected, image as HF `Image()`). Its export: TRL's preference Parquet, the
pairs that copy an eval record left out. No Hub repository: `sample` and `local` only."""

import pyarrow as pa

from pipeline.contract import BOOL, LIST, STRING, FileColumns, TableContract, in_set, not_null, null, regex, unique, where
from pipeline.settings import LEAK_CLASSES, QualitySettings
from pipeline.spec import TRAIN, DatasetSpec, GateRule
from tests.fixture_datasets.kit import images_contract, spec_fields

NAME = "toytrain"
REPO = "fixture/toy-train"
GLOB = "data/part-*.parquet"

SHARD = FileColumns(required={"id": pa.string(), "question": pa.string(), "chosen": pa.string(),
                              "rejected": pa.string(),
                              "image": pa.struct([("bytes", pa.binary()), ("path", pa.string())])})


def contracts(q: QualitySettings) -> dict[str, TableContract]:
    pairs = TableContract(f"{NAME}_pairs", {
        "pair_id": STRING, "question": STRING, "chosen": STRING, "rejected": STRING, "image_key": STRING,
        # the export's marks, as the release publishes the table
        "is_contaminated": BOOL, "leak": STRING, "leaked_from": LIST, "in_export": BOOL, "excluded_reason": STRING,
    }, (
        *not_null("pair_id", "question", "chosen", "rejected", "image_key"),
        *unique("pair_id"),
        *regex("chosen", r"\S", notes="non-empty text"),
        *regex("rejected", r"\S", notes="non-empty text"),
        *regex("image_key", r"^sha256:[0-9a-f]{64}$", notes="sha256:<64 hex digits>"),
        *in_set("leak", LEAK_CLASSES),
        *not_null("leak", when=where("is_contaminated", True)),
        *null("excluded_reason", when=where("in_export", True)),
        *not_null("excluded_reason", when=where("in_export", False)),
    ), record_key="pair_id", description="one row per preference pair over one picture")
    images = images_contract(f"{NAME}_images", store_path=True)
    return {c.name: c for c in (pairs, images)}


SPEC = DatasetSpec(
    **spec_fields(NAME, REPO, GLOB),
    title="Toy train (test fixture)",
    role=TRAIN,
    contracts=contracts,
    staged_assets=(f"{NAME}_pairs", f"{NAME}_export"),
    export_asset=f"{NAME}_export",
    gate=(GateRule(f"{NAME}_answers_differ", "chosen unlike rejected on every pair",
                   "tests.fixture_datasets.toytrain.data:answers_differ"),),
    drift=((f"{NAME}_leak_psi", f"select coalesce(leak, 'none'), count(*) from {NAME}_pairs group by 1"),),
    image_records=f"select image_key, pair_id as record, in_export from {NAME}_pairs",
    description="a fixture: preference pairs over one generated picture each",
)
