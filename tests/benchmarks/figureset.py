"""A benchmark set of flat figures in families of look-alikes, drawn with matplotlib, with edited copies.

Run by bench_dedupe_quality.py with the interpreter of .bench-venv (matplotlib, numpy and Pillow;
the project's env carries no matplotlib):

    python figureset.py OUTDIR --seed S --figures N [--edited 0.34] [--per-edit 32] [--workers 2]
    python figureset.py OUTDIR --seed S --scale N

Writes OUTDIR/<half>/<file> and OUTDIR/manifest.json: {"files": {"<half>/<file>": {"figure": id,
"edit": name or null, "family": "<kind>/t<n>", "kind": kind, "half": half, "near": bool}}, ...}.
Nothing here is committed; the set is rebuilt from the seed.

What is hard about it: figures come in families. A family is one template (figure size and dpi,
palette, fonts, layout, labels, title) drawn many times with other data, the way a synthetic chart
dataset or a worksheet generator makes them, so two figures of one family differ only where the
data differ and are different figures all the same. The kinds, and what each family tests:

    pie          slices of one palette, labels and start angle; only the shares differ (the known
                 failure: a pie's thumbnail is dominated by its palette and outline). In a "near"
                 family every pie is one reference pie with one or two slices moved by 4..8 points
    bar          one colour scheme, categories, axis range and title; other heights. In a "near"
                 family every chart is one reference chart with 1..3 bars changed by 10..30 % of
                 the axis range
    grouped_bar  series per group with a legend; other heights
    line         1..4 series over the same years, markers and grid; other walks
    scatter      point clouds in one style; other points
    table        a matplotlib table, same header, columns and shading; other words and numbers
    figureqa     FigureQA-style: vertical or horizontal bars, lines, dot-lines or pies coloured
                 and labelled with named colours ("Dark Orchid"), axis titles "xaxis_label"
                 and "yaxis_label"; one colour set per family
    dvqa         DVQA-style bars (single, grouped or stacked, some hatched) whose category labels,
                 title and values are other words and numbers in each chart
    geometry     one drawing style (line width, colour, font): a triangle with angle marks, a
                 circle with chords, parallel lines cut by a transversal, a quadrilateral with its
                 diagonals; other vertex positions, letters and angle values
    text_page    a worksheet page of one font, margins and line count; other words (laid out with
                 Pillow in matplotlib's TrueType fonts: matplotlib draws text glyph by glyph)
    slide        a 16:9 slide with a coloured title band and a fixed number of bullets; other words
    form         a screenshot of an application window with a sidebar and a form; other field
                 names, values and menu entries
    pil_bar      Pillow-drawn bar charts (shapes without anti-aliasing, Pillow's default font)
    pil_text     Pillow-drawn text pages

Within a family no two figures are so close that a reader could not tell them apart at a glance:
pies differ by >= MIN_PIE_GAP in some share, bar charts by >= MIN_BAR_GAP of the axis range in some
bar, geometry diagrams by >= 4 % of the frame in some vertex (8 degrees for a point on a circle, 4
for a transversal), pages, slides, forms and tables in their words. Figures are 400 to 1200 px
wide, drawn 4.5 to 8.5 inches wide (so at 47 to 200 dpi).

Halves: the bench tunes the engine's rule on one half and reports on the other, so the split is
by family and kind, never by figure, and fixed (it does not move with the seed): scatter, figureqa,
slide and pil_bar are tuning-only; table, dvqa, form and pil_text are held back whole; every other
kind alternates its templates between the halves (pie and bar also alternate their near families).

Edited copies (edits.py): about a third of the figures get 1..3, dealt so that every edit occurs
about --per-edit times in each half.

--scale N: N figures of one pie template and N of one bar template (different data, no copies), in
OUTDIR/scale: every pair is a false pair, so an engine should find no cluster at all.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import random
import string
import sys
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

import edits

MIN_PIE_GAP = 0.03  # shares (of 1): two pies of a family differ by at least this in some slice
MIN_BAR_GAP = 0.08  # of the axis range: two bar charts of a family differ by at least this in some bar
FAMILY = 14  # figures per template, on average
HALVES = ("tuning", "held_back")
WHOLE_KIND_HALF = {"scatter": "tuning", "figureqa": "tuning", "slide": "tuning", "pil_bar": "tuning",
                   "table": "held_back", "dvqa": "held_back", "form": "held_back", "pil_text": "held_back"}
WEIGHTS = {"pie": 2.0, "bar": 2.0, "grouped_bar": 1.0, "line": 1.0, "scatter": 1.0, "table": 1.0, "figureqa": 1.0,
           "dvqa": 1.0, "geometry": 1.5, "text_page": 1.0, "slide": 1.0, "form": 1.0, "pil_bar": 0.5,
           "pil_text": 0.5}
NEAR_KINDS = ("pie", "bar")  # kinds with "near" families (one reference, small changes)
FIGURE_EDITS = ("jpeg", "resize", "crop", "offcentre_crop", "corner_box", "caption_bar", "watermark", "grey",
                "blur", "bright")

FONTS = ("DejaVu Sans", "DejaVu Serif", "DejaVu Sans Mono", "STIXGeneral")
TTF = {"DejaVu Sans": ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf"), "DejaVu Serif": ("DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf"),
       "DejaVu Sans Mono": ("DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf"),
       "STIXGeneral": ("STIXGeneral.ttf", "STIXGeneralBol.ttf")}
QUALITATIVE = ("tab10", "Set1", "Set2", "Set3", "Pastel1", "Pastel2", "Dark2", "Paired", "Accent", "tab20")
SEQUENTIAL = ("viridis", "plasma", "Blues", "Greens", "coolwarm", "cividis", "magma", "Oranges")
VOCAB = ("the angle sum of a triangle is equal to two right angles hence area figure follows from ratio sides "
         "and height which we compute step by step for each case below given that point lies on circle centre "
         "radius chord tangent prove find value length measure degrees parallel line segment bisects opposite "
         "interior exterior similar congruent therefore let denote function graph shows table lists number "
         "students survey percentage total average median price year month sales growth rate per cent first "
         "second third answer question choose correct option explain why reason shown above").split()
CATEGORIES = ("Rent Food Transport Health Leisure Savings Energy Water Education Clothing Taxes Travel "
              "Books Music Sports Games Apples Pears Plums Grapes Cherries Lemons North South East West "
              "Central Alpha Beta Gamma Delta Omega Mon Tue Wed Thu Fri Sat Sun").split()
YEARS = [str(y) for y in range(1990, 2030)]


# ---- templates and data ------------------------------------------------------------------------


def _size(rng: random.Random, aspect: float, widths=(400, 480, 560, 640, 720, 800, 900, 1024, 1200)) -> dict:
    w = rng.choice(widths)
    h = max(round(w / aspect), 200)
    dpi = min(w / rng.uniform(4.5, 8.5), 200.0)  # 4.5 .. 8.5 inches wide (6 .. 8.5 at 1200 px)
    return {"w": w, "h": h, "dpi": round(dpi, 2)}


def _palette(rng: random.Random, n: int, dark: bool = False) -> list[str]:
    """n colours of one colour map; `dark`: none so light that a dot or thin line of it fades on white."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex, to_rgb

    if dark:
        out = []
        for c in _palette(rng, n):
            r, g, b = to_rgb(c)
            k = min(1.0, 0.55 / max(0.299 * r + 0.587 * g + 0.114 * b, 1e-6))
            out.append(to_hex((r * k, g * k, b * k)))
        return out

    if rng.random() < 0.7:
        cmap = colormaps[rng.choice(QUALITATIVE)]
        colours = list(getattr(cmap, "colors", [cmap(i / max(n - 1, 1)) for i in range(n)]))
        start = rng.randrange(len(colours))
        return [to_hex(colours[(start + i) % len(colours)]) for i in range(n)]
    cmap = colormaps[rng.choice(SEQUENTIAL)]
    lo, hi = sorted((rng.uniform(0.0, 0.3), rng.uniform(0.7, 1.0)))
    return [to_hex(cmap(lo + (hi - lo) * i / max(n - 1, 1))) for i in range(n)]


