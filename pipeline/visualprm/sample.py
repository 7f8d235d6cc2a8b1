"""The embedded offline sample of VisualPRM400K: a small, deterministic miniature in the upstream forms.

`write_visualprm_sample(root)` writes the parquet form of the Hugging Face dataset
**mm-eval/VisualPRM400K**:

    root/mm-eval/VisualPRM400K/data/train-00000-of-00001.parquet
        id        string
        media     list<struct<bytes: binary, path: string>>   (HF `Sequence(Image())`)
        messages  string holding JSON

`write_internvl_jsonl_sample(root)` writes the upstream InternVL training form
(OpenGVLab/VisualPRM400K, as InternVL's `visualprm_data_pipeline_postprocess.py` leaves it):

    root/OpenGVLab/VisualPRM400K/annotations/{source}_prm.jsonl   one file per source dataset
    root/OpenGVLab/VisualPRM400K/images/{path}                    about half of the images, loose
    root/OpenGVLab/VisualPRM400K/images.zip                       the other half, entries {path}

Everything is generated here (no upstream bytes are copied): questions, reasoning steps and images
only *look like* the real data. Output is identical byte for byte on every call, in every process
and directory: one seeded `random.Random` walked in a fixed order, images encoded by Pillow with
fixed settings, the parquet written by pyarrow with fixed settings (zstd level 3, one row group,
dictionary encoding, no time-dependent metadata), zip entries sorted with fixed timestamps. Files
are written atomically (temporary file + os.replace) and left alone, mtime included, when their
bytes are already right.

The parquet sample (`VisualPRMSampleFacts` / `ExpectedSample` carry the ground truth):

- About 240 rows: 60 (image, question) groups of 3-5 rollouts each sharing image and question, with
  different step texts and labels per rollout. Sources MathV360K, geoqa+, ai2d, chartqa,
  CLEVR_math, nlvr2, scienceqa and iconqa; the source is the first component of the image path
  (`MathV360K/data_images/01234.jpg`, `geoqa+/images/4567.png`, `nlvr2/train/train-123-0-img0.png`).
  nlvr2 rows carry two images. NO_FOLDER_IMAGE_PATH (a bare file name, source None) belongs to a
  single one-rollout group.
- ids are `"{source}_{group:05d}_{rollout}"` (`unsourced_...` for the folderless row), all unique;
  rows are shuffled, so the rollouts of one group are not adjacent.
- 1-16 steps per sample (ONE_STEP_ID has a single step, SIXTEEN_STEP_ID sixteen), about 10% of all
  steps negative. Steps are sentences with numbers, some LaTeX (`\\frac{3}{8}`, `^\\circ`), some span
  several lines (single newlines, never a blank line, no surrounding whitespace); the last step of
  a complete rollout reads "... Final answer: X". Labels are cumulative: once a step is "-", every
  later step is "-". Some wrong rollouts stop right at the first "-" (upstream's early stop), the
  others go on with more "-" steps; most rollouts are all "+".
- `messages` is `json.dumps(..., ensure_ascii=False)` of one of three shapes:
  * `internvl` (~80%): `[{"from": "system", "value": PRM_SYSTEM_PROMPT}, {"from": "human", "value":
    "### Question:\\n<image>\\n{question}\\n\\n### Solution Process:\\n{step_1}"}, {"from": "gpt",
    "value": "+"}, {"from": "human", "value": "{step_2}"}, {"from": "gpt", "value": "-"}, ...]`;
    two `<image>\\n` lines for nlvr2; a few rows (NO_IMAGE_TAG_IDS) have no `<image>` line at all,
    as upstream `item2conv_prm` writes it.
  * `chat` (~12%): the same turns with `role`/`content` keys (system/user/assistant); in a few rows
    (PARTS_CONTENT_IDS) every `content` is an OpenAI-style list of parts:
    `[{"type": "image"}, {"type": "text", "text": "### Question:\\n..."}]` for the first user turn
    (one image part per image, no `<image>` tag in the text), `[{"type": "text", "text": "+"}]`
    for labels.
  * `raw` (~8%): the VisualPRM400K-v1.1-Raw object `{"image": path (a list of 2 for nlvr2),
    "question", "answer", "response": steps joined by blank lines, "steps_with_score": [{"step",
    "score", "num_mc_correct", "num_mc_total"}], "num_mc_sequences": 16}`; score =
    num_mc_correct / num_mc_total, label "+" iff score > 0.0. A wrong rollout that goes on after
    its first 0-score step (score 0.0, 0 of 16) carries num_mc_total == 0 and score 0.0 on the
    later steps. One "+" step scores exactly 1/16 (MC_ONE_IN_SIXTEEN_ID).
- `media`: roughly 40% of the rows embed image bytes (`{"bytes": ..., "path": p}`), the rest are
  path-only (`{"bytes": None, "path": p}`), decided per group: every rollout of an embedded group
  embeds the identical bytes. JPEG for `.jpg` paths, PNG for `.png`; 64-160 px; drawn per source
  (photos with grain, geometry diagrams, bar charts, CLEVR-like scenes, food webs, icon grids).
- Planted image faults, all in embedded groups: EXACT_DUPLICATE_PATHS (the same bytes under two
  paths of two groups), NEAR_DUPLICATE_PATHS (the second is the first decoded, shrunk by a few
  pixels and re-encoded), CROPPED_COPY (CROP_FRACTION cut off every side, re-encoded),
  BRIGHTENED_COPY (brightened by BRIGHTEN_FACTOR, re-encoded), each copy under a path of another
  group; CORRUPT_IMAGE_PATH (a JPEG cut inside its Huffman tables: Pillow cannot decode it, not
  even with ImageFile.LOAD_TRUNCATED_IMAGES).
- Cross-dataset contamination: CONTAMINATED[0], the embedded image of one MathV360K group, is the
  MMRB2 sample's picture CONTAMINATED[1] (rendered by pipeline.mmrb2.sample.sample_image),
  resized to CONTAMINATED_SCALE and re-encoded at another JPEG quality.
- Unrelated look-alikes: LOOKALIKE_PAIRS, two embedded images each, the second drawn from the
  first's template with other content (a geometry triangle with its apex moved, a bar chart with
  two bars changed): candidates of the dedupe search that verification must keep apart.
- Perceptual hashes (imagehash.phash, 64 bits): every pair of PLANTED_NEAR_PAIRS and CONTAMINATED
  is within Hamming distance 6 (the exact copy 0); any other two decodable images among the
  embedded ones and the MMRB2 sample's are 14 or more apart (the look-alikes too: they are
  candidates by a region hash).
- One exact duplicate sample: DUPLICATE_SAMPLE_IDS are two rollouts of one embedded group with the
  same steps and labels (the second later in the file); every other two rollouts of a group differ
  in their steps.
- Malformed rows (`facts.malformed`, id -> fault; not in `expected`), one fault each, the rest of
  the row well-formed: messages that are not valid JSON (cut off), a label "maybe", a last step
  without a label (the conversation ends with a human turn), and two JSON values of unrecognised
  shape (an object `{"foo": 1}`, a list of strings).

The InternVL jsonl form:

- A subset of the same rollouts (the groups of EXACT_DUPLICATE_PATHS, the first group of every
  source, then further groups in file order up to JSONL_MIN_ROWS = 40 lines; 41 lines), rendered as upstream `item2conv_prm` does: `{"id": -1, "image":
  path or [path, path], "conversations": [system, human "### Question:\\n{question}\\n\\n###
  Solution Process:\\n{step_1}", gpt "+", ...]}` with no `<image>` tag, `json.dumps` with its
  default ASCII escapes, lines sorted by `str(image)` (upstream `save_outputs`), one trailing
  newline per line.
- Upstream writes `"id": -1` on every line, so a sample is named **`"{source}_prm:{line}"`** — the
  file stem and the 1-based line number in that file — and its source is the stem without `_prm`.
- Images: the distinct referenced paths, sorted, alternate between loose files and zip entries;
  JSONL_UNRESOLVED_IMAGE is referenced but written nowhere. The corrupt image's group is not in
  the subset. Facts: `embedded_rows == 0`, `path_only_rows == rows`, `corrupt_image_path is None`.
"""

from __future__ import annotations

import io
import json
import random
import zipfile
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageChops, ImageDraw, ImageEnhance, ImageFont

from pipeline.mmrb2 import sample as mmrb2_sample
from pipeline.sources.base import write_if_changed
from pipeline.visualprm.export import PRM_SYSTEM_PROMPT

VISUALPRM_SAMPLE_VERSION = "1"
PARQUET_RELPATH = "mm-eval/VisualPRM400K/data/train-00000-of-00001.parquet"
JSONL_ROOT = "OpenGVLab/VisualPRM400K"
JSONL_ANNOTATION_DIR = f"{JSONL_ROOT}/annotations"
JSONL_IMAGE_DIR = f"{JSONL_ROOT}/images"
JSONL_IMAGE_ZIP = f"{JSONL_ROOT}/images.zip"

SEED = 400_000  # change it and every pinned constant below changes
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)
JPEG_QUALITY = 82
NUM_MC_SEQUENCES = 16

# InternVL's PRM system prompt (PRM_SYSTEM_PROMPT, imported above) opens every conversation.

