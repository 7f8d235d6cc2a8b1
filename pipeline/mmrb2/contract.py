"""MMRB2's tables and their rules (see pipeline/contract.py for who reads them)."""

from __future__ import annotations

from pipeline.contract import (
    BOOL, INT, STRING, TableContract, between, in_set, json_schema, json_text, not_null, null, sha256, unique, where,
)
from pipeline.settings import MMRB2_TASKS, QualitySettings

RATED_TASKS = ("t2i", "edit", "interleaved")  # three human ratings; reasoning has A/B/C lists
IMAGE_STATUS = ("ok", "corrupt", "missing")


def items_rules(key: tuple[str, ...]) -> list:
    """Rules of a table of ordered text/image items (MMRB2 prompt and response items)."""
    return [
        *not_null(*key, "kind"),
        *unique(*key),
        *between("position", 0),
        *in_set("kind", ("text", "image")),
        *not_null("image_name", when=where("kind", "image")),
        *not_null("text", when=where("kind", "text")),
        *null("image_name", when=where("kind", "text")),
        *null("text", when=where("kind", "image")),
    ]


def contracts(q: QualitySettings) -> dict[str, TableContract]:
    lo, hi = q.ratings
    three_ratings = {"type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "integer", "minimum": lo, "maximum": hi}}
    letters = {"type": "array", "items": {"enum": ["A", "B", "C"]}}
    reasoning = {"type": "object", "required": ["response_a_ratings", "response_b_ratings"],
                 "properties": {"response_a_ratings": letters, "response_b_ratings": letters}}
    pairs = TableContract("mmrb2_pairs", {
        "pair_id": STRING, "task": STRING, "prompt_source": STRING, "prompt_metadata": STRING,
        "model_a": STRING, "model_b": STRING, "chosen": STRING, "human_annotations": STRING,
        "n_images_a": INT, "n_images_b": INT, "n_texts_a": INT, "n_texts_b": INT, "has_prompt_content": BOOL,
    }, (
        *not_null("pair_id", "task", "chosen", "prompt_metadata", "human_annotations", "has_prompt_content",
                  "n_images_a", "n_images_b", "n_texts_a", "n_texts_b"),
        *unique("pair_id"),
        *in_set("task", MMRB2_TASKS),
        *in_set("chosen", ("A", "B")),
        *[r for c in ("n_images_a", "n_images_b", "n_texts_a", "n_texts_b") for r in between(c, 0)],
        *json_text("prompt_metadata", "human_annotations"),
        *json_schema("human_annotations", three_ratings, when=where("task", *RATED_TASKS),
                     notes=f"t2i/edit/interleaved: three human ratings, integers within {lo}..{hi}"),
        *json_schema("human_annotations", reasoning, when=where("task", "reasoning"),
                     notes="reasoning: response_a_ratings / response_b_ratings, lists of A/B/C"),
    ), record_key="pair_id", description="one row per judgement pair")
    responses = TableContract("mmrb2_response_items", {
        "pair_id": STRING, "side": STRING, "position": INT, "kind": STRING, "text": STRING, "image_name": STRING,
    }, (*items_rules(("pair_id", "side", "position")), *in_set("side", ("A", "B"))), record_key="pair_id",
        description="the ordered text/image items of each response")
    prompts = TableContract("mmrb2_prompt_items", {
        "pair_id": STRING, "position": INT, "kind": STRING, "text": STRING, "image_name": STRING,
    }, tuple(items_rules(("pair_id", "position"))), record_key="pair_id", description="the ordered items of each prompt")
    ok = where("status", "ok")
    images = TableContract("mmrb2_images", {
        "image_name": STRING, "sha256": STRING, "bytes": INT, "width": INT, "height": INT, "format": STRING,
        "status": STRING, "referenced": BOOL, "zip_entry": STRING,
    }, (
        *not_null("image_name", "status", "referenced"),
        *unique("image_name"),
        *in_set("status", IMAGE_STATUS),
        *sha256("sha256"),
        *not_null("sha256", "bytes", when=where("status", "ok", "corrupt")),
        *not_null("width", "height", when=ok),
        *between("width", 1, when=ok),
        *between("height", 1, when=ok),
        *between("bytes", 0),
    ), description="every image of the zip and every referenced image")
    return {c.name: c for c in (pairs, responses, prompts, images)}
