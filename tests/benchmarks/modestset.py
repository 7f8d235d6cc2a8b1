"""Look-alike figures that differ a little (bench_dedupe_quality's `modest` set): a second,
independent generator, written apart from figureset.py (Pillow's ImageDraw, no matplotlib), with
other layouts, palettes and fonts, so that what the engine learned on figureset.py's families is
read on figures it was never shaped by.

Each family is one template (size, palette, font, layout) of a kind -- bars (DVQA-like), horizontal,
grouped and stacked bars, a pie or donut, lines, scatter, a table, a geometry diagram, a text page,
a slide, a form, an app screen, a heatmap, a flowchart, a histogram -- drawn 13-18 times with data
that differ modestly from the template's own: one or two bars, a few degrees of a slice, one to four
table cells or line points, a word. Two figures of a family always differ visibly (in at least
MIN_DIFF of the pixels, by more than 24 grey levels): they are different figures, which an engine
must keep apart, however close. About a third get 1-3 edited copies (the edits here are this
module's own: JPEG q30-60, resized to 50-75 %, cropped 3-6 % centrally or off-centre, grey,
brightness up or down, blur, a caption bar of 10-20 % of the height, a 200 x 30 px corner box, a
rotated semi-transparent watermark); a fifth of the bases are JPEG q90.

Two halves, drawn with other seeds and so with other templates: `tuning` and `held_back`. Neither
takes part in the rule search (the name keeps the report's layout): both are read only.

    python tests/benchmarks/modestset.py OUT [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import string
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont, ImageOps

FONTDIR = Path("/usr/share/fonts/truetype")
FONTS = {
    "sans": FONTDIR / "dejavu/DejaVuSans.ttf",
    "sansb": FONTDIR / "dejavu/DejaVuSans-Bold.ttf",
    "serif": FONTDIR / "dejavu/DejaVuSerif.ttf",
    "mono": FONTDIR / "dejavu/DejaVuSansMono.ttf",
    "lib": FONTDIR / "liberation/LiberationSans-Regular.ttf",
    "cond": FONTDIR / "dejavu/DejaVuSansCondensed.ttf",
}
_fc = {}


def font(name, size):
    key = (name, size)
    if key not in _fc:
        p = FONTS.get(name)
        _fc[key] = ImageFont.truetype(str(p), size) if p and p.exists() else ImageFont.load_default()
    return _fc[key]


WORDS = ("alpha beta gamma delta omega north south east west red blue green sales cost units revenue "
         "profit region total march april may june july city river model layer score value index rate "
         "growth share market price volume level stage phase group class type item order batch node "
         "input output signal noise filter cache queue table chart graph plot field form").split()


def word(r):
    return r.choice(WORDS)


def label(r, n=None):
    n = n or r.randint(3, 7)
    return "".join(r.choice(string.ascii_lowercase) for _ in range(n)).capitalize()


def text_center(d, xy, s, f, fill):
    x, y = xy
    b = d.textbbox((0, 0), s, font=f)
    d.text((x - (b[2] - b[0]) / 2, y - (b[3] - b[1]) / 2), s, font=f, fill=fill)


PALETTES = [
    ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"],
    ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"],
    ["#003f5c", "#2f4b7c", "#665191", "#a05195", "#d45087", "#f95d6a", "#ff7c43", "#ffa600"],
    ["#8dd3c7", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#bc80bd"],
    ["#264653", "#2a9d8f", "#e9c46a", "#f4a261", "#e76f51", "#6d597a", "#b56576", "#355070"],
]


# ---------------------------------------------------------------------------------------------------
# family templates: make_template(r) -> dict of fixed template params + anchor data;
# draw(t, data) -> Image; vary(t, r) -> data modestly different from the anchor
# ---------------------------------------------------------------------------------------------------

def axes_frame(d, t, x0, y0, x1, y1, ymax, ticks=5, grid=True):
    f = font(t["font"], t["fs"])
    for i in range(ticks + 1):
        y = y1 - (y1 - y0) * i / ticks
        if grid:
            d.line([(x0, y), (x1, y)], fill=t["grid"], width=1)
        v = ymax * i / ticks
        s = f"{v:.0f}"
        b = d.textbbox((0, 0), s, font=f)
        d.text((x0 - 8 - (b[2] - b[0]), y - (b[3] - b[1]) / 2 - 2), s, font=f, fill=t["fg"])
    d.line([(x0, y0), (x0, y1)], fill=t["fg"], width=t["axw"])
    d.line([(x0, y1), (x1, y1)], fill=t["fg"], width=t["axw"])


def axes_canvas(t, box, grid=True):
    """A new figure of the template's size and background with its axes drawn over `box` (shares
    of the width and height): (image, its draw, the axes' pixel box)."""
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    x0, y0, x1, y1 = int(W * box[0]), int(H * box[1]), int(W * box[2]), int(H * box[3])
    axes_frame(d, t, x0, y0, x1, y1, t["ymax"], grid=grid)
    return im, d, (x0, y0, x1, y1)


def base_template(r, kind):
    w = r.randint(360, 1100)
    h = int(w * r.uniform(0.6, 1.0))
    h = max(300, min(1200, h))
    light = r.random() < 0.9
    bg = r.choice(["#ffffff", "#fafafa", "#f4f6f8", "#fffdf5", "#ffffff"]) if light else r.choice(["#1e1e24", "#22303c"])
    fg = "#222222" if light else "#e6e6e6"
    return {"kind": kind, "w": w, "h": h, "bg": bg, "fg": fg, "grid": "#dddddd" if light else "#3a4450",
            "pal": r.choice(PALETTES)[:], "font": r.choice(["sans", "serif", "lib", "cond"]),
            "fs": max(10, w // 60), "axw": r.choice([1, 2]), "title": " ".join(word(r).capitalize() for _ in range(r.randint(1, 3)))}


# --- vertical bars (DVQA style)
def t_vbar(r):
    t = base_template(r, "vbar")
    n = r.randint(4, 9)
    t["cats"] = [label(r) for _ in range(n)]
    t["anchor"] = [r.uniform(1, 9) for _ in range(n)]
    t["ymax"] = 10
    t["one_colour"] = r.random() < 0.5
    t["hatch"] = r.random() < 0.2
    return t


def v_bars(t, r):
    vals = list(t["anchor"])
    for _ in range(r.randint(1, 2)):
        i = r.randrange(len(vals))
        vals[i] = min(9.8, max(0.3, vals[i] + r.choice([-1, 1]) * r.uniform(0.8, 3)))
    cats = list(t["cats"])
    if r.random() < 0.4:
        cats[r.randrange(len(cats))] = label(r)
    return {"vals": vals, "cats": cats, "title": t["title"] if r.random() < 0.7 else word(r).capitalize() + " " + word(r)}


def d_vbar(t, data):
    im, d, (x0, y0, x1, y1) = axes_canvas(t, (0.12, 0.12, 0.96, 0.85))
    W, H = im.size
    n = len(data["vals"])
    slot = (x1 - x0) / n
    f = font(t["font"], t["fs"])
    for i, v in enumerate(data["vals"]):
        c = t["pal"][0] if t["one_colour"] else t["pal"][i % len(t["pal"])]
        bx0 = x0 + slot * i + slot * 0.18
        bx1 = x0 + slot * (i + 1) - slot * 0.18
        by = y1 - (y1 - y0) * v / t["ymax"]
        d.rectangle([bx0, by, bx1, y1 - 1], fill=c, outline=t["fg"] if t["hatch"] else None)
        if t["hatch"]:
            for k in range(int(bx0), int(bx1), 8):
                d.line([(k, y1 - 1), (min(bx1, k + 8), max(by, y1 - 1 - 8))], fill="#ffffff")
        text_center(d, (x0 + slot * (i + 0.5), y1 + t["fs"]), data["cats"][i], f, t["fg"])
    text_center(d, (W / 2, y0 / 2), data["title"], font(t["font"] + "b" if t["font"] == "sans" else t["font"], t["fs"] + 4), t["fg"])
    return im


# --- horizontal bars
def t_hbar(r):
    t = t_vbar(r)
    t["kind"] = "hbar"
    return t


def d_hbar(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    x0, y0, x1, y1 = int(W * 0.2), int(H * 0.12), int(W * 0.95), int(H * 0.9)
    f = font(t["font"], t["fs"])
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        d.line([(x, y0), (x, y1)], fill=t["grid"])
        text_center(d, (x, y1 + t["fs"]), f"{t['ymax'] * i / 5:.0f}", f, t["fg"])
    d.line([(x0, y0), (x0, y1)], fill=t["fg"], width=t["axw"])
    n = len(data["vals"])
    slot = (y1 - y0) / n
    for i, v in enumerate(data["vals"]):
        c = t["pal"][0] if t["one_colour"] else t["pal"][i % len(t["pal"])]
        d.rectangle([x0 + 1, y0 + slot * i + slot * 0.2, x0 + (x1 - x0) * v / t["ymax"], y0 + slot * (i + 1) - slot * 0.2], fill=c)
        b = d.textbbox((0, 0), data["cats"][i], font=f)
        d.text((x0 - 8 - (b[2] - b[0]), y0 + slot * (i + 0.5) - t["fs"] / 2), data["cats"][i], font=f, fill=t["fg"])
    text_center(d, (W / 2, y0 / 2), data["title"], font(t["font"], t["fs"] + 4), t["fg"])
    return im


# --- grouped bars with legend
def t_group(r):
    t = base_template(r, "grouped")
    g, s = r.randint(3, 5), r.randint(2, 4)
    t["cats"] = [label(r) for _ in range(g)]
    t["series"] = [word(r) for _ in range(s)]
    t["anchor"] = [[r.uniform(1, 9) for _ in range(s)] for _ in range(g)]
    t["ymax"] = 10
    t["legend_right"] = r.random() < 0.5
    return t


def v_group(t, r):
    vals = [list(x) for x in t["anchor"]]
    for _ in range(r.randint(1, 3)):
        i, j = r.randrange(len(vals)), r.randrange(len(vals[0]))
        vals[i][j] = min(9.8, max(0.3, vals[i][j] + r.choice([-1, 1]) * r.uniform(0.8, 2.5)))
    return {"vals": vals, "cats": t["cats"], "title": t["title"]}


def d_group(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    right = int(W * (0.78 if t["legend_right"] else 0.96))
    x0, y0, x1, y1 = int(W * 0.1), int(H * 0.14), right, int(H * 0.86)
    axes_frame(d, t, x0, y0, x1, y1, t["ymax"], grid=False)
    f = font(t["font"], t["fs"])
    g = len(data["vals"])
    s = len(data["vals"][0])
    slot = (x1 - x0) / g
    for i in range(g):
        bw = slot * 0.7 / s
        for j in range(s):
            bx = x0 + slot * i + slot * 0.15 + bw * j
            by = y1 - (y1 - y0) * data["vals"][i][j] / t["ymax"]
            d.rectangle([bx, by, bx + bw - 1, y1 - 1], fill=t["pal"][j])
        text_center(d, (x0 + slot * (i + 0.5), y1 + t["fs"]), data["cats"][i], f, t["fg"])
    for j, name in enumerate(t["series"]):
        if t["legend_right"]:
            lx, ly = right + 15, y0 + j * (t["fs"] + 8)
        else:
            lx, ly = x0 + j * (W * 0.8 / s), int(H * 0.04)
        d.rectangle([lx, ly, lx + t["fs"], ly + t["fs"]], fill=t["pal"][j])
        d.text((lx + t["fs"] + 4, ly - 2), name, font=f, fill=t["fg"])
    if t["legend_right"]:
        text_center(d, (W / 2, y0 / 2), data["title"], font(t["font"], t["fs"] + 3), t["fg"])
    return im


# --- stacked bars
def t_stack(r):
    t = t_group(r)
    t["kind"] = "stacked"
    t["anchor"] = [[r.uniform(0.5, 3) for _ in range(len(t["series"]))] for _ in range(len(t["cats"]))]
    t["ymax"] = max(sum(x) for x in t["anchor"]) * 1.3
    return t


def v_stack(t, r):
    vals = [list(x) for x in t["anchor"]]
    for _ in range(r.randint(1, 2)):
        i, j = r.randrange(len(vals)), r.randrange(len(vals[0]))
        vals[i][j] = max(0.2, vals[i][j] * r.uniform(0.5, 1.6))
    return {"vals": vals, "cats": t["cats"], "title": t["title"]}


def d_stack(t, data):
    im, d, (x0, y0, x1, y1) = axes_canvas(t, (0.1, 0.12, 0.8, 0.88))
    W, H = im.size
    f = font(t["font"], t["fs"])
    g = len(data["vals"])
    slot = (x1 - x0) / g
    for i in range(g):
        acc = 0
        for j, v in enumerate(data["vals"][i]):
            ya = y1 - (y1 - y0) * acc / t["ymax"]
            acc += v
            yb = y1 - (y1 - y0) * min(acc, t["ymax"]) / t["ymax"]
            d.rectangle([x0 + slot * i + slot * 0.2, yb, x0 + slot * (i + 1) - slot * 0.2, ya], fill=t["pal"][j], outline=t["bg"])
        text_center(d, (x0 + slot * (i + 0.5), y1 + t["fs"]), data["cats"][i], f, t["fg"])
    for j, name in enumerate(t["series"]):
        ly = y0 + j * (t["fs"] + 10)
        d.rectangle([x1 + 15, ly, x1 + 15 + t["fs"], ly + t["fs"]], fill=t["pal"][j])
        d.text((x1 + 20 + t["fs"], ly - 2), name, font=f, fill=t["fg"])
    text_center(d, (W / 2, y0 / 2), data["title"], font(t["font"], t["fs"] + 3), t["fg"])
    return im


# --- pie
def t_pie(r):
    t = base_template(r, "pie")
    n = r.randint(3, 7)
    t["anchor"] = [r.uniform(1, 5) for _ in range(n)]
    t["labels"] = [word(r) for _ in range(n)]
    t["start"] = r.uniform(0, 360)
    t["donut"] = r.random() < 0.3
    t["h"] = max(t["h"], int(t["w"] * 0.75))
    t["h"] = min(t["h"], 1200)
    return t


def v_pie(t, r):
    vals = list(t["anchor"])
    i = r.randrange(len(vals))
    vals[i] = max(0.3, vals[i] * r.uniform(0.75, 1.3))
    return {"vals": vals, "start": t["start"] + r.uniform(-8, 8), "labels": t["labels"], "title": t["title"]}


def d_pie(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    cx, cy, R = W * 0.4, H * 0.55, min(W * 0.33, H * 0.38)
    tot = sum(data["vals"])
    a = data["start"]
    f = font(t["font"], t["fs"])
    for i, v in enumerate(data["vals"]):
        e = a + 360 * v / tot
        d.pieslice([cx - R, cy - R, cx + R, cy + R], a, e, fill=t["pal"][i], outline=t["bg"], width=2)
        mid = math.radians((a + e) / 2)
        text_center(d, (cx + R * 0.68 * math.cos(mid), cy + R * 0.68 * math.sin(mid)), f"{100 * v / tot:.0f}%", f, "#ffffff")
        a = e
    if t["donut"]:
        d.ellipse([cx - R * 0.45, cy - R * 0.45, cx + R * 0.45, cy + R * 0.45], fill=t["bg"])
    for i, name in enumerate(data["labels"]):
        ly = H * 0.2 + i * (t["fs"] + 10)
        d.rectangle([W * 0.78, ly, W * 0.78 + t["fs"], ly + t["fs"]], fill=t["pal"][i])
        d.text((W * 0.78 + t["fs"] + 5, ly - 2), name, font=f, fill=t["fg"])
    text_center(d, (W / 2, H * 0.07), data["title"], font(t["font"], t["fs"] + 4), t["fg"])
    return im


# --- line plot
def t_line(r):
    t = base_template(r, "line")
    n = r.randint(8, 20)
    s = r.randint(1, 3)
    t["anchor"] = [[max(0.5, min(9.5, 5 + 3 * math.sin(k / n * 6 + j * 2) + r.uniform(-1, 1))) for k in range(n)] for j in range(s)]
    t["ymax"] = 10
    t["markers"] = r.random() < 0.5
    t["lw"] = r.choice([2, 3])
    t["series"] = [word(r) for _ in range(s)]
    return t


def v_line(t, r):
    vals = [list(x) for x in t["anchor"]]
    j = r.randrange(len(vals))
    k0 = r.randrange(len(vals[j]))
    for k in range(k0, min(len(vals[j]), k0 + r.randint(1, 4))):
        vals[j][k] = max(0.3, min(9.7, vals[j][k] + r.uniform(-2, 2)))
    return {"vals": vals, "title": t["title"]}


def d_line(t, data):
    im, d, (x0, y0, x1, y1) = axes_canvas(t, (0.1, 0.12, 0.95, 0.88))
    W, H = im.size
    f = font(t["font"], t["fs"])
    for j, ser in enumerate(data["vals"]):
        pts = [(x0 + (x1 - x0) * k / (len(ser) - 1), y1 - (y1 - y0) * v / t["ymax"]) for k, v in enumerate(ser)]
        d.line(pts, fill=t["pal"][j], width=t["lw"], joint="curve")
        if t["markers"]:
            for x, y in pts:
                d.ellipse([x - 4, y - 4, x + 4, y + 4], fill=t["pal"][j])
        d.text((x1 - 120, y0 + 4 + j * (t["fs"] + 6)), t["series"][j], font=f, fill=t["pal"][j])
    n = len(data["vals"][0])
    for k in range(0, n, max(1, n // 6)):
        text_center(d, (x0 + (x1 - x0) * k / (n - 1), y1 + t["fs"]), str(2000 + k), f, t["fg"])
    text_center(d, (W / 2, y0 / 2), data["title"], font(t["font"], t["fs"] + 4), t["fg"])
    return im


# --- scatter
def t_scatter(r):
    t = base_template(r, "scatter")
    t["centers"] = [(r.uniform(2, 8), r.uniform(2, 8)) for _ in range(r.randint(1, 3))]
    t["n"] = r.randint(25, 80)
    t["ymax"] = 10
    t["rad"] = r.choice([3, 4, 6])
    t["seed"] = r.randrange(10**9)
    return t


def v_scatter(t, r):
    g = random.Random(t["seed"])  # same anchor points, a few moved
    pts = []
    for i in range(t["n"]):
        cx, cy = t["centers"][i % len(t["centers"])]
        pts.append((min(9.8, max(0.2, g.gauss(cx, 1.2))), min(9.8, max(0.2, g.gauss(cy, 1.2))), i % len(t["centers"])))
    for _ in range(r.randint(3, 10)):
        i = r.randrange(len(pts))
        x, y, c = pts[i]
        pts[i] = (min(9.8, max(0.2, x + r.uniform(-2, 2))), min(9.8, max(0.2, y + r.uniform(-2, 2))), c)
    return {"pts": pts, "title": t["title"]}


def d_scatter(t, data):
    im, d, (x0, y0, x1, y1) = axes_canvas(t, (0.1, 0.1, 0.95, 0.9))
    W, H = im.size
    rr = t["rad"]
    for x, y, c in data["pts"]:
        px, py = x0 + (x1 - x0) * x / 10, y1 - (y1 - y0) * y / 10
        d.ellipse([px - rr, py - rr, px + rr, py + rr], fill=t["pal"][c], outline=t["fg"] if rr > 4 else None)
    text_center(d, (W / 2, y0 / 2), data["title"], font(t["font"], t["fs"] + 4), t["fg"])
    return im


# --- table
def t_table(r):
    t = base_template(r, "table")
    t["bg"], t["fg"] = r.choice(["#ffffff", "#fafafa", "#f4f6f8"]), "#222222"  # cells are drawn dark-on-light
    t["rows"], t["cols"] = r.randint(4, 10), r.randint(3, 6)
    t["head"] = [word(r).capitalize() for _ in range(t["cols"])]
    t["anchor"] = [[f"{r.uniform(0, 999):.1f}" if c else label(r) for c in range(t["cols"])] for _ in range(t["rows"])]
    t["stripe"] = r.random() < 0.5
    t["headc"] = r.choice(t["pal"])
    t["font"] = r.choice(["sans", "mono", "lib"])
    return t


def v_table(t, r):
    cells = [list(x) for x in t["anchor"]]
    for _ in range(r.randint(1, 4)):
        i, j = r.randrange(len(cells)), r.randrange(len(cells[0]))
        cells[i][j] = f"{r.uniform(0, 999):.1f}" if j else label(r)
    return {"cells": cells}


def d_table(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    x0, y0, x1, y1 = W * 0.05, H * 0.06, W * 0.95, H * 0.94
    R, C = t["rows"] + 1, t["cols"]
    rh, cw = (y1 - y0) / R, (x1 - x0) / C
    f = font(t["font"], max(10, min(int(rh * 0.4), int(cw / 8))))
    for i in range(R):
        if i == 0:
            d.rectangle([x0, y0, x1, y0 + rh], fill=t["headc"])
        elif t["stripe"] and i % 2 == 0:
            d.rectangle([x0, y0 + rh * i, x1, y0 + rh * (i + 1)], fill="#eef1f5")
        for j in range(C):
            s = t["head"][j] if i == 0 else data["cells"][i - 1][j]
            text_center(d, (x0 + cw * (j + 0.5), y0 + rh * (i + 0.5)), s, f, "#ffffff" if i == 0 else "#222222")
    for i in range(R + 1):
        d.line([(x0, y0 + rh * i), (x1, y0 + rh * i)], fill="#999999")
    for j in range(C + 1):
        d.line([(x0 + cw * j, y0), (x0 + cw * j, y1)], fill="#999999")
    return im


# --- geometry diagram
def t_geom(r):
    t = base_template(r, "geometry")
    t["bg"] = "#ffffff"
    t["fg"] = "#000000"
    t["circle"] = r.random() < 0.5
    t["lw"] = r.choice([2, 3])
    t["anchor"] = [r.uniform(0, 360) for _ in range(3)]
    t["names"] = r.sample("ABCDEFGHKLMNOPQRS", 4)
    t["h"] = t["w"] = min(t["w"], 900)
    return t


def v_geom(t, r):
    ang = [a + r.uniform(-12, 12) for a in t["anchor"]]
    names = list(t["names"])
    if r.random() < 0.5:
        names[r.randrange(4)] = r.choice("TUVWXYZ")
    return {"ang": ang, "names": names, "deg": r.choice([30, 45, 60, 72, 90, 110, 120])}


def d_geom(t, data):
    W = t["w"]
    im = Image.new("RGB", (W, W), t["bg"])
    d = ImageDraw.Draw(im)
    cx = cy = W / 2
    R = W * 0.35
    pts = [(cx + R * math.cos(math.radians(a)), cy + R * math.sin(math.radians(a))) for a in data["ang"]]
    if t["circle"]:
        d.ellipse([cx - R, cy - R, cx + R, cy + R], outline=t["fg"], width=t["lw"])
        d.ellipse([cx - 4, cy - 4, cx + 4, cy + 4], fill=t["fg"])
        d.line([(cx, cy), pts[0]], fill=t["fg"], width=1)
    d.polygon(pts, outline=t["fg"], width=t["lw"])
    f = font(t["font"], max(14, W // 25))
    for (x, y), n in zip(pts, data["names"]):
        dx, dy = x - cx, y - cy
        n_ = math.hypot(dx, dy) or 1
        text_center(d, (x + dx / n_ * W * 0.05, y + dy / n_ * W * 0.05), n, f, t["fg"])
    text_center(d, (cx + 14, cy + 14), data["names"][3], font(t["font"], max(12, W // 30)), t["fg"])
    x, y = pts[1]
    d.arc([x - 30, y - 30, x + 30, y + 30], 0, 360, fill="#888888")
    d.text((W * 0.05, W * 0.9), f"angle = {data['deg']}\u00b0", font=font(t["font"], max(12, W // 32)), fill=t["fg"])
    return im


# --- text page
def t_page(r):
    t = base_template(r, "textpage")
    t["h"] = min(1200, int(t["w"] * r.uniform(1.1, 1.4)))
    t["font"] = r.choice(["serif", "sans", "lib"])
    t["fs"] = max(11, t["w"] // 45)
    t["paras"] = r.randint(2, 4)
    t["heading"] = r.random() < 0.7
    t["seed"] = r.randrange(10**9)
    return t


def v_page(t, r):
    g = random.Random(t["seed"])
    paras = [[word(g) for _ in range(g.randint(25, 70))] for _ in range(t["paras"])]
    # other words: replace a share of words (same layout)
    share = r.uniform(0.1, 1.0)
    paras = [[word(r) if r.random() < share else w for w in p] for p in paras]
    return {"paras": paras, "head": word(r).capitalize() + " " + word(r)}


def wrap(d, words, f, width):
    lines, cur = [], ""
    for w in words:
        s = (cur + " " + w).strip()
        if d.textlength(s, font=f) > width and cur:
            lines.append(cur)
            cur = w
        else:
            cur = s
    if cur:
        lines.append(cur)
    return lines


def d_page(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    f = font(t["font"], t["fs"])
    m = W * 0.08
    y = H * 0.06
    if t["heading"]:
        d.text((m, y), data["head"], font=font(t["font"], int(t["fs"] * 1.8)), fill=t["fg"])
        y += t["fs"] * 3
    for p in data["paras"]:
        for ln in wrap(d, p, f, W - 2 * m):
            if y > H - m:
                break
            d.text((m, y), ln, font=f, fill=t["fg"])
            y += t["fs"] * 1.45
        y += t["fs"]
    return im


# --- slide
def t_slide(r):
    t = base_template(r, "slide")
    t["h"] = int(t["w"] * 0.5625)
    t["h"] = max(300, t["h"])
    t["band"] = r.choice(t["pal"])
    t["fs"] = max(12, t["w"] // 40)
    t["nb"] = r.randint(3, 5)
    t["logo"] = r.random() < 0.5
    return t


def v_slide(t, r):
    return {"title": " ".join(word(r).capitalize() for _ in range(r.randint(2, 4))),
            "bullets": [" ".join(word(r) for _ in range(r.randint(3, 7))) for _ in range(t["nb"])],
            "page": r.randint(2, 40)}


def d_slide(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    d.rectangle([0, 0, W, H * 0.18], fill=t["band"])
    d.text((W * 0.05, H * 0.05), data["title"], font=font("sansb", int(t["fs"] * 1.5)), fill="#ffffff")
    f = font(t["font"], t["fs"])
    y = H * 0.26
    for b in data["bullets"]:
        d.ellipse([W * 0.06, y + t["fs"] * 0.3, W * 0.06 + t["fs"] * 0.5, y + t["fs"] * 0.8], fill=t["band"])
        d.text((W * 0.09, y), b, font=f, fill=t["fg"])
        y += t["fs"] * 2
    if t["logo"]:
        d.rectangle([W * 0.88, H * 0.88, W * 0.96, H * 0.96], fill=t["pal"][2])
    d.text((W * 0.03, H * 0.92), str(data["page"]), font=font(t["font"], max(10, t["fs"] // 2)), fill="#888888")
    return im


# --- form / screenshot
def t_form(r):
    t = base_template(r, "form")
    t["bg"] = r.choice(["#ffffff", "#f3f3f3", "#eef2f7"])
    t["nf"] = r.randint(2, 5)
    t["btn"] = r.choice(t["pal"])
    t["labels"] = [word(r).capitalize() for _ in range(t["nf"])]
    t["bar"] = r.random() < 0.6
    return t


def v_form(t, r):
    vals = ["" if r.random() < 0.5 else " ".join(word(r) for _ in range(r.randint(1, 2))) for _ in range(t["nf"])]
    labels = list(t["labels"])
    if r.random() < 0.3:
        labels[r.randrange(len(labels))] = word(r).capitalize()
    return {"vals": vals, "labels": labels, "btn": r.choice(["Submit", "Save", "Login", "Next", "OK"]), "check": r.random() < 0.5}


def d_form(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    if t["bar"]:
        d.rectangle([0, 0, W, H * 0.08], fill="#2d2d30")
        for k in range(3):
            d.ellipse([10 + k * 22, H * 0.02, 24 + k * 22, H * 0.02 + 14], fill=["#ff5f56", "#ffbd2e", "#27c93f"][k])
    f = font(t["font"], t["fs"] + 2)
    y = H * 0.14
    step = (H * 0.65) / t["nf"]
    for lab, val in zip(data["labels"], data["vals"]):
        d.text((W * 0.1, y), lab, font=f, fill=t["fg"])
        d.rounded_rectangle([W * 0.1, y + t["fs"] * 1.8, W * 0.9, y + t["fs"] * 1.8 + step * 0.45], radius=6, outline="#999999", fill="#ffffff", width=1)
        if val:
            d.text((W * 0.12, y + t["fs"] * 2.2), val, font=f, fill="#444444")
        y += step
    d.rectangle([W * 0.1, H * 0.84, W * 0.1 + 18, H * 0.84 + 18], outline="#666666", width=2)
    if data["check"]:
        d.line([(W * 0.1 + 3, H * 0.84 + 9), (W * 0.1 + 8, H * 0.84 + 15), (W * 0.1 + 16, H * 0.84 + 3)], fill="#222222", width=2)
    d.rounded_rectangle([W * 0.62, H * 0.82, W * 0.9, H * 0.93], radius=8, fill=t["btn"])
    text_center(d, (W * 0.76, H * 0.875), data["btn"], f, "#ffffff")
    return im


# --- app screenshot: sidebar + list
def t_app(r):
    t = base_template(r, "app")
    t["bg"], t["fg"] = r.choice(["#ffffff", "#fafafa", "#f4f6f8"]), "#222222"  # list text is dark
    t["side"] = r.choice(["#2b2d42", "#f0f0f0", "#1f3a5f", "#e8eaed"])
    t["sidew"] = r.uniform(0.18, 0.28)
    t["nitems"] = r.randint(5, 9)
    t["menu"] = [word(r).capitalize() for _ in range(6)]
    t["acc"] = r.choice(t["pal"])
    return t


def v_app(t, r):
    return {"items": [" ".join(word(r) for _ in range(r.randint(2, 5))) for _ in range(t["nitems"])],
            "sel": r.randrange(6), "badge": r.randint(0, 99)}


def d_app(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    sw = W * t["sidew"]
    d.rectangle([0, 0, sw, H], fill=t["side"])
    dark = t["side"] in ("#2b2d42", "#1f3a5f")
    f = font(t["font"], t["fs"] + 1)
    for k, m in enumerate(t["menu"]):
        y = H * 0.1 + k * (t["fs"] * 2.4)
        if k == data["sel"]:
            d.rectangle([0, y - 6, sw, y + t["fs"] * 1.6], fill=t["acc"])
        d.text((sw * 0.15, y), m, font=f, fill="#ffffff" if dark or k == data["sel"] else "#333333")
    d.rectangle([sw, 0, W, H * 0.09], fill="#ffffff", outline="#dddddd")
    d.text((sw + 15, H * 0.025), "Inbox", font=font("sansb", t["fs"] + 3), fill="#222222")
    d.ellipse([W - 50, H * 0.015, W - 20, H * 0.015 + 30], fill=t["acc"])
    text_center(d, (W - 35, H * 0.015 + 15), str(data["badge"]), font("sans", 11), "#ffffff")
    ih = (H * 0.88) / t["nitems"]
    for k, it in enumerate(data["items"]):
        y = H * 0.1 + k * ih
        d.line([(sw + 10, y + ih - 2), (W - 10, y + ih - 2)], fill="#e0e0e0")
        d.ellipse([sw + 15, y + ih * 0.2, sw + 15 + ih * 0.55, y + ih * 0.75], fill=t["pal"][k % 8])
        d.text((sw + 25 + ih * 0.6, y + ih * 0.3), it, font=f, fill="#333333")
    return im


# --- heatmap (numpy)
def t_heat(r):
    t = base_template(r, "heatmap")
    t["n"] = r.randint(5, 12)
    t["anchor"] = np.array([[r.random() for _ in range(t["n"])] for _ in range(t["n"])])
    t["cmap"] = r.choice(["blue", "red", "viridis"])
    t["numbers"] = r.random() < 0.5
    return t


def v_heat(t, r):
    a = t["anchor"].copy()
    for _ in range(r.randint(2, 6)):
        a[r.randrange(t["n"]), r.randrange(t["n"])] = r.random()
    return {"a": a}


def cmap(name, v):
    if name == "blue":
        return (int(255 - 200 * v), int(255 - 150 * v), 255)
    if name == "red":
        return (255, int(255 - 200 * v), int(255 - 220 * v))
    return (int(68 + 185 * v ** 1.5), int(1 + 230 * v), int(84 + 80 * math.sin(v * 3)))


def d_heat(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    n = t["n"]
    x0, y0 = W * 0.12, H * 0.08
    cw, ch = W * 0.75 / n, H * 0.84 / n
    f = font(t["font"], max(9, int(min(cw, ch) * 0.3)))
    for i in range(n):
        for j in range(n):
            v = float(data["a"][i, j])
            d.rectangle([x0 + cw * j, y0 + ch * i, x0 + cw * (j + 1), y0 + ch * (i + 1)], fill=cmap(t["cmap"], v))
            if t["numbers"]:
                text_center(d, (x0 + cw * (j + 0.5), y0 + ch * (i + 0.5)), f"{v:.2f}", f, "#000000" if v < 0.6 else "#ffffff")
    for k in range(50):
        d.rectangle([W * 0.9, y0 + H * 0.84 * k / 50, W * 0.93, y0 + H * 0.84 * (k + 1) / 50], fill=cmap(t["cmap"], 1 - k / 50))
    return im


# --- flowchart
def t_flow(r):
    t = base_template(r, "flowchart")
    t["nb"] = r.randint(3, 6)
    t["boxc"] = r.choice(t["pal"])
    t["vertical"] = r.random() < 0.5
    t["labels"] = [word(r).capitalize() for _ in range(t["nb"])]
    return t


def v_flow(t, r):
    labels = list(t["labels"])
    for _ in range(r.randint(1, 2)):
        labels[r.randrange(len(labels))] = word(r).capitalize()
    return {"labels": labels, "diamond": r.randrange(t["nb"])}


def d_flow(t, data):
    W, H = t["w"], t["h"]
    im = Image.new("RGB", (W, H), t["bg"])
    d = ImageDraw.Draw(im)
    n = t["nb"]
    f = font(t["font"], t["fs"] + 2)
    centers = []
    for k in range(n):
        if t["vertical"]:
            cx, cy = W / 2, H * (k + 0.5) / n
            bw, bh = W * 0.3, H / n * 0.5
        else:
            cx, cy = W * (k + 0.5) / n, H / 2
            bw, bh = W / n * 0.7, H * 0.18
        centers.append((cx, cy, bw, bh))
    for k in range(n - 1):
        (ax, ay, aw, ah), (bx, by, bw_, bh_) = centers[k], centers[k + 1]
        if t["vertical"]:
            d.line([(ax, ay + ah / 2), (bx, by - bh_ / 2)], fill=t["fg"], width=2)
            d.polygon([(bx - 6, by - bh_ / 2 - 10), (bx + 6, by - bh_ / 2 - 10), (bx, by - bh_ / 2)], fill=t["fg"])
        else:
            d.line([(ax + aw / 2, ay), (bx - bw_ / 2, by)], fill=t["fg"], width=2)
            d.polygon([(bx - bw_ / 2 - 10, by - 6), (bx - bw_ / 2 - 10, by + 6), (bx - bw_ / 2, by)], fill=t["fg"])
    for k, (cx, cy, bw, bh) in enumerate(centers):
        if k == data["diamond"]:
            d.polygon([(cx, cy - bh / 2), (cx + bw / 2, cy), (cx, cy + bh / 2), (cx - bw / 2, cy)], fill="#ffffff", outline=t["boxc"], width=3)
        else:
            d.rounded_rectangle([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], radius=10, fill=t["boxc"])
        text_center(d, (cx, cy), data["labels"][k], f, t["fg"] if k == data["diamond"] else "#ffffff")
    return im


# --- histogram / area (numpy)
def t_hist(r):
    t = base_template(r, "histogram")
    t["mu"], t["sd"] = r.uniform(3, 7), r.uniform(0.8, 2)
    t["bins"] = r.randint(12, 30)
    t["fill"] = r.choice(t["pal"])
    t["seed"] = r.randrange(10**9)
    t["ymax"] = 10
    return t


def v_hist(t, r):
    g = np.random.default_rng(t["seed"])
    x = g.normal(t["mu"], t["sd"], 400)
    extra = np.random.default_rng(r.randrange(10**9)).normal(t["mu"] + r.uniform(-1, 1), t["sd"], r.randint(20, 80))
    h, _ = np.histogram(np.concatenate([x, extra]), bins=t["bins"], range=(0, 10))
    return {"h": (h / max(1, h.max()) * 9).tolist(), "title": t["title"]}


def d_hist(t, data):
    im, d, (x0, y0, x1, y1) = axes_canvas(t, (0.1, 0.12, 0.95, 0.88))
    W, H = im.size
    n = len(data["h"])
    bw = (x1 - x0) / n
    for k, v in enumerate(data["h"]):
        d.rectangle([x0 + bw * k, min(y1 - 2, y1 - (y1 - y0) * v / 10), x0 + bw * (k + 1), y1 - 1], fill=t["fill"], outline=t["bg"])
    text_center(d, (W / 2, y0 / 2), data["title"], font(t["font"], t["fs"] + 4), t["fg"])
    return im


MIN_DIFF = 0.0005  # share of pixels (grey |diff| > 24) by which two bases of a family must differ

KINDS = {
    "vbar": (t_vbar, v_bars, d_vbar), "hbar": (t_hbar, v_bars, d_hbar), "grouped": (t_group, v_group, d_group),
    "stacked": (t_stack, v_stack, d_stack), "pie": (t_pie, v_pie, d_pie), "line": (t_line, v_line, d_line),
    "scatter": (t_scatter, v_scatter, d_scatter), "table": (t_table, v_table, d_table),
    "geometry": (t_geom, v_geom, d_geom), "textpage": (t_page, v_page, d_page), "slide": (t_slide, v_slide, d_slide),
    "form": (t_form, v_form, d_form), "app": (t_app, v_app, d_app), "heatmap": (t_heat, v_heat, d_heat),
    "flowchart": (t_flow, v_flow, d_flow), "histogram": (t_hist, v_hist, d_hist),
}

# ---------------------------------------------------------------------------------------------------
# edits
# ---------------------------------------------------------------------------------------------------
EDITS = ["jpeg", "resize", "crop_center", "crop_offset", "grey", "bright_up", "bright_down", "blur",
         "caption_bar", "corner_box", "watermark"]


def apply_edit(im, edit, r):
    """-> (image, save format, params)"""
    W, H = im.size
    if edit == "jpeg":
        return im, ("JPEG", r.randint(30, 60)), {}
    if edit == "resize":
        s = r.uniform(0.5, 0.75)
        return im.resize((max(1, int(W * s)), max(1, int(H * s))), Image.LANCZOS), ("PNG", None), {"scale": round(s, 3)}
    if edit == "crop_center":
        p = r.uniform(0.03, 0.06)
        return im.crop((int(W * p), int(H * p), W - int(W * p), H - int(H * p))), ("PNG", None), {"pct": round(p, 3)}
    if edit == "crop_offset":
        l, t, rr, b = (r.uniform(0.0, 0.06) for _ in range(4))
        if l + rr < 0.06:
            l = 0.06 - rr
        if t + b < 0.06:
            b = 0.06 - t
        return im.crop((int(W * l), int(H * t), W - int(W * rr), H - int(H * b))), ("PNG", None), {"ltrb": [round(x, 3) for x in (l, t, rr, b)]}
    if edit == "grey":
        return ImageOps.grayscale(im).convert("RGB"), ("PNG", None), {}
    if edit in ("bright_up", "bright_down"):
        f = r.uniform(1.08, 1.15) if edit == "bright_up" else r.uniform(0.85, 0.92)
        return ImageEnhance.Brightness(im).enhance(f), ("PNG", None), {"f": round(f, 3)}
    if edit == "blur":
        return im.filter(ImageFilter.GaussianBlur(1)), ("PNG", None), {}
    if edit == "caption_bar":
        frac = r.uniform(0.10, 0.20)
        bh = int(H * frac)
        dark = r.random() < 0.5
        top = r.random() < 0.5
        out = im.copy()
        d = ImageDraw.Draw(out)
        y0 = 0 if top else H - bh
        d.rectangle([0, y0, W, y0 + bh], fill="#111111" if dark else "#f0f0f0")
        txt = " ".join(word(r) for _ in range(r.randint(3, 7)))
        d.text((10, y0 + bh * 0.25), txt, font=font("sans", max(10, int(bh * 0.45))), fill="#eeeeee" if dark else "#111111")
        return out, ("PNG", None), {"frac": round(frac, 3), "top": top, "dark": dark}
    if edit == "corner_box":
        out = im.copy()
        d = ImageDraw.Draw(out)
        bw, bh = 200, 30
        corner = r.choice(["tl", "tr", "bl", "br"])
        x = 5 if corner[1] == "l" else W - bw - 5
        y = 5 if corner[0] == "t" else H - bh - 5
        d.rectangle([x, y, x + bw, y + bh], fill="#ffffff", outline="#333333")
        d.text((x + 8, y + 6), " ".join(word(r) for _ in range(2)) + f" {r.randint(1, 999)}", font=font("sans", 15), fill="#111111")
        return out, ("PNG", None), {"corner": corner}
    if edit == "watermark":
        base = im.convert("RGBA")
        layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
        d = ImageDraw.Draw(layer)
        txt = r.choice(["CONFIDENTIAL", "SAMPLE", "DRAFT", "© example.org", "PREVIEW"])
        f = font("sansb", max(18, W // 9))
        tw = d.textlength(txt, font=f)
        d.text(((W - tw) / 2, H / 2 - W // 18), txt, font=f, fill=(128, 128, 128, r.randint(60, 110)))
        layer = layer.rotate(r.uniform(-30, 30), resample=Image.BICUBIC, center=(W / 2, H / 2))
        return Image.alpha_composite(base, layer).convert("RGB"), ("PNG", None), {"text": txt}
    raise ValueError(edit)


def save(im, path, fmt):
    kind, q = fmt
    if kind == "JPEG":
        im.save(path.with_suffix(".jpg"), "JPEG", quality=q)
        return path.with_suffix(".jpg")
    im.save(path.with_suffix(".png"), "PNG")
    return path.with_suffix(".png")


def add_copies(r, im, info, outdir, files, edit_cycle, share=1 / 3):
    """1-3 edited copies of a third of the bases, the edits taken in turn from edit_cycle."""
    if r.random() >= share:
        return
    for j in range(r.choice([1, 1, 2, 2, 3])):
        e = next(edit_cycle)
        out, fmt, params = apply_edit(im, e, r)
        p = save(out, outdir / f"{info['figure']}_c{j}", fmt)
        files[f"{outdir.name}/{p.name}"] = dict(info, edit=e, params=params)  # params: the edit's sizes, to look at


def cycler(r):
    while True:
        es = EDITS[:]
        r.shuffle(es)
        yield from es


def draw_half(outdir: Path, seed: int, files: dict) -> None:
    """One half: every kind once and 8 kinds twice (another template), into outdir."""
    r = random.Random(seed)
    outdir.mkdir(parents=True, exist_ok=True)
    edits = cycler(r)
    kinds = list(KINDS)
    for fi, kind in enumerate(kinds + r.sample(kinds, 8)):
        make, vary, draw = KINDS[kind]
        t = make(r)
        family = f"{outdir.name}-{kind}-{fi:02d}"
        drawn = []  # the family's bases as grey arrays: a new base must differ visibly from each
        for _ in range(r.randint(13, 18)):
            for _try in range(30):
                im = draw(t, vary(t, r))
                g = np.asarray(im.convert("L"), dtype=np.int16)
                if all((np.abs(g - o) > 24).mean() >= MIN_DIFF for o in drawn):
                    break
            else:
                continue  # no distinct one in 30 tries: one base fewer
            drawn.append(g)
            bid = f"{outdir.name[0]}{len(files):05d}"
            p = save(im, outdir / bid, ("JPEG", 90) if r.random() < 0.2 else ("PNG", None))
            info = {"figure": bid, "family": family, "kind": kind, "half": outdir.name}
            files[f"{outdir.name}/{p.name}"] = dict(info, edit=None)
            add_copies(r, im, info, outdir, files, edits)


def build(out: Path, seed: int) -> dict:
    """Both halves under out; returns rel path -> {"figure", "family", "kind", "edit", "half"}."""
    files: dict = {}
    for k, half in enumerate(("tuning", "held_back")):
        draw_half(out / half, seed * 1000 + k, files)
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    files = build(args.out, args.seed)
    (args.out / "manifest.json").write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    print(f"{len(files)} files in {args.out}")


if __name__ == "__main__":
    main()
