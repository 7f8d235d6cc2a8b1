"""VisualPRM400K, a train set: its dataset contract (see pipeline/spec.py)."""

from pipeline.settings import VISUALPRM_REPO, VISUALPRM_UPSTREAM_REPO
from pipeline.visualprm.contract import contracts
from pipeline.visualprm.source import is_parquet_shard
from pipeline.spec import TRAIN, DatasetSpec, GateRule, Upstream
from pipeline.visualprm.gate import LABEL_DISTRIBUTION, STEPS_DISTRIBUTION

SPEC = DatasetSpec(
    name="visualprm",
    title="VisualPRM400K",
    role=TRAIN,
    licence="see mm-eval/VisualPRM400K",
    upstream=(
        Upstream(VISUALPRM_REPO, "hf", "data/train-*.parquet", pin_setting="hf_visualprm_revision",
                 select=lambda files: sorted(f for f in files if is_parquet_shard(f))),
    ),
    local_layout=(f"{VISUALPRM_REPO}/data/train-*.parquet",
                  f"{VISUALPRM_UPSTREAM_REPO}/**/*_prm.jsonl (+ image zips or loose images)"),
    contracts=contracts,
    record_table="prm_samples",
    record_noun="samples",
    image_table="prm_images",
    record_stages=("read", "parse"),
    image_stages=("unpack", "resolve", "decode", "hash"),
    fetch="pipeline.visualprm.source:fetch_visualprm",
    sample="pipeline.visualprm.sample:write_visualprm_sample",
    sample_records="pipeline.visualprm.parse:sample_records",
    assets="assets.visualprm",
    raw_asset="visualprm_raw",
    staged_assets=("visualprm_samples", "visualprm_images", "visualprm_export"),
    image_asset="visualprm_images",
    export_asset="visualprm_export",
    gate=(GateRule("step_label_distribution", "labels only +/-, 1..max_steps steps per sample, positive rates within bounds",
                   "pipeline.visualprm.gate:step_labels"),),
    drift=(("label_distribution_psi", LABEL_DISTRIBUTION), ("steps_per_sample_psi", STEPS_DISTRIBUTION)),
    review_images="pipeline.visualprm.review:visualprm_images",
    image_records=(
        "select r.ref as image_key, s.sample_id as record, s.in_export from prm_samples s, unnest(s.image_refs) as r(ref)"
    ),
    record_asset="visualprm_samples",
    record_text="select sample_id as record, question as text from prm_samples",
    record_images="select r.ref as image_key, s.sample_id as record from prm_samples s, unnest(s.image_refs) as r(ref)",
    integrity=(
        ("step without sample", "select distinct s.sample_id from prm_steps s anti join prm_samples p using (sample_id)"),
        ("sample image not in inventory",
         "select distinct r.ref from prm_samples p, unnest(p.image_refs) as r(ref) anti join prm_images i on i.image_key = r.ref"),
        ("corrupt VisualPRM image not quarantined",
         """select i.image_key from prm_images i where i.status = 'corrupt' and not exists (
                select 1 from quarantine q where q.dataset = 'visualprm' and q.record_key = i.image_key)"""),
    ),
    description="process-supervision rollouts: questions over images, steps labelled +/-",
)
