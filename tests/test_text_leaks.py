"""Text leaks: normalisation, n-gram matching, stock text and template siblings (pipeline.decontam.text)."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pyarrow as pa
import pytest

from pipeline.decontam.text import (
    RECORD_TEXT_SCHEMA,
    TEXT_LEAK_SCHEMA,
    TextMatchSettings,
    normalise,
    text_leaks,
)

pytestmark = pytest.mark.fast

GEOMETRY = (
    "As shown in the figure, in triangle ABC, AB = 6, AC = 8 and angle BAC = 90°. Point D is the "
    "midpoint of BC. What's the length of segment AD?\nChoices:\n(A) 5\n(B) 6\n(C) 7\n(D) 10"
)
GEOMETRY_NORMALISED = (
    "as shown in the figure in triangle abc ab 6 ac 8 and angle bac 90 point d is the midpoint of bc "
    "whats the length of segment ad a 5 b 6 c 7 d 10"
)


def records(*rows: tuple[str, str, str | None]) -> pa.Table:
    return pa.Table.from_pylist([{"dataset": d, "key": k, "text": t} for d, k, t in rows], schema=RECORD_TEXT_SCHEMA)


def pairs(table: pa.Table) -> list[tuple[str, str, str, str]]:
    assert table.schema == TEXT_LEAK_SCHEMA
    return list(zip(*(table.column(c).to_pylist() for c in ("train_dataset", "train_key", "eval_dataset", "eval_key"))))


def test_the_reference_text_normalises_to_its_words():
    assert normalise([GEOMETRY]).to_list() == [GEOMETRY_NORMALISED]
    assert len(GEOMETRY_NORMALISED.split(" ")) == 37


PERTURBED = {
    "nfkc full-width letters and digits": GEOMETRY.replace("ABC", "ＡＢＣ").replace("= 6", "= ６"),
    "case": GEOMETRY.upper(),
    "line wraps and runs of white space": GEOMETRY.replace(" ", "\n", 5).replace(", ", " ,\t  \n"),
    "punctuation": GEOMETRY.replace(",", "").replace("?", " ?!").replace(".", ";"),
    "curly quotes": GEOMETRY.replace("What's", "What\u2019s"),
    "choices as A:": GEOMETRY.replace("(A)", "A:").replace("(B)", "B:").replace("(C)", "C:").replace("(D)", "D:"),
    "choices as A. inline": GEOMETRY.split("\nChoices:")[0] + " A. 5 B. 6 C. 7 D. 10",
    "choices as A) after Options:": GEOMETRY.split("\nChoices:")[0] + "\nOptions: A) 5, B) 6, C) 7, D) 10",
    "internvl frame": f"### Question:\n<image>\n{GEOMETRY}\n\n### Solution Process:\nStep 1: AD = BC / 2 = 5.",
    "internvl frame after a system prompt, two images": (
        f"You are a process supervision model.\n### Question:\n<image>\n<image>\n{GEOMETRY}\n\n"
        "### Solution Process:\nStep 1: ..."
    ),
    "hint and question lines": (
        "Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the "
        f"end.\nQuestion: {GEOMETRY}"
    ),
    "boilerplate suffix": f"{GEOMETRY}\nAnswer with the option's letter from the given choices directly.",
    "reasoning boilerplate": (
        f"{GEOMETRY}\nFirst perform reasoning, then finally select the question from the choices in the "
        "following format: Answer: xxx."
    ),
    "all at once": (
        "### QUESTION:\n<image>\nHINT: PLEASE ANSWER THE QUESTION AND PROVIDE THE CORRECT OPTION LETTER, E.G., "
        "A, B, C, D, AT THE END.\nQUESTION: AS SHOWN IN THE FIGURE IN TRIANGLE ＡＢＣ AB = 6\nAC = 8 AND "
        "ANGLE BAC = 90° POINT D IS THE MIDPOINT OF BC WHAT\u2019S THE LENGTH OF SEGMENT AD? A: 5 B: 6 C: 7 D: 10"
        "\nANSWER WITH THE OPTION\u2019S LETTER FROM THE GIVEN CHOICES DIRECTLY.\n\n### SOLUTION PROCESS:\n+"
    ),
}


@pytest.mark.parametrize("name", sorted(PERTURBED))
def test_each_perturbation_normalises_to_the_same_text_and_leaks_exactly(name):
    assert normalise([PERTURBED[name]]).to_list() == [GEOMETRY_NORMALISED]
    out = text_leaks(records(("prm", "t1", PERTURBED[name])), records(("bench", "e1", GEOMETRY)))
    assert out.to_pylist() == [{
        "train_dataset": "prm", "train_key": "t1", "eval_dataset": "bench", "eval_key": "e1",
        "text_overlap": 1.0, "longest_span": 37, "matched_text": GEOMETRY_NORMALISED, "exact": True,
    }]


def test_mathvista_hint_line_goes_and_the_question_stays():
    text = ("Hint: Please answer the question requiring an integer answer and provide the final value, e.g., "
            "1, 2, 3, at the end.\nQuestion: What is the age gap between these two people in image?")
    assert normalise([text]).to_list() == ["what is the age gap between these two people in image"]


def test_single_word_boilerplate_goes_and_ordinary_words_stay():
    texts = [
        "What colour is the bus? Answer the question using a single word or phrase.",
        "A triangle has three sides. (A) True (B) False",
        "Is this a cat?",
        "The price rose from $1,250 to $2,000.5",
    ]
    assert normalise(texts).to_list() == [
        "what colour is the bus",
        "a triangle has three sides a true b false",
        "is this a cat",
        "the price rose from 1250 to 2000 5",
    ]


def test_normalise_takes_series_arrays_and_lists_and_keeps_none():
    raw = ["  Ｈｅｌｌｏ,\nWorld!  ", None, "", "..."]
    expected = ["hello world", None, "", ""]
    assert normalise(raw).to_list() == expected
    assert normalise(pl.Series(raw)).to_list() == expected
    assert normalise(pa.array(raw)).to_list() == expected
    assert normalise(pa.chunked_array([raw[:2], raw[2:]])).to_list() == expected
    assert normalise(raw).dtype == pl.String


def test_short_specific_prompt_matches_exactly_and_only_exactly():
    evals = records(("bench", "e1", "Who painted the Night Watch?"))
    train = records(
        ("prm", "copy", "WHO PAINTED THE “NIGHT WATCH”"),
        ("prm", "longer", "Who painted the Night Watch? Explain briefly."),
        ("prm", "other", "Who painted the Night Café?"),
    )
    out = text_leaks(train, evals)
    assert pairs(out) == [("prm", "copy", "bench", "e1")]
    assert out.column("exact").to_pylist() == [True]
    assert out.column("longest_span").to_pylist() == [5]


def test_generic_prompt_shared_by_many_records_is_not_a_leak():
    settings = TextMatchSettings()
    generic = [("prm", f"g{i}", "Describe this image in detail.") for i in range(settings.stock_records)]
    evals = records(("bench", "e1", "Describe this image in detail."))
    assert text_leaks(records(*generic), evals, settings).num_rows == 0
    # The same prompt in a handful of records is a specific text, and leaks.
    assert text_leaks(records(*generic[:3]), evals, settings).num_rows == 3


def test_stock_counts_records_on_both_sides():
    settings = TextMatchSettings()
    evals = records(*[("bench", f"e{i}", "What is shown in the image?") for i in range(settings.stock_records)])
    assert text_leaks(records(("prm", "t1", "What is shown in the image?")), evals, settings).num_rows == 0


def test_stock_sentence_shared_by_many_records_does_not_pair_them():
    stock = "Look at the image carefully and think about every detail of the scene before you answer."
    train = records(*[("prm", f"t{i}", f"{stock} Question {i}: how many {w} are there?")
                      for i, w in enumerate(["cats", "dogs", "cars", "birds", "boats"] * 5)])
    evals = records(("bench", "e1", f"{stock} What colour is the umbrella held by the woman on the left?"))
    assert text_leaks(train, evals).num_rows == 0


def test_template_sibling_is_not_paired_when_the_real_copy_is_there():
    sibling = GEOMETRY.replace("AB = 6, AC = 8", "AB = 5, AC = 12").replace("(C) 7\n(D) 10", "(C) 6.5\n(D) 13")
    evals = records(("bench", "real", GEOMETRY), ("bench", "sibling", sibling))
    out = text_leaks(records(("prm", "t1", f"### Question:\n<image>\n{GEOMETRY}")), evals)
    assert pairs(out) == [("prm", "t1", "bench", "real")]


def test_near_sibling_is_dropped_by_the_margin_to_the_real_copy():
    # One choice differs: the sibling covers 36 of its 37 words (0.973, above min_overlap), the real
    # source 1.0; only right records within sibling_margin of the best are kept.
    near = GEOMETRY.replace("(D) 10", "(D) 12")
    evals = records(("bench", "real", GEOMETRY), ("bench", "near", near))
    train = records(("prm", "t1", GEOMETRY))
    assert pairs(text_leaks(train, evals)) == [("prm", "t1", "bench", "real")]
    wide = replace(TextMatchSettings(), sibling_margin=0.05)
    out = text_leaks(train, evals, wide)
    assert pairs(out) == [("prm", "t1", "bench", "near"), ("prm", "t1", "bench", "real")]
    assert out.column("text_overlap").to_pylist() == [pytest.approx(36 / 37), 1.0]
    assert out.column("exact").to_pylist() == [False, True]


def test_template_sibling_alone_is_not_a_leak():
    sibling = GEOMETRY.replace("AB = 6, AC = 8", "AB = 5, AC = 12").replace("(C) 7\n(D) 10", "(C) 6.5\n(D) 13")
    assert text_leaks(records(("prm", "t1", sibling)), records(("bench", "e1", GEOMETRY))).num_rows == 0


def test_the_right_eval_record_is_named_among_many():
    questions = [
        "What is the value of the red bar for 2015 in the chart about coal power exports?",
        "How many people are standing under the blue umbrella next to the fountain in the park?",
        "A block of mass 4 kg slides down a frictionless ramp inclined at 30 degrees; find its acceleration.",
        "Which of the following best explains the movement of the painting's brushwork and colour?",
    ]
    evals = records(*[("bench_a" if i % 2 else "bench_b", f"e{i}", q) for i, q in enumerate(questions)])
    train = records(
        ("prm", "t9", "### Question:\n" + questions[2].upper()),
        ("other", "t1", questions[1] + " Answer the question using a single word or phrase."),
        ("prm", "t5", "Completely unrelated words about cooking pasta with garlic and olive oil tonight."),
    )
    out = text_leaks(train, evals)
    assert pairs(out) == [("other", "t1", "bench_a", "e1"), ("prm", "t9", "bench_b", "e2")]
    assert out.column("exact").to_pylist() == [True, True]


def test_partial_copy_reports_coverage_and_longest_span():
    evals = records(("bench", "e1", "The quick brown fox jumps over the lazy dog near the river bank."))
    train = records(("prm", "t1", "the quick brown fox LEAPS over the lazy dog near the river bank"))
    settings = TextMatchSettings(ngram=3, min_overlap=0.5, stock_records=20, sibling_margin=0.05)
    out = text_leaks(train, evals, settings).to_pylist()
    # Matched 3-grams start at words 0, 1 and 5..10: words 0-3 and 5-12 are covered (12 of 13),
    # the longest run of starts is 5..10, i.e. words 5..12.
    assert out == [{
        "train_dataset": "prm", "train_key": "t1", "eval_dataset": "bench", "eval_key": "e1",
        "text_overlap": pytest.approx(12 / 13), "longest_span": 8,
        "matched_text": "over the lazy dog near the river bank", "exact": False,
    }]


def test_of_two_equally_long_runs_the_first_is_the_matched_text():
    evals = records(("bench", "e1", "the quick brown fox jumps over the lazy dog near the river bank"))
    train = records(("prm", "t1", "the quick brown fox jumps over THAT lazy dog near the river bank"))
    settings = TextMatchSettings(ngram=3, min_overlap=0.5, stock_records=20, sibling_margin=0.05)
    (row,) = text_leaks(train, evals, settings).to_pylist()
    # Starts 0..3 and 7..10 match: two runs of six words, 12 of 13 words covered.
    assert (row["longest_span"], row["matched_text"]) == (6, "the quick brown fox jumps over")
    assert row["text_overlap"] == pytest.approx(12 / 13)


def test_coverage_below_min_overlap_is_not_a_leak():
    evals = records(("bench", "e1", "The quick brown fox jumps over the lazy dog near the river bank."))
    train = records(("prm", "t1", "the quick brown fox LEAPS over the lazy dog near the river bank"))
    settings = TextMatchSettings(ngram=3, min_overlap=0.95, stock_records=20, sibling_margin=0.05)
    assert text_leaks(train, evals, settings).num_rows == 0


def test_ngrams_never_span_two_records():
    # Whatever the order of the two train texts, "p q | r s" across them would be the eval's 4-gram.
    evals = records(("bench", "e1", "p q r s"))
    train = records(("prm", "t1", "r s z p q"), ("prm", "t2", "r s y p q"))
    settings = TextMatchSettings(ngram=4, min_overlap=0.5, stock_records=20, sibling_margin=0.05)
    assert text_leaks(train, evals, settings).num_rows == 0


def test_eval_against_eval_finds_the_same_item_in_two_benchmarks():
    a = records(("bench_a", "1", GEOMETRY), ("bench_a", "2", "Who painted the Mona Lisa?"))
    b = records(("bench_b", "x", PERTURBED["choices as A. inline"]), ("bench_b", "y", "Who painted the Scream?"))
    assert pairs(text_leaks(a, b)) == [("bench_a", "1", "bench_b", "x")]
    assert pairs(text_leaks(b, a)) == [("bench_b", "x", "bench_a", "1")]


def test_every_copy_of_a_repeated_question_is_reported_and_sorted():
    evals = records(("bench", "e2", "Who painted the Mona Lisa?"), ("bench", "e1", GEOMETRY))
    train = records(*[("prm", f"t{i}", GEOMETRY if i % 2 else "Who painted the Mona Lisa?") for i in range(6)])
    assert pairs(text_leaks(train, evals)) == [
        ("prm", "t0", "bench", "e2"), ("prm", "t1", "bench", "e1"), ("prm", "t2", "bench", "e2"),
        ("prm", "t3", "bench", "e1"), ("prm", "t4", "bench", "e2"), ("prm", "t5", "bench", "e1"),
    ]


def test_empty_inputs_and_empty_texts_never_match():
    empty = records()
    some = records(("bench", "e1", GEOMETRY))
    for train, evals in ((empty, some), (some, empty), (empty, empty)):
        out = text_leaks(train, evals)
        assert out.num_rows == 0 and out.schema == TEXT_LEAK_SCHEMA
    blanks = records(("prm", "t1", None), ("prm", "t2", ""), ("prm", "t3", " ?! \n"), ("prm", "t4", "<image>"))
    out = text_leaks(blanks, records(("bench", "e1", None), ("bench", "e2", ""), ("bench", "e3", "...")))
    assert out.num_rows == 0 and out.schema == TEXT_LEAK_SCHEMA


def test_ngram_size_is_checked():
    with pytest.raises(ValueError, match="ngram"):
        text_leaks(records(("prm", "t", "a b")), records(("bench", "e", "a b")), TextMatchSettings(ngram=0))
