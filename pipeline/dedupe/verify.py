"""Verification of candidate pairs: is B a copy of A, apart from one edited region? Plain numpy.

The candidate search (search.py) is exact, but a 64-bit pHash cannot tell two charts of one
template apart (they sit a few bits apart), and a global similarity cannot either: a grey
thumbnail of a pie chart is a disc on white, and its correlation with another pie of the same
palette measures the layout, not whether the pixels are the same. So verification asks the
question a copy answers: after aligning the pair, are the pixels the same everywhere, or
everywhere but inside one compact region (a caption, a watermark, a banner, a logo)?

The signature (hashing.py, from the one decode, THUMB_BYTES per image): the luma at 64x64
(LANCZOS) and Cb, Cr at 32x32 (box average).

1. **Alignment** (on the luma, smoothed and sampled at 32x32, by Pearson correlation): the whole
   frame; one image's central region (2/4/6/8 % off each side) resampled onto the other, both
   ways; any crop, from the 1-D row/column profiles (up to 10 % off either end, the other axis's
   span from the images' aspect ratios: a crop never stretches); then a quarter-pixel shift and
   half a percent more or less around the best. The correlation only finds the alignment; it
   decides nothing. The whole frame, the best alignment and the best one with a corner block left
   out (an overlay pulls the correlation) are each judged by step 2.
2. **Identity** (`identity`): at the alignment, the luma of B against the best brightness/contrast
   line of A's (least squares refitted on the 75 % of pixels it fits best, clipped to 0..255), each
   pixel against the other image's half-pixel envelope (the lowest and highest value a sub-pixel
   shift can show there), the smaller of the two ways: noise, resampling and sub-pixel shifts stay
   near 0, content that one image lacks does not. When both images are coloured, Cb and Cr are read
   the same way (each with its own non-decreasing curve, so a recolouring is not one). A pixel differs beyond `luma_tol` / `chroma_tol`; a
   4x4-pixel cell differs when `cell_min` of its pixels do.
3. **Decision** on the differing cells (grouped when at most one cell apart):
       identical  no cell differs                                   -> near (whole frame) or crop
       overlay    the largest group's bounding box is at most `region_max` of the frame, covers
                  at most `hidden_max` of the *content* (pixels that are not the plain background
                  the border shows; all of a photo), and outside it at most `stray_max` of the
                  frame differs                                     -> overlay
       otherwise  refused: a look-alike differs in scattered places across its content (bars of
                  other heights, slices of other sizes, other words), or over most of it.
   `score` is the share of the content that is the same (1 for an identical frame).

The parameters (`Rule`) are chosen on the tuning half of tests/benchmarks/bench_dedupe_quality.py
(families of look-alike figures and photos with edited copies) and reported on its held-back half,
whose families the choice never saw.

Flat images (a solid colour, an empty canvas: luma standard deviation below FLAT_STD grey levels)
have no structure to compare; their pHash is degenerate (all AC coefficients ~0, 0 or 1 bit set)
and would match every other flat image. They are left out of the near search and are duplicates
only of identical bytes.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from pipeline.dedupe.hashing import CHROMA_SIDE, DETAIL_SIDE, FLAT_STD, THUMB_BYTES, THUMB_SIDE as SIDE

GRID = 8  # cells per side for the correlation sums of the alignment search
OUT = 32  # side of the smoothed images the alignment search compares
CELL = OUT // GRID
SIGMA = 0.8
CROPS = (0.02, 0.04, 0.06, 0.08)  # fraction off each side tried by the crop alignment
REFINE_FROM = 0.9  # refused pairs whose best alignment correlates at least this get the fine search
REFINE_CROP = 0.005
REFINE_SHIFT = 0.25  # thumbnail pixels
PROFILE_MAX_CROP = 0.10  # the profile search looks for crops up to this much off either end, per axis
OFFSET_STEP = 0.005  # where a span of known length sits, searched in steps of this (fraction)
MIN_OVERLAY = 0.005  # an accepted region where less than this share of the frame differs is not called an overlay
MIN_CROP = 0.01  # an alignment that leaves out less than this is "near", not "crop"
CLEAR_MATCH = 0.998  # a whole-frame match this good needs no other alignment
REFINE_DIFF = 0.05  # the fine search is for pairs that differ in at most this share of the frame
MIN_CORR = 0.5  # below this at every alignment a pair is judged at the whole frame only

KINDS = ("exact", "near", "crop", "overlay")


# ---- alignment ------------------------------------------------------------------------------


def _gauss_matrix(sigma: float) -> np.ndarray:
    """OUT x SIDE: Gaussian smoothing (sigma in thumbnail pixels) sampled at OUT evenly spaced points."""
    centre = (np.arange(OUT) + 0.5) * SIDE / OUT - 0.5
    k = np.exp(-0.5 * ((centre[:, None] - np.arange(SIDE)[None, :]) / sigma) ** 2)
    return (k / k.sum(axis=1, keepdims=True)).astype(np.float32)


_SMOOTH = _gauss_matrix(SIGMA)


@lru_cache(maxsize=65536)
def _axis(lo: float, hi: float) -> np.ndarray:
    """OUT x SIDE: take the span lo..hi (fractions) of an axis, resample it to the whole axis, smooth
    and sample at OUT points. lo < 0 or hi > 1 reach past the edge (the edge pixel repeats)."""
    return _axes(np.array([lo]), np.array([hi]))[0]


def _corner_masks() -> np.ndarray:
    masks = []
    for w, h in ((3, 2), (2, 3)):
        for y in (0, GRID - h):
            for x in (0, GRID - w):
                m = np.zeros((GRID, GRID), bool)
                m[y:y + h, x:x + w] = True
                masks.append(m)
    return np.stack(masks)


CORNERS = _corner_masks()  # (8, GRID, GRID)


_POOL = np.kron(np.eye(GRID, dtype=np.float32), np.ones((1, CELL), np.float32))  # (GRID, SIDE): sums cells


def _cell_sums(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(B, 5, GRID, GRID): per-cell sums of x, y, x*x, y*y, x*y (pooled by two small matmuls)."""
    parts = np.stack([x, y, x * x, y * y, x * y], axis=1)
    return np.matmul(np.matmul(_POOL, parts), _POOL.T)


def _corr(s: np.ndarray, n: float) -> np.ndarray:
    """Pearson correlation from summed (x, y, xx, yy, xy) over n pixels; s has 5 on axis 1."""
    sx, sy, sxx, syy, sxy = (s[:, i] for i in range(5))
    vx = sxx - sx * sx / n
    vy = syy - sy * sy / n
    cov = sxy - sx * sy / n
    return cov / np.sqrt(np.maximum(vx * vy, 1e-9))


