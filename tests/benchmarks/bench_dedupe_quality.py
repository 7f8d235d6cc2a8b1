"""Dedupe quality on flat figures: charts, geometry diagrams and text pages (white background,
thin lines), the kind of images VisualPRM400K is made of. Generated here with Pillow, never
committed: unrelated figures of the same kinds, a third of them with 1-3 edited copies.

Prints pairwise precision, recall and F1 of `rewardhouse dedupe` (pairs within a cluster against
true pairs) and recall per edit, at several radii. A baseline for issue 12 (candidate search +
verification); the photo set and the imagededup peer come with that work.

    python tests/benchmarks/bench_dedupe_quality.py [--figures 400] [--seed 7]
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipeline.dedupe.folder import dedupe_folder  # noqa: E402

W, H = 640, 480


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType sizes
        return ImageFont.load_default()


def bar_chart(rng: random.Random) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    d.line([(60, 40), (60, 420), (600, 420)], fill="black", width=2)
    n = rng.randint(3, 9)
    step = 520 // n
    colour = tuple(rng.randint(0, 200) for _ in range(3))
    for i in range(n):
        top = 420 - rng.randint(30, 360)
        d.rectangle([70 + i * step, top, 70 + i * step + step * 2 // 3, 420], fill=colour, outline="black")
        d.text((70 + i * step, 428), f"{rng.choice('ABCDEFGH')}{i}", fill="black", font=_font(14))
    for y in range(420, 40, -60):
        d.text((20, y - 8), str((420 - y) // 6), fill="black", font=_font(12))
    d.text((200, 10), f"Figure {rng.randint(1, 99)}: {rng.choice(['sales', 'votes', 'rain', 'score'])}", fill="black",
           font=_font(18))
    return im


def line_chart(rng: random.Random) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    d.line([(60, 40), (60, 420), (600, 420)], fill="black", width=2)
    for _ in range(rng.randint(1, 3)):
        colour = tuple(rng.randint(0, 200) for _ in range(3))
        pts = [(60 + x * 54, 420 - rng.randint(20, 360)) for x in range(11)]
        d.line(pts, fill=colour, width=2)
        for p in pts:
            d.ellipse([p[0] - 3, p[1] - 3, p[0] + 3, p[1] + 3], outline=colour)
    d.text((220, 10), f"y = f(x), case {rng.randint(1, 999)}", fill="black", font=_font(18))
    return im


def geometry(rng: random.Random) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    pts = [(rng.randint(80, 560), rng.randint(60, 420)) for _ in range(rng.randint(3, 5))]
    d.polygon(pts, outline="black")
    for a, b in itertools.combinations(pts, 2):
        if rng.random() < 0.4:
            d.line([a, b], fill="black", width=1)
    if rng.random() < 0.6:
        cx, cy, r = rng.randint(200, 440), rng.randint(160, 320), rng.randint(40, 150)
        d.ellipse([cx - r, cy - r, cx + r, cy + r], outline="black")
    for label, p in zip("ABCDE", pts):
        d.text((p[0] + 6, p[1] - 16), label, fill="black", font=_font(16))
    return im


WORDS = ("the angle sum of a triangle is equal to two right angles hence the area of the figure follows from "
         "the ratio of the sides and the height which we compute step by step for each case below").split()


def text_page(rng: random.Random) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    y = 30
    while y < H - 30:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 10)))
        d.text((30, y), line, fill="black", font=_font(16))
        y += 24
    return im


KINDS = (bar_chart, line_chart, geometry, text_page)


def caption(im: Image.Image, rng: random.Random) -> Image.Image:
    out = im.copy()
    d = ImageDraw.Draw(out)
    w, h = out.size
    box = [w - w // 5 - 10, h - 60, w - 10, h - 10]
    d.rectangle(box, fill="white", outline="black")
    d.text((box[0] + 6, box[1] + 8), f"src {rng.randint(1, 999)}", fill="black", font=_font(14))
    return out


def crop4(im: Image.Image, _rng) -> Image.Image:
    w, h = im.size
    return im.crop((w * 4 // 100, h * 4 // 100, w - w * 4 // 100, h - h * 4 // 100))


EDITS = {
    "jpeg_q30": lambda im, _r: im,  # saved as JPEG quality 30 below
    "half_size": lambda im, _r: im.resize((im.width // 2, im.height // 2), Image.LANCZOS),
    "crop4": crop4,
    "caption": caption,
    "blur": lambda im, _r: im.filter(ImageFilter.GaussianBlur(1.2)),
    "grey": lambda im, _r: im.convert("L").convert("RGB"),
}


def build(root: Path, figures: int, seed: int) -> tuple[dict[str, int], dict[str, str]]:
    """Files under root; returns (file -> figure id, edited file -> edit name)."""
    rng = random.Random(seed)
    group, edit_of = {}, {}
    for i in range(figures):
        im = KINDS[i % len(KINDS)](rng)
        name = f"fig{i:04d}.png"
        im.save(root / name)
        group[name] = i
        if rng.random() < 1 / 3:
            for edit in rng.sample(sorted(EDITS), rng.randint(1, 3)):
                copy = EDITS[edit](im, rng)
                out = f"fig{i:04d}_{edit}.jpg"
                copy.save(root / out, "JPEG", quality=30 if edit == "jpeg_q30" else 90)
                group[out], edit_of[out] = i, edit
    return group, edit_of


def score(rows, group: dict[str, int], edit_of: dict[str, str]) -> dict:
    clusters = defaultdict(list)
    for path, cluster_id, _canon, _dist in rows:
        clusters[cluster_id].append(path)
    predicted = {frozenset(p) for members in clusters.values() for p in itertools.combinations(sorted(members), 2)}
    by_figure = defaultdict(list)
    for name, fig in group.items():
        by_figure[fig].append(name)
    truth = {frozenset(p) for members in by_figure.values() for p in itertools.combinations(sorted(members), 2)}
    hit = predicted & truth
    precision = len(hit) / len(predicted) if predicted else 1.0
    recall = len(hit) / len(truth) if truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    cluster_of = {p: c for c, members in clusters.items() for p in members}
    per_edit = defaultdict(lambda: [0, 0])
    for name, edit in edit_of.items():
        original = f"fig{group[name]:04d}.png"
        per_edit[edit][1] += 1
        per_edit[edit][0] += cluster_of.get(name) is not None and cluster_of.get(name) == cluster_of.get(original)
    return {"precision": precision, "recall": recall, "f1": f1, "clusters": len(clusters),
            "per_edit": {e: f"{a}/{b}" for e, (a, b) in sorted(per_edit.items())}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--figures", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        group, edit_of = build(root, args.figures, args.seed)
        print(f"flat figures: {len(group)} files, {args.figures} figures, {len(edit_of)} edited copies "
              f"(built in {time.perf_counter() - started:.1f}s)")
        print(f"{'engine':<28} {'precision':>9} {'recall':>7} {'F1':>6} {'clusters':>8}  recall per edit")
        for radius in (4, 6, 8, 10):
            result = dedupe_folder(root, radius)
            s = score(result.rows, group, edit_of)
            print(f"{f'rewardhouse dedupe r={radius}':<28} {s['precision']:>9.3f} {s['recall']:>7.3f} {s['f1']:>6.3f} "
                  f"{s['clusters']:>8}  {s['per_edit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
