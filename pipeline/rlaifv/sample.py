"""The embedded offline sample of RLAIF-V: a deterministic miniature in the upstream format.

`write_rlaifv_sample(root)` writes two shards at the repository root, as upstream lays them out:

    root/openbmb/RLAIF-V-Dataset/RLAIF-V-Dataset_000.parquet   80 rows
    root/openbmb/RLAIF-V-Dataset/RLAIF-V-Dataset_001.parquet   51 rows

with the columns of the Hub dataset (one row per preference pair; every column a string but the
image):

    ds_name         string
    image           struct<bytes: binary, path: string>   (HF `Image()`)
    question        string
    chosen          string
    rejected        string
    origin_dataset  string               where the image or question came from
    origin_split    string               '{"model": ..., "feedback_model": ..., "type": ...}'
    idx             string               upstream's id: pair id `rlaifv:<idx>` (`#<n>` on its n-th row)
    image_path      string

Everything is generated (no upstream bytes) but the contaminated picture, which is taken from the
VL-RewardBench sample. Output is identical byte for byte on every call (seeded `random.Random`,
Pillow with fixed settings, pyarrow with fixed settings).

Planted on purpose (`facts()` carries the ground truth, tests/test_rlaifv.py asserts it):

- CONTAMINATED: the image of one pair is the picture of a published VL-RewardBench sample pair,
  scaled by 1.08 and re-encoded as JPEG: an eval image in this training set, for the shared
  dedupe to find (train <-> eval contamination).
- EXACT_DUPLICATE: one row repeats another's image, question and both responses under another
  idx (`exact_duplicate_of` names the first).
- SAME_QUESTION: two rows, one per shard, ask the same question (other case and spacing) of the
  same image bytes with other responses (one `dup_group`).
- FAULTS (pair id -> what is wrong; each is quarantined at parse, the rest publishes): an empty
  chosen response, chosen and rejected the same text, and no image (twice, once per shard). Few
  enough (and one corrupt image) to stay under the release's 5 % quarantine budget.
- REPEATED_IDX: the last row of the second shard comes with the idx of a row of the first: a
  second pair (another question, other responses) over that row's image, as upstream builds
  several pairs per image. Not a fault: it publishes as `rlaifv:<idx>#2`.
- CORRUPT_ID: its image bytes are a JPEG cut inside its header (the pair stays, its image is
  `corrupt` and quarantined at decode).
- NO_IDX_ID: a row without an idx, named by its shard and row.
- origin_split: JSON for most rows; ORIGIN_PYTHON in Python's single-quoted form, ORIGIN_PLAIN
  plain text, ORIGIN_NULL none at all.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image, ImageDraw, ImageFilter

from pipeline.rlaifv.layout import REPO
from pipeline.sources.base import write_if_changed

SAMPLE_VERSION = "2"
SHARDS = (f"{REPO}/RLAIF-V-Dataset_000.parquet", f"{REPO}/RLAIF-V-Dataset_001.parquet")
FIRST_SHARD_ROWS = 80  # rows k = 0..79 go to the first shard, the rest (and the repeat) to the second
ROWS = 130  # rows k generated; the repeated idx's row is one more, the last of the second shard
SEED = 4_117
IDX_BASE = 1000  # idx of row k is str(1000 + k): equal widths, so ids sort as numbers

DS_NAMES = ("RLAIF-V", "RLAIF-V-llava", "RLAIF-V-omni")
ORIGIN_DATASETS = ("COCO", "VQAv2", "OK-VQA", "GQA", "VizWiz", "ShareGPT4V")
MODELS = ("OmniLMM-12B", "LLaVA-1.5-7B", "MiniCPM-V-2")
FEEDBACK_MODELS = ("RLAIF-V-12B", "LLaVA-NeXT-34B")
TYPES = ("question_answering", "detailed_description")


def _pid(k: int) -> str:
    return f"rlaifv:{IDX_BASE + k}"


CONTAMINATED = ("VLRB_0002", _pid(5))  # (VL-RewardBench pair id, RLAIF-V pair id)
CONTAMINATED_SCALE = 1.08
EXACT_DUPLICATE = (_pid(70), _pid(11))  # (the repeat, the pair it repeats)
SAME_QUESTION = (_pid(20), _pid(104))  # one image, one question (re-cased, re-spaced), other responses
CORRUPT_ID = _pid(24)
FAULTS = {
    _pid(7): "chosen is empty",
    _pid(14): "chosen and rejected are the same text",
    _pid(17): "no image",
    _pid(97): "no image",
}
REPEATED_IDX = (f"{_pid(3)}#2", _pid(3))  # (the last row of the second shard, the first row with its idx)
NO_IDX_K = 116
NO_IDX_ID = f"rlaifv:RLAIF-V-Dataset_001.parquet#{NO_IDX_K - FIRST_SHARD_ROWS}"
ORIGIN_PYTHON, ORIGIN_PLAIN, ORIGIN_NULL = _pid(16), _pid(9), _pid(27)

SCHEMA = pa.schema([
    ("ds_name", pa.string()), ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
    ("question", pa.string()), ("chosen", pa.string()), ("rejected", pa.string()), ("origin_dataset", pa.string()),
    ("origin_split", pa.string()), ("idx", pa.string()), ("image_path", pa.string()),
])


@dataclass(frozen=True)
class Facts:
    rows: dict  # shard relpath -> rows written
    ids: tuple[str, ...]  # every row's pair id in file order, each once
    published: tuple[str, ...]  # pair ids that reach rlaifv_pairs, in file order
    quarantined: dict  # pair id -> what is wrong
    repeated_idx: dict  # pair id of a row repeating an idx -> the pair id of the first row with it
    distinct_images: int  # rlaifv_images rows: one per content among the rows read, decodable or not
    corrupt_image_pair: str
    contaminated: tuple[str, str]  # (VL-RewardBench pair id, RLAIF-V pair id)
    exact_duplicates: dict  # pair id -> the earlier pair it repeats
    dup_groups: dict  # published pair id -> its group (the smallest pair id asking the same of the same image)
    origin: dict  # published pair id -> (model, feedback_model, type) read from origin_split, None where not a dict
    ds_names: dict  # ds_name -> how many published pairs carry it


def _scene(rng: random.Random, w: int, h: int) -> Image.Image:
    """A seeded picture: a two-tone ground, blocks and discs, a little blur and grain."""
    sky, ground = (tuple(rng.randrange(30, 230) for _ in range(3)) for _ in range(2))
    img = Image.new("RGB", (w, h), sky)
    draw = ImageDraw.Draw(img)
    horizon = rng.randrange(h // 3, 2 * h // 3)
    draw.rectangle([0, horizon, w, h], fill=ground)
    for _ in range(rng.randrange(3, 8)):
        x, y = rng.randrange(0, w), rng.randrange(0, h)
        size = rng.randrange(min(w, h) // 10, min(w, h) // 3)
        fill = tuple(rng.randrange(0, 256) for _ in range(3))
        box = [x - size, y - size // 2, x + size, y + size // 2]
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
    img = img.filter(ImageFilter.BoxBlur(1))
    grain = Image.frombytes("L", (w, h), rng.randbytes(w * h)).convert("RGB")
    return Image.blend(img, grain, 0.05)


def _encode(img: Image.Image, fmt: str, quality: int = 85) -> bytes:
    buf = io.BytesIO()
    if fmt == "JPEG":
        img.convert("RGB").save(buf, format="JPEG", quality=quality, optimize=False, progressive=False)
    else:
        img.save(buf, format="PNG", optimize=False, compress_level=1)  # grain: level 6 is no smaller, 4x slower
    return buf.getvalue()


def _contaminated_copy() -> bytes:
    """The VL-RewardBench sample pair's picture, 108 % and re-encoded: what a crawl that met the
    benchmark's image elsewhere would hold."""
    from pipeline.vlrb import sample as vlrb

    eval_id = CONTAMINATED[0]
    facts = vlrb.facts()
    planted = {*facts.quarantined, facts.corrupt_image_pair, facts.contaminated[1], *vlrb.SHARED_IMAGE_IDS,
               *facts.text_leak, *facts.full_leak}
    if eval_id not in facts.published or eval_id in planted:
        raise ValueError(f"{eval_id} must be a plain published VL-RewardBench sample pair")
    table = pq.read_table(io.BytesIO(vlrb.parquet_bytes()), columns=["id", "image"])
    row = table.filter(pc.equal(table["id"], eval_id)).to_pylist()[0]
    with Image.open(io.BytesIO(row["image"]["bytes"])) as src:
        src = src.convert("RGB")
        size = (round(src.width * CONTAMINATED_SCALE), round(src.height * CONTAMINATED_SCALE))
        return _encode(src.resize(size, Image.Resampling.LANCZOS), "JPEG", quality=90)


