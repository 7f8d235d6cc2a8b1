"""Benchmark: one whole `rewardhouse run --source local` at upstream sizes, cold and then unchanged.

The mirror (built once, cached under --keep, default /tmp/fullscale/mirror; rebuilt per dataset
when its sizes change) holds the three datasets in the layout `--source local --path DIR` reads:

    MMRB2           the REAL annotation files of ../shared/data/mmrb2 (facebookresearch/MMRB2;
                    without them the benchmark prints why and exits 0) and an image zip
                    (deflated, as `zip -r` writes it) with a stand-in JPEG under every name they
                    reference: 14,017 response images and the 119 prompt images the zip ships
                    flat, 14,136 entries under images/. Photo-like pictures drawn as
                    bench_hashing.photo_like draws them, 1024 px wide (1024 x 576..1365, q76-83:
                    about 140 kB each, so the zip is about the upstream 2 GB);
                    the response images of an edit pair (and its first shipped prompt image) are one
                    picture with a different region repainted in each: the near-duplicate
                    candidates a real edit task gives verification. --mmrb2-images N < 14,136
                    keeps the leading pairs of each task (in proportion) that fit in N images.
    VisualPRM400K   mm-eval/VisualPRM400K/data/train-00000-of-00001.parquet, columns id, media
                    (list of struct bytes/path, HF `Sequence(Image())`), messages (JSON text: 85 %
                    InternVL from/value turns with the PRM system prompt, 15 % role/content), row
                    groups of 100 as the Hub writes image datasets. 49,960 rows in groups of 3-5
                    rollouts sharing an image and a question, 1-16 steps with cumulative "+"/"-"
                    labels (about 10 % "-"); a tenth of the groups embed a small image (160-448 px:
                    diagrams and charts as PNG, photos as JPEG), the rest are path references that
                    resolve nowhere (as upstream: the images are not in that repository). Planted:
                    20 questions copied from VL-RewardBench queries, 10 VL-RewardBench and 5 MMRB2
                    pictures scaled down and embedded.
    VL-RewardBench  MMInstruction/VL-RewardBench/data/test-00000-of-00001.parquet, 1,250 pairs in
                    the Hub's columns, one embedded photo-like JPEG each (512-1000 px, q76-83, about
                    80 kB: ~100 MB in all, as upstream; every 40th pair shares the previous pair's
                    image), responses of 300-1500 characters, row groups of 100.

Then (the mirror read once first, so that the runs, like the floors, find it in the page cache)
as a user runs it, `rewardhouse run --source local --path DIR` in a subprocess on a new data
root (REWARDHOUSE_HOME=/tmp/fullscale/home, wiped first; DAGSTER_HOME inside it), then again
unchanged on the same root. The numba kernels' cache is warmed first (a new checkout compiles them
once: that time is printed, not counted). For each run: wall seconds (interpreter start to exit);
peak memory of the process tree (the run, its fork server and pool workers), sampled from /proc
every 0.2 s as the sum of RSS (and of PSS, which counts shared pages once, at most once a second at a
new peak: reading it walks page tables), with the step that was
running at the peak; and each step's seconds as Dagster recorded them (its event log, read from
the instance in the data root after the run). Floors, each in its own process after the runs
(page cache warm, as the run saw it):

    *_raw                the dataset's files read once and sha256'd (one process)
    visualprm_samples    the id and messages columns read from the shard (pyarrow)
    visualprm_images     every embedded image decoded once (JPEG draft >= 96 px), one process
    vlrb_pairs           every image decoded once (draft >= 96 px), one process, as the step does
    mmrb2_task_images    every JPEG of the zip read and decoded with Pillow draft to >= 96 px on
                         2 processes; and the zip read from disk front to back
    outside the steps    `python -c "import pipeline.definitions"` (interpreter + imports)

Targets printed beside the figures: the whole cold run against 30 s, image_dedupe against its
goal of 15 s, peak tree RSS against 1.5 GB.

Usage: python tests/benchmarks/bench_fullscale.py [--mmrb2-images N] [--visualprm-rows N]
           [--vlrb-rows N] [--keep DIR] [--quick]
(--quick: 300 images, 2,000 rows, 200 pairs, mirror in /tmp/fullscale/mirror-quick; a smoke test)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SHARED = REPO.parent / "shared" / "data" / "mmrb2"
SCRATCH = Path("/tmp/fullscale")
HOME = SCRATCH / "home"
TASKS = ("t2i", "edit", "interleaved", "reasoning")
# Per dataset: bump when its generated bytes change, and a cached mirror rebuilds that dataset.
MIRROR_VERSIONS = {"mmrb2": "3", "vlrb": "2", "visualprm": "3"}
MANIFEST = ".fullscale-mirror.json"

MMRB2_ZIP = Path("facebook/MMRB2_image/image.zip")
MMRB2_BENCH = Path("facebookresearch/MMRB2/benchmark")
PRM_SHARD = Path("mm-eval/VisualPRM400K/data/train-00000-of-00001.parquet")
VLRB_SHARD = Path("MMInstruction/VL-RewardBench/data/test-00000-of-00001.parquet")

MMRB2_SIZES = [(1024, 1024), (1024, 768), (1024, 1024), (1024, 576), (1024, 1365)]
VLRB_SIZES = [(512, 512), (640, 480), (800, 600), (1000, 750), (768, 1000), (960, 540)]
FULL = {"mmrb2_images": 14_136, "visualprm_rows": 49_960, "vlrb_rows": 1_250}
QUICK = {"mmrb2_images": 300, "visualprm_rows": 2_000, "vlrb_rows": 200}
TARGET_RUN_S, GOAL_DEDUPE_S, TARGET_PEAK_MB = 30.0, 15.0, 1536.0
WORKERS = 2


# ---- pictures -------------------------------------------------------------------------------------


def photo(seed: int, size: tuple[int, int]):
    """bench_hashing.photo_like's picture at a given size (an RGB PIL image)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_hashing import photo_picture

    return photo_picture(seed, size)


