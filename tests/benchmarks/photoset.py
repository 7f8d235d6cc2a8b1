"""A benchmark set of photographs with edited copies, built at bench time and never committed.

Pictures come from Debian wallpaper packages (fetched with `apt-get download`, unpacked with
`dpkg-deb -x`, never installed; about half of their pictures are digital illustrations rather than
photographs) and from the sample photos shipped inside the scikit-image wheel (fetched with
`pip download`). Both are cached under ~/.cache/rewardhouse-bench, or under
$REWARDHOUSE_BENCH_CACHE. gnome-backgrounds and mate-backgrounds are left out on purpose: they are
kept for an independent check.

One picture per file: identical files are dropped by sha256 and a KDE wallpaper keeps one of its
resolutions. A large picture is cut into up to 3 x 2 tiles with a gap of GAP between them (no tile
holds a pixel of another), each its own base: the sources hold about 65 pictures, too few to
measure recall per edit, and tiles of one picture are look-alikes (same palette, light and
texture) that are not copies of each other. Nearly plain tiles (a patch of sky, a gradient) are
dropped: two of them look alike whatever they came from. Bases whose pHash (imagehash) is within
NEAR_BASE of an earlier base are dropped so that the ground truth holds no accidental duplicates.
Each base is then scaled to a width drawn log-uniformly from 320 to 4000 px (at most UPSCALE x its
own width) and saved as JPEG q90.

Halves: bases are split by picture (all tiles of a picture in one half), by a hash of the
picture's name within each source, so the split does not move with the seed or the sample.

Edited copies: the edits of EDITS are dealt over each half's bases so that every edit occurs about
`per_edit` times per half (at most MAX_COPIES per base). EDITS keeps the earlier ten (`caption` is a
box 20 % of the image's width) and adds two from edits.py: `caption_bar` (a bar across the full
width, 10-20 % high, at the top or the bottom) and `corner_box_px` (a 200 x 30 px box whatever the
image's size: 60 % of the width of a 320 px picture, 5 % of a 4000 px one).

    build(root, max_bases, seed, per_edit) -> {"<half>/<file>": {"figure": base id, "edit": name
    or None, "family": picture, "kind": source, "half": half}}
"""

from __future__ import annotations

import hashlib
import io
import math
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parent))
import edits  # noqa: E402

CACHE = Path(os.environ.get("REWARDHOUSE_BENCH_CACHE") or Path.home() / ".cache" / "rewardhouse-bench")
PACKAGES = ("ukui-wallpapers", "plasma-workspace-wallpapers", "lomiri-wallpapers-20.04")
SKIMAGE = "scikit-image"
PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png"}
# scikit-image samples that are not photographs (synthetic, test patterns, logos, tiny), and the
# right half of a stereo pair whose left half is kept.
SKIMAGE_SKIP = {"chessboard_GRAY", "chessboard_RGB", "color", "horse", "logo", "microaneurysms", "phantom",
                "no_time_for_that_tiny", "multipage", "multipage_rgb", "motorcycle_right"}
MIN_SIDE = 300  # longest side below this: too small to stand for a photo
TILE_W, TILE_H = 1300, 1100  # a picture is cut into round(w / TILE_W) x round(h / TILE_H) tiles, at most 3 x 2
GAP = 0.06  # between tiles, of the picture's width or height
MIN_DETAIL, MIN_SPREAD = 1.0, 5.0  # a tile with less detail or spread than this (grey levels, see plain()) is dropped
WIDTHS = (320, 4000)  # bases are scaled to a width drawn log-uniformly from this range ...
UPSCALE = 4.0  # ... but at most this many times their own width
MAX_COPIES = 5  # edited copies of one base
HALVES = ("tuning", "held_back")
MAX_SOURCE_SIDE = 2560  # a KDE wallpaper keeps its largest resolution up to this
NEAR_BASE = 10  # imagehash pHash distance at or below which two bases count as the same picture
MIN_BASES = 30


@dataclass
class Candidate:
    source: str  # package name
    name: str  # path inside the package
    data: bytes


# ---- fetching and unpacking the sources -------------------------------------------------------------


def _run(cmd: list[str], cwd: Path) -> str:
    """'' on success, else the last line of what the command said."""
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[-1] if lines else f"exit {done.returncode}"
    return ""


