"""Dedupe quality on two generated image sets, against imagededup's PHash in the same run.

  figures  flat figures, the kind of images VisualPRM400K is made of: bar charts, line charts,
           geometry diagrams and text pages (white background, thin lines), drawn here with Pillow.
           Many come in families of unrelated look-alikes: the same layout, colours, fonts and
           labels with different data (bar heights, points, vertex positions, words). A third of
           the figures get 1-3 edited copies.
  photos   Debian's wallpapers (photographs and digital illustrations) and scikit-image's sample
           photographs, see photoset.py; about 2/3 of them get 1-3 edited copies.

Neither set is committed; both are built in a temporary folder. For each set, one table:
`rewardhouse dedupe` (pipeline.dedupe.folder.dedupe_folder at its defaults), imagededup PHash at
its default threshold 10, and imagededup at the threshold in 0..16 with the best F1 on that set.
Pairwise precision, recall and F1: predicted pairs against true pairs (same base). Ours predicts
clusters (every pair inside a cluster); imagededup's find_duplicates predicts edges (each file and
the files it lists), which are scored as given, not closed into clusters. Recall per edit: an edited
copy counts as found when it is paired with its base. imagededup runs in .bench-venv (built by
bench_hashing.peer_python on first use); its torch import is paid before the clock.

    python tests/benchmarks/bench_dedupe_quality.py [--figures 400] [--photos 250] [--seed 7]
                                                    [--sets figures,photos]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

import photoset  # noqa: E402
from bench_hashing import peer_python  # noqa: E402

W, H = 640, 480
MAX_THRESHOLD = 16  # imagededup thresholds scanned: 0..16
DEFAULT_THRESHOLD = 10  # imagededup's default max_distance_threshold
FAMILY_SIZES = (1, 1, 2, 3, 4)  # figures drawn from one template: 2+ makes unrelated look-alikes


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType sizes
        return ImageFont.load_default()


def _colour(rng: random.Random) -> tuple[int, int, int]:
    return tuple(rng.randint(0, 200) for _ in range(3))


# ---- flat figures: each kind has a template (layout, colours, fonts, labels) and draws fresh data -----


def bar_template(rng: random.Random) -> dict:
    n = rng.randint(3, 9)
    return {"n": n, "colour": _colour(rng), "labels": [f"{rng.choice('ABCDEFGH')}{i}" for i in range(n)],
            "topic": rng.choice(["sales", "votes", "rain", "score"]), "title_size": rng.choice((16, 18, 20))}


def bar_chart(t: dict, rng: random.Random) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    d.line([(60, 40), (60, 420), (600, 420)], fill="black", width=2)
    step = 520 // t["n"]
    for i, label in enumerate(t["labels"]):
        top = 420 - rng.randint(30, 360)
        d.rectangle([70 + i * step, top, 70 + i * step + step * 2 // 3, 420], fill=t["colour"], outline="black")
        d.text((70 + i * step, 428), label, fill="black", font=_font(14))
    for y in range(420, 40, -60):
        d.text((20, y - 8), str((420 - y) // 6), fill="black", font=_font(12))
    d.text((200, 10), f"Figure {rng.randint(1, 99)}: {t['topic']}", fill="black", font=_font(t["title_size"]))
    return im


def line_template(rng: random.Random) -> dict:
    return {"colours": [_colour(rng) for _ in range(rng.randint(1, 3))], "marker": rng.choice(("circle", "square")),
            "points": rng.choice((8, 11, 14))}


def line_chart(t: dict, rng: random.Random) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    d.line([(60, 40), (60, 420), (600, 420)], fill="black", width=2)
    step = 540 // (t["points"] - 1)
    for colour in t["colours"]:
        pts = [(60 + x * step, 420 - rng.randint(20, 360)) for x in range(t["points"])]
        d.line(pts, fill=colour, width=2)
        draw = d.ellipse if t["marker"] == "circle" else d.rectangle
        for x, y in pts:
            draw([x - 3, y - 3, x + 3, y + 3], outline=colour)
    d.text((220, 10), f"y = f(x), case {rng.randint(1, 999)}", fill="black", font=_font(18))
    return im


def geometry_template(rng: random.Random) -> dict:
    if rng.random() < 0.5:  # a triangle ABC with its inscribed circle
        return {"incircle": True, "pts": _triangle(rng), "labels": "ABC"}
    pts = [(rng.randint(80, 560), rng.randint(60, 420)) for _ in range(rng.randint(3, 5))]
    chords = [p for p in itertools.combinations(range(len(pts)), 2) if rng.random() < 0.4]
    circle = (rng.randint(200, 440), rng.randint(160, 320), rng.randint(40, 150)) if rng.random() < 0.6 else None
    return {"incircle": False, "pts": pts, "chords": chords, "circle": circle, "labels": "ABCDE"}


def _triangle(rng: random.Random, near: list | None = None) -> list[tuple[int, int]]:
    while True:
        if near is None:
            pts = [(rng.randint(80, 560), rng.randint(60, 420)) for _ in range(3)]
        else:
            pts = [(min(max(x + rng.randint(-80, 80), 60), 580), min(max(y + rng.randint(-80, 80), 40), 440))
                   for x, y in near]
        (ax, ay), (bx, by), (cx, cy) = pts
        if abs((bx - ax) * (cy - ay) - (cx - ax) * (by - ay)) > 30000:  # twice the area: no slivers
            return pts


def geometry(t: dict, rng: random.Random) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    if t["incircle"]:
        pts = _triangle(rng, near=t["pts"])
        d.polygon(pts, outline="black")
        a, b, c = (math.dist(pts[1], pts[2]), math.dist(pts[2], pts[0]), math.dist(pts[0], pts[1]))
        ix = (a * pts[0][0] + b * pts[1][0] + c * pts[2][0]) / (a + b + c)
        iy = (a * pts[0][1] + b * pts[1][1] + c * pts[2][1]) / (a + b + c)
        s = (a + b + c) / 2
        r = math.sqrt(s * (s - a) * (s - b) * (s - c)) / s
        d.ellipse([ix - r, iy - r, ix + r, iy + r], outline="black")
        d.text((ix + 4, iy - 16), "I", fill="black", font=_font(16))
    else:
        pts = [(min(max(x + rng.randint(-70, 70), 60), 580), min(max(y + rng.randint(-70, 70), 40), 440))
               for x, y in t["pts"]]
        d.polygon(pts, outline="black")
        for i, j in t["chords"]:
            d.line([pts[i], pts[j]], fill="black", width=1)
        if t["circle"]:
            cx, cy, r = t["circle"]
            d.ellipse([cx - r, cy - r, cx + r, cy + r], outline="black")
    for label, p in zip(t["labels"], pts):
        d.text((p[0] + 6, p[1] - 16), label, fill="black", font=_font(16))
    return im


WORDS = ("the angle sum of a triangle is equal to two right angles hence the area of the figure follows from "
         "the ratio of the sides and the height which we compute step by step for each case below").split()


def text_template(rng: random.Random) -> dict:
    size = rng.choice((14, 16, 18))
    return {"size": size, "margin": rng.choice((20, 30, 45)), "leading": size + rng.choice((6, 8, 10)),
            "header": rng.random() < 0.5}


def text_page(t: dict, rng: random.Random) -> Image.Image:
    im = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(im)
    y = 30
    if t["header"]:
        d.text((t["margin"], y), f"Question {rng.randint(1, 999)}.", fill="black", font=_font(t["size"] + 4))
        y += t["leading"] + 8
    while y < H - 30:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 10)))
        d.text((t["margin"], y), line, fill="black", font=_font(t["size"]))
        y += t["leading"]
    return im


KINDS = {"bar": (bar_template, bar_chart), "line": (line_template, line_chart),
         "geometry": (geometry_template, geometry), "text": (text_template, text_page)}


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


def build(root: Path, figures: int, seed: int) -> tuple[dict[str, int], dict[str, str], dict[int, tuple]]:
    """Files under root; returns (file -> figure id, edited file -> edit name, figure id -> the
    template it was drawn from, as (kind, template number))."""
    rng = random.Random(seed)
    group, edit_of, family_of = {}, {}, {}
    i = family = 0
    while i < figures:
        kind = list(KINDS)[family % len(KINDS)]
        make_template, draw = KINDS[kind]
        template = make_template(rng)
        for _ in range(min(rng.choice(FAMILY_SIZES), figures - i)):
            family_of[i] = (kind, family)
            im = draw(template, rng)
            name = f"fig{i:04d}.png"
            im.save(root / name)
            group[name] = i
            if rng.random() < 1 / 3:
                for edit in rng.sample(sorted(EDITS), rng.randint(1, 3)):
                    out = f"fig{i:04d}_{edit}.jpg"
                    EDITS[edit](im, rng).save(root / out, "JPEG", quality=30 if edit == "jpeg_q30" else 90)
                    group[out], edit_of[out] = i, edit
            i += 1
        family += 1
    return group, edit_of, family_of


# ---- scoring ---------------------------------------------------------------------------------------------


def score_pairs(predicted: set[frozenset], group: dict[str, int], edit_of: dict[str, str],
                family_of: dict[int, tuple] | None = None) -> dict:
    """family_of (base id -> (kind, template)), if given, sorts the false pairs by what the two bases
    share: the template (look-alikes), the kind only, or nothing."""
    by_base = defaultdict(list)
    for name, base in group.items():
        by_base[base].append(name)
    truth = {frozenset(p) for members in by_base.values() for p in itertools.combinations(sorted(members), 2)}
    hit = predicted & truth
    precision = len(hit) / len(predicted) if predicted else 1.0
    recall = len(hit) / len(truth) if truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    base_file = {group[name]: name for name in group if name not in edit_of}
    per_edit = defaultdict(lambda: [0, 0])
    for name, edit in edit_of.items():
        per_edit[edit][1] += 1
        per_edit[edit][0] += frozenset((name, base_file[group[name]])) in predicted
    false = predicted - truth
    false_by = Counter()
    for a, b in false if family_of else ():
        fa, fb = family_of[group[a]], family_of[group[b]]
        false_by["template" if fa == fb else "kind" if fa[0] == fb[0] else "other"] += 1
    return {"precision": precision, "recall": recall, "f1": f1, "pairs": len(predicted), "false": len(false),
            "false_by": false_by, "per_edit": {e: tuple(v) for e, v in per_edit.items()}}


def score(rows, group: dict[str, int], edit_of: dict[str, str], family_of: dict[int, tuple] | None = None) -> dict:
    """rows: (relative path, cluster id, ...) per file, as FolderDedupe.rows; every pair inside a
    cluster is a predicted pair."""
    clusters = defaultdict(list)
    for path, cluster_id, *_ in rows:
        clusters[cluster_id].append(path)
    predicted = {frozenset(p) for members in clusters.values() for p in itertools.combinations(sorted(members), 2)}
    return {**score_pairs(predicted, group, edit_of, family_of), "clusters": len(clusters)}


def edge_pairs(duplicates: dict[str, list[str]]) -> set[frozenset]:
    """imagededup's find_duplicates result as predicted pairs: each listed pair, no transitive closure."""
    return {frozenset((a, b)) for a, listed in duplicates.items() for b in listed if a != b}