def _texts(rng: random.Random, kind: str, k: int) -> tuple[str, str, str]:
    """A question and its chosen (faithful) and rejected (hallucinating) answers, worded unlike
    the other samples' so that no text leak is planted by accident."""
    thing = rng.choice(("blue disc", "tall block", "green patch", "bright shape", "dark band", "small square"))
    place = rng.choice(("horizon", "left edge", "lower corner", "middle", "top border"))
    if kind == "question_answering":
        question = f"Which {thing} sits nearest the {place} in scene {k}, and how big is it?"
        chosen = f"The {thing} nearest the {place} is medium sized and partly covered by another shape."
        rejected = f"The {thing} nearest the {place} is a parked bicycle leaning against a fence."
    else:
        question = f"Give a thorough account of scene {k}, starting from the {thing} by the {place}."
        chosen = f"A {thing} rests by the {place}; plain shapes in soft colours fill the rest of the frame."
        rejected = f"A {thing} rests by the {place} while two people wave from a balcony above it."
    return question, chosen, rejected


def _origin_split(rng: random.Random, pid: str, kind: str) -> tuple[str | None, tuple | None]:
    """The origin_split text written for a row, and what the parser should read from it."""
    model, feedback = rng.choice(MODELS), rng.choice(FEEDBACK_MODELS)
    meta = {"model": model, "feedback_model": feedback, "type": kind}
    if pid == ORIGIN_PLAIN:
        return f"{kind} by {model}", None
    if pid == ORIGIN_NULL:
        return None, None
    text = repr(meta) if pid == ORIGIN_PYTHON else json.dumps(meta)
    return text, (model, feedback, kind)