def jpeg(im, quality: int) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def mmrb2_picture(job: tuple[int, int | None]) -> bytes:
    """(seed, base): a photo of its own, or (an edit pair) picture `base` with a region repainted."""
    from PIL import ImageDraw

    seed, base = job
    size = MMRB2_SIZES[(seed if base is None else base) % len(MMRB2_SIZES)]
    im = photo(seed if base is None else base, size)
    if base is not None and seed != base:
        rng = random.Random(seed)
        w, h = size
        x, y = rng.randrange(w), rng.randrange(h)
        rw, rh = rng.randrange(w // 12, w // 5), rng.randrange(h // 12, h // 5)
        ImageDraw.Draw(im).ellipse([x - rw, y - rh, x + rw, y + rh], fill=tuple(rng.randrange(256) for _ in range(3)))
    return jpeg(im, 76 + seed % 8)


def vlrb_picture(seed: int) -> bytes:
    return jpeg(photo(10_000_000 + seed, VLRB_SIZES[seed % len(VLRB_SIZES)]), 76 + seed % 8)


def figure(job: tuple[int, str]) -> bytes:
    """A small training figure: a geometry diagram or a bar chart as PNG, a photo as JPEG."""
    from PIL import Image, ImageDraw

    seed, kind = job
    rng = random.Random(seed)
    w = rng.randrange(160, 449)
    h = max(120, int(w * rng.uniform(0.6, 1.2)))
    if kind == "photo":
        return jpeg(photo(20_000_000 + seed, (w, h)), 75 + seed % 15)
    im = Image.new("RGB", (w, h), (255, 255, 255))
    draw = ImageDraw.Draw(im)
    if kind == "chart":
        n = rng.randrange(3, 9)
        draw.line([(20, h - 20), (w - 10, h - 20)], fill=(0, 0, 0))
        draw.line([(20, 10), (20, h - 20)], fill=(0, 0, 0))
        bw = (w - 40) // n
        for i in range(n):
            top = rng.randrange(20, h - 30)
            draw.rectangle([25 + i * bw, top, 25 + i * bw + bw * 2 // 3, h - 21],
                           fill=tuple(rng.randrange(40, 220) for _ in range(3)))
            draw.text((25 + i * bw, h - 16), str(rng.randrange(1990, 2025)), fill=(0, 0, 0))
    else:
        points = [(rng.randrange(10, w - 10), rng.randrange(10, h - 10)) for _ in range(rng.randrange(3, 6))]
        draw.polygon(points, outline=(0, 0, 0))
        for (x, y), letter in zip(points, "ABCDEF"):
            draw.text((x + 3, y + 3), letter, fill=(0, 0, 0))
        if rng.random() < 0.5:
            cx, cy, r = rng.randrange(w), rng.randrange(h), rng.randrange(10, max(11, min(w, h) // 3))
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline=(0, 0, 0))
        for _ in range(rng.randrange(0, 3)):
            draw.line([points[rng.randrange(len(points))], (rng.randrange(w), rng.randrange(h))], fill=(0, 0, 0))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def scaled_copy(data: bytes, width: int) -> bytes:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im = im.convert("RGB")
        return jpeg(im.resize((width, max(1, round(im.height * width / im.width))), Image.Resampling.LANCZOS), 82)


# ---- text -----------------------------------------------------------------------------------------

WORDS = ("angle triangle side length area radius circle chord tangent perimeter ratio segment point line "
         "parallel perpendicular bisector median height base vertex diagonal square rectangle rhombus "
         "trapezoid polygon sector arc degree measure value total number count shown figure graph chart "
         "bar axis year percent average difference sum product largest smallest object cube sphere "
         "cylinder metal rubber red blue green yellow purple grey left right behind front above below "
         "food web producer consumer energy population species leaf stem root water light shadow "
         "force mass speed distance time map region state border coast river table row column cell "
         "price cost sale store people group team score game city country north south east west").split()


def words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def question(rng: random.Random, source: str) -> str:
    a, b = rng.randint(2, 170), rng.randint(2, 90)
    choices = "\n".join(f"{c}: {rng.randint(1, 300)}" for c in "ABCD")
    stem = {
        "MathV360K": f"As shown in the figure, {words(rng, 4, 9)} is {a} and {words(rng, 3, 7)} is {b}. "
                     f"What is the {words(rng, 2, 4)}?\nChoices:\n{choices}",
        "geoqa+": f"In the figure, AB is the diameter of circle O, angle {rng.choice('CDE')} = {a} degrees and "
                  f"{words(rng, 3, 8)}. Find the measure of {words(rng, 2, 4)}.\nChoices:\n{choices}",
        "chartqa": f"What is the {words(rng, 2, 5)} of {words(rng, 1, 3)} in {rng.randint(1990, 2024)}?",
        "ai2d": f"Which {words(rng, 1, 2)} in the diagram {words(rng, 3, 8)}?\nChoices:\n{choices}",
        "CLEVR_math": f"Subtract all {words(rng, 2, 3)}. Subtract all {words(rng, 1, 3)}. How many objects are left?",
        "scienceqa": f"Which property do these {rng.randint(2, 4)} objects have in common? {words(rng, 4, 10)}\n"
                     f"Choices:\n{choices}",
        "nlvr2": f"Does the left image and the right image {words(rng, 5, 12)}? Answer yes or no.",
    }[source]
    return stem


def step_text(rng: random.Random, k: int) -> str:
    x, y = rng.randint(1, 99), rng.randint(1, 99)
    forms = (f"The {words(rng, 2, 5)} is {x}, so {words(rng, 3, 8)} equals {x + y}.",
             f"Since {words(rng, 3, 7)} = {x}^\\circ, we get {words(rng, 2, 6)} = \\frac{{{x}}}{{{y}}}.",
             f"Next, {words(rng, 6, 14)}.\nThis gives {x} + {y} = {x + y}.",
             f"Looking at the {words(rng, 2, 4)}, {words(rng, 5, 12)}.")
    return forms[(k + x) % len(forms)]


def response_text(rng: random.Random) -> str:
    sentences = [f"The image shows {words(rng, 4, 10)}." for _ in range(rng.randint(3, 12))]
    return " ".join(sentences)[: rng.randint(300, 1500)].strip() or "The image shows a picture."


# ---- the mirror ------------------------------------------------------------------------------------


def pool_map(fn, jobs, chunk: int = 8):
    """fn over jobs on every core, in order (generation only: fork, nothing threaded here yet)."""
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        yield from pool.imap(fn, jobs, chunksize=chunk)


def shared_digest() -> str:
    h = hashlib.sha256()
    for name in [f"{t}_response_only.json" for t in TASKS] + ["new_task_release.json"]:
        h.update((SHARED / name).read_bytes())
    return h.hexdigest()[:16]


def image_names(pair: dict) -> list[str]:
    return [v for s in ("response_a", "response_b") for k, v in pair[s]["response_content"] if k == "image"]


def shipped_prompt(entry: dict) -> list[str]:
    return [v for k, v in entry["prompt_content"] if k == "image" and v.startswith(("new_images/", "synthetic_images/"))]


def build_mmrb2(root: Path, n_images: int) -> int:
    """Annotation files (the real ones, or the leading pairs of each task that fit in n_images)
    and the image zip. Returns the number of zip entries."""
    docs = {t: json.loads((SHARED / f"{t}_response_only.json").read_bytes()) for t in TASKS}
    prompts = json.loads((SHARED / "new_task_release.json").read_bytes())
    by_pair = {e["pair_id"]: e for e in prompts["pairs"]}
    total = sum(len(image_names(p)) for d in docs.values() for p in d["pairs"]) + \
        len({n for e in prompts["pairs"] for n in shipped_prompt(e)})
    bench = root / MMRB2_BENCH
    bench.mkdir(parents=True, exist_ok=True)
    trim = n_images < total
    kept: dict[str, list[dict]] = {}
    for task, doc in docs.items():
        share = sum(len(image_names(p)) for p in doc["pairs"]) / total
        budget, used, pairs = n_images * share, 0, []
        for pair in doc["pairs"]:
            need = len(image_names(pair)) + len(shipped_prompt(by_pair.get(pair["id"], {"prompt_content": []})))
            if trim and used + need > budget:
                break
            pairs.append(pair)
            used += need
        kept[task] = pairs
        if trim:
            (bench / f"{task}_response_only.json").write_text(json.dumps({"pairs": pairs}, ensure_ascii=False))
        else:
            shutil.copyfile(SHARED / f"{task}_response_only.json", bench / f"{task}_response_only.json")
    ids = {p["id"] for pairs in kept.values() for p in pairs}
    if trim:
        entries = [e for e in prompts["pairs"] if e["pair_id"] in ids]
        (bench / "new_task_release.json").write_text(json.dumps({"pairs": entries}, ensure_ascii=False))
    else:
        shutil.copyfile(SHARED / "new_task_release.json", bench / "new_task_release.json")

    # (entry name, (seed, base)): an edit pair's images (and its shipped prompt image) share a base.
    jobs: dict[str, tuple[int, int | None]] = {}
    seed = 0
    for task in TASKS:
        for pair in kept[task]:
            base = seed if task == "edit" else None
            for k, name in enumerate(shipped_prompt(by_pair.get(pair["id"], {"prompt_content": []}))):
                # The first shipped prompt image is the picture the responses edit; others are their own.
                jobs.setdefault(f"images/{Path(name).name}", (base, base) if base is not None and k == 0 else (seed, None))
                seed += 1
            for name in image_names(pair):
                jobs.setdefault(f"images/{name}", (seed + 1 if base is not None else seed, base))
                seed += 1
    zpath = root / MMRB2_ZIP
    zpath.parent.mkdir(parents=True, exist_ok=True)
    names = sorted(jobs)
    tmp = zpath.with_name(zpath.name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for i, (name, data) in enumerate(zip(names, pool_map(mmrb2_picture, [jobs[n] for n in names]))):
            zf.writestr(name, data)
            if (i + 1) % 2000 == 0:
                print(f"    mmrb2 images: {i + 1}/{len(names)}", flush=True)
    os.replace(tmp, zpath)
    return len(names)


VLRB_SOURCES = (("WildVision", 0.2), ("POVID", 0.2), ("RLAIF-V", 0.15), ("RLHF-V", 0.15), ("MMMU-Pro", 0.1),
                ("MathVerse", 0.2))
VLRB_MODELS = ("gpt-4o", "claude-3.5-sonnet", "gemini-1.5-pro", "qwen2-vl-72b", "llava-ov-7b", "internvl2-8b")


def vlrb_query(rng: random.Random, source: str) -> str:
    if source == "MathVerse":
        return question(rng, rng.choice(("MathV360K", "geoqa+")))
    if source == "MMMU-Pro":
        return f"{words(rng, 8, 20)}. Which option is correct?\nA. {words(rng, 1, 3)}\nB. {words(rng, 1, 3)}\nC. {words(rng, 1, 3)}"
    if source == "WildVision":
        return f"{rng.choice(('Can you explain', 'What is going on with', 'Describe'))} {words(rng, 4, 14)}?"
    return f"{rng.choice(('Describe', 'What is', 'Is there'))} the {words(rng, 3, 9)} in this image?"


def build_vlrb(root: Path, n_rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(1250)
    picture_of = [i if not (i % 40 == 39) else i - 1 for i in range(n_rows)]  # every 40th pair shares an image
    unique = sorted(set(picture_of))
    pictures = dict(zip(unique, pool_map(vlrb_picture, unique)))
    rows = []
    for i in range(n_rows):
        source = rng.choices([s for s, _ in VLRB_SOURCES], [w for _, w in VLRB_SOURCES])[0]
        ranking = [0, 1] if rng.random() < 0.5 else [1, 0]
        a, b = rng.sample(VLRB_MODELS, 2)
        rows.append({
            "id": f"{source}_{i:05d}", "query": vlrb_query(rng, source),
            "response": [response_text(rng), response_text(rng)],
            "image": {"bytes": pictures[picture_of[i]], "path": f"{source}_{picture_of[i]:05d}.jpg"},
            "human_ranking": ranking, "models": [a, b], "judge": "human",
            "rationale": f"Response {'AB'[ranking.index(0)]} is better: {words(rng, 8, 20)}.",
            "query_source": source, "ground_truth": str(rng.randint(1, 300)) if source in ("MathVerse", "MMMU-Pro") else None,
        })
    schema = pa.schema([("id", pa.string()), ("query", pa.string()), ("response", pa.list_(pa.string())),
                        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("human_ranking", pa.list_(pa.int64())), ("models", pa.list_(pa.string())),
                        ("judge", pa.string()), ("rationale", pa.string()), ("query_source", pa.string()),
                        ("ground_truth", pa.string())])
    path = root / VLRB_SHARD
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=100)


PRM_SOURCES = (("MathV360K", 0.3, "photo"), ("geoqa+", 0.2, "diagram"), ("chartqa", 0.15, "chart"),
               ("ai2d", 0.1, "diagram"), ("CLEVR_math", 0.1, "photo"), ("scienceqa", 0.12, "photo"),
               ("nlvr2", 0.03, "photo"))


def prm_messages(rng: random.Random, q: str, n_images: int, chat: bool) -> str:
    from pipeline.visualprm.export import PRM_SYSTEM_PROMPT

    steps = max(1, min(16, round(rng.gammavariate(3.0, 2.0))))
    first_bad = rng.randrange(steps) if rng.random() < 0.25 else None
    if first_bad is not None and rng.random() < 0.5:
        steps = first_bad + 1  # upstream's early stop: nothing after the first "-"
    turns = [("system", PRM_SYSTEM_PROMPT)]
    for k in range(steps):
        text = step_text(rng, k)
        if k == steps - 1:
            text += f"\nFinal answer: {rng.choice('ABCD')}"
        if k == 0:
            text = "### Question:\n" + "<image>\n" * n_images + f"{q}\n\n### Solution Process:\n{text}"
        turns += [("user", text), ("assistant", "-" if first_bad is not None and k >= first_bad else "+")]
    if chat:
        return json.dumps([{"role": r, "content": v} for r, v in turns], ensure_ascii=False)
    names = {"system": "system", "user": "human", "assistant": "gpt"}
    return json.dumps([{"from": names[r], "value": v} for r, v in turns], ensure_ascii=False)


def build_visualprm(root: Path, n_rows: int, mirror: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(400)
    groups, rows_planned = [], 0
    while rows_planned < n_rows:
        source, _, kind = rng.choices(PRM_SOURCES, [w for _, w, _ in PRM_SOURCES])[0]
        rollouts = min(rng.randint(3, 5), n_rows - rows_planned)
        g = len(groups)
        ext = "png" if kind != "photo" else "jpg"
        paths = ([f"{source}/train/train-{g}-0-img{j}.{ext}" for j in range(2)] if source == "nlvr2"
                 else [f"{source}/images/{g:06d}.{ext}"])
        groups.append({"index": g, "source": source, "kind": kind, "paths": paths, "rollouts": rollouts,
                       "embedded": rng.random() < 0.1, "question": question(rng, source)})
        rows_planned += rollouts

    # Planted: VL-RewardBench queries as questions; its pictures and MMRB2's, scaled down, embedded.
    vlrb = pq.read_table(mirror / VLRB_SHARD, columns=["query", "image"]).to_pylist() if (mirror / VLRB_SHARD).is_file() else []
    with zipfile.ZipFile(mirror / MMRB2_ZIP) as zf:
        mmrb2 = [zf.read(n) for n in zf.namelist()[:: max(1, len(zf.namelist()) // 5)][:5]]
    picks = rng.sample(range(len(groups)), min(len(groups), 35))
    copies: dict[int, bytes] = {}
    for j, g in enumerate(picks[:20]):
        if vlrb:
            groups[g]["question"] = vlrb[(j * 37) % len(vlrb)]["query"]
    for j, g in enumerate(picks[20:30]):
        if vlrb:
            copies[g] = scaled_copy(vlrb[(j * 53 + 7) % len(vlrb)]["image"]["bytes"], 384)
    for j, g in enumerate(picks[30:35]):
        if j < len(mmrb2):
            copies[g] = scaled_copy(mmrb2[j], 448)
    for g in copies:
        groups[g].update(embedded=True, kind="photo", paths=[groups[g]["paths"][0].rsplit(".", 1)[0] + ".jpg"])

    figure_jobs = [(g["index"] * 10 + j, g["kind"]) for g in groups if g["embedded"] and g["index"] not in copies
                   for j in range(len(g["paths"]))]
    drawn = dict(zip(figure_jobs, pool_map(figure, figure_jobs, chunk=16)))
    rows = []
    for g in groups:
        if g["embedded"]:
            blobs = [copies[g["index"]]] if g["index"] in copies else \
                [drawn[(g["index"] * 10 + j, g["kind"])] for j in range(len(g["paths"]))]
        else:
            blobs = [None] * len(g["paths"])
        media = [{"bytes": b, "path": p} for b, p in zip(blobs, g["paths"])]
        for r in range(g["rollouts"]):
            rows.append({"id": f"{g['source']}_{g['index']:06d}_{r}", "media": media,
                         "messages": prm_messages(rng, g["question"], len(g["paths"]), rng.random() < 0.15)})
    rng.shuffle(rows)
    schema = pa.schema([("id", pa.string()), ("media", pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))),
                        ("messages", pa.string())])
    path = root / PRM_SHARD
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=100, compression="zstd")


def ensure_mirror(root: Path, sizes: dict) -> dict:
    """Build what is missing or of other sizes; returns the manifest (per dataset: its sizes)."""
    manifest_path = root / MANIFEST
    if root.exists() and any(root.iterdir()) and not manifest_path.is_file():
        raise SystemExit(f"bench_fullscale: {root} exists and is not a mirror this benchmark built; "
                         "name another folder with --keep")
    root.mkdir(parents=True, exist_ok=True)
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    want = {
        "mmrb2": {"version": MIRROR_VERSIONS["mmrb2"], "images": sizes["mmrb2_images"], "annotations": shared_digest()},
        "vlrb": {"version": MIRROR_VERSIONS["vlrb"], "rows": sizes["vlrb_rows"]},
    }
    want["visualprm"] = {"version": MIRROR_VERSIONS["visualprm"], "rows": sizes["visualprm_rows"],
                         "planted_from": [want["mmrb2"], want["vlrb"]]}
    builders = {
        "mmrb2": (("facebook", "facebookresearch"), lambda: build_mmrb2(root, sizes["mmrb2_images"])),
        "vlrb": (("MMInstruction",), lambda: build_vlrb(root, sizes["vlrb_rows"])),
        "visualprm": (("mm-eval",), lambda: build_visualprm(root, sizes["visualprm_rows"], root)),
    }
    for name, (folders, build) in builders.items():
        if manifest.get(name) == want[name]:
            continue
        for folder in folders:
            shutil.rmtree(root / folder, ignore_errors=True)
        manifest.pop(name, None)
        manifest_path.write_text(json.dumps(manifest, indent=1))
        t = time.perf_counter()
        print(f"  building {name} in {root} ...", flush=True)
        build()
        print(f"  built {name} in {time.perf_counter() - t:.0f}s", flush=True)
        manifest[name] = want[name]
        manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


def describe_mirror(root: Path) -> list[str]:
    import pyarrow.parquet as pq

    with zipfile.ZipFile(root / MMRB2_ZIP) as zf:
        n_zip = len(zf.infolist())
    pairs = sum(len(json.loads((root / MMRB2_BENCH / f"{t}_response_only.json").read_bytes())["pairs"]) for t in TASKS)
    prm = pq.ParquetFile(root / PRM_SHARD)
    media = prm.read(columns=["media"]).column("media").to_pylist()
    embedded_rows = sum(any(m["bytes"] is not None for m in row) for row in media)
    vlrb = pq.ParquetFile(root / VLRB_SHARD)
    mb = lambda p: (root / p).stat().st_size / 1e6  # noqa: E731
    return [
        f"MMRB2           {pairs:,} pairs (real annotations), zip of {n_zip:,} JPEGs, {mb(MMRB2_ZIP):,.0f} MB",
        f"VisualPRM400K   {prm.metadata.num_rows:,} rows ({embedded_rows:,} with embedded images), "
        f"{prm.metadata.num_row_groups} row groups, {mb(PRM_SHARD):,.1f} MB",
        f"VL-RewardBench  {vlrb.metadata.num_rows:,} pairs, {mb(VLRB_SHARD):,.1f} MB",
    ]


# ---- one run, watched ----------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _rss(pid: int) -> int:
    """RSS in bytes (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _pss(pid: int) -> int:
    """PSS in bytes (0 when smaps_rollup cannot be read). The kernel walks every page table of the
    process to answer: 23 ms for a 1.2 GB process, against 0.04 ms for its RSS."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _hwm(pid: int) -> int:
    """The process's own peak RSS (VmHWM) in bytes, 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class TreeMemory:
    """Samples the RSS of a process and all its descendants every `every` seconds, and their PSS
    when that RSS reaches a new peak, at most once a second (the PSS printed is that of the last
    peak it was read at). PSS was read at every sample before: the page-table walks took about a
    tenth of a core from the run being measured."""

    def __init__(self, pid: int, every: float = 0.2):
        self.pid, self.every = pid, every
        self.peak_rss = self.peak_pss = self.peak_procs = self.own_hwm = 0
        self.peak_at = self._pss_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            kids, tree, todo = _children(), [], [self.pid]
            while todo:
                p = todo.pop()
                tree.append(p)
                todo.extend(kids.get(p, ()))
            self.own_hwm = max(self.own_hwm, _hwm(self.pid))
            rss = sum(_rss(p) for p in tree)
            if rss > self.peak_rss:
                self.peak_rss, self.peak_at = rss, time.time()
                if self.peak_at - self._pss_at >= 1.0:
                    self.peak_pss, self._pss_at = sum(_pss(p) for p in tree), self.peak_at
            self.peak_procs = max(self.peak_procs, len(tree))
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWARDHOUSE_") and k != "DAGSTER_HOME"}
    env.update(REWARDHOUSE_HOME=str(HOME), DAGSTER_HOME=str(HOME / "dagster"))
    return env


def rewardhouse_command() -> list[str]:
    for script in (REPO / ".venv" / "bin" / "rewardhouse", Path(sys.executable).with_name("rewardhouse")):
        if script.is_file():
            return [str(script)]
    return [sys.executable, "-c", "import sys; from pipeline.cli import main; sys.exit(main())"]


def watched_run(mirror: Path, label: str) -> dict:
    """`rewardhouse run --source local --path mirror` as a subprocess: wall time, tree memory,
    output, and the step durations Dagster recorded for it."""
    argv = [*rewardhouse_command(), "run", "--source", "local", "--path", str(mirror)]
    log = SCRATCH / f"run-{label}.log"
    with open(log, "w") as out:
        start, t0 = time.perf_counter(), time.time()
        proc = subprocess.Popen(argv, env=run_env(), stdout=subprocess.PIPE, stderr=out, text=True, cwd=str(SCRATCH))
        mem = TreeMemory(proc.pid)
        stdout, _ = proc.communicate()
        wall = time.perf_counter() - start
        mem.stop()
        out.write("\n--- stdout ---\n" + stdout)
    stats = child("stats", str(HOME / "dagster"))
    return {"argv": argv, "code": proc.returncode, "wall": wall, "started": t0, "stdout": stdout,
            "stderr": log.read_text().split("\n--- stdout ---\n")[0], "log": str(log), "peak_rss": mem.peak_rss,
            "peak_pss": mem.peak_pss, "peak_at": mem.peak_at, "procs": mem.peak_procs, "own_hwm": mem.own_hwm, **stats}


# ---- children: Dagster's record of a run, and the floors ---------------------------------------------------


def run_stats(dagster_home: str) -> dict:
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    os.environ["DAGSTER_HOME"] = dagster_home
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(dagster_home)) as instance:
        runs = instance.get_runs(limit=1)
        if not runs:
            return {"run": None, "steps": []}
        run = runs[0]
        stats = instance.get_run_stats(run.run_id)
        steps = [{"key": s.step_key, "status": s.status.value if s.status else None, "start": s.start_time,
                  "end": s.end_time} for s in instance.get_run_step_stats(run.run_id)]
    return {"run": {"id": run.run_id, "status": run.status.value, "start": stats.start_time, "end": stats.end_time},
            "steps": sorted(steps, key=lambda s: s["start"] or 0)}


def _decode(data: bytes) -> None:
    from PIL import Image

    from pipeline.dedupe.hashing import DRAFT_SIDE

    with Image.open(io.BytesIO(data)) as im:
        if im.format == "JPEG":  # the draft the signature decodes at
            im.draft("YCbCr" if im.mode == "RGB" else "L", (DRAFT_SIDE, DRAFT_SIDE))
        im.load()


_zip = None


def _open_zip(path: str) -> None:
    global _zip
    _zip = zipfile.ZipFile(path)


def _decode_entries(names: list[str]) -> int:
    for name in names:
        _decode(_zip.read(name))
    return len(names)


def floor_mmrb2_decode(zip_path: str) -> int:
    with zipfile.ZipFile(zip_path) as zf:
        infos = sorted(zf.infolist(), key=lambda i: i.header_offset)
    names = [i.filename for i in infos]
    chunks = [names[s:s + 64] for s in range(0, len(names), 64)]
    with multiprocessing.get_context("fork").Pool(WORKERS, _open_zip, (zip_path,)) as pool:
        return sum(pool.imap_unordered(_decode_entries, chunks))


def floor_read(*paths: str) -> int:
    n = 0
    for p in paths:
        with open(p, "rb") as fh:
            while block := fh.read(4 << 20):
                n += len(block)
    return n


def floor_sha256(*paths: str) -> int:
    for p in paths:
        with open(p, "rb") as fh:
            hashlib.file_digest(fh, "sha256")
    return len(paths)


def floor_vlrb_decode(path: str) -> int:
    import pyarrow.parquet as pq

    seen = set()
    for batch in pq.ParquetFile(path).iter_batches(batch_size=64, columns=["image"]):
        for image in batch.column(0).to_pylist():
            data = image["bytes"]
            key = hashlib.sha256(data).digest()
            if key not in seen:
                seen.add(key)
                _decode(data)
    return len(seen)


def floor_prm_decode(path: str) -> int:
    import pyarrow.parquet as pq

    seen = set()
    for batch in pq.ParquetFile(path).iter_batches(batch_size=256, columns=["media"]):
        for media in batch.column(0).to_pylist():
            for m in media:
                if m["bytes"] is not None and m["path"] not in seen:
                    seen.add(m["path"])
                    _decode(m["bytes"])
    return len(seen)


def floor_prm_read(path: str) -> int:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["id", "messages"]).num_rows


def floor_imports() -> int:
    import pipeline.definitions  # noqa: F401

    return 1


def warm_kernels() -> int:
    from pipeline.dedupe import verify

    verify.warm()
    return 1


CHILDREN = {"stats": run_stats, "mmrb2-decode": floor_mmrb2_decode, "read": floor_read, "sha256": floor_sha256,
            "vlrb-decode": floor_vlrb_decode, "prm-decode": floor_prm_decode, "prm-read": floor_prm_read,
            "imports": floor_imports, "warm": warm_kernels}


def child(which: str, *args: str) -> dict:
    """Run CHILDREN[which](*args) in a fresh interpreter; its own imports are paid before its clock
    (except `imports`, whose clock is the interpreter's start)."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", which, *args], capture_output=True, text=True,
                         env={**run_env(), "PYTHONPATH": str(REPO)})
    if out.returncode:
        raise RuntimeError(f"{which} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if which == "imports":
        result["seconds"] = time.perf_counter() - start
    return result


def child_main(which: str, args: list[str]) -> None:
    if which == "stats":
        print(json.dumps(run_stats(*args)))
        return
    if which not in ("imports", "warm"):
        import numpy  # noqa: F401
        import pyarrow.parquet  # noqa: F401
        from PIL import Image  # noqa: F401
    start = time.perf_counter()
    n = CHILDREN[which](*args)
    print(json.dumps({"which": which, "n": n, "seconds": time.perf_counter() - start}))


# ---- report -----------------------------------------------------------------------------------------------


def floors(mirror: Path) -> dict[str, tuple[float, str]]:
    """Step -> (seconds, what the floor is); the best of two where it is cheap."""
    zip_path = str(mirror / MMRB2_ZIP)
    annotations = [str(mirror / MMRB2_BENCH / f"{t}_response_only.json") for t in TASKS] + \
        [str(mirror / MMRB2_BENCH / "new_task_release.json")]
    prm, vlrb = str(mirror / PRM_SHARD), str(mirror / VLRB_SHARD)

    def best(which: str, *args: str, times: int = 2) -> dict:
        return min((child(which, *args) for _ in range(times)), key=lambda r: r["seconds"])

    out = {}
    s = best("sha256", zip_path, *annotations)
    out["mmrb2_raw"] = (s["seconds"], "sha256 of the zip and the annotation files, 1 process")
    out["visualprm_raw"] = (best("sha256", prm)["seconds"], "sha256 of the shard")
    out["vlrb_raw"] = (best("sha256", vlrb)["seconds"], "sha256 of the shard")
    out["visualprm_samples"] = (best("prm-read", prm)["seconds"], "read id + messages (pyarrow)")
    d = best("prm-decode", prm)
    out["visualprm_images"] = (d["seconds"], f"decode the {d['n']:,} embedded images once, 1 process")
    d = best("vlrb-decode", vlrb)
    out["vlrb_pairs"] = (d["seconds"], f"decode the {d['n']:,} images (draft >= 96 px), 1 process")
    d = best("mmrb2-decode", zip_path)
    r = best("read", zip_path)
    size = (mirror / MMRB2_ZIP).stat().st_size
    out["mmrb2_task_images"] = (d["seconds"], f"decode {d['n']:,} JPEGs (draft >= 96 px), 2 processes; "
                                              f"disk read of the zip {r['seconds']:.1f}s ({size / r['seconds'] / 1e6:,.0f} MB/s)")
    out["(outside the steps)"] = (best("imports", times=3)["seconds"], "python -c 'import pipeline.definitions'")
    return out


def step_at(run: dict, t: float) -> str:
    for s in run["steps"]:
        if s["start"] and s["end"] and s["start"] <= t <= s["end"]:
            return s["key"]
    return "outside the steps"


def report(cold: dict, rerun: dict, floor: dict) -> None:
    def seconds(run: dict) -> dict[str, float]:
        return {s["key"]: (s["end"] - s["start"]) for s in run["steps"] if s["start"] and s["end"]}

    c, w = seconds(cold), seconds(rerun)
    order = [s["key"] for s in cold["steps"]] + [s["key"] for s in rerun["steps"] if s["key"] not in c]
    status = {s["key"]: s["status"] for s in cold["steps"]}
    print(f"\n{'step':<44} {'cold s':>8} {'rerun s':>8} {'floor s':>8}  floor / target")
    for key in order:
        f = floor.get(key)
        note = f[1] if f else ""
        if key == "image_dedupe":
            note = f"goal {GOAL_DEDUPE_S:.0f} s: {'met' if c.get(key, 1e9) <= GOAL_DEDUPE_S else 'NOT met'} cold"
        flag = "" if status.get(key) in (None, "SUCCESS") else f"  [{status.get(key)}]"
        print(f"{key:<44} {c.get(key, float('nan')):8.2f} {w.get(key, float('nan')):8.2f} "
              f"{(f'{f[0]:8.2f}' if f else ''):>8}  {note}{flag}")
    print("-" * 100)

    def inside(run: dict) -> float:
        r = run["run"]
        return (r["end"] - r["start"]) if r and r["start"] and r["end"] else float("nan")

    print(f"{'sum of the steps':<44} {sum(c.values()):8.2f} {sum(w.values()):8.2f}")
    print(f"{'the Dagster run, start to end':<44} {inside(cold):8.2f} {inside(rerun):8.2f}")
    f = floor["(outside the steps)"]
    print(f"{'outside the run (start-up, imports, lock)':<44} {cold['wall'] - inside(cold):8.2f} "
          f"{rerun['wall'] - inside(rerun):8.2f} {f[0]:8.2f}  {f[1]}")
    verdict = "met" if cold["wall"] <= TARGET_RUN_S else "NOT met"
    print(f"{'whole run (wall, as a user waits)':<44} {cold['wall']:8.2f} {rerun['wall']:8.2f} {'':>8}  "
          f"target {TARGET_RUN_S:.0f} s: {verdict} cold")
    for name, run in (("cold", cold), ("rerun", rerun)):
        verdict = "met" if run["peak_rss"] / 2**20 <= TARGET_PEAK_MB else "NOT met"
        print(f"peak memory, {name:<5}: process tree RSS {run['peak_rss'] / 2**20:,.0f} MB (PSS {run['peak_pss'] / 2**20:,.0f} MB), "
              f"{run['procs']} processes at most, peak during {step_at(run, run['peak_at'])} "
              f"(the run's own process: VmHWM {run['own_hwm'] / 2**20:,.0f} MB); "
              f"target {TARGET_PEAK_MB / 1024:.1f} GB: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mmrb2-images", type=int, help=f"MMRB2 zip entries (default {FULL['mmrb2_images']:,}: every reference)")
    parser.add_argument("--visualprm-rows", type=int, help=f"VisualPRM400K rows (default {FULL['visualprm_rows']:,})")
    parser.add_argument("--vlrb-rows", type=int, help=f"VL-RewardBench pairs (default {FULL['vlrb_rows']:,})")
    parser.add_argument("--keep", type=Path, help="the mirror's folder, reused when its sizes match "
                                                  "(default /tmp/fullscale/mirror, /tmp/fullscale/mirror-quick with --quick)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = parser.parse_args()
    if not (SHARED / "t2i_response_only.json").is_file():
        print(f"bench_fullscale: skipped: the real MMRB2 annotation files are not in {SHARED} "
              "(../shared/data/mmrb2 beside the checkout)")
        return
    sizes = dict(QUICK if args.quick else FULL)
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    mirror = (args.keep or SCRATCH / ("mirror-quick" if args.quick else "mirror")).resolve()
    if HOME == mirror or HOME in mirror.parents:
        raise SystemExit(f"bench_fullscale: --keep must not be inside {HOME} (wiped before each benchmark)")
    SCRATCH.mkdir(parents=True, exist_ok=True)

    t = time.perf_counter()
    ensure_mirror(mirror, sizes)
    print(f"full-scale run: mirror {mirror} (ready in {time.perf_counter() - t:.0f}s), {os.cpu_count()} cores")
    for line in describe_mirror(mirror):
        print(f"  {line}")
    warm = child("warm")
    print(f"  numba kernels' cache warmed first: {warm['seconds']:.1f}s (a new checkout pays this once, in image_dedupe)")

    shutil.rmtree(HOME, ignore_errors=True)
    # The floors read the mirror from the page cache; so does the cold run: the kernel may have
    # dropped the 2 GB of the mirror since it was built (a read from this disk then costs
    # `mmrb2_raw` about 12 s, which says nothing of the pipeline).
    started, read = time.perf_counter(), 0
    for path in sorted(p for p in mirror.rglob("*") if p.is_file()):
        with open(path, "rb") as fh:
            while block := fh.read(1 << 24):
                read += len(block)
    print(f"  the mirror read once into the page cache before the runs: {read / 1e9:.2f} GB in "
          f"{time.perf_counter() - started:.1f}s")
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").is_file() else ["?"] * 3
    print(f"  load average before the runs: {' '.join(load)} (above ~0.3 another job shares the cores: figures are noisy)")
    print(f"  $ REWARDHOUSE_HOME={HOME} DAGSTER_HOME={HOME}/dagster {' '.join(rewardhouse_command())} run "
          f"--source local --path {mirror}   (twice)", flush=True)
    cold = watched_run(mirror, "cold")
    print(f"  cold run: exit {cold['code']} in {cold['wall']:.1f}s; log {cold['log']}", flush=True)
    for line in cold["stdout"].split("\ntry:")[0].splitlines():  # what the run said, up to its example query
        print(f"    | {line}")
    if cold["code"]:
        for line in cold["stderr"].strip().splitlines()[-15:]:
            print(f"    ! {line}")
    rerun = watched_run(mirror, "rerun")
    print(f"  unchanged rerun: exit {rerun['code']} in {rerun['wall']:.1f}s; "
          f"{'said unchanged' if 'unchanged (no new release)' in rerun['stdout'] else 'did NOT say unchanged'}", flush=True)
    if rerun["code"]:
        for line in rerun["stderr"].strip().splitlines()[-15:]:
            print(f"    ! {line}")
    print("  floors ...", flush=True)
    report(cold, rerun, floors(mirror))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3:])
    else:
        main()