# Pinned by the seed; write_visualprm_sample checks that the plan still puts them there.
EXACT_DUPLICATE_PATHS = ("MathV360K/data_images/34384.jpg", "MathV360K/data_images/16422.jpg")
NEAR_DUPLICATE_PATHS = ("geoqa+/images/5627.png", "geoqa+/images/1508.png")
CORRUPT_IMAGE_PATH = "MathV360K/data_images/00958.jpg"
NO_FOLDER_IMAGE_PATH = "46716.jpg"
JSONL_UNRESOLVED_IMAGE = "scienceqa/images/train/18027/image.png"
ONE_STEP_ID = "CLEVR_math_00013_0"  # a complete solution in a single step
SIXTEEN_STEP_ID = "chartqa_00004_0"
MC_ONE_IN_SIXTEEN_ID = "CLEVR_math_00041_3"  # raw row: the step before its first "-" scores 1/16
NO_IMAGE_TAG_IDS = ("MathV360K_00015_2", "MathV360K_00040_3", "iconqa_00002_1", "scienceqa_00009_1")
PARTS_CONTENT_IDS = ("CLEVR_math_00045_0", "ai2d_00036_3", "iconqa_00029_2", "nlvr2_00032_1")
MALFORMED_IDS = (
    "CLEVR_math_00047_4",  # last step unlabelled
    "chartqa_00033_3",  # a list of strings
    "geoqa+_00028_4",  # {"foo": 1}
    "iconqa_00002_4",  # label "maybe"
    "scienceqa_00057_4",  # not valid JSON
)
# Near-duplicates for a perceptual-hash search (imagehash.phash, 64 bits): each planted pair is within
# Hamming distance 6 (the exact copy 0); any other two decodable images of this sample and the MMRB2
# sample (pipeline.mmrb2.sample) are 14 or more apart.
CROPPED_COPY = ("CLEVR_math/images/CLEVR_train_048334.png", "CLEVR_math/images/CLEVR_train_020057.png")
BRIGHTENED_COPY = ("CLEVR_math/images/CLEVR_train_042207.png", "CLEVR_math/images/CLEVR_train_031570.png")
PLANTED_NEAR_PAIRS = (EXACT_DUPLICATE_PATHS, NEAR_DUPLICATE_PATHS, CROPPED_COPY, BRIGHTENED_COPY)
# An embedded picture that is a near-copy of an MMRB2 sample response image (cross-dataset contamination).
CONTAMINATED = (
    "MathV360K/data_images/34505.jpg",
    "muirbench_14_gpt-4.1_1662_GPT5_Gemini_SketchpadAgent_1660_0.jpg",
)
# Two rows (kept one first in file order) with the same image, question, steps and labels.
DUPLICATE_SAMPLE_IDS = ("chartqa_00007_1", "chartqa_00007_3")
# Unrelated look-alikes (embedded, in other groups): the second of each pair is the first's
# template with other content (a triangle with its apex moved LOOKALIKE_APEX_SHIFT px; a bar
# chart with its first bar LOOKALIKE_BAR_CHANGE lower and its fourth that much higher). Each pair
# is a candidate of the dedupe search (within 8 bits on one of its routes) that verification must
# keep apart.
LOOKALIKE_PAIRS = (
    ("geoqa+/images/10579.png", "geoqa+/images/11111.png"),
    ("chartqa/train/png/two_col_38228.png", "chartqa/train/png/two_col_15672.png"),
)
LOOKALIKE_APEX_SHIFT = 12
LOOKALIKE_BAR_CHANGE = 20
CROP_FRACTION = 0.04  # cut off each side of the cropped copy
BRIGHTEN_FACTOR = 1.15
CONTAMINATED_SCALE = 0.9


@dataclass(frozen=True)
class ExpectedSample:
    """The ground truth of one well-formed row."""

    sample_id: str
    source: str | None
    question: str
    image_refs: tuple[str, ...]
    steps: tuple[str, ...]
    labels: tuple[str, ...]
    mc_scores: tuple[float | None, ...]  # raw rows: the step scores; other formats: None per step
    message_format: str  # "internvl" | "chat" | "raw"


@dataclass(frozen=True)
class VisualPRMSampleFacts:
    rows: int  # all rows, malformed ones included
    expected: tuple[ExpectedSample, ...]  # every well-formed row, in file order
    malformed: dict[str, str]  # id -> short description of the planted fault
    formats: dict[str, int]  # message_format -> well-formed rows
    embedded_rows: int  # rows (malformed included) whose media carry bytes
    path_only_rows: int  # rows whose media carry paths only
    corrupt_image_path: str | None  # an embedded image whose bytes do not decode


# --------------------------------------------------------------------------------------------
# Problems: a question, its reasoning steps and the ways a rollout goes wrong.


@dataclass(frozen=True)
class _Slip:
    at: int  # index into core of the first wrong step; len(core) = only the final answer is wrong
    texts: tuple[str, ...]  # replacements for core[at:]
    answer: str  # the wrong final answer it leads to


@dataclass(frozen=True)
class _Problem:
    question: str
    answer: str
    core: tuple[str, ...]  # the reasoning steps of a correct solution, in order
    slips: tuple[_Slip, ...]
    fillers: tuple[str, ...]  # neutral steps that fit this problem
    gist: str  # the whole solution in one sentence (one-step rollouts)
    draw: tuple = ()  # what the picture shows, for the styles that draw the problem


# Problem-independent steps, by phase: openers go before the others, closers after them.
_OPENERS = (
    "Let me look at the image carefully before answering.",
    "To solve this, I will first gather the relevant information from the image.",
    "Let me start by describing what the image shows.",
    "First, I will identify exactly what the question is asking for.",
    "Let me re-read the question to be sure about what is asked.",
    "It helps to go through the figure one part at a time.",
)
_MIDDLES = (
    "The question gives enough information to solve this directly.",
    "Let me keep track of the numbers so far.",
    "This step only needs what is visible in the figure.",
    "Next, I need to relate this information to the question.",
    "Let me make sure no part of the figure has been overlooked.",
    "I will double-check this against the figure.",
)
_CLOSERS = (
    "This agrees with what is shown in the image.",
    "Checking the result once more, it is consistent with the question.",
    "All the information in the question has now been used.",
    "Nothing else in the image affects the result.",
    "Now I can combine these observations.",
    "Before giving the final answer, let me summarise what we have so far.",
)
_PHASE = {**{f: 0 for f in _OPENERS}, **{f: 2 for f in _CLOSERS}}


def _options(rng: random.Random, values: list[str], n: int = 4) -> tuple[str, dict[str, str]]:
    """'Choices:' lines for the first n distinct values (shuffled) and the letter of each value."""
    distinct = list(dict.fromkeys(values))[:n]
    rng.shuffle(distinct)
    letters = "ABCDE"
    text = "Choices:\n" + "\n".join(f"{letters[i]}: {v}" for i, v in enumerate(distinct))
    return text, {v: letters[i] for i, v in enumerate(distinct)}


def _p_mathv(rng: random.Random) -> _Problem:
    variant = rng.randrange(3)
    if variant == 0:
        a, b = rng.randint(3, 9), rng.randint(3, 8)
        ans, wb = a * b, b + 1
        wrong, slip2 = a * wb, a * b + 2
        text, letter = _options(rng, [str(ans), str(wrong), str(slip2), str(a * (b - 1)), str(ans + 5)])
        L, WL, SL = letter[str(ans)], letter[str(wrong)], letter[str(slip2)]
        core = (
            f"Count the baskets in the picture: there are {b} baskets.",
            f"Each basket holds {a} apples, so the total number of apples is ${a} \\times {b} = {ans}$.",
            f"The value {ans} matches option {L}.",
        )
        slips = (
            _Slip(0, (
                f"Count the baskets in the picture: there are {wb} baskets.",
                f"Each basket holds {a} apples, so the total number of apples is ${a} \\times {wb} = {wrong}$.",
                f"The value {wrong} matches option {WL}.",
            ), WL),
            _Slip(1, (
                f"Each basket holds {a} apples, so the total number of apples is ${a} \\times {b} = {slip2}$.",
                f"The value {slip2} matches option {SL}.",
            ), SL),
        )
        return _Problem(
            question=f"The picture shows {b} baskets of apples. If every basket holds {a} apples, "
            f"how many apples are there in total?\n{text}",
            answer=L,
            core=core,
            slips=slips,
            fillers=(
                "The baskets all look the same size, so each holds the same number of apples.",
                f"The question states that every basket holds {a} apples.",
                "Equal groups can be combined by multiplication.",
            ),
            gist=f"There are {b} baskets with {a} apples each, so ${a} \\times {b} = {ans}$, option {L}.",
        )
    if variant == 1:
        while True:
            length, width = rng.randint(5, 15), rng.randint(2, 9)
            per = 2 * (length + width)
            if width < length and length * width not in (per, per + 2):
                break
        core = (
            "The shape in the figure is a rectangle, so its opposite sides are equal.",
            f"The perimeter is $P = 2(l + w)$ with $l = {length}$ cm and $w = {width}$ cm.",
            f"Substituting the values:\n$P = 2({length} + {width}) = 2 \\times {length + width} = {per}$ cm.",
        )
        slips = (
            _Slip(1, (
                f"The perimeter is $P = l \\times w$ with $l = {length}$ cm and $w = {width}$ cm.",
                f"Substituting the values:\n$P = {length} \\times {width} = {length * width}$ cm.",
            ), str(length * width)),
            _Slip(2, (
                f"Substituting the values:\n$P = 2({length} + {width}) = 2 \\times {length + width} = {per + 2}$ cm.",
            ), str(per + 2)),
        )
        return _Problem(
            question=f"As shown in the figure, the rectangle has a length of {length} cm and a width of "
            f"{width} cm. What is the perimeter of the rectangle (in cm)?",
            answer=str(per),
            core=core,
            slips=slips,
            fillers=(
                f"The longer side is the length, {length} cm, and the shorter side is the width, {width} cm.",
                "The perimeter is the total distance around the outside of the shape.",
                "Both pairs of opposite sides have to be counted.",
            ),
            gist=f"The perimeter of the rectangle is $2({length} + {width}) = {per}$ cm.",
        )
    while True:
        n, k = rng.choice((6, 8, 10, 12)), rng.randint(1, 5)
        if k < n and 2 * k != n:
            break
    left, eaten = Fraction(n - k, n), Fraction(k, n)

    def tex(f: Fraction) -> str:
        return f"\\frac{{{f.numerator}}}{{{f.denominator}}}"

    simplify = "" if left.denominator == n else f", which simplifies to ${tex(left)}$"
    simplify_w = "" if eaten.denominator == n else f", which simplifies to ${tex(eaten)}$"
    core = (
        f"The pizza is divided into {n} equal slices.",
        f"{k} {'slice has' if k == 1 else 'slices have'} been eaten, so ${n} - {k} = {n - k}$ slices are left.",
        f"The fraction of the pizza that is left is $\\frac{{{n - k}}}{{{n}}}${simplify}.",
    )
    slips = (
        _Slip(1, (
            f"{k} {'slice has' if k == 1 else 'slices have'} been eaten, and these are the slices we need.",
            f"The fraction is $\\frac{{{k}}}{{{n}}}${simplify_w}.",
        ), tex(eaten)),
        _Slip(3, (), tex(Fraction(n - k, n + 1))),
    )
    return _Problem(
        question=f"A pizza in the image is cut into {n} equal slices and {k} of them have been eaten. "
        "What fraction of the pizza is left? Write the answer in simplest form.",
        answer=tex(left),
        core=core,
        slips=slips,
        fillers=(
            "All the slices are the same size, so each slice is one equal part of the whole.",
            f"The eaten slices are the empty part of the plate: there are {k} of them.",
        ),
        gist=f"${n - k}$ of the ${n}$ slices are left, so ${tex(left)}$ of the pizza remains.",
    )