def _style(rng: random.Random, aspect: float, **kw) -> dict:
    return {**_size(rng, aspect, **kw), "font": rng.choice(FONTS), "fs": rng.choice((8, 9, 10, 11, 12)),
            "spines": rng.random() < 0.5, "grid": rng.random() < 0.5}


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def _far(x: np.ndarray, prev: list, gap: float) -> bool:
    return not prev or bool(np.min(np.max(np.abs(np.asarray(prev) - x), axis=1)) >= gap)


def _sample(make, prev: list, gap: float, rng: random.Random):
    """make() until its vector is at least `gap` (max norm) from every earlier one of the family,
    which it then joins."""
    for _ in range(2000):
        x = np.asarray(make(), np.float64)
        if _far(x, prev, gap):
            prev.append(x)
            return x
    raise SystemExit(f"figureset: cannot place another figure {gap} from the {len(prev)} drawn (family too large)")


def pie_template(rng: random.Random, near: bool, n: int | None = None) -> dict:
    n = n or rng.randint(3, 7)
    t = {**_style(rng, rng.choice((1.0, 4 / 3, 3 / 2))), "n": n, "colours": _palette(rng, n),
         "labels": rng.sample(CATEGORIES, n), "start": rng.choice((0, 90, 140)), "ccw": rng.random() < 0.7,
         "autopct": rng.choice(("%1.0f%%", "%1.1f%%", "")), "legend": rng.random() < 0.4,
         "donut": rng.random() < 0.25, "edge": rng.choice((0.0, 0.8, 1.5)), "explode": rng.random() < 0.2,
         "title": rng.choice(("Household budget", "Market share", "Survey answers", "Energy mix", "")),
         "near": near}
    if near:
        t["ref"] = list(np.random.default_rng(rng.randrange(2**32)).dirichlet(np.full(n, 3.0)))
    return t


def pie_data(t: dict, rng: random.Random, prev: list) -> dict:
    g = np.random.default_rng(rng.randrange(2**32))

    def make():
        if not t["near"]:
            return g.dirichlet(np.full(t["n"], 2.0))
        x = np.array(t["ref"])
        for _ in range(g.integers(1, 3)):  # one or two slices moved by 4..8 points
            i, j = g.choice(t["n"], 2, replace=False)
            delta = min(g.uniform(0.04, 0.08), x[j] - 0.02)
            x[i], x[j] = x[i] + delta, x[j] - delta
        return x

    return {"x": _sample(make, prev, MIN_PIE_GAP, rng).tolist()}


def bar_template(rng: random.Random, near: bool, n: int | None = None) -> dict:
    n = n or rng.randint(4, 12)
    one = rng.random() < 0.6
    t = {**_style(rng, rng.choice((4 / 3, 3 / 2, 16 / 10))), "n": n,
         "colours": _palette(rng, 1) * n if one else _palette(rng, n), "labels": rng.sample(CATEGORIES, n),
         "horizontal": rng.random() < 0.25, "top": rng.choice((10, 50, 100, 1000)), "values": rng.random() < 0.4,
         "edge": rng.choice(("none", "black")), "width": rng.choice((0.5, 0.7, 0.85)), "rot": rng.choice((0, 0, 45)),
         "title": rng.choice(("Sales by region", "Votes", "Rainfall (mm)", "Scores", "Units sold", "")),
         "ylabel": rng.choice(("Value", "Count", "Percent", "")), "near": near}
    if near:
        t["ref"] = [rng.uniform(0.1, 0.95) for _ in range(n)]
    return t


def bar_data(t: dict, rng: random.Random, prev: list) -> dict:
    def make():
        if not t["near"]:
            return [rng.uniform(0.05, 0.95) for _ in range(t["n"])]
        y = list(t["ref"])
        for i in rng.sample(range(t["n"]), rng.randint(1, min(3, t["n"]))):
            y[i] = min(max(y[i] + rng.choice((-1, 1)) * rng.uniform(0.1, 0.3), 0.03), 0.98)
        return y

    return {"y": _sample(make, prev, MIN_BAR_GAP, rng).tolist()}


def grouped_template(rng: random.Random, near: bool) -> dict:
    groups, series = rng.randint(3, 6), rng.randint(2, 4)
    return {**_style(rng, rng.choice((4 / 3, 3 / 2, 16 / 9))), "groups": rng.sample(YEARS, groups),
            "series": rng.sample(CATEGORIES, series), "colours": _palette(rng, series),
            "legend": rng.choice(("upper left", "upper right", "lower center", "outside")),
            "top": rng.choice((10, 100, 500)), "title": rng.choice(("Results by year", "Enrolment", "Output", ""))}


def grouped_data(t: dict, rng: random.Random, prev: list) -> dict:
    n = len(t["groups"]) * len(t["series"])
    return {"y": _sample(lambda: [rng.uniform(0.05, 0.95) for _ in range(n)], prev, MIN_BAR_GAP, rng).tolist()}


def line_template(rng: random.Random, near: bool) -> dict:
    series = rng.randint(1, 4)
    start = rng.randrange(len(YEARS) - 30)
    return {**_style(rng, rng.choice((4 / 3, 3 / 2, 16 / 9, 2.0))), "series": rng.sample(CATEGORIES, series),
            "colours": _palette(rng, series, dark=True), "points": rng.choice((8, 12, 20, 30)), "start": start,
            "marker": rng.choice(("o", "s", "^", "", "D")), "lw": rng.choice((1.0, 1.5, 2.5)),
            "legend": series > 1 and rng.random() < 0.8, "ylim": rng.choice((None, (0, 100))),
            "title": rng.choice(("Temperature", "Price index", "Population (millions)", "Visitors", ""))}


