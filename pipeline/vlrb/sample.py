"""The embedded offline sample of VL-RewardBench: a deterministic miniature in the upstream format.

`write_vlrb_sample(root)` writes `root/MMInstruction/VL-RewardBench/data/test-00000-of-00001.parquet`
with the columns of the Hub dataset (one row per preference pair):

    id             string
    query          string
    response       list<string>         two responses
    image          struct<bytes: binary, path: string>   (HF `Image()`)
    human_ranking  list<int64>          ranks of the two responses, 0 = preferred
    models         list<string>         the models that wrote the responses
    judge          string
    rationale      string
    query_source   string               e.g. povid, rlaif-v, wildvision, mathverse, mmmu-pro
    ground_truth   string               null where the source has none

Everything is generated (no upstream bytes): photos drawn from seeded shapes and grain, charts,
math figures. Output is identical byte for byte on every call (seeded `random.Random`, Pillow with
fixed settings, pyarrow with fixed settings).

Planted on purpose (`facts()` carries the ground truth, tests/test_vlrb.py asserts it):

- SHARED_IMAGE_IDS: two pairs over the same image (same bytes): one vlrb_images row.
- CONTAMINATED: the image of one pair is the VisualPRM sample's embedded picture
  CONTAMINATED[0], scaled by 1.1 and re-encoded as JPEG: a VisualPRM training image that leaks
  this eval set.
- TEXT_LEAK: the query of one reasoning pair is the question of a VisualPRM sample group (a
  geometry problem with choices) under MathVista's `Hint: … Question:` frame, with its choices
  written `A.` instead of `(A)` and its lines re-wrapped, over an unrelated picture: every rollout
  of that group copies this eval item by its text (leak `text`).
- FULL_LEAK: CONTAMINATED's pair also asks the question of the VisualPRM group that shows that
  picture (upper-cased, curly quotes, with "Answer the question using a single word or phrase."
  appended): its rollouts copy it by picture and text (leak `full`).
- FAULTS (id → what is wrong; each pair is quarantined at parse by the record contract or the
  parser, the rest publishes): a ranking that is not a permutation of (0, 1), an empty response,
  three responses, no image, and an id that repeats an earlier row's.
- CORRUPT_ID: its image bytes are a JPEG cut inside its header (the pair stays, its image is
  `corrupt` and quarantined at decode).
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw, ImageFilter

from pipeline.sources.base import write_if_changed

SAMPLE_VERSION = "2"
RELPATH = "MMInstruction/VL-RewardBench/data/test-00000-of-00001.parquet"
SEED = 1_250
ROWS = 100  # pairs written (the planted faults among them)
SOURCES = ("povid", "rlaif-v", "rlhf-v", "wildvision", "vlfeedback", "mathverse", "mmmu-pro")
MODELS = ("gpt-4o", "claude-3.5-sonnet", "gemini-1.5-pro", "qwen2-vl-72b", "llava-ov-7b", "internvl2-8b")
REASONING = ("mathverse", "mmmu-pro")

CONTAMINATED = ("ai2d/abc_images/2524.png", "VLRB_0007")  # (VisualPRM path, VL-RewardBench pair id)
CONTAMINATED_SCALE = 1.1
SHARED_IMAGE_IDS = ("VLRB_0011", "VLRB_0012")
TEXT_LEAK_ID = "VLRB_0034"  # a mathverse pair: its query copies a VisualPRM geometry question
TEXT_LEAK_SOURCE = "geoqa+"  # the VisualPRM source whose first question it copies
FULL_LEAK_ID = CONTAMINATED[1]
CORRUPT_ID = "VLRB_0020"
FAULTS = {
    "VLRB_0003": "human_ranking is [0, 0]",
    "VLRB_0014": "response B is empty",
    "VLRB_0017": "three responses",
    "VLRB_0024": "no image",
}
DUPLICATE_ID = "VLRB_0009"  # a second row with this id comes last: the parser keeps the first

SCHEMA = pa.schema([
    ("id", pa.string()), ("query", pa.string()), ("response", pa.list_(pa.string())),
    ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
    ("human_ranking", pa.list_(pa.int64())), ("models", pa.list_(pa.string())), ("judge", pa.string()),
    ("rationale", pa.string()), ("query_source", pa.string()), ("ground_truth", pa.string()),
])


@dataclass(frozen=True)
class Facts:
    ids: tuple[str, ...]  # every id in file order (the duplicate twice)
    published: tuple[str, ...]  # pair ids that reach vlrb_pairs
    quarantined: dict  # pair id -> what is wrong
    chosen: dict  # published pair id -> "A" | "B"
    distinct_images: int  # decodable or not, one per content
    corrupt_image_pair: str
    contaminated: tuple[str, str]
    # pair id -> the VisualPRM sample ids that copy it: by text only, and by text and picture
    text_leak: dict = field(default_factory=dict)
    full_leak: dict = field(default_factory=dict)


def _photo(rng: random.Random, w: int, h: int) -> Image.Image:
    top = tuple(rng.randrange(40, 220) for _ in range(3))
    bottom = tuple(rng.randrange(20, 200) for _ in range(3))
    img = Image.new("RGB", (w, h))
    draw = ImageDraw.Draw(img)
    for y in range(h):
        t = y / max(h - 1, 1)
        draw.line([(0, y), (w, y)], fill=tuple(round(a + (b - a) * t) for a, b in zip(top, bottom)))
    for _ in range(rng.randrange(4, 9)):
        x0, y0 = rng.randrange(-w // 4, w), rng.randrange(-h // 4, h)
        x1, y1 = x0 + rng.randrange(w // 8, w // 2), y0 + rng.randrange(h // 8, h // 2)
        fill = tuple(rng.randrange(0, 256) for _ in range(3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=fill)
        else:
            draw.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=fill)
    img = img.filter(ImageFilter.GaussianBlur(1.2))
    noise = Image.frombytes("L", (w, h), rng.randbytes(w * h)).convert("RGB")  # grain, seeded
    return Image.blend(img, noise, 0.06)


def _chart(rng: random.Random, w: int, h: int) -> Image.Image:
    img = Image.new("RGB", (w, h), (250, 250, 246))
    draw = ImageDraw.Draw(img)
    n = rng.randrange(3, 8)
    left, bottom = 24, h - 20
    draw.line([(left, 10), (left, bottom), (w - 8, bottom)], fill=(30, 30, 30), width=2)
    step = (w - left - 16) // n
    colour = tuple(rng.randrange(20, 200) for _ in range(3))
    for i in range(n):
        top = rng.randrange(16, bottom - 12)
        draw.rectangle([left + 6 + i * step, top, left + i * step + step - 2, bottom - 1], fill=colour)
    for _ in range(rng.randrange(1, 4)):
        y = rng.randrange(16, bottom)
        draw.line([(left, y), (w - 8, y)], fill=(200, 200, 200), width=1)
    return img


def _figure(rng: random.Random, w: int, h: int) -> Image.Image:
    img = Image.new("RGB", (w, h), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randrange(2, 5)):
        pts = [(rng.randrange(10, w - 10), rng.randrange(10, h - 10)) for _ in range(rng.randrange(3, 6))]
        draw.polygon(pts, outline=(0, 0, 0), width=2)
    cx, cy, r = rng.randrange(w // 4, 3 * w // 4), rng.randrange(h // 4, 3 * h // 4), rng.randrange(15, min(w, h) // 3)
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline=(20, 20, 160), width=2)
    return img


def _encode(img: Image.Image, fmt: str, quality: int = 85) -> bytes:
    buf = io.BytesIO()
    if fmt == "JPEG":
        img.convert("RGB").save(buf, format="JPEG", quality=quality, optimize=False, progressive=False)
    else:
        img.save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def _contaminated_copy() -> bytes:
    from pipeline.visualprm.sample import embedded_image

    with Image.open(io.BytesIO(embedded_image(CONTAMINATED[0]))) as src:
        src = src.convert("RGB")
        size = (round(src.width * CONTAMINATED_SCALE), round(src.height * CONTAMINATED_SCALE))
        return _encode(src.resize(size, Image.Resampling.LANCZOS), "JPEG", quality=90)


def _copied_questions() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The planted copies of VisualPRM questions: pair id -> (query, the VisualPRM sample ids
    whose question it copies). Re-written the way a benchmark re-words a problem it took."""
    from pipeline.visualprm.sample import visualprm_sample_facts

    expected = visualprm_sample_facts().expected

    def group(question: str) -> tuple[str, ...]:
        return tuple(e.sample_id for e in expected if e.question == question)

    geo = next(e for e in expected if e.source == TEXT_LEAK_SOURCE and "\nChoices:\n" in e.question)
    stem, _, choices = geo.question.partition("\nChoices:\n")
    rewrapped = stem.replace(", ", ",\n", 1)
    lettered = " ".join(f"({line[0]}) {line[2:].strip()}" for line in choices.splitlines() if line[1:2] == ":")
    text_query = ("Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.\n"
                  f"Question: {rewrapped}\nChoices: {lettered}")
    shown = next(e for e in expected if CONTAMINATED[0] in e.image_refs)
    full_query = (shown.question.upper().replace("'", "\u2019").replace('"', "\u201c")
                  + "\nAnswer the question using a single word or phrase.")
    return {TEXT_LEAK_ID: (text_query, group(geo.question)), FULL_LEAK_ID: (full_query, group(shown.question))}


