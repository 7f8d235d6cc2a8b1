"""Compiled loops of the signature (hashing.py): a JPEG's resizes and what is read off the 128 px luma.

`hashing.hash_bytes` decodes an image once; resizing a JPEG's draft decode to the DETAIL_SIDE
luma and its chroma to CHROMA_SIDE, then reading the 64 px thumbnail, the pHash and dHash, the
region hashes, the drawn background and the robust hash off the luma, was a dozen Pillow and
numpy calls, about 2 ms of a ~5 ms image. Here they are compiled, with the same results bit for bit:

- the resizes are Pillow's LANCZOS and BOX for 8-bit images (libImaging/Resample.c: taps
  normalised in double, quantised to 22-bit fixed point rounding half away from zero, one pass
  per axis, each rounded and clipped to 8 bits), with the taps computed in Python by the same
  formula (`math.sin`, the C library's, as Pillow's), in the order of passes this Pillow takes
  for the geometry (read once per geometry, `_order`, once it has come back PROBE_AFTER times:
  until then, and for a geometry met once, Pillow resizes it: a probe costs as much as 10-30 of
  Pillow's resizes, and a folder of figures of every size meets most geometries once);
- the DCT terms are the same float64 products, rounded to 6 decimals as hashing._phash_pixels
  rounds them, and compared with their median as hashing._above_median does.

tests/test_sigkernels.py holds them equal to Pillow and to the numpy path on random and drawn
images of many sizes.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import njit

from pipeline.dedupe.kernels import _border_median  # np.median of the frame's border, from its histogram

PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit resampling
LANCZOS_SUPPORT = 3.0

_JIT = dict(cache=True, nogil=True, error_model="numpy")


def _lanczos(x: float) -> float:
    def sinc(v: float) -> float:
        if v == 0.0:
            return 1.0
        v = v * math.pi
        return math.sin(v) / v

    return sinc(x) * sinc(x / 3.0) if -3.0 <= x < 3.0 else 0.0


def _box(x: float) -> float:
    return 1.0 if -0.5 < x <= 0.5 else 0.0


FILTERS = {"lanczos": (_lanczos, 3.0), "box": (_box, 0.5)}  # Pillow's filter and its support


@lru_cache(maxsize=4096)
def taps(in_size: int, out_size: int, kind: str = "lanczos") -> tuple[np.ndarray, np.ndarray]:
    """Pillow's taps for one axis (precompute_coeffs + normalize_coeffs_8bpc) of its LANCZOS or BOX
    filter: per output sample its first input and tap count (out_size, 2), and the fixed-point
    weights (out_size, ksize)."""
    fn, support = FILTERS[kind]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = support * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    bounds = np.zeros((out_size, 2), np.int64)
    weights = np.zeros((out_size, ksize), np.int64)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        ss = 1.0 / filterscale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        k = [fn((x + xmin - center + 0.5) * ss) for x in range(xmax)]
        ww = 0.0
        for w in k:
            ww += w
        for x in range(xmax):
            w = k[x] / ww if ww != 0.0 else k[x]
            weights[xx, x] = int(-0.5 + w * (1 << PRECISION_BITS)) if w < 0 else int(0.5 + w * (1 << PRECISION_BITS))
        bounds[xx] = (xmin, xmax)
    return bounds, weights


def lanczos_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    return taps(in_size, out_size, "lanczos")


COMPILED_MAX = 1 << 19  # pixels (beyond, Pillow is as fast: the float copy no longer fits the cache)


def _pillow(plane: np.ndarray, width: int, height: int, kind: str) -> np.ndarray:
    from PIL import Image
    filt = Image.Resampling.LANCZOS if kind == "lanczos" else Image.Resampling.BOX
    return np.asarray(Image.fromarray(np.ascontiguousarray(plane)).resize((width, height), filt))


def _passes(plane: np.ndarray, width: int, height: int, kind: str, vertical_first: bool) -> np.ndarray:
    """The two passes in either order (vertical first is the horizontal-first algorithm on the
    transposed plane)."""
    if vertical_first:
        return _passes(plane.T, height, width, kind, False).T.copy()
    h = taps(plane.shape[1], width, kind)
    v = taps(plane.shape[0], height, kind)
    return resample(transposed(plane), h[0], h[1], v[0], v[1])


@lru_cache(maxsize=256)
def _order(rows: int, cols: int, width: int, height: int, kind: str) -> str:
    """Which pass Pillow runs first for this geometry ("h" or "v"; "pillow": neither reproduces
    it): Pillow's own choice (newer releases start with the vertical pass for some shapes) is read
    once per geometry by resizing probe planes both ways and with Pillow itself: noise, and coarse
    blocks under noise (a strong reduction averages plain noise to one grey, where both orders
    agree, and the order is not seen)."""
    rng = np.random.default_rng(rows * 100003 + cols)
    noise = rng.integers(0, 256, (rows, cols))
    blocks = rng.integers(0, 256, (9, 9))[np.arange(rows) * 9 // rows][:, np.arange(cols) * 9 // cols]
    probes = [noise.astype(np.uint8), ((blocks * 3 + noise) // 4).astype(np.uint8)]
    theirs = [_pillow(p, width, height, kind) for p in probes]
    for order in ("h", "v"):
        if all(np.array_equal(_passes(p, width, height, kind, order == "v"), t) for p, t in zip(probes, theirs)):
            return order
    return "pillow"


PROBE_AFTER = 4  # a geometry's order of passes is probed (_order) when it comes back the 4th time
KNOWN_MAX = 1 << 16  # geometries remembered (met, or probed); beyond, the counts start again
_MET: dict[tuple, int] = {}  # geometry -> times resized by Pillow so far, until it is probed
_KNOWN: dict[tuple, str] = {}  # geometry -> _order's answer


def known_order(rows: int, cols: int, width: int, height: int, kind: str) -> str | None:
    """The order of passes for a geometry already probed, else None (nothing is counted)."""
    return _KNOWN.get((rows, cols, width, height, kind))


def chosen_order(rows: int, cols: int, width: int, height: int, kind: str) -> str:
    """How `resize` takes this geometry: "h" or "v" (compiled, in that order of passes) once it
    has been probed, which it is on its PROBE_AFTER-th plane; "pillow" before that, and where no
    order reproduces Pillow. Either way the pixels are Pillow's."""
    key = (rows, cols, width, height, kind)
    order = _KNOWN.get(key)
    if order is not None:
        return order
    met = _MET.get(key, 0) + 1
    if met < PROBE_AFTER:
        if len(_MET) >= KNOWN_MAX:
            _MET.clear()
        _MET[key] = met
        return "pillow"
    return probe(rows, cols, width, height, kind)