def line_data(t: dict, rng: random.Random, prev: list) -> dict:
    g = np.random.default_rng(rng.randrange(2**32))
    ys = []
    for _ in t["series"]:
        y = np.cumsum(g.normal(0, 6, t["points"])) + g.uniform(25, 75)
        ys.append(np.clip(y, 2, 98).tolist())
    return {"ys": ys}


def scatter_template(rng: random.Random, near: bool) -> dict:
    groups = rng.randint(1, 3)
    return {**_style(rng, rng.choice((1.0, 4 / 3, 3 / 2))), "groups": groups, "colours": _palette(rng, groups, dark=True),
            "n": rng.choice((30, 60, 120, 250)), "size": rng.choice((12, 20, 40)), "alpha": rng.choice((0.6, 0.8, 1.0)),
            "fit": rng.random() < 0.4, "xlabel": rng.choice(("Height (cm)", "x", "Age", "Hours studied")),
            "ylabel": rng.choice(("Weight (kg)", "y", "Income", "Score"))}


def scatter_data(t: dict, rng: random.Random, prev: list) -> dict:
    g = np.random.default_rng(rng.randrange(2**32))
    pts = []
    for _ in range(t["groups"]):
        c = g.uniform(20, 80, 2)
        cov = g.uniform(3, 15)
        slope = g.uniform(-1, 1)
        x = g.normal(c[0], cov, t["n"] // t["groups"])
        y = c[1] + slope * (x - c[0]) + g.normal(0, cov / 2, x.size)
        pts.append([np.clip(x, 0, 100).tolist(), np.clip(y, 0, 100).tolist()])
    return {"pts": pts}


def table_template(rng: random.Random, near: bool) -> dict:
    cols = rng.randint(3, 6)
    return {**_style(rng, rng.choice((4 / 3, 3 / 2, 1.0, 0.8))), "cols": cols, "rows": rng.randint(5, 12),
            "header": [rng.choice(("Name", "Item", "City", "Student")), *rng.sample(YEARS + CATEGORIES, cols - 1)],
            "head_colour": _palette(rng, 1)[0], "zebra": rng.random() < 0.6, "decimals": rng.choice((0, 1, 2)),
            "title": rng.choice(("Table 1", "Results", "Monthly figures", ""))}


def table_data(t: dict, rng: random.Random, prev: list) -> dict:
    cells = []
    for _ in range(t["rows"]):
        row = [rng.choice(VOCAB).capitalize()]
        row += [f"{rng.uniform(0, 10 ** rng.randint(1, 4)):.{t['decimals']}f}" for _ in range(t["cols"] - 1)]
        cells.append(row)
    return {"cells": cells}


def figureqa_template(rng: random.Random, near: bool) -> dict:
    from matplotlib.colors import CSS4_COLORS

    kind = rng.choice(("vbar", "hbar", "line", "dotline", "pie"))
    n = rng.randint(3, 8) if kind in ("vbar", "hbar", "pie") else rng.randint(2, 5)
    names = rng.sample(sorted(c for c in CSS4_COLORS if c not in ("white", "snow", "ivory", "ghostwhite")), n)
    return {**_size(rng, rng.choice((4 / 3, 3 / 2, 1.0))), "font": "DejaVu Sans", "fs": 10, "plot": kind,
            "names": names, "grid": rng.random() < 0.5, "legend": rng.choice(("best", "upper right", "outside"))}


def figureqa_data(t: dict, rng: random.Random, prev: list) -> dict:
    n = len(t["names"])
    if t["plot"] in ("vbar", "hbar", "pie"):
        return {"y": _sample(lambda: [rng.uniform(0.05, 1.0) for _ in range(n)], prev, MIN_BAR_GAP, rng).tolist()}
    g = np.random.default_rng(rng.randrange(2**32))
    x = np.linspace(0, 100, 20)
    return {"ys": [(g.uniform(10, 90) + g.uniform(-0.6, 0.6) * x + g.normal(0, 3, x.size)).tolist() for _ in range(n)]}


def dvqa_template(rng: random.Random, near: bool) -> dict:
    style = rng.choice(("single", "grouped", "stacked"))
    series = 1 if style == "single" else rng.randint(2, 3)
    return {**_style(rng, rng.choice((4 / 3, 1.0, 3 / 2))), "style": style, "series": series,
            "bars": rng.randint(3, 9), "colours": _palette(rng, series),
            "hatch": [rng.choice(("", "//", "..", "xx", "\\\\", "oo")) for _ in range(series)] if rng.random() < 0.4
            else [""] * series, "log": rng.random() < 0.2, "horizontal": rng.random() < 0.3}


def dvqa_data(t: dict, rng: random.Random, prev: list) -> dict:
    return {"labels": [rng.choice(VOCAB) for _ in range(t["bars"])],
            "legend": [rng.choice(VOCAB) for _ in range(t["series"])],
            "y": [[rng.randint(1, 10) for _ in range(t["bars"])] for _ in range(t["series"])],
            "title": f"{rng.choice(('Accuracy', 'Scores', 'Sales', 'Most preferred'))} of {_words(rng, 2)}",
            "ylabel": rng.choice(("Accuracy", "Values", "Number of people", "Sales"))}


def geometry_template(rng: random.Random, near: bool) -> dict:
    shape = rng.choice(("triangle", "circle", "parallel", "quad"))
    t = {**_size(rng, rng.choice((4 / 3, 1.0, 3 / 2, 16 / 10))), "font": rng.choice(FONTS), "fs": rng.choice((10, 12, 14)),
         "lw": rng.choice((0.8, 1.2, 2.0)), "colour": rng.choice(("black", "#1f3b73", "#333333")), "shape": shape,
         "marks": rng.random() < 0.6, "dashed": rng.random() < 0.5}
    if shape == "triangle":
        t["ref"] = [[0.12, 0.12], [0.88, 0.15], [rng.uniform(0.3, 0.7), 0.85]]
    elif shape == "quad":
        t["ref"] = [[0.15, 0.15], [0.85, 0.12], [0.82, 0.85], [0.2, 0.82]]
    elif shape == "circle":
        t["ref"] = sorted(rng.uniform(0, 360) for _ in range(4))
    return t


def geometry_data(t: dict, rng: random.Random, prev: list) -> dict:
    letters = rng.sample(string.ascii_uppercase, 5)
    angles = [f"{rng.randint(20, 140)}°" for _ in range(3)]
    if t["shape"] in ("triangle", "quad"):
        def make():
            return [c + rng.uniform(-0.09, 0.09) for p in t["ref"] for c in p]

        pts = _sample(make, prev, 0.04, rng).tolist()
        return {"pts": pts, "letters": letters, "angles": angles}
    if t["shape"] == "circle":
        return {"pts": _sample(lambda: [a + rng.uniform(-25, 25) for a in t["ref"]], prev, 8.0, rng).tolist(),
                "letters": letters, "angles": angles}
    return {"pts": _sample(lambda: [rng.uniform(35, 145), rng.uniform(0.3, 0.7)], prev, 4.0, rng).tolist(),
            "letters": letters, "angles": angles}


def text_template(rng: random.Random, near: bool) -> dict:
    return {**_size(rng, rng.choice((0.77, 0.71, 4 / 3)), widths=(480, 600, 720, 850, 1000, 1200)),
            "font": rng.choice(FONTS), "fs": rng.choice((9, 10, 11, 12)), "lines": rng.randint(12, 30),
            "margin": rng.choice((0.06, 0.1, 0.14)), "header": rng.choice(("Problem", "Question", "Exercise", "")),
            "breaks": sorted(rng.sample(range(3, 12), 2)), "rule": rng.random() < 0.4, "formula": rng.random() < 0.4}


def text_data(t: dict, rng: random.Random, prev: list) -> dict:
    chars = round((1 - 2 * t["margin"]) * t["w"] / (t["fs"] * t["dpi"] / 72 * 0.55))
    lines = []
    for i in range(t["lines"]):
        words, n = [], 0
        target = chars * (rng.uniform(0.3, 0.7) if i + 1 in t["breaks"] else rng.uniform(0.85, 1.0))
        while n < target:
            w = rng.choice(VOCAB)
            words.append(w)
            n += len(w) + 1
        lines.append(" ".join(words))
    return {"number": rng.randint(1, 999), "lines": lines,
            "formula": f"{rng.randint(2, 9)}x² {rng.choice('+−')} {rng.randint(1, 20)}x = {rng.randint(1, 99)}"}


def slide_template(rng: random.Random, near: bool) -> dict:
    band = _palette(rng, 1, dark=True)[0]
    box = _size(rng, 16 / 9, widths=(640, 800, 960, 1024, 1200))
    return {**box, "font": rng.choice(FONTS), "fs": rng.choice((18, 20, 24)) * box["w"] / box["dpi"] / 10, "band": band, "dark": rng.random() < 0.25, "bullets": rng.randint(3, 6),
            "logo": rng.random() < 0.5, "footer": rng.choice(("Lecture 4", "Quarterly review", "Team meeting", ""))}


def slide_data(t: dict, rng: random.Random, prev: list) -> dict:
    return {"title": _words(rng, rng.randint(2, 4)).capitalize(),
            "bullets": [_words(rng, rng.randint(3, 7)).capitalize() for _ in range(t["bullets"])],
            "page": rng.randint(2, 40)}


def form_template(rng: random.Random, near: bool) -> dict:
    return {**_size(rng, rng.choice((4 / 3, 16 / 10, 3 / 2)), widths=(640, 800, 960, 1024, 1200)),
            "font": rng.choice(("DejaVu Sans", "DejaVu Sans Mono")), "fs": rng.choice((9, 10, 11)),
            "accent": _palette(rng, 1)[0], "sidebar": rng.random() < 0.7, "fields": rng.randint(3, 7),
            "menu": rng.randint(4, 9), "dark": rng.random() < 0.2}


def form_data(t: dict, rng: random.Random, prev: list) -> dict:
    return {"title": f"{rng.choice(VOCAB).capitalize()} {rng.choice(('settings', 'form', 'editor', 'report'))}",
            "menu": [rng.choice(VOCAB).capitalize() for _ in range(t["menu"])],
            "fields": [[rng.choice(VOCAB).capitalize(), _words(rng, rng.randint(1, 3))] for _ in range(t["fields"])],
            "checked": [rng.random() < 0.5 for _ in range(2)]}


def pil_bar_template(rng: random.Random, near: bool) -> dict:
    n = rng.randint(3, 9)
    return {**_size(rng, 4 / 3), "n": n, "colour": [rng.randint(0, 200) for _ in range(3)],
            "labels": [f"{rng.choice('ABCDEFGH')}{i}" for i in range(n)],
            "topic": rng.choice(["sales", "votes", "rain", "score"]), "title_size": rng.choice((16, 18, 20))}


def pil_bar_data(t: dict, rng: random.Random, prev: list) -> dict:
    return {"y": _sample(lambda: [rng.uniform(0.08, 0.95) for _ in range(t["n"])], prev, MIN_BAR_GAP, rng).tolist(),
            "number": rng.randint(1, 99)}


def pil_text_template(rng: random.Random, near: bool) -> dict:
    box = _size(rng, 4 / 3)
    size = round(rng.choice((14, 16, 18)) * box["w"] / 640)
    return {**box, "size": size, "margin": round(rng.choice((20, 30, 45)) * box["w"] / 640),
            "leading": size + rng.choice((6, 8, 10)), "header": rng.random() < 0.5}


def pil_text_data(t: dict, rng: random.Random, prev: list) -> dict:
    n = (t["h"] - 60) // t["leading"]
    return {"number": rng.randint(1, 999), "lines": [_words(rng, rng.randint(4, 8)) for _ in range(n)]}


# ---- drawing -------------------------------------------------------------------------------------


def _figure(t: dict):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(t["w"] / t["dpi"], t["h"] / t["dpi"]), dpi=t["dpi"])
    FigureCanvasAgg(fig)
    return fig


