"""The second look: pairs accepted on the 128 px signature, judged again on a 256 px luma.

At 128 px the words of a table 400 px wide are 2 px high: two tables of one layout with other
numbers in the cells differ by less than the half-pixel envelope, and the first look accepts them
(one compact region, the table itself, or nothing at all). At 256 px the words differ. So every
pair the first look accepts whose two images both have a drawn background (a chart, a page, a
table, a diagram: hashing.pack_fine stores their 256 px luma, compressed; a photo has none and
keeps the first look's verdict) is judged again there:

1. **Residual map** as the first look's (kernels.differs: tone curve both ways, half-pixel
   envelope, `luma_tol`) at the first look's alignment, read in cells of 8 px (a cell differs
   with 3 differing pixels).
2. **Decision**: the largest group of differing cells (joined one empty cell apart) is the one
   region a copy may differ in (a caption, a box, a watermark); what differs outside its bounding
   box are *stray cells*. A look-alike differs in scattered places: other numbers in many cells of
   a table, other words across a page. `fine_stray` stray cells refuse the pair; so does a region
   that hides more than `hidden_max` of the content (verify.Rule) and differs in `fill_min` of its
   cells that hold any: a table whose every row holds other numbers is one dense region at 256 px,
   and it is the whole table. And so does a region that is an edge moved, not something put over
   the picture (`_moved`: one image shifted 2-8 px along one axis takes away all but MOVED_LEFT of
   what differs in the region's box): the top of one bar a little higher is a thin flat strip, too
   thin for the first look's flat test, and other data.
3. When the reading refuses, two more: **blur** (a blurred or resized copy is smoother than its
   original: the sharper image is blurred by [1 2 1] passes, sigma 0.7 to 2 px, while the mean
   absolute difference after the tone curve keeps falling; the smoother is never sharpened), then
   **alignment** refined at 256 px (kernels._fit, Gauss-Newton on the 128 and 256 px images from
   the first look's: a quarter pixel at 64 px is a pixel here) with the blur match. The first
   reading that does not refuse stands; when every one refuses, the pair is refused (the figures
   of the reading with the fewest stray cells are kept).

The first look's flat test is also read here (`flat_pair`), for the pairs it alone refused: a
texture that 128 px blurs into one tone is resolved at 256 px.

`fine_stray` is chosen on the tuning half of tests/benchmarks/bench_dedupe_quality.py like the
first look's parameters and reported on the held-back half.
"""

from __future__ import annotations

import zlib

import numpy as np
from numba import njit

from pipeline.dedupe import kernels as K
from pipeline.dedupe.hashing import FINE_SIDE
FINE_GRID = 32  # the residual map is read in FINE_GRID x FINE_GRID cells (8 px at 256)
FINE_CELL_MIN = 3  # differing pixels that make a cell differ
BLUR_PASSES = (1, 2, 4, 8)  # [1 2 1] passes tried on the sharper image (sigma sqrt(passes / 2))
MAX_CROP = 0.15  # kernels.ALIGN_MAX_CROP: a refined alignment that leaves out more is not used
FIGURES = 7  # what fine_pair writes per pair
MOVE_MIN, MOVE_MAX = 2, 8  # px at 256: the shifts along one axis tried on the one region (an edge moved)
MOVED_LEFT = 0.1  # an edge moved: a shift leaves at most this share of the region's differing pixels ...
MOVED_MIN_PX = 24  # ... of at least this many

_JIT = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_JIT)
def _mad(x, table, y):
    """Mean absolute difference on every other pixel between x mapped by table and y (float32)."""
    s = x.shape[0]
    tot = 0.0
    n = 0
    for i in range(0, s, 2):
        for j in range(0, s, 2):
            v = table[min(255, max(0, np.int32(x[i, j] + 0.5)))]
            tot += abs(np.float32(v) - y[i, j])
            n += 1
    return tot / max(n, 1)