def unpacked_deb(package: str) -> tuple[Path | None, str]:
    """The package's files unpacked under the cache (downloaded once); (None, why) if that fails."""
    tree = CACHE / "unpacked" / package
    if tree.is_dir():
        return tree, ""
    debs = CACHE / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        if shutil.which("apt-get") is None:
            return None, "no apt-get on this machine"
        why = _run(["apt-get", "download", package], debs)
        found = sorted(debs.glob(f"{package}_*.deb"))
        if not found:
            return None, f"apt-get download failed: {why or 'no .deb written'}"
    if shutil.which("dpkg-deb") is None:
        return None, "no dpkg-deb on this machine"
    tree.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=tree.parent, prefix=f".{package}-"))
    why = _run(["dpkg-deb", "-x", str(found[-1]), str(tmp)], tree.parent)
    if why:
        shutil.rmtree(tmp, ignore_errors=True)
        return None, f"dpkg-deb -x failed: {why}"
    tmp.rename(tree)  # whole or not at all
    return tree, ""


def skimage_wheel() -> tuple[Path | None, str]:
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob("scikit_image-*.whl"))
    if found:
        return found[-1], ""
    why = "no pip found"
    python3 = shutil.which("python3")
    peer = Path(__file__).resolve().parents[2] / ".bench-venv" / "bin" / "python"  # bench_hashing.peer_python's
    base = Path(sys.base_prefix) / "bin" / "python3"  # the interpreter a venv without pip (uv's) was made from
    pythons = ([sys.executable] + ([python3] if python3 else []) + ([str(base)] if base.exists() else [])
               + ([str(peer)] if peer.exists() else []))
    for python in dict.fromkeys(pythons):
        why = _run([python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(wheels),
                    SKIMAGE], wheels)
        found = sorted(wheels.glob("scikit_image-*.whl"))
        if found:
            return found[-1], ""
    return None, f"pip download failed: {why}"


# ---- picking one file per picture ---------------------------------------------------------------------


def deb_candidates(package: str, tree: Path) -> list[Candidate]:
    """Photos in an unpacked package. A KDE wallpaper (<Name>/contents/images/<w>x<h>.<ext>) ships one
    picture at several resolutions: keep the largest up to MAX_SOURCE_SIDE, else the smallest. Its
    screenshot and its images_dark variant (the same picture recoloured) are left out."""
    tree = tree.resolve()
    pictures: dict[str, set[Path]] = defaultdict(set)
    for path in sorted(tree.rglob("*")):
        if path.suffix.lower() not in PHOTO_SUFFIXES or not path.is_file():  # is_file: skips broken links
            continue
        parts = path.relative_to(tree).parts
        if "doc" in parts or path.stem == "screenshot":
            continue
        if "contents" in parts:
            at = parts.index("contents")
            if parts[at + 1] != "images":
                continue
            pictures["/".join(parts[:at])].add(path.resolve())  # most resolutions are links to one file
        else:
            pictures["/".join(parts)].add(path.resolve())
    out = []
    for paths in pictures.values():
        sized = []
        for p in paths:
            with Image.open(p) as im:
                sized.append((im.width * im.height, max(im.size), p))
        fitting = [s for s in sized if s[1] <= MAX_SOURCE_SIDE]
        chosen = max(fitting)[2] if fitting else min(sized)[2]
        out.append(Candidate(package, chosen.relative_to(tree).as_posix(), chosen.read_bytes()))
    return out


def skimage_candidates(wheel: Path) -> list[Candidate]:
    out = []
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            path = Path(name)
            if path.parent.as_posix() != "skimage/data" or path.suffix.lower() not in PHOTO_SUFFIXES:
                continue
            if path.stem in SKIMAGE_SKIP:
                continue
            data = zf.read(name)
            with Image.open(io.BytesIO(data)) as im:
                if max(im.size) < MIN_SIDE:
                    continue
            out.append(Candidate(SKIMAGE, name, data))
    return out


def _rgb(im: Image.Image) -> Image.Image:
    if im.mode in ("RGBA", "LA", "P", "PA"):
        im = im.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", im.size, "white"), im).convert("RGB")
    return im.convert("RGB")


@dataclass
class Base:
    source: str
    name: str  # the picture's path inside its source
    tile: str  # "c,r of cols x rows", or "" for a whole picture
    image: Image.Image  # at the base's final width when that is below the tile's, else the tile itself
    width: int  # the base's final width


def tiles(im: Image.Image) -> list[tuple[str, Image.Image]]:
    """The picture cut into a grid of equal tiles with a gap of GAP between them."""
    w, h = im.size
    cols = min(max(round(w / TILE_W), 1), 3)
    rows = min(max(round(h / TILE_H), 1), 2)
    if cols == rows == 1:
        return [("", im)]
    gw, gh = round(w * GAP) if cols > 1 else 0, round(h * GAP) if rows > 1 else 0
    tw, th = (w - (cols - 1) * gw) // cols, (h - (rows - 1) * gh) // rows
    return [(f"{c},{r} of {cols}x{rows}", im.crop((c * (tw + gw), r * (th + gh), c * (tw + gw) + tw, r * (th + gh) + th)))
            for r in range(rows) for c in range(cols)]