def _margins(fig, t: dict, left: float = 4.5, bottom: float = 2.4, top: float = 1.2, right: float = 1.5) -> None:
    """Fixed margins, in the template's font size (em), in place of tight_layout (which lays the
    figure out twice and costs as much as drawing it)."""
    em = t["fs"] * t["dpi"] / 72
    fig.subplots_adjust(left=min(left * em / t["w"], 0.45), right=1 - min(right * em / t["w"], 0.4),
                        bottom=min(bottom * em / t["h"], 0.45), top=1 - min(top * em / t["h"], 0.3))


def _chars(labels) -> int:
    return max((len(str(x)) for x in labels), default=0)


def _axes(fig, t: dict):
    ax = fig.add_subplot()
    if not t.get("spines", True):
        ax.spines[["top", "right"]].set_visible(False)
    return ax


def draw_pie(fig, t, d):
    ax = fig.add_subplot()
    wedge = {"linewidth": t["edge"], "edgecolor": "white"}
    if t["donut"]:
        wedge["width"] = 0.45
    explode = [0.08] + [0.0] * (t["n"] - 1) if t["explode"] else None
    ax.pie(d["x"], labels=None if t["legend"] else t["labels"], colors=t["colours"], startangle=t["start"],
           counterclock=t["ccw"], autopct=t["autopct"] or None, wedgeprops=wedge, explode=explode,
           pctdistance=0.78 if t["donut"] else 0.6, textprops={"fontsize": t["fs"]})
    if t["legend"]:
        ax.legend(t["labels"], loc="center left", bbox_to_anchor=(0.95, 0.5), fontsize=t["fs"] * 0.9, frameon=False)
    if t["title"]:
        ax.set_title(t["title"], fontsize=t["fs"] * 1.3)
    ax.axis("equal")


