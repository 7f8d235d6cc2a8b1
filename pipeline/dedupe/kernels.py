"""Compiled loops (numba) of the verification: the residual map of a pair and what it says.

verify.py holds the rule and its reasons (its module docstring); this module is the same
arithmetic written as plain loops over one pair at a time, compiled once (cached beside the source)
and released from the GIL, so that a batch of pairs is judged on every core by verify.py's threads
without the temporaries a whole-batch numpy expression needs. Nothing here knows what a dataset is.

Every function works on uint8 images of one side (the luma at 64 or 128 px, the chroma at 32 px)
and on an alignment: the span of each image, per axis, that shows the same content, as fractions
(a_x0, a_x1, a_y0, a_y1, b_x0, b_x1, b_y0, b_y1).
"""

from __future__ import annotations

import numpy as np
from numba import njit

TONE_SIDE = 64  # the tone curve is fitted on this many pixels a side (every other at 128 px)
TONE_BINS = 16  # steps of the tone curve (brightness, contrast, gamma, clipping)
TONE_KEEP = 24.0  # grey levels from a bin's first mean that count towards its second
TONE_MIN_COUNT = 4  # pixels a bin needs to be read (else it comes from its neighbours)
BG_TOL = 10  # grey levels from the border's median that still count as background
BG_MIN = 0.25  # an image whose background is less than this share of the frame is all content
GREY_CHROMA = 4  # an image whose chroma never leaves 128 by more than this is grey
CELLS = 16  # the differing area is read in CELLS x CELLS cells

_JIT = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_JIT)
def reduce2(x):
    """(s, s) uint8 -> (s/2, s/2) uint8: 2x2 means, rounded half to even as numpy's rint."""
    h = x.shape[0] // 2
    out = np.empty((h, h), np.uint8)
    for i in range(h):
        for j in range(h):
            s = np.int32(x[2 * i, 2 * j]) + x[2 * i, 2 * j + 1] + x[2 * i + 1, 2 * j] + x[2 * i + 1, 2 * j + 1]
            q, r = s // 4, s % 4
            if r > 2 or (r == 2 and q % 2 == 1):
                q += 1
            out[i, j] = q
    return out


@njit(**_JIT)
def _positions(lo, hi, side, i0, f):
    """Where `side` evenly spaced samples of the span lo..hi fall: lower pixel and next one's weight."""
    a, b = lo * side, hi * side
    for i in range(side):
        x = a + (i + 0.5) * (b - a) / side - 0.5
        if x < 0.0:
            x = 0.0
        if x > side - 1:
            x = side - 1.0
        k = int(np.floor(x))
        if k > side - 2:
            k = side - 2
        i0[i] = k
        f[i] = np.float32(x - k)


@njit(**_JIT)
def warp(x, x0, x1, y0, y1):
    """uint8 (s, s) resampled (bilinear, rows then columns) over the span x0..x1, y0..y1, rounded."""
    side = x.shape[0]
    if x0 == 0.0 and x1 == 1.0 and y0 == 0.0 and y1 == 1.0:
        return x.copy()
    r0 = np.empty(side, np.int64)
    rf = np.empty(side, np.float32)
    c0 = np.empty(side, np.int64)
    cf = np.empty(side, np.float32)
    _positions(y0, y1, side, r0, rf)
    _positions(x0, x1, side, c0, cf)
    rows = np.empty((side, side), np.float32)
    for i in range(side):
        k, w = r0[i], rf[i]
        for j in range(side):
            t = np.float32(x[k, j])
            rows[i, j] = t + w * (np.float32(x[k + 1, j]) - t)
    out = np.empty((side, side), np.uint8)
    for i in range(side):
        for j in range(side):
            k, w = c0[j], cf[j]
            left = rows[i, k]
            v = np.rint(left + w * (rows[i, k + 1] - left))
            out[i, j] = 0 if v < 0 else (255 if v > 255 else np.uint8(v))
    return out


@njit(**_JIT)
def envelope(x, quarters):
    """Per pixel, the lowest and highest value a shift of `quarters` / 4 of a pixel can show there:
    x moved that share of the way towards the smallest / largest of x and its four neighbours,
    rounded outwards (2: half a pixel, (x + neighbour) / 2)."""
    s = x.shape[0]
    lo = np.empty((s, s), np.uint8)
    hi = np.empty((s, s), np.uint8)
    mn = np.empty(s, np.int32)
    mx = np.empty(s, np.int32)
    for i in range(s):
        row, up, down = x[i], x[max(i - 1, 0)], x[min(i + 1, s - 1)]  # a missing neighbour is the pixel itself
        for j in range(s):  # the pixel, the rows above and below
            v, u, d = row[j], up[j], down[j]
            mn[j] = min(v, min(u, d))
            mx[j] = max(v, max(u, d))
        for j in range(1, s - 1):  # left and right
            mn[j] = min(mn[j], min(np.int32(row[j - 1]), np.int32(row[j + 1])))
            mx[j] = max(mx[j], max(np.int32(row[j - 1]), np.int32(row[j + 1])))
        mn[0] = min(mn[0], np.int32(row[1]))
        mx[0] = max(mx[0], np.int32(row[1]))
        mn[s - 1] = min(mn[s - 1], np.int32(row[s - 2]))
        mx[s - 1] = max(mx[s - 1], np.int32(row[s - 2]))
        lr, hr = lo[i], hi[i]
        for j in range(s):
            v = np.int32(row[j])
            lr[j] = v - (((v - mn[j]) * quarters + 3) >> 2)
            hr[j] = v + (((mx[j] - v) * quarters + 3) >> 2)
    return lo, hi