def probe(rows: int, cols: int, width: int, height: int, kind: str) -> str:
    """chosen_order, probed now whatever the count (also for warm-ups, so the compiled passes
    are loaded), and remembered."""
    key = (rows, cols, width, height, kind)
    _MET.pop(key, None)
    if len(_KNOWN) >= KNOWN_MAX:
        _KNOWN.clear()
    order = _KNOWN[key] = _order(rows, cols, width, height, kind)
    return order


def resize(plane: np.ndarray, width: int, height: int, kind: str = "lanczos") -> np.ndarray:
    """A uint8 plane (rows x columns, any strides) resized as Pillow's Image.resize((width, height),
    LANCZOS or BOX) resizes a mode "L" image of it, bit for bit: the passes are Pillow's, in the
    order this Pillow runs them for the geometry (_order). A plane of more than COMPILED_MAX
    pixels (its float copy would weigh 8 bytes a pixel) is resized by Pillow itself; so is one
    whose geometry no order reproduces."""
    rows, cols = plane.shape
    order = "pillow" if plane.size > COMPILED_MAX else chosen_order(rows, cols, width, height, kind)
    if order == "pillow":
        return _pillow(plane, width, height, kind)
    return _passes(plane, width, height, kind, order == "v")


@njit(**_JIT)
def _clip8(v):
    """Pillow's clip8 of a fixed-point sum (int32): shifted right by PRECISION_BITS (floor), clipped to 0..255."""
    v = v >> PRECISION_BITS
    return np.int32(0) if v < 0 else (np.int32(255) if v > 255 else np.int32(v))


@njit(**_JIT)
def transposed(x):
    """x (uint8) transposed: the horizontal passes read its rows (in 16 x 16 blocks)."""
    r, c = x.shape
    out = np.empty((c, r), np.uint8)
    for i0 in range(0, r, 16):
        for j0 in range(0, c, 16):
            for i in range(i0, min(i0 + 16, r)):
                for j in range(j0, min(j0 + 16, c)):
                    out[j, i] = x[i, j]
    return out