def draw_bar(fig, t, d):
    ax = _axes(fig, t)
    y = np.array(d["y"]) * t["top"]
    x = np.arange(t["n"])
    if t["horizontal"]:
        bars = ax.barh(x, y, color=t["colours"], edgecolor=t["edge"], height=t["width"])
        ax.set_yticks(x, t["labels"], fontsize=t["fs"])
        ax.set_xlim(0, t["top"])
        ax.invert_yaxis()
    else:
        bars = ax.bar(x, y, color=t["colours"], edgecolor=t["edge"], width=t["width"])
        ax.set_xticks(x, t["labels"], fontsize=t["fs"], rotation=t["rot"], ha="right" if t["rot"] else "center")
        ax.set_ylim(0, t["top"] * 1.08)
        if t["ylabel"]:
            ax.set_ylabel(t["ylabel"], fontsize=t["fs"])
    if t["grid"]:
        ax.grid(axis="x" if t["horizontal"] else "y", alpha=0.4)
        ax.set_axisbelow(True)
    if t["values"]:
        ax.bar_label(bars, fmt="%.0f", fontsize=t["fs"] * 0.85, padding=2)
    if t["title"]:
        ax.set_title(t["title"], fontsize=t["fs"] * 1.3)
    top = 2.8 if t["title"] else 1.2
    if t["horizontal"]:
        _margins(fig, t, left=0.62 * _chars(t["labels"]) + 1.5, top=top, right=3.0 if t["values"] else 1.5)
    else:
        bottom = 0.5 * _chars(t["labels"]) + 1.8 if t["rot"] else 2.2
        _margins(fig, t, left=4.8 if t["ylabel"] else 3.6, bottom=bottom, top=top)