# An alignment: the span of each image, per axis, that shows the same content, as fractions:
# (a_x0, a_x1, a_y0, a_y1, b_x0, b_x1, b_y0, b_y1). The whole frame is (0, 1) * 4.
WHOLE = (0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0)


def _crop_of(align) -> float:
    """How much of a frame an alignment leaves out, the largest side (fraction)."""
    return max(align[0], 1 - align[1], align[2], 1 - align[3], align[4], 1 - align[5], align[6], 1 - align[7], 0.0)


def _symmetric(c: float) -> tuple:
    """b is the central region of a (c > 0), or a of b (c < 0), c off each side."""
    r = (abs(c), 1 - abs(c), abs(c), 1 - abs(c))
    return (*r, 0.0, 1.0, 0.0, 1.0) if c > 0 else (0.0, 1.0, 0.0, 1.0, *r)


def _key(v: float) -> float:
    return round(float(v), 4)


def _axes(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """`_axis(lo[i], hi[i])` for every i at once: (B, OUT, SIDE)."""
    lo, hi = np.asarray(lo, np.float64) * SIDE, np.asarray(hi, np.float64) * SIDE
    x = np.clip(lo[:, None] + (np.arange(SIDE) + 0.5)[None, :] * (hi - lo)[:, None] / SIDE - 0.5, 0, SIDE - 1)
    i0 = np.minimum(np.floor(x).astype(np.int64), SIDE - 2)  # i0 + 1 is always a pixel: no index twice
    f = (x - i0).astype(np.float32)
    n = len(lo)
    m = np.zeros((n, SIDE, SIDE), np.float32)
    rows = np.broadcast_to(np.arange(SIDE), (n, SIDE))
    batch = np.broadcast_to(np.arange(n)[:, None], (n, SIDE))
    m[batch, rows, i0] = 1 - f
    m[batch, rows, i0 + 1] = f
    return np.matmul(_SMOOTH, m)


def _matrices(aligns: list[tuple]) -> tuple[np.ndarray, ...]:
    """Per pair: rows/cols resampling matrices for a and for b, (B, OUT, SIDE) each."""
    al = np.asarray(aligns, np.float64).reshape(-1, 8)
    return _axes(al[:, 2], al[:, 3]), _axes(al[:, 0], al[:, 1]), _axes(al[:, 6], al[:, 7]), _axes(al[:, 4], al[:, 5])


_PIXELS = float(OUT * OUT)
_CORNER_MATRIX = CORNERS.reshape(len(CORNERS), -1).T.astype(np.float32)  # (GRID*GRID, 8)
_CORNER_PIXELS = CORNERS.sum(axis=(1, 2)) * CELL * CELL  # (8,)


def _judge(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(whole-frame correlation, best correlation with one corner block left out, that block) for
    aligned, smoothed images x[i], y[i]."""
    s = _cell_sums(x, y)
    total = s.sum(axis=(2, 3))
    full = _corr(total, _PIXELS)
    blocks = (s.reshape(-1, GRID * GRID) @ _CORNER_MATRIX).reshape(s.shape[0], 5, -1).transpose(0, 2, 1)  # (B, 8, 5)
    rest = total[:, None, :] - blocks
    r_rest = np.stack([_corr(rest[:, m, :], _PIXELS - _CORNER_PIXELS[m]) for m in range(len(CORNERS))], axis=1)
    best = r_rest.argmax(axis=1)
    return full, r_rest[np.arange(len(best)), best], best


class _Best:
    """Best whole-frame and best corner-left-out correlation per pair, with their alignments."""

    def __init__(self, n: int):
        self.full = np.full(n, -1.0, np.float32)
        self.full_at = np.tile(np.array(WHOLE, np.float32), (n, 1))
        self.corner = np.full(n, -1.0, np.float32)
        self.corner_at = np.tile(np.array(WHOLE, np.float32), (n, 1))
        self.corner_idx = np.full(n, -1, np.int8)

    def update(self, idx, aligns, full, corner, corner_idx) -> None:
        aligns = np.asarray(aligns, np.float32).reshape(len(idx), 8)
        f = full > self.full[idx]
        self.full[idx[f]] = full[f]
        self.full_at[idx[f]] = aligns[f]
        c = corner > self.corner[idx]
        self.corner[idx[c]] = corner[c]
        self.corner_at[idx[c]] = aligns[c]
        self.corner_idx[idx[c]] = corner_idx[c]


def _try(best: _Best, idx: np.ndarray, a: np.ndarray, b: np.ndarray, align: tuple) -> None:
    """Score one alignment for the pairs idx."""
    if idx.size == 0:
        return
    ay, ax = _axis(_key(align[2]), _key(align[3])), _axis(_key(align[0]), _key(align[1]))
    by, bx = _axis(_key(align[6]), _key(align[7])), _axis(_key(align[4]), _key(align[5]))
    best.update(idx, [align] * len(idx), *_judge(_resample(a[idx], ay, ax), _resample(b[idx], by, bx)))


def _resample(t: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """rows @ t[i] @ cols.T for every i, as two large matrix products (BLAS) instead of B small ones."""
    n = t.shape[0]
    right = (t.reshape(n * SIDE, SIDE) @ cols.T).reshape(n, SIDE, OUT)  # (B, SIDE, OUT)
    return (rows @ right.transpose(1, 0, 2).reshape(SIDE, n * OUT)).reshape(OUT, n, OUT).transpose(1, 0, 2)


def _try_each(best: _Best, idx: np.ndarray, a: np.ndarray, b: np.ndarray, aligns: list[tuple]) -> None:
    """Score a different alignment for each pair of idx."""
    if idx.size == 0:
        return
    ay, ax, by, bx = _matrices(aligns)
    x = np.matmul(np.matmul(ay, a[idx]), ax.transpose(0, 2, 1))
    y = np.matmul(np.matmul(by, b[idx]), bx.transpose(0, 2, 1))
    best.update(idx, aligns, *_judge(x, y))


# Spans searched per axis from the profiles: up to PROFILE_MAX_CROP off either end of one image.
PROFILE_STEPS = np.round(np.arange(0.0, PROFILE_MAX_CROP + 1e-9, 0.01), 4)
_SPANS = [(lo, 1 - hi, 0.0, 1.0) for lo in PROFILE_STEPS for hi in PROFILE_STEPS] + \
         [(0.0, 1.0, lo, 1 - hi) for lo in PROFILE_STEPS for hi in PROFILE_STEPS if lo or hi]
_SPAN_A = np.stack([_axis(_key(s[0]), _key(s[1])) for s in _SPANS])  # (S, OUT, SIDE)
_SPAN_B = np.stack([_axis(_key(s[2]), _key(s[3])) for s in _SPANS])
_SPAN_A_FLAT = _SPAN_A.reshape(-1, SIDE)
_SPAN_B_FLAT = _SPAN_B.reshape(-1, SIDE)


def _profiles(t: np.ndarray, axis: int) -> np.ndarray:
    return t.mean(axis=axis)  # (B, SIDE): the image averaged over the other axis


def _corr_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    return (x * y).sum(-1) / np.sqrt(np.maximum((x * x).sum(-1) * (y * y).sum(-1), 1e-9))


def _best_spans(pa_: np.ndarray, pb_: np.ndarray) -> list[tuple[float, float, float, float]]:
    """Per pair, the spans (a_lo, a_hi, b_lo, b_hi) along one axis whose profiles correlate best,
    one image cropped up to PROFILE_MAX_CROP off either end."""
    b = pa_.shape[0]
    xa = (_SPAN_A_FLAT @ pa_.T).T.reshape(b, len(_SPANS), OUT)  # one GEMM for every span of every pair
    xb = (_SPAN_B_FLAT @ pb_.T).T.reshape(b, len(_SPANS), OUT)
    r = _corr_rows(xa, xb)
    return [_SPANS[i] for i in r.argmax(axis=1)]


def _sample(prof: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Profiles (B, SIDE) sampled at OUT points over the spans lo..hi (B, K) by linear
    interpolation: (B, K, OUT)."""
    pos = lo[..., None] * SIDE + (np.arange(OUT) + 0.5) * ((hi - lo)[..., None] * SIDE / OUT) - 0.5
    pos = np.clip(pos, 0, SIDE - 1)
    i0 = np.floor(pos).astype(np.int64)
    i1 = np.minimum(i0 + 1, SIDE - 1)
    f = pos - i0
    rows = np.arange(prof.shape[0])[:, None, None]
    return prof[rows, i0] * (1 - f) + prof[rows, i1] * f


def _placed(pa_: np.ndarray, pb_: np.ndarray, fa: np.ndarray, fb: np.ndarray) -> list[tuple[float, float, float, float]]:
    """Per pair, where a span of the given length (fa of a's axis, fb of b's; one of them 1) sits
    best along the other image's profile: the offset searched in steps of OFFSET_STEP."""
    n = len(fa)
    a_side = fa < 1
    f = np.where(a_side, fa, fb)
    steps = np.arange(0.0, 2 * PROFILE_MAX_CROP + 1e-9, OFFSET_STEP)  # every offset any length may need
    lo = np.minimum(steps[None, :], (1 - f)[:, None])  # offsets past 1 - f repeat the last one
    hi = lo + f[:, None]
    whole = _sample(np.where(a_side[:, None], pb_, pa_), np.zeros((n, 1)), np.ones((n, 1)))  # (B, 1, OUT)
    moved = _sample(np.where(a_side[:, None], pa_, pb_), lo, hi)  # (B, K, OUT)
    r = _corr_rows(moved, np.broadcast_to(whole, moved.shape))
    k = r.argmax(axis=1)
    out = []
    for i in range(n):
        span = (round(float(lo[i, k[i]]), 4), round(float(hi[i, k[i]]), 4))
        out.append((*span, 0.0, 1.0) if a_side[i] else (0.0, 1.0, *span))
    return out


def _other_axis(spans, aspect_ratio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Span lengths on the other axis that keep the scale uniform: with fa, fb the lengths found on
    this axis, the other axis's lengths ga, gb satisfy gb / ga = (fb / fa) * aspect_ratio, one of
    them 1 (aspect_ratio: b's width/height over a's for x first, its inverse for y first)."""
    fa = np.array([s[1] - s[0] for s in spans])
    fb = np.array([s[3] - s[2] for s in spans])
    q = fb / fa * aspect_ratio
    ga = np.where(q >= 1, 1 / np.maximum(q, 1e-9), 1.0)
    gb = np.where(q >= 1, 1.0, q)
    return np.clip(ga, 1 - 2 * PROFILE_MAX_CROP, 1.0), np.clip(gb, 1 - 2 * PROFILE_MAX_CROP, 1.0)


def _profile_alignments(a: np.ndarray, b: np.ndarray, aspect_ratio: np.ndarray) -> list[list[tuple]]:
    """Two candidate alignments per pair for any crop (off-centre, one side, other amounts): the
    best span on one axis from the 1-D profiles, then the other axis's span length from the
    images' aspect ratios (a crop never stretches) and its best position."""
    px_a, px_b = _profiles(a, 1), _profiles(b, 1)  # along x
    py_a, py_b = _profiles(a, 2), _profiles(b, 2)  # along y
    xs = _best_spans(px_a, px_b)
    ys_for_x = _placed(py_a, py_b, *_other_axis(xs, aspect_ratio))
    ys = _best_spans(py_a, py_b)
    xs_for_y = _placed(px_a, px_b, *_other_axis(ys, 1 / aspect_ratio))
    first = [(x[0], x[1], y[0], y[1], x[2], x[3], y[2], y[3]) for x, y in zip(xs, ys_for_x)]
    second = [(x[0], x[1], y[0], y[1], x[2], x[3], y[2], y[3]) for x, y in zip(xs_for_y, ys)]
    return [first, second]


# ---- identity: are the aligned pixels the same, apart from one compact region? ---------------


@dataclass(frozen=True)
class Rule:
    """The parameters of the identity rule (module docstring), chosen on the tuning half of
    tests/benchmarks/bench_dedupe_quality.py and reported on its held-back half."""

    luma_tol: float = 12.0  # grey levels a pixel may differ beyond its half-pixel envelope
    chroma_tol: float = 16.0  # the same for Cb and Cr (of 128), when both images are coloured
    cell_min: int = 3  # differing pixels (of CELL_PX^2) that make a cell differ
    region_max: float = 0.30  # the one differing region's bounding box, share of the frame
    hidden_max: float = 0.50  # share of the content the region may cover
    stray_max: float = 0.004  # differing pixels outside the region, share of the frame
    hidden_small: float = 0.10  # a region hiding more of the content than this ...
    fill_min: float = 0.65  # ... must differ over at least this share of its box


DEFAULT_RULE = Rule()


def tuning_grid() -> list[Rule]:
    """The rules the benchmark chooses from (the default among them)."""
    base = DEFAULT_RULE
    out = []
    for luma_tol in (6.0, 8.0, 12.0):
        for hidden_max in (0.4, 0.5):
            for fill_min in (0.5, 0.65, 0.8):
                for stray_max in (0.004, 0.01):
                    out.append(replace(base, luma_tol=luma_tol, hidden_max=hidden_max, fill_min=fill_min,
                                       stray_max=stray_max))
    return out


CHUNK = 64  # pairs judged at once: their 128 px images stay in the CPU's cache
CELL_PX = 8  # the differing area is read in cells of CELL_PX x CELL_PX detail pixels
CELLS = DETAIL_SIDE // CELL_PX
BG_TOL = 10.0  # grey levels from the border's median that still count as background
BG_MIN = 0.25  # an image whose background is less than this share of the frame is all content
TONE_SIDE = 64  # the tone curve is fitted on this many pixels a side (every other at 128 px)
TONE_BINS = 16  # the tone curve between a pair (brightness, contrast, gamma, clipping) has this many steps
TONE_KEEP = 24.0  # grey levels from a bin's first mean that count towards its second
TONE_MIN_COUNT = 4  # pixels a bin needs to be read (else it comes from its neighbours)
GREY_CHROMA = 4  # an image whose chroma never leaves 128 by more than this is grey


def split_signature(sig: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, THUMB_BYTES) uint8 signatures -> luma (B, 128, 128), Cb and Cr (B, 32, 32)."""
    sig = np.asarray(sig, np.uint8).reshape(-1, THUMB_BYTES)
    n, ls, cs = sig.shape[0], DETAIL_SIDE * DETAIL_SIDE, CHROMA_SIDE * CHROMA_SIDE
    return (sig[:, :ls].reshape(n, DETAIL_SIDE, DETAIL_SIDE), sig[:, ls:ls + cs].reshape(n, CHROMA_SIDE, CHROMA_SIDE),
            sig[:, ls + cs:].reshape(n, CHROMA_SIDE, CHROMA_SIDE))


def _positions(lo: np.ndarray, hi: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Where side evenly spaced samples of the span lo..hi (fractions) fall on a side-pixel axis:
    (lower pixel (B, side) int, weight of the next one (B, side, float32))."""
    lo, hi = np.asarray(lo, np.float64) * side, np.asarray(hi, np.float64) * side
    x = np.clip(lo[:, None] + (np.arange(side) + 0.5)[None, :] * (hi - lo)[:, None] / side - 0.5, 0, side - 1)
    i0 = np.minimum(np.floor(x).astype(np.int64), side - 2)
    return i0, (x - i0).astype(np.float32)


def _warp(t: np.ndarray, al: np.ndarray, image: int) -> np.ndarray:
    """Images t (B, s, s) float32 resampled (bilinear, one axis after the other) over their
    alignment spans (image 0: a, 1: b)."""
    side = t.shape[-1]
    o = 4 * image
    whole = np.all(al[:, o:o + 4] == np.array([0.0, 1.0, 0.0, 1.0], np.float32), axis=1)
    if whole.all():
        return t
    out = t.copy()
    idx = np.flatnonzero(~whole)
    part = t[idx]
    r0, rf = _positions(al[idx, o + 2], al[idx, o + 3], side)
    c0, cf = _positions(al[idx, o], al[idx, o + 1], side)
    top = np.take_along_axis(part, r0[:, :, None], axis=1)
    bottom = np.take_along_axis(part, r0[:, :, None] + 1, axis=1)
    rows = top + rf[:, :, None] * (bottom - top)
    left = np.take_along_axis(rows, c0[:, None, :], axis=2)
    right = np.take_along_axis(rows, c0[:, None, :] + 1, axis=2)
    out[idx] = left + cf[:, None, :] * (right - left)
    return out


def _warp8(t: np.ndarray, al: np.ndarray, image: int) -> np.ndarray:
    """uint8 images resampled over their alignment spans (`_warp`), rounded back to uint8."""
    o = 4 * image
    if np.all(al[:, o:o + 4] == np.array([0.0, 1.0, 0.0, 1.0], np.float32)):
        return np.ascontiguousarray(t)
    return np.clip(np.rint(_warp(t.astype(np.float32), al, image)), 0, 255).astype(np.uint8)


def _envelope(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pixel of uint8 images (B, s, s), the lowest and highest value within half a pixel: x
    and its means with each of its four neighbours, that is (x + the smallest / largest of x and
    its neighbours) / 2, rounded outwards. What a sub-pixel shift of the same picture can show."""
    mn, mx = x.copy(), x.copy()
    for out, op in ((mn, np.minimum), (mx, np.maximum)):
        op(out[:, :, 1:], x[:, :, :-1], out=out[:, :, 1:])
        op(out[:, :, :-1], x[:, :, 1:], out=out[:, :, :-1])
        op(out[:, 1:, :], x[:, :-1, :], out=out[:, 1:, :])
        op(out[:, :-1, :], x[:, 1:, :], out=out[:, :-1, :])
    lo = (x.astype(np.uint16) + mn) >> 1
    hi = (x.astype(np.uint16) + mx + 1) >> 1
    return lo.astype(np.uint8), hi.astype(np.uint8)


class _Plane:
    """One plane of a batch of aligned images (uint8) with its half-pixel envelope."""

    def __init__(self, x: np.ndarray):
        self.x = np.ascontiguousarray(x)
        self.lo, self.hi = _envelope(self.x)
        self.i = self.x.astype(np.int16)


def _residual(x: _Plane, y: _Plane, lut: np.ndarray) -> np.ndarray:
    """How far each pixel of y lies outside the envelope of x mapped through `lut` (a monotone
    curve maps a half-pixel envelope onto the mapped image's), and x's mapped pixel outside y's
    envelope, the smaller of the two (int16): noise and sub-pixel shifts stay near 0, content one
    image lacks does not."""
    tx, tlo, thi = _apply(x.x, lut), _apply(x.lo, lut), _apply(x.hi, lut)
    r1 = np.maximum(y.i - thi, tlo - y.i)
    r2 = np.maximum(tx - y.hi, y.lo - tx)
    return np.minimum(r1, r2, out=r1)


def _tone_lut(x: np.ndarray, y: np.ndarray, use: np.ndarray | None = None) -> np.ndarray:
    """The tone curve from x's values to y's, per pair, as a (B, 256) table: TONE_BINS bins of x's
    value, in each the mean of y, then again over the pixels within TONE_KEEP of it (an overlay or a
    differing region does not pull it), made non-decreasing, read between the bins' mean x values
    (bins with fewer than TONE_MIN_COUNT pixels are skipped; no bin read: the identity).
    Brightness, contrast, gamma and the clipping a brightness edit causes are all such a curve;
    other content is not. Fitted on a TONE_SIDE x TONE_SIDE grid of the pixels."""
    n = x.shape[0]
    step = max(1, x.shape[-1] // TONE_SIDE)
    if step > 1:
        x, y = x[:, ::step, ::step], y[:, ::step, ::step]
        use = None if use is None else use[:, ::step, ::step]
    xf, yf = x.reshape(n, -1).astype(np.float32), y.reshape(n, -1).astype(np.float32)
    key = (np.clip(xf * (TONE_BINS / 256.0), 0, TONE_BINS - 1).astype(np.int64) + np.arange(n)[:, None] * TONE_BINS).ravel()
    xr, yr = xf.ravel(), yf.ravel()
    size = n * TONE_BINS
    w = None if use is None else use.ravel().astype(np.float64)
    count = np.bincount(key, weights=w, minlength=size)
    mean = np.bincount(key, weights=yr if w is None else yr * w, minlength=size) / np.maximum(count, 1)
    keep = np.abs(yr - mean[key]) <= TONE_KEEP
    if use is not None:
        keep &= use.ravel()
    count = np.bincount(key[keep], minlength=size)
    mean = np.bincount(key[keep], weights=yr[keep], minlength=size) / np.maximum(count, 1)
    at = np.bincount(key[keep], weights=xr[keep], minlength=size) / np.maximum(count, 1)
    ok = (count >= TONE_MIN_COUNT).reshape(n, TONE_BINS)
    curve = np.where(ok, mean.reshape(n, TONE_BINS), -np.inf)
    curve = np.maximum.accumulate(curve, axis=1)  # non-decreasing over the bins that are read
    # One np.interp for every pair: pair i's knots and values shifted by i * 512, with knots at
    # both ends of its range so that no pair reads its neighbour's.
    read = ok.any(1)
    first = np.where(read, np.take_along_axis(curve, ok.argmax(1)[:, None], axis=1)[:, 0], 0.0)
    last = np.where(read, curve.max(axis=1), 0.0)
    shift = np.arange(n, dtype=np.float64) * 512.0
    kx = np.concatenate([(shift - 1.0)[:, None], np.where(ok, at.reshape(n, TONE_BINS), np.nan) + shift[:, None],
                         (shift + 256.0)[:, None]], axis=1)
    ky = np.concatenate([first[:, None], curve, last[:, None]], axis=1)
    knot = np.isfinite(kx) & np.isfinite(ky) & read[:, None]
    grid = np.arange(256, dtype=np.float64)
    lut = np.tile(grid.astype(np.float32), (n, 1))
    if knot.any():
        lut[read] = np.interp((grid[None, :] + shift[read, None]).ravel(), kx[knot], ky[knot]).reshape(-1, 256)
    return lut


def _apply(x: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """uint8 x (B, s, s) through its pair's table (rounded to whole levels): int16."""
    table = np.clip(np.rint(lut), 0, 255).astype(np.int16)
    out = np.empty(x.shape, np.int16)
    for i in range(x.shape[0]):  # one gather per image: uint8 indexes need no widening
        np.take(table[i], x[i], out=out[i])
    return out


def _differs(x: _Plane, y: _Plane, tol: float) -> np.ndarray:
    """Pixels that differ by more than tol beyond the half-pixel envelope once the tone curve is
    applied, read both ways (x's curve onto y, y's onto x) and kept from the way with fewer: the
    verdict does not depend on which image comes first."""
    n = x.x.shape[0]
    out = _residual(x, y, _tone_lut(x.x, y.x)) > tol
    count = out.reshape(n, -1).sum(1)
    idx = np.flatnonzero(count > 0)
    if idx.size:
        # Fit again on the pixels that matched (an overlay's pixels pull the first curve), and the
        # other way round; the reading with the fewest differing pixels stands.
        xi, yi = _subset_plane(x, idx), _subset_plane(y, idx)
        use = ~out[idx]
        again = _residual(xi, yi, _tone_lut(xi.x, yi.x, use)) > tol
        backward = _residual(yi, xi, _tone_lut(yi.x, xi.x, use)) > tol
        for other in (again, backward):
            c = other.reshape(idx.size, -1).sum(1)
            fewer = c < count[idx]
            out[idx[fewer]] = other[fewer]
            count[idx[fewer]] = c[fewer]
    return out


def _subset_plane(p: _Plane, idx: np.ndarray) -> _Plane:
    q = _Plane.__new__(_Plane)
    q.x, q.lo, q.hi, q.i = p.x[idx], p.lo[idx], p.hi[idx], p.i[idx]
    return q


def _background(plane: _Plane) -> np.ndarray:
    """(B, s, s) bool: pixels of the frame's background (the border's median grey, locally flat);
    none where the background is under BG_MIN of the frame (a photo: all of it is content)."""
    luma = plane.x
    n = luma.shape[0]
    ring = np.concatenate([luma[:, 0, :], luma[:, -1, :], luma[:, 1:-1, 0], luma[:, 1:-1, -1]], axis=1)
    bg = np.median(ring, axis=1).astype(np.int16)
    is_bg = (np.abs(plane.i - bg[:, None, None]) <= BG_TOL) & ((plane.hi - plane.lo) <= BG_TOL)
    share = is_bg.reshape(n, -1).mean(1)
    is_bg[share < BG_MIN] = False
    return is_bg


def _cells(mask: np.ndarray) -> np.ndarray:
    """(B, s, s) bool -> (B, CELLS, CELLS) counts of true pixels per cell."""
    n, cp = mask.shape[0], mask.shape[-1] // CELLS
    return mask.reshape(n, CELLS, cp, CELLS, cp).sum(axis=(2, 4), dtype=np.int32)


def _largest_component(cells: np.ndarray) -> np.ndarray:
    """(B, C, C) bool -> the largest group of cells (8-connected, after joining cells one empty
    cell apart) per image, as a bool mask over the original cells."""
    n, c, _ = cells.shape
    p = np.pad(cells, ((0, 0), (1, 1), (1, 1)))
    grown = cells.copy()
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            grown |= p[:, dy:dy + c, dx:dx + c]
    big = np.int32(c * c + 1)
    label = np.where(grown, np.arange(1, c * c + 1, dtype=np.int32).reshape(1, c, c), big)
    while True:
        q = np.pad(label, ((0, 0), (1, 1), (1, 1)), constant_values=big)
        low = label.copy()
        for dy in (0, 1, 2):
            for dx in (0, 1, 2):
                np.minimum(low, q[:, dy:dy + c, dx:dx + c], out=low)
        low = np.where(grown, low, big)
        if np.array_equal(low, label):
            break
        label = low
    label = np.where(cells, label, 0).reshape(n, -1)
    counts = np.zeros((n, c * c + 2), np.int32)
    np.add.at(counts, (np.repeat(np.arange(n), c * c), label.ravel()), 1)
    counts[:, 0] = 0
    best = counts.argmax(axis=1)
    return (label == best[:, None]).reshape(n, c, c) & cells


@dataclass(frozen=True)
class Identity:
    """What the residual map of aligned pairs says (arrays over the pairs)."""

    accepted: np.ndarray  # bool: the same pixels, apart from at most one compact region
    region: np.ndarray  # bool: a region differs (an overlay); False for an identical frame
    score: np.ndarray  # float32: the share of the content that is the same
    differing: np.ndarray  # float32: differing pixels, share of the frame
    box: np.ndarray  # int (B, 4): the region's cells y0, y1, x0, x1 (end exclusive); 0s for none
    box_share: np.ndarray  # float32: the region's bounding box, share of the frame
    hidden: np.ndarray  # float32: share of the content inside that box
    fill: np.ndarray  # float32: share of what one image shows inside the region's tight box that differs
    stray: np.ndarray  # float32: differing pixels outside the region, share of the frame


def identity(a: np.ndarray, b: np.ndarray, aligns: np.ndarray, rule: Rule = DEFAULT_RULE,
             side: int = DETAIL_SIDE) -> Identity:
    """Compare the pixels of signature pairs (a[i], b[i], (B, THUMB_BYTES)) at their alignments
    (B, 8): luma with each pixel's half-pixel envelope after the best brightness/contrast line,
    chroma too when both are coloured; then the differing cells, their largest group, its
    bounding box and the content it covers. `side` 64 reads the luma at half resolution (2x2
    means): a quick first look that refuses what differs already there."""
    n = len(a)
    al = np.asarray(aligns, np.float32).reshape(n, 8)
    la, cba, cra = split_signature(a)
    lb, cbb, crb = split_signature(b)
    if side != DETAIL_SIDE:
        la, lb = (np.rint(_reduce(x)).astype(np.uint8) for x in (la, lb))
    cell_px = side // CELLS
    cell_min = max(1, -(-rule.cell_min * cell_px * cell_px // (CELL_PX * CELL_PX)))
    xa, xb = _Plane(_warp8(la, al, 0)), _Plane(_warp8(lb, al, 1))
    diff = _differs(xa, xb, rule.luma_tol)
    coloured = (np.abs(cba.astype(np.int16) - 128).reshape(n, -1).max(1) > GREY_CHROMA) & \
               (np.abs(cbb.astype(np.int16) - 128).reshape(n, -1).max(1) > GREY_CHROMA)
    coloured |= (np.abs(cra.astype(np.int16) - 128).reshape(n, -1).max(1) > GREY_CHROMA) & \
                (np.abs(crb.astype(np.int16) - 128).reshape(n, -1).max(1) > GREY_CHROMA)
    if coloured.any():
        idx = np.flatnonzero(coloured)
        cdiff = np.zeros((len(idx), CHROMA_SIDE, CHROMA_SIDE), bool)
        for pa_, pb_ in ((cba, cbb), (cra, crb)):
            ya, yb = _Plane(_warp8(pa_[idx], al[idx], 0)), _Plane(_warp8(pb_[idx], al[idx], 1))
            # A brightness edit scales chroma and clips saturated channels: chroma has its own
            # curve; it is non-decreasing, so a recolouring (blue to orange beside a neutral
            # background) is not one.
            cdiff |= _differs(ya, yb, rule.chroma_tol)
        up = np.repeat(np.repeat(cdiff, side // CHROMA_SIDE, axis=1), side // CHROMA_SIDE, axis=2)
        diff[idx] |= up
    bg_a, bg_b = _background(xa), _background(xb)
    content = ~(bg_a & bg_b)
    content_px = np.maximum(content.reshape(n, -1).sum(1), 1)
    diff_px = diff.reshape(n, -1).sum(1)
    counts = _cells(diff)
    cells = counts >= cell_min
    any_cell = cells.reshape(n, -1).any(1)
    box = np.zeros((n, 4), np.int64)
    box_share, hidden, fill, stray = (np.zeros(n, np.float32) for _ in range(4))
    k = np.flatnonzero(any_cell)  # the region's figures, for the pairs that have one
    if k.size:
        d, c_k, cells_k = diff[k], counts[k], cells[k]
        main = _largest_component(cells_k)
        ys, xs = main.any(axis=2), main.any(axis=1)
        y0, y1 = ys.argmax(1), CELLS - ys[:, ::-1].argmax(1)
        x0, x1 = xs.argmax(1), CELLS - xs[:, ::-1].argmax(1)
        box[k] = np.stack([y0, y1, x0, x1], 1)
        r = np.arange(CELLS)
        inside = ((r[None, :, None] >= y0[:, None, None]) & (r[None, :, None] < y1[:, None, None])
                  & (r[None, None, :] >= x0[:, None, None]) & (r[None, None, :] < x1[:, None, None]))
        box_share[k] = (y1 - y0) * (x1 - x0) / (CELLS * CELLS)
        # What the region hides of each image's own content; the original is the one it hides less
        # of (the other's count includes the overlay itself).
        hidden[k] = np.minimum(*((_cells(~bg[k]) * inside).reshape(k.size, -1).sum(1)
                                 / np.maximum((~bg[k]).reshape(k.size, -1).sum(1), 1) for bg in (bg_a, bg_b)))
        stray[k] = (c_k * (cells_k & ~inside)).reshape(k.size, -1).sum(1) / float(side * side)
        # The fill is read on the region's tight pixel box (a cell-aligned box would dilute it):
        # what an image shows inside it, an overlay changes nearly all of, in one of the two.
        inside_px = np.repeat(np.repeat(inside, cell_px, axis=1), cell_px, axis=2) & d
        py, px = inside_px.any(axis=2), inside_px.any(axis=1)
        ty0, ty1 = py.argmax(1), side - py[:, ::-1].argmax(1)
        tx0, tx1 = px.argmax(1), side - px[:, ::-1].argmax(1)
        r = np.arange(side)
        box_px = ((r[None, :, None] >= ty0[:, None, None]) & (r[None, :, None] < ty1[:, None, None])
                  & (r[None, None, :] >= tx0[:, None, None]) & (r[None, None, :] < tx1[:, None, None]))
        for bg in (bg_a, bg_b):
            shown = box_px & ~bg[k]
            fill[k] = np.maximum(fill[k], (shown & d).reshape(k.size, -1).sum(1) / np.maximum(shown.reshape(k.size, -1).sum(1), 1))
    # An overlay covers what it hides: a region that hides much of the content must differ nearly
    # all over (a bar, an opaque box); content rearranged inside one area (slices of another size)
    # differs only in part of it.
    covers = (hidden <= rule.hidden_small) | (fill >= rule.fill_min)
    overlay = any_cell & (box_share <= rule.region_max) & (hidden <= rule.hidden_max) & (stray <= rule.stray_max) & covers
    score = np.clip(1 - (diff & content).reshape(n, -1).sum(1) / content_px, 0, 1).astype(np.float32)
    return Identity(~any_cell | overlay, overlay, score, (diff_px / float(side * side)).astype(np.float32),
                    box, box_share, hidden, fill, stray)


@dataclass(frozen=True)
class Verdict:
    accepted: np.ndarray  # bool (B,)
    kind: np.ndarray  # object (B,): near | crop | overlay, None when refused
    score: np.ndarray  # float32 (B,): share of the content that is the same, at the alignment judged
    crop: np.ndarray  # float32 (B,): fraction off the most cropped side of that alignment (0: whole frame)
    align: np.ndarray  # float32 (B, 8): that alignment (a_x0, a_x1, a_y0, a_y1, b_x0, b_x1, b_y0, b_y1)
    identity: Identity | None = None  # the residual map's figures at that alignment
    correlation: np.ndarray | None = None  # float32 (B,): best correlation the alignment search saw


def _search(af: np.ndarray, bf: np.ndarray, plausible: np.ndarray, aspect_a, aspect_b) -> _Best:
    """The alignment search (module docstring, step 1) over luma thumbnails (B, 64, 64) float32."""
    n = af.shape[0]
    best = _Best(n)

    def unclear() -> np.ndarray:  # no clear whole-frame match yet
        return np.flatnonzero(plausible & (best.full < CLEAR_MATCH))

    _try(best, np.flatnonzero(plausible), af, bf, WHOLE)
    for c in [s * c for c in CROPS for s in (1, -1)]:
        _try(best, unclear(), af, bf, _symmetric(c))
    idx = unclear()
    if idx.size and aspect_a is not None and aspect_b is not None:
        ratio = np.asarray(aspect_b, np.float64)[idx] / np.asarray(aspect_a, np.float64)[idx]
        for aligns in _profile_alignments(af[idx], bf[idx], ratio):
            _try_each(best, idx, af, bf, aligns)
    return best


def _refine(best: _Best, idx: np.ndarray, af: np.ndarray, bf: np.ndarray) -> None:
    """A quarter-pixel shift and half a percent more or less around each pair's best alignment."""
    if idx.size == 0:
        return
    start = [tuple(float(v) for v in best.full_at[i]) for i in idx]
    step = REFINE_SHIFT / SIDE
    for ds in (-REFINE_CROP, 0.0, REFINE_CROP):
        for dx in (-step, 0.0, step):
            for dy in (-step, 0.0, step):
                if ds == dx == dy == 0.0:
                    continue
                _try_each(best, idx, af, bf, [_nudge(al, ds, dx, dy) for al in start])


def compare(a: np.ndarray, b: np.ndarray, aspect_a: np.ndarray | None = None, aspect_b: np.ndarray | None = None,
            chroma_a: np.ndarray | None = None, chroma_b: np.ndarray | None = None,
            rule: Rule = DEFAULT_RULE) -> Verdict:
    """Judge pairs of signatures: a and b are (B, THUMB_BYTES) uint8 (hashing.HashedImage.thumb),
    pair i is (a[i], b[i]). `aspect_a`/`aspect_b` (width / height of the original images) enable
    the search for crops that are not central. `chroma_a`/`chroma_b` (mean Cb, Cr) are accepted
    from the engine's callers but not read: the signature's chroma planes are compared pixel by
    pixel instead."""
    a = np.asarray(a, np.uint8).reshape(-1, THUMB_BYTES)
    b = np.asarray(b, np.uint8).reshape(-1, THUMB_BYTES)
    n = a.shape[0]
    kind = np.full(n, None, dtype=object)
    if n == 0:
        z = np.zeros(0, np.float32)
        return Verdict(np.zeros(0, bool), kind, z, z, np.zeros((0, 8), np.float32))
    judged = np.ones(n, bool)

    # Each pair is judged at the whole frame; a pair refused there is aligned (module docstring,
    # step 1) and judged at its best alignment, at the best with a corner left out, and at a refined
    # alignment: the first that shows an identical frame wins, else one that shows one overlay,
    # else the best score (for review).
    rank = np.full(n, -1.0)
    align = np.tile(np.array(WHOLE, np.float32), (n, 1))
    figures = _empty(n)
    corr = np.full(n, np.nan, np.float32)

    def judge(idx: np.ndarray, aligns: np.ndarray) -> None:
        if idx.size == 0:
            return
        r = _cascade(a[idx], b[idx], aligns, rule)
        new_rank = np.where(r.accepted & ~r.region, 3.0, np.where(r.accepted, 2.0, 0.0)) + r.score
        better = new_rank > rank[idx]
        pos = idx[better]
        rank[pos] = new_rank[better]
        align[pos] = aligns[better]
        for f in Identity.__dataclass_fields__:
            getattr(figures, f)[pos] = getattr(r, f)[better]

    def moved(aligns: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return np.any(np.abs(aligns - align[idx]) > 1e-6, axis=1)

    judge(np.arange(n), np.tile(np.array(WHOLE, np.float32), (n, 1)))
    todo = np.flatnonzero(rank < 2)
    if todo.size:
        la, lb = _reduce(split_signature(a[todo])[0]), _reduce(split_signature(b[todo])[0])
        aa = None if aspect_a is None else np.asarray(aspect_a)[todo]
        ab = None if aspect_b is None else np.asarray(aspect_b)[todo]
        best = _search(la, lb, np.ones(todo.size, bool), aa, ab)
        c = np.maximum(best.full, best.corner)
        corr[todo] = c
        for at in (best.full_at, best.corner_at):
            sel = np.flatnonzero((rank[todo] < 3) & (c >= MIN_CORR))
            sel = sel[moved(at[sel], todo[sel])]
            judge(todo[sel], at[sel])
        sel = np.flatnonzero((rank[todo] < 2) & (c >= REFINE_FROM) & (best.full < CLEAR_MATCH)
                             & (figures.differing[todo] <= REFINE_DIFF))
        if sel.size:
            _refine(best, sel, la, lb)
            sel = sel[moved(best.full_at[sel], todo[sel])]
            judge(todo[sel], best.full_at[sel])

    accepted = figures.accepted & judged
    score = np.where(judged, figures.score, 0.0).astype(np.float32)
    crop = np.array([_crop_of(al) for al in align], np.float32)
    # A region that changes almost nothing (a few cells of re-encoding noise) names no overlay.
    region = figures.region & (figures.differing >= MIN_OVERLAY)
    kind[:] = np.where(region, "overlay", np.where(crop >= MIN_CROP, "crop", "near")).astype(object)
    kind[~accepted] = None
    crop[~accepted] = 0.0
    return Verdict(accepted, kind, score, crop, align, figures, corr.astype(np.float32))


_POOL_THREADS: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    """Chunks are judged on every core: numpy lets go of the GIL for the whole-array operations."""
    global _POOL_THREADS
    if _POOL_THREADS is None:
        _POOL_THREADS = ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                               else os.cpu_count() or 1), thread_name_prefix="verify")
    return _POOL_THREADS


def _in_chunks(a: np.ndarray, b: np.ndarray, aligns: np.ndarray, rule: Rule, side: int) -> Identity:
    starts = range(0, len(a), CHUNK)
    judge = lambda s: identity(a[s:s + CHUNK], b[s:s + CHUNK], aligns[s:s + CHUNK], rule, side)  # noqa: E731
    parts = list(_threads().map(judge, starts)) if len(starts) > 1 else [judge(0)]
    return Identity(*(np.concatenate([getattr(p, f) for p in parts]) for f in Identity.__dataclass_fields__))


def _cascade(a: np.ndarray, b: np.ndarray, aligns: np.ndarray, rule: Rule) -> Identity:
    """`identity` at 64 px first (a quarter of the pixels); what it accepts is judged again at
    128 px, where the words of a page and the ticks of a chart show. A pair refused at 64 px keeps
    that verdict (what differs there differs at 128 px too)."""
    first = _in_chunks(a, b, aligns, rule, SIDE)
    again = np.flatnonzero(first.accepted)
    if again.size == 0:
        return first
    second = _in_chunks(a[again], b[again], aligns[again], rule, DETAIL_SIDE)
    out = {f: getattr(first, f).copy() for f in Identity.__dataclass_fields__}
    for f in Identity.__dataclass_fields__:
        out[f][again] = getattr(second, f)
    return Identity(**out)


def _reduce(detail: np.ndarray) -> np.ndarray:
    """(B, 128, 128) uint8 luma -> (B, 64, 64) float32 (2x2 means): what the alignment search reads."""
    n, f = detail.shape[0], DETAIL_SIDE // SIDE
    return detail.reshape(n, SIDE, f, SIDE, f).mean(axis=(2, 4), dtype=np.float32)


def _empty(n: int) -> Identity:
    """Figures for n pairs not judged yet (zeros)."""
    return Identity(**{f: np.zeros((n, 4), np.int64) if f == "box" else np.zeros(n, bool if f in ("accepted", "region")
                                                                                  else np.float32)
                       for f in Identity.__dataclass_fields__})


def _nudge(al: tuple, ds: float, dx: float, dy: float) -> tuple:
    """Move the spans of the image that is cropped (a when neither is) by (dx, dy) and grow them by ds."""
    a_cropped = _crop_of(al[:4] + WHOLE[4:]) >= _crop_of(WHOLE[:4] + al[4:])
    o = 0 if a_cropped else 4
    out = list(al)
    out[o], out[o + 1] = al[o] + dx - ds, al[o + 1] + dx + ds
    out[o + 2], out[o + 3] = al[o + 2] + dy - ds, al[o + 3] + dy + ds
    return tuple(out)




def explain(a: np.ndarray, b: np.ndarray, aspect_a: float | None = None, aspect_b: float | None = None,
            chroma_a=None, chroma_b=None, rule: Rule = DEFAULT_RULE) -> dict:
    """Every number behind the verdict on one pair of signatures, for `rewardhouse dedupe --explain`."""
    aspects = (np.array([aspect_a]), np.array([aspect_b])) if aspect_a and aspect_b else (None, None)
    chromas = (np.array([chroma_a]), np.array([chroma_b])) if chroma_a is not None and chroma_b is not None else (None, None)
    v = compare(a[None], b[None], *aspects, *chromas, rule=rule)
    la, lb = _reduce(split_signature(a)[0])[0], _reduce(split_signature(b)[0])[0]
    sa, sb = float(la.std()), float(lb.std())
    f = v.identity
    out = {
        "accepted": bool(v.accepted[0]),
        "kind": v.kind[0],
        "score": round(float(v.score[0]), 4),
        "crop_per_side": round(float(_crop_of(v.align[0])), 3),
        "correlation": None if np.isnan(v.correlation[0]) else round(float(v.correlation[0]), 4),
        "flat": (sa < FLAT_STD, sb < FLAT_STD),
        "mean_grey": (round(float(la.mean()), 1), round(float(lb.mean()), 1)),
        "std_grey": (round(sa, 1), round(sb, 1)),
        "rule": rule,
        "mean_chroma": (tuple(round(float(x), 1) for x in chroma_a), tuple(round(float(x), 1) for x in chroma_b))
        if chromas[0] is not None else None,
    }
    y0, y1, x0, x1 = (int(x) * CELL_PX for x in f.box[0])
    out.update({
        "differing": round(float(f.differing[0]), 4),
        "region": (f"rows {y0}-{y1}, columns {x0}-{x1} of {DETAIL_SIDE}" if f.box_share[0] > 0 else None),
        "region_share": round(float(f.box_share[0]), 3),
        "hidden": round(float(f.hidden[0]), 3),
        "fill": round(float(f.fill[0]), 3),
        "stray": round(float(f.stray[0]), 4),
    })
    return out
