"""The embedded offline sample: a small, deterministic miniature of MMRB2 in the exact upstream formats.

`write_sample(root)` leaves the upstream layout (see `pipeline.sources.base`) under `root`:

    root/facebook/MMRB2_image/image.zip                          entries images/{name}, sorted
    root/facebookresearch/MMRB2/benchmark/{task}_response_only.json   for t2i, edit, interleaved, reasoning
    root/facebookresearch/MMRB2/benchmark/new_task_release.json       prompts of the edit pairs

Everything is generated here (no upstream bytes are copied): pair ids, model names, texts and
images only *look like* the real files. The output is identical byte for byte on every call, in
every process and directory: a seeded `random.Random` per object, fixed ordering, fixed zip
timestamps, JPEG encoding through Pillow with fixed settings, and JSON dumped the way upstream is
(`indent=2`, ASCII escapes, no trailing newline — `json.dumps(upstream_obj, indent=2)` reproduces
the real files exactly).

Upstream quirks planted on purpose (each one is asserted by tests/test_source_sample.py):

- human_annotations: three ints 1..6 for t2i/edit/interleaved (sum > 10.5 exactly when A was
  chosen, as upstream); for reasoning a dict {response_a_ratings, response_b_ratings} of
  "A"/"B"/"C" lists, some of them empty.
- prompt_metadata.id is an int for wise, dreambench, new_synthetic_edit, text_heavy_edit, emu-edit,
  hq-edit, interleavedeval and mmmg, a string elsewhere (with leading zeros for evalmuse,
  isgbench, visulogic); `category` is a list for mindcube, a string elsewhere, absent for
  evalmuse, realunify_ueg, hq-edit, interleavedeval, blink, muirbench, visulogic, realunify.
- ids (and therefore image names) with spaces: r2ibench "logical_Sufficient Conditional_…".
- negative numbers inside ids ("…_-8123…_"), and a doubled underscore where the prompt id is empty
  (dreambench__…, interleavedeval__…).
- images per response: t2i exactly 1; edit 1 with one response holding 2; interleaved 1–4 between
  text; reasoning 0–3 between text, several responses with no image at all.
- new_task_release.json prompt images named with colons and slashes
  (dreambench_source:object_27_mug/2_0.jpg, synthetic_images/GPTGeminiAgent_…T21:14:07.318254_0.jpg),
  one of them shared by two pairs; stored in the zip under images/{name} with the slash kept.

Planted faults and duplicates (names fixed by the seed; write_sample checks them):

- CORRUPT_IMAGE is in the zip but holds a JPEG cut off inside its header: Pillow cannot decode it
  (not even with ImageFile.LOAD_TRUNCATED_IMAGES).
- MISSING_IMAGE is referenced by reasoning_response_only.json but absent from the zip.
- NEAR_DUPLICATE_IMAGES: the second is the first decoded, resized by a few pixels and re-encoded
  at another JPEG quality (different bytes, same picture).
- EXACT_DUPLICATE_IMAGES: the second holds the very bytes of the first under another pair's name.
- CROPPED_COPY: the second is the first decoded, cut by CROP_FRACTION of its width and height on
  every side and re-encoded at another JPEG quality, under the name of a response of another pair.
- BRIGHTENED_COPY: the second is the first decoded, brightened by BRIGHTEN_FACTOR and re-encoded,
  under the name of a response of another pair.
- PLANTED_NEAR_PAIRS lists all four pairs: each is within pHash (imagehash.phash, 64 bits) Hamming
  distance 6 of its original (0 for the exact copy), while every other two decodable images of this
  sample and of the VisualPRM sample (pipeline.visualprm.sample) are at distance 14 or more;
  tests/test_source_sample.py measures it. sample_image(name) hands the bytes of one zip image to
  the VisualPRM sample, which plants a near-copy of one of them.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import uuid
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageChops, ImageDraw, ImageEnhance, ImageFont

from pipeline.settings import MMRB2_TASKS
from pipeline.sources.base import ChecksumCache, RawSnapshot, write_if_changed
from pipeline.mmrb2.layout import ANNOTATION_DIR, IMAGE_DIR, NEW_TASK_FILE, snapshot_from_layout

SAMPLE_VERSION = "1"
SEED = 20251220  # the upstream annotation commit date; change it and every constant below changes
ZIP_NAME = "image.zip"
ZIP_PREFIX = "images/"
ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)
JPEG_QUALITY = 80

CORRUPT_IMAGE = "risebench_causal_reasoning_17_347686857585983089_gemini-2.0-flash_4219_imagen-edit_219_1.jpg"
MISSING_IMAGE = "vstar_131_GPT5_Gemini_SketchpadAgent_465_O3_Gemini_SketchpadAgent_463_2.jpg"
NEAR_DUPLICATE_IMAGES = (
    "evalmuse_02718_-2890980219122741248_imagen4-ultra_4505_imagen4-ultra_505_0.jpg",
    "evalmuse_02718_-2890980219122741248_imagen4-ultra_4505_imagen4-ultra_505_1.jpg",
)
EXACT_DUPLICATE_IMAGES = (
    "chameleon_ef9a2d51-9f2c-41b1-bff9-857c56cd516e_1861549491225900207_gpt-imagen-agent_2414_gpt-image-agent_414_0.jpg",
    "chameleon_e5107129-7e4f-4a40-861b-4b6b11ab566b_-794683830333257013_gemini-2.0-flash_6552_gpt-gemini-agent_552_2.jpg",
)
CROPPED_COPY = (
    "interleavedeval__2747862600049231019_gpt-imagen-agent_6797_gpt-gemini-agent_797_1.jpg",
    "hq-edit_318_-2263586102388815385_gemini-2.5-flash_5508_flux-kontext_508_0.jpg",
)
BRIGHTENED_COPY = (
    "wise_412_3591808398015666109_imagen3_5161_gemini-2.0-flash_161_0.jpg",
    "isgbench_0412_-8328960670581685083_gemini-2.0-flash_2757_gemini-2.0-flash_757_1.jpg",
)
# every (original, copy) pair a near-duplicate search must find; no two other images come close
PLANTED_NEAR_PAIRS = (NEAR_DUPLICATE_IMAGES, EXACT_DUPLICATE_IMAGES, CROPPED_COPY, BRIGHTENED_COPY)
CROP_FRACTION = 0.05  # cut off each side of the cropped copy
BRIGHTEN_FACTOR = 1.15  # +15% brightness


@dataclass(frozen=True)
class SampleFacts:
    """What the generator planted, for tests and docs."""

    pairs_per_task: dict[str, int]
    chosen_a: dict[str, int]  # pairs with chosen == "A" per task
    image_refs: int  # image items in response_content over all tasks
    corrupt_image: str  # name of the one corrupt image (present in zip, undecodable)
    missing_image: str  # name referenced by an annotation but absent from the zip
    names_with_space: tuple[str, ...]  # image names (responses and prompts) containing a space
    names_with_colon: tuple[str, ...]  # image names (responses and prompts) containing a colon
    near_duplicates: tuple[str, ...] = ()
    exact_duplicates: tuple[str, ...] = ()
    cropped_copy: tuple[str, ...] = ()  # (original, cropped and re-encoded copy)
    brightened_copy: tuple[str, ...] = ()  # (original, brightened and re-encoded copy)
    prompt_images: tuple[str, ...] = ()  # distinct image names in new_task_release.json


# --------------------------------------------------------------------------------------------
# The plan: pure data (JSON documents plus one recipe per image), no pixels yet.


@dataclass(frozen=True)
class _ImageSpec:
    name: str
    seed: int
    size: tuple[int, int]
    label: str
    kind: str = "normal"  # normal | near_dup | exact_dup | cropped | brightened | corrupt | missing
    of: str | None = None  # the original, for near_dup / exact_dup / cropped / brightened


@dataclass
class _Plan:
    tasks: dict[str, list[dict]]
    new_task: list[dict]
    images: list[_ImageSpec] = field(default_factory=list)


T2I_MODELS = (
    "imagen4",
    "imagen4-ultra",
    "imagen3",
    "gpt-image-1",
    "flux",
    "gemini-2.0-flash",
    "gemini-2.5-flash",
    "stable-diffusion-3.5-large",
)
EDIT_MODELS = ("gemini-2.0-flash", "gemini-2.5-flash", "gpt-image-1", "imagen-edit", "flux-kontext")
INTERLEAVED_MODELS = (
    "gpt-gemini-agent",
    "gemini-2.5-flash",
    "gpt-image-agent",
    "gemini-2.0-flash",
    "gpt-flux-agent",
    "gpt-imagen-agent",
)
SKETCH_MODELS = ("GPT5_Gemini_SketchpadAgent", "O3_Gemini_SketchpadAgent")
TEXT_MODELS = ("gpt-4.1", "Gemini_gemini_2.5_flash_text", "Gemini_gemini_2.5_pro", "gpt-4o", "o3")

# Per pair: prompt source, the id part after the source ("" gives upstream's doubled underscore),
# prompt_metadata, chosen, and for the multi-image tasks the response layouts (I = image, T = text).
_T2I = [
    ("oneigbench", "087", {"id": "087", "category": "Text_Rendering"}, "A"),
    (
        "r2ibench",
        "logical_Sufficient Conditional_31",
        {"id": "logical_Sufficient Conditional_31", "category": "logical"},
        "B",
    ),
    ("evalmuse", "02718", {"id": "02718"}, "A"),
    ("wise", "412", {"id": 412, "category": "Chemistry", "version": "rewrite"}, "A"),
    ("r2ibench", "logical_Disjunctive_58", {"id": "logical_Disjunctive_58", "category": "logical"}, "B"),
    ("oneigbench", "203", {"id": "203", "category": "General_Object"}, "A"),
    ("realunify_ueg", "UEG_41_world_knowledge", {"id": "UEG_41_world_knowledge"}, "B"),
    (
        "r2ibench",
        "logical_Sufficient Conditional_9",
        {"id": "logical_Sufficient Conditional_9", "category": "logical"},
        "A",
    ),
]

# (source, id part, metadata, chosen, images in response_a, images in response_b, new-task prompt or None)
# new-task prompt: (prompt image names, prompt text, new_task_release prompt_metadata)
_MUG = "dreambench_source:object_27_mug/2_0.jpg"
_TURTLE = "dreambench_source:live_subject_animal_18_sea_turtle/0_0.jpg"
_SYN_0 = "synthetic_images/GPTGeminiAgent_gemini_2_5_flash_2025-09-18T21:14:07.318254_0.jpg"
_SYN_1 = "synthetic_images/GPTGeminiAgent_gemini_2_5_flash_2025-09-18T21:14:07.318254_1.jpg"
_SYN_2 = "synthetic_images/GPTGeminiAgent_gemini_2_5_flash_2025-09-18T19:26:41.002913_0.jpg"
_BOAT = "multi-image/images/object_62_boat.jpg"  # shared by two prompts, as upstream shares images
_VASE = "multi-image/images/vase.jpg"
_TEACUP = "new_images/knitted_woolen_teacup.jpg"
_EDIT = [
    (
        "dreambench",
        "",
        {"id": 1186, "category": "mug"},
        "A",
        1,
        1,
        (
            [_MUG],
            "Put this mug on a rainy caf\u00e9 window sill with soft morning light behind it.",
            {
                "original_text": "A photo of a mug on a rainy cafe window sill with soft morning light",
                "category": "mug",
                "category_type": "object",
                "task": None,
                "id": 1186,
            },
        ),
    ),
    (
        "new_synthetic_edit",
        "31",
        {"id": 31, "category": "three_synthetic"},
        "A",
        2,  # the one response with two images
        1,
        (
            [_SYN_0, _SYN_1, _TEACUP],
            "Combine the lighthouse from the first image, the kite from the second image and the "
            "knitted teacup from the third image into one cosy watercolour postcard.",
            {"id": 31, "category": "three_synthetic", "task": None},
        ),
    ),
    ("emu-edit", "1874", {"id": 1874, "task": "background", "split": "test"}, "B", 1, 1, None),
    (
        "text_heavy_edit",
        "66",
        {"id": 66, "category": "synthetic_text_heavy_edit"},
        "A",
        1,
        1,
        (
            [_BOAT],
            "Turn this photo into a travel poster. Add the headline \u201cSail the Quiet Coast\u201d at "
            'the top and the line "Departures daily \u2014 09:00 & 15:30" along the bottom.',
            {"id": 66, "category": "synthetic_text_heavy_edit", "task": None},
        ),
    ),
    (
        "risebench",
        "causal_reasoning_17",
        {"id": "causal_reasoning_17", "category": "causal_reasoning"},
        "B",
        1,
        1,
        None,
    ),
    (
        "dreambench",
        "",
        {"id": 2210, "category": "sea_turtle"},
        "A",
        1,
        1,
        (
            [_TURTLE],
            "Show this sea turtle swimming through a kelp forest lit by shafts of sunlight.",
            {
                "original_text": "A sea turtle swimming through a kelp forest lit by shafts of sunlight",
                "category": "sea_turtle",
                "category_type": "subject",
                "task": None,
                "id": 2210,
            },
        ),
    ),
    (
        "new_synthetic_edit",
        "12",
        {"id": 12, "category": "three_real_images"},
        "B",
        1,
        1,
        (
            [_BOAT, _VASE, _SYN_2],
            "Place the vase from the second image on the deck of the boat from the first image and "
            "paint the scene in the style of the third image.",
            {"id": 12, "category": "three_real_images", "task": None},
        ),
    ),
    ("hq-edit", "318", {"id": 318}, "B", 1, 1, None),
]

_INTERLEAVED = [
    ("interleavedeval", "", {"id": 611}, "A", "ITITIT", "TIT"),
    ("chameleon", "uuid", {"category": "How-to"}, "B", "TITITITI", "ITIT"),
    ("isgbench", "0412", {"id": "0412", "category": "Imaginary Object Detection"}, "A", "IT", "IT"),
    ("mmmg", "518", {"id": 518, "category": "it_coherence_ocr"}, "A", "TITI", "ITITI"),
    ("chameleon", "uuid", {"category": "Explanation"}, "B", "ITI", "TITITITIT"),
    ("interleavedeval", "", {"id": 244}, "A", "IT", "ITIT"),
]

# (source, id part, metadata, chosen, model kind a, model kind b, layout a, layout b, rejected ratings)
_REASONING = [
    ("blink", "val_Forensic_Detection_88", {"id": "val_Forensic_Detection_88"}, "B", "S", "T", "TITIT", "T", []),
    (
        "mindcube",
        "mindcube",
        {"category": ["perpendicular", "P-O", "sequence", "self"]},
        "A",
        "S",
        "S",
        "TIT",
        "TITITIT",
        ["C", "C", "C"],
    ),
    ("muirbench", "14", {"id": "14"}, "B", "T", "S", "T", "TIT", []),
    (
        "mindcube",
        "mindcube",
        {"category": ["parallel", "O-O", "meanwhile", "self"]},
        "B",
        "S",
        "T",
        "TITIT",
        "T",
        [],
    ),
    ("visulogic", "00217", {"id": "00217"}, "A", "T", "T", "T", "T", ["C", "C", "C"]),
    ("vstar", "131", {"id": "131", "category": "relative_position"}, "B", "S", "S", "TITITIT", "TIT", []),
    (
        "realunify",
        "geu_GEU_37_attentional_focusing",
        {"id": "GEU_37_attentional_focusing"},
        "A",
        "S",
        "T",
        "TIT",
        "T",
        ["C", "C", "C"],
    ),
]

# Where the planted faults and duplicates sit: (task, pair index, image k).
_CORRUPT_AT = ("edit", 4, 1)
_MISSING_AT = ("reasoning", 5, 2)
_NEAR_DUP_AT = (("t2i", 2, 0), ("t2i", 2, 1))
_EXACT_DUP_AT = (("interleaved", 1, 0), ("interleaved", 4, 2))
_CROPPED_AT = (("interleaved", 5, 1), ("edit", 7, 0))  # (original, copy)
_BRIGHTENED_AT = (("t2i", 3, 0), ("interleaved", 2, 1))

_RESPONSE_SIZES = ((224, 224), (256, 192), (192, 256), (240, 180), (208, 208), (176, 232), (320, 180))
_CROP_SIZES = ((160, 160), (200, 160), (160, 208), (192, 176), (176, 176))

_WORDS = (
    "amber lantern harbor meadow copper violet orbit canyon pixel garden falcon ember river "
    "quartz willow signal maple comet tide ridge"
).split()

_INTERLEAVED_SENTENCES = (
    "Start by laying out everything you need on a clean, well-lit table so nothing gets lost halfway through.",
    "The first panel shows the overall layout, with the main subject framed slightly off-centre for balance.",
    "Next, sketch the rough outline in light strokes\u2014you\u2019ll refine the edges once the proportions look right.",
    "A simple bar chart compares the three options side by side, making the trade-offs easy to read at a glance.",
    "In the close-up you can see how the texture changes where the light hits the surface at a low angle.",
    "Finally, step back and compare the result with the reference; small colour corrections go a long way.",
    "The story continues at dusk, when the little robot reaches the harbour and the lamps begin to glow.",
    "Each illustration keeps the same palette so the sequence reads as one continuous scene.",
    "Water the seedlings lightly every second day and keep them near a window that gets morning sun.",
    "The diagram labels each part, from the base plate to the tiny spring that holds the lid in place.",
)

_REASONING_OPENINGS = (
    "Here\u2019s how I examined the images, focusing on textures, geometry and small-object consistency.\n\n",
    "To answer this, I compared the views one at a time and tracked where each object sits relative to the camera.\n\n",
    "Let me work through the question step by step, checking each candidate against the picture.\n\n",
    "Based on a detailed examination of the images, here is my assessment:\n\n",
)
_REASONING_MIDDLES = (
    "Look closely at the edge of the table in the crop ",
    "The shadow direction in the zoomed region ",
    "Comparing the left and right halves, the highlighted area ",
    "Counting the repeated shapes in the marked box ",
    "The reflection on the window, ",
)
_REASONING_AFTERS = (
    ", which shows the lines bending slightly where they should stay straight.\n\n",
    ". The light falls from the upper left, so the object must be in front of the chair.\n\n",
    ", where the pattern repeats four times rather than three.\n\n",
    "; the object appears on the right in the first view and on the left in the second.\n\n",
)


def _hash64(rng: random.Random, negative: bool) -> int:
    value = rng.randrange(10**17, 2**63)
    return -value if negative else value


def _model_numbers(rng: random.Random) -> tuple[int, int]:
    base = rng.randrange(100, 1000)
    return rng.randrange(1, 8) * 1000 + base, base


def _human_scores(rng: random.Random, chosen: str) -> list[int]:
    """Three 1..6 ratings; as upstream, the sum exceeds 10.5 exactly when A was chosen."""
    pool = (6, 6, 5, 5, 5, 4, 3) if chosen == "A" else (1, 1, 2, 2, 2, 3, 4)
    while True:
        scores = [rng.choice(pool) for _ in range(3)]
        if (sum(scores) > 10.5) == (chosen == "A"):
            return scores


def _image_seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{SEED}:{name}".encode()).digest()[:8], "big")


def _interleaved_text(rng: random.Random) -> str:
    first, second = rng.sample(_INTERLEAVED_SENTENCES, 2)
    return f" {first}\n\n{second}\n\n"


def _reasoning_segments(rng: random.Random, layout: str, answer: str) -> list[str]:
    """Texts for the T slots of a layout: opening, then 'look at X' before each image, then a verdict."""
    n_text = layout.count("T")
    texts = []
    for i in range(n_text):
        if i == 0:
            text = rng.choice(_REASONING_OPENINGS)
            if "I" in layout:
                text += rng.choice(_REASONING_MIDDLES)
        elif i < n_text - 1:
            text = rng.choice(_REASONING_AFTERS) + rng.choice(_REASONING_MIDDLES)
        else:
            text = rng.choice(_REASONING_AFTERS) if "I" in layout else ""
        if i == n_text - 1:
            text += f"Therefore, the correct choice is **({answer})**."
        texts.append(text)
    return texts


def _response(model: str, layout: str, pair_id: str, k0: int, texts: list[str]) -> tuple[dict, list[str]]:
    content, names, t = [], [], iter(texts)
    for slot in layout:
        if slot == "I":
            name = f"{pair_id}_{k0 + len(names)}.jpg"
            names.append(name)
            content.append(["image", name])
        else:
            content.append(["text", next(t)])
    return {"model_name": model, "response_content": content}, names


def _pair(pid: str, resp_a: dict, resp_b: dict, chosen: str, annotations, source: str, meta: dict) -> dict:
    # key order exactly as upstream
    return {
        "id": pid,
        "response_a": resp_a,
        "response_b": resp_b,
        "chosen": chosen,
        "human_annotations": annotations,
        "prompt_source": source,
        "prompt_metadata": meta,
    }


@lru_cache(maxsize=1)
def _plan() -> _Plan:
    rng = random.Random(SEED)
    tasks: dict[str, list[dict]] = {t: [] for t in MMRB2_TASKS}
    new_task: list[dict] = []
    # per task, per pair: the response image names in k order
    response_images: dict[str, list[list[str]]] = {t: [] for t in MMRB2_TASKS}

    # t2i: one image per response
    for i, (source, part, meta, chosen) in enumerate(_T2I):
        ma, mb = rng.choice(T2I_MODELS), rng.choice(T2I_MODELS)
        if i == 2:
            mb = ma  # the near-duplicate pair: same model, same prompt
        na, nb = _model_numbers(rng)
        pid = f"{source}_{part}_{_hash64(rng, i % 2 == 0)}_{ma}_{na}_{mb}_{nb}"
        ra, names_a = _response(ma, "I", pid, 0, [])
        rb, names_b = _response(mb, "I", pid, 1, [])
        tasks["t2i"].append(_pair(pid, ra, rb, chosen, _human_scores(rng, chosen), source, dict(meta)))
        response_images["t2i"].append(names_a + names_b)

    # edit: one image per response, one response with two; prompts go to new_task_release
    for i, (source, part, meta, chosen, n_a, n_b, prompt) in enumerate(_EDIT):
        ma, mb = rng.choice(EDIT_MODELS), rng.choice(EDIT_MODELS)
        na, nb = _model_numbers(rng)
        pid = f"{source}_{part}_{_hash64(rng, i % 2 == 1)}_{ma}_{na}_{mb}_{nb}"
        ra, names_a = _response(ma, "I" * n_a, pid, 0, [])
        rb, names_b = _response(mb, "I" * n_b, pid, n_a, [])
        tasks["edit"].append(_pair(pid, ra, rb, chosen, _human_scores(rng, chosen), source, dict(meta)))
        response_images["edit"].append(names_a + names_b)
        if prompt is not None:
            images, text, nt_meta = prompt
            new_task.append(
                {
                    "pair_id": pid,
                    "prompt_content": [["image", name] for name in images] + [["text", text]],
                    "prompt_source": source,
                    "prompt_metadata": dict(nt_meta),
                }
            )

    # interleaved: 1-4 images per response between text
    for i, (source, part, meta, chosen, lay_a, lay_b) in enumerate(_INTERLEAVED):
        ma, mb = rng.choice(INTERLEAVED_MODELS), rng.choice(INTERLEAVED_MODELS)
        na, nb = _model_numbers(rng)
        meta = dict(meta)
        if part == "uuid":
            part = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            meta = {"id": part, **meta}
        pid = f"{source}_{part}_{_hash64(rng, i % 2 == 0)}_{ma}_{na}_{mb}_{nb}"
        texts_a = [_interleaved_text(rng) for _ in range(lay_a.count("T"))]
        texts_b = [_interleaved_text(rng) for _ in range(lay_b.count("T"))]
        ra, names_a = _response(ma, lay_a, pid, 0, texts_a)
        rb, names_b = _response(mb, lay_b, pid, len(names_a), texts_b)
        tasks["interleaved"].append(_pair(pid, ra, rb, chosen, _human_scores(rng, chosen), source, meta))
        response_images["interleaved"].append(names_a + names_b)

    # reasoning: 0-3 images per response between text; ratings dict
    for source, part, meta, chosen, kind_a, kind_b, lay_a, lay_b, rejected in _REASONING:
        ma = rng.choice(SKETCH_MODELS if kind_a == "S" else TEXT_MODELS)
        mb = rng.choice(SKETCH_MODELS if kind_b == "S" else TEXT_MODELS)
        nb = rng.randrange(100, 1700)
        na = nb + rng.choice((1, 2))
        meta = dict(meta)
        if part == "mindcube":
            digest = hashlib.sha256(rng.randbytes(32)).hexdigest()
            q = "_".join(str(rng.randrange(1, 6)) for _ in range(3))
            part = f"{rng.choice(('among', 'around'))}_{digest}_q{q}"
            meta = {"id": part, **meta}
        pid = f"{source}_{part}_{ma}_{na}_{mb}_{nb}"
        answer = rng.choice("ABCD")
        ra, names_a = _response(ma, lay_a, pid, 0, _reasoning_segments(rng, lay_a, answer))
        rb, names_b = _response(mb, lay_b, pid, len(names_a), _reasoning_segments(rng, lay_b, answer))
        good = [rng.choice("AAB") for _ in range(3)]
        ratings = (
            {"response_a_ratings": good, "response_b_ratings": list(rejected)}
            if chosen == "A"
            else {"response_a_ratings": list(rejected), "response_b_ratings": good}
        )
        tasks["reasoning"].append(_pair(pid, ra, rb, chosen, ratings, source, meta))
        response_images["reasoning"].append(names_a + names_b)

    # image recipes: responses (in file order), then prompt images (first use)
    def at(where: tuple[str, int, int]) -> str:
        task, idx, k = where
        return response_images[task][idx][k]

    special = {
        at(_CORRUPT_AT): ("corrupt", None),
        at(_MISSING_AT): ("missing", None),
        at(_NEAR_DUP_AT[1]): ("near_dup", at(_NEAR_DUP_AT[0])),
        at(_EXACT_DUP_AT[1]): ("exact_dup", at(_EXACT_DUP_AT[0])),
        at(_CROPPED_AT[1]): ("cropped", at(_CROPPED_AT[0])),
        at(_BRIGHTENED_AT[1]): ("brightened", at(_BRIGHTENED_AT[0])),
    }
    images: list[_ImageSpec] = []
    for task in MMRB2_TASKS:
        for names in response_images[task]:
            for name in names:
                kind, of = special.get(name, ("normal", None))
                sizes = _CROP_SIZES if task == "reasoning" else _RESPONSE_SIZES
                size = sizes[_image_seed(name) % len(sizes)]
                label = " ".join(rng.sample(_WORDS, 2))
                images.append(_ImageSpec(name, _image_seed(name), size, label, kind, of))
    seen: set[str] = set()
    for entry in new_task:
        for slot, name in entry["prompt_content"]:
            if slot == "image" and name not in seen:
                seen.add(name)
                size = _RESPONSE_SIZES[_image_seed(name) % len(_RESPONSE_SIZES)]
                label = name.rsplit("/", 1)[0].rsplit("_", 1)[-1] if "/" in name else name
                images.append(_ImageSpec(name, _image_seed(name), size, label[:20]))
    return _Plan(tasks=tasks, new_task=new_task, images=images)


# --------------------------------------------------------------------------------------------
# Pixels


def _random_colour(rng: random.Random, lo: int = 0, hi: int = 255) -> tuple[int, int, int]:
    return (rng.randint(lo, hi), rng.randint(lo, hi), rng.randint(lo, hi))


def _encode(img: Image.Image, quality: int = JPEG_QUALITY) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality, optimize=False, progressive=False, subsampling=2)
    return buf.getvalue()


def _picture(seed: int, size: tuple[int, int], label: str) -> Image.Image:
    """A gradient with random shapes, a line of text and a little noise: looks like content, not a flat fill."""
    rng = random.Random(seed)
    w, h = size
    grad = Image.linear_gradient("L").resize((w, h))
    if rng.random() < 0.5:
        grad = grad.transpose(Image.Transpose.ROTATE_90).resize((w, h))
    if rng.random() < 0.5:
        grad = grad.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
    img = Image.composite(
        Image.new("RGB", (w, h), _random_colour(rng, 0, 140)),
        Image.new("RGB", (w, h), _random_colour(rng, 110, 255)),
        grad,
    )
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(4, 8)):
        shape = rng.choice(("ellipse", "ellipse", "rectangle", "line", "polygon"))
        x0, y0 = rng.randrange(-w // 4, w), rng.randrange(-h // 4, h)
        x1, y1 = x0 + rng.randint(w // 8, w // 2), y0 + rng.randint(h // 8, h // 2)
        colour = _random_colour(rng)
        if shape == "ellipse":
            draw.ellipse((x0, y0, x1, y1), fill=colour, outline=_random_colour(rng), width=rng.randint(1, 3))
        elif shape == "rectangle":
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        elif shape == "line":
            draw.line((x0, y0, x1, y1), fill=colour, width=rng.randint(2, 6))
        else:
            points = [(rng.randrange(0, w), rng.randrange(0, h)) for _ in range(rng.randint(3, 5))]
            draw.polygon(points, fill=colour)
    font = ImageFont.load_default_imagefont()  # bitmap font: identical on every machine
    draw.text((rng.randint(4, w // 3), rng.randint(4, h - 16)), label, fill=_random_colour(rng), font=font)
    amplitude = 3  # a faint grain; stronger noise doubles the JPEG sizes
    noise = Image.frombytes("L", (w, h), rng.randbytes(w * h)).point(lambda v: 128 + (v - 128) * amplitude // 128)
    return ImageChops.add(img, Image.merge("RGB", (noise, noise, noise)), 1.0, -128)


def _corrupt(data: bytes) -> bytes:
    """Cut a JPEG inside its Huffman tables: Pillow fails to open it, truncated-image mode or not."""
    dht = data.find(b"\xff\xc4")
    return data[: dht + 40]


_COPY_KINDS = ("exact_dup", "near_dup", "cropped", "brightened")


def _copy(kind: str, original: bytes) -> bytes:
    """A planted copy of an encoded original: the same picture in other bytes (or the same bytes)."""
    if kind == "exact_dup":
        return original
    with Image.open(io.BytesIO(original)) as src:
        src.load()
        w, h = src.size
        if kind == "near_dup":
            return _encode(src.resize((w - 8, h - 6), Image.Resampling.LANCZOS), quality=72)
        if kind == "cropped":
            dx, dy = round(w * CROP_FRACTION), round(h * CROP_FRACTION)
            return _encode(src.crop((dx, dy, w - dx, h - dy)), quality=75)
        return _encode(ImageEnhance.Brightness(src).enhance(BRIGHTEN_FACTOR), quality=85)


def _render_images(plan: _Plan) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for spec in plan.images:  # originals first, then the copies made from them
        if spec.kind in ("missing", *_COPY_KINDS):
            continue
        data = _encode(_picture(spec.seed, spec.size, spec.label))
        out[spec.name] = _corrupt(data) if spec.kind == "corrupt" else data
    for spec in plan.images:
        if spec.kind in _COPY_KINDS:
            out[spec.name] = _copy(spec.kind, out[spec.of])
    return out


@lru_cache(maxsize=1)
def _rendered() -> dict[str, bytes]:
    return _render_images(_plan())


def sample_image(name: str) -> bytes:
    """The bytes the sample's image.zip holds for `name` (KeyError for a name it does not hold)."""
    return _rendered()[name]