def plain(im: Image.Image) -> bool:
    """Nearly plain (a patch of sky, a gradient): the grey image at 128 x 128 spreads less than
    MIN_SPREAD grey levels, or less than MIN_DETAIL once blurred away (Gaussian, 6 px). Two such
    tiles look alike whatever they came from, so they make no ground truth."""
    import numpy as np

    g = im.convert("L").resize((128, 128), Image.BILINEAR)
    detail = np.asarray(g, np.float32) - np.asarray(g.filter(ImageFilter.GaussianBlur(6)), np.float32)
    return float(np.asarray(g, np.float32).std()) < MIN_SPREAD or float(detail.std()) < MIN_DETAIL


def collect_bases(seed: int, log=print) -> list[Base]:
    """Every usable base (a picture or a tile of one), in a stable order; logs what each source gave."""
    import imagehash

    candidates: list[Candidate] = []
    for package in PACKAGES:
        tree, why = unpacked_deb(package)
        if tree is None:
            log(f"  {package}: skipped ({why})")
            continue
        candidates += deb_candidates(package, tree)
    wheel, why = skimage_wheel()
    if wheel is None:
        log(f"  {SKIMAGE}: skipped ({why})")
    else:
        candidates += skimage_candidates(wheel)

    rng = random.Random(seed)
    bases, seen, identical, flat = [], set(), 0, 0
    for c in candidates:
        digest = hashlib.sha256(c.data).hexdigest()
        if digest in seen:
            identical += 1
            continue
        seen.add(digest)
        with Image.open(io.BytesIO(c.data)) as im:
            im = _rgb(im)
        for tile, part in tiles(im):
            if tile and plain(part):
                flat += 1
                continue
            width = min(round(math.exp(rng.uniform(*map(math.log, WIDTHS)))), round(part.width * UPSCALE))
            if width < part.width:
                part = part.resize((width, max(round(part.height * width / part.width), 1)), Image.LANCZOS)
            bases.append(Base(c.source, c.name, tile, part, width))
    if identical:
        log(f"  dropped {identical} byte-identical file(s) found in more than one place")
    if flat:
        log(f"  dropped {flat} nearly plain tile(s)")

    # The same picture under two names (or an edit of it) would be an error in the ground truth.
    hashes = [imagehash.phash(b.image) for b in bases]
    kept, near = [], []
    for i, b in enumerate(bases):
        close = [(hashes[i] - hashes[j], j) for j in kept if hashes[i] - hashes[j] <= NEAR_BASE]
        if close:
            dist, j = min(close)
            near.append(f"{_label(b)} ~ {_label(bases[j])} (pHash distance {dist})")
        else:
            kept.append(i)
    for line in near:
        log(f"  dropped near-identical base: {line}")
    pictures = Counter(source for source, _ in {(bases[i].source, bases[i].name) for i in kept})
    counts = Counter(bases[i].source for i in kept)
    log("  bases (pictures) per source: " + ", ".join(f"{s} {counts.get(s, 0)} ({pictures.get(s, 0)})"
                                                      for s in (*PACKAGES, SKIMAGE)))
    if len(kept) > 1:
        dist, i, j = min((hashes[i] - hashes[j], i, j) for n, i in enumerate(kept) for j in kept[n + 1:])
        log(f"  closest kept bases: {_label(bases[i])} ~ {_label(bases[j])} "
            f"(imagehash pHash distance {dist}; bases at <= {NEAR_BASE} are dropped)")
    return [bases[i] for i in kept]


def _label(b: Base) -> str:
    return f"{b.source}:{b.name}" + (f" [{b.tile}]" if b.tile else "")


# ---- edits ------------------------------------------------------------------------------------------------


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType sizes
        return ImageFont.load_default()


def _scaled(im: Image.Image, factor: float) -> Image.Image:
    return im.resize((round(im.width * factor), round(im.height * factor)), Image.LANCZOS)


