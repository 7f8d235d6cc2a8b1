"""A benchmark set of photographs with edited copies, built at bench time and never committed.

Bases come from Debian wallpaper packages (fetched with `apt-get download`, unpacked with
`dpkg-deb -x`, never installed; about half of their pictures are digital illustrations rather than
photographs) and from the sample photos shipped inside the scikit-image wheel (fetched with
`pip download`). Both are cached under ~/.cache/rewardhouse-bench, or under
$REWARDHOUSE_BENCH_CACHE. gnome-backgrounds and mate-backgrounds are left out on purpose: they are
kept for an independent check.

One base per picture: identical files are dropped by sha256, a KDE wallpaper keeps one of its
resolutions, and bases whose pHash (imagehash) is within NEAR_BASE of an earlier base are dropped so
that the ground truth holds no accidental duplicates. Bases are downscaled to a random longest side
in 640..1280 px (never upscaled) and saved as JPEG q90; about 2/3 of them get 1-3 edited copies.

    build(root, max_bases, seed) -> (file -> base id, edited file -> edit name)
"""

from __future__ import annotations

import hashlib
import io
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

CACHE = Path(os.environ.get("REWARDHOUSE_BENCH_CACHE") or Path.home() / ".cache" / "rewardhouse-bench")
PACKAGES = ("ukui-wallpapers", "plasma-workspace-wallpapers", "lomiri-wallpapers-20.04")
SKIMAGE = "scikit-image"
PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png"}
# scikit-image samples that are not photographs (synthetic, test patterns, logos, tiny), and the
# right half of a stereo pair whose left half is kept.
SKIMAGE_SKIP = {"chessboard_GRAY", "chessboard_RGB", "color", "horse", "logo", "microaneurysms", "phantom",
                "no_time_for_that_tiny", "multipage", "multipage_rgb", "motorcycle_right"}
MIN_SIDE = 300  # longest side below this: too small to stand for a photo
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
    for python in dict.fromkeys([sys.executable] + ([python3] if python3 else [])):
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
    name: str
    image: Image.Image


def collect_bases(seed: int, log=print) -> list[Base]:
    """Every usable base picture, downscaled, in a stable order; logs what each source gave."""
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
    bases, seen, identical = [], set(), 0
    for c in candidates:
        digest = hashlib.sha256(c.data).hexdigest()
        if digest in seen:
            identical += 1
            continue
        seen.add(digest)
        with Image.open(io.BytesIO(c.data)) as im:
            im = _rgb(im)
        scale = rng.randint(640, 1280) / max(im.size)
        if scale < 1:
            im = im.resize((round(im.width * scale), round(im.height * scale)), Image.LANCZOS)
        bases.append(Base(c.source, c.name, im))
    if identical:
        log(f"  dropped {identical} byte-identical file(s) found in more than one place")

    # The same picture under two names (or an edit of it) would be an error in the ground truth.
    hashes = [imagehash.phash(b.image) for b in bases]
    kept, near = [], []
    for i, b in enumerate(bases):
        close = [(hashes[i] - hashes[j], j) for j in kept if hashes[i] - hashes[j] <= NEAR_BASE]
        if close:
            dist, j = min(close)
            near.append(f"{b.source}:{b.name} ~ {bases[j].source}:{bases[j].name} (pHash distance {dist})")
        else:
            kept.append(i)
    for line in near:
        log(f"  dropped near-identical base: {line}")
    counts = Counter(bases[i].source for i in kept)
    log("  base photos per source: " + ", ".join(f"{s} {counts.get(s, 0)}" for s in (*PACKAGES, SKIMAGE)))
    if len(kept) > 1:
        dist, i, j = min((hashes[i] - hashes[j], i, j) for n, i in enumerate(kept) for j in kept[n + 1:])
        log(f"  closest kept bases: {bases[i].source}:{bases[i].name} ~ {bases[j].source}:{bases[j].name} "
            f"(imagehash pHash distance {dist}; bases at <= {NEAR_BASE} are dropped)")
    return [bases[i] for i in kept]


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


def watermark(im: Image.Image, rng: random.Random) -> Image.Image:
    """Semi-transparent white text with a dark rim, like a stock-photo or channel logo."""
    layer = Image.new("RGBA", im.size, (0, 0, 0, 0))
    size = max(im.height // 10, 12)
    text = rng.choice(["© PhotoStock", "SAMPLE", "@picture_daily", "© 2024 studio"])
    d = ImageDraw.Draw(layer)
    left, top, right, bottom = d.textbbox((0, 0), text, font=_font(size), stroke_width=2)
    x = rng.randint(0, max(im.width - (right - left), 0))
    y = rng.randint(0, max(im.height - (bottom - top), 0))
    d.text((x, y), text, font=_font(size), fill=(255, 255, 255, 120), stroke_width=2, stroke_fill=(0, 0, 0, 90))
    return Image.alpha_composite(im.convert("RGBA"), layer).convert("RGB")


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
    # extra: edits users meet that the first eight leave out
    "watermark": (watermark, "JPEG", 90),
    "offcentre_crop": (offcentre_crop, "JPEG", 90),
}
EXTRA_EDITS = ("watermark", "offcentre_crop")


def _save(im: Image.Image, path: Path, fmt: str, quality: int | None) -> None:
    if fmt == "JPEG":
        im.save(path, "JPEG", quality=quality)
    else:
        im.save(path, fmt)


def build(root: Path, max_bases: int, seed: int, log=print) -> tuple[dict[str, int], dict[str, str]]:
    """Files under root; returns (file -> base id, edited file -> edit name)."""
    bases = collect_bases(seed, log)
    if len(bases) < MIN_BASES:
        raise SystemExit(f"photo set: only {len(bases)} base photos found, need at least {MIN_BASES} "
                         f"(see the lines above for sources that could not be fetched; cache: {CACHE})")
    rng = random.Random(seed)
    if len(bases) > max_bases:
        bases = rng.sample(bases, max_bases)
    group, edit_of = {}, {}
    for i, base in enumerate(bases):
        name = f"photo{i:04d}.jpg"
        _save(base.image, root / name, "JPEG", 90)
        group[name] = i
        if rng.random() < 2 / 3:
            for edit in rng.sample(sorted(EDITS), rng.randint(1, 3)):
                fn, fmt, quality = EDITS[edit]
                out = f"photo{i:04d}_{edit}.{'png' if fmt == 'PNG' else 'jpg'}"
                _save(fn(base.image, rng), root / out, fmt, quality)
                group[out], edit_of[out] = i, edit
    return group, edit_of