def _p_geoqa(rng: random.Random) -> _Problem:
    if rng.random() < 0.6:
        x = rng.randint(30, 80)
        y = rng.randint(30, 150 - x - 10)
        z = 180 - x - y
        text, letter = _options(rng, [f"{z}°", f"{z + 10}°", f"{360 - x - y}°", f"{abs(x - y) + 5}°", f"{z + 20}°"])
        L, WL, XL = letter[f"{z}°"], letter[f"{z + 10}°"], letter[f"{360 - x - y}°"]
        known = f"From the figure, $\\angle A = {x}^\\circ$ and $\\angle B = {y}^\\circ$."
        core = (
            "The interior angles of a triangle add up to $180^\\circ$.",
            known,
            f"Therefore $\\angle C = 180^\\circ - {x}^\\circ - {y}^\\circ = {z}^\\circ$.",
            f"This corresponds to option {L}.",
        )
        slips = (
            _Slip(2, (
                f"Therefore $\\angle C = 180^\\circ - {x}^\\circ - {y}^\\circ = {z + 10}^\\circ$.",
                f"This corresponds to option {WL}.",
            ), WL),
            _Slip(0, (
                "The interior angles of a triangle add up to $360^\\circ$.",
                known,
                f"Therefore $\\angle C = 360^\\circ - {x}^\\circ - {y}^\\circ = {360 - x - y}^\\circ$.",
                f"This corresponds to option {XL}.",
            ), XL),
        )
        return _Problem(
            question=f"As shown in the figure, in triangle ABC, ∠A = {x}°, ∠B = {y}°, then the degree of ∠C is ()\n{text}",
            answer=L,
            core=core,
            slips=slips,
            fillers=(
                f"Let me write down the known angles:\n- $\\angle A = {x}^\\circ$\n- $\\angle B = {y}^\\circ$",
                "∠C is the interior angle at vertex C of triangle ABC.",
                "No other lines in the figure are needed for this calculation.",
            ),
            gist=f"The angles of a triangle sum to $180^\\circ$, so $\\angle C = {z}^\\circ$, option {L}.",
            draw=("triangle",),
        )
    x = rng.choice([v for v in range(35, 146, 5) if v != 90])
    text, letter = _options(rng, [f"{180 - x}°", f"{x}°", f"{abs(90 - x)}°", f"{180 - x + 10}°"])
    L, WL = letter[f"{180 - x}°"], letter[f"{x}°"]
    core = (
        "Line EF is a transversal that cuts the parallel lines AB and CD.",
        "∠1 and ∠2 lie on the same side of EF, between the two parallel lines, so they are same-side interior angles.",
        f"Same-side interior angles are supplementary, so $\\angle 2 = 180^\\circ - {x}^\\circ = {180 - x}^\\circ$.",
        f"So the answer is option {L}.",
    )
    slips = (
        _Slip(1, (
            "∠1 and ∠2 are alternate interior angles.",
            f"Alternate interior angles are equal, so $\\angle 2 = \\angle 1 = {x}^\\circ$.",
            f"So the answer is option {WL}.",
        ), WL),
    )
    return _Problem(
        question=f"As shown in the figure, AB ∥ CD, line EF intersects AB and CD, and ∠1 = {x}°. "
        f"Then the measure of ∠2 is ()\n{text}",
        answer=L,
        core=core,
        slips=slips,
        fillers=(
            f"We are given $\\angle 1 = {x}^\\circ$.",
            "Because AB ∥ CD, the angle relationships for parallel lines apply.",
        ),
        gist=f"∠1 and ∠2 are same-side interior angles, so $\\angle 2 = 180^\\circ - {x}^\\circ = {180 - x}^\\circ$, option {L}.",
        draw=("parallel",),
    )


_FOOD_CHAINS = (
    ("grass", "grasshopper", "frog", "snake", "hawk"),
    ("algae", "tadpole", "small fish", "heron", "eagle"),
    ("phytoplankton", "zooplankton", "krill", "penguin", "seal"),
    ("oak tree", "caterpillar", "sparrow", "fox", "owl"),
    ("seaweed", "sea urchin", "crab", "sea otter", "shark"),
)


def _p_ai2d(rng: random.Random) -> _Problem:
    producer, c1, c2, c3, _ = rng.choice(_FOOD_CHAINS)
    if rng.random() < 0.5:
        text, letter = _options(rng, [c1, c2, producer, c3])
        L, WL = letter[c1], letter[c2]
        core = (
            "In a food web, each arrow points from the organism that is eaten to the organism that eats it.",
            f"The {producer} has no arrows pointing to it; it makes its own food, so it is a producer.",
            f"An arrow goes from the {producer} to the {c1}, so the {c1} feeds directly on the producer.",
            f"An organism that eats a producer is a primary consumer, so the {c1} is a primary consumer, option {L}.",
        )
        slips = (
            _Slip(2, (
                f"An arrow goes from the {c1} to the {c2}, and the {c2} is the second organism in the chain.",
                f"The second organism in a chain is the primary consumer, so the {c2} is a primary consumer, option {WL}.",
            ), WL),
            _Slip(4, (), WL),
        )
        question = f"Based on the food web shown, which organism is a primary consumer?\n{text}"
        gist = f"The {c1} eats the {producer}, a producer, so it is the primary consumer, option {L}."
    else:
        right, wrong = f"The {c2} population would decrease", f"The {producer} population would decrease"
        text, letter = _options(rng, [right, wrong, f"The {c3} population would increase", "Nothing would change"])
        L, WL = letter[right], letter[wrong]
        core = (
            "Arrows in the food web point from the food to the organism that eats it.",
            f"The arrow from the {c1} to the {c2} shows that the {c2} eats the {c1}.",
            f"With fewer {c1}s, the {c2}s would have less food to eat.",
            f"So the {c2} population would most likely decrease, which is option {L}.",
        )
        slips = (
            _Slip(2, (
                f"With fewer {c1}s, the {producer} would also lose its food source.",
                f"So the {producer} population would decrease, which is option {WL}.",
            ), WL),
        )
        question = f"In the food web shown, what would most likely happen if the number of {c1}s decreased?\n{text}"
        gist = f"The {c2} eats the {c1}, so fewer {c1}s means less food and fewer {c2}s, option {L}."
    return _Problem(
        question=question,
        answer=L,
        core=core,
        slips=slips,
        fillers=(
            f"The diagram shows {', '.join([producer, c1, c2])} and {c3}, connected by arrows.",
            f"The {c3} is at the top of the food web; nothing in the diagram eats it.",
            "Producers are usually plants or algae at the bottom of the diagram.",
        ),
        gist=gist,
        draw=(producer, c1, c2, c3),
    )


def _p_chartqa(rng: random.Random) -> _Problem:
    k = rng.randint(4, 6)
    start = rng.randint(2012, 2018)
    labels = [str(start + i) for i in range(k)]
    values = rng.sample(range(12, 96), k)
    bar_fillers = tuple(f"The bar for {lab} is labelled {val}." for lab, val in zip(labels, values))
    common = (
        "The values are printed above the bars, so they can be read exactly.",
        f"The years run from {labels[0]} to {labels[-1]} along the horizontal axis.",
    )
    if rng.random() < 0.6:
        order = sorted(range(k), key=lambda i: values[i])
        lo, lo2, hi = order[0], order[1], order[-1]
        d, d2 = values[hi] - values[lo], values[hi] - values[lo2]
        core = (
            f"The chart shows {k} bars, one for each year from {labels[0]} to {labels[-1]}.",
            f"The highest value is {values[hi]}, in {labels[hi]}.",
            f"The lowest value is {values[lo]}, in {labels[lo]}.",
            f"The difference is ${values[hi]} - {values[lo]} = {d}$.",
        )
        slips = (
            _Slip(2, (
                f"The lowest value is {values[lo2]}, in {labels[lo2]}.",
                f"The difference is ${values[hi]} - {values[lo2]} = {d2}$.",
            ), str(d2)),
            _Slip(3, (f"The difference is ${values[hi]} - {values[lo]} = {d + 10}$.",), str(d + 10)),
        )
        return _Problem(
            question="What is the difference between the highest and the lowest value in the chart?",
            answer=str(d),
            core=core,
            slips=slips,
            fillers=bar_fillers + common,
            gist=f"The highest bar is {values[hi]} and the lowest {values[lo]}, so the difference is {d}.",
            draw=(tuple(labels), tuple(values)),
        )
    i, j = rng.sample(range(k), 2)
    w = next(m for m in range(k) if m not in (i, j))
    ratio, wratio = values[i] / values[j], values[w] / values[j]
    core = (
        f"The bar for {labels[i]} shows {values[i]}.",
        f"The bar for {labels[j]} shows {values[j]}.",
        f"The ratio is $\\frac{{{values[i]}}}{{{values[j]}}} \\approx {ratio:.2f}$.",
    )
    slips = (
        _Slip(0, (
            f"The bar for {labels[i]} shows {values[w]}.",
            f"The bar for {labels[j]} shows {values[j]}.",
            f"The ratio is $\\frac{{{values[w]}}}{{{values[j]}}} \\approx {wratio:.2f}$.",
        ), f"{wratio:.2f}"),
        _Slip(2, (f"The ratio is $\\frac{{{values[j]}}}{{{values[i]}}} \\approx {values[j] / values[i]:.2f}$.",),
              f"{values[j] / values[i]:.2f}"),
    )
    return _Problem(
        question=f"What is the ratio of the value in {labels[i]} to the value in {labels[j]}? "
        "Round to two decimal places.",
        answer=f"{ratio:.2f}",
        core=core,
        slips=slips,
        fillers=tuple(f for m, f in enumerate(bar_fillers) if m not in (i, j)) + common,
        gist=f"${values[i]} / {values[j]} \\approx {ratio:.2f}$.",
        draw=(tuple(labels), tuple(values)),
    )


_COLOURS = {
    "red": (200, 40, 40),
    "blue": (40, 70, 200),
    "green": (40, 160, 60),
    "yellow": (225, 200, 40),
    "purple": (130, 50, 170),
    "cyan": (40, 190, 200),
    "brown": (130, 80, 40),
    "gray": (128, 128, 128),
}


