"""Edits that make a copy of an image, shared by the figure set (figureset.py) and the photo set
(photoset.py). Pillow only: figureset.py runs them in .bench-venv, photoset.py in the project's env.

Each edit is `edit(image, rng) -> image`, drawing its own amounts from `rng` (random.Random), and
`save(image, path, rng, edit)` writes the copy. The amounts are the ones a copy meets on the way from
one dataset to another:

    jpeg            re-encoded as JPEG, quality 30..90
    resize          scaled to 50..75 % (LANCZOS)
    crop            2..5 % off every side (a central crop)
    offcentre_crop  2..5 % off one or two adjacent sides, nothing off the others
    corner_box      a white box with dark text in a corner, 18..25 % of the width
    corner_box_px   the same at a fixed pixel size (BOX_PX), whatever the image's size: large on a
                    small image, a speck on a large one
    caption_bar     a full-width bar 10..20 % of the height at the top or the bottom, white with dark
                    text or dark with white text, painted over the image (the frame keeps its size)
    watermark       semi-transparent white text with a dark rim somewhere in the frame
    grey            greyscale
    blur            Gaussian blur, radius 1..2 px
    bright          brightness x0.8..0.9 or x1.1..1.25
"""

from __future__ import annotations

import random
from pathlib import Path

from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont

BOX_PX = (200, 30)  # corner_box_px: width, height in pixels
WORDS = ("source figure chart table data sample image photo copy page slide from after before total "
         "share report draft final study credit original series panel view").split()


def font(size: int) -> ImageFont.ImageFont:
    size = max(int(size), 6)
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType sizes
        return ImageFont.load_default()


def _label(rng: random.Random) -> str:
    return f"{rng.choice(WORDS).capitalize()} {rng.randint(1, 999)}"


def jpeg(im: Image.Image, _rng: random.Random) -> Image.Image:
    return im  # the quality is chosen by save()


def resize(im: Image.Image, rng: random.Random) -> Image.Image:
    f = rng.uniform(0.5, 0.75)
    return im.resize((max(round(im.width * f), 1), max(round(im.height * f), 1)), Image.LANCZOS)


def crop(im: Image.Image, rng: random.Random) -> Image.Image:
    w, h = im.size
    f = rng.uniform(0.02, 0.05)
    return im.crop((round(w * f), round(h * f), w - round(w * f), h - round(h * f)))


def offcentre_crop(im: Image.Image, rng: random.Random) -> Image.Image:
    w, h = im.size
    box = [0, 0, w, h]
    sides = rng.choice([(0,), (1,), (2,), (3,), (0, 1), (0, 3), (2, 1), (2, 3)])  # left, top, right, bottom
    for side in sides:
        cut = round((w if side in (0, 2) else h) * rng.uniform(0.02, 0.05))
        box[side] = cut if side < 2 else box[side] - cut
    return im.crop(tuple(box))


def _box(im: Image.Image, rng: random.Random, bw: int, bh: int) -> Image.Image:
    out = im.convert("RGB").copy()
    w, h = out.size
    bw, bh = min(bw, w - 2), min(bh, h - 2)
    margin = max(min(w, h) // 60, 1)
    x = margin if rng.random() < 0.5 else max(w - margin - bw, 0)
    y = margin if rng.random() < 0.5 else max(h - margin - bh, 0)
    d = ImageDraw.Draw(out)
    d.rectangle([x, y, x + bw, y + bh], fill="white", outline=(60, 60, 60))
    d.text((x + max(bh // 5, 2), y + bh // 5), _label(rng), fill=(20, 20, 20), font=font(bh * 0.6))
    return out


def corner_box(im: Image.Image, rng: random.Random) -> Image.Image:
    bw = round(im.width * rng.uniform(0.18, 0.25))
    return _box(im, rng, bw, max(bw // 4, 12))


def corner_box_px(im: Image.Image, rng: random.Random) -> Image.Image:
    return _box(im, rng, *BOX_PX)


def caption_bar(im: Image.Image, rng: random.Random) -> Image.Image:
    out = im.convert("RGB").copy()
    w, h = out.size
    bh = max(round(h * rng.uniform(0.10, 0.20)), 8)
    y = 0 if rng.random() < 0.5 else h - bh
    dark = rng.random() < 0.5
    d = ImageDraw.Draw(out)
    d.rectangle([0, y, w, y + bh], fill=(25, 25, 25) if dark else "white")
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))).capitalize()
    d.text((max(w // 40, 2), y + bh // 4), text, fill="white" if dark else (20, 20, 20), font=font(bh * 0.45))
    return out


def watermark(im: Image.Image, rng: random.Random) -> Image.Image:
    layer = Image.new("RGBA", im.size, (0, 0, 0, 0))
    size = max(im.height // 10, 12)
    text = rng.choice(["© PhotoStock", "SAMPLE", "@picture_daily", "© 2024 studio", "DRAFT", "preview"])
    d = ImageDraw.Draw(layer)
    left, top, right, bottom = d.textbbox((0, 0), text, font=font(size), stroke_width=2)
    x = rng.randint(0, max(im.width - (right - left), 0))
    y = rng.randint(0, max(im.height - (bottom - top), 0))
    d.text((x, y), text, font=font(size), fill=(255, 255, 255, 120), stroke_width=2, stroke_fill=(0, 0, 0, 90))
    return Image.alpha_composite(im.convert("RGBA"), layer).convert("RGB")


def grey(im: Image.Image, _rng: random.Random) -> Image.Image:
    return im.convert("L").convert("RGB")


def blur(im: Image.Image, rng: random.Random) -> Image.Image:
    return im.filter(ImageFilter.GaussianBlur(rng.uniform(1.0, 2.0)))


def bright(im: Image.Image, rng: random.Random) -> Image.Image:
    return ImageEnhance.Brightness(im).enhance(rng.uniform(0.8, 0.9) if rng.random() < 0.5 else rng.uniform(1.1, 1.25))


EDITS = {"jpeg": jpeg, "resize": resize, "crop": crop, "offcentre_crop": offcentre_crop, "corner_box": corner_box,
         "corner_box_px": corner_box_px, "caption_bar": caption_bar, "watermark": watermark, "grey": grey,
         "blur": blur, "bright": bright}


def save(im: Image.Image, path: Path, rng: random.Random, edit: str) -> Path:
    """Write an edited copy: `jpeg` as JPEG at quality 30..90, the others as JPEG (quality 85..95) or
    PNG, half each. Returns the path written (its suffix says the format)."""
    im = im.convert("RGB")
    if edit == "jpeg" or rng.random() < 0.5:
        path = path.with_suffix(".jpg")
        im.save(path, "JPEG", quality=rng.randint(30, 90) if edit == "jpeg" else rng.randint(85, 95))
    else:
        path = path.with_suffix(".png")
        im.save(path, "PNG")
    return path


def deal(names: list, edits: list[str], per_edit: int, rng: random.Random, most: int) -> dict:
    """Deal `per_edit` copies of every edit over `names` (at most `most` per name, no edit twice on
    one name), round robin after a shuffle, so that every edit occurs about as often. Returns
    name -> [edit, ...]."""
    deck = [e for e in edits for _ in range(per_edit)]
    rng.shuffle(deck)
    out: dict = {n: [] for n in names}
    if not names:
        return out
    i = 0
    for e in deck:
        for _ in range(len(names)):
            n = names[i % len(names)]
            i += 1
            if e not in out[n] and len(out[n]) < most:
                out[n].append(e)
                break
    return out
