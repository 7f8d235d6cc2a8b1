"""The VisualPRM `messages` parser: each known shape, each malformed case, the label threshold."""

import json

import duckdb
import pyarrow as pa
import pytest

from pipeline.visualprm.parse import parse_prm
from pipeline.visualprm.readers import INPUT_SCHEMA

SYSTEM = "You are a process supervision model."


def internvl(question, steps, labels, images=1, keys=("from", "value"), roles=("system", "human", "gpt")):
    k_role, k_text = keys
    turns = [{k_role: roles[0], k_text: SYSTEM}]
    for i, (step, label) in enumerate(zip(steps, labels)):
        text = step if i else f"### Question:\n{'<image>' + chr(10) if images else ''}{question}\n\n### Solution Process:\n{step}"
        turns += [{k_role: roles[1], k_text: text}, {k_role: roles[2], k_text: label}]
    return turns


def parse(rows, threshold=0.0):
    table = pa.Table.from_pylist(
        [{"sample_id": sid, "source_hint": None, "messages": m if isinstance(m, str) else json.dumps(m),
          "image_refs": refs, "row_order": i} for i, (sid, m, refs) in enumerate(rows)],
        schema=INPUT_SCHEMA,
    )
    con = duckdb.connect()
    con.register("prm_input", table)
    out = parse_prm(con, threshold)
    return ({r["sample_id"]: r for r in out["prm_samples"].to_pylist()},
            out["prm_steps"].to_pylist(),
            {r["record_key"]: r["reason"] for r in out["quarantine"].to_pylist()})


def steps_of(steps, sid):
    return [(s["step_index"], s["text"], s["label"]) for s in steps if s["sample_id"] == sid]


def test_internvl_conversation_gives_question_steps_and_labels():
    conv = internvl("How many sides?\nPick one.", ["The shape has 6 sides.\n\n", "So 6.", "Final answer: 7"], ["+", "+", "-"])
    samples, steps, bad = parse([("s1", conv, ["MathV360K/data_images/1.jpg"])])
    assert bad == {}
    s = samples["s1"]
    assert (s["question"], s["source"], s["message_format"]) == ("How many sides?\nPick one.", "MathV360K", "internvl")
    assert (s["n_steps"], s["n_positive"], s["n_negative"], s["first_negative_step"]) == (3, 2, 1, 2)
    assert s["image_refs"] == ["MathV360K/data_images/1.jpg"]
    assert steps_of(steps, "s1") == [(0, "The shape has 6 sides.\n\n", "+"), (1, "So 6.", "+"), (2, "Final answer: 7", "-")]


def test_question_without_image_token_as_upstream_item2conv_writes_it():
    samples, _, bad = parse([("s", internvl("Q?", ["a"], ["+"], images=0), [])])
    assert bad == {} and samples["s"]["question"] == "Q?" and samples["s"]["source"] is None


def test_role_content_chat_with_string_and_part_list_content():
    plain = internvl("Q1", ["a", "b"], ["+", "-"], keys=("role", "content"), roles=("system", "user", "assistant"))
    parts = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "### Question:\nQ2\n\n### Solution Process:\nfirst"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "+"}]},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
        {"role": "assistant", "content": [{"type": "text", "text": " - "}]},
    ]
    samples, steps, bad = parse([("c1", plain, ["chartqa/png/1.png"]), ("c2", parts, [])])
    assert bad == {}
    assert samples["c1"]["message_format"] == samples["c2"]["message_format"] == "chat"
    assert steps_of(steps, "c1") == [(0, "a", "+"), (1, "b", "-")]
    assert samples["c2"]["question"] == "Q2" and steps_of(steps, "c2") == [(0, "first", "+"), (1, "second", "-")]


def raw(scores, totals=None, image="geoqa+/images/1.png"):
    totals = totals or [16] * len(scores)
    return {"image": image, "question": "Find x.", "answer": "4", "response": "...",
            "steps_with_score": [{"step": f"step {i}", "score": s, "num_mc_correct": round((s or 0) * t), "num_mc_total": t}
                                 for i, (s, t) in enumerate(zip(scores, totals))],
            "num_mc_sequences": 16}