def _p_clevr(rng: random.Random) -> _Problem:
    colour = rng.choice(("red", "blue", "green", "yellow", "purple", "cyan", "brown"))
    size = rng.choice(("small", "large"))
    t, c, s = rng.randint(6, 10), rng.randint(1, 3), rng.randint(1, 2)
    ans = t - c - s

    def things(n: int, word: str) -> str:
        return f"{n} {colour if word == 'cube' else size} {word}{'' if n == 1 else 's'}"

    def cubes(total: int, c_: int = c) -> str:
        return (
            f"There {'is' if c_ == 1 else 'are'} {things(c_, 'cube')}; removing "
            f"{'it' if c_ == 1 else 'them'} leaves ${total} - {c_} = {total - c_}$ objects."
        )

    def spheres(total: int, result: int) -> str:
        return (
            f"There {'is' if s == 1 else 'are'} {things(s, 'sphere')}; removing "
            f"{'it' if s == 1 else 'them'} leaves ${total} - {s} = {result}$ objects."
        )

    core = (f"There are {t} objects in the scene.", cubes(t), spheres(t - c, ans))
    slips = (
        _Slip(0, (f"There are {t + 1} objects in the scene.", cubes(t + 1), spheres(t + 1 - c, ans + 1)), str(ans + 1)),
        _Slip(2, (spheres(t - c, ans - 1),), str(ans - 1)),
    )
    return _Problem(
        question=f"Subtract all {colour} cubes. Subtract all {size} spheres. How many objects are left?",
        answer=str(ans),
        core=core,
        slips=slips,
        fillers=(
            "The scene contains cubes, spheres and cylinders of different colours and sizes.",
            f"Counting from left to right, I find {t} objects in total.",
            "Cylinders are not mentioned in the question, so they all stay.",
            f"None of the {colour} cubes is also a {size} sphere, so nothing is removed twice.",
        ),
        gist=f"Of the {t} objects, removing {things(c, 'cube')} and {things(s, 'sphere')} leaves {ans}.",
        draw=(t, c, s, colour),
    )


def _p_nlvr2(rng: random.Random) -> _Problem:
    animal = rng.choice(("dog", "bird", "horse", "cat", "penguin", "goat", "duck"))
    k, n1, n2 = rng.randint(1, 3), rng.randint(1, 3), rng.randint(0, 3)

    def many(n: int) -> str:
        return f"no {animal}s" if n == 0 else f"{n} {animal}{'' if n == 1 else 's'}"

    truth = n1 == k and n2 >= 1
    ans, wrong = ("True", "False") if truth else ("False", "True")
    statement = f"The left image contains exactly {many(k)}, and the right image contains at least one {animal}."

    def steps(left: int, right: int) -> tuple[str, ...]:
        ok_l, ok_r = left == k, right >= 1
        verdict = "true" if ok_l and ok_r else "false"
        return (
            f"In the left image, I can see {many(left)}.",
            f"In the right image, I can see {many(right)}.",
            f"The statement needs exactly {many(k)} on the left"
            + (", which holds." if ok_l else f", but there {'is' if left == 1 else 'are'} {left}."),
            f"It also needs at least one {animal} on the right" + (", which holds." if ok_r else ", but there are none."),
            f"Therefore the statement is {verdict}.",
        )

    core = steps(n1, n2)
    if truth:
        slip = _Slip(0, steps(n1 + 1, n2), wrong)
    elif n2 >= 1:
        slip = _Slip(0, steps(k, n2), wrong)
    elif n1 == k:
        slip = _Slip(1, steps(n1, 1)[1:], wrong)
    else:
        slip = _Slip(4, (f"Therefore the statement is {wrong.lower()}.",), wrong)
    return _Problem(
        question=f'Is the following statement about the two images true or false?\nStatement: "{statement}"\n'
        "Answer with True or False.",
        answer=ans,
        core=core,
        slips=(slip, _Slip(5, (), wrong)),
        fillers=(
            "There are two images: a left one and a right one.",
            f"I need to count the {animal}s in each image separately.",
            "Both conditions of the statement must hold for it to be true.",
        ),
        gist=f"The left image shows {many(n1)} and the right image {many(n2)}, so the statement is {ans.lower()}.",
    )


_PROPERTIES = {
    "hard": ("A hard object does not change shape when pressed.", ("rock", "wooden spoon", "metal key", "glass marble")),
    "soft": ("A soft object changes shape when pressed.", ("pillow", "wool scarf", "cotton ball", "sponge")),
    "stretchy": ("A stretchy object gets longer when pulled.", ("rubber band", "balloon", "bungee cord", "elastic hair tie")),
    "transparent": (
        "You can see clearly through a transparent object.",
        ("window glass", "clear plastic cup", "water", "magnifying lens"),
    ),
    "bumpy": ("A bumpy object has an uneven surface.", ("pinecone", "broccoli", "gravel road", "bubble wrap")),
    "sticky": ("A sticky object can stick to other things.", ("honey", "tape", "gum", "syrup")),
}


def _p_scienceqa(rng: random.Random) -> _Problem:
    prop, wp, other = rng.sample(sorted(_PROPERTIES), 3)
    o1, o2, o3 = rng.sample(_PROPERTIES[prop][1], 3)
    text, letter = _options(rng, [prop, wp, other], n=3)
    L, WL = letter[prop], letter[wp]
    core = (
        f"Look at each object in the picture: the {o1}, the {o2} and the {o3}.",
        f"{_PROPERTIES[prop][0]} The {o1}, the {o2} and the {o3} are all {prop}.",
        f"{_PROPERTIES[wp][0]} The {o2} is not {wp}.",
        f"So the property these objects have in common is {prop}, option {L}.",
    )
    slips = (
        _Slip(1, (
            f"{_PROPERTIES[wp][0]} The {o1}, the {o2} and the {o3} are all {wp}.",
            f"{_PROPERTIES[prop][0]} The {o3} is not {prop}.",
            f"So the property these objects have in common is {wp}, option {WL}.",
        ), WL),
    )
    return _Problem(
        question=f"Which property do these three objects have in common?\n{text}",
        answer=L,
        core=core,
        slips=slips,
        fillers=(
            "Select the best answer by checking each property against every object.",
            "A property is something you can observe about an object, such as how it feels or looks.",
        ),
        gist=f"The {o1}, the {o2} and the {o3} are all {prop}, option {L}.",
        draw=(o1, o2, o3),
    )


def _p_iconqa(rng: random.Random) -> _Problem:
    colour = rng.choice(("blue", "green", "red", "purple", "yellow"))
    n = rng.randint(4, 9)
    k = rng.randint(1, n - 2)
    right, ratio, plus1 = f"{k}/{n}", f"{k}/{n - k}", f"{k + 1}/{n}"
    text, letter = _options(rng, [right, ratio, plus1, f"{n - k}/{n}", f"{k}/{n + 1}"])
    L, RL, PL = letter[right], letter[ratio], letter[plus1]
    core = (
        f"Count all the shapes: there are {n} shapes in total.",
        f"Count the {colour} shapes: there {'is' if k == 1 else 'are'} {k} of them.",
        f"The fraction of {colour} shapes is $\\frac{{{k}}}{{{n}}}$, which is option {L}.",
    )
    slips = (
        _Slip(2, (
            f"Comparing the {colour} shapes with the other shapes gives $\\frac{{{k}}}{{{n - k}}}$, which is option {RL}.",
        ), RL),
        _Slip(1, (
            f"Count the {colour} shapes: there are {k + 1} of them.",
            f"The fraction of {colour} shapes is $\\frac{{{k + 1}}}{{{n}}}$, which is option {PL}.",
        ), PL),
    )
    return _Problem(
        question=f"What fraction of the shapes are {colour}?\n{text}",
        answer=L,
        core=core,
        slips=slips,
        fillers=(
            "The shapes are arranged in a grid.",
            f"A fraction compares the number of {colour} shapes with the number of all shapes.",
            "Each shape counts once, whatever its size.",
        ),
        gist=f"{k} of the {n} shapes are {colour}, so the fraction is $\\frac{{{k}}}{{{n}}}$, option {L}.",
        draw=(n, k, colour),
    )


# source -> (groups, picture style, problem maker)
_SOURCES = {
    "MathV360K": (12, "photo", _p_mathv),
    "geoqa+": (8, "geometry", _p_geoqa),
    "ai2d": (6, "foodweb", _p_ai2d),
    "chartqa": (8, "chart", _p_chartqa),
    "CLEVR_math": (7, "clevr", _p_clevr),
    "nlvr2": (5, "photo", _p_nlvr2),
    "scienceqa": (6, "panels", _p_scienceqa),
    "iconqa": (7, "icons", _p_iconqa),
}
_NO_SOURCE_PREFIX = "unsourced"


def _paths(rng: random.Random, source: str | None, used: set[str]) -> tuple[str, ...]:
    while True:
        if source is None:
            paths = (f"{rng.randrange(10000, 99999)}.jpg",)
        elif source == "MathV360K":
            paths = (f"MathV360K/data_images/{rng.randrange(0, 40000):05d}.jpg",)
        elif source == "geoqa+":
            paths = (f"geoqa+/images/{rng.randrange(1, 12000)}.png",)
        elif source == "ai2d":
            paths = (f"ai2d/abc_images/{rng.randrange(1, 5000)}.png",)
        elif source == "chartqa":
            paths = (f"chartqa/train/png/two_col_{rng.randrange(1, 42000)}.png",)
        elif source == "CLEVR_math":
            paths = (f"CLEVR_math/images/CLEVR_train_{rng.randrange(0, 70000):06d}.png",)
        elif source == "nlvr2":
            stem = f"nlvr2/train/train-{rng.randrange(0, 11000)}-{rng.randrange(0, 4)}"
            paths = (f"{stem}-img0.png", f"{stem}-img1.png")
        elif source == "scienceqa":
            paths = (f"scienceqa/images/train/{rng.randrange(1, 20000)}/image.png",)
        else:
            paths = (f"iconqa/train/choose_txt/{rng.randrange(1, 90000)}/image.png",)
        if not used.intersection(paths):
            used.update(paths)
            return paths


# --------------------------------------------------------------------------------------------
# The plan: groups, rollouts and rows as pure data (no pixels yet).


@dataclass(frozen=True)
class _ImageSpec:
    path: str
    style: str
    seed: int
    size: tuple[int, int]
    draw: tuple = ()
    label: str = ""
    kind: str = "normal"  # normal | exact_dup | near_dup | cropped | brightened | contaminated | corrupt | lookalike
    of: str | None = None


@dataclass(frozen=True)
class _Group:
    index: int
    source: str | None
    problem: _Problem
    paths: tuple[str, ...]
    rollouts: int  # well-formed rollouts; malformed rows come on top


