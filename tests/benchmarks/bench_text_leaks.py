"""Benchmark: text leaks (pipeline.decontam.text.text_leaks) — planted-leak quality, then speed and memory.

1. Quality. Eval texts are generated (seeded, in process, nothing written) from five families —
   long geometry problems with lettered choices, chart questions, MMMU-style word problems, short
   specific prompts (< 10 words), hallucination-style image questions — six templates each, every
   template with many siblings (other numbers, letters, objects). The training side holds copies
   of eval items under each perturbation the normaliser is meant to undo (NFKC, case, line wraps,
   punctuation, curly quotes, choice format, InternVL frame, Hint/Question lines, boilerplate
   suffix, combinations), two it is not (an extra sentence, a one-letter typo), rollouts (a row
   repeated 1-8 times under other keys, ~3 on average, as PRM rollouts are), template siblings of
   eval items (half keep the item's point labels: the same figure, other numbers), unrelated rows
   and generic prompts in 30-400 rows each ("Describe this image in detail.", also eval texts).
   Each family's templates are split in two halves with their own seeds: the settings are chosen
   on the tuning half only (grid below), then both halves are scored with them. A reported
   (train, eval) pair is right when that train row copies that eval row.
   Choice rule (the goal's terms): among the settings with tuning precision >= 0.99 (a point of
   safety over the goal) and no generic prompt reported, those within RECALL_TOLERANCE of the best
   tuning recall are tied; the chosen one is the tied setting with the most tied neighbours on the
   grid (the centre of the plateau, the least tuned to this data).
2. Speed and memory: 400,000 train texts against 10,000 eval texts (10-120 words of Zipf-drawn
   words, shared stock phrases, 3,000 number templates shared by ~70 rows each, 300 planted
   copies), generated and written to Parquet in a temporary folder by one child process; a second
   reads them, then times `text_leaks` and reports its own peak RSS (VmHWM, which starts afresh
   at exec).

Usage: python tests/benchmarks/bench_text_leaks.py [--quick]   (--quick: 40k x 1k for part 2)
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import resource
import string
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pipeline.decontam.text import RECORD_TEXT_SCHEMA, TextMatchSettings, normalise, text_leaks  # noqa: E402

GRID_NGRAM = [3, 4, 5, 6, 8, 10, 12]
GRID_STOCK = [5, 10, 15, 20, 25, 30, 40, 80]
GRID_MIN_OVERLAP = [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
GRID_MARGIN = [0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3]

# Settings this close to the best tuning recall count as tied: about the sampling error of a
# recall over ~700 planted items (their rollouts move together).
RECALL_TOLERANCE = 0.01
GOAL_RECALL, GOAL_PRECISION = 0.95, 0.98
# The tuning half must do a point better than the goal: the held-back templates bring sibling
# patterns the tuning half has not seen (which slot sits at the edge of the text, say).
TUNING_PRECISION = 0.99
GOAL_SECONDS, GOAL_RSS_MB = 20.0, 1536

# ---------------------------------------------------------------------------------------------
# Vocabularies for the template slots.

WORDS = {
    "col": "red blue green yellow orange purple brown grey pink black white teal navy maroon olive".split(),
    "obj": ("cup chair bicycle umbrella laptop backpack clock vase bottle lamp kite skateboard suitcase bench "
            "frisbee guitar teapot sandwich pizza banana helmet camera book remote").split(),
    "objs": ("cups chairs bicycles umbrellas laptops bottles lamps kites books apples oranges boats cars birds "
             "dogs cats horses plates candles flowers").split(),
    "person": "man woman child boy girl chef cyclist skier surfer waiter player officer".split(),
    "persons": "people children players tourists workers students riders dancers".split(),
    "rel": ["on top of", "next to", "behind", "in front of", "under", "to the left of", "to the right of", "inside"],
    "surf": "table counter floor shelf desk bed sofa grass beach road".split(),
    "place": "entrance window bakery station counter gate stage fountain bridge garage".split(),
    "animal": "dog cat horse cow sheep bird rabbit parrot goat duck".split(),
    "furn": "sofa bed bench rug chair windowsill".split(),
    "veh": "car truck bus motorcycle van scooter tractor".split(),
    "art": ["Mona Lisa", "Starry Night", "Night Watch", "Birth of Venus", "Water Lilies", "Scream", "Kiss",
            "Great Wave", "Last Supper", "Girl with a Pearl Earring", "Persistence of Memory", "Guernica",
            "Sunflowers", "Olympia", "Las Meninas", "Hay Wain", "Arnolfini Portrait", "School of Athens",
            "Garden of Earthly Delights", "Raft of the Medusa", "Liberty Leading the People",
            "Wanderer above the Sea of Fog",
            "Creation of Adam", "Nighthawks"],
    "artist": ["Monet", "Rembrandt", "Titian", "Goya", "Vermeer", "Turner", "Cezanne", "Klimt", "Hokusai", "Matisse"],
    "tech": ["broken brushwork", "strong chiaroscuro", "flat areas of colour", "linear perspective",
             "gold leaf", "visible impasto", "sfumato"],
    "symptom": ["chest pain", "persistent cough", "fever and chills", "shortness of breath", "joint swelling",
                "abdominal pain", "headache"],
    "gender": ["male", "female"],
    "topic": ["renewable energy", "online sales", "public transport", "coal power", "imports", "tourism"],
    "country": ["Brazil", "Canada", "Kenya", "Japan", "Norway", "Chile", "India", "Spain", "Egypt", "Peru"],
    "metric": ["revenue", "population", "average score", "market share", "rainfall", "export value"],
    "things": ["companies", "regions", "products", "schools", "cities", "teams", "stores"],
    "cloth": ["hat", "jacket", "scarf", "shirt", "dress", "raincoat"],
    "unit": ["million", "percent", "tons", "units"],
}
MOVEMENTS = ["Impressionism", "Baroque", "Renaissance", "Romanticism", "Cubism", "Expressionism", "Surrealism",
             "Art Nouveau"]
DIAGNOSES = ["pneumonia", "pulmonary embolism", "tuberculosis", "lung abscess", "pleural effusion", "sarcoidosis",
             "heart failure"]

# (family, stem, choice kind or None). {kind} or {kind:id}: same id, same value. Kinds: L letter
# (distinct in a text), n 2..40, d angle, m money, y year, p percent, or a WORDS list.
TEMPLATES = [
    ("geometry", "As shown in the figure, in triangle {L:1}{L:2}{L:3}, {L:1}{L:2} = {n:1}, {L:1}{L:3} = {n:2}, and "
     "angle {L:2}{L:1}{L:3} = {d}°. Point {L:4} is the midpoint of side {L:2}{L:3}. What is the length of segment "
     "{L:1}{L:4}?", "num"),
    ("geometry", "In the figure, {L:1}{L:2} is the diameter of circle O and point {L:3} lies on the circle. If angle "
     "{L:1}{L:2}{L:3} = {d}° and the radius of the circle is {n} cm, find the length of chord {L:2}{L:3}.", "num"),
    ("geometry", "As shown in the figure, line a is parallel to line b, and the right-angle vertex {L} of the "
     "triangle ruler lies on line b. If angle 1 = {d}°, then the degree of angle 2 is ()", "deg"),
    ("geometry", "In parallelogram {L:1}{L:2}{L:3}{L:4}, the diagonals intersect at point O. If {L:1}{L:3} = {n:1}, "
     "{L:2}{L:4} = {n:2} and {L:1}{L:2} = {n:3}, what's the perimeter of triangle O{L:3}{L:4}?", "num"),
    ("geometry", "A cone has a base radius of {n:1} cm and a slant height of {n:2} cm. When its lateral surface is "
     "unfolded into a sector, what is the central angle of the sector in degrees?", "deg"),
    ("geometry", "As shown, rectangle {L:1}{L:2}{L:3}{L:4} is folded along the line {L:1}{L:5} so that point {L:4} "
     "falls on point {L:6} on side {L:2}{L:3}. If {L:1}{L:2} = {n:1} and {L:2}{L:3} = {n:2}, find the length of "
     "{L:5}{L:3}.", "num"),
    ("chart", "What is the value of the {col} bar for {y} in the chart?", None),
    ("chart", "Which of the {things} had the highest {metric} in {y} according to the bar graph?", None),
    ("chart", "By how many percentage points did the share of {topic} change between {y:1} and {y:2}?", None),
    ("chart", "In the line chart, what's the difference between the {col:1} line and the {col:2} line in {y}?", None),
    ("chart", "Is the '{col:1}' segment of the pie chart larger than the '{col:2}' segment, given that {topic} "
     "accounts for {p} percent?", None),
    ("chart", "How many {things} in the chart have a {metric} above {n} {unit} in {y}?", None),
    ("mmmu", "A company purchased a machine on January 1, {y} for ${m:1}. The machine has an estimated useful life "
     "of {n} years and a salvage value of ${m:2}. Using the double-declining-balance method, what is the "
     "depreciation expense for the second year? <image 1>", "num"),
    ("mmmu", "<image 1> A block of mass {n:1} kg rests on a ramp inclined at {d}° with a coefficient of kinetic "
     "friction of 0.{n:2}. If the block is released from rest, how far does it slide in {n:3} seconds?", "num"),
    ("mmmu", "The patient in <image 1> is a {n:1}-year-old {gender} presenting with {symptom} for {n:2} days. "
     "Based on the chest radiograph, which of the following is the most likely diagnosis?", "diagnosis"),
    ("mmmu", "Consider the circuit in <image 1>. The resistors have values R1 = {n:1} ohms, R2 = {n:2} ohms and "
     "R3 = {n:3} ohms, and the battery supplies {n:4} V. What is the current through R2 in milliamperes?", "num"),
    ("mmmu", "A firm's demand curve is shown in <image 1>. If the price rises from ${n:1} to ${n:2} and the "
     "quantity demanded falls from {n:3} to {n:4} units, what is the price elasticity of demand using the "
     "midpoint method?", "num"),
    ("mmmu", "In the painting shown in <image 1>, made by {artist} around {y}, which artistic movement does the "
     "use of {tech} most clearly reflect?", "movement"),
    ("short", "Who painted the {art}?", None),
    ("short", "What breed is the {animal} on the {furn}?", None),
    ("short", "Read the number on the {col} jersey.", None),
    ("short", "What brand is the {col} {veh}?", None),
    ("short", "How many {objs} are on the {surf}?", None),
    ("short", "What does the sign above the {place} say?", None),
    ("hallucination", "Is there a {obj:1} {rel} the {obj:2} in this image? Please answer yes or no.", None),
    ("hallucination", "Describe the {col} {obj} on the left side of the image and what the {person} next to it "
     "is doing.", None),
    ("hallucination", "Does the image show {n} {objs} on the {surf}, or are there fewer than that?", None),
    ("hallucination", "What colour is the {obj:1} that the {person} is holding, and is it {rel} the {obj:2}?", None),
    ("hallucination", "Is the {person} in the image wearing a {col} {cloth} while standing near the {obj}?", None),
    ("hallucination", "Describe the scene around the {obj}: are there any {objs} or {persons} visible near the "
     "{place}?", None),
]
FAMILIES = ["geometry", "chart", "mmmu", "short", "hallucination"]
EVAL_SIBLINGS = [5, 10, 20, 40, 60]  # eval items per template, cycled over a half's templates

# Train rows per generic prompt, the same in both halves: the least used is in 30 rows.
GENERIC_ROWS = [30, 45, 70, 100, 150, 220, 300, 400]
GENERIC = ["Describe this image in detail.", "Which of the following is correct?", "What is shown in the image?",
           "What is in this picture?", "Please describe the image.",
           "Provide a detailed description of the given image.", "What can you see in this image?",
           "Which of the following options is correct?"]

BOILERPLATE_TEXT = [
    "Answer the question using a single word or phrase.",
    "Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.",
    "Answer with the option's letter from the given choices directly.",
    "First perform reasoning, then finally select the question from the choices in the following format: "
    "Answer: xxx.",
    "Please select the correct answer from the options above.",
]
HINTS = {
    True: "Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.",
    False: "Please answer the question requiring an integer answer and provide the final value, e.g., 1, 2, 3, "
           "at the end.",
}
EXTRA = ["Explain your answer briefly.", "Look at the picture carefully before answering.",
         "Think about it step by step and show your work."]

LISTED = ["nfkc", "case", "linewrap", "punct", "quotes", "choices", "frame", "hint", "boilerplate", "combo"]
BEYOND = ["extra", "typo"]  # not undone by the normaliser: matched by n-grams or not at all


# ---------------------------------------------------------------------------------------------
# Items and their rendering.

@dataclass
class Item:
    family: str
    template: int
    stem: str
    choices: list[str] | None
    style: int  # how the choices are written
    values: dict[str, str] = field(default_factory=dict)  # the slot values


def fill(stem: str, rng: random.Random, keep: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """The stem with its slots filled, and the slot values; `keep` fixes some slots (a sibling that
    keeps its template item's point labels)."""
    values: dict[str, str] = dict(keep or {})
    used_letters: set[str] = {v for k, v in values.items() if k.startswith("L")}
    position = itertools.count()

    def value(kind: str) -> str:
        if kind == "L":
            letter = rng.choice([c for c in string.ascii_uppercase if c not in used_letters and c != "O"])
            used_letters.add(letter)
            return letter
        if kind == "n":
            return str(rng.randint(2, 40))
        if kind == "d":
            return str(rng.randrange(15, 170, 5))
        if kind == "m":
            return f"{rng.randrange(1000, 90000, 500):,}"
        if kind == "y":
            return str(rng.randint(1990, 2023))
        if kind == "p":
            return str(rng.randint(5, 95))
        return rng.choice(WORDS[kind])

    def sub(match) -> str:
        kind, _, ident = match.group(1).partition(":")
        key = f"{kind}:{ident}" if ident else f"{kind}#{next(position)}"
        if key not in values:
            values[key] = value(kind)
        return values[key]

    return re.sub(r"\{(\w+(?::\w+)?)\}", sub, stem), values


def make_choices(kind: str | None, rng: random.Random) -> list[str] | None:
    if kind is None:
        return None
    if kind == "num":
        return [str(v) for v in rng.sample(range(2, 60), 4)]
    if kind == "deg":
        return [f"{v}°" for v in rng.sample(range(15, 170, 5), 4)]
    return rng.sample(DIAGNOSES if kind == "diagnosis" else MOVEMENTS, 4)


def render(item: Item, style: int | None = None) -> str:
    if not item.choices:
        return item.stem
    style = item.style if style is None else style
    letters = "ABCD"
    c = item.choices
    if style == 0:
        return item.stem + "\nChoices:\n" + "\n".join(f"({x}) {v}" for x, v in zip(letters, c))
    if style == 1:
        return item.stem + " " + " ".join(f"{x}. {v}" for x, v in zip(letters, c))
    if style == 2:
        return item.stem + "\n" + "\n".join(f"{x}: {v}" for x, v in zip(letters, c))
    if style == 3:
        return item.stem + "\nOptions: " + ", ".join(f"{x}) {v}" for x, v in zip(letters, c))
    return item.stem + " " + " ".join(f"({x}) {v}" for x, v in zip(letters, c))


STYLES = 5


def new_item(t: int, rng: random.Random, keep: dict[str, str] | None = None) -> Item:
    family, stem, kind = TEMPLATES[t]
    text, values = fill(stem, rng, keep)
    return Item(family, t, text, make_choices(kind, rng), rng.randrange(STYLES), values)


# ---------------------------------------------------------------------------------------------
# Perturbations: content first, then wrappers, then surface changes over the whole text.

def fullwidth(text: str, rng: random.Random) -> str:
    out = [chr(ord(ch) + 0xFEE0) if ch.isascii() and ch.isalnum() and rng.random() < 0.4 else ch for ch in text]
    return "".join(out).replace("fi", "\ufb01")


def punct(text: str, rng: random.Random) -> str:
    """Commas, full stops and question marks dropped, or stray punctuation added; a decimal point
    and the inside of an <image 1> tag are left alone (changing those changes the text)."""
    if rng.random() < 0.5:
        return re.sub(r"(?<![0-9])\.|\.(?![0-9])|[,?]", "", text)
    words = text.split(" ")
    spots = [i for i, w in enumerate(words) if "<" not in w]
    for i in rng.sample(spots, max(1, len(spots) // 6)):
        words[i] = words[i] + rng.choice([",", ";", " -", "...", " !"])
    return " ".join(words).replace("?", " ?!")


def curly(text: str, rng: random.Random) -> str:
    if "'" not in text and '"' not in text:  # quote a word (not inside an <image 1> tag)
        words = text.split(" ")
        i = rng.choice([i for i, w in enumerate(words) if "<" not in w and ">" not in w])
        words[i] = f'"{words[i]}"'
        text = " ".join(words)
    out, double_open = [], True
    for ch in text:
        if ch == '"':
            out.append("\u201c" if double_open else "\u201d")
            double_open = not double_open
        elif ch == "'":
            out.append("\u2019")
        else:
            out.append(ch)
    return "".join(out)


def case(text: str, rng: random.Random) -> str:
    how = rng.randrange(3)
    return text.upper() if how == 0 else text.lower() if how == 1 else text.swapcase()


def linewrap(text: str, rng: random.Random) -> str:
    out = []
    for ch in text:
        if ch == " " and rng.random() < 0.25:
            out.append(rng.choice(["\n", "\n\n", " \n ", "\t", "   "]))
        else:
            out.append(ch)
    return "".join(out)


def typo(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    long = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    if not long:
        return text + " x"
    i = rng.choice(long)
    w = words[i]
    k = rng.randrange(1, len(w) - 1)
    words[i] = w[:k] + w[k + 1:]
    return " ".join(words)


def perturb(item: Item, kinds: list[str], rng: random.Random) -> str:
    style = item.style
    if "choices" in kinds and item.choices:
        style = rng.choice([s for s in range(STYLES) if s != item.style])
    text = render(item, style)
    for kind, fn in (("punct", punct), ("quotes", curly), ("typo", typo)):
        if kind in kinds:
            text = fn(text, rng)
    if "extra" in kinds:
        text = f"{text} {rng.choice(EXTRA)}" if rng.random() < 0.5 else f"{rng.choice(EXTRA)} {text}"
    if "hint" in kinds:
        text = f"Hint: {HINTS[bool(item.choices)]}\nQuestion: {text}"
    if "boilerplate" in kinds:
        text = f"{text}\n{rng.choice(BOILERPLATE_TEXT)}"
    if "frame" in kinds:
        images = "<image>\n" * rng.choice([0, 1, 1, 2])
        step = f"Step 1: Look at the figure. The value is {rng.randint(1, 99)}."
        text = f"### Question:\n{images}{text}\n\n### Solution Process:\n{step}"
    for kind, fn in (("case", case), ("nfkc", fullwidth), ("linewrap", linewrap)):
        if kind in kinds:
            text = fn(text, rng)
    return text


def choose_kinds(name: str, item: Item, rng: random.Random) -> list[str]:
    if name != "combo":
        return [name]
    pool = [k for k in LISTED if k != "combo" and (k != "choices" or item.choices)]
    return rng.sample(pool, rng.randint(2, 4))


# ---------------------------------------------------------------------------------------------
# One half of the quality set.

@dataclass
class QualitySet:
    train: pa.Table
    evals: pa.Table
    truth: set[tuple[str, str]]
    train_kind: dict[str, str]  # copy / sibling / unrelated / generic
    train_family: dict[str, str]
    train_perturbation: dict[str, str]
    eval_family: dict[str, str]
    generic_eval: set[str] = field(default_factory=set)


def word_salad(rng: random.Random) -> str:
    pool = [w for words in WORDS.values() for w in words] + (
        "the of a is in what which how many and to on with figure image chart value length angle").split()
    return " ".join(rng.choice(pool) for _ in range(rng.randint(8, 60))).capitalize() + "?"


def build_half(half: int, seed: int) -> QualitySet:
    rng = random.Random(seed)
    templates = [t for t in range(len(TEMPLATES)) if t % 2 == half]
    eval_rows, train_rows = [], []  # (dataset, key, text)
    truth, kind, fam, pert, efam, generic_eval = set(), {}, {}, {}, {}, set()
    tkey = itertools.count()
    ekey = itertools.count()

    def add_train(text: str, k: str, family: str, p: str = "", rollouts: int = 1) -> list[str]:
        keys = []
        for _ in range(rollouts):
            key = f"t{half}-{next(tkey):06d}"
            train_rows.append((rng.choice(["train_a", "train_b"]), key, text))
            kind[key], fam[key], pert[key] = k, family, p
            keys.append(key)
        return keys

    def rollouts() -> int:  # a training question is repeated across rollouts, ~3 times on average
        return rng.choices([1, 2, 3, 4, 6, 8], weights=[30, 20, 20, 15, 10, 5])[0]

    names = LISTED + BEYOND
    order = itertools.cycle(names)
    for i, t in enumerate(templates):
        count = EVAL_SIBLINGS[i % len(EVAL_SIBLINGS)]
        items, seen = [], set()
        for _ in range(50 * count):  # a template with few slot values has fewer items
            item = new_item(t, rng)
            norm = normalise([render(item)])[0]
            if norm not in seen:
                seen.add(norm)
                items.append(item)
            if len(items) == count:
                break
        stems = {normalise([render(item, 0)])[0] for item in items}
        for item in items:
            key = f"e{half}-{next(ekey):05d}"
            text = render(item)
            if rng.random() < 0.2:  # eval texts carry instructions of their own, sometimes
                text = f"{text}\n{rng.choice(BOILERPLATE_TEXT)}"
            eval_rows.append((rng.choice(["bench_x", "bench_y"]), key, text))
            efam[key] = item.family
            for _ in range(2):  # two copies, two perturbations
                name = next(order)
                if name == "choices" and not item.choices:
                    name = next(order)
                text = perturb(item, choose_kinds(name, item, rng), rng)
                for tk in add_train(text, "copy", item.family, name, rollouts()):
                    truth.add((tk, key))
            for _ in range(2):  # two siblings: the same template, other values, no eval item
                for _ in range(50):
                    # Half the siblings keep the point labels of an eval item: the same figure, other numbers.
                    base = rng.choice(items).values
                    keep = {k: v for k, v in base.items() if k.startswith("L")} if rng.random() < 0.5 else None
                    sib = new_item(t, rng, keep)
                    if normalise([render(sib, 0)])[0] not in stems:
                        break
                else:
                    continue
                kinds = [rng.choice(LISTED[:-1])] if rng.random() < 0.5 else []
                if kinds == ["choices"] and not sib.choices:
                    kinds = []
                add_train(perturb(sib, kinds, rng), "sibling", sib.family, "", rollouts())
    for _ in range(2000):
        add_train(word_salad(rng), "unrelated", "unrelated")
    for g, count in zip(GENERIC, GENERIC_ROWS):
        for _ in range(rng.randint(1, 2)):
            key = f"e{half}-{next(ekey):05d}"
            eval_rows.append((rng.choice(["bench_x", "bench_y"]), key, g))
            efam[key] = "generic"
            generic_eval.add(key)
        fake = Item("generic", -1, g, None, 0)
        for _ in range(count):
            kinds = rng.sample(["case", "linewrap", "punct", "quotes", "frame", "boilerplate", "nfkc"],
                               rng.randint(0, 2))
            add_train(perturb(fake, kinds, rng), "generic", "generic")
    rng.shuffle(train_rows)

    def table(rows):
        return pa.Table.from_pylist([{"dataset": d, "key": k, "text": t} for d, k, t in rows],
                                    schema=RECORD_TEXT_SCHEMA)

    return QualitySet(table(train_rows), table(eval_rows), truth, kind, fam, pert, efam, generic_eval)


# ---------------------------------------------------------------------------------------------
# Scoring.

def select(candidates: pl.DataFrame, min_overlap: float, margin: float) -> pl.DataFrame:
    """What text_leaks keeps at (min_overlap, margin), from its output at min_overlap 0, margin 1."""
    kept = candidates.filter(pl.col("text_overlap") >= min_overlap)
    return kept.filter(pl.col("text_overlap") >= pl.col("text_overlap").max().over("train_key") - margin)


def score(pairs: pl.DataFrame, qs: QualitySet) -> dict:
    found = set(zip(pairs["train_key"].to_list(), pairs["eval_key"].to_list()))
    right = found & qs.truth
    generic = sum(1 for tk, ek in found if qs.train_kind[tk] == "generic" or ek in qs.generic_eval)
    precision = len(right) / len(found) if found else 1.0
    recall = len(right) / len(qs.truth) if qs.truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "reported": len(found), "right": len(right),
            "generic": generic, "found": found}


def breakdown(found: set, qs: QualitySet, by: str) -> dict[str, tuple[int, int, int, int]]:
    """Per group: (right, reported, planted, found planted), a reported pair grouped by its train row."""
    group = (lambda tk: qs.train_perturbation[tk]) if by == "perturbation" else (lambda tk: qs.train_family[tk])
    reported, right, planted, hit = Counter(), Counter(), Counter(), Counter()
    for tk, ek in found:
        if by == "perturbation" and qs.train_kind[tk] != "copy":
            continue
        reported[group(tk)] += 1
        right[group(tk)] += (tk, ek) in qs.truth
    for tk, ek in qs.truth:
        planted[group(tk)] += 1
        hit[group(tk)] += (tk, ek) in found
    return {g: (right[g], reported[g], planted[g], hit[g]) for g in sorted(set(planted) | set(reported))}


def named_right(found: set, qs: QualitySet) -> tuple[int, int, int]:
    """Copy rows reported with any eval record: (those naming their source, those naming only
    their source, all of them)."""
    per_train = defaultdict(set)
    for tk, ek in found:
        per_train[tk].add(ek)
    source = {tk: ek for tk, ek in qs.truth}
    found_copies = [tk for tk in source if tk in per_train]
    return (sum(source[tk] in per_train[tk] for tk in found_copies),
            sum(per_train[tk] == {source[tk]} for tk in found_copies), len(found_copies))


def report(title: str, qs: QualitySet, pairs: pl.DataFrame) -> dict:
    s = score(pairs, qs)
    with_source, only_source, found_copies = named_right(s["found"], qs)
    siblings = sum(1 for tk, _ in s["found"] if qs.train_kind[tk] == "sibling")
    print(f"  {title}: precision {s['precision']:.4f}  recall {s['recall']:.4f}  F1 {s['f1']:.4f}  "
          f"({s['right']:,} right of {s['reported']:,} reported, {len(qs.truth):,} planted); "
          f"generic prompts reported: {s['generic']}; sibling rows reported: {siblings}; "
          f"copy rows reported: {found_copies:,}, naming their source {with_source:,}, only their source "
          f"{only_source:,}")
    for by in ("family", "perturbation"):
        cells = []
        for g, (right, reported, planted, hit) in breakdown(s["found"], qs, by).items():
            p = f"{right / reported:.3f}" if reported else "  -  "
            r = f"{hit / planted:.3f}" if planted else "  -  "
            cells.append(f"{g} P {p} R {r}")
        print(f"    per {by}: " + "; ".join(cells))
    listed = {p for p in qs.truth if qs.train_perturbation[p[0]] in LISTED}
    s["recall_listed"] = len(listed & s["found"]) / len(listed)
    beyond = qs.truth - listed
    print(f"    recall: listed perturbations {s['recall_listed']:.4f} ({len(listed):,} pairs); beyond the normaliser "
          f"(extra sentence, typo) {len(beyond & s['found']) / len(beyond):.4f} ({len(beyond):,} pairs)")
    s["named"] = (with_source, found_copies)
    return s


def quality() -> TextMatchSettings:
    print("1. planted-leak quality: five families x six templates, halves by template (even: tuning, odd: held back)")
    t0 = time.perf_counter()
    tuning, held = build_half(0, seed=101), build_half(1, seed=202)
    for name, qs in (("tuning", tuning), ("held back", held)):
        kinds = Counter(qs.train_kind.values())
        print(f"  {name}: {qs.evals.num_rows:,} eval texts, {qs.train.num_rows:,} train rows "
              f"({', '.join(f'{k} {v:,}' for k, v in sorted(kinds.items()))}), {len(qs.truth):,} planted pairs")
    print(f"  generated in {time.perf_counter() - t0:.1f}s")

    t0 = time.perf_counter()
    results = []  # (recall, precision, generic, ngram, stock, min_overlap, margin)
    for ngram, stock in itertools.product(GRID_NGRAM, GRID_STOCK):
        loose = TextMatchSettings(ngram=ngram, min_overlap=0.0, stock_records=stock, sibling_margin=1.0)
        candidates = pl.from_arrow(text_leaks(tuning.train, tuning.evals, loose))
        for mo, margin in itertools.product(GRID_MIN_OVERLAP, GRID_MARGIN):
            s = score(select(candidates, mo, margin), tuning)
            results.append((s["recall"], s["precision"], s["generic"], ngram, stock, mo, margin))
    print(f"  grid: {len(results)} settings on the tuning half in {time.perf_counter() - t0:.1f}s "
          f"(ngram {GRID_NGRAM}, stock_records {GRID_STOCK}, min_overlap {GRID_MIN_OVERLAP}, margin {GRID_MARGIN})")
    allowed = [r for r in results if r[2] == 0 and r[1] >= TUNING_PRECISION]
    best = max(r[0] for r in allowed)
    tied = {r[3:]: r for r in allowed if r[0] >= best - RECALL_TOLERANCE}
    grids = (GRID_NGRAM, GRID_STOCK, GRID_MIN_OVERLAP, GRID_MARGIN)

    def tied_neighbours(setting) -> int:
        index = [grid.index(v) for grid, v in zip(grids, setting)]
        count = 0
        for step in itertools.product((-1, 0, 1), repeat=4):
            near = [i + d for i, d in zip(index, step)]
            if any(step) and all(0 <= i < len(g) for i, g in zip(near, grids)):
                count += tuple(g[i] for g, i in zip(grids, near)) in tied
        return count

    most = max(tied_neighbours(k) for k in tied)
    central = sorted(k for k in tied if tied_neighbours(k) == most)
    centre = central[len(central) // 2]  # equally central: the middle one
    ngram, stock, mo, margin = centre
    chosen = TextMatchSettings(ngram=ngram, min_overlap=mo, stock_records=stock, sibling_margin=margin)
    print(f"  best tuning recall at precision >= {TUNING_PRECISION} and no generic prompt: {best:.4f}; "
          f"{len(tied)} settings within {RECALL_TOLERANCE} of it (tied); the chosen one has "
          f"{tied_neighbours(centre)} of its 80 grid neighbours tied")
    for name, grid, pos in zip(("ngram", "stock_records", "min_overlap", "sibling_margin"), grids, range(4)):
        print(f"    tied {name}: " + ", ".join(f"{v} ({sum(1 for k in tied if k[pos] == v)})"
                                          for v in grid if any(k[pos] == v for k in tied)))
    by_pair: dict = {}
    for r in allowed:
        by_pair[(r[3], r[4])] = max(by_pair.get((r[3], r[4]), 0.0), r[0])
    print(f"  best tuning recall per (ngram, stock_records) at precision >= {TUNING_PRECISION} "
          "('-': none without a generic prompt):")
    for n in GRID_NGRAM:
        print(f"    ngram {n:>2}: " + "  ".join(
            f"s={s:<3} " + (f"{by_pair[(n, s)]:.4f}" if (n, s) in by_pair else "  -   ") for s in GRID_STOCK))
    here = {(r[5], r[6]): r for r in results if r[3:5] == (ngram, stock)}
    print(f"  at ngram {ngram}, stock_records {stock}, margin {margin}: tuning precision / recall per min_overlap: "
          + ", ".join(f"{m}: {here[(m, margin)][1]:.3f}/{here[(m, margin)][0]:.3f}" for m in GRID_MIN_OVERLAP))
    print(f"  ... at min_overlap {mo}, per margin: "
          + ", ".join(f"{g}: {here[(mo, g)][1]:.3f}/{here[(mo, g)][0]:.3f}" for g in GRID_MARGIN))
    print(f"  chosen: {chosen}")
    default = TextMatchSettings()
    print(f"  TextMatchSettings() defaults {'ARE' if default == chosen else 'are NOT'} the tuning choice "
          f"(defaults: {default})")

    results_by_half = {}
    for name, qs in (("tuning", tuning), ("held back", held)):
        pairs = pl.from_arrow(text_leaks(qs.train, qs.evals, chosen))
        results_by_half[name] = report(name, qs, pairs)
    # The grid scored post-filtered candidates; the direct call must agree with that filter.
    loose = replace(chosen, min_overlap=0.0, sibling_margin=1.0)
    filtered = select(pl.from_arrow(text_leaks(held.train, held.evals, loose)), chosen.min_overlap,
                      chosen.sibling_margin)
    direct = pl.from_arrow(text_leaks(held.train, held.evals, chosen))
    same = set(zip(filtered["train_key"], filtered["eval_key"])) == set(zip(direct["train_key"], direct["eval_key"]))
    print(f"  grid filter == direct call on the held-back half: {'yes' if same else 'NO'}")
    h = results_by_half["held back"]
    ok = (h["recall_listed"] >= GOAL_RECALL and h["precision"] >= GOAL_PRECISION and h["generic"] == 0
          and h["named"][0] == h["named"][1])
    print(f"  goal (held back: recall of the listed perturbations >= {GOAL_RECALL}, precision >= {GOAL_PRECISION}, "
          f"no generic prompt, every reported copy row names its source): {'MET' if ok else 'NOT MET'}")
    return chosen


# ---------------------------------------------------------------------------------------------
# Speed and memory.

def speed_data(n_train: int, n_eval: int, seed: int = 7):
    """Texts of 10-120 words: an optional stock phrase, Zipf-drawn words, and in half the rows one of
    3,000 number templates; 300 eval texts planted in train under listed perturbations."""
    import numpy as np

    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    letters = np.array(list(string.ascii_lowercase))
    vocab = ["".join(letters[rng.integers(0, 26, rng.integers(2, 10))]) for _ in range(50_000)]
    vocab = np.array(vocab)
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    weights /= weights.sum()
    stock = [" ".join(rng.choice(vocab[:2000], rng.integers(5, 13))).capitalize() + "." for _ in range(200)]
    stock_p = 1.0 / np.arange(1, 201)
    stock_p /= stock_p.sum()
    templates = []
    for _ in range(3000):
        words = list(rng.choice(vocab[:20000], rng.integers(8, 26)))
        for pos in rng.choice(len(words), rng.integers(2, 5), replace=False):
            words[pos] = "{}"
        templates.append(" ".join(words))

    stock_words = [len(p.split()) for p in stock]
    template_words = [len(t.split()) for t in templates]

    def texts(m: int) -> list[str]:
        lengths = rng.integers(10, 121, m)
        use_stock = rng.random(m) < 0.3
        stock_idx = rng.choice(200, m, p=stock_p)
        use_template = rng.random(m) < 0.5
        template_idx = rng.integers(0, 3000, m)
        body = vocab[rng.choice(len(vocab), int(lengths.sum()), p=weights)]
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        numbers = rng.integers(1, 100, (m, 4))
        out = []
        for i in range(m):
            parts = []
            budget = int(lengths[i])  # words in all; what the shared parts leave goes to the body
            if use_stock[i] and stock_words[stock_idx[i]] + 3 <= budget:
                parts.append(stock[stock_idx[i]])
                budget -= stock_words[stock_idx[i]]
            t = templates[template_idx[i]]
            if use_template[i] and template_words[template_idx[i]] + 3 <= budget:
                parts.append(t.format(*numbers[i][: t.count("{}")]))
                budget -= template_words[template_idx[i]]
            parts.insert(len(parts) // 2, " ".join(body[offsets[i]: offsets[i] + budget]))
            out.append(" ".join(parts) + "?")
        return out

    train, evals = texts(n_train), texts(n_eval)
    planted = []
    slots = rng.choice(n_train, 300, replace=False)
    for k, slot in enumerate(slots):
        e = int(rng.integers(0, n_eval))
        item = Item("speed", -1, evals[e], None, 0)
        train[slot] = perturb(item, choose_kinds(LISTED[k % len(LISTED)], item, prng), prng)
        planted.append((f"t{slot}", f"e{e}"))
    return train, evals, planted


def write_speed_data(folder: str, n_train: int, n_eval: int) -> None:
    """Run as its own process, so that the measured process starts small."""
    t0 = time.perf_counter()
    train, evals, planted = speed_data(n_train, n_eval)
    lengths = [len(t.split()) for t in train[:20000]]

    def write(name, texts, prefix):
        pq.write_table(pa.table({"dataset": [f"{prefix}set"] * len(texts),
                                 "key": [f"{prefix}{i}" for i in range(len(texts))], "text": texts},
                                schema=RECORD_TEXT_SCHEMA), Path(folder) / name)

    write("train.parquet", train, "t")
    write("evals.parquet", evals, "e")
    (Path(folder) / "planted.json").write_text(json.dumps(planted))
    print(json.dumps({"seconds": time.perf_counter() - t0, "mean_words": sum(lengths) / len(lengths),
                      "min_words": min(lengths), "max_words": max(lengths)}))


def rss_mb(field: str = "VmHWM") -> float:
    """This process's peak (VmHWM) or current (VmRSS) resident size. VmHWM starts afresh at exec;
    ru_maxrss, the fallback, keeps the parent's size at fork."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def speed_child(folder: str) -> None:
    train = pq.read_table(Path(folder) / "train.parquet")
    evals = pq.read_table(Path(folder) / "evals.parquet")
    pa.default_memory_pool().release_unused()  # the reader's buffers, not text_leaks' business
    planted = {tuple(p) for p in json.loads((Path(folder) / "planted.json").read_text())}
    text_leaks(train.slice(0, 2000), evals.slice(0, 500))  # first-call costs, outside the clock
    before, resident = rss_mb(), rss_mb("VmRSS")
    start = time.perf_counter()
    out = text_leaks(train, evals)
    seconds = time.perf_counter() - start
    peak = rss_mb()
    found = set(zip(out.column("train_key").to_pylist(), out.column("eval_key").to_pylist()))
    print(json.dumps({"seconds": seconds, "pairs": out.num_rows, "planted": len(planted),
                      "planted_found": len(planted & found), "rss_before_mb": before, "resident_mb": resident,
                      "peak_rss_mb": peak}))


def run_child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode:
        print(out.stderr)
        raise SystemExit(f"child {args[0]} failed")
    return json.loads(out.stdout.strip().splitlines()[-1])


def speed(quick: bool) -> None:
    n_train, n_eval = (40_000, 1_000) if quick else (400_000, 10_000)
    print(f"\n2. speed and memory: {n_train:,} train texts x {n_eval:,} eval texts, default settings, 2 cores")
    with tempfile.TemporaryDirectory() as folder:
        made = run_child("--write-speed-data", folder, str(n_train), str(n_eval))
        print(f"  generated in {made['seconds']:.1f}s (own process); words per text (first 20k): mean "
              f"{made['mean_words']:.0f}, min {made['min_words']}, max {made['max_words']}")
        res = run_child("--speed-child", folder)
    peak = res["peak_rss_mb"]
    print(f"  text_leaks: {res['seconds']:.1f}s, {res['pairs']:,} pairs reported, planted copies found "
          f"{res['planted_found']}/{res['planted']}")
    print(f"  peak RSS of the measuring process: {peak:.0f} MB (resident when the call began, imports and "
          f"inputs: {res['resident_mb']:.0f} MB; peak before it, reading the Parquet files: "
          f"{res['rss_before_mb']:.0f} MB)")
    print(f"  goal: <= {GOAL_SECONDS:.0f}s {'MET' if res['seconds'] <= GOAL_SECONDS else 'NOT MET'}; "
          f"< {GOAL_RSS_MB / 1024:.1f} GB {'MET' if peak < GOAL_RSS_MB else 'NOT MET'}")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--speed-child":
        speed_child(sys.argv[2])
        return
    if len(sys.argv) == 5 and sys.argv[1] == "--write-speed-data":
        write_speed_data(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40k x 1k for the speed part")
    args = parser.parse_args()
    quality()
    speed(args.quick)


if __name__ == "__main__":
    main()