@njit(**_JIT)
def resample(xt, hb, hw, vb, vw):
    """Pillow's two-pass 8-bit resample of an image given transposed (xt: columns x rows, uint8) with
    horizontal taps (hb, hw) and vertical taps (vb, vw): the rows the vertical pass reads are
    resampled horizontally first, each pass rounded and clipped to 8 bits. Both passes run along
    contiguous memory so the sums vectorise; the sums are Pillow's own, in 32-bit integers term for
    term (ImagingResample*_8bpc: `ss += in * k` from 1 << (PRECISION_BITS - 1), then clip8 of
    ss >> PRECISION_BITS). Returns uint8 (out rows, out columns)."""
    out_w, out_h = hb.shape[0], vb.shape[0]
    first = vb[0, 0]
    n = vb[out_h - 1, 0] + vb[out_h - 1, 1] - first
    half = np.int32(1 << (PRECISION_BITS - 1))
    acc = np.empty(max(n, out_w), np.int32)
    tmp = np.empty((n, out_w), np.int32)
    for xx in range(out_w):
        acc[:n] = half
        x0 = hb[xx, 0]
        for k in range(hb[xx, 1]):
            w = np.int32(hw[xx, k])
            src = xt[x0 + k, first:first + n]
            for yy in range(n):
                acc[yy] += np.int32(src[yy]) * w
        for yy in range(n):
            tmp[yy, xx] = _clip8(acc[yy])
    out = np.empty((out_h, out_w), np.uint8)
    for yy in range(out_h):
        acc[:out_w] = half
        y0 = vb[yy, 0] - first
        for k in range(vb[yy, 1]):
            w = np.int32(vw[yy, k])
            src = tmp[y0 + k]
            for xx in range(out_w):
                acc[xx] += src[xx] * w
        for xx in range(out_w):
            out[yy, xx] = np.uint8(_clip8(acc[xx]))
    return out


@njit(**_JIT)
def _above_median_bits(low):
    """The 64 bits of an 8x8 block above its median, packed row-major first bit most significant,
    as a signed int64 (hashing._pack of hashing._above_median)."""
    flat = np.sort(low.ravel())
    med = (flat[31] + flat[32]) / 2
    h = np.int64(0)
    for i in range(8):
        for j in range(8):
            h = (h << 1) | np.int64(low[i, j] > med)
    return h


@njit(**_JIT)
def _round6(v):
    return np.round(v, 6)


@njit(**_JIT)
def _dct_hash(rows_m, x, cols_m):
    """(rows_m @ x @ cols_m.T).round(6), then its bits above the median."""
    tmp = rows_m @ x
    low = tmp @ cols_m.T
    out = np.empty((8, 8))
    for i in range(8):
        for j in range(8):
            out[i, j] = _round6(low[i, j])
    return _above_median_bits(out)


@njit(**_JIT)
def _has_background(x, tol, share):
    bg = _border_median(x)
    n = 0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            n += abs(np.float64(x[i, j]) - bg) <= tol
    return n / x.size >= share


