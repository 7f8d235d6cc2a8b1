"""Hand-made images for the dedupe engine's tests: photo-like pictures, charts, geometry diagrams,
text pages, and the edits users make (crop, caption box, re-encode, resize, blur, grey)."""

from __future__ import annotations

import io
import random

import numpy as np
import pyarrow as pa
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from pipeline.dedupe.decisions import hashes_table
from pipeline.dedupe.hashing import hash_bytes

W, H = 480, 360


def font(size: int) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def photo(seed: int, size=(W, H)) -> Image.Image:
    """Photo-like: a smooth gradient, soft blobs of colour, sharp-edged objects and grain."""
    rng = np.random.default_rng(seed)
    h, w = size[1], size[0]
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.zeros((h, w, 3))
    for c in range(3):
        img[..., c] = 80 + 100 * np.sin(x * rng.uniform(2, 6) + rng.uniform(0, 6)) * np.cos(y * rng.uniform(2, 6))
    for _ in range(8):
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 0.75), rng.uniform(0.05, 0.2)
        blob = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))
        img += blob[..., None] * rng.uniform(-120, 120, 3)
    img += rng.normal(0, 6, img.shape)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    for _ in range(40):  # objects with edges at every scale
        x, y, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(4, 40)
        box = [x - r, y - r * rng.uniform(0.4, 1.2), x + r, y + r * rng.uniform(0.4, 1.2)]
        fill = tuple(int(v) for v in rng.integers(0, 255, 3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)(box, fill=fill)
    return im


def smooth_picture(seed: int, size=(W, H)) -> Image.Image:
    """A low-contrast picture, like a smooth wallpaper: a colour, gentle gradients, soft blobs, a
    little grain (a luma spread of ~8 grey levels; no plain background)."""
    rng = np.random.default_rng(seed)
    w, h = size
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.zeros((h, w, 3)) + rng.uniform(40, 200, 3)
    img += x[..., None] * rng.uniform(-40, 40, 3) + y[..., None] * rng.uniform(-40, 40, 3)
    for _ in range(5):
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 0.75), rng.uniform(0.1, 0.3)
        img += np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None] * rng.uniform(-30, 30, 3)
    img += rng.normal(0, 1.5, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def bar_chart(values: list[float], title: str = "Figure 3: sales", colour=(60, 90, 160)) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    d.line([(50, 30), (50, 320), (460, 320)], fill="black", width=2)
    step = 400 // len(values)
    for i, v in enumerate(values):
        top = 320 - int(v * 270)
        d.rectangle([60 + i * step, top, 60 + i * step + step * 2 // 3, 320], fill=colour, outline="black")
        d.text((60 + i * step, 326), f"Q{i}", fill="black", font=font(12))
    for y in range(320, 30, -45):
        d.text((14, y - 7), str((320 - y) // 5), fill="black", font=font(11))
    d.text((150, 6), title, fill="black", font=font(16))
    return im


def geometry(points: list[tuple[int, int]], radius: int = 40) -> Image.Image:
    """A triangle with its labels and a circle at its centroid: one template, many diagrams."""
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    d.polygon(points, outline="black")
    cx, cy = sum(p[0] for p in points) // 3, sum(p[1] for p in points) // 3
    d.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], outline="black")
    for label, p in zip("ABC", points):
        d.text((p[0] + 5, p[1] - 14), label, fill="black", font=font(14))
    return im


PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]


def pie_chart(shares: list[float], title: str = "Market share 2023") -> Image.Image:
    """A pie in one palette with a legend and a title: one template, many charts."""
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    total, start = sum(shares), -90.0
    for i, v in enumerate(shares):
        end = start + 360.0 * v / total
        d.pieslice([60, 50, 300, 290], start, end, fill=PALETTE[i % len(PALETTE)], outline="white")
        start = end
    for i in range(len(shares)):
        d.rectangle([330, 80 + 26 * i, 346, 96 + 26 * i], fill=PALETTE[i % len(PALETTE)])
        d.text((354, 80 + 26 * i), f"Brand {chr(65 + i)}", fill="black", font=font(13))
    d.text((140, 10), title, fill="black", font=font(16))
    return im


WORDS = ("the angle sum of a triangle is two right angles hence the area follows from the ratio of the sides "
         "and the height which we compute step by step").split()


def text_page(seed: int) -> Image.Image:
    rng = random.Random(seed)
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    for y in range(24, H - 24, 20):
        d.text((24, y), " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 9))), fill="black", font=font(14))
    return im


def table(seed: int, rows: int = 6) -> Image.Image:
    """A small table on a white page: one header and layout for every seed, other words and
    numbers in the cells, the text 8 px high (under 3 px in a 128 px signature, 5-6 px at 256)."""
    rng = random.Random(seed)
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    x0, y0, cw, rh = 100, 90, 70, 22
    d.rectangle((x0, y0, x0 + 4 * cw, y0 + rh), fill=(190, 190, 225))
    for c, head in enumerate(("Item", "Omega", "Apples", "Total")):
        d.text((x0 + c * cw + 20, y0 + 2), head, fill="white", font=font(8))
    for r in range(1, rows + 1):
        if r % 2 == 0:
            d.rectangle((x0, y0 + r * rh, x0 + 4 * cw, y0 + (r + 1) * rh), fill=(238, 238, 238))
        cells = [rng.choice(WORDS)] + [str(rng.randint(1, 9999)) for _ in range(3)]
        for c, text in enumerate(cells):
            d.text((x0 + c * cw + 14, y0 + r * rh + 2), text, fill="black", font=font(8))
    for r in range(rows + 2):
        d.line((x0, y0 + r * rh, x0 + 4 * cw, y0 + r * rh), fill=(120, 120, 120))
    for c in range(5):
        d.line((x0 + c * cw, y0, x0 + c * cw, y0 + (rows + 1) * rh), fill=(120, 120, 120))
    return im


# ---- edits -----------------------------------------------------------------------------------


def crop(im: Image.Image, fraction: float = 0.04) -> Image.Image:
    w, h = im.size
    dx, dy = round(w * fraction), round(h * fraction)
    return im.crop((dx, dy, w - dx, h - dy))


def caption(im: Image.Image, corner: str = "bottom-right", text: str = "source: web") -> Image.Image:
    """A white box about a fifth of the width with dark text, in a corner."""
    out = im.copy()
    d = ImageDraw.Draw(out)
    w, h = out.size
    bw, bh = w // 5, max(16, h // 12)
    x = 8 if "left" in corner else w - bw - 8
    y = 8 if "top" in corner else h - bh - 8
    d.rectangle([x, y, x + bw, y + bh], fill="white")
    d.text((x + 4, y + 2), text, fill=(30, 30, 30), font=font(bh * 2 // 3))
    return out


def caption_bar(im: Image.Image, where: str = "bottom", height: float = 0.15, text: str = "Photo: agency") -> Image.Image:
    """A full-width bar over the top or bottom `height` of the frame, with a line of text."""
    out = im.copy()
    d = ImageDraw.Draw(out)
    w, h = out.size
    bh = round(h * height)
    y = 0 if where == "top" else h - bh
    d.rectangle([0, y, w, y + bh], fill=(20, 20, 20))
    d.text((12, y + bh // 4), text, fill="white", font=font(max(10, bh // 2)))
    return out


def corner_box(im: Image.Image, size=(200, 30), corner: str = "top-left", text: str = "© stock 2024") -> Image.Image:
    """A white box of a fixed pixel size with dark text, whatever the image's size."""
    out = im.copy()
    d = ImageDraw.Draw(out)
    w, h = out.size
    bw, bh = size
    x = 6 if "left" in corner else w - bw - 6
    y = 6 if "top" in corner else h - bh - 6
    d.rectangle([x, y, x + bw, y + bh], fill="white", outline=(40, 40, 40))
    d.text((x + 6, y + 6), text, fill=(20, 20, 20), font=font(bh // 2))
    return out


def watermark(im: Image.Image, text: str = "© PhotoStock", at=(0.1, 0.45)) -> Image.Image:
    """A line of half-transparent white letters with a dark outline, a tenth of the height tall."""
    layer = Image.new("RGBA", im.size, (0, 0, 0, 0))
    d = ImageDraw.Draw(layer)
    d.text((round(im.width * at[0]), round(im.height * at[1])), text, font=font(max(im.height // 10, 12)),
           fill=(255, 255, 255, 120), stroke_width=2, stroke_fill=(0, 0, 0, 90))
    return Image.alpha_composite(im.convert("RGBA"), layer).convert("RGB")


def blur(im: Image.Image, radius: float = 1.5) -> Image.Image:
    return im.filter(ImageFilter.GaussianBlur(radius))


def half(im: Image.Image) -> Image.Image:
    return im.resize((im.width // 2, im.height // 2), Image.Resampling.LANCZOS)


def grey(im: Image.Image) -> Image.Image:
    return im.convert("L").convert("RGB")


def encode(im: Image.Image, fmt: str = "PNG", quality: int = 90) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, quality=quality) if fmt == "JPEG" else im.save(buf, fmt)
    return buf.getvalue()


def signatures(images: dict[str, bytes], dataset: str = "folder") -> pa.Table:
    """Signature rows (decisions.SIGNATURE_SCHEMA) for named image bytes, in the given order."""
    hashed = [hash_bytes(k, v) for k, v in images.items()]
    assert all(h.error is None for h in hashed), [h.error for h in hashed if h.error]
    return hashes_table(dataset, hashed, {k: len(v) for k, v in images.items()})


def folder_with_a_crop(folder):
    """A folder of three photos: a.png, a_crop.png (a 4 % crop of it) and b.png (another picture)."""
    folder.mkdir(parents=True, exist_ok=True)
    base = photo(5)
    (folder / "a.png").write_bytes(encode(base))
    (folder / "a_crop.png").write_bytes(encode(crop(base, 0.04)))
    (folder / "b.png").write_bytes(encode(photo(6)))
    return folder
