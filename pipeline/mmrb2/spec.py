"""MMRB2 (Multimodal RewardBench 2), an eval set: its dataset contract (see pipeline/spec.py)."""

from pipeline.settings import MMRB2_ANNOTATION_COMMIT, MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO, MMRB2_IMAGE_ZIP_NAMES
from pipeline.mmrb2.contract import contracts
from pipeline.spec import EVAL, DatasetSpec, Upstream

SPEC = DatasetSpec(
    name="mmrb2",
    title="MMRB2 (Multimodal RewardBench 2)",
    role=EVAL,
    licence="see facebookresearch/MMRB2",
    upstream=(
        Upstream(MMRB2_IMAGE_REPO, "hf", " or ".join(MMRB2_IMAGE_ZIP_NAMES), pin_setting="hf_image_revision",
                 select=lambda files: [n for n in MMRB2_IMAGE_ZIP_NAMES if n in files][:1]),
        Upstream(MMRB2_ANNOTATION_REPO, "github", "benchmark/{t2i,edit,interleaved,reasoning}_response_only.json, "
                 "benchmark/new_task_release.json", pin_setting="hf_annotation_commit", pinned=MMRB2_ANNOTATION_COMMIT),
    ),
    local_layout=(f"{MMRB2_IMAGE_REPO}/image.zip (or images.zip)",
                  f"{MMRB2_ANNOTATION_REPO}/benchmark/*_response_only.json (+ new_task_release.json)"),
    contracts=contracts,
    record_table="mmrb2_pairs",
    record_noun="pairs",
    image_table="mmrb2_images",
    record_stages=("read", "parse", "parse_prompts"),
    image_stages=("unpack", "decode", "resolve", "hash"),
    fetch="pipeline.mmrb2.source:fetch_mmrb2",
    sample="pipeline.mmrb2.sample:write_sample",
    sample_records="pipeline.mmrb2.parse:sample_records",
    assets="assets.mmrb2",
    checks="checks.mmrb2",
    raw_asset="mmrb2_raw",
    staged_assets=("mmrb2_annotations", "mmrb2_images"),
    image_asset="mmrb2_images",
    review_images="pipeline.mmrb2.review:mmrb2_images",
    image_records=(
        "select image_name as image_key, pair_id as record, null::boolean as in_export from mmrb2_response_items "
        "where kind = 'image' union all select image_name, pair_id, null from mmrb2_prompt_items "
        "where kind = 'image' and image_name is not null"
    ),
    record_asset="mmrb2_annotations",
    # the prompt's text items in order (upstream ships them for some tasks only)
    record_text=("select pair_id as record, string_agg(text, ' ' order by position) as text from mmrb2_prompt_items "
                 "where kind = 'text' group by pair_id"),
    record_images=(
        "select image_name as image_key, pair_id as record from mmrb2_response_items where kind = 'image' "
        "union all select image_name, pair_id from mmrb2_prompt_items where kind = 'image' and image_name is not null"
    ),
    integrity=(
        ("response item without pair", "select distinct i.pair_id from mmrb2_response_items i anti join mmrb2_pairs p using (pair_id)"),
        ("prompt item without pair", "select distinct i.pair_id from mmrb2_prompt_items i anti join mmrb2_pairs p using (pair_id)"),
        ("response image not in inventory",
         "select distinct i.image_name from mmrb2_response_items i anti join mmrb2_images m using (image_name) where i.kind = 'image'"),
        ("bad MMRB2 image not quarantined",
         """select m.image_name from mmrb2_images m where m.status <> 'ok' and m.referenced and not exists (
                select 1 from quarantine q where q.dataset = 'mmrb2' and q.record_key = m.image_name and q.reason is not null)"""),
    ),
    description="four judgement tasks (t2i, edit, interleaved, reasoning): pairs of responses and the human choice",
)
