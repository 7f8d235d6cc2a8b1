"""RLAIF-V, a train set: its dataset contract (see pipeline/spec.py)."""

from pipeline.rlaifv.contract import contracts
from pipeline.rlaifv.gate import DS_NAME_DISTRIBUTION
from pipeline.rlaifv.source import PARQUET_GLOB, REPO, select_shards
from pipeline.spec import TRAIN, DatasetSpec, GateRule, Upstream

SPEC = DatasetSpec(
    name="rlaifv",
    title="RLAIF-V",
    role=TRAIN,
    licence="CC BY-NC 4.0",
    upstream=(Upstream(REPO, "hf", PARQUET_GLOB, select=select_shards),),
    local_layout=(f"{REPO}/{PARQUET_GLOB}",),
    contracts=contracts,
    record_table="rlaifv_pairs",
    record_noun="pairs",
    image_table="rlaifv_images",
    record_stages=("parse",),
    image_stages=("decode",),
    fetch="pipeline.rlaifv.source:fetch_rlaifv",
    sample="pipeline.rlaifv.sample:write_rlaifv_sample",
    sample_records="pipeline.rlaifv.parse:sample_records",
    assets="assets.rlaifv",
    raw_asset="rlaifv_raw",
    staged_assets=("rlaifv_pairs", "rlaifv_export"),
    image_asset="rlaifv_pairs",
    export_asset="rlaifv_export",
    gate=(GateRule("rlaifv_pair_rules", "chosen unlike rejected, non-empty texts, a ds_name on every pair, no ds_name "
                   "over max_source_share of the pairs", "pipeline.rlaifv.gate:pair_rules"),),
    drift=(("rlaifv_ds_name_psi", DS_NAME_DISTRIBUTION),),
    review_images="pipeline.rlaifv.review:rlaifv_images",
    image_records=(
        "select image_key, pair_id as record, in_export from rlaifv_pairs where image_key is not null"
    ),
    record_asset="rlaifv_pairs",
    record_text="select pair_id as record, question as text from rlaifv_pairs",
    record_images="select image_key, pair_id as record from rlaifv_pairs where image_key is not null",
    integrity=(
        ("RLAIF-V pair image not in inventory",
         "select p.pair_id from rlaifv_pairs p anti join rlaifv_images i using (image_key)"),
        ("corrupt RLAIF-V image not quarantined",
         """select i.image_key from rlaifv_images i where i.status <> 'ok' and not exists (
                select 1 from quarantine q where q.dataset = 'rlaifv' and q.record_key = i.image_key)"""),
    ),
    description="preference pairs over one image each: a question, the chosen and the rejected response",
)