@lru_cache(maxsize=1)
def _rows() -> tuple[tuple[list[dict], ...], Facts]:
    rng = random.Random(SEED)
    rows, origin, by_id = [], {}, {}
    for k in range(ROWS):
        pid = _pid(k)
        kind = TYPES[k % 2]
        w, h = rng.randrange(200, 320), rng.randrange(160, 260)
        fmt = "PNG" if k % 5 == 4 and pid != CORRUPT_ID else "JPEG"
        data = _encode(_scene(rng, w, h), fmt)
        question, chosen, rejected = _texts(rng, kind, k)
        split, read = _origin_split(rng, pid, kind)
        source = ORIGIN_DATASETS[k % len(ORIGIN_DATASETS)]
        if pid == CONTAMINATED[1]:
            data, fmt = _contaminated_copy(), "JPEG"
        if pid == EXACT_DUPLICATE[0]:
            first = by_id[EXACT_DUPLICATE[1]]
            data, question, chosen, rejected = first["image"]["bytes"], first["question"], first["chosen"], first["rejected"]
            split, read = first["origin_split"], origin[EXACT_DUPLICATE[1]]
        if pid == SAME_QUESTION[1]:
            first = by_id[SAME_QUESTION[0]]
            data, question = first["image"]["bytes"], "  " + first["question"].upper().replace(" ", "  ", 3)
            chosen = "It is small and stands a little apart from the other shapes."
            rejected = "It is a red umbrella opened over a picnic table."
        if pid == CORRUPT_ID:
            data = data[:300]  # cut inside the JPEG header: not decodable
        idx = None if k == NO_IDX_K else str(IDX_BASE + k)
        path = f"{source}/{idx or 'noidx'}.{'jpg' if fmt == 'JPEG' else 'png'}"
        row = {
            "ds_name": DS_NAMES[k % len(DS_NAMES)], "image": {"bytes": data, "path": path},
            "question": question, "chosen": chosen, "rejected": rejected, "origin_dataset": source,
            "origin_split": split, "idx": idx, "image_path": path,
        }
        fault = FAULTS.get(pid)
        if fault == "chosen is empty":
            row["chosen"] = ""
        elif fault == "chosen and rejected are the same text":
            row["rejected"] = row["chosen"].replace(" ", "  ", 1)  # the same words, spaced otherwise
        elif fault == "no image":
            row["image"] = None
        pid = NO_IDX_ID if idx is None else pid
        by_id[pid] = row
        rows.append(row)
        if pid not in FAULTS:
            origin[pid] = read
    repeat_id, first_id = REPEATED_IDX
    k = int(by_id[first_id]["idx"]) - IDX_BASE
    by_id[repeat_id] = {  # another question over the same picture, other responses, the same idx
        **by_id[first_id],
        "question": f"How many shapes stand clear of the others in scene {k}, and which is the largest?",
        "chosen": "Two shapes stand apart; the larger one is the block nearest the horizon.",
        "rejected": "Five shapes stand apart; the largest is a striped beach ball in the grass.",
    }
    origin[repeat_id] = origin[first_id]
    shards = (rows[:FIRST_SHARD_ROWS], rows[FIRST_SHARD_ROWS:] + [by_id[repeat_id]])
    ids = tuple(by_id)  # file order: the repeat was met last
    published = tuple(pid for pid in ids if pid not in FAULTS)
    groups = {EXACT_DUPLICATE[0]: EXACT_DUPLICATE[1], EXACT_DUPLICATE[1]: EXACT_DUPLICATE[1],
              SAME_QUESTION[0]: SAME_QUESTION[0], SAME_QUESTION[1]: SAME_QUESTION[0]}
    names = [by_id[pid]["ds_name"] for pid in published]
    facts = Facts(
        rows={path: len(part) for path, part in zip(SHARDS, shards)}, ids=ids, published=published,
        quarantined=dict(FAULTS), repeated_idx={repeat_id: first_id},
        distinct_images=len({r["image"]["bytes"] for part in shards for r in part if r["image"] is not None}),
        corrupt_image_pair=CORRUPT_ID, contaminated=CONTAMINATED,
        exact_duplicates={EXACT_DUPLICATE[0]: EXACT_DUPLICATE[1]}, dup_groups=groups,
        origin=origin, ds_names={n: names.count(n) for n in DS_NAMES},
    )
    return shards, facts


def facts() -> Facts:
    return _rows()[1]


@lru_cache(maxsize=1)
def shard_bytes() -> dict[str, bytes]:
    """Each shard's parquet file, by its path under the sample root."""
    out = {}
    for path, rows in zip(SHARDS, _rows()[0]):
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), buf, compression="zstd", compression_level=3,
                       row_group_size=len(rows), write_statistics=True, store_schema=True)
        out[path] = buf.getvalue()
    return out


def write_rlaifv_sample(root: Path) -> Facts:
    """Write (or leave alone, when already right) the sample shards under `root`."""
    for path, data in shard_bytes().items():
        write_if_changed(Path(root) / path, data)
    return facts()