# ---- the engines --------------------------------------------------------------------------------------------


def run_ours(root: Path):
    """`rewardhouse dedupe`'s engine at its defaults: (result, how it was called, seconds)."""
    from pipeline.dedupe.folder import dedupe_folder

    start = time.perf_counter()
    result = dedupe_folder(root)
    seconds = time.perf_counter() - start
    if result.errors:
        print(f"  rewardhouse dedupe: {len(result.errors)} file(s) failed, e.g. {result.errors[0]}")
    return result, "defaults", seconds


def distributions(root: Path, group: dict[str, int], edit_of: dict[str, str]) -> None:
    """What the radius and the thresholds rest on: Hamming distances per route and verification
    scores, for edited copies against their base and for every pair of unrelated images."""
    import numpy as np

    from pipeline.dedupe.engine import phash_distance
    from pipeline.dedupe.hashing import hash_files
    from pipeline.dedupe.verify import NEAR_MIN, OVERLAY_MIN, compare
    from pipeline.settings import DEFAULT_MAX_DISTANCE

    names = sorted(group)
    hashed = [h for h in hash_files([(n, root / n) for n in names]) if not h.error]
    names = [h.key for h in hashed]
    col = {c: np.array([getattr(h, c) for h in hashed], np.int64) for c in ("phash", "crop_hash", "top_hash", "bottom_hash")}
    i, j = np.triu_indices(len(hashed), 1)
    d = {"phash": phash_distance(col["phash"][i], col["phash"][j]),
         "crop": np.minimum(phash_distance(col["crop_hash"][i], col["phash"][j]),
                            phash_distance(col["phash"][i], col["crop_hash"][j])),
         "top": phash_distance(col["top_hash"][i], col["top_hash"][j]),
         "bottom": phash_distance(col["bottom_hash"][i], col["bottom_hash"][j])}
    best = np.minimum.reduce(list(d.values()))
    base = np.array([group[n] for n in names])
    same = base[i] == base[j]
    edited = np.array([edit_of.get(n) for n in names], dtype=object)
    to_base = same & ((edited[i] == None) | (edited[j] == None))  # noqa: E711  (a copy against its base)
    print("  distances (bits) of edited copies to their base, median / max, per edit:")
    for e in sorted(set(edit_of.values())):
        m = to_base & ((edited[i] == e) | (edited[j] == e))
        if m.any():
            print(f"    {e:<16} pHash {int(np.median(d['phash'][m])):>2} / {int(d['phash'][m].max()):>2}   "
                  f"best route {int(np.median(best[m])):>2} / {int(best[m].max()):>2}")
    unrelated = ~same
    print(f"  unrelated pairs ({int(unrelated.sum())}): closest pHash {int(d['phash'][unrelated].min())}, best route "
          f"{int(best[unrelated].min())}; share that are candidates at radius r (any route): "
          + ", ".join(f"r={r} {np.mean(best[unrelated] <= r) * 100:.3f} %" for r in (4, 6, 8, 10)))
    r = DEFAULT_MAX_DISTANCE
    cand = np.flatnonzero(best <= r)
    thumbs = np.stack([np.frombuffer(h.thumb, np.uint8).reshape(64, 64) for h in hashed])
    aspect = np.array([h.width / h.height for h in hashed])
    chroma = np.array([[h.chroma_cb, h.chroma_cr] for h in hashed])
    v = compare(thumbs[i[cand]], thumbs[j[cand]], aspect[i[cand]], aspect[j[cand]], chroma[i[cand]], chroma[j[cand]])
    true_c, false_c = same[cand], ~same[cand]
    acc_true = v.score[true_c & v.accepted]
    print(f"  verification at radius {r}: {int(true_c.sum())} candidate pairs of copies, {int(true_c.sum() - (true_c & v.accepted).sum())} "
          f"refused; lowest accepted score {acc_true.min() if acc_true.size else float('nan'):.4f} "
          f"(near/crop >= {NEAR_MIN}, overlay >= {OVERLAY_MIN})")
    if false_c.any():
        top = np.sort(v.score[false_c])[::-1]
        print(f"  {int(false_c.sum())} candidate pairs of unrelated images, {int((false_c & v.accepted).sum())} accepted; "
              f"their best scores {', '.join(f'{x:.4f}' for x in top[:3])}; 99th percentile {np.percentile(top, 99):.4f}")