def draw_grouped(fig, t, d):
    ax = _axes(fig, t)
    g, s = len(t["groups"]), len(t["series"])
    y = np.array(d["y"]).reshape(s, g) * t["top"]
    width = 0.8 / s
    for i in range(s):
        ax.bar(np.arange(g) + (i - (s - 1) / 2) * width, y[i], width, color=t["colours"][i], label=t["series"][i])
    ax.set_xticks(np.arange(g), t["groups"], fontsize=t["fs"])
    ax.set_ylim(0, t["top"] * 1.05)
    if t["grid"]:
        ax.grid(axis="y", alpha=0.4)
        ax.set_axisbelow(True)
    if t["legend"] == "outside":
        ax.legend(fontsize=t["fs"] * 0.9, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        ax.legend(fontsize=t["fs"] * 0.9, loc=t["legend"])
    if t["title"]:
        ax.set_title(t["title"], fontsize=t["fs"] * 1.3)
    right = 0.62 * _chars(t["series"]) + 3.5 if t["legend"] == "outside" else 1.5
    _margins(fig, t, left=3.6, top=2.8 if t["title"] else 1.2, right=right)


def draw_line(fig, t, d):
    ax = _axes(fig, t)
    years = YEARS[t["start"]:t["start"] + t["points"]]
    x = np.arange(t["points"])
    for name, colour, y in zip(t["series"], t["colours"], d["ys"]):
        ax.plot(x, y, color=colour, marker=t["marker"] or None, lw=t["lw"], ms=4, label=name)
    step = max(t["points"] // 6, 1)
    ax.set_xticks(x[::step], years[::step], fontsize=t["fs"])
    if t["ylim"]:
        ax.set_ylim(*t["ylim"])
    if t["grid"]:
        ax.grid(alpha=0.4)
    if t["legend"]:
        ax.legend(fontsize=t["fs"] * 0.9, loc="upper left")
    if t["title"]:
        ax.set_title(t["title"], fontsize=t["fs"] * 1.3)
    _margins(fig, t, left=4.0, top=2.8 if t["title"] else 1.2)


def draw_scatter(fig, t, d):
    ax = _axes(fig, t)
    for (x, y), colour in zip(d["pts"], t["colours"]):
        ax.scatter(x, y, s=t["size"], color=colour, alpha=t["alpha"], edgecolors="none")
        if t["fit"] and len(x) > 2:
            a, b = np.polyfit(x, y, 1)
            ax.plot([0, 100], [b, a * 100 + b], color=colour, lw=1.2)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_xlabel(t["xlabel"], fontsize=t["fs"])
    ax.set_ylabel(t["ylabel"], fontsize=t["fs"])
    if t["grid"]:
        ax.grid(alpha=0.4)
    _margins(fig, t, left=4.8, bottom=3.6)


def draw_table(fig, t, d):
    ax = fig.add_subplot()
    ax.axis("off")
    table = ax.table(cellText=d["cells"], colLabels=t["header"], loc="center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(t["fs"])
    table.scale(1, 1.3)
    for (r, c), cell in table.get_celld().items():
        cell.set_edgecolor("#888888")
        if r == 0:
            cell.set_facecolor(t["head_colour"])
            cell.get_text().set_color("white")
            cell.get_text().set_fontweight("bold")
        elif t["zebra"] and r % 2 == 0:
            cell.set_facecolor("#eeeeee")
    if t["title"]:
        ax.set_title(t["title"], fontsize=t["fs"] * 1.3)


def _fqa_label(name: str) -> str:
    for word in ("dark", "light", "medium", "pale", "deep", "sky", "sea", "slate", "royal", "lawn", "lime",
                 "forest", "olive", "cadet", "cornflower", "dodger", "hot", "indian", "midnight", "navajo", "powder",
                 "rosy", "saddle", "sandy", "spring", "steel", "yellow", "green", "blue", "golden", "white", "lavender",
                 "blanched", "lemon", "misty", "old", "peach", "papaya", "antique", "alice", "floral", "ghost"):
        name = name.replace(word, word + " ")
    return " ".join(w.capitalize() for w in name.split())


def draw_figureqa(fig, t, d):
    labels = [_fqa_label(n) for n in t["names"]]
    if t["plot"] == "pie":
        ax = fig.add_subplot()
        ax.pie(d["y"], colors=t["names"], startangle=90)
        ax.legend(labels, loc="center left", bbox_to_anchor=(0.95, 0.5), fontsize=t["fs"] * 0.9, frameon=False)
        ax.set_title("title", fontsize=t["fs"] * 1.2)
        ax.axis("equal")
        return
    ax = fig.add_subplot()
    if t["plot"] in ("vbar", "hbar"):
        y = np.array(d["y"]) * 100
        pos = np.arange(len(y))
        if t["plot"] == "vbar":
            ax.bar(pos, y, color=t["names"])
            ax.set_xticks(pos, labels, rotation=90, fontsize=t["fs"])
        else:
            ax.barh(pos, y, color=t["names"])
            ax.set_yticks(pos, labels, fontsize=t["fs"])
    else:
        x = np.linspace(0, 100, 20)
        for name, label, y in zip(t["names"], labels, d["ys"]):
            if t["plot"] == "line":
                ax.plot(x, y, color=name, label=label, lw=2)
            else:
                ax.scatter(x, y, color=name, label=label, s=12)
        if t["legend"] == "outside":
            ax.legend(fontsize=t["fs"] * 0.9, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        else:
            ax.legend(fontsize=t["fs"] * 0.9, loc=t["legend"])
    if t["grid"]:
        ax.grid(alpha=0.4)
    ax.set_title("title", fontsize=t["fs"] * 1.2)
    ax.set_xlabel("xaxis_label", fontsize=t["fs"])
    ax.set_ylabel("yaxis_label", fontsize=t["fs"])
    n = 0.62 * _chars(labels)
    if t["plot"] == "vbar":
        _margins(fig, t, left=4.8, bottom=n + 3.6, top=2.6)
    elif t["plot"] == "hbar":
        _margins(fig, t, left=n + 3.6, bottom=3.6, top=2.6)
    else:
        _margins(fig, t, left=4.8, bottom=3.6, top=2.6, right=n + 3.5 if t["legend"] == "outside" else 1.5)


def draw_dvqa(fig, t, d):
    ax = _axes(fig, t)
    y = np.array(d["y"], float)
    n, s = t["bars"], t["series"]
    pos = np.arange(n)
    bar = ax.barh if t["horizontal"] else ax.bar
    base = np.zeros(n)
    for i in range(s):
        kw = {"color": t["colours"][i], "hatch": t["hatch"][i], "edgecolor": "black", "label": d["legend"][i]}
        if t["style"] == "grouped":
            w = 0.8 / s
            bar(pos + (i - (s - 1) / 2) * w, y[i], w, **kw)
        elif t["style"] == "stacked":
            bar(pos, y[i], 0.6, **({"left": base} if t["horizontal"] else {"bottom": base}), **kw)
            base = base + y[i]
        else:
            bar(pos, y[i], 0.6, **kw)
    (ax.set_yticks if t["horizontal"] else ax.set_xticks)(pos, d["labels"], fontsize=t["fs"])
    if t["log"]:
        (ax.set_xscale if t["horizontal"] else ax.set_yscale)("log")
    (ax.set_xlabel if t["horizontal"] else ax.set_ylabel)(d["ylabel"], fontsize=t["fs"])
    if s > 1:
        ax.legend(fontsize=t["fs"] * 0.9, loc="upper right")
    if t["grid"]:
        ax.grid(alpha=0.4)
        ax.set_axisbelow(True)
    ax.set_title(d["title"], fontsize=t["fs"] * 1.2)
    if t["horizontal"]:
        _margins(fig, t, left=0.62 * _chars(d["labels"]) + 1.5, bottom=3.6, top=2.6)
    else:
        _margins(fig, t, left=4.8, bottom=2.2, top=2.6)


def _arc(ax, centre, p, q, t, r=0.07):
    a1 = math.degrees(math.atan2(p[1] - centre[1], p[0] - centre[0]))
    a2 = math.degrees(math.atan2(q[1] - centre[1], q[0] - centre[0]))
    lo, hi = sorted((a1, a2))
    if hi - lo > 180:
        lo, hi = hi, lo + 360
    from matplotlib.patches import Arc

    ax.add_patch(Arc(centre, 2 * r, 2 * r, theta1=lo, theta2=hi, color=t["colour"], lw=t["lw"]))
    mid = math.radians((lo + hi) / 2)
    return centre[0] + 1.9 * r * math.cos(mid), centre[1] + 1.9 * r * math.sin(mid)


def draw_geometry(fig, t, d):
    ax = fig.add_axes((0.02, 0.02, 0.96, 0.96))
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_aspect("equal")
    ax.axis("off")
    kw = {"color": t["colour"], "lw": t["lw"]}
    txt = {"fontsize": t["fs"], "family": t["font"], "color": t["colour"], "ha": "center", "va": "center"}
    L, A = d["letters"], d["angles"]
    if t["shape"] in ("triangle", "quad"):
        pts = np.array(d["pts"]).reshape(-1, 2)
        closed = np.vstack([pts, pts[:1]])
        ax.plot(closed[:, 0], closed[:, 1], **kw)
        centre = pts.mean(axis=0)
        for i, p in enumerate(pts):
            v = p - centre
            ax.text(*(p + 0.06 * v / np.linalg.norm(v)), L[i], **txt)
        if t["shape"] == "quad":
            ax.plot(*zip(pts[0], pts[2]), **kw, ls="--" if t["dashed"] else "-")
            ax.plot(*zip(pts[1], pts[3]), **kw, ls="--" if t["dashed"] else "-")
            for i in range(2):
                m = (pts[i] + pts[i + 1]) / 2
                ax.text(m[0], m[1] - 0.05, f"{int(A[i][:-1]) % 13 + 2} cm", **txt)
        else:
            for i in range(2 if t["marks"] else 1):
                p, q, r = pts[i], pts[(i + 1) % 3], pts[(i + 2) % 3]
                ax.text(*_arc(ax, p, q, r, t), A[i], **{**txt, "fontsize": t["fs"] * 0.85})
            if t["dashed"]:  # the altitude from the apex
                a, b, c = pts
                u = (b - a) / np.linalg.norm(b - a)
                foot = a + np.dot(c - a, u) * u
                ax.plot(*zip(c, foot), **kw, ls="--")
    elif t["shape"] == "circle":
        from matplotlib.patches import Circle

        ax.add_patch(Circle((0.5, 0.5), 0.4, fill=False, **kw))
        ang = np.radians(d["pts"])
        pts = np.stack([0.5 + 0.4 * np.cos(ang), 0.5 + 0.4 * np.sin(ang)], axis=1)
        for i in range(4):
            ax.plot(*zip(pts[i], pts[(i + 1) % 4]), **kw)
            ax.text(*(0.5 + 0.47 * (pts[i] - 0.5) / 0.4), L[i], **txt)
        ax.plot(*zip(pts[0], pts[2]), **kw, ls="--" if t["dashed"] else "-")
        ax.plot([0.5], [0.5], "o", color=t["colour"], ms=3)
        ax.text(0.53, 0.46, "O", **txt)
        if t["marks"]:
            ax.text(*_arc(ax, pts[1], pts[0], pts[2], t, 0.06), A[0], **{**txt, "fontsize": t["fs"] * 0.85})
    else:  # two parallel lines cut by a transversal
        angle, at = d["pts"]
        for y in (0.3, 0.7):
            ax.annotate("", xy=(1.0, y), xytext=(0.0, y), arrowprops={"arrowstyle": "<->", **kw})
        a = math.radians(angle)
        xs = [at + (y - 0.5) / math.tan(a) for y in (0.05, 0.95)]
        ax.plot(xs, [0.05, 0.95], **kw)
        for i, y in enumerate((0.3, 0.7)):
            x = at + (y - 0.5) / math.tan(a)
            ax.text(x + 0.07, y + 0.05, A[i] if t["marks"] else L[i], **{**txt, "fontsize": t["fs"] * 0.85})
            ax.text(0.03, y + 0.04, L[2 + i], **txt)


@lru_cache(maxsize=64)
def _ttf(family: str, px: int, bold: bool = False) -> ImageFont.FreeTypeFont:
    """One of matplotlib's own TrueType fonts, for Pillow."""
    import matplotlib

    regular, heavy = TTF[family]
    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / (heavy if bold else regular)),
                              max(px, 6))


def draw_text(t, d) -> Image.Image:
    """A worksheet page, laid out with Pillow in matplotlib's fonts (anti-aliased as matplotlib
    draws them; matplotlib itself draws text glyph by glyph, 20 ms a line)."""
    w, h = t["w"], t["h"]
    im = Image.new("RGB", (w, h), "white")
    g = ImageDraw.Draw(im)
    px = round(t["fs"] * t["dpi"] / 72)
    line_h = round(px * 1.45)
    m = round(t["margin"] * w)
    y = round(m * 0.8)
    if t["header"]:
        g.text((m, y), f"{t['header']} {d['number']}.", fill="black", font=_ttf(t["font"], round(px * 1.3), True))
        y += round(line_h * 1.8)
        if t["rule"]:
            g.line([(m, y - line_h // 3), (w - m, y - line_h // 3)], fill="black", width=max(px // 12, 1))
    for i, line in enumerate(d["lines"]):
        if y > h - line_h - px:
            break
        g.text((m, y), line, fill="black", font=_ttf(t["font"], px))
        y += round(line_h * (1.6 if i + 1 in t["breaks"] else 1.0))
        if t["formula"] and i + 1 == t["breaks"][0] and y < h - 3 * line_h:
            g.text((w // 2, y), d["formula"], fill="black", font=_ttf(t["font"], round(px * 1.2)), anchor="ma")
            y += round(line_h * 1.8)
    return im


def draw_slide(fig, t, d):
    from matplotlib.patches import Rectangle

    bg, fg = ("#1e1e28", "white") if t["dark"] else ("white", "#202020")
    fig.patch.set_facecolor(bg)
    fig.add_artist(Rectangle((0, 0.8), 1, 0.2, transform=fig.transFigure, color=t["band"]))
    fig.text(0.05, 0.9, d["title"], color="white", va="center", family=t["font"], fontsize=t["fs"] * 1.6,
             fontweight="bold")
    step = 0.62 / t["bullets"]
    for i, b in enumerate(d["bullets"]):
        fig.text(0.07, 0.72 - i * step, f"•  {b}", color=fg, va="top", family=t["font"], fontsize=t["fs"])
    if t["logo"]:
        fig.add_artist(Rectangle((0.88, 0.03), 0.09, 0.07, transform=fig.transFigure, color=t["band"]))
    fig.text(0.05, 0.04, t["footer"], color=fg, family=t["font"], fontsize=t["fs"] * 0.6, alpha=0.7)
    fig.text(0.8, 0.04, str(d["page"]), color=fg, family=t["font"], fontsize=t["fs"] * 0.6, alpha=0.7)


def draw_form(fig, t, d):
    from matplotlib.patches import Circle, FancyBboxPatch, Rectangle

    bg, fg, panel = ("#2b2b2b", "#e8e8e8", "#3a3a3a") if t["dark"] else ("#fafafa", "#202020", "#e9e9ee")
    fig.patch.set_facecolor(bg)
    tr = fig.transFigure
    font = {"family": t["font"], "fontsize": t["fs"], "color": fg}
    fig.add_artist(Rectangle((0, 0.93), 1, 0.07, transform=tr, color=panel))
    for i, c in enumerate(("#ff5f57", "#febc2e", "#28c840")):
        fig.add_artist(Circle((0.02 + i * 0.025, 0.965), 0.008, transform=tr, color=c))
    fig.text(0.5, 0.965, d["title"], ha="center", va="center", **font)
    left = 0.03
    if t["sidebar"]:
        fig.add_artist(Rectangle((0, 0), 0.22, 0.93, transform=tr, color=panel))
        for i, item in enumerate(d["menu"]):
            y = 0.87 - i * 0.07
            if i == 1:
                fig.add_artist(Rectangle((0.01, y - 0.03), 0.2, 0.06, transform=tr, color=t["accent"], alpha=0.35))
            fig.text(0.03, y, item, va="center", **font)
        left = 0.26
    y = 0.86
    step = 0.7 / (t["fields"] + 1)
    for label, value in d["fields"]:
        fig.text(left, y, label, va="center", **font)
        fig.add_artist(FancyBboxPatch((left + 0.18, y - 0.03), 0.5, 0.06, boxstyle="round,pad=0.003", transform=tr,
                                      facecolor="white" if not t["dark"] else "#1f1f1f", edgecolor="#9a9a9a"))
        fig.text(left + 0.19, y, value, va="center", **{**font, "color": "#404040" if not t["dark"] else "#cfcfcf"})
        y -= step
    for i, on in enumerate(d["checked"]):
        fig.add_artist(Rectangle((left, y - 0.015 - i * 0.05), 0.02, 0.03, transform=tr,
                                 facecolor=t["accent"] if on else "white", edgecolor="#777777"))
        fig.text(left + 0.03, y - i * 0.05, f"Option {i + 1}", va="center", **font)
    fig.add_artist(FancyBboxPatch((0.72, 0.05), 0.12, 0.06, boxstyle="round,pad=0.004", transform=tr,
                                  color=t["accent"]))
    fig.text(0.78, 0.08, "Save", ha="center", va="center", **{**font, "color": "white"})
    fig.add_artist(FancyBboxPatch((0.86, 0.05), 0.12, 0.06, boxstyle="round,pad=0.004", transform=tr,
                                  facecolor=panel, edgecolor="#9a9a9a"))
    fig.text(0.92, 0.08, "Cancel", ha="center", va="center", **font)


def draw_pil_bar(t, d) -> Image.Image:
    w, h = t["w"], t["h"]
    im = Image.new("RGB", (w, h), "white")
    g = ImageDraw.Draw(im)
    x0, y0, x1, y1 = w * 60 // 640, h * 40 // 480, w * 600 // 640, h * 420 // 480
    g.line([(x0, y0), (x0, y1), (x1, y1)], fill="black", width=2)
    step = (x1 - x0 - 20) // t["n"]
    for i, (label, v) in enumerate(zip(t["labels"], d["y"])):
        top = y1 - round(v * (y1 - y0))
        g.rectangle([x0 + 10 + i * step, top, x0 + 10 + i * step + step * 2 // 3, y1], fill=tuple(t["colour"]),
                    outline="black")
        g.text((x0 + 10 + i * step, y1 + 8), label, fill="black", font=edits.font(14))
    for k in range(7):
        y = y1 - k * (y1 - y0) // 6
        g.text((8, y - 8), str(k * 10), fill="black", font=edits.font(12))
    g.text((w // 3, 10), f"Figure {d['number']}: {t['topic']}", fill="black", font=edits.font(t["title_size"]))
    return im


def draw_pil_text(t, d) -> Image.Image:
    im = Image.new("RGB", (t["w"], t["h"]), "white")
    g = ImageDraw.Draw(im)
    y = 30
    if t["header"]:
        g.text((t["margin"], y), f"Question {d['number']}.", fill="black", font=edits.font(t["size"] + 4))
        y += t["leading"] + 8
    for line in d["lines"]:
        if y >= t["h"] - 30:
            break
        g.text((t["margin"], y), line, fill="black", font=edits.font(t["size"]))
        y += t["leading"]
    return im


KINDS = {  # kind -> (template, data, draw)
    "pie": (pie_template, pie_data, draw_pie),
    "bar": (bar_template, bar_data, draw_bar),
    "grouped_bar": (grouped_template, grouped_data, draw_grouped),
    "line": (line_template, line_data, draw_line),
    "scatter": (scatter_template, scatter_data, draw_scatter),
    "table": (table_template, table_data, draw_table),
    "figureqa": (figureqa_template, figureqa_data, draw_figureqa),
    "dvqa": (dvqa_template, dvqa_data, draw_dvqa),
    "geometry": (geometry_template, geometry_data, draw_geometry),
    "text_page": (text_template, text_data, draw_text),
    "slide": (slide_template, slide_data, draw_slide),
    "form": (form_template, form_data, draw_form),
    "pil_bar": (pil_bar_template, pil_bar_data, draw_pil_bar),
    "pil_text": (pil_text_template, pil_text_data, draw_pil_text),
}
PIL_KINDS = ("pil_bar", "pil_text", "text_page")  # drawn without matplotlib


def render(kind: str, t: dict, d: dict) -> Image.Image:
    draw = KINDS[kind][2]
    if kind in PIL_KINDS:
        return draw(t, d)
    import matplotlib

    matplotlib.rcParams["font.family"] = t.get("font", "DejaVu Sans")
    fig = _figure(t)
    draw(fig, t, d)
    fig.canvas.draw()
    w, h = fig.canvas.get_width_height()
    im = Image.frombuffer("RGBA", (w, h), bytes(fig.canvas.buffer_rgba())).convert("RGB")
    if im.size != (t["w"], t["h"]):  # figsize x dpi may round a pixel off: pad or cut, never resample
        canvas = Image.new("RGB", (t["w"], t["h"]), im.getpixel((0, 0)))
        canvas.paste(im, (0, 0))
        im = canvas
    return im


# ---- planning and writing ---------------------------------------------------------------------------


def _job(job: dict) -> list[tuple[str, str | None]]:
    out = Path(job["out"])
    im = render(job["kind"], job["template"], job["data"])
    rel = f"{job['half']}/{job['stem']}.png"
    im.save(out / rel, "PNG", compress_level=3)
    written = [(rel, None)]
    for edit, seed in job["edits"]:
        rng = random.Random(seed)
        copy = edits.EDITS[edit](im, rng)
        path = edits.save(copy, out / job["half"] / f"{job['stem']}__{edit}", rng, edit)
        written.append((f"{job['half']}/{path.name}", edit))
    return written


def _counts(total: int, weights: dict[str, float]) -> dict[str, int]:
    s = sum(weights.values())
    counts = {k: int(total * w / s) for k, w in weights.items()}
    for k in sorted(weights, key=lambda k: -(total * weights[k] / s - counts[k]))[:total - sum(counts.values())]:
        counts[k] += 1
    return counts


def plan(figures: int, seed: int) -> list[dict]:
    """One job per figure: its kind, template, data and half (no edits yet)."""
    rng = random.Random(seed)
    jobs = []
    for kind, n in _counts(figures, WEIGHTS).items():
        if n == 0:
            continue
        make_template, make_data, _ = KINDS[kind]
        shared = kind not in WHOLE_KIND_HALF
        least = 4 if kind in NEAR_KINDS else 2 if shared else 1
        n_templates = min(max(least, round(n / FAMILY)), n)
        sizes = [n // n_templates + (i < n % n_templates) for i in range(n_templates)]
        for ti, size in enumerate(sizes):
            half = HALVES[ti % 2] if shared else WHOLE_KIND_HALF[kind]
            near = kind in NEAR_KINDS and (ti // 2) % 2 == 1  # per half: normal, near, normal, near, ...
            t = make_template(rng, near)
            prev = []
            for fi in range(size):
                d = make_data(t, rng, prev)
                jobs.append({"kind": kind, "template": t, "data": d, "half": half, "near": near,
                             "family": f"{kind}/t{ti:02d}", "stem": f"{kind}_t{ti:02d}_{fi:03d}", "edits": []})
    return jobs


def plan_scale(n: int, seed: int) -> list[dict]:
    """n pies of one template and n bar charts of one template, no copies."""
    rng = random.Random(seed)
    jobs = []
    for kind, make_template, make_data in (("pie", pie_template, pie_data), ("bar", bar_template, bar_data)):
        t = make_template(rng, False, n=rng.randint(5, 7) if kind == "pie" else rng.randint(6, 10))
        prev = []
        for fi in range(n):
            d = make_data(t, rng, prev)
            jobs.append({"kind": kind, "template": t, "data": d, "half": "scale", "near": False,
                         "family": f"{kind}/scale", "stem": f"{kind}_scale_{fi:04d}", "edits": []})
    return jobs


def add_edits(jobs: list[dict], seed: int, fraction: float, per_edit: int) -> None:
    rng = random.Random(seed + 1)
    for half in HALVES:
        idx = [i for i, j in enumerate(jobs) if j["half"] == half]
        chosen = sorted(rng.sample(idx, max(round(len(idx) * fraction), 1))) if idx else []
        dealt = edits.deal(chosen, list(FIGURE_EDITS), per_edit, rng, most=3)
        for i, names in dealt.items():
            jobs[i]["edits"] = [(e, rng.randrange(2**32)) for e in names]


def write(out: Path, jobs: list[dict], workers: int) -> dict:
    for half in {j["half"] for j in jobs}:
        (out / half).mkdir(parents=True, exist_ok=True)
    for i, j in enumerate(jobs):
        j["out"], j["id"] = str(out), i
    files = {}
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        for job, written in zip(jobs, pool.imap(_job, jobs, chunksize=4)):
            for rel, edit in written:
                files[rel] = {"figure": job["id"], "edit": edit, "family": job["family"], "kind": job["kind"],
                              "half": job["half"], "near": job["near"]}
    return files


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--figures", type=int, default=800)
    p.add_argument("--edited", type=float, default=0.34, help="share of figures that get edited copies")
    p.add_argument("--per-edit", type=int, default=32, help="copies per edit per half (at most 3 per figure)")
    p.add_argument("--scale", type=int, default=0, help="instead: this many figures of one pie and of one bar template")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    start = time.perf_counter()
    if args.scale:
        jobs = plan_scale(args.scale, args.seed)
    else:
        jobs = plan(args.figures, args.seed)
        add_edits(jobs, args.seed, args.edited, args.per_edit)
    args.out.mkdir(parents=True, exist_ok=True)
    files = write(args.out, jobs, args.workers)
    manifest = {"files": files, "seconds": time.perf_counter() - start, "seed": args.seed}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    print(f"figureset: {len(jobs)} figures, {len(files)} files in {manifest['seconds']:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