@njit(**_JIT)
def _to_u8(x):
    s = x.shape[0]
    out = np.empty((s, s), np.uint8)
    for i in range(s):
        for j in range(s):
            v = np.rint(x[i, j])
            out[i, j] = 0 if v < 0 else (255 if v > 255 else np.uint8(v))
    return out


@njit(**_JIT)
def _matched(x, y):
    """x and y with the sharper blurred to match the other (module docstring, step 2); returns
    (x', y', passes, which: 0 none, 1 x blurred, 2 y blurred). Each side's passes go on while the
    difference keeps falling."""
    s = x.shape[0]
    ones = np.ones((s, s), np.bool_)
    table = K.tone_table(x, y, ones, False)[0]  # x's values onto y's
    xf = x.astype(np.float32)
    yf = y.astype(np.float32)
    best = _mad(xf, table, yf)
    best_p, which = 0, 0
    kept = xf
    for side in (1, 2):
        cur = (xf if side == 1 else yf).copy()
        nxt = np.empty((s, s), np.float32)
        done = 0
        last = best if side == 1 else _mad(xf, table, yf)
        for p in BLUR_PASSES:
            while done < p:
                K.blur121(cur, nxt)
                cur, nxt = nxt, cur
                done += 1
            m = _mad(cur, table, yf) if side == 1 else _mad(xf, table, cur)
            if m < best:
                best, best_p, which = m, p, side
                kept = cur.copy()
            if m >= last:
                break
            last = m
    if which == 0:
        return x, y, 0, 0
    if which == 1:
        return _to_u8(kept), y, best_p, 1
    return x, _to_u8(kept), best_p, 2


@njit(**_JIT)
def _residual(la, lb, al, tol, match):
    """The residual map of the 256 px pair at alignment al, after the blur match when `match`:
    (map, count)."""
    xa = K.warp(la, al[0], al[1], al[2], al[3])
    xb = K.warp(lb, al[4], al[5], al[6], al[7])
    if match:
        xa, xb, _, _ = _matched(xa, xb)
    alo, ahi = K.envelope(xa, 2)
    blo, bhi = K.envelope(xb, 2)
    return K.differs(xa, alo, ahi, xb, blo, bhi, tol, 1.0)


@njit(**_JIT)
def _refined(la, lb, al):
    """The alignment al refined at 256 px (module docstring, step 1); (alignment, held)."""
    sx = (al[1] - al[0]) / max(al[5] - al[4], 1e-6)
    sy = (al[3] - al[2]) / max(al[7] - al[6], 1e-6)
    x0 = al[0] - al[4] * sx
    y0 = al[2] - al[6] * sy
    p = np.array([x0, x0 + sx, y0, y0 + sy, 1.0, 0.0])
    fa, fb = la.astype(np.float32), lb.astype(np.float32)
    out = np.zeros(8)
    if not K._fit(K._smooth_half(fa), K._smooth_half(fb), p, 2) or not K._fit(fa, fb, p, 2):
        return out, False
    K._span(p[0], p[1], out, 0)
    K._span(p[2], p[3], out, 2)
    if max(out[0], 1 - out[1], out[2], 1 - out[3], out[4], 1 - out[5], out[6], 1 - out[7]) > MAX_CROP:
        return out, False
    return out, True


