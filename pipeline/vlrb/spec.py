"""VL-RewardBench, an eval set: its dataset contract (see pipeline/spec.py)."""

from pipeline.vlrb.contract import contracts
from pipeline.spec import EVAL, DatasetSpec, Upstream
from pipeline.vlrb.source import PARQUET_GLOB, REPO, is_shard

SPEC = DatasetSpec(
    name="vlrb",
    title="VL-RewardBench",
    role=EVAL,
    licence="MIT",
    upstream=(Upstream(REPO, "hf", PARQUET_GLOB,
                       select=lambda files: sorted(f for f in files if is_shard(f))),),
    local_layout=(f"{REPO}/{PARQUET_GLOB}",),
    contracts=contracts,
    record_table="vlrb_pairs",
    record_noun="pairs",
    image_table="vlrb_images",
    record_stages=("parse",),
    image_stages=("decode",),
    fetch="pipeline.vlrb.source:fetch_vlrb",
    sample="pipeline.vlrb.sample:write_vlrb_sample",
    sample_records="pipeline.vlrb.parse:sample_records",
    assets="assets.vlrb",
    raw_asset="vlrb_raw",
    staged_assets=("vlrb_pairs",),
    image_asset="vlrb_pairs",
    review_images="pipeline.vlrb.review:vlrb_images",
    image_records=(
        "select image_key, pair_id as record, null::boolean as in_export from vlrb_pairs where image_key is not null"
    ),
    record_asset="vlrb_pairs",
    record_text="select pair_id as record, query as text from vlrb_pairs",
    record_images="select image_key, pair_id as record from vlrb_pairs where image_key is not null",
    integrity=(
        ("VL-RewardBench pair image not in inventory",
         "select p.pair_id from vlrb_pairs p anti join vlrb_images i using (image_key)"),
        ("corrupt VL-RewardBench image not quarantined",
         """select i.image_key from vlrb_images i where i.status <> 'ok' and not exists (
                select 1 from quarantine q where q.dataset = 'vlrb' and q.record_key = i.image_key)"""),
    ),
    description="preference pairs over one image each: a query, two responses, the human ranking",
)
