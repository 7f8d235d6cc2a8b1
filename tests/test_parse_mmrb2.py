"""The MMRB2 parser on the real upstream annotation files and on broken ones."""

import json

import pytest

from conftest import TASKS, shared_mmrb2
from pipeline.mmrb2.parse import parse_mmrb2


@pytest.fixture(scope="module")
def parsed():
    root = shared_mmrb2()
    return parse_mmrb2({t: root / f"{t}_response_only.json" for t in TASKS}, root / "new_task_release.json")


def test_real_files_give_4000_unique_pairs_1000_per_task(parsed):
    pairs = parsed.tables()["mmrb2_pairs"].to_pylist()
    assert len(pairs) == 4000
    assert len({p["pair_id"] for p in pairs}) == 4000
    for task in TASKS:
        assert sum(p["task"] == task for p in pairs) == 1000
    assert parsed.rejected == []


def test_chosen_a_shares_match_upstream(parsed):
    pairs = parsed.tables()["mmrb2_pairs"].to_pylist()
    shares = {t: sum(p["chosen"] == "A" for p in pairs if p["task"] == t) / 10 for t in TASKS}
    assert shares == {"t2i": 53.2, "edit": 55.5, "interleaved": 57.5, "reasoning": 47.5}


def test_response_items_hold_14017_images_in_position_order(parsed):
    items = parsed.tables()["mmrb2_response_items"].to_pylist()
    images = [i for i in items if i["kind"] == "image"]
    assert len(images) == 14017 and len({i["image_name"] for i in images}) == 14017
    assert sum(i["kind"] == "text" for i in items) == 12401
    pairs = {p["pair_id"]: p for p in parsed.tables()["mmrb2_pairs"].to_pylist()}
    # k in {pair_id}_{k}.jpg counts through response_a then response_b
    first = next(p for p in pairs.values() if p["task"] == "t2i")
    names = [i["image_name"] for i in images if i["pair_id"] == first["pair_id"]]
    assert names == [f"{first['pair_id']}_0.jpg", f"{first['pair_id']}_1.jpg"]
    assert first["n_images_a"] == 1 and first["n_images_b"] == 1


def test_names_with_spaces_and_colons_are_kept_intact(parsed):
    items = parsed.tables()["mmrb2_response_items"].to_pylist()
    spaced = [i["image_name"] for i in items if i["image_name"] and " " in i["image_name"]]
    assert "r2ibench_logical_Sufficient Conditional_27_-1350294928672806666_imagen4-ultra_4108_imagen4-ultra_108_0.jpg" in spaced
    prompt_images = {i["image_name"] for i in parsed.tables()["mmrb2_prompt_items"].to_pylist() if i["image_name"]}
    assert "synthetic_images/GPTGeminiAgent_gemini_2_5_flash_2025-09-18T23:05:33.756657_0.jpg" in prompt_images
    assert any(":" in n for n in prompt_images)
    assert len(prompt_images) == 453


def test_mixed_type_metadata_is_preserved_as_json(parsed):
    pairs = parsed.tables()["mmrb2_pairs"].to_pylist()
    metas = [json.loads(p["prompt_metadata"]) for p in pairs]
    assert any(isinstance(m.get("id"), int) for m in metas)
    assert any(isinstance(m.get("id"), str) for m in metas)
    assert any(isinstance(m.get("category"), list) for m in metas)  # mindcube
    reasoning = next(p for p in pairs if p["task"] == "reasoning")
    assert set(json.loads(reasoning["human_annotations"])) == {"response_a_ratings", "response_b_ratings"}
    t2i = next(p for p in pairs if p["task"] == "t2i")
    assert json.loads(t2i["human_annotations"]) == [2, 2, 1]


def _write(path, pairs):
    path.write_text(json.dumps({"pairs": pairs}))
    return path


def _pair(pid, chosen="A", a=None):
    return {
        "id": pid,
        "response_a": {"model_name": "m1", "response_content": a if a is not None else [["image", f"{pid}_0.jpg"]]},
        "response_b": {"model_name": "m2", "response_content": [["text", "hi"], ["image", f"{pid}_1.jpg"]]},
        "chosen": chosen,
        "human_annotations": [1, 2, 3],
        "prompt_source": "src",
        "prompt_metadata": {"id": 7},
    }


def test_malformed_records_are_quarantined_with_stage_and_reason(tmp_path):
    good = _write(tmp_path / "t2i.json", [_pair("p1"), _pair("p1"), _pair("p2", chosen="C"), "nonsense",
                                           _pair("p3", a=[["video", "x.mp4"]]), _pair("p4", a=[["image"]])])
    broken = tmp_path / "edit.json"
    broken.write_text('{"pairs": [')
    wrong_shape = _write(tmp_path / "interleaved.json", [])
    wrong_shape.write_text("[1, 2]")
    out = parse_mmrb2({"t2i": good, "edit": broken, "interleaved": wrong_shape})
    assert [p["pair_id"] for p in out.pairs] == ["p1"]
    reasons = {(r.stage, r.record_key): r.reason for r in out.rejected}
    assert reasons[("parse", "p1")].startswith("duplicate pair id")
    assert "expected 'A' or 'B'" in reasons[("parse", "p2")]
    assert reasons[("parse", "t2i.json#3")] == "pair is not an object"
    assert "unknown kind 'video'" in reasons[("parse", "p3")]
    assert "not a [kind, value] pair" in reasons[("parse", "p4")]
    assert reasons[("file", "edit.json")].startswith("unreadable JSON")
    assert reasons[("file", "interleaved.json")] == 'expected an object with a "pairs" list'
    assert all(r.dataset == "mmrb2" for r in out.rejected)


def test_prompts_for_unknown_pairs_are_quarantined(tmp_path):
    ann = _write(tmp_path / "edit.json", [_pair("p1")])
    prompts = tmp_path / "new_task_release.json"
    prompts.write_text(json.dumps({"pairs": [
        {"pair_id": "p1", "prompt_content": [["image", "a:b/c.jpg"], ["text", "do it"]], "prompt_source": "s", "prompt_metadata": {}},
        {"pair_id": "ghost", "prompt_content": [], "prompt_source": "s", "prompt_metadata": {}},
    ]}))
    out = parse_mmrb2({"edit": ann}, prompts)
    assert out.pairs[0]["has_prompt_content"] is True
    assert [(i["kind"], i["image_name"], i["text"]) for i in out.prompt_items] == [("image", "a:b/c.jpg", None), ("text", None, "do it")]
    assert [(r.stage, r.record_key) for r in out.rejected] == [("parse_prompts", "ghost")]
    assert out.response_images() == {"p1_0.jpg", "p1_1.jpg"} and out.prompt_images() == {"a:b/c.jpg"}