def caption(im: Image.Image, rng: random.Random) -> Image.Image:
    """A white box about 20 % of the width with dark text, in a random corner."""
    out = im.copy()
    w, h = out.size
    bw, bh, margin = w // 5, max(w // 15, 16), w // 50
    x = margin if rng.random() < 0.5 else w - margin - bw
    y = margin if rng.random() < 0.5 else h - margin - bh
    d = ImageDraw.Draw(out)
    d.rectangle([x, y, x + bw, y + bh], fill="white", outline=(60, 60, 60))
    d.text((x + bw // 12, y + bh // 4), f"Fig. {rng.randint(1, 99)}", fill=(20, 20, 20), font=_font(bh // 2))
    return out


watermark = edits.watermark  # semi-transparent white text with a dark rim, like a stock-photo logo


def crop4(im: Image.Image, _rng) -> Image.Image:
    w, h = im.size
    return im.crop((w * 4 // 100, h * 4 // 100, w - w * 4 // 100, h - h * 4 // 100))


def offcentre_crop(im: Image.Image, rng: random.Random) -> Image.Image:
    """4 % off one side and nothing off the other: the centre moves 2 % of the width."""
    w, h = im.size
    cut = w * 4 // 100
    return im.crop((cut, 0, w, h) if rng.random() < 0.5 else (0, 0, w - cut, h))


# name -> (edit, file format, JPEG quality)
EDITS = {
    "blur": (lambda im, _r: im.filter(ImageFilter.GaussianBlur(2)), "JPEG", 90),
    "bright": (lambda im, _r: ImageEnhance.Brightness(im).enhance(1.25), "JPEG", 90),
    "crop4": (crop4, "JPEG", 90),
    "grey": (lambda im, _r: im.convert("L").convert("RGB"), "JPEG", 90),
    "half_size": (lambda im, _r: _scaled(im, 0.5), "JPEG", 90),
    "caption": (caption, "JPEG", 90),
    "png_3q": (lambda im, _r: _scaled(im, 0.75), "PNG", None),
    "jpeg_q25": (lambda im, _r: im, "JPEG", 25),
    "watermark": (watermark, "JPEG", 90),
    "offcentre_crop": (offcentre_crop, "JPEG", 90),
    "caption_bar": (edits.caption_bar, "JPEG", 90),  # full width, 10-20 % high, top or bottom
    "corner_box_px": (edits.corner_box_px, "JPEG", 90),  # edits.BOX_PX, whatever the image's size
}


def _save(im: Image.Image, path: Path, fmt: str, quality: int | None) -> None:
    if fmt == "JPEG":
        im.save(path, "JPEG", quality=quality)
    else:
        im.save(path, fmt, compress_level=3)


def half_of(bases: list[Base]) -> dict[tuple[str, str], str]:
    """(source, picture) -> half: within each source, pictures in the order of a hash of their
    name, alternately."""
    out = {}
    for source in sorted({b.source for b in bases}):
        names = sorted({b.name for b in bases if b.source == source},
                       key=lambda n: hashlib.sha256(f"{source}:{n}".encode()).hexdigest())
        for i, name in enumerate(names):
            out[(source, name)] = HALVES[i % 2]
    return out


_BASES: list[Base] = []  # for the forked workers of build()


def _write_base(job: tuple) -> list[tuple[str, str | None]]:
    root, i, half, copies = job
    base = _BASES[i]
    im = base.image
    if im.width != base.width:  # an upscaled base
        im = im.resize((base.width, max(round(im.height * base.width / im.width), 1)), Image.LANCZOS)
    name = f"{half}/photo{i:04d}.jpg"
    _save(im, Path(root) / name, "JPEG", 90)
    out = [(name, None)]
    for edit, seed in copies:
        fn, fmt, quality = EDITS[edit]
        copy = f"{half}/photo{i:04d}_{edit}.{'png' if fmt == 'PNG' else 'jpg'}"
        _save(fn(im, random.Random(seed)), Path(root) / copy, fmt, quality)
        out.append((copy, edit))
    return out


def build(root: Path, max_bases: int, seed: int, per_edit: int = 32, workers: int = 2,
          log=print) -> dict[str, dict]:
    """Files under root/<half>/; returns the manifest (see the module's docstring)."""
    global _BASES
    bases = collect_bases(seed, log)
    if len(bases) < MIN_BASES:
        raise SystemExit(f"photo set: only {len(bases)} base photos found, need at least {MIN_BASES} "
                         f"(see the lines above for sources that could not be fetched; cache: {CACHE})")
    rng = random.Random(seed)
    if len(bases) > max_bases:
        bases = [bases[i] for i in sorted(rng.sample(range(len(bases)), max_bases))]
    halves = half_of(bases)
    jobs = []
    for half in HALVES:
        (root / half).mkdir(parents=True, exist_ok=True)
        ids = [i for i, b in enumerate(bases) if halves[(b.source, b.name)] == half]
        dealt = edits.deal(ids, sorted(EDITS), per_edit, rng, most=MAX_COPIES)
        jobs += [(str(root), i, half, [(e, rng.randrange(2**32)) for e in dealt[i]]) for i in ids]
    _BASES = bases
    files = {}
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for (_, i, half, _), written in zip(jobs, pool.imap(_write_base, jobs)):
            b = bases[i]
            for rel, edit in written:
                files[rel] = {"figure": i, "edit": edit, "family": f"{b.source}:{b.name}", "kind": b.source,
                              "half": half}
    _BASES = []
    return files