def _zip_bytes(images: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(images):
            info = zipfile.ZipInfo(ZIP_PREFIX + name, date_time=ZIP_DATE_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3
            info.external_attr = 0o100644 << 16
            zf.writestr(info, images[name])
    return buf.getvalue()


def _dump_json(obj) -> bytes:
    # how upstream dumped: json.dumps(obj, indent=2) reproduces the real files byte for byte
    return json.dumps(obj, indent=2, ensure_ascii=True).encode("ascii")


# --------------------------------------------------------------------------------------------
# Files


def _facts(plan: _Plan) -> SampleFacts:
    names = [spec.name for spec in plan.images]
    by_kind = {spec.kind: spec.name for spec in plan.images}
    near = next(s for s in plan.images if s.kind == "near_dup")
    exact = next(s for s in plan.images if s.kind == "exact_dup")
    cropped = next(s for s in plan.images if s.kind == "cropped")
    brightened = next(s for s in plan.images if s.kind == "brightened")
    prompt = sorted(
        {name for e in plan.new_task for slot, name in e["prompt_content"] if slot == "image"}
    )
    refs = sum(
        1
        for pairs in plan.tasks.values()
        for p in pairs
        for side in ("response_a", "response_b")
        for slot, _ in p[side]["response_content"]
        if slot == "image"
    )
    return SampleFacts(
        pairs_per_task={t: len(plan.tasks[t]) for t in MMRB2_TASKS},
        chosen_a={t: sum(p["chosen"] == "A" for p in plan.tasks[t]) for t in MMRB2_TASKS},
        image_refs=refs,
        corrupt_image=by_kind["corrupt"],
        missing_image=by_kind["missing"],
        names_with_space=tuple(sorted(n for n in set(names) if " " in n)),
        names_with_colon=tuple(sorted(n for n in set(names) if ":" in n)),
        near_duplicates=(near.of, near.name),
        exact_duplicates=(exact.of, exact.name),
        cropped_copy=(cropped.of, cropped.name),
        brightened_copy=(brightened.of, brightened.name),
        prompt_images=tuple(prompt),
    )


def sample_facts() -> SampleFacts:
    """The facts of the sample without writing anything."""
    return _facts(_plan())


def write_sample(root: Path) -> SampleFacts:
    """Write the sample in the upstream layout under `root`; identical bytes on every call."""
    root = Path(root)
    plan = _plan()
    facts = _facts(plan)
    planted = (
        facts.corrupt_image == CORRUPT_IMAGE
        and facts.missing_image == MISSING_IMAGE
        and facts.near_duplicates == NEAR_DUPLICATE_IMAGES
        and facts.exact_duplicates == EXACT_DUPLICATE_IMAGES
        and facts.cropped_copy == CROPPED_COPY
        and facts.brightened_copy == BRIGHTENED_COPY
    )
    if not planted:  # the module constants document the names; keep them true
        raise AssertionError(f"sample plan drifted from its documented constants: {facts}")

    annotation_dir = root / ANNOTATION_DIR
    for task in MMRB2_TASKS:
        write_if_changed(annotation_dir / f"{task}_response_only.json", _dump_json({"pairs": plan.tasks[task]}))
    write_if_changed(annotation_dir / NEW_TASK_FILE, _dump_json({"pairs": plan.new_task}))
    write_if_changed(root / IMAGE_DIR / ZIP_NAME, _zip_bytes(_rendered()))
    return facts


def fetch_sample(raw_root: Path, cache: ChecksumCache) -> RawSnapshot:
    """The `sample` source: write the embedded sample and inventory it."""
    write_sample(raw_root)
    return snapshot_from_layout(Path(raw_root), "sample", cache, revisions={"sample": SAMPLE_VERSION})
