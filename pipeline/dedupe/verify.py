"""Verification of candidate pairs: is B an edited copy of A? Plain numpy, no Dagster.

The candidate search (search.py) is exact but a 64-bit pHash cannot tell two unrelated charts of
the same kind apart (they sit a few bits apart), and it misses crops and captions (which move the
hash 10-30 bits). So every candidate pair is judged again on a signature stored beside the hashes
and made from the same single decode:

    thumbnail   the grey image resized to 64x64 (LANCZOS), 4,096 bytes
    chroma      the mean (Cb, Cr) of the image: its overall colour
    crop_hash   pHash of the thumbnail's central 92 % (4 % off each side): a copy cropped by
                about 4 % per side has a full-image pHash within a few bits of it
    top_hash    pHash of the thumbnail's top 75 %, and
    bottom_hash of its bottom 75 %: a caption, logo or banner in any corner leaves one of the two
                untouched, so a copy with such an overlay matches the original on that hash

The comparison (`compare`) works on the thumbnails, smoothed (Gaussian, sigma 0.8 px) and
sampled at 32x32, so that resampling and a sub-pixel shift do not count, and reads the Pearson
correlation of the two (brightness and contrast do not count either). Alignments tried:

    1. the whole frame; then one thumbnail's central region (2/4/6/8 % off each side) resampled
       onto the other, both ways (a pair with a clear whole-frame match, >= CLEAR_MATCH, stops);
    2. any crop: the best span on one axis from the 1-D row/column profiles (up to 10 % off
       either end), the other axis's span length from the two images' aspect ratios (a crop
       never stretches) and its best position, both axes first;
    3. for pairs that came close (>= REFINE_FROM), a quarter-pixel shift and half a percent more
       or less around the best alignment (a JPEG decoded at reduced scale sits a fraction of a
       pixel off its PNG original).

At every alignment the correlation is also read with one corner block (3x2 or 2x3 cells of an
8x8 grid, 37.5 % x 25 % of the frame) left out; correlations come from per-cell sums (of x, y,
x^2, y^2, xy), so leaving a corner out costs a subtraction. The rule that explains the pair:

    overlay  a corner left out, the rest >= OVERLAY_MIN, when that clearly helps
             (>= OVERLAY_GAIN over the whole frame) or the whole frame alone fails
    crop     the best alignment is a crop (>= MIN_CROP off a side) that beats the whole frame by
             CROP_GAIN, correlation >= NEAR_MIN
    near     the whole frame (or a sub-pixel shift of it), correlation >= NEAR_MIN

`score` is that correlation; a refused pair's score is the best seen (for review). Two clearly
coloured images (mean chroma >= CHROMA_MIN) whose mean colours point more than MAX_HUE_ANGLE
apart are refused: an edit may brighten, grey out or re-encode, not recolour.

Thresholds, measured on the benchmark sets of tests/benchmarks/bench_dedupe_quality.py and
printed there (edited copies against their base vs candidate pairs of unrelated images):

    photos   copies >= 0.975; unrelated images are never candidates at radius 8
    figures  copies >= 0.969; unrelated charts, diagrams and pages of one template <= 0.93
             (<= 0.973 with a corner left out, on a harder set of near-identical bar charts)

so NEAR_MIN = 0.965 and OVERLAY_MIN = 0.975 sit between the two on both kinds of image.

Flat images (a solid colour, an empty canvas: thumbnail standard deviation below FLAT_STD grey
levels) have no structure to compare; their pHash is degenerate (all AC coefficients ~0, 0 or 1
bit set) and would match every other flat image. They are left out of the near search and are
duplicates only of identical bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from pipeline.dedupe.hashing import FLAT_STD, THUMB_SIDE as SIDE

GRID = 8  # cells per side for the correlation sums
OUT = 32  # side of the smoothed images that are compared
CELL = OUT // GRID
SIGMA = 0.8
CROPS = (0.02, 0.04, 0.06, 0.08)  # fraction off each side tried by the crop alignment
REFINE_FROM = 0.85  # pairs below both thresholds but above this get the fine alignment search
REFINE_CROP = 0.005
REFINE_SHIFT = 0.25  # thumbnail pixels
PROFILE_MAX_CROP = 0.10  # the profile search looks for crops up to this much off either end, per axis
OFFSET_STEP = 0.005  # where a span of known length sits, searched in steps of this (fraction)
MIN_CROP = 0.01  # an alignment that leaves out less than this is "near", not "crop"
NEAR_MIN = 0.965
CLEAR_MATCH = 0.998  # a whole-frame match this good needs no other alignment
OVERLAY_GAIN = 0.01  # leaving a corner out must raise the score this much to be called an overlay
CROP_GAIN = 0.002  # a crop alignment must beat the whole frame by this much to be called a crop
OVERLAY_MIN = 0.975
# Photometric sanity: an edit may brighten or darken, not turn a dark image into a light one.
MAX_MEAN_SHIFT = 64.0
MAX_STD_RATIO = 2.5
CHROMA_MIN = 6.0  # mean chroma (of 128) from which an image counts as clearly coloured
MAX_HUE_ANGLE = 30.0  # degrees between the mean colours of two clearly coloured copies

KINDS = ("exact", "near", "crop", "overlay")


# ---- comparison ------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Verdict:
    accepted: np.ndarray  # bool (B,)
    kind: np.ndarray  # object (B,): near | crop | overlay, None when rejected
    score: np.ndarray  # float32 (B,): the correlation that accepted it, or the best seen
    crop: np.ndarray  # float32 (B,): fraction off each side of the alignment (0 for the whole frame)
    corner: np.ndarray  # int8 (B,): corner block left out (-1: none)
    full: np.ndarray | None = None  # float32 (B,): best whole-frame correlation over the alignments
    rest: np.ndarray | None = None  # float32 (B,): best correlation with a corner block left out


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
    i0 = np.floor(x).astype(np.int64)
    i1 = np.minimum(i0 + 1, SIDE - 1)
    f = (x - i0).astype(np.float32)
    n = len(lo)
    m = np.zeros((n, SIDE, SIDE), np.float32)
    rows = np.broadcast_to(np.arange(SIDE), (n, SIDE))
    batch = np.broadcast_to(np.arange(n)[:, None], (n, SIDE))
    np.add.at(m, (batch, rows, i0), 1 - f)
    np.add.at(m, (batch, rows, i1), f)
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


def same_hue(chroma_a: np.ndarray, chroma_b: np.ndarray) -> np.ndarray:
    """False where both images are clearly coloured and their mean colours point different ways
    (an edit may brighten, grey out or re-encode, not recolour)."""
    ca = np.asarray(chroma_a, np.float64).reshape(-1, 2)
    cb = np.asarray(chroma_b, np.float64).reshape(-1, 2)
    na, nb = np.hypot(ca[:, 0], ca[:, 1]), np.hypot(cb[:, 0], cb[:, 1])
    coloured = (na >= CHROMA_MIN) & (nb >= CHROMA_MIN)
    cos = (ca * cb).sum(axis=1) / np.maximum(na * nb, 1e-9)
    return ~coloured | (cos >= np.cos(np.radians(MAX_HUE_ANGLE)))


def compare(a: np.ndarray, b: np.ndarray, aspect_a: np.ndarray | None = None, aspect_b: np.ndarray | None = None,
            chroma_a: np.ndarray | None = None, chroma_b: np.ndarray | None = None) -> Verdict:
    """Judge pairs of thumbnails: a and b are (B, 64, 64) uint8, pair i is (a[i], b[i]).
    `aspect_a`/`aspect_b` (width / height of the original images) enable the search for crops
    that are not central (without them only central crops are tried); `chroma_a`/`chroma_b`
    ((B, 2) mean Cb, Cr - 128) reject pairs of clearly different colour."""
    a = np.asarray(a, np.uint8).reshape(-1, SIDE, SIDE)
    b = np.asarray(b, np.uint8).reshape(-1, SIDE, SIDE)
    n = a.shape[0]
    kind = np.full(n, None, dtype=object)
    crop = np.zeros(n, np.float32)
    corner = np.full(n, -1, np.int8)
    if n == 0:
        return Verdict(np.zeros(0, bool), kind, np.zeros(0, np.float32), crop, corner)

    ma, mb = a.reshape(n, -1).mean(1), b.reshape(n, -1).mean(1)
    sa, sb = a.reshape(n, -1).std(1), b.reshape(n, -1).std(1)
    plausible = (np.abs(ma - mb) <= MAX_MEAN_SHIFT) & (np.maximum(sa, sb) <= MAX_STD_RATIO * np.maximum(np.minimum(sa, sb), 1e-6))
    if chroma_a is not None and chroma_b is not None:
        plausible &= same_hue(chroma_a, chroma_b)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    best = _Best(n)

    def unclear() -> np.ndarray:  # no clear whole-frame match yet
        return np.flatnonzero(plausible & (best.full < CLEAR_MATCH))

    # 1. The whole frame, then central crops both ways. A pair stops early only on a clear match;
    #    otherwise every alignment is tried, so `kind` names the one that fits best.
    for c in (0.0, *[s * c for c in CROPS for s in (1, -1)]):
        _try(best, unclear(), af, bf, WHOLE if c == 0 else _symmetric(c))
        if c == 0.0:
            whole_frame = best.full.copy()
    # 2. Any crop (off-centre, one side, other amounts per axis): its span on each axis from the
    #    1-D profiles, then scored in 2-D.
    idx = unclear()
    if idx.size and aspect_a is not None and aspect_b is not None:
        ratio = np.asarray(aspect_b, np.float64)[idx] / np.asarray(aspect_a, np.float64)[idx]
        for aligns in _profile_alignments(af[idx], bf[idx], ratio):
            _try_each(best, idx, af, bf, aligns)
    # 3. Fine: a sub-pixel shift and a half-percent more or less around the best alignment, for
    #    pairs that came close (a JPEG decoded at reduced scale sits a fraction of a pixel off).
    idx = np.flatnonzero(plausible & (best.full < NEAR_MIN) & (best.corner < OVERLAY_MIN))
    idx = idx[np.maximum(best.full[idx], best.corner[idx]) >= REFINE_FROM]
    if idx.size:
        start = [tuple(float(v) for v in best.full_at[i]) for i in idx]
        step = REFINE_SHIFT / SIDE
        for ds in (-REFINE_CROP, 0.0, REFINE_CROP):
            for dx in (-step, 0.0, step):
                for dy in (-step, 0.0, step):
                    if ds == dx == dy == 0.0:
                        continue
                    _try_each(best, idx, af, bf, [_nudge(al, ds, dx, dy) for al in start])

    # The rule that explains the pair best: an overlay when leaving a corner out clearly helps,
    # else the whole frame (near) or a crop when the crop alignment clearly fits better.
    overlay = plausible & (best.corner >= OVERLAY_MIN) & ((best.full < NEAR_MIN) | (best.corner - best.full >= OVERLAY_GAIN))
    near = plausible & ~overlay & (best.full >= NEAR_MIN)
    crop_full = np.array([_crop_of(al) for al in best.full_at], np.float32)
    crop_corner = np.array([_crop_of(al) for al in best.corner_at], np.float32)
    is_crop = (crop_full >= MIN_CROP) & ((best.full - whole_frame >= CROP_GAIN) | (whole_frame < NEAR_MIN))
    kind[near] = np.where(is_crop[near], "crop", "near")
    kind[overlay] = "overlay"
    score = np.where(overlay, best.corner, np.maximum(best.full, np.minimum(best.corner, OVERLAY_MIN - 1e-4)))
    score[near] = best.full[near]
    crop[near] = np.where(is_crop[near], crop_full[near], 0.0)
    crop[overlay] = crop_corner[overlay]
    corner[overlay] = best.corner_idx[overlay]
    return Verdict(near | overlay, kind, np.clip(score, -1.0, 1.0).astype(np.float32), crop, corner, best.full, best.corner)


def _nudge(al: tuple, ds: float, dx: float, dy: float) -> tuple:
    """Move the spans of the image that is cropped (a when neither is) by (dx, dy) and grow them by ds."""
    a_cropped = _crop_of(al[:4] + WHOLE[4:]) >= _crop_of(WHOLE[:4] + al[4:])
    o = 0 if a_cropped else 4
    out = list(al)
    out[o], out[o + 1] = al[o] + dx - ds, al[o + 1] + dx + ds
    out[o + 2], out[o + 3] = al[o + 2] + dy - ds, al[o + 3] + dy + ds
    return tuple(out)


CORNER_NAMES = tuple(
    f"{'top' if y == 0 else 'bottom'}-{'left' if x == 0 else 'right'} {w}x{h} cells"
    for w, h in ((3, 2), (2, 3)) for y in (0, GRID - h) for x in (0, GRID - w)
)


def explain(a: np.ndarray, b: np.ndarray, aspect_a: float | None = None, aspect_b: float | None = None,
            chroma_a=None, chroma_b=None) -> dict:
    """Every number behind the verdict on one pair of thumbnails, for `rewardhouse dedupe --explain`."""
    aspects = (np.array([aspect_a]), np.array([aspect_b])) if aspect_a and aspect_b else (None, None)
    chromas = (np.array([chroma_a]), np.array([chroma_b])) if chroma_a is not None and chroma_b is not None else (None, None)
    v = compare(a[None], b[None], *aspects, *chromas)
    sa, sb = float(a.std()), float(b.std())
    return {
        "accepted": bool(v.accepted[0]),
        "kind": v.kind[0],
        "score": round(float(v.score[0]), 4),
        "crop_per_side": float(v.crop[0]),
        "corner_left_out": CORNER_NAMES[v.corner[0]] if v.corner[0] >= 0 else None,
        "flat": (sa < FLAT_STD, sb < FLAT_STD),
        "mean_grey": (round(float(a.mean()), 1), round(float(b.mean()), 1)),
        "std_grey": (round(sa, 1), round(sb, 1)),
        "thresholds": {"near/crop": NEAR_MIN, "overlay": OVERLAY_MIN},
        "same_hue": bool(same_hue(np.array([chroma_a]), np.array([chroma_b]))[0]) if chromas[0] is not None else None,
        "mean_chroma": (tuple(round(float(x), 1) for x in chroma_a), tuple(round(float(x), 1) for x in chroma_b))
        if chromas[0] is not None else None,
    }