@njit(**_JIT)
def _stray(d):
    """(stray cells, differing cells, the largest group's box y0, y1, x0, x1 in cells) of a
    residual map (module docstring, step 2)."""
    s = d.shape[0]
    g = FINE_GRID
    cp = s // g
    counts = np.zeros((g, g), np.int32)
    for i in range(s):
        for j in range(s):
            if d[i, j]:
                counts[i // cp, j // cp] += 1
    cells = counts >= FINE_CELL_MIN
    stray = 0
    total = 0
    y0, y1, x0, x1 = 0, 0, 0, 0
    if cells.any():
        main = K._largest_group(cells)
        y0, y1, x0, x1 = g, 0, g, 0
        for i in range(g):
            for j in range(g):
                if main[i, j]:
                    y0, y1, x0, x1 = min(y0, i), max(y1, i + 1), min(x0, j), max(x1, j + 1)
        for i in range(g):
            for j in range(g):
                if cells[i, j]:
                    total += 1
                    if not (y0 <= i < y1 and x0 <= j < x1):
                        stray += 1
    return stray, total, y0, y1, x0, x1


@njit(**_JIT)
def _hidden(d, bga, bgb, y0, y1, x0, x1):
    """(hidden, fill) of the cell box y0..y1, x0..x1: the share of the content (pixels off the plain
    background, kernels.background) inside it, the smaller of the two images'; and the share of
    its cells holding content (in either image) whose pixels differ (FINE_CELL_MIN of them)."""
    s = bga.shape[0]
    cp = s // FINE_GRID
    hidden = 1.0
    for bg in (bga, bgb):
        inside = total = 0
        for i in range(s):
            for j in range(s):
                if not bg[i, j]:
                    total += 1
                    inside += y0 * cp <= i < y1 * cp and x0 * cp <= j < x1 * cp
        hidden = min(hidden, inside / max(total, 1))
    content = differing = 0
    for ci in range(y0, y1):
        for cj in range(x0, x1):
            has, n = False, 0
            for i in range(ci * cp, ci * cp + cp):
                for j in range(cj * cp, cj * cp + cp):
                    has = has or not (bga[i, j] and bgb[i, j])
                    n += d[i, j]
            content += has
            differing += has and n >= FINE_CELL_MIN
    return hidden, differing / max(content, 1)


@njit(**_JIT)
def fine_pair(la, lb, al, tol, max_stray, hidden_max, fill_min, res):
    """One pair's second look: res = (stray cells, differing cells, differing share of the frame,
    the reading that stood: 0 as aligned, 1 blur-matched, 2 at the refined alignment, the share of
    the content inside the largest group's box, the share of that box's cells holding content that
    differ). A reading refuses with max_stray stray cells or more, or a box hiding more than
    hidden_max of the content and differing in fill_min of its cells. Cheapest first: a reading
    that does not refuse ends the look (most copies stop at the first); otherwise the one with the
    fewest stray cells stands. (Not a cheaper reading first: a map that differs more densely can
    leave fewer stray cells, its largest group spanning the frame.)"""
    s = la.shape[0]
    xa = K.warp(la, al[0], al[1], al[2], al[3])
    xb = K.warp(lb, al[4], al[5], al[6], al[7])
    alo, ahi = K.envelope(xa, 2)
    blo, bhi = K.envelope(xb, 2)
    bga, bgb = K.background(xa, alo, ahi), K.background(xb, blo, bhi)
    d, n = K.differs(xa, alo, ahi, xb, blo, bhi, tol, 1.0)
    best = np.zeros(FIGURES)
    y0, y1, x0, x1 = _reading(d, n, 0, bga, bgb, s, best)
    if not _refuses(best, max_stray, hidden_max, fill_min) and best[1] > 0:
        if _moved(xa, alo, ahi, xb, blo, bhi, y0, y1, x0, x1, tol):
            best[6] = 1.0  # refused: the one region is an edge of the picture moved (a bar grown)
            res[:FIGURES] = best
            return
    for which in (1, 2):
        if not _refuses(best, max_stray, hidden_max, fill_min):
            break
        if which == 1:
            d, n = _residual(la, lb, al, tol, True)
        else:
            al2, ok = _refined(la, lb, al.astype(np.float64))
            if not ok:
                break
            d, n = _residual(la, lb, al2, tol, True)
        cur = np.zeros(FIGURES)
        _reading(d, n, which, bga, bgb, s, cur)
        if not _refuses(cur, max_stray, hidden_max, fill_min) or cur[0] < best[0]:
            best[:] = cur
    res[:FIGURES] = best


@njit(**_JIT)
def _moved(xa, alo, ahi, xb, blo, bhi, y0, y1, x0, x1, tol):
    """Is the one region (cells y0..y1, x0..x1) an edge of the picture moved rather than something
    put over it? b shifted by MOVE_MIN..MOVE_MAX px along one axis leaves at most MOVED_LEFT of the
    pixels that differ in the region's box unshifted (beyond tol and each other's half-pixel
    envelope, no tone curve): the top of a bar a little taller, a line drawn a little higher. A
    caption, a box or a watermark is in one image only: no shift takes it away, and the picture
    around it moves out of place."""
    s = xa.shape[0]
    cp = s // FINE_GRID
    i0, i1 = max(y0 * cp - MOVE_MAX, 0), min(y1 * cp + MOVE_MAX, s)
    j0, j1 = max(x0 * cp - MOVE_MAX, 0), min(x1 * cp + MOVE_MAX, s)
    base = _left(xa, alo, ahi, xb, blo, bhi, i0, i1, j0, j1, 0, 0, tol, (i1 - i0) * (j1 - j0))
    if base < MOVED_MIN_PX:
        return False
    limit = int(np.floor(MOVED_LEFT * base))  # a shift leaving more than this is read no further
    for axis in range(2):
        for k in range(MOVE_MIN, MOVE_MAX + 1):
            for sign in (-1, 1):
                di, dj = (sign * k, 0) if axis == 0 else (0, sign * k)
                if _left(xa, alo, ahi, xb, blo, bhi, i0, i1, j0, j1, di, dj, tol, limit) <= limit:
                    return True
    return False


@njit(**_JIT)
def _left(xa, alo, ahi, xb, blo, bhi, i0, i1, j0, j1, di, dj, tol, limit):
    """Pixels of the box i0..i1, j0..j1 where a and b shifted by (di, dj) differ beyond tol, each
    outside the other's envelope (kernels._residual_map's reading, no tone curve); a pixel whose
    shifted place is off the frame counts as differing. The count stops at the first row that
    takes it past `limit` (what it is compared with): a shift that leaves too much is not read on."""
    t = np.int32(tol)
    s = xa.shape[0]
    n = 0
    for i in range(i0, i1):
        for j in range(j0, j1):
            if not (0 <= i + di < s and 0 <= j + dj < s):
                n += 1
                continue
            a, b = np.int32(xa[i, j]), np.int32(xb[i + di, j + dj])
            r1 = max(b - np.int32(ahi[i, j]), np.int32(alo[i, j]) - b)
            r2 = max(a - np.int32(bhi[i + di, j + dj]), np.int32(blo[i + di, j + dj]) - a)
            n += min(r1, r2) > t
        if n > limit:
            return n
    return n


@njit(**_JIT)
def _reading(d, n, which, bga, bgb, s, out):
    """One reading's figures (fine_pair's res) from its residual map d with n differing pixels;
    returns its largest group's box in cells (y0, y1, x0, x1)."""
    stray, total, y0, y1, x0, x1 = _stray(d)
    out[0], out[1], out[2], out[3] = stray, total, min(n, s * s) / (s * s), which
    out[4], out[5] = _hidden(d, bga, bgb, y0, y1, x0, x1) if total else (0.0, 0.0)
    return y0, y1, x0, x1


@njit(**_JIT)
def _refuses(r, max_stray, hidden_max, fill_min):
    return r[0] >= max_stray or (r[4] > hidden_max and r[5] >= fill_min)


@njit(**_JIT)
def fine_pairs(la, lb, aligns, tol, max_stray, hidden_max, fill_min, res):
    for k in range(la.shape[0]):
        fine_pair(la[k], lb[k], aligns[k], tol, max_stray, hidden_max, fill_min, res[k])


@njit(**_JIT)
def flat_pair(la, lb, al, tol, box, out):
    """The first look's flat test (kernels._flat_inside) read again at 256 px: the residual map at
    alignment al (as the first look's: tone curve both ways, half-pixel envelope), the tight box of
    what differs inside the region's cells `box` (y0, y1, x0, x1 of kernels.CELLS), and the share of
    its interior flat in both images, and what is not flat around it: out = (flat, edges). Nothing
    differing there at 256 px: (0, 0), no block recoloured."""
    s = la.shape[0]
    xa = K.warp(la, al[0], al[1], al[2], al[3])
    xb = K.warp(lb, al[4], al[5], al[6], al[7])
    alo, ahi = K.envelope(xa, 2)
    blo, bhi = K.envelope(xb, 2)
    d, _ = K.differs(xa, alo, ahi, xb, blo, bhi, tol, 1.0)
    c = s // K.CELLS
    ty0, ty1, tx0, tx1 = s, 0, s, 0
    for i in range(box[0] * c, box[1] * c):
        for j in range(box[2] * c, box[3] * c):
            if d[i, j]:
                ty0, ty1, tx0, tx1 = min(ty0, i), max(ty1, i + 1), min(tx0, j), max(tx1, j + 1)
    out[0], out[1] = 0.0, 0.0
    if ty1 > ty0:
        out[0], out[1] = K._flat_inside(xa, xb, d, ty0, ty1, tx0, tx1)


@njit(**_JIT)
def flat_pairs(la, lb, aligns, tol, boxes, out):
    for k in range(la.shape[0]):
        flat_pair(la[k], lb[k], aligns[k], tol, boxes[k], out[k])


def flat_looks(fine_a: list, fine_b: list, aligns: np.ndarray, boxes: np.ndarray, tol: float) -> np.ndarray:
    """(B, 2) flat_pair figures of pairs whose two fine lumas are both there (packed bytes); NaN
    rows for the others."""
    n = len(fine_a)
    out = np.full((n, 2), np.nan)
    have = [k for k in range(n) if fine_a[k] is not None and fine_b[k] is not None]
    if not have:
        return out
    la = np.stack([unpack(fine_a[k]) for k in have])
    lb = np.stack([unpack(fine_b[k]) for k in have])
    res = np.zeros((len(have), 2))
    flat_pairs(la, lb, np.ascontiguousarray(np.asarray(aligns, np.float64)[have]), float(tol),
               np.ascontiguousarray(np.asarray(boxes, np.int64)[have]), res)
    out[have] = res
    return out


def warm() -> None:
    """Compile (or load from the cache) fine_pairs on a tiny pair, as kernels.warm does its own."""
    la = np.zeros((1, 2 * 128, 2 * 128), np.uint8)
    la[0, 64:192, 64:192] = 200
    lb = la.copy()
    lb[0, 80:100, 80:100] = 30
    al = np.array([[0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]])
    fine_pairs(la, lb, al, 12.0, 0, 0.5, 0.5, np.zeros((1, FIGURES)))
    flat_pairs(la, lb, al, 12.0, np.array([[4, 7, 4, 7]], np.int64), np.zeros((1, 2)))


def unpack(blob: bytes) -> np.ndarray:
    """A stored fine luma (hashing.pack_fine) as a (FINE_SIDE, FINE_SIDE) uint8 array."""
    return np.frombuffer(zlib.decompress(blob), np.uint8).reshape(FINE_SIDE, FINE_SIDE)


def second_look(fine_a: list, fine_b: list, aligns: np.ndarray, tol: float, max_stray: int, hidden_max: float,
                fill_min: float) -> np.ndarray:
    """(B, FIGURES) figures of fine_pair for pairs whose two fine lumas are both there (packed bytes);
    NaN rows for the others (no second look)."""
    n = len(fine_a)
    out = np.full((n, FIGURES), np.nan)
    have = [k for k in range(n) if fine_a[k] is not None and fine_b[k] is not None]
    if not have:
        return out
    seen: dict = {}  # an image in many pairs is unpacked once

    def get(blob):
        x = seen.get(blob)
        if x is None:
            x = seen[blob] = unpack(blob)
        return x

    la = np.stack([get(fine_a[k]) for k in have])
    lb = np.stack([get(fine_b[k]) for k in have])
    res = np.zeros((len(have), FIGURES))
    fine_pairs(la, lb, np.ascontiguousarray(np.asarray(aligns, np.float64)[have]), float(tol), int(max_stray),
               float(hidden_max), float(fill_min), res)
    out[have] = res
    return out