@njit(**_JIT)
def _robust(detail, clip_lo, clip_hi, dct):
    """hashing.robust_hash: the luma clipped to its own percentiles, box-reduced to 32 px, pHash."""
    hist = np.zeros(256, np.int64)
    for i in range(detail.shape[0]):
        for j in range(detail.shape[1]):
            hist[detail[i, j]] += 1
    rank = np.cumsum(hist)
    size = detail.size
    lo = np.searchsorted(rank, (clip_lo * (size - 1) + 50) // 100, side="right")
    hi = np.searchsorted(rank, (clip_hi * (size - 1) + 50) // 100, side="right")
    lut = np.empty(256)
    for v in range(256):
        lut[v] = lo if v < lo else (hi if v > hi else v)
    k = detail.shape[0] // 32
    cols = np.zeros(32)
    px = np.empty((32, 32))
    for i in range(32):
        cols[:] = 0.0
        for p in range(i * k, i * k + k):
            row = detail[p]
            for j in range(32):
                for q in range(j * k, j * k + k):
                    cols[j] += lut[row[q]]
        for j in range(32):
            px[i, j] = cols[j] / float(k * k)
    return _dct_hash(dct, px, dct)


@njit(**_JIT)
def signature(detail, t64, p32, d9, d8, dct, regions, with_hashes, bg_tol, bg_share, clip_lo, clip_hi, out):
    """Everything hash_bytes reads off the DETAIL_SIDE luma: the 64 px thumbnail (returned), and into
    out (int64, 8): pHash and dHash of the detail (when with_hashes: JPEGs), crop, top and bottom
    hashes, the drawn background (0/1) and, without one, the robust hash. t64, p32, d9, d8:
    LANCZOS taps 128 -> 64, 32, 9, 8 (bounds, weights); regions: the three (rows, cols) 8 x 64
    region DCT matrices."""
    xt = transposed(detail)
    thumb = resample(xt, t64[0], t64[1], t64[0], t64[1])
    if with_hashes:
        p = resample(xt, p32[0], p32[1], p32[0], p32[1]).astype(np.float64)
        out[0] = _dct_hash(dct, p, dct)
        d = resample(xt, d9[0], d9[1], d8[0], d8[1])
        h = np.int64(0)
        for i in range(8):
            for j in range(8):
                h = (h << 1) | np.int64(d[i, j + 1] > d[i, j])
        out[1] = h
    t = thumb.astype(np.float64)
    for r in range(3):
        out[2 + r] = _dct_hash(regions[r, 0], t, regions[r, 1])
    bg = _has_background(detail, bg_tol, bg_share)
    out[5] = bg
    if not bg:
        out[6] = _robust(detail, clip_lo, clip_hi, dct)
    return thumb



@njit(**_JIT)
def _transposed3(x):
    """`transposed` of each channel of a rows x columns x 3 uint8 image, read in one pass (three
    strided passes take about twice as long): (3, columns, rows)."""
    r, c = x.shape[0], x.shape[1]
    out = np.empty((3, c, r), np.uint8)
    for i0 in range(0, r, 16):
        for j0 in range(0, c, 16):
            for i in range(i0, min(i0 + 16, r)):
                for j in range(j0, min(j0 + 16, c)):
                    out[0, j, i] = x[i, j, 0]
                    out[1, j, i] = x[i, j, 1]
                    out[2, j, i] = x[i, j, 2]
    return out


@njit(**_JIT)
def _plane(plane, hb, hw, vb, vw, vertical_first):
    """`resize`'s two passes of one uint8 plane (any strides) inside a compiled call, with the taps
    `_passes` takes for the order (vertical first: the horizontal-first passes on the transposed plane)."""
    if vertical_first:
        return resample(transposed(plane.T), hb, hw, vb, vw).T.copy()
    return resample(transposed(plane), hb, hw, vb, vw)


@njit(**_JIT)
def ycc_signature(ycc, lhb, lhw, lvb, lvw, l_vertical, chb, chw, cvb, cvw, c_vertical, t64, p32, d9, d8, dct,
                  regions, bg_tol, bg_share, clip_lo, clip_hi, out, sig, sums):
    """A colour JPEG's draft decode (rows x columns x Y, Cb, Cr, uint8) to its signature in one
    call: the luma resized to DETAIL_SIDE (LANCZOS taps l*), Cb and Cr to CHROMA_SIDE (BOX taps c*),
    the three written one after the other into sig (hashing.THUMB_BYTES), what `signature` reads
    off the luma into out, and into sums: the sums of Cb, Cr, the luma and the luma squared (the
    chroma means and the luma's spread, exact in integers)."""
    if not (l_vertical or c_vertical):  # the usual geometry: the three planes transposed in one pass
        xt = _transposed3(ycc)
        detail = resample(xt[0], lhb, lhw, lvb, lvw)
        cb = resample(xt[1], chb, chw, cvb, cvw)
        cr = resample(xt[2], chb, chw, cvb, cvw)
    else:
        detail = _plane(ycc[:, :, 0], lhb, lhw, lvb, lvw, l_vertical)
        cb = _plane(ycc[:, :, 1], chb, chw, cvb, cvw, c_vertical)
        cr = _plane(ycc[:, :, 2], chb, chw, cvb, cvw, c_vertical)
    signature(detail, t64, p32, d9, d8, dct, regions, True, bg_tol, bg_share, clip_lo, clip_hi, out)
    k, sums[2], sums[3] = _put(detail, sig, 0)
    k, sums[0], _ = _put(cb, sig, k)
    k, sums[1], _ = _put(cr, sig, k)


@njit(**_JIT)
def _put(plane, sig, k):
    """A plane written into sig from k on, row by row: (the next position, its sum, its sum of squares)."""
    s1 = np.int64(0)
    s2 = np.int64(0)
    for i in range(plane.shape[0]):
        for j in range(plane.shape[1]):
            v = np.int64(plane[i, j])
            sig[k] = plane[i, j]
            s1 += v
            s2 += v * v
            k += 1
    return k, s1, s2


def plane_taps(rows: int, cols: int, width: int, height: int, kind: str = "lanczos"):
    """(horizontal bounds, weights, vertical bounds, weights, vertical first) that `_plane` resizes a
    rows x columns plane to width x height with, as `resize` would; None where `resize` hands the
    plane to Pillow (more than COMPILED_MAX pixels, a geometry no order reproduces, or one not
    probed yet: `resize` counts it and probes it in time; this only reads what is known)."""
    if rows * cols > COMPILED_MAX:
        return None
    order = known_order(rows, cols, width, height, kind)
    if order is None or order == "pillow":
        return None
    if order == "v":  # `_passes` on the transposed plane: its rows are this plane's columns
        h, v = taps(rows, height, kind), taps(cols, width, kind)
    else:
        h, v = taps(cols, width, kind), taps(rows, height, kind)
    return h[0], h[1], v[0], v[1], order == "v"


def warm() -> None:
    """Compile (or load from the cache) the resizes an image meets, on tiny planes (hashing.warm
    adds what is read off the detail): a new checkout pays the compilation once, not in a timed step."""
    x = np.zeros((40, 30), np.uint8)
    probe(40, 30, 32, 32, "box")
    probe(40, 30, 128, 128, "lanczos")
    resize(x, 32, 32, "box")
    resize(x, 128, 128)
    resize(np.zeros((40, 30, 3), np.uint8)[..., 0], 128, 128)