IMAGEDEDUP_CHILD = """
import json, sys, time
from imagededup.methods import PHash          # imports torch: paid before the clock
folder, workers, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
encoder = PHash(verbose=False)
start = time.perf_counter()
encodings = encoder.encode_images(image_dir=folder, num_enc_workers=workers)
out = {"encode_seconds": time.perf_counter() - start, "encodings": encodings, "find_seconds": {}, "duplicates": {}}
for t in range(top + 1):
    start = time.perf_counter()
    out["duplicates"][t] = encoder.find_duplicates(encoding_map=encodings, max_distance_threshold=t,
                                                   num_dist_workers=workers)
    out["find_seconds"][t] = time.perf_counter() - start
print(json.dumps(out))
"""


def run_imagededup(root: Path) -> tuple[dict | None, str]:
    python, why = peer_python()
    if python is None:
        return None, why
    workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    out = subprocess.run([str(python), "-c", IMAGEDEDUP_CHILD, str(root), str(workers), str(MAX_THRESHOLD)],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        return None, f"run failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["duplicates"] = {int(t): d for t, d in result["duplicates"].items()}
    result["find_seconds"] = {int(t): s for t, s in result["find_seconds"].items()}
    return result, ""


# ---- report ----------------------------------------------------------------------------------------------------


def evaluate(title: str, root: Path, group: dict[str, int], edit_of: dict[str, str], extra_edits=(),
             family_of: dict[int, tuple] | None = None) -> None:
    result, how, seconds = run_ours(root)
    rows = [(f"rewardhouse dedupe ({how})", score(result.rows, group, edit_of, family_of), seconds)]

    peer, why = run_imagededup(root)
    if peer:
        encoded = len(peer["encodings"])
        if encoded < len(group):
            print(f"  imagededup encoded {encoded} of {len(group)} files")
        scored = {t: score_pairs(edge_pairs(d), group, edit_of, family_of) for t, d in peer["duplicates"].items()}
        best = max(scored, key=lambda t: (scored[t]["f1"], -t))
        for label, t in ((f"imagededup PHash t={DEFAULT_THRESHOLD}", DEFAULT_THRESHOLD),
                         (f"imagededup PHash best t={best}", best)):
            rows.append((label, scored[t], peer["encode_seconds"] + peer["find_seconds"][t]))

    edits = sorted(set(edit_of.values()), key=lambda e: (e in extra_edits, e))
    heads = [f"{e}*" if e in extra_edits else e for e in edits]
    print(f"\n{title}")
    print(f"{'engine':<34} {'precision':>9} {'recall':>7} {'F1':>6} {'pairs':>6} {'false':>6} {'seconds':>8}  "
          + "  ".join(f"{h:>{max(len(h), 7)}}" for h in heads))
    for label, s, secs in rows:
        found = {e: "{}/{}".format(*s["per_edit"][e]) for e in edits}
        cells = "  ".join(f"{found[e]:>{max(len(h), 7)}}" for e, h in zip(edits, heads))
        print(f"{label:<34} {s['precision']:>9.3f} {s['recall']:>7.3f} {s['f1']:>6.3f} {s['pairs']:>6} "
              f"{s['false']:>6} {secs:>8.2f}  {cells}")
    print("  pairs: predicted pairs (ours: all pairs inside a cluster; imagededup: the pairs find_duplicates "
          "lists, as edges, not closed into clusters); false: predicted pairs of different bases")
    print("  per edit: edited copies paired with their base / edited copies; seconds: hashing + grouping "
          "(imagededup: encode_images + find_duplicates, torch import excluded)")
    if family_of:
        print("  false pairs by what the two figures share (look-alikes of one template / same kind, other "
              "template / different kinds):")
        for label, s, _ in rows:
            f = s["false_by"]
            print(f"    {label:<34} {f['template']:>4} / {f['kind']:>4} / {f['other']:>4}")
    if extra_edits:
        print(f"  * extra edits, beyond the first eight: {', '.join(extra_edits)}")
    if peer:
        f1s = " ".join(f"{t}:{s['f1']:.3f}" for t, s in sorted(scored.items()))
        print(f"  imagededup F1 by threshold: {f1s}")
        print("  (imagededup's PHash thresholds at the median, so every hash has the same number of bits set and "
              "distances are even: an odd t acts as t-1)")
    else:
        print(f"  imagededup peer unavailable: {why}")
    distributions(root, group, edit_of)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--figures", type=int, default=400)
    parser.add_argument("--photos", type=int, default=250, help="at most this many base photos")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sets", default="figures,photos", help="comma-separated: figures, photos")
    args = parser.parse_args()
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = set(sets) - {"figures", "photos"}
    if unknown:
        parser.error(f"unknown set(s): {', '.join(sorted(unknown))}")

    for which in sets:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            started = time.perf_counter()
            if which == "figures":
                group, edit_of, family_of = build(root, args.figures, args.seed)
                bases = len(set(group.values()))
                sizes = Counter(family_of.values())
                lookalikes = sum(1 for f in family_of.values() if sizes[f] > 1)
                print(f"flat figures: {len(group)} files, {bases} figures ({lookalikes} with an unrelated look-alike "
                      f"of the same template), {len(edit_of)} edited copies "
                      f"(built in {time.perf_counter() - started:.1f}s)")
                evaluate("flat figures", root, group, edit_of, family_of=family_of)
            else:
                print("photos: building the set")
                group, edit_of = photoset.build(root, args.photos, args.seed)
                bases = len(set(group.values()))
                print(f"photos: {len(group)} files, {bases} base photos, {len(edit_of)} edited copies "
                      f"(built in {time.perf_counter() - started:.1f}s)")
                evaluate("photos", root, group, edit_of, photoset.EXTRA_EDITS)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