def _texts(rng: random.Random, source: str, k: int) -> tuple[str, str, str, str | None]:
    subject = rng.choice(("the red object", "the largest shape", "the tallest bar", "the circle", "the sky",
                          "the shaded region", "the left half", "the figure"))
    if source in REASONING:
        answer = str(rng.randrange(2, 90))
        query = f"Question {k}: what is the value asked about {subject}? Answer with a number."
        good = f"Reading the figure, {subject} gives {answer}. So the answer is {answer}."
        bad = f"Looking at {subject}, the value is {int(answer) + rng.randrange(1, 9)}. So the answer is that."
        return query, good, bad, answer
    query = f"Describe {subject} in this image in detail (item {k})."
    good = f"The image shows {subject} near the centre, with softer shapes behind it."
    bad = f"The image shows {subject} next to a dog wearing a hat, which is not in the picture."
    return query, good, bad, None


@lru_cache(maxsize=1)
def _rows() -> tuple[list[dict], Facts]:
    rng = random.Random(SEED)
    copied = _copied_questions()
    rows, chosen = [], {}
    shared = None
    for k in range(1, ROWS + 1):
        pid = f"VLRB_{k:04d}"
        source = SOURCES[(k - 1) % len(SOURCES)]
        w, h = rng.randrange(240, 360), rng.randrange(200, 300)
        kind = "chart" if source in REASONING and k % 2 else "figure" if source in REASONING else "photo"
        picture = {"photo": _photo, "chart": _chart, "figure": _figure}[kind](rng, w, h)
        fmt = "PNG" if kind != "photo" else "JPEG"
        data = _encode(picture, fmt)
        if pid == CONTAMINATED[1]:
            data, fmt = _contaminated_copy(), "JPEG"
        if pid == SHARED_IMAGE_IDS[0]:
            shared = data
        if pid == SHARED_IMAGE_IDS[1]:
            data = shared
        if pid == CORRUPT_ID:
            data = data[:300]  # cut inside the JPEG header: not decodable
        query, good, bad, truth = _texts(rng, source, k)
        if pid in copied:
            query = copied[pid][0]
        a_first = rng.random() < 0.5
        models = rng.sample(MODELS, 2)
        row = {
            "id": pid, "query": query, "response": [good, bad] if a_first else [bad, good],
            "image": {"bytes": data, "path": f"{pid.lower()}.{'jpg' if fmt == 'JPEG' else 'png'}"},
            "human_ranking": [0, 1] if a_first else [1, 0], "models": models,
            "judge": rng.choice(("human", "gpt-4o+human")),
            "rationale": "The preferred response is accurate; the other " + ("misreads the figure." if truth else "hallucinates."),
            "query_source": source, "ground_truth": truth,
        }
        fault = FAULTS.get(pid)
        if fault == "human_ranking is [0, 0]":
            row["human_ranking"] = [0, 0]
        elif fault == "response B is empty":
            row["response"] = [row["response"][0], ""]
        elif fault == "three responses":
            row["response"] = row["response"] + ["A third answer nobody ranked."]
        elif fault == "no image":
            row["image"] = None
        rows.append(row)
        if pid not in FAULTS:
            chosen[pid] = "A" if a_first else "B"
    first = next(r for r in rows if r["id"] == DUPLICATE_ID)
    rows.append({**first, "query": first["query"] + " (again)"})
    published = tuple(pid for pid in chosen)
    images = {r["image"]["bytes"] for r in rows if r["image"] is not None}
    facts = Facts(ids=tuple(r["id"] for r in rows), published=published,
                  quarantined={**FAULTS, DUPLICATE_ID: "id repeats an earlier row"}, chosen=chosen,
                  distinct_images=len(images), corrupt_image_pair=CORRUPT_ID, contaminated=CONTAMINATED,
                  text_leak={TEXT_LEAK_ID: copied[TEXT_LEAK_ID][1]}, full_leak={FULL_LEAK_ID: copied[FULL_LEAK_ID][1]})
    return rows, facts


def facts() -> Facts:
    return _rows()[1]


def parquet_bytes() -> bytes:
    rows, _ = _rows()
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), buf, compression="zstd", compression_level=3,
                   row_group_size=len(rows), write_statistics=True, store_schema=True)
    return buf.getvalue()


def write_vlrb_sample(root: Path) -> Facts:
    """Write (or leave alone, when already right) the sample parquet under `root`."""
    write_if_changed(Path(root) / RELPATH, parquet_bytes())
    return facts()