@dataclass(frozen=True)
class _Rollout:
    sample_id: str
    group: int
    steps: tuple[str, ...]
    labels: tuple[str, ...]
    mc: tuple[tuple[int, int], ...]  # (num_mc_correct, num_mc_total) per step


@dataclass(frozen=True)
class _Row:
    id: str
    group: int
    messages: str
    expected: ExpectedSample | None
    fault: str | None


@dataclass(frozen=True)
class _Plan:
    groups: tuple[_Group, ...]
    images: dict[str, _ImageSpec]
    embedded_groups: frozenset[int]
    rollouts: dict[str, _Rollout]
    rows: tuple[_Row, ...]  # file order
    planted: dict[str, object]


_STEP_WEIGHTS = {1: 1, 2: 4, 3: 8, 4: 12, 5: 14, 6: 14, 7: 12, 8: 10, 9: 8, 10: 6, 11: 4, 12: 3, 13: 2, 14: 1, 15: 1, 16: 1}
P_WRONG = 0.3  # share of rollouts with a mistake
P_EARLY_STOP = 0.5  # share of wrong rollouts that end at their first "-"


def _final_step(rng: random.Random, answer: str) -> str:
    if rng.random() < 0.5:
        return f"Final answer: {answer}"
    return f"Therefore, the answer is {answer}.\nFinal answer: {answer}"


