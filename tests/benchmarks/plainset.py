"""Pictures of a few plain areas, in families of look-alikes, with edited copies (bench_dedupe_quality's `plain` set).

Flags, two-tone grounds, a disc or an icon on a plain ground, stripes: what a perceptual hash
barely tells apart (their pHashes have few bits set) and a tone curve maps onto each other (two
tones onto any other two). Each kind is one family: every picture of it has the same layout with
other colours, other band positions or another place and size of the shape, so two pictures of a
kind differ only there. Half of the bases get two edited copies (brightened, contrast, grey, half
size, a 4 % crop, off-centre crop, JPEG q25).

The halves split by kind: the `tuning` kinds are those the colour and tone-curve bounds of
2026-12-05 were written against (two-tone grounds, three-band flags, a disc, a gradient); the
`held_back` kinds were drawn after, to read those bounds on layouts they were not made on
(stripes of 4-6 bands, an icon (square, triangle, cross) on a ground, a ring, a corner block). Nothing is
tuned on either: the rule is chosen on the figures and photos sets.

    python tests/benchmarks/plainset.py OUT [--per-kind 60] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageEnhance

PALETTE = [(8, 80, 120), (214, 240, 226), (200, 30, 40), (250, 250, 250), (20, 20, 20), (0, 120, 60),
           (240, 200, 0), (120, 120, 120), (30, 60, 200), (180, 180, 200), (90, 40, 110), (250, 140, 20),
           (60, 60, 60), (170, 220, 240), (120, 70, 30)]


def _ground(rng: random.Random, w: int, h: int, k: int) -> tuple[Image.Image, list]:
    colours = rng.sample(PALETTE, k)
    return Image.new("RGB", (w, h), colours[0]), colours


def two_tone(rng, w, h):
    im, (_, c) = _ground(rng, w, h, 2)
    t = rng.uniform(0.15, 0.85)
    box = [int(w * t), 0, w, h] if rng.random() < 0.5 else [0, int(h * t), w, h]
    ImageDraw.Draw(im).rectangle(box, fill=c)
    return im


def flag(rng, w, h):
    im, cs = _ground(rng, w, h, 3)
    d = ImageDraw.Draw(im)
    vertical = rng.random() < 0.5
    for k, c in enumerate(cs):
        d.rectangle([w * k // 3, 0, w * (k + 1) // 3, h] if vertical else [0, h * k // 3, w, h * (k + 1) // 3], fill=c)
    return im


def disc(rng, w, h):
    im, (_, c) = _ground(rng, w, h, 2)
    r = rng.uniform(0.1, 0.3) * min(w, h)
    x, y = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * h
    ImageDraw.Draw(im).ellipse([x - r, y - r, x + r, y + r], fill=c)
    return im


def gradient(rng, w, h):
    c1, c2 = rng.sample(PALETTE, 2)
    ramp = Image.linear_gradient("L").resize((w, h)).rotate(rng.choice([0, 90, 180, 270]))
    return Image.merge("RGB", [ramp.point(lambda v, a=a, b=b: a + (b - a) * v // 255) for a, b in zip(c1, c2)])


def stripes(rng, w, h):
    n = rng.randint(4, 6)
    im, cs = _ground(rng, w, h, 2)
    d = ImageDraw.Draw(im)
    vertical = rng.random() < 0.5
    cuts = sorted(rng.uniform(0, 1) for _ in range(n - 1))
    edges = [0.0, *cuts, 1.0]
    for k in range(n):
        a, b = edges[k], edges[k + 1]
        d.rectangle([int(w * a), 0, int(w * b), h] if vertical else [0, int(h * a), w, int(h * b)], fill=cs[k % 2])
    return im


def icon(rng, w, h):
    im, (_, c) = _ground(rng, w, h, 2)
    d = ImageDraw.Draw(im)
    s = rng.uniform(0.15, 0.35) * min(w, h)
    x, y = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * h
    shape = rng.choice(["square", "triangle", "cross"])
    if shape == "square":
        d.rectangle([x - s, y - s, x + s, y + s], fill=c)
    elif shape == "triangle":
        d.polygon([(x, y - s), (x - s, y + s), (x + s, y + s)], fill=c)
    else:
        d.rectangle([x - s, y - s / 3, x + s, y + s / 3], fill=c)
        d.rectangle([x - s / 3, y - s, x + s / 3, y + s], fill=c)
    return im


def ring(rng, w, h):
    im, (_, c) = _ground(rng, w, h, 2)
    r = rng.uniform(0.15, 0.35) * min(w, h)
    x, y = rng.uniform(0.35, 0.65) * w, rng.uniform(0.35, 0.65) * h
    ImageDraw.Draw(im).ellipse([x - r, y - r, x + r, y + r], outline=c, width=max(2, int(r * rng.uniform(0.1, 0.3))))
    return im


def corner(rng, w, h):
    im, (_, c) = _ground(rng, w, h, 2)
    bw, bh = int(w * rng.uniform(0.15, 0.45)), int(h * rng.uniform(0.15, 0.45))
    x = 0 if rng.random() < 0.5 else w - bw
    y = 0 if rng.random() < 0.5 else h - bh
    ImageDraw.Draw(im).rectangle([x, y, x + bw, y + bh], fill=c)
    return im


KINDS = {"tuning": (two_tone, flag, disc, gradient), "held_back": (stripes, icon, ring, corner)}


def _crop(im: Image.Image, left: float, top: float, right: float, bottom: float) -> Image.Image:
    w, h = im.size
    return im.crop((int(w * left), int(h * top), w - int(w * right), h - int(h * bottom)))


EDITS = {  # name -> (edit, JPEG quality)
    "bright": (lambda im: ImageEnhance.Brightness(im).enhance(1.2), 90),
    "contrast": (lambda im: ImageEnhance.Contrast(im).enhance(0.8), 90),
    "grey": (lambda im: im.convert("L").convert("RGB"), 90),
    "half_size": (lambda im: im.resize((im.width // 2, im.height // 2), Image.LANCZOS), 90),
    "crop4": (lambda im: _crop(im, 0.04, 0.04, 0.04, 0.04), 90),
    "offcentre_crop": (lambda im: _crop(im, 0.04, 0.0, 0.0, 0.0), 90),
    "jpeg_q25": (lambda im: im, 25),
}


def build(out: Path, per_kind: int, seed: int) -> dict[str, dict]:
    """Write the set under out/<half>/ and return its manifest (rel path -> figure, edit, family,
    kind, half), as figureset.py and photoset.py do."""
    rng = random.Random(seed)
    files = {}
    for half, kinds in KINDS.items():
        (out / half).mkdir(parents=True, exist_ok=True)
        for kind in kinds:
            for i in range(per_kind):
                w = rng.choice([400, 640, 1024])
                h = int(w * rng.uniform(0.6, 1.1))
                im = kind(rng, w, h)
                base = f"{kind.__name__}{i:03d}"
                info = {"figure": base, "family": kind.__name__, "kind": kind.__name__, "half": half}
                im.save(out / half / f"{base}.jpg", quality=90)
                files[f"{half}/{base}.jpg"] = {**info, "edit": None}
                if rng.random() < 0.5:
                    for edit in rng.sample(sorted(EDITS), 2):
                        fn, quality = EDITS[edit]
                        fn(im).save(out / half / f"{base}_{edit}.jpg", quality=quality)
                        files[f"{half}/{base}_{edit}.jpg"] = {**info, "edit": edit}
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-kind", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    files = build(args.out, args.per_kind, args.seed)
    (args.out / "manifest.json").write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    print(f"{len(files)} files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
