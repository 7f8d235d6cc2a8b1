"""The MMRB2 scorer (pipeline/mmrb2/scoring.py) on hand-made judgements whose accuracies are
worked out by hand below: mixed answers, reversed answers, missing pairs, unknown ids, several
entries per list, a list with no entry, an answer that is neither A nor B, and one pair judged in
two files."""

import json

import pytest

from pipeline.mmrb2.scoring import JudgementFileError, format_report, load_judgements, overall, score

pytestmark = pytest.mark.fast

TRUTH = [
    ("p1", "t2i", "A"), ("p2", "t2i", "B"), ("p3", "t2i", "A"), ("p4", "t2i", "B"),
    ("e1", "edit", "B"), ("e2", "edit", "A"), ("e3", "edit", "A"),
    ("r1", "reasoning", "A"),  # never judged: the task is left out of the report
]


def j(*answers: str) -> list[dict]:
    return [{"judgement": a, "reasoning": "…"} for a in answers]


JUDGEMENTS = {
    # t2i
    "p1": {"forward": j("A"), "reverse": j("B")},   # forward right; reverse B flips to A: right      2 of 2
    "p2": {"forward": j("A"), "reverse": j("A")},   # forward wrong; reverse A flips to B: right      1 of 2
    # p3: missing (not wrong)
    "p4": {"forward": j("C"), "reverse": j("A")},   # "C" is a judgement made and wrong; reverse right 1 of 2
    # edit
    "e1": {"forward": j("B", "A", "A"), "reverse": []},  # only the first entry counts: right; no reverse  1 of 1
    "e2": {"forward": j("B")},                            # wrong; no reverse key                          0 of 1
    "e3": {"forward": [{"reasoning": "no verdict"}], "reverse": j("B")},  # no judgement; reverse right   1 of 1
    # not in the benchmark
    "zz1": {"forward": j("A"), "reverse": j("B")},
    "zz2": {"forward": j("B")},
}


def test_accuracy_by_hand():
    scores, unknown = score(TRUTH, JUDGEMENTS)
    got = {s.task: (s.total_pairs, s.evaluated_pairs, s.missing_pairs, s.correct, s.judgements) for s in scores}
    assert got == {"t2i": (4, 3, 1, 4, 6), "edit": (3, 3, 0, 2, 3)}
    assert [s.task for s in scores] == ["t2i", "edit"]  # reasoning was never judged
    assert scores[0].accuracy == pytest.approx(4 / 6) and scores[1].accuracy == pytest.approx(2 / 3)
    assert overall(scores) == pytest.approx(6 / 9)
    assert unknown == 2
    assert format_report(scores, unknown).splitlines() == [
        "task            accuracy  judged  missing",
        "t2i               66.67%       6        1",
        "edit              66.67%       3        0",
        "overall           66.67%       9",
        "(2 judged pair ids are not in the benchmark and were ignored)",
    ]


def test_a_scorer_that_ignored_reverse_judgements_would_differ():
    # Forward alone: p1 right, p2 wrong, p4 wrong, e1 right, e2 wrong = 2 of 5; with reverse 6 of 9.
    only_forward = {k: {"forward": v["forward"]} for k, v in JUDGEMENTS.items()}
    scores, _ = score(TRUTH, only_forward)
    assert overall(scores) == pytest.approx(2 / 5)
    # Reverse answers are flipped: a reverse "A" on a pair whose chosen is "A" is wrong.
    scores, _ = score([("x", "t2i", "A")], {"x": {"forward": j("A"), "reverse": j("A")}})
    assert (scores[0].correct, scores[0].judgements) == (1, 2)


def test_files_merge_and_a_pair_judged_differently_twice_is_refused(tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps({"p1": JUDGEMENTS["p1"], "p2": JUDGEMENTS["p2"]}))
    b.write_text(json.dumps({"p2": JUDGEMENTS["p2"], "e1": JUDGEMENTS["e1"]}))  # p2 again, the same
    merged = load_judgements([a, b])
    assert sorted(merged) == ["e1", "p1", "p2"]
    c.write_text(json.dumps({"p2": {"forward": j("B"), "reverse": j("B")}}))
    with pytest.raises(JudgementFileError) as err:
        load_judgements([a, c])
    assert str(err.value) == f"{c}: pair p2 is also judged in {a}, differently; score one judge's files at a time"