def _arrange(rng: random.Random, core: list[str], fillers: list[str], m: int) -> tuple[list[str], list[int]]:
    """m non-final steps from the core steps (in order) and fillers; returns them and, per core
    step, the index of the step that holds it."""
    c = len(core)
    if m >= c:
        slots = sorted(rng.sample(range(m), c))
        chosen = rng.sample(fillers, m - c)
        pool = sorted(chosen, key=lambda f: _PHASE.get(f, 1), reverse=True)  # popped from the end
        steps, where, ci = [], [], 0
        for i in range(m):
            if ci < c and slots[ci] == i:
                steps.append(core[ci])
                where.append(i)
                ci += 1
            else:
                steps.append(pool.pop())
        return steps, where
    # fewer steps than core steps: merge neighbours (the first chunks take the extra ones)
    sizes = [c // m + (1 if i < c % m else 0) for i in range(m)]
    steps, where, ci = [], [], 0
    for i, size in enumerate(sizes):
        steps.append(" ".join(core[ci : ci + size]))
        where.extend([i] * size)
        ci += size
    return steps, where


_CONNECTIVES = ("Next, ", "Now, ", "Then, ", "Looking at the figure again, ", "In addition, ")
_NO_CONNECTIVE = ("So ", "Therefore", "This ", "That ", "Alternate", "Same-side", "Comparing")


def _vary(rng: random.Random, core: list[str]) -> list[str]:
    """Rollouts word the same reasoning a little differently: a connective before some later steps."""
    out = []
    for i, step in enumerate(core):
        if i and rng.random() < 0.4 and step[:1].isalpha() and not step.startswith(_NO_CONNECTIVE):
            first = step.split(" ", 1)[0]
            keep = first == "I" or first[1:2].isupper()
            step = rng.choice(_CONNECTIVES) + (step if keep else step[0].lower() + step[1:])
        out.append(step)
    return out


def _rollout(
    rng: random.Random, sample_id: str, group: int, problem: _Problem, n: int, wrong: bool, early_stop: bool
) -> _Rollout:
    if n == 1:
        steps, labels = [f"{problem.gist}\nFinal answer: {problem.answer}"], ["+"]
    else:
        fillers = list(problem.fillers) + list(_OPENERS + _MIDDLES + _CLOSERS)
        core = list(problem.core)
        answer = problem.answer
        slip = rng.choice(problem.slips) if wrong else None
        if slip is not None:
            core = core[: slip.at] + list(slip.texts)
            answer = slip.answer
        steps, where = _arrange(rng, _vary(rng, core), fillers, n - 1)
        steps.append(_final_step(rng, answer))
        first_wrong = n - 1 if slip is None or slip.at >= len(core) else where[slip.at]
        if slip is None:
            labels = ["+"] * n
        else:
            labels = ["+"] * first_wrong + ["-"] * (n - first_wrong)
            if early_stop:
                steps, labels = steps[: first_wrong + 1], labels[: first_wrong + 1]
    # Monte-Carlo estimates as upstream: c of 16 continuations correct; nothing sampled after the first 0
    mc, good = [], rng.randint(9, 16)
    negative_seen = False
    for label in labels:
        if label == "+":
            good = max(1, good - rng.choice((0, 0, 0, 1, 2, 3)))
            mc.append((good, NUM_MC_SEQUENCES))
        elif not negative_seen:
            negative_seen = True
            mc.append((0, NUM_MC_SEQUENCES))
        else:
            mc.append((0, 0))
    return _Rollout(sample_id, group, tuple(steps), tuple(labels), tuple(mc))


def _score(mc: tuple[int, int]) -> float:
    correct, total = mc
    return correct / total if total else 0.0


def _first_turn(question: str, step: str, image_tags: int) -> str:
    return "### Question:\n" + "<image>\n" * image_tags + f"{question}\n\n### Solution Process:\n{step}"


def _internvl(question: str, steps, labels, image_tags: int) -> list[dict]:
    conv = [{"from": "system", "value": PRM_SYSTEM_PROMPT}]
    for i, (step, label) in enumerate(zip(steps, labels)):
        conv.append({"from": "human", "value": _first_turn(question, step, image_tags) if i == 0 else step})
        conv.append({"from": "gpt", "value": label})
    return conv


def _chat(question: str, steps, labels, n_images: int, parts: bool) -> list[dict]:
    def content(text: str, images: int = 0):
        if not parts:
            return text
        return [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": text}]

    conv = [{"role": "system", "content": content(PRM_SYSTEM_PROMPT)}]
    for i, (step, label) in enumerate(zip(steps, labels)):
        if i == 0:
            first = _first_turn(question, step, 0 if parts else n_images)
            conv.append({"role": "user", "content": content(first, n_images)})
        else:
            conv.append({"role": "user", "content": content(step)})
        conv.append({"role": "assistant", "content": content(label)})
    return conv


def _image_field(paths: tuple[str, ...]) -> str | list[str]:
    """Upstream's `image`: a path, or a list of paths for multi-image (nlvr2) items."""
    return paths[0] if len(paths) == 1 else list(paths)


def _raw(group: _Group, rollout: _Rollout) -> dict:
    return {
        "image": _image_field(group.paths),
        "question": group.problem.question,
        "answer": group.problem.answer,
        "response": "\n\n".join(rollout.steps),
        "steps_with_score": [
            {"step": step, "score": _score(mc), "num_mc_correct": mc[0], "num_mc_total": mc[1]}
            for step, mc in zip(rollout.steps, rollout.mc)
        ],
        "num_mc_sequences": NUM_MC_SEQUENCES,
    }


def _dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _pick(order: list[str], taken: set[str], want, count: int = 1) -> list[str]:
    picked = []
    for sid in order:
        if len(picked) == count:
            break
        if sid not in taken and want(sid):
            picked.append(sid)
            taken.add(sid)
    if len(picked) < count:
        raise AssertionError("sample plan cannot place a planted feature")
    return picked


@lru_cache(maxsize=1)
def _plan() -> _Plan:
    rng = random.Random(SEED)

    # groups: sources interleaved, then the folderless one somewhere in the middle
    order = [s for s, (count, _, _) in _SOURCES.items() for _ in range(count)]
    rng.shuffle(order)
    order.insert(rng.randrange(10, len(order) - 10), None)
    used: set[str] = set()
    groups: list[_Group] = []
    for index, source in enumerate(order):
        problem = (_SOURCES[source][2] if source else _p_mathv)(rng)
        paths = _paths(rng, source, used)
        rollouts = 1 if source is None else rng.choice((3, 4, 4, 4, 5))
        groups.append(_Group(index, source, problem, paths, rollouts))

    def first_groups(source: str, count: int) -> list[_Group]:
        return [g for g in groups if g.source == source][:count]

    math = first_groups("MathV360K", 3)
    geo = first_groups("geoqa+", 2)
    one_step_group = first_groups("CLEVR_math", 1)[0].index
    sixteen_group = first_groups("chartqa", 1)[0].index

    # rollouts
    rollouts: dict[str, _Rollout] = {}
    steps_choices, weights = zip(*_STEP_WEIGHTS.items())
    for g in groups:
        prefix = g.source or _NO_SOURCE_PREFIX
        for r in range(g.rollouts):
            sid = f"{prefix}_{g.index:05d}_{r}"
            n = rng.choices(steps_choices, weights)[0]
            wrong = rng.random() < P_WRONG
            early = rng.random() < P_EARLY_STOP
            if r == 0 and g.index == one_step_group:
                n, wrong = 1, False
            if r == 0 and g.index == sixteen_group:
                n, wrong = 16, False
            if n == 1:
                wrong = False
            rollouts[sid] = _rollout(rng, sid, g.index, g.problem, n, wrong, early)

    # formats: a few planted features first, then random fill in fixed proportions
    ids = list(rollouts)
    shuffled = ids[:]
    rng.shuffle(shuffled)
    by_id = {g.index: g for g in groups}

    def is_nlvr2(sid: str) -> bool:
        return by_id[rollouts[sid].group].source == "nlvr2"

    def continues_after_minus(sid: str) -> bool:
        labels = rollouts[sid].labels
        return labels.count("-") >= 2 and labels.index("-") >= 1

    def early_stop(sid: str) -> bool:
        labels = rollouts[sid].labels
        return labels.count("-") == 1 and labels[-1] == "-" and len(labels) >= 3

    n_raw, n_chat = round(0.08 * len(ids)), round(0.12 * len(ids))
    taken: set[str] = set()
    raw = _pick(shuffled, taken, continues_after_minus) + _pick(shuffled, taken, early_stop)
    raw += _pick(shuffled, taken, is_nlvr2)
    raw += _pick(shuffled, taken, lambda s: True, n_raw - len(raw))
    chat = _pick(shuffled, taken, is_nlvr2)
    chat += _pick(shuffled, taken, lambda s: True, n_chat - len(chat))
    parts = set(chat[:1] + [s for s in chat[1:] if len(rollouts[s].steps) >= 2][:3])
    internvl = [s for s in shuffled if s not in taken]
    no_tag = set(_pick(internvl, set(), lambda s: not is_nlvr2(s), 4))
    fmt = {**{s: "raw" for s in raw}, **{s: "chat" for s in chat}, **{s: "internvl" for s in internvl}}

    # plant a "+" step scoring exactly 1/16: the step before the first "-" of the first raw row
    one_in_16 = raw[0]
    ro = rollouts[one_in_16]
    k = ro.labels.index("-") - 1
    mc = list(ro.mc)
    mc[k] = (1, NUM_MC_SEQUENCES)
    rollouts[one_in_16] = _Rollout(ro.sample_id, ro.group, ro.steps, ro.labels, tuple(mc))

    # well-formed rows
    def well_formed(ro: _Rollout) -> _Row:
        sid, g = ro.sample_id, by_id[ro.group]
        q, n_img = g.problem.question, len(g.paths)
        if fmt[sid] == "raw":
            messages = _dumps(_raw(g, ro))
            scores = tuple(_score(m) for m in ro.mc)
        elif fmt[sid] == "chat":
            messages = _dumps(_chat(q, ro.steps, ro.labels, n_img, sid in parts))
            scores = (None,) * len(ro.steps)
        else:
            messages = _dumps(_internvl(q, ro.steps, ro.labels, 0 if sid in no_tag else n_img))
            scores = (None,) * len(ro.steps)
        expected = ExpectedSample(sid, g.source, q, g.paths, ro.steps, ro.labels, scores, fmt[sid])
        return _Row(sid, g.index, messages, expected, None)

    rows: list[_Row] = [well_formed(ro) for ro in rollouts.values()]

    # malformed rows: an extra rollout of five groups, one fault each
    faults = (
        "messages is not valid JSON (cut off mid-string)",
        "label 'maybe' is neither '+' nor '-'",
        "last step has no label (the conversation ends with a human turn)",
        "unrecognised JSON shape: an object {\"foo\": 1}",
        "unrecognised JSON shape: a list of strings",
    )
    hosts = rng.sample([g for g in groups if g.source is not None and g.index not in (one_step_group, sixteen_group)], 5)
    malformed: dict[str, str] = {}
    for fault, g in zip(faults, hosts):
        sid = f"{g.source}_{g.index:05d}_{g.rollouts}"
        ro = _rollout(rng, sid, g.index, g.problem, rng.randint(3, 6), False, False)
        conv = _internvl(g.problem.question, ro.steps, ro.labels, len(g.paths))
        if fault.startswith("messages is not"):
            text = _dumps(conv)
            messages = text[: len(text) * 2 // 3]
        elif fault.startswith("label"):
            conv[4]["value"] = "maybe"
            messages = _dumps(conv)
        elif fault.startswith("last step"):
            messages = _dumps(conv[:-1])
        elif "object" in fault:
            messages = _dumps({"foo": 1})
        else:
            messages = _dumps([t["value"] for t in conv])
        malformed[sid] = fault
        rows.append(_Row(sid, g.index, messages, None, fault))
    rng.shuffle(rows)

    # media: embedded groups (the planted faults and duplicates, then random ones to ~40% of rows)
    per_group = {g.index: 0 for g in groups}
    for row in rows:
        per_group[row.group] += 1
    embedded = {g.index for g in math + geo}
    rest = [g.index for g in groups if g.index not in embedded]
    rng.shuffle(rest)
    while sum(per_group[i] for i in embedded) < 0.40 * len(rows):
        embedded.add(rest.pop())

    # more planted images, all embedded: a cropped and a brightened copy among the CLEVR scenes, and
    # a near-copy of an MMRB2 sample picture in place of a MathV360K photo
    planted_groups = {g.index for g in math + geo}

    def spare(source: str) -> list[_Group]:
        return [g for g in groups if g.source == source and g.index in embedded and g.index not in planted_groups]

    clevr, photos = spare("CLEVR_math"), spare("MathV360K")
    triangles = [g for g in spare("geoqa+") if g.problem.draw[0] == "triangle"]
    charts = spare("chartqa")
    if len(clevr) < 4 or not photos or len(triangles) < 2 or len(charts) < 2:
        raise AssertionError("sample plan cannot place a planted feature")
    cropped = (clevr[0].paths[0], clevr[1].paths[0])
    brightened = (clevr[2].paths[0], clevr[3].paths[0])
    contaminated = photos[0].paths[0]

    # one exact duplicate sample: in the first embedded group without a planted image that has two
    # rollouts of one format with the same labels, the later row repeats the steps of the earlier one
    # (same step and label counts, so every total stays)
    position = {row.id: i for i, row in enumerate(rows)}
    busy = {p for pair in (cropped, brightened) for p in pair} | {contaminated}
    duplicate = None
    for g in groups:
        if g.index not in embedded or g.index in planted_groups or busy.intersection(g.paths):
            continue
        prefix = g.source or _NO_SOURCE_PREFIX
        sids = sorted((f"{prefix}_{g.index:05d}_{r}" for r in range(g.rollouts)), key=position.__getitem__)
        duplicate = next(
            (
                (a, b)
                for i, a in enumerate(sids)
                for b in sids[i + 1 :]
                if fmt[a] == fmt[b] and rollouts[a].labels == rollouts[b].labels
            ),
            None,
        )
        if duplicate:
            break
    if duplicate is None:
        raise AssertionError("sample plan cannot place a planted feature")
    kept, dup = rollouts[duplicate[0]], rollouts[duplicate[1]]
    rollouts[dup.sample_id] = _Rollout(dup.sample_id, dup.group, kept.steps, kept.labels, kept.mc)
    rows[position[dup.sample_id]] = well_formed(rollouts[dup.sample_id])
    for g in groups:  # no other two rollouts of a group are the same
        steps = [rollouts[f"{g.source or _NO_SOURCE_PREFIX}_{g.index:05d}_{r}"].steps for r in range(g.rollouts)]
        if len(set(steps)) != len(steps) - (g.index == dup.group):
            raise AssertionError(f"accidental duplicate rollouts in group {g.index}")

    # images
    images: dict[str, _ImageSpec] = {}
    for g in groups:
        style = _SOURCES[g.source][1] if g.source else "photo"
        for path in g.paths:
            lo = 112 if style in ("chart", "foodweb", "panels") else 64
            size = (rng.randint(lo, 160), rng.randint(max(lo - 16, 64), 144))
            label = rng.choice(("apples", "basket", "figure", "photo", "IMG", "fig. 2", "shapes"))
            images[path] = _ImageSpec(path, style, rng.getrandbits(48), size, g.problem.draw, label)
    exact = (math[0].paths[0], math[1].paths[0])
    near = (geo[0].paths[0], geo[1].paths[0])
    images[exact[1]] = _ImageSpec(**{**vars(images[exact[1]]), "kind": "exact_dup", "of": exact[0]})
    images[near[1]] = _ImageSpec(**{**vars(images[near[1]]), "kind": "near_dup", "of": near[0]})
    corrupt = math[2].paths[0]
    images[corrupt] = _ImageSpec(**{**vars(images[corrupt]), "kind": "corrupt"})
    images[cropped[1]] = _ImageSpec(**{**vars(images[cropped[1]]), "kind": "cropped", "of": cropped[0]})
    images[brightened[1]] = _ImageSpec(**{**vars(images[brightened[1]]), "kind": "brightened", "of": brightened[0]})
    mmrb2_name = CONTAMINATED[1]  # the MMRB2 picture is chosen there; the plan chooses where it lands
    images[contaminated] = _ImageSpec(**{**vars(images[contaminated]), "kind": "contaminated", "of": mmrb2_name})
    # Unrelated look-alikes: the second image of each pair is drawn from the first one's template
    # (same seed, size and labels) with other content: the triangle's apex moved, two bars changed.
    lookalikes = ((triangles[0].paths[0], triangles[1].paths[0]), (charts[0].paths[0], charts[1].paths[0]))
    for (first, second), variant in zip(lookalikes, (_moved_apex, _changed_bars)):
        images[second] = _ImageSpec(**{**vars(images[first]), "path": second, "draw": variant(images[first].draw),
                                       "kind": "lookalike", "of": first})

    planted = {
        "exact": exact,
        "near": near,
        "corrupt": corrupt,
        "no_folder": next(g.paths[0] for g in groups if g.source is None),
        "one_step": f"CLEVR_math_{one_step_group:05d}_0",
        "sixteen": f"chartqa_{sixteen_group:05d}_0",
        "one_in_16": one_in_16,
        "no_tag": tuple(sorted(no_tag)),
        "parts": tuple(sorted(parts)),
        "malformed": tuple(sorted(malformed)),
        "cropped": cropped,
        "brightened": brightened,
        "contaminated": (contaminated, mmrb2_name),
        "duplicate_sample": duplicate,
        "lookalikes": lookalikes,
    }
    return _Plan(tuple(groups), images, frozenset(embedded), rollouts, tuple(rows), planted)


def _moved_apex(draw: tuple) -> tuple:
    return (draw[0], LOOKALIKE_APEX_SHIFT)


def _changed_bars(draw: tuple) -> tuple:
    labels, values = draw
    changed = list(values)
    changed[0] = max(5, changed[0] - LOOKALIKE_BAR_CHANGE)
    changed[3] = min(100, changed[3] + LOOKALIKE_BAR_CHANGE)
    return (labels, tuple(changed))


# --------------------------------------------------------------------------------------------
# Pixels


def _colour(rng: random.Random, lo: int = 0, hi: int = 255) -> tuple[int, int, int]:
    return (rng.randint(lo, hi), rng.randint(lo, hi), rng.randint(lo, hi))


def _font() -> ImageFont.ImageFont:
    return ImageFont.load_default_imagefont()  # bitmap font: identical on every machine


def _grain(img: Image.Image, rng: random.Random, amplitude: int) -> Image.Image:
    w, h = img.size
    noise = Image.frombytes("L", (w, h), rng.randbytes(w * h)).point(lambda v: 128 + (v - 128) * amplitude // 128)
    return ImageChops.add(img, Image.merge("RGB", (noise, noise, noise)), 1.0, -128)


def _gradient(rng: random.Random, w: int, h: int, dark: tuple, light: tuple) -> Image.Image:
    grad = Image.linear_gradient("L").resize((w, h))
    if rng.random() < 0.5:
        grad = grad.transpose(Image.Transpose.ROTATE_90).resize((w, h))
    return Image.composite(Image.new("RGB", (w, h), dark), Image.new("RGB", (w, h), light), grad)


def _photo(rng: random.Random, w: int, h: int, label: str) -> Image.Image:
    img = _gradient(rng, w, h, _colour(rng, 0, 140), _colour(rng, 110, 255))
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(4, 8)):
        shape = rng.choice(("ellipse", "ellipse", "rectangle", "line", "polygon"))
        x0, y0 = rng.randrange(-w // 4, w), rng.randrange(-h // 4, h)
        x1, y1 = x0 + rng.randint(w // 8, w // 2), y0 + rng.randint(h // 8, h // 2)
        if shape == "ellipse":
            draw.ellipse((x0, y0, x1, y1), fill=_colour(rng), outline=_colour(rng), width=rng.randint(1, 3))
        elif shape == "rectangle":
            draw.rectangle((x0, y0, x1, y1), fill=_colour(rng))
        elif shape == "line":
            draw.line((x0, y0, x1, y1), fill=_colour(rng), width=rng.randint(2, 5))
        else:
            draw.polygon([(rng.randrange(w), rng.randrange(h)) for _ in range(rng.randint(3, 5))], fill=_colour(rng))
    draw.text((rng.randint(2, max(2, w // 3)), rng.randint(2, h - 14)), label, fill=_colour(rng), font=_font())
    return _grain(img, rng, 3)


def _geometry(rng: random.Random, w: int, h: int, kind: str, apex_shift: int = 0) -> Image.Image:
    img = Image.new("RGB", (w, h), (252, 252, 250))
    draw = ImageDraw.Draw(img)
    ink, font = (20, 20, 20), _font()
    m = 10
    if kind == "parallel":
        y1, y2 = rng.randint(m, h // 3), rng.randint(2 * h // 3, h - m)
        draw.line((m, y1, w - m, y1), fill=ink)
        draw.line((m, y2, w - m, y2), fill=ink)
        xa, xb = rng.randint(m, w // 2), rng.randint(w // 2, w - m)
        draw.line((xa, y1 - 8, xb, y2 + 8), fill=ink)
        for text, xy in (("A", (2, y1 - 11)), ("B", (w - 8, y1 - 11)), ("C", (2, y2 + 1)), ("D", (w - 8, y2 + 1)),
                         ("E", (xa - 3, max(0, y1 - 20))), ("F", (xb, min(h - 11, y2 + 8))), ("1", (xa + 6, y1 + 2)),
                         ("2", (xb - 10, y2 - 12))):
            draw.text(xy, text, fill=ink, font=font)
    else:
        pts = [(rng.randint(m, w // 3), rng.randint(2 * h // 3, h - m)),
               (rng.randint(2 * w // 3, w - m), rng.randint(2 * h // 3, h - m)),
               (rng.randint(w // 3, 2 * w // 3), rng.randint(m, h // 3))]
        pts[2] = (min(max(pts[2][0] + apex_shift, m), w - m), pts[2][1])  # a look-alike: the apex moved
        draw.polygon(pts, outline=ink)
        if rng.random() < 0.5:  # a height or median, as geoqa figures often have
            draw.line((pts[2], ((pts[0][0] + pts[1][0]) // 2, (pts[0][1] + pts[1][1]) // 2)), fill=(90, 90, 90))
        for text, (x, y) in zip("ABC", pts):
            draw.text((min(max(x - 3, 0), w - 7), min(max(y - 5, 0), h - 11)), text, fill=ink, font=font)
    return img


def _chart(rng: random.Random, w: int, h: int, labels: tuple, values: tuple) -> Image.Image:
    img = Image.new("RGB", (w, h), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    font, base, top = _font(), h - 14, 14
    draw.line((6, base, w - 4, base), fill=(80, 80, 80))
    slot = (w - 10) / len(values)
    bar = (52, 101, 164) if rng.random() < 0.7 else (220, 120, 40)
    for i, (lab, val) in enumerate(zip(labels, values)):
        x0 = int(8 + i * slot + slot * 0.15)
        x1 = int(8 + (i + 1) * slot - slot * 0.15)
        y = base - int((base - top) * val / 100)
        draw.rectangle((x0, y, x1, base), fill=bar)
        draw.text((x0, y - 11), str(val), fill=(30, 30, 30), font=font)
        draw.text((x0, base + 2), lab[-2:], fill=(60, 60, 60), font=font)
    return img


def _clevr(rng: random.Random, w: int, h: int, total: int, cubes: int, spheres: int, colour: str) -> Image.Image:
    img = _gradient(rng, w, h, (95, 95, 98), (170, 170, 172))
    draw = ImageDraw.Draw(img)
    kinds = ["cube"] * cubes + ["sphere"] * spheres + ["other"] * (total - cubes - spheres)
    rng.shuffle(kinds)
    for i, kind in enumerate(kinds):
        r = rng.randint(5, 10)
        x = int((i + 0.5) * w / total) + rng.randint(-3, 3)
        y = rng.randint(h // 3, h - r - 4)
        draw.ellipse((x - r, y + r - 3, x + r + 4, y + r + 3), fill=(80, 80, 82))  # shadow
        fill = _COLOURS[colour] if kind == "cube" else _COLOURS[rng.choice(sorted(_COLOURS))]
        if kind == "cube":
            draw.rectangle((x - r, y - r, x + r, y + r), fill=fill, outline=(40, 40, 40))
        elif kind == "sphere":
            draw.ellipse((x - r // 2, y - r // 2, x + r // 2, y + r // 2), fill=fill)
            draw.ellipse((x - r // 4, y - r // 3, x, y - r // 6), fill=(235, 235, 235))  # highlight
        else:
            draw.rectangle((x - r, y - r // 2, x + r, y + r), fill=fill)
            draw.ellipse((x - r, y - r, x + r, y), fill=tuple(min(255, v + 40) for v in fill))
    return _grain(img, rng, 2)


def _foodweb(rng: random.Random, w: int, h: int, names: tuple) -> Image.Image:
    img = Image.new("RGB", (w, h), (236, 246, 232))
    draw = ImageDraw.Draw(img)
    font = _font()
    centres = []
    for level, name in enumerate(names):  # producer at the bottom, top predator at the top
        y = h - 14 - level * (h - 24) // max(1, len(names) - 1)
        x = rng.randint(4, max(5, w - 6 * min(len(name), 10) - 6))
        draw.rectangle((x - 2, y - 2, x + 6 * min(len(name), 10) + 2, y + 11), fill=(255, 255, 255), outline=(90, 120, 90))
        draw.text((x, y), name[:10], fill=(20, 60, 20), font=font)
        centres.append((x + 3 * min(len(name), 10), y))
    for (x0, y0), (x1, y1) in zip(centres, centres[1:]):
        draw.line((x0, y0 - 2, x1, y1 + 13), fill=(200, 60, 40), width=1)
        draw.polygon([(x1 - 3, y1 + 17), (x1 + 3, y1 + 17), (x1, y1 + 13)], fill=(200, 60, 40))
    return img


def _panels(rng: random.Random, w: int, h: int, names: tuple) -> Image.Image:
    img = Image.new("RGB", (w, h), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    font, pw = _font(), w // len(names)
    for i, name in enumerate(names):  # one photo-like panel per object: its own backdrop, size and place
        x0 = i * pw
        backdrop = _gradient(rng, pw - 4, h - 17, _colour(rng, 40, 190), _colour(rng, 150, 255))
        if rng.random() < 0.5:
            backdrop = backdrop.transpose(Image.Transpose.ROTATE_180)
        img.paste(backdrop, (x0 + 2, 2))
        draw.rectangle((x0 + 2, 2, x0 + pw - 3, h - 16), outline=(150, 150, 150))
        r = rng.randint(min(pw, h) // 7, min(pw, h) // 3)
        cx = x0 + rng.randint(min(r + 4, pw // 2), max(pw // 2, pw - r - 5))
        cy = rng.randint(min(r + 4, (h - 14) // 2), max((h - 14) // 2, h - 18 - r))
        box, fill = (cx - r, cy - r, cx + r, cy + rng.randint(r // 2, r)), _colour(rng, 20, 220)
        if rng.random() < 0.5:
            draw.ellipse(box, fill=fill)
        else:
            draw.rounded_rectangle(box, radius=max(1, r // 3), fill=fill)
        draw.text((x0 + 3, h - 13), name.split()[-1][: max(1, (pw - 6) // 6)], fill=(20, 20, 20), font=font)
    return _grain(img, rng, 2)


def _icons(rng: random.Random, w: int, h: int, n: int, k: int, colour: str) -> Image.Image:
    img = Image.new("RGB", (w, h), _colour(rng, 228, 255))
    draw = ImageDraw.Draw(img)
    cols = 3 if n <= 6 else 4
    rows = (n + cols - 1) // cols
    # the grid fills a random part of the picture, icons of a random size: no two grids line up
    gx0, gy0 = rng.randint(0, w // 5), rng.randint(0, h // 5)
    gx1, gy1 = rng.randint(gx0 + w * 3 // 5, w), rng.randint(gy0 + h * 3 // 5, h)
    cw, ch = (gx1 - gx0) / cols, (gy1 - gy0) / rows
    shape = rng.choice(("circle", "square", "triangle"))
    coloured = set(rng.sample(range(n), k))
    scale = rng.uniform(0.22, 0.4)
    for i in range(n):
        cx, cy = gx0 + int((i % cols + 0.5) * cw), gy0 + int((i // cols + 0.5) * ch)
        r = max(3, int(min(cw, ch) * scale))
        fill = _COLOURS[colour] if i in coloured else (215, 215, 215)
        box = (cx - r, cy - r, cx + r, cy + r)
        if shape == "circle":
            draw.ellipse(box, fill=fill, outline=(60, 60, 60))
        elif shape == "square":
            draw.rectangle(box, fill=fill, outline=(60, 60, 60))
        else:
            draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill, outline=(60, 60, 60))
    return img


def _picture(spec: _ImageSpec) -> Image.Image:
    rng = random.Random(spec.seed)
    w, h = spec.size
    if spec.style == "geometry":
        return _geometry(rng, w, h, *spec.draw)
    if spec.style == "chart":
        return _chart(rng, w, h, *spec.draw)
    if spec.style == "clevr":
        return _clevr(rng, w, h, *spec.draw)
    if spec.style == "foodweb":
        return _foodweb(rng, w, h, spec.draw)
    if spec.style == "panels":
        return _panels(rng, w, h, spec.draw)
    if spec.style == "icons":
        return _icons(rng, w, h, *spec.draw)
    return _photo(rng, w, h, spec.label)


def _encode(img: Image.Image, path: str, quality: int = JPEG_QUALITY) -> bytes:
    buf = io.BytesIO()
    if path.endswith(".png"):
        img.save(buf, "PNG", optimize=False, compress_level=9)
    else:
        img.save(buf, "JPEG", quality=quality, optimize=False, progressive=False, subsampling=2)
    return buf.getvalue()


def _corrupt(data: bytes) -> bytes:
    """Cut a JPEG inside its Huffman tables: Pillow fails to open it, truncated-image mode or not."""
    return data[: data.find(b"\xff\xc4") + 40]


_DERIVED_KINDS = ("exact_dup", "near_dup", "cropped", "brightened", "contaminated")


def _derived(spec: _ImageSpec, out: dict[str, bytes]) -> bytes:
    """The bytes of a planted copy: of another picture of this sample, or (contaminated) of MMRB2's."""
    if spec.kind == "exact_dup":
        return out[spec.of]
    original = mmrb2_sample.sample_image(spec.of) if spec.kind == "contaminated" else out[spec.of]
    with Image.open(io.BytesIO(original)) as src:
        src = src.convert("RGB")
    w, h = src.size
    if spec.kind == "near_dup":
        return _encode(src.resize((w - 6, h - 4), Image.Resampling.LANCZOS), spec.path, quality=JPEG_QUALITY - 10)
    if spec.kind == "cropped":
        dx, dy = round(w * CROP_FRACTION), round(h * CROP_FRACTION)
        return _encode(src.crop((dx, dy, w - dx, h - dy)), spec.path, quality=JPEG_QUALITY - 6)
    if spec.kind == "brightened":
        return _encode(ImageEnhance.Brightness(src).enhance(BRIGHTEN_FACTOR), spec.path, quality=JPEG_QUALITY + 6)
    size = (round(w * CONTAMINATED_SCALE), round(h * CONTAMINATED_SCALE))
    return _encode(src.resize(size, Image.Resampling.LANCZOS), spec.path, quality=JPEG_QUALITY - 12)


@lru_cache(maxsize=1)
def _render_images() -> dict[str, bytes]:
    specs = _plan().images
    out: dict[str, bytes] = {}
    for spec in specs.values():  # the originals first
        if spec.kind not in _DERIVED_KINDS:
            data = _encode(_picture(spec), spec.path)
            out[spec.path] = _corrupt(data) if spec.kind == "corrupt" else data
    for spec in specs.values():
        if spec.kind in _DERIVED_KINDS:
            out[spec.path] = _derived(spec, out)
    return out


# --------------------------------------------------------------------------------------------
# Files


MEDIA_TYPE = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
# What a Hugging Face parquet export carries in its schema metadata: the `datasets` features.
_HF_FEATURES = {
    "info": {
        "features": {
            "id": {"dtype": "string", "_type": "Value"},
            "media": {"feature": {"_type": "Image"}, "_type": "Sequence"},
            "messages": {"dtype": "string", "_type": "Value"},
        }
    }
}
PARQUET_SCHEMA = pa.schema(
    [("id", pa.string()), ("media", MEDIA_TYPE), ("messages", pa.string())],
    metadata={b"huggingface": json.dumps(_HF_FEATURES).encode()},
)


def _parquet_bytes(plan: _Plan) -> bytes:
    pixels = _render_images()
    by_id = {g.index: g for g in plan.groups}
    ids, media, messages = [], [], []
    for row in plan.rows:
        embed = row.group in plan.embedded_groups
        ids.append(row.id)
        media.append([{"bytes": pixels[p] if embed else None, "path": p} for p in by_id[row.group].paths])
        messages.append(row.messages)
    table = pa.table({"id": ids, "media": media, "messages": messages}, schema=PARQUET_SCHEMA)
    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        compression="zstd",
        compression_level=3,
        use_dictionary=True,
        write_statistics=True,
        version="2.6",
        data_page_version="1.0",
        row_group_size=len(ids),
    )
    return buf.getvalue()


def _facts(plan: _Plan) -> VisualPRMSampleFacts:
    expected = tuple(r.expected for r in plan.rows if r.expected is not None)
    formats: dict[str, int] = {}
    for e in expected:
        formats[e.message_format] = formats.get(e.message_format, 0) + 1
    embedded = sum(r.group in plan.embedded_groups for r in plan.rows)
    return VisualPRMSampleFacts(
        rows=len(plan.rows),
        expected=expected,
        malformed={r.id: r.fault for r in plan.rows if r.fault is not None},
        formats=dict(sorted(formats.items())),
        embedded_rows=embedded,
        path_only_rows=len(plan.rows) - embedded,
        corrupt_image_path=plan.planted["corrupt"],
    )


def _check(plan: _Plan) -> None:
    """Keep the documented constants and proportions true (the seed fixes them)."""
    p = plan.planted
    documented = {
        "exact": EXACT_DUPLICATE_PATHS,
        "near": NEAR_DUPLICATE_PATHS,
        "corrupt": CORRUPT_IMAGE_PATH,
        "no_folder": NO_FOLDER_IMAGE_PATH,
        "one_step": ONE_STEP_ID,
        "sixteen": SIXTEEN_STEP_ID,
        "one_in_16": MC_ONE_IN_SIXTEEN_ID,
        "no_tag": NO_IMAGE_TAG_IDS,
        "parts": PARTS_CONTENT_IDS,
        "malformed": MALFORMED_IDS,
        "cropped": CROPPED_COPY,
        "brightened": BRIGHTENED_COPY,
        "contaminated": CONTAMINATED,
        "duplicate_sample": DUPLICATE_SAMPLE_IDS,
        "lookalikes": LOOKALIKE_PAIRS,
    }
    drift = {k: p[k] for k, v in documented.items() if p[k] != v}
    labels = [lab for r in plan.rows if r.expected for lab in r.expected.labels]
    share = labels.count("-") / len(labels)
    if drift or not 0.07 <= share <= 0.13:
        raise AssertionError(f"sample plan drifted from its documented constants: {drift}, negative share {share:.3f}")


def visualprm_sample_facts() -> VisualPRMSampleFacts:
    """The facts of the parquet sample without writing anything."""
    plan = _plan()
    _check(plan)
    return _facts(plan)


def write_visualprm_sample(root: Path) -> VisualPRMSampleFacts:
    """Write root/PARQUET_RELPATH; identical bytes on every call, untouched when already right."""
    plan = _plan()
    _check(plan)
    write_if_changed(Path(root) / PARQUET_RELPATH, _parquet_bytes(plan))
    return _facts(plan)


# --------------------------------------------------------------------------------------------
# The InternVL jsonl form


JSONL_MIN_ROWS = 40


def _jsonl_groups(plan: _Plan) -> list[_Group]:
    chosen: list[int] = []
    for path in EXACT_DUPLICATE_PATHS:
        chosen += [g.index for g in plan.groups if path in g.paths]
    for source in _SOURCES:
        first = next(g for g in plan.groups if g.source == source and CORRUPT_IMAGE_PATH not in g.paths)
        if first.index not in chosen:
            chosen.append(first.index)
    for g in plan.groups:  # then more groups in file order, to about 40 lines
        if sum(plan.groups[i].rollouts for i in chosen) >= JSONL_MIN_ROWS:
            break
        if g.index not in chosen and g.source is not None and CORRUPT_IMAGE_PATH not in g.paths:
            chosen.append(g.index)
    return [g for g in plan.groups if g.index in chosen]


def _jsonl_plan() -> tuple[dict[str, bytes], VisualPRMSampleFacts, dict[str, str], str]:
    """(annotation files by relative path, facts, image path -> 'loose' | 'zip' | 'missing', unresolved)."""
    plan = _plan()
    by_source: dict[str, list[tuple[_Group, _Rollout]]] = {}
    for g in _jsonl_groups(plan):
        for r in range(g.rollouts):
            sid = f"{g.source}_{g.index:05d}_{r}"
            by_source.setdefault(g.source, []).append((g, plan.rollouts[sid]))
    files: dict[str, bytes] = {}
    expected: list[ExpectedSample] = []
    for source in sorted(by_source):
        # upstream save_outputs sorts by str(item["image"]); rollouts of one image keep their order
        items = sorted(by_source[source], key=lambda it: (str(_image_field(it[0].paths)), it[1].sample_id))
        lines = []
        for number, (g, ro) in enumerate(items, start=1):
            image = _image_field(g.paths)
            conv = _internvl(g.problem.question, ro.steps, ro.labels, 0)
            lines.append(json.dumps({"id": -1, "image": image, "conversations": conv}) + "\n")
            expected.append(
                ExpectedSample(f"{source}_prm:{number}", source, g.problem.question, g.paths, ro.steps, ro.labels,
                               (None,) * len(ro.steps), "internvl")
            )
        files[f"{JSONL_ANNOTATION_DIR}/{source}_prm.jsonl"] = "".join(lines).encode("ascii")
    paths = sorted({p for e in expected for p in e.image_refs})
    unresolved = next(p for p in paths if p.startswith("scienceqa/"))
    placement, k = {}, 0
    for p in paths:
        if p == unresolved:
            placement[p] = "missing"
        else:
            placement[p] = "loose" if k % 2 == 0 else "zip"
            k += 1
    facts = VisualPRMSampleFacts(
        rows=len(expected),
        expected=tuple(expected),
        malformed={},
        formats={"internvl": len(expected)},
        embedded_rows=0,
        path_only_rows=len(expected),
        corrupt_image_path=None,
    )
    return files, facts, placement, unresolved


def _zip_bytes(images: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(images):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3
            info.external_attr = 0o100644 << 16
            zf.writestr(info, images[name])
    return buf.getvalue()


def write_internvl_jsonl_sample(root: Path) -> VisualPRMSampleFacts:
    """Write the InternVL jsonl form under root/OpenGVLab/VisualPRM400K (see the module docstring)."""
    root = Path(root)
    _check(_plan())
    files, facts, placement, unresolved = _jsonl_plan()
    if unresolved != JSONL_UNRESOLVED_IMAGE:
        raise AssertionError(f"sample plan drifted: unresolved image {unresolved}")
    pixels = _render_images()
    for rel, data in files.items():
        write_if_changed(root / rel, data)
    for path, where in placement.items():
        if where == "loose":
            write_if_changed(root / JSONL_IMAGE_DIR / path, pixels[path])
    write_if_changed(root / JSONL_IMAGE_ZIP, _zip_bytes({p: pixels[p] for p, w in placement.items() if w == "zip"}))
    return facts


def embedded_image(path: str) -> bytes:
    """The bytes the parquet sample embeds for `path` (KeyError for a path it does not embed);
    the VL-RewardBench sample plants a copy of one of them."""
    return _render_images()[path]