def test_raw_form_labels_plus_iff_score_above_threshold_and_keeps_mc_counts():
    samples, steps, bad = parse([("r1", raw([1.0, 0.0625, 0.0, 0.0], totals=[16, 16, 16, 0]), [])])
    assert bad == {}
    assert samples["r1"]["message_format"] == "raw" and samples["r1"]["source"] == "geoqa+"
    assert samples["r1"]["image_refs"] == ["geoqa+/images/1.png"] and samples["r1"]["answer"] == "4"
    got = [(s["label"], s["mc_score"], s["num_mc_correct"], s["num_mc_total"]) for s in steps]
    assert got == [("+", 1.0, 16, 16), ("+", 0.0625, 1, 16), ("-", 0.0, 0, 16), ("-", 0.0, 0, 0)]
    assert samples["r1"]["first_negative_step"] == 2


def test_threshold_is_a_setting():
    _, steps, _ = parse([("r1", raw([1.0, 0.0625, 0.5]), [])], threshold=0.25)
    assert [s["label"] for s in steps] == ["+", "-", "+"]


def test_raw_form_with_two_images_as_nlvr2():
    samples, _, _ = parse([("n", raw([1.0], image=["nlvr2/a-img0.png", "nlvr2/a-img1.png"]), [])])
    assert samples["n"]["image_refs"] == ["nlvr2/a-img0.png", "nlvr2/a-img1.png"]


@pytest.mark.parametrize("messages, reason", [
    ("{not json", "messages is not valid JSON"),
    (internvl("Q", ["a", "b"], ["+", "maybe"]), "label 'maybe' of step 1 is neither '+' nor '-'"),
    (internvl("Q", ["a"], ["+"]) + [{"from": "human", "value": "dangling"}], "step 1 has no label"),
    ([{"from": "human", "value": "### Question:\nQ\n\n### Solution Process:\na"}, {"from": "human", "value": "b"},
      {"from": "gpt", "value": "+"}], "step 0 has no label"),
    ({"foo": 1}, "JSON object without a steps_with_score list"),
    (["a", "b"], "turn 0 is not a {from, value} or {role, content} object"),
    ("42", "unrecognised messages shape: a JSON ubigint"),
    ([{"speaker": "x"}], "turn 0 is not a {from, value} or {role, content} object"),
    ([{"from": "robot", "value": "x"}], "turn 0 has unknown role 'robot'"),
    ([{"from": "system", "value": "S"}], "conversation has no steps"),
    ([], "conversation has no steps"),
    ("  [ ]  ", "conversation has no steps"),
    ("", "messages is not valid JSON"),
    ([{"from": "human", "value": "no marker"}, {"from": "gpt", "value": "+"}], "first human turn lacks '### Solution Process:'"),
    ([{"from": "human", "value": "### Solution Process:\na"}, {"role": "assistant", "content": "+"}], "turns mix from/value and role/content keys"),
    (raw([0.5, None]), "step 1 has no numeric score"),
    ({"question": "q", "steps_with_score": []}, "steps_with_score is empty"),
])
def test_malformed_rows_are_quarantined_with_a_reason(messages, reason):
    samples, steps, bad = parse([("bad", messages, []), ("good", internvl("Q", ["a"], ["+"]), [])])
    assert bad == {"bad": reason}
    assert list(samples) == ["good"] and {s["sample_id"] for s in steps} == {"good"}


def test_duplicate_and_missing_ids_are_quarantined_first_one_kept():
    conv = internvl("Q", ["a"], ["+"])
    samples, _, bad = parse([("x", conv, []), ("x", conv, []), ("", conv, [])])
    assert list(samples) == ["x"]
    assert bad == {"x": "duplicate sample id (first seen at row 0)", "#row2": "missing sample id"}


def test_50_steps_and_unicode_survive():
    texts = [f"步骤 {i}: \\frac{{1}}{{{i + 2}}} ✓" for i in range(50)]
    samples, steps, bad = parse([("u", internvl("几何?", texts, ["+"] * 49 + ["-"]), [])])
    assert bad == {} and samples["u"]["n_steps"] == 50 and [s["text"] for s in steps] == texts