@njit(**_JIT)
def tone_table(x, y, use, use_mask):
    """The tone curve from x's values to y's as a 256-entry int16 table: TONE_BINS bins of x, in
    each the most common y - x (to 8 levels) and the mean of y over the pixels whose y - x lies
    within TONE_KEEP of it (what an overlay or a differing region shows in a bin is outvoted, not
    averaged in), made non-decreasing, read between the bins' mean x; fitted on a TONE_SIDE grid
    of the pixels; `use` (when use_mask) leaves pixels out. No bin read: the identity."""
    s = x.shape[0]
    step = max(1, s // TONE_SIDE)
    # One pass: per bin of x and per 4 levels of y - x, the count and the sums of y and of x. The
    # 8-level votes are pairs of these, and the window of TONE_KEEP levels around a vote's middle
    # (8 c + 3.5 - 256 +- 24: y - x + 256 in 8 c - 20 .. 8 c + 27) is exactly the 4-level steps
    # 2 c - 5 .. 2 c + 6, so the second reading needs no second pass over the pixels.
    cnt4 = np.zeros((TONE_BINS, 128), np.int64)
    sy4 = np.zeros((TONE_BINS, 128), np.int64)
    sx4 = np.zeros((TONE_BINS, 128), np.int64)
    seen = np.zeros(TONE_BINS, np.int32)  # per bin of x, every pixel (used or not)
    for i in range(0, s, step):
        xr, yr, ur = x[i], y[i], use[i]
        for j in range(0, s, step):
            xv = np.int64(xr[j])
            k = xv >> 4
            seen[k] += 1
            if use_mask and not ur[j]:
                continue
            yv = np.int64(yr[j])
            d = (yv - xv + 256) >> 2
            cnt4[k, d] += 1
            sy4[k, d] += yv
            sx4[k, d] += xv
    cnt2 = np.zeros(TONE_BINS, np.int64)
    sy2 = np.zeros(TONE_BINS, np.int64)
    sx2 = np.zeros(TONE_BINS, np.int64)
    for k in range(TONE_BINS):
        best, most = 0, -1
        for c in range(64):
            v = cnt4[k, 2 * c] + cnt4[k, 2 * c + 1]
            if v > most:
                best, most = c, v
        for d in range(max(2 * best - 5, 0), min(2 * best + 7, 128)):
            cnt2[k] += cnt4[k, d]
            sy2[k] += sy4[k, d]
            sx2[k] += sx4[k, d]
    kx = np.empty(TONE_BINS + 2, np.float64)
    ky = np.empty(TONE_BINS + 2, np.float64)
    n = 0
    run = -np.inf
    first = 0.0
    for k in range(TONE_BINS):
        if cnt2[k] >= TONE_MIN_COUNT:
            c = sy2[k] / cnt2[k]
            run = max(run, c)
            if n == 0:
                first = run
                kx[0], ky[0] = -1.0, first
                n = 1
            kx[n], ky[n] = sx2[k] / cnt2[k], run
            n += 1
    table = np.empty(256, np.int16)
    if n == 0:
        for v in range(256):
            table[v] = v
        return table, 1.0, 1.0, 1.0
    kx[n], ky[n] = 256.0, run
    n += 1
    seg = 0
    for v in range(256):
        while seg < n - 2 and kx[seg + 1] <= v:
            seg += 1
        x0, x1 = kx[seg], kx[seg + 1]
        t = ky[seg] if x1 <= x0 else ky[seg] + (ky[seg + 1] - ky[seg]) * (v - x0) / (x1 - x0)
        t = np.rint(t)
        table[v] = 0 if t < 0 else (255 if t > 255 else np.int16(t))
    # The contrast kept between the two largest areas of distinct grey (bins SLOPE_SPAN apart):
    # a brightened copy that clips (pale bars at 225 on white become 245) keeps a third of it.
    # And the contrast it keeps across x's whole range (its lowest and highest bins of at least
    # TONE_MIN_COUNT pixels, read or not): near 0, the curve flattens the content (COLLAPSE).
    low, high = -1, -1
    for k in range(TONE_BINS):
        if seen[k] >= TONE_MIN_COUNT:
            high = k
            if low < 0:
                low = k
    kept = 1.0
    if high - low >= 2:
        xl, xh = 16 * low + 8, 16 * high + 8
        kept = (np.float64(table[xh]) - np.float64(table[xl])) / (xh - xl)
    first_bin, second_bin = -1, -1
    for k in range(TONE_BINS):
        if cnt2[k] >= TONE_MIN_COUNT and (first_bin < 0 or cnt2[k] > cnt2[first_bin]):
            first_bin = k
    if first_bin < 0:
        return table, 1.0, kept, 1.0
    fx = sx2[first_bin] / cnt2[first_bin]
    for k in range(TONE_BINS):
        if (cnt2[k] >= TONE_MIN_COUNT and abs(sx2[k] / cnt2[k] - fx) >= SLOPE_SPAN
                and (second_bin < 0 or cnt2[k] > cnt2[second_bin])):
            second_bin = k
    if second_bin < 0:
        return table, 1.0, kept, 1.0
    dx = sx2[second_bin] / cnt2[second_bin] - fx
    y1, y2 = sy2[first_bin] / cnt2[first_bin], sy2[second_bin] / cnt2[second_bin]
    dy = y2 - y1
    # the same slope, unless one of the two areas ends within STRETCH_CLIP of black or white (a
    # clipped end says nothing of how much the rest was stretched)
    clipped = min(y1, y2) <= STRETCH_CLIP or max(y1, y2) >= 255 - STRETCH_CLIP
    return table, dy / dx, kept, 1.0 if clipped else dy / dx


STRETCH_MAX = 3.0  # a curve that stretches the contrast between the two largest areas more than this (or cuts it to
STRETCH_CLIP = 8.0  # less than its inverse), neither ending within this of black or white, is no copy's edit
SLOPE_SPAN = 24.0  # grey levels: the contrast is read between two areas at least this far apart in x
SLOPE_MIN = 0.5  # a curve that flattens the contrast is read at a tolerance shrunk with it, down to this share


@njit(**_JIT)
def _residual_map(x, xlo, xhi, y, ylo, yhi, curve, tol, full, out):
    """out[i, j]: y's pixel outside x's envelope mapped through `table` and x's mapped pixel outside
    y's envelope, the smaller of the two, beyond tol. Returns how many pixels differ."""
    s = x.shape[0]
    table, slope, kept, stretch = curve
    # a curve that keeps less than `full` of the contrast (tone_table's slope) shrinks every
    # difference with it, and the tolerance with it; residuals are whole levels, the tolerance
    # is rounded to one (> 12 for 12; a curve keeping 97 % of the contrast is noise, not a change)
    factor = 1.0 if full <= 0.0 else min(1.0, max(SLOPE_MIN, slope / full))
    t = int(np.floor(np.floor(tol) * factor + 0.5))
    count = 0
    for i in range(s):
        xr, xl, xh, yr, yl, yh, o = x[i], xlo[i], xhi[i], y[i], ylo[i], yhi[i], out[i]
        for j in range(s):
            yi = np.int32(yr[j])
            tx = np.int32(table[xr[j]])
            r1 = max(yi - np.int32(table[xh[j]]), np.int32(table[xl[j]]) - yi)
            r2 = max(tx - np.int32(yh[j]), np.int32(yl[j]) - tx)
            d = min(r1, r2) > t
            o[j] = d
            count += np.int32(d)
    # A curve that flattens the content (between its two largest bins, or across x's range), or
    # stretches or cuts the contrast between two plain areas beyond STRETCH_MAX (two tones map onto
    # any other two: a grey disc on teal onto a white disc on a blue ground), is no copy's edit
    if full > 0.0 and (min(slope, kept) < COLLAPSE or stretch > STRETCH_MAX or stretch * STRETCH_MAX < 1.0):
        count += COLLAPSED * s * s  # ranked after every reading whose curve keeps the content
    return count


COLLAPSE = 0.1  # a curve keeping less of the contrast than this flattens the content: a star field onto
COLLAPSED = 4  # a plain navy tile is no copy; such a reading counts this many frames more (ranking only)


@njit(**_JIT)
def differs(x, xlo, xhi, y, ylo, yhi, tol, full):
    """Pixels that differ beyond tol once the tone curve is applied: fitted on every pixel both
    ways (x's curve onto y, y's onto x), then again both ways on the pixels that matched in the
    better of the two; the reading with the fewest differing pixels stands (ties: the earlier),
    a reading whose curve flattens the content (COLLAPSE) never (when every one does, the two are
    not one picture: every pixel differs). Then, when one edge's strip differs much more densely
    than the rest or is one flat colour in one image only (a banner), both ways fitted without
    that strip, standing when less differs outside it. The same verdict whichever image comes
    first. Returns (map, count)."""
    s = x.shape[0]
    out = np.empty((s, s), np.bool_)
    forward_curve = tone_table(x, y, out, False)
    count = _residual_map(x, xlo, xhi, y, ylo, yhi, forward_curve, tol, full, out)
    if count == 0:
        return out, count
    other = np.empty((s, s), np.bool_)
    backward_curve = tone_table(y, x, out, False)
    c = _residual_map(y, ylo, yhi, x, xlo, xhi, backward_curve, tol, full, other)
    if c < count:
        out, count = other, c
    if count == 0:
        return out, count
    use = ~out
    for forward in (True, False):
        # a refit that lands on the curve already read gives the same map, which did not win
        curve = tone_table(x, y, use, True) if forward else tone_table(y, x, use, True)
        if _same_curve(curve, forward_curve if forward else backward_curve):
            continue
        again = np.empty((s, s), np.bool_)
        if forward:
            c = _residual_map(x, xlo, xhi, y, ylo, yhi, curve, tol, full, again)
        else:
            c = _residual_map(y, ylo, yhi, x, xlo, xhi, curve, tol, full, again)
        if c < count:
            out, count = again, c
    if count == 0:
        return out, count
    if count >= COLLAPSED * s * s:  # every curve, either way, flattens the content: not one picture
        out[:, :] = True
        return out, s * s
    # A banner over one edge (a caption bar over a sky) can pull the curves: where the bar hides
    # most of a band of x, that band maps to the bar's colour and the rest of the frame differs
    # there. Two strips are suspects: the one that differs much more densely than the rest of the
    # frame, and the one that is one flat colour in one image and not in the other.
    k = max(1, int(s * STRIP))
    heights = np.array([max(1, s // 10), max(1, (3 * s) // 20), max(1, s // 5), k])
    flats_x, flats_y = _strip_flats(x, heights), _strip_flats(y, heights)
    dense_edge, dense = -1, 0.0
    flat_edge, gap = -1, 0.0
    for edge in range(4):
        i0, i1, j0, j1 = _strip_bounds(edge, s, k)
        n = 0
        for i in range(i0, i1):
            for j in range(j0, j1):
                n += out[i, j]
        inside = n / (k * s)
        outside = (count - n) / (s * s - k * s)
        if inside >= STRIP_DENSER * outside and inside > dense:
            dense_edge, dense = edge, inside
        # a bar 10-20 % high is read on a strip of its own height (on the whole quarter it is too
        # little of the strip to call it flat); the refit leaves out the whole quarter either way
        for q in range(4):
            fx, fy = flats_x[edge, q], flats_y[edge, q]
            if max(fx, fy) >= STRIP_FLAT and abs(fx - fy) >= STRIP_FLAT_GAP and abs(fx - fy) > gap:
                flat_edge, gap = edge, abs(fx - fy)
    for best in (dense_edge, flat_edge):
        if best >= 0:
            out, count = _without_strip(x, xlo, xhi, y, ylo, yhi, tol, full, out, count, best, k)
    return out, count


@njit(**_JIT)
def _same_curve(p, q):
    """Whether two tone curves (tone_table's table, slope, kept, stretch) read every pixel alike."""
    if p[1] != q[1] or p[2] != q[2] or p[3] != q[3]:
        return False
    for v in range(256):
        if p[0][v] != q[0][v]:
            return False
    return True


@njit(**_JIT)
def _refit(x, xlo, xhi, y, ylo, yhi, mask, forward, tol, full):
    """One reading with the curve fitted on the pixels `mask` keeps: x's onto y (forward) or y's
    onto x. Returns (map, count)."""
    s = x.shape[0]
    again = np.empty((s, s), np.bool_)
    if forward:
        c = _residual_map(x, xlo, xhi, y, ylo, yhi, tone_table(x, y, mask, True), tol, full, again)
    else:
        c = _residual_map(y, ylo, yhi, x, xlo, xhi, tone_table(y, x, mask, True), tol, full, again)
    return again, c


@njit(**_JIT)
def _without_strip(x, xlo, xhi, y, ylo, yhi, tol, full, out, count, edge, k):
    """The curves fitted both ways without the k-pixel strip along `edge`: the banner differs
    either way (what pulled the curves was it matching), so a reading stands when less differs
    outside the strip than in `out`."""
    s = x.shape[0]
    keep = np.ones((s, s), np.bool_)
    i0, i1, j0, j1 = _strip_bounds(edge, s, k)
    keep[i0:i1, j0:j1] = False
    fewest = 0  # what `out` has differing outside the strip
    for i in range(s):
        for j in range(s):
            fewest += out[i, j] and keep[i, j]
    found, found_count = out, count
    for forward in (True, False):
        again, c = _refit(x, xlo, xhi, y, ylo, yhi, keep, forward, tol, full)
        if c >= COLLAPSED * s * s:
            continue  # this curve flattens the content
        rest = 0
        for i in range(s):
            for j in range(s):
                rest += again[i, j] and keep[i, j]
        if rest < fewest:
            found, fewest, found_count = again, rest, c
    return found, found_count


@njit(**_JIT)
def _strip_flats(x, heights):
    """_strip_flat for each edge (rows) and each strip height in `heights` (columns), in one pass
    per edge: the strips along an edge are nested, so one histogram grows line by line from the
    edge inwards and is read whenever it reaches one of the heights."""
    s = x.shape[0]
    out = np.zeros((4, heights.shape[0]))
    deepest = 0
    for h in heights:
        deepest = max(deepest, h)
    hist = np.zeros(256, np.int32)
    for edge in range(4):
        hist[:] = 0
        for line in range(deepest):
            for t in range(s):
                if edge == 0:
                    v = x[line, t]
                elif edge == 1:
                    v = x[s - 1 - line, t]
                elif edge == 2:
                    v = x[t, line]
                else:
                    v = x[t, s - 1 - line]
                hist[v] += 1
            for q in range(heights.shape[0]):
                if heights[q] == line + 1:
                    out[edge, q] = _most_within(hist, STRIP_FLAT_RANGE) / ((line + 1) * s)
    return out


@njit(**_JIT)
def _most_within(hist, within):
    """The most values of a 256-bin histogram within `within` of one value."""
    w = 2 * within + 1
    run = 0
    for v in range(w):
        run += hist[v]
    most = run
    for v in range(w, 256):
        run += hist[v] - hist[v - w]
        most = max(most, run)
    return most


@njit(**_JIT)
def _strip_flat(x, edge, k):
    """The largest share of the strip's pixels within STRIP_FLAT_RANGE of one value."""
    s = x.shape[0]
    i0, i1, j0, j1 = _strip_bounds(edge, s, k)
    hist = np.zeros(256, np.int32)
    for i in range(i0, i1):
        for j in range(j0, j1):
            hist[x[i, j]] += 1
    return _most_within(hist, STRIP_FLAT_RANGE) / (k * s)


STRIP = 0.25  # a banner is looked for in this share of a side at each edge of the frame ...
STRIP_DENSER = 2.0  # ... when that strip differs this many times as densely as the rest of the frame,
STRIP_FLAT = 0.6  # ... or when this share of it lies within STRIP_FLAT_RANGE of one value in one image
STRIP_FLAT_GAP = 0.3  # ... and this share less in the other
STRIP_FLAT_RANGE = 6


@njit(**_JIT)
def _strip_bounds(edge, s, k):
    """Rows i0..i1 and columns j0..j1 (end exclusive) of the k-pixel strip along edge 0..3."""
    if edge == 0:
        return 0, k, 0, s
    if edge == 1:
        return s - k, s, 0, s
    if edge == 2:
        return 0, s, 0, k
    return 0, s, s - k, s


@njit(**_JIT)
def _border_median(x):
    """The median grey of the frame's border pixels (np.median's value)."""
    s = x.shape[0]
    counts = np.zeros(256, np.int32)
    for j in range(s):
        counts[x[0, j]] += 1
        counts[x[s - 1, j]] += 1
    for i in range(1, s - 1):
        counts[x[i, 0]] += 1
        counts[x[i, s - 1]] += 1
    m = (4 * s - 4) // 2  # the median of an even count: the mean of the m-th and (m+1)-th values
    seen, first, second = 0, -1, -1
    for v in range(256):
        seen += counts[v]
        if first < 0 and seen >= m:
            first = v
        if seen >= m + 1:
            second = v
            break
    return (first + second) / 2.0


@njit(**_JIT)
def background(x, lo, hi):
    """Pixels of the frame's background: the border's median grey and locally flat (lo, hi: the
    half-pixel envelope); none when it is under BG_MIN of the frame (a photo is all content)."""
    s = x.shape[0]
    bg = np.int32(_border_median(x))
    out = np.empty((s, s), np.bool_)
    n = 0
    for i in range(s):
        xr, lr, hr, o = x[i], lo[i], hi[i], out[i]
        for j in range(s):
            b = (abs(np.int32(xr[j]) - bg) <= BG_TOL) & (np.int32(hr[j]) - np.int32(lr[j]) <= BG_TOL)
            o[j] = b
            n += b
    if n < BG_MIN * s * s:
        out[:, :] = False
    return out


@njit(**_JIT)
def _coloured(cb, cr):
    mb, mr = 0, 0
    for i in range(cb.shape[0]):
        for j in range(cb.shape[1]):
            mb = max(mb, abs(np.int32(cb[i, j]) - 128))
            mr = max(mr, abs(np.int32(cr[i, j]) - 128))
    return mb > GREY_CHROMA, mr > GREY_CHROMA


@njit(**_JIT)
def _largest_group(cells):
    """The largest group of cells (8-connected after joining cells one empty cell apart), as a mask."""
    c = cells.shape[0]
    grown = np.zeros((c, c), np.bool_)
    for i in range(c):
        for j in range(c):
            if cells[i, j]:
                for di in range(-1, 2):
                    for dj in range(-1, 2):
                        p, q = i + di, j + dj
                        if 0 <= p < c and 0 <= q < c:
                            grown[p, q] = True
    label = np.zeros((c, c), np.int32)
    stack = np.empty(c * c, np.int64)
    best, best_n, nl = 0, -1, 0
    for i in range(c):
        for j in range(c):
            if not grown[i, j] or label[i, j]:
                continue
            nl += 1
            label[i, j] = nl
            top, size = 0, 0
            stack[0] = i * c + j
            top = 1
            while top:
                top -= 1
                p, q = stack[top] // c, stack[top] % c
                size += cells[p, q]
                for di in range(-1, 2):
                    for dj in range(-1, 2):
                        u, v = p + di, q + dj
                        if 0 <= u < c and 0 <= v < c and grown[u, v] and label[u, v] == 0:
                            label[u, v] = nl
                            stack[top] = u * c + v
                            top += 1
            if size > best_n:
                best, best_n = nl, size
    out = np.zeros((c, c), np.bool_)
    for i in range(c):
        for j in range(c):
            out[i, j] = cells[i, j] and label[i, j] == best
    return out


FLAT_RANGE = 32  # grey levels: a pixel whose four neighbours stay within this of each other lies in a flat area
INTERIOR_MIN = 1.0 / 4096  # a region whose interior is under this share of the frame (4 px at 128) is strokes, not a block


@njit(**_JIT)
def _all_within(mask, i, j, r):
    """Every pixel within r (rows and columns) of (i, j) is set (pixels past the frame count as set)."""
    s = mask.shape[0]
    for p in range(max(i - r, 0), min(i + r + 1, s)):
        for q in range(max(j - r, 0), min(j + r + 1, s)):
            if not mask[p, q]:
                return False
    return True


@njit(**_JIT)
def _flat_inside(xa, xb, diff, y0, y1, x0, x1):
    """Is the differing region a block recoloured, or something put over the picture?
    Returns (flat, edges): of the region's interior (differing pixels with every pixel within 2
    differing too, clear of the anti-aliased edges, in its box y0..y1, x0..x1), the share that is flat in both images: a block of one colour in
    one image and another colour in the other (a bar grown, a slice turned), 0 when that interior
    is under INTERIOR_MIN of the frame; and, of the box 2 px in from its border (where the edges of
    whatever differs lie), the pixels not flat in both images, as a share of the frame: a caption's
    letters, a box's text, a logo (letters that blend with what is under them leave holes in the
    differing pixels, so they are read on the box)."""
    s = xa.shape[0]
    inner = flat = around = structured = 0
    for i in range(max(y0, 1), min(y1, s - 1)):
        for j in range(max(x0, 1), min(x1, s - 1)):
            both = True
            for x in (xa, xb):
                v = (x[i, j], x[i - 1, j], x[i + 1, j], x[i, j - 1], x[i, j + 1])
                if np.int32(max(v)) - np.int32(min(v)) > FLAT_RANGE:
                    both = False
            if y0 + 2 <= i < y1 - 2 and x0 + 2 <= j < x1 - 2:
                around += 1
                structured += not both
            if diff[i, j] and _all_within(diff, i, j, 2):
                inner += 1
                flat += both
    return (flat / inner if inner >= INTERIOR_MIN * s * s else 0.0), structured / (s * s)


SEAM_STEP = 32  # grey levels between the two flat sides of a step
SEAM_FLAT = 12  # grey levels two pixels in a row may differ and still be one flat side
SEAM_MIN_SIDE = 3  # pixels a side needs to be read


@njit(**_JIT)
def _step_at(x, y, k, inner, outer, d, vertical):
    """Does x step across a side at position k where y does not: two flat pixels inside (inner,
    inner + d) and two outside (outer, outer - d), the two pairs SEAM_STEP apart, and y's inside
    SEAM_STEP from x's (an edge both images show, a bar's side beside a caption, is no break)?"""
    if vertical:
        i0, i1, o0, o1, j0 = x[k, inner], x[k, inner + d], x[k, outer], x[k, outer - d], y[k, inner]
    else:
        i0, i1, o0, o1, j0 = x[inner, k], x[inner + d, k], x[outer, k], x[outer - d, k], y[inner, k]
    i0, i1, o0, o1, j0 = np.int32(i0), np.int32(i1), np.int32(o0), np.int32(o1), np.int32(j0)
    return (abs(i0 - i1) <= SEAM_FLAT and abs(o0 - o1) <= SEAM_FLAT and abs(i0 - o0) > SEAM_STEP
            and abs(i0 - j0) > SEAM_STEP)


@njit(**_JIT)
def _seam_side(x, y, lo, hi, inner, outer, d, vertical):
    """The share of a side's positions (lo..hi along it) where x breaks across it (_step_at)."""
    n = 0
    for k in range(lo, hi):
        n += _step_at(x, y, k, inner, outer, d, vertical)
    return n / max(hi - lo, 1)


@njit(**_JIT)
def _seam(x, y, ty0, ty1, tx0, tx1):
    """How the picture x meets a differing region's tight box (ty0..ty1, tx0..tx1), y being the
    other image: of the box's sides clear of the frame's edge, the largest share of a side along
    which x steps between two flat areas (2-3 px inside against 2-3 px outside, clear of an outline
    drawn along it) where y shows something else inside. Something put over a figure leaves the
    figure under it whole: the box's sides fall where they fall, and the image without it breaks
    along them only by chance. A bar grown, a slice turned ends on the box in both images: the
    taller bar's sides run down the box's sides, the shorter bar's top along its bottom."""
    s = x.shape[0]
    worst = 0.0
    if tx1 - tx0 >= SEAM_MIN_SIDE and ty1 - ty0 >= 5:
        if ty0 >= 3:
            worst = max(worst, _seam_side(x, y, tx0, tx1, ty0 + 2, ty0 - 2, 1, False))
        if ty1 + 2 < s:
            worst = max(worst, _seam_side(x, y, tx0, tx1, ty1 - 3, ty1 + 1, -1, False))
    if ty1 - ty0 >= SEAM_MIN_SIDE and tx1 - tx0 >= 5:
        if tx0 >= 3:
            worst = max(worst, _seam_side(x, y, ty0, ty1, tx0 + 2, tx0 - 2, 1, True))
        if tx1 + 2 < s:
            worst = max(worst, _seam_side(x, y, ty0, ty1, tx1 - 3, tx1 + 1, -1, True))
    return worst


@njit(**_JIT)
def judge_pair(la, lb, cba, cbb, cra, crb, al, side, luma_tol, chroma_tol, cell_min_64, region_max, hidden_max,
               stray_max, hidden_small, fill_min, quarters, flat_max, edges_min, full, band_max, banner, photo_fill,
               seam_max, quiet_max, res_f, res_box):
    """One pair's residual map and what it says (verify.py's module docstring, steps 2 and 3). la, lb: 128 px luma;
    cb*, cr*: 32 px chroma; al: the alignment; side 64 or 128. Writes res_f = (accepted, region,
    score, differing, box_share, hidden, fill, stray, flat, edges, seam, refused by the flat test
    alone) and res_box = cell box (y0, y1, x0, x1)."""
    while la.shape[0] > side:
        la, lb = reduce2(la), reduce2(lb)
    xa = warp(la, al[0], al[1], al[2], al[3])
    xb = warp(lb, al[4], al[5], al[6], al[7])
    if not (al[0] == 0.0 and al[1] == 1.0 and al[2] == 0.0 and al[3] == 1.0 and al[4] == 0.0 and al[5] == 1.0
            and al[6] == 0.0 and al[7] == 1.0):
        quarters = max(quarters, 2)  # a resampled thumbnail is smoother than one made at its size: half a pixel
    alo, ahi = envelope(xa, quarters)
    blo, bhi = envelope(xb, quarters)
    diff, _ = differs(xa, alo, ahi, xb, blo, bhi, luma_tol, full)
    if quarters == 2:
        bga, bgb = background(xa, alo, ahi), background(xb, blo, bhi)
    else:
        bga, bgb = background(xa, *envelope(xa, 2)), background(xb, *envelope(xb, 2))
    drawn_a, drawn_b = _drawn(xa), _drawn(xb)
    _decide(xa, xb, diff, bga, bgb, side, cell_min_64, region_max, hidden_max, stray_max, hidden_small, fill_min,
            flat_max, edges_min, band_max, banner, photo_fill, seam_max, quiet_max, drawn_a, drawn_b, res_f, res_box)
    ba, ca = _coloured(cba, cra)
    bb, cb = _coloured(cbb, crb)
    # Colour only adds differing pixels: a pair whose luma already differs over too large a region,
    # too much of the content or in too many stray places stays refused without it (the colour
    # planes cost as much again); otherwise the decision is taken again on both.
    if not ((ba and bb) or (ca and cb)):
        return
    if res_f[0] == 0 and (res_f[4] > region_max or res_f[5] > hidden_max or res_f[7] > stray_max):
        return
    cs = cba.shape[0]
    up = side // cs
    added = False
    wa = (warp(cba, al[0], al[1], al[2], al[3]), warp(cra, al[0], al[1], al[2], al[3]))
    wb = (warp(cbb, al[4], al[5], al[6], al[7]), warp(crb, al[4], al[5], al[6], al[7]))
    curve = _saturation_table(wa[0], wa[1], wb[0], wb[1], diff, up)
    clip_a = clip_b = np.zeros((0, 0), np.bool_)  # read once, when a plane first differs
    cd = np.empty((cs, cs), np.bool_)
    for k in range(2):
        ya, yb = wa[k], wb[k]
        yalo, yahi = envelope(ya, quarters)
        yblo, ybhi = envelope(yb, quarters)
        n = _residual_map(ya, yalo, yahi, yb, yblo, ybhi, curve, chroma_tol, 0.0, cd)  # the luma reads the contrast
        if n:
            if clip_a.shape[0] == 0:
                clip_a, clip_b = _clipped(xa, wa[0], wa[1], up), _clipped(xb, wb[0], wb[1], up)
            _unclip(cd, ya, yb, curve[0], clip_a, clip_b)
            for i in range(side):
                for j in range(side):
                    if cd[i // up, j // up] and not diff[i, j]:
                        diff[i, j] = True
                        added = True
    if added:
        _decide(xa, xb, diff, bga, bgb, side, cell_min_64, region_max, hidden_max, stray_max, hidden_small, fill_min,
                flat_max, edges_min, band_max, banner, photo_fill, seam_max, quiet_max, drawn_a, drawn_b, res_f, res_box)


CLIP = 6  # levels from 0 or 255: an RGB channel there may have been clipped (its chroma pulled towards grey)


@njit(**_JIT)
def _clipped(x, cb, cr, up):
    """Per chroma pixel: does one RGB channel of it (its luma the mean of x's up x up pixels) lie
    within CLIP of 0 or 255? A brightened copy clips a bright sky's blue there, which pulls its
    chroma towards grey more than the one factor of _saturation_table says."""
    cs = cb.shape[0]
    out = np.zeros((cs, cs), np.bool_)
    for i in range(cs):
        for j in range(cs):
            t = 0.0
            for y in range(i * up, (i + 1) * up):
                for k in range(j * up, (j + 1) * up):
                    t += x[y, k]
            lum = t / (up * up)
            u, v = np.float64(cb[i, j]) - 128.0, np.float64(cr[i, j]) - 128.0
            for c in (lum + 1.402 * v, lum - 0.344136 * u - 0.714136 * v, lum + 1.772 * u):
                if c <= CLIP or c >= 255 - CLIP:
                    out[i, j] = True
    return out


@njit(**_JIT)
def _unclip(cd, ya, yb, table, clip_a, clip_b):
    """Leave out of a chroma plane's map `cd` the pixels where the image that shows less colour
    than `table` says (a's value mapped, against b's) has a clipped channel there: clipping pulls
    colour towards grey, never away from it."""
    for i in range(cd.shape[0]):
        for j in range(cd.shape[1]):
            if cd[i, j]:
                pa = abs(np.float64(table[ya[i, j]]) - 128.0)
                pb = abs(np.float64(yb[i, j]) - 128.0)
                if (pb < pa and clip_b[i, j]) or (pa < pb and clip_a[i, j]):
                    cd[i, j] = False


SATURATION = (0.5, 2.0)  # a copy's colour is the original's scaled about grey by one factor within these


@njit(**_JIT)
def _saturation_table(cba, cra, cbb, crb, diff, up):
    """The chroma curve of a copy: a's Cb and Cr scaled about grey (128) by one factor (a saturation,
    a contrast or a brightness change scales both alike), the ratio of b's to a's chroma spread over
    the pixels whose luma does not differ (`diff` at `up` luma pixels per chroma pixel), kept within
    SATURATION; as tone_table's (table, slope, kept, stretch). One factor for both planes: two curves of
    their own would map any two colours onto any other two (a blue disc on teal onto a white disc
    on blue), and a recolouring is no copy."""
    cs = cba.shape[0]
    sa, sb = 0.0, 0.0
    for i in range(cs):
        for j in range(cs):
            same = True
            for y in range(i * up, (i + 1) * up):
                for x in range(j * up, (j + 1) * up):
                    if diff[y, x]:
                        same = False
            if same:
                for u, v in ((cba[i, j], cbb[i, j]), (cra[i, j], crb[i, j])):
                    du, dv = np.float64(u) - 128.0, np.float64(v) - 128.0
                    sa += du * du
                    sb += dv * dv
    f = 1.0 if sa <= 0.0 or sb <= 0.0 else min(SATURATION[1], max(SATURATION[0], np.sqrt(sb / sa)))
    table = np.empty(256, np.int16)
    for v in range(256):
        t = np.rint(128.0 + f * (v - 128.0))
        table[v] = 0 if t < 0 else (255 if t > 255 else np.int16(t))
    return table, 1.0, 1.0, 1.0


@njit(**_JIT)
def _decide(xa, xb, diff, bga, bgb, side, cell_min_64, region_max, hidden_max, stray_max, hidden_small, fill_min,
            flat_max, edges_min, band_max, banner, photo_fill, seam_max, quiet_max, drawn_a, drawn_b, res_f, res_box):
    """The verdict on a residual map (verify.py's module docstring, step 3) into res_f and res_box;
    drawn_a, drawn_b: whether each image has a drawn background (_drawn), read once per pair."""
    cpx = side // CELLS
    cell_min = max(1, -(-cell_min_64 * cpx * cpx // 64))
    counts = np.zeros((CELLS, CELLS), np.int32)
    nbg_a = np.zeros((CELLS, CELLS), np.int32)
    nbg_b = np.zeros((CELLS, CELLS), np.int32)
    content_px, same_px, diff_px = 0, 0, 0
    for i in range(side):
        ci = i // cpx
        for cj in range(CELLS):
            c, na, nb, cp, sp = 0, 0, 0, 0, 0
            for j in range(cj * cpx, cj * cpx + cpx):
                d, ga, gb = diff[i, j], bga[i, j], bgb[i, j]
                c += np.int32(d)
                na += np.int32(not ga)
                nb += np.int32(not gb)
                con = not (ga and gb)
                cp += np.int32(con)
                sp += np.int32(con and not d)
            counts[ci, cj] += c
            nbg_a[ci, cj] += na
            nbg_b[ci, cj] += nb
            diff_px += c
            content_px += cp
            same_px += sp
    cells = counts >= cell_min
    any_cell = cells.any()
    res_box[:] = 0
    box_share = hidden = fill = stray = flat = edges = seam = 0.0
    if any_cell:
        main = _largest_group(cells)
        y0, y1, x0, x1 = CELLS, 0, CELLS, 0
        for i in range(CELLS):
            for j in range(CELLS):
                if main[i, j]:
                    y0, y1, x0, x1 = min(y0, i), max(y1, i + 1), min(x0, j), max(x1, j + 1)
        res_box[0], res_box[1], res_box[2], res_box[3] = y0, y1, x0, x1
        box_share = (y1 - y0) * (x1 - x0) / (CELLS * CELLS)
        ina, inb, outside = 0, 0, 0
        for i in range(CELLS):
            for j in range(CELLS):
                inside = y0 <= i < y1 and x0 <= j < x1
                if inside:
                    ina += nbg_a[i, j]
                    inb += nbg_b[i, j]
                elif cells[i, j]:
                    outside += counts[i, j]
        hidden = min(ina / max(nbg_a.sum(), 1), inb / max(nbg_b.sum(), 1))
        stray = outside / (side * side)
        # the region's tight pixel box: differing pixels inside its cells
        ty0, ty1, tx0, tx1 = side, 0, side, 0
        for i in range(y0 * cpx, y1 * cpx):
            for j in range(x0 * cpx, x1 * cpx):
                if diff[i, j]:
                    ty0, ty1, tx0, tx1 = min(ty0, i), max(ty1, i + 1), min(tx0, j), max(tx1, j + 1)
        sa = da = sb = db = 0
        for i in range(ty0, ty1):
            for j in range(tx0, tx1):
                if not bga[i, j]:
                    sa += 1
                    da += diff[i, j]
                if not bgb[i, j]:
                    sb += 1
                    db += diff[i, j]
        fill = max(da / max(sa, 1), db / max(sb, 1))
        flat, edges = _flat_inside(xa, xb, diff, ty0, ty1, tx0, tx1)
        seam = min(_seam(xa, xb, ty0, ty1, tx0, tx1), _seam(xb, xa, ty0, ty1, tx0, tx1))
    # a line of text laid over the picture (a watermark) differs over little of its box: a band at
    # most band_max of the side high and at least twice as wide needs no fill
    band = any_cell and ty1 - ty0 <= band_max * side and tx1 - tx0 >= 2 * (ty1 - ty0)
    # a photo (no plain background in either image: all of it is content; and no screenshot, whose
    # window is one grey, kernels._drawn) needs no fill when `photo_fill` is off: thin letters over
    # a band of a picture differ over little of it
    photo = content_px == side * side and not (drawn_a or drawn_b)
    # a pair where at most quiet_max of the frame differs in all needs no fill either: a region that
    # hides much of the content but differs over so little of it is what resampling or a crop leaves
    # around fine detail (a photo with a plain sky), not a slice turned or a bar grown
    covers = (hidden <= hidden_small or fill >= fill_min or band or (photo and not photo_fill)
              or diff_px <= quiet_max * side * side)
    # a banner (the region spans the frame's width at its top or bottom, or its height at a side)
    # is put over the picture, never a bar grown or a slice turned: when `banner`, it may be flat
    y0, y1, x0, x1 = res_box[0], res_box[1], res_box[2], res_box[3]
    across = (x0 == 0 and x1 == CELLS and (y0 == 0 or y1 == CELLS)) or (y0 == 0 and y1 == CELLS and (x0 == 0 or x1 == CELLS))
    # something put over a figure leaves the figure under it whole across the region's sides (a
    # picture's own texture breaks anywhere: the test is for two drawn figures; a banner is put over
    # the figure, never grown, wherever the figure's own lines meet its side)
    whole = seam <= seam_max or not (drawn_a and drawn_b) or (banner and across)
    others = any_cell and box_share <= region_max and hidden <= hidden_max and stray <= stray_max and covers and whole
    not_flat = flat <= flat_max or edges >= edges_min or (banner and across)
    overlay = others and not_flat
    res_f[0] = (not any_cell) or overlay
    res_f[1] = overlay
    res_f[11] = others and not not_flat  # refused by the flat test alone (verify.flat_looks reads it at 256 px)
    res_f[2] = min(1.0, max(0.0, 1.0 - (content_px - same_px) / max(content_px, 1)))
    res_f[3] = diff_px / (side * side)
    res_f[4], res_f[5], res_f[6], res_f[7], res_f[8], res_f[9] = box_share, hidden, fill, stray, flat, edges
    res_f[10] = seam


@njit(**_JIT)
def judge_pairs(la, lb, cba, cbb, cra, crb, aligns, side, params, res_f, res_box):
    """judge_pair for every pair of a batch (arrays with the pair on axis 0); params is
    (luma_tol, chroma_tol, cell_min, region_max, hidden_max, stray_max, hidden_small, fill_min, shift,
    flat_max, edges_min, contrast_full, band_max, banner, photo_fill, seam_max, quiet_max) with shift in pixels
    (quarters of one)."""
    if params.shape[0] != 17 or res_f.shape[1] != 12 or res_box.shape[1] != 4 or res_f.shape[0] < la.shape[0]:
        raise ValueError("judge_pairs: params (17), res_f (pairs, 12) and res_box (pairs, 4) are required")
    quarters = max(1, int(round(params[8] * 4)))
    for k in range(la.shape[0]):
        judge_pair(la[k], lb[k], cba[k], cbb[k], cra[k], crb[k], aligns[k], side, params[0], params[1],
                   int(params[2]), params[3], params[4], params[5], params[6], params[7], quarters, params[9],
                   params[10], params[11], params[12], params[13] > 0, params[14] > 0, params[15], params[16], res_f[k],
                   res_box[k])


# ---- alignment: where does b's frame lie in a's? ------------------------------------------------

ALIGN_MAX_CROP = 0.15  # an alignment that leaves out more than this of a side of either image is given up
HUBER = 8.0  # grey levels: residuals beyond this weigh less (an overlay does not pull the fit)


@njit(**_JIT)
def blur121(x, out):
    """One [1, 2, 1] / 4 pass along both axes of a float32 (s, s) image (the edges repeat) into out."""
    s = x.shape[0]
    t = np.empty((s, s), np.float32)
    for i in range(s):
        up, down = max(i - 1, 0), min(i + 1, s - 1)
        for j in range(s):
            t[i, j] = 0.25 * x[up, j] + 0.5 * x[i, j] + 0.25 * x[down, j]
    for i in range(s):
        for j in range(s):
            out[i, j] = 0.25 * t[i, max(j - 1, 0)] + 0.5 * t[i, j] + 0.25 * t[i, min(j + 1, s - 1)]


@njit(**_JIT)
def _smooth_half(x):
    """(s, s) -> (s/2, s/2) float32: 2x2 means after a [1, 2, 1] / 4 blur along both axes."""
    s = x.shape[0]
    u = np.empty((s, s), np.float32)
    blur121(x, u)
    h = s // 2
    out = np.empty((h, h), np.float32)
    for i in range(h):
        for j in range(h):
            out[i, j] = 0.25 * (u[2 * i, 2 * j] + u[2 * i, 2 * j + 1] + u[2 * i + 1, 2 * j] + u[2 * i + 1, 2 * j + 1])
    return out


@njit(**_JIT)
def _gradients(x):
    s = x.shape[0]
    gx = np.empty((s, s), np.float32)
    gy = np.empty((s, s), np.float32)
    for i in range(s):
        for j in range(s):
            gx[i, j] = 0.5 * (x[i, min(j + 1, s - 1)] - x[i, max(j - 1, 0)])
            gy[i, j] = 0.5 * (x[min(i + 1, s - 1), j] - x[max(i - 1, 0), j])
    return gx, gy


@njit(**_JIT)
def _solve(h, r):
    """h x = r for a small symmetric positive system (Gaussian elimination with pivoting)."""
    n = r.shape[0]
    m = h.copy()
    v = r.copy()
    for c in range(n):
        p = c
        for k in range(c + 1, n):
            if abs(m[k, c]) > abs(m[p, c]):
                p = k
        if abs(m[p, c]) < 1e-12:
            return np.zeros(n), False
        if p != c:
            for k in range(n):
                m[c, k], m[p, k] = m[p, k], m[c, k]
            v[c], v[p] = v[p], v[c]
        for k in range(c + 1, n):
            f = m[k, c] / m[c, c]
            for q in range(c, n):
                m[k, q] -= f * m[c, q]
            v[k] -= f * v[c]
    x = np.zeros(n)
    for c in range(n - 1, -1, -1):
        t = v[c]
        for q in range(c + 1, n):
            t -= m[c, q] * x[q]
        x[c] = t / m[c, c]
    return x, True


@njit(**_JIT)
def _step(h, r, p, geo):
    """One Gauss-Newton step: h (upper triangle filled) made symmetric with a little damping
    (Levenberg), solved for r, added to p. Returns (held, the largest move of p's first `geo`
    entries); it does not hold when the system is singular, the gain (p[geo]) falls to about 0 or
    the spans move more than twice ALIGN_MAX_CROP from the whole axis."""
    m = r.shape[0]
    for k in range(m):
        h[k, k] = h[k, k] * (1.0 + 1e-3) + 1e-9
        for q in range(k):
            h[k, q] = h[q, k]
    d, ok = _solve(h, r)
    if not ok:
        return False, 0.0
    moved = 0.0
    for k in range(m):
        p[k] += d[k]
        if k < geo:
            moved = max(moved, abs(d[k]))
    for k in range(0, geo, 2):
        if abs(p[k]) > 2 * ALIGN_MAX_CROP or abs(1 - p[k + 1]) > 2 * ALIGN_MAX_CROP:
            return False, moved
    return p[geo] > 0.05, moved


@njit(**_JIT)
def _fit(a, b, p, iterations):
    """Gauss-Newton on one level: p = (x0, x1, y0, y1, gain, offset) such that b's pixel at (u, v)
    (fractions) shows a's at (x0 + u (x1 - x0), y0 + v (y1 - y0)) times gain plus offset;
    residuals beyond HUBER weigh less. Returns whether the fit held."""
    n = a.shape[0]
    gx, gy = _gradients(a)
    h = np.empty((6, 6))
    r = np.empty(6)
    si_ = np.empty(n, np.int64)
    fs_ = np.empty(n)
    us = np.empty(n)
    for j in range(n):
        us[j] = (j + 0.5) / n
    for _ in range(iterations):
        x0, x1, y0, y1, g, o = p[0], p[1], p[2], p[3], p[4], p[5]
        # where each column of b falls in a (the same for every row)
        j0, j1 = n, 0
        for j in range(n):
            t = (x0 + us[j] * (x1 - x0)) * n - 0.5
            if 0.0 <= t <= n - 1.0:
                k = min(int(t), n - 2)
                si_[j], fs_[j] = k, t - k
                j0, j1 = min(j0, j), max(j1, j + 1)
        h00 = h01 = h02 = h03 = h04 = h05 = h11 = h12 = h13 = h14 = h15 = 0.0
        h22 = h23 = h24 = h25 = h33 = h34 = h35 = h44 = h45 = h55 = 0.0
        r0 = r1 = r2 = r3 = r4 = r5 = 0.0
        used = 0
        for i in range(n):
            v = us[i]
            q = (y0 + v * (y1 - y0)) * n - 0.5
            if q < 0.0 or q > n - 1.0:
                continue
            qi = min(int(q), n - 2)
            fq = q - qi
            ar0, ar1, xr0, xr1, yr0, yr1, br = a[qi], a[qi + 1], gx[qi], gx[qi + 1], gy[qi], gy[qi + 1], b[i]
            cy0 = g * n * (1 - v)
            cy1 = g * n * v
            for j in range(j0, j1):
                k, fs = si_[j], fs_[j]
                u = us[j]
                c0 = (1 - fq) * (1 - fs)
                c1 = (1 - fq) * fs
                c2 = fq * (1 - fs)
                c3 = fq * fs
                av = c0 * ar0[k] + c1 * ar0[k + 1] + c2 * ar1[k] + c3 * ar1[k + 1]
                ax = c0 * xr0[k] + c1 * xr0[k + 1] + c2 * xr1[k] + c3 * xr1[k + 1]
                ay = c0 * yr0[k] + c1 * yr0[k + 1] + c2 * yr1[k] + c3 * yr1[k + 1]
                res = g * av + o - br[j]
                ares = abs(res)
                wt = 1.0 if ares <= HUBER else HUBER / ares
                e0 = g * ax * n * (1 - u)
                e1 = g * ax * n * u
                e2 = ay * cy0
                e3 = ay * cy1
                e4 = av
                w0, w1, w2, w3, w4 = wt * e0, wt * e1, wt * e2, wt * e3, wt * e4
                h00 += w0 * e0
                h01 += w0 * e1
                h02 += w0 * e2
                h03 += w0 * e3
                h04 += w0 * e4
                h05 += w0
                h11 += w1 * e1
                h12 += w1 * e2
                h13 += w1 * e3
                h14 += w1 * e4
                h15 += w1
                h22 += w2 * e2
                h23 += w2 * e3
                h24 += w2 * e4
                h25 += w2
                h33 += w3 * e3
                h34 += w3 * e4
                h35 += w3
                h44 += w4 * e4
                h45 += w4
                h55 += wt
                r0 -= w0 * res
                r1 -= w1 * res
                r2 -= w2 * res
                r3 -= w3 * res
                r4 -= w4 * res
                r5 -= wt * res
                used += 1
        if used < n * n // 2:
            return False
        h[0, 0], h[0, 1], h[0, 2], h[0, 3], h[0, 4], h[0, 5] = h00, h01, h02, h03, h04, h05
        h[1, 1], h[1, 2], h[1, 3], h[1, 4], h[1, 5] = h11, h12, h13, h14, h15
        h[2, 2], h[2, 3], h[2, 4], h[2, 5] = h22, h23, h24, h25
        h[3, 3], h[3, 4], h[3, 5] = h33, h34, h35
        h[4, 4], h[4, 5], h[5, 5] = h44, h45, h55
        r[0], r[1], r[2], r[3], r[4], r[5] = r0, r1, r2, r3, r4, r5
        ok, moved = _step(h, r, p, 4)
        if not ok:
            return False
        if moved * n < 0.02:
            break
    return True


@njit(**_JIT)
def _span(lo, hi, out, k):
    """b's axis [0, 1] shows a's lo..hi: the overlap as (a's span, b's span) into out[k], out[k + 4]."""
    s = hi - lo
    b0 = max(0.0, -lo / s)
    b1 = min(1.0, (1.0 - lo) / s)
    out[k], out[k + 1] = lo + s * b0, lo + s * b1
    out[k + 4], out[k + 5] = b0, b1


@njit(**_JIT)
def _blur1d(x, passes):
    """A 1-D signal after `passes` [1, 2, 1] / 4 blurs (the ends repeat)."""
    n = x.shape[0]
    y = x.copy()
    t = np.empty(n)
    for _ in range(passes):
        for i in range(n):
            t[i] = 0.25 * y[max(i - 1, 0)] + 0.5 * y[i] + 0.25 * y[min(i + 1, n - 1)]
        y[:] = t
    return y


@njit(**_JIT)
def _fit1d(a, b, p, iterations):
    """Gauss-Newton on profiles: p = (lo, hi, gain, offset) such that b's sample at u shows a's at
    lo + u (hi - lo) times gain plus offset; residuals beyond HUBER weigh less."""
    n = a.shape[0]
    h = np.empty((4, 4))
    r = np.empty(4)
    jac = np.empty(4)
    for _ in range(iterations):
        h[:, :] = 0.0
        r[:] = 0.0
        lo, hi, g, o = p[0], p[1], p[2], p[3]
        used = 0
        for j in range(n):
            u = (j + 0.5) / n
            s = (lo + u * (hi - lo)) * n - 0.5
            if s < 0.0 or s > n - 1.0:
                continue
            si = min(int(s), n - 2)
            f = s - si
            av = a[si] + f * (a[si + 1] - a[si])
            k0, k1 = max(si - 1, 0), min(si + 2, n - 1)
            grad = 0.5 * ((1 - f) * (a[si + 1] - a[k0]) + f * (a[k1] - a[si]))
            res = g * av + o - b[j]
            wt = 1.0 if abs(res) <= HUBER else HUBER / abs(res)
            jac[0] = g * grad * n * (1 - u)
            jac[1] = g * grad * n * u
            jac[2] = av
            jac[3] = 1.0
            for k in range(4):
                wk = wt * jac[k]
                r[k] -= wk * res
                for m in range(k, 4):
                    h[k, m] += wk * jac[m]
            used += 1
        if used < n // 2:
            return False
        ok, moved = _step(h, r, p, 2)
        if not ok:
            return False
        if moved * n < 0.01:
            break
    return True


@njit(**_JIT)
def _profile_fit(a, b, axis, p):
    """The span of one axis from the images' mean profiles along it, coarse (blurred) to fine."""
    n = a.shape[0]
    pa = np.zeros(n)
    pb = np.zeros(n)
    for i in range(n):
        for j in range(n):
            if axis == 0:  # along x: column means
                pa[j] += a[i, j]
                pb[j] += b[i, j]
            else:
                pa[i] += a[i, j]
                pb[i] += b[i, j]
    pa /= n
    pb /= n
    q = np.array([0.0, 1.0, 1.0, 0.0])
    for passes in (8, 2, 0):
        if not _fit1d(_blur1d(pa, passes), _blur1d(pb, passes), q, 10):
            return False
    p[0], p[1], p[4], p[5] = q[0], q[1], q[2], q[3]
    return True


@njit(**_JIT)
def align_pair(la, lb, out):
    """Where b's frame lies in a's (luma, 128 px): the span of each axis from the mean profiles
    (Gauss-Newton, coarse to fine, with a gain and offset for a grey or brightened copy and
    residuals beyond HUBER weighed down for an overlay); when that is not the whole frame, refined
    on the 64 px images. out: the alignment (8) as spans of the overlap. Returns False (out
    untouched) when the fit fails, finds the whole frame, or leaves out more than ALIGN_MAX_CROP."""
    a64, b64 = _smooth_half(la.astype(np.float32)), _smooth_half(lb.astype(np.float32))
    p = np.zeros(6)
    if not _profiles(a64, b64, p):
        return False
    return _refined(_smooth_half(a64), _smooth_half(b64), a64, b64, p, out)


@njit(**_JIT)
def _profiles(a64, b64, p):
    """align_pair's first stage: p (x0, x1, y0, y1, gain, offset) from the profiles; False when the
    fit fails or finds the whole frame (where the pair was judged already)."""
    n = a64.shape[0]
    px = np.zeros(6)
    py = np.zeros(6)
    if not _profile_fit(a64, b64, 0, px) or not _profile_fit(a64, b64, 1, py):
        return False
    quarter = 0.25 / n
    if max(abs(px[0]), abs(1 - px[1]), abs(py[0]), abs(1 - py[1])) < quarter:
        return False  # the profiles say: the whole frame, where the pair was judged already
    p[0], p[1], p[2], p[3] = px[0], px[1], py[0], py[1]
    p[4], p[5] = 0.5 * (px[4] + py[4]), 0.5 * (px[5] + py[5])
    return True


@njit(**_JIT)
def _refined(a32, b32, a64, b64, p, out):
    """align_pair's second stage: p refined on the 32 and 64 px images, into out as spans."""
    if not _fit(a32, b32, p, 3) or not _fit(a64, b64, p, 1):
        return False
    if p[1] - p[0] < 0.5 or p[3] - p[2] < 0.5 or p[1] - p[0] > 2.0 or p[3] - p[2] > 2.0:
        return False
    al = out.copy()
    _span(p[0], p[1], al, 0)
    _span(p[2], p[3], al, 2)
    if max(al[0], 1 - al[1], al[2], 1 - al[3], al[4], 1 - al[5], al[6], 1 - al[7]) > ALIGN_MAX_CROP:
        return False  # more of a frame left out than a copy's crop
    out[:] = al
    return True


@njit(**_JIT)
def align_pairs(la, lb, out, ok):
    for k in range(la.shape[0]):
        ok[k] = align_pair(la[k], lb[k], out[k])


@njit(**_JIT)
def align_pairs_both(la, lb, out, ok, out_back, ok_back):
    """align_pair both ways for each pair (b's frame in a's into out, ok; a's in b's into out_back,
    ok_back), smoothing each image once for both: the same fits as two align_pairs calls."""
    for k in range(la.shape[0]):
        a64, b64 = _smooth_half(la[k].astype(np.float32)), _smooth_half(lb[k].astype(np.float32))
        p, q = np.zeros(6), np.zeros(6)
        fwd, back = _profiles(a64, b64, p), _profiles(b64, a64, q)
        if fwd or back:
            a32, b32 = _smooth_half(a64), _smooth_half(b64)
            ok[k] = fwd and _refined(a32, b32, a64, b64, p, out[k])
            ok_back[k] = back and _refined(b32, a32, b64, a64, q, out_back[k])
        else:
            ok[k] = ok_back[k] = False


def warm() -> None:
    """Compile (or load from the cache) every entry point of this module on a tiny batch: the first
    run on a new checkout pays the compilation here, once, instead of inside a timed step (the
    second look's kernels warm in fine.warm; verify.warm does both)."""
    la = np.zeros((1, 128, 128), np.uint8)
    la[0, 32:96, 32:96] = 200
    lb = la.copy()
    lb[0, 40:50, 40:50] = 30
    c = np.full((1, 32, 32), 128, np.uint8)
    al = np.array([[0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]], np.float32)
    params = np.array([12.0, 16.0, 3.0, 0.35, 0.5, 0.004, 0.1, 0.5, 0.5, 0.9, 1.0, 1.0, 0.0, 0.0, 1.0, 0.35, 0.002])
    for side in (64, 128):
        judge_pairs(la, lb, c, c, c, c, al, side, params, np.zeros((1, 12)), np.zeros((1, 4), np.int64))
    align_pairs(la, lb, np.tile(al.astype(np.float64), (1, 1)), np.zeros(1, np.bool_))
    align_pairs_both(la, lb, np.tile(al.astype(np.float64), (1, 1)), np.zeros(1, np.bool_),
                     np.tile(al.astype(np.float64), (1, 1)), np.zeros(1, np.bool_))


BANNER_FRACTIONS = (0.1, 0.15, 0.2, 0.25)  # heights of the strip a banner may cover, share of the side
# A drawn background (hashing.has_background's standard: the border's median grey, within DRAWN_TOL,
# over DRAWN_MIN of the frame; or any one grey, within DRAWN_TOL, over as much): a chart, a page, a
# table, a screenshot or a form. Where neither image has one (pictures),
# a banner's strip need not be less flat in the other image: a smooth sky under a white bar is
# nearly as flat as the bar, and two pictures alike everywhere outside one edge's strip are one
# picture (on pages the last lines of two pages of one layout differ as densely, on white in both).
DRAWN_TOL = 3
DRAWN_MIN = 0.4


@njit(**_JIT)
def _drawn(x):
    """Does a (s, s) luma have a drawn background (DRAWN_TOL, DRAWN_MIN)?"""
    s = x.shape[0]
    bg = _border_median(x)
    n = 0
    hist = np.zeros(256, np.int32)
    for i in range(s):
        for j in range(s):
            n += abs(x[i, j] - bg) <= DRAWN_TOL
            hist[x[i, j]] += 1
    # else a screenshot or a form: a window's grey frames it, its main colour fills most of it
    return n >= DRAWN_MIN * s * s or _most_within(hist, DRAWN_TOL) >= DRAWN_MIN * s * s


@njit(**_JIT)
def banner_pair(la, lb, edge, tol, full, stray_max, res):
    """Is b a with a banner across `edge` (0 top, 1 bottom)? For strips of BANNER_FRACTIONS of the
    side (plus a row for the bar's soft edge) that are one flat colour in one image only, the tone
    curve is fitted without the strip, both ways, and the pixels that differ outside it are
    counted; the first strip outside which at most stray_max of the frame differs stands. res = (found, strip rows, differing outside (share of
    the frame), share of the strip that differs). 128 px luma, the whole frame."""
    s = la.shape[0]
    alo, ahi = envelope(la, 2)
    blo, bhi = envelope(lb, 2)
    res[0], res[1], res[2], res[3] = 0.0, 0.0, 1.0, 0.0
    pictures = not _drawn(la) and not _drawn(lb)
    for frac in BANNER_FRACTIONS:
        k = min(s // 2, int(np.ceil(s * frac)) + 1)
        # a banner is an opaque bar: one flat colour over most of its strip in one image only (the
        # last lines of two pages of one layout differ as densely, on white in both; between two
        # pictures, in at least one); read first, it spares the curves of every pair that shows
        # no such strip
        fx, fy = _strip_flat(la, edge, k), _strip_flat(lb, edge, k)
        if max(fx, fy) < STRIP_FLAT or (abs(fx - fy) < STRIP_FLAT_GAP and not pictures):
            continue
        keep = np.ones((s, s), np.bool_)
        i0, i1, j0, j1 = _strip_bounds(edge, s, k)
        keep[i0:i1, j0:j1] = False
        for forward in (True, False):
            m, c = _refit(la, alo, ahi, lb, blo, bhi, keep, forward, tol, full)
            if c >= COLLAPSED * s * s:
                continue
            outside = 0
            inside = 0
            for i in range(s):
                for j in range(s):
                    if m[i, j]:
                        if keep[i, j]:
                            outside += 1
                        else:
                            inside += 1
            share = outside / (s * s)
            if share < res[2]:
                res[1], res[2], res[3] = k, share, inside / (k * s)
            if share <= stray_max:
                res[0] = 1.0
                res[1], res[2], res[3] = k, share, inside / (k * s)
                return


@njit(**_JIT)
def banner_pairs(la, lb, edges, tol, full, stray_max, res):
    for k in range(la.shape[0]):
        banner_pair(la[k], lb[k], edges[k], tol, full, stray_max, res[k])
