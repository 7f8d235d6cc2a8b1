"""Image hashes for dedupe: sha256 of the bytes, 64-bit pHash and dHash, and the original size.

The hashes follow imagehash's definitions (Buchner's `imagehash.phash` / `imagehash.dhash`, after
Krawetz's "Looks Like It" and "Kind of Like That"):

    pHash  grey -> 32x32 LANCZOS -> 2-D DCT-II -> top-left 8x8 -> bit = coefficient > median
    dHash  grey -> 9x8 LANCZOS -> bit = pixel brighter than its left neighbour

Bits are packed row-major with the first bit most significant, so for the same grey input
`int(str(imagehash.phash(im)), 16)` is the unsigned value of `phash(im)`. Hashes are returned and
stored as signed 64-bit integers (two's complement, `to_signed64`) so they fit a BIGINT / int64
column; the Hamming distance in DuckDB 2.0 is `bit_count(xor(a, b))` (the `#` operator does not
parse there; `xor()` does, and is exact on negative BIGINTs).

How these relate to imagehash on the same file:

- Full-resolution decodes (PNG, GIF, WebP, ... everything but JPEG) hash bit-for-bit like
  `imagehash.phash(Image.open(f))` / `imagehash.dhash(...)`. The DCT is an 8x32 basis matrix
  (D = C @ P @ C.T, the same sums scipy.fftpack.dct type II computes); its float noise (~1e-10)
  is rounded away so coefficients that are exactly 0 (flat or mirror-symmetric rows/columns,
  where scipy's FFT returns exact zeros) land on the same side of the median.
- JPEGs are decoded at reduced scale (Pillow's `draft`: libjpeg's 1/2, 1/4 or 1/8 DCT scaling,
  never below DRAFT_SIDE px a side) before the same LANCZOS resize: about 40 % off the decode
  (2.2 instead of 3.7 ms for an average 1000x750 JPEG here). DRAFT_SIDE is 96, three quarters of
  the signature's 128 px: a 1024 x 768 photo is decoded at 1/8 (128 x 96) rather than 1/4, a
  640 x 480 one at 1/4 rather than 1/2, about 20 % off a whole image's hashing on the bench's
  photos; the signature of a 96-row draft is resized up to 128 rows. On `make bench`'s held-back
  halves no edit's recall moved by more than one copy of 32 (figures F1 0.957 -> 0.959, photos
  0.978 -> 0.975, precision unchanged). (A chart's 256 px second-look luma is decoded again at
  its own size when the draft is smaller, as before.)
  The grey comes from the JPEG's Y channel instead of Pillow's RGB->L, and the shrink is a block
  average before the LANCZOS, so a few bits differ from imagehash's; tests/test_hashing.py
  measures and bounds the difference on 30 photo-like JPEGs of 320x240..640x480, and `make
  bench` prints the same figures for a few thousand 640x480..1600x1200 files.
- 16-bit greyscale images are scaled to 8 bits before hashing (Pillow's convert("L") clips them
  at 255, which turns most of them white: imagehash gives such images one near-constant hash).
- Like imagehash, EXIF orientation is not applied: a rotated-by-EXIF copy is a different image.
- Decoding sits behind the decompression-bomb guard (`pipeline.imaging.open_image`): an image
  above `max_image_pixels` is an error row before any pixel is decoded, in every worker too.

How far everyday edits move pHash (a photo-like JPEG against its edited copy re-saved at q=90,
both through `hash_bytes`; 120 generated images, photo-like 640x480..1600x1200 and flat shapes;
median / 90th percentile / max; tests/test_hashing.py measures and bounds the same on 8):

    resize to 50 % or 75 %     0 / 2 / 2
    JPEG re-encode at q=60     0 / 0..2 / 2
    brightness +15 %           2 / 4 / 6
    crop 5 % per side          10 / 14..18 / 20
    horizontal flip            32 / 34 / 36   (not a near-duplicate to pHash)
    unrelated images           min 16, 1st percentile 22, median 32 (11,175 pairs of 150)

pHash distances are even: without ties exactly 32 bits sit above the median, so bits flip in pairs.

Speed: workers read their own bytes (a file, or an entry of a zip each worker opens once) so no
image crosses a process boundary; work is dealt out in chunks, in archive order for zips.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
import zipfile
import zlib
from collections import deque
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from pipeline.dedupe import forkserver
from pipeline.dedupe.forkserver import SMALL_BATCH
from pipeline.imaging import decode_problem, open_image
from pipeline.settings import ZipLimits
from pipeline.zipread import READ_ERRORS, entry_problem, read_entry

HASH_BITS = 64
HASH_SIDE = 8  # 8x8 bits
PHASH_SIDE = 32  # pHash input: HASH_SIDE x imagehash's highfreq_factor of 4
LANCZOS = Image.Resampling.LANCZOS
THUMB_SIDE = 64  # the grey thumbnail the region hashes are read from (and verify.py aligns on)
DETAIL_SIDE = 128  # the verification signature (verify.py): 128x128 luma (Y) ...
CHROMA_SIDE = 32  # ... and 32x32 Cb and Cr (offset by 128, as JPEG stores them)
THUMB_BYTES = DETAIL_SIDE * DETAIL_SIDE + 2 * CHROMA_SIDE * CHROMA_SIDE  # 18,432 bytes per image
DRAFT_SIDE = 96  # a JPEG is decoded at the smallest DCT scale that keeps at least this many pixels a side
FLAT_STD = 3.0  # a thumbnail with less spread than this (grey levels) is flat: no structure to match

Progress = Callable[[int, int, float], None]  # (done, total, images per second)

# DCT-II basis, unnormalised as scipy.fftpack.dct: X[k] = 2 * sum_n x[n] cos(pi k (2n + 1) / 2N),
# only the 8 lowest frequencies are ever needed.
_k = np.arange(HASH_SIDE)[:, None]
_n = np.arange(PHASH_SIDE)[None, :]
_DCT = 2.0 * np.cos(np.pi * _k * (2 * _n + 1) / (2 * PHASH_SIDE))


@dataclass(frozen=True)
class HashedImage:
    key: str
    sha256: str | None
    phash: int | None
    dhash: int | None
    width: int | None
    height: int | None
    error: str | None
    format: str | None = None  # Pillow's name for the file format ("JPEG", "PNG", ...)
    # The verification signature (verify.py), from the same decode: region hashes and thumbnail.
    crop_hash: int | None = None
    top_hash: int | None = None
    bottom_hash: int | None = None
    thumb: bytes | None = None  # THUMB_BYTES: luma 64x64, then Cb 32x32, then Cr 32x32 (verify.split_signature)
    fine: bytes | None = None  # images with a plain background: the 256 px luma, compressed (fine.py)
    chroma_cb: float | None = None  # mean chroma (Cb - 128, Cr - 128): the image's overall hue
    chroma_cr: float | None = None
    robust_hash: int | None = None  # pictures (no plain background): the pHash of the clipped luma (robust_hash)
    flat: bool | None = None  # is_flat of the luma signature, worked out where the image was hashed


def to_signed64(u: int) -> int:
    """An unsigned 64-bit hash as the signed int64 with the same bits (two's complement)."""
    if not 0 <= u < 1 << HASH_BITS:
        raise ValueError(f"{u} is not an unsigned {HASH_BITS}-bit value")
    return u - (1 << HASH_BITS) if u >= 1 << (HASH_BITS - 1) else u


def _pack(bits: np.ndarray) -> int:
    """Row-major bits, first bit most significant (imagehash's hex order), as signed int64."""
    return to_signed64(int.from_bytes(np.packbits(bits.ravel()).tobytes(), "big"))


def _grey(im: Image.Image) -> Image.Image:
    if im.mode == "L":
        im.load()
        return im
    if im.mode.startswith("I;16"):
        # 16-bit samples: keep the top 8 bits (convert("L") would clip everything above 255).
        return Image.fromarray((np.asarray(im) >> 8).astype(np.uint8))
    return im.convert("L")


def phash(gray: Image.Image) -> int:
    """imagehash.phash: 32x32 grey, 2-D DCT-II, the 8x8 lowest frequencies, each above the median."""
    return _phash_pixels(np.asarray(_grey(gray).resize((PHASH_SIDE, PHASH_SIDE), LANCZOS), dtype=np.float64))


def _above_median(low: np.ndarray) -> np.ndarray:
    """low > its median (np.median's value, without its overhead: 64 values sort in a microsecond)."""
    flat = np.sort(low, axis=None)
    mid = flat.size // 2
    return low > (flat[mid - 1] + flat[mid]) / 2 if flat.size % 2 == 0 else low > flat[mid]


def _phash_pixels(pixels: np.ndarray) -> int:
    low = (_DCT @ pixels @ _DCT.T).round(6)  # round off float noise: exact zeros stay zeros
    return _pack(_above_median(low))


def dhash(gray: Image.Image) -> int:
    """imagehash.dhash: 9x8 grey, each pixel compared with its left neighbour."""
    pixels = np.asarray(_grey(gray).resize((HASH_SIDE + 1, HASH_SIDE), LANCZOS))
    return _pack(pixels[:, 1:] > pixels[:, :-1])


# ---- the verification signature (see verify.py) -----------------------------------------------


def thumbnail(grey: Image.Image, side: int = THUMB_SIDE) -> np.ndarray:
    """The side x side uint8 grey thumbnail of an image in mode "L" (LANCZOS: a BOX reduction is
    4x cheaper but aliases thin lines, and crops of figures no longer align)."""
    return np.asarray(grey.resize((side, side), LANCZOS), dtype=np.uint8)


def _area_matrix(n_out: int, lo: float, hi: float) -> np.ndarray:
    """Box-filter resampling of the span [lo, hi) of a THUMB_SIDE-pixel axis onto n_out samples."""
    m = np.zeros((n_out, THUMB_SIDE))
    edges = np.linspace(lo, hi, n_out + 1)
    for i in range(n_out):
        a, b = edges[i], edges[i + 1]
        for j in range(int(np.floor(a)), int(np.ceil(b))):
            overlap = min(b, j + 1) - max(a, j)
            if overlap > 0:
                m[i, j] = overlap
        m[i] /= m[i].sum()
    return m


@lru_cache(maxsize=None)
def _region_dct(lo: float, hi: float) -> np.ndarray:
    """8 x THUMB_SIDE: a span of the thumbnail resampled to 32 samples, then the 8 lowest DCT-II terms."""
    return _DCT @ _area_matrix(PHASH_SIDE, lo * THUMB_SIDE, hi * THUMB_SIDE)


def _region_hash(t: np.ndarray, rows: tuple[float, float], cols: tuple[float, float]) -> int:
    low = (_region_dct(*rows) @ t @ _region_dct(*cols).T).round(6)
    return _pack(_above_median(low))


# The regions: the central 92 % (a copy cropped ~4 % per side has its full pHash near this), the
# top 75 % and the bottom 75 % (an overlay in any corner leaves one of them untouched).
REGIONS = {"crop_hash": ((0.04, 0.96), (0.04, 0.96)), "top_hash": ((0.0, 0.75), (0.0, 1.0)),
           "bottom_hash": ((0.25, 1.0), (0.0, 1.0))}


def region_hashes(thumb: np.ndarray) -> tuple[int, int, int]:
    """(crop_hash, top_hash, bottom_hash) of a thumbnail: pHashes of its regions, signed 64-bit."""
    t = thumb.astype(np.float64)
    return tuple(_region_hash(t, rows, cols) for rows, cols in REGIONS.values())  # type: ignore[return-value]


# The robust route's hash: the 128 px luma clipped to its own 10th and 90th percentiles, box-reduced
# to 32 px, then pHash's DCT and median. A low-contrast picture (a smooth wallpaper, a misty sky)
# has small DCT terms, and a line of bright letters laid over it (a watermark: +80 grey levels over
# a spread of 12) decides many of its pHash bits; clipped at full detail, before the letters are
# averaged into the 32 px samples, they weigh no more than the picture's own extremes. Clipping is
# monotone, so a brightened or contrast-stretched copy keeps its bits. Only for pictures: on a
# chart or a page the clip whitens most of the frame and look-alikes collide.
ROBUST_CLIP = (10, 90)


def robust_hash(detail: np.ndarray) -> int:
    """The robust route's hash of a DETAIL_SIDE x DETAIL_SIDE uint8 luma, signed 64-bit."""
    # the percentiles of uint8 values from their histogram (the value at that rank of the sorted pixels)
    rank = np.cumsum(np.bincount(detail.ravel(), minlength=256))
    lo, hi = (np.uint8(np.searchsorted(rank, (q * (detail.size - 1) + 50) // 100, side="right")) for q in ROBUST_CLIP)
    k = DETAIL_SIDE // PHASH_SIDE
    sums = np.clip(detail, lo, hi).reshape(PHASH_SIDE, k, PHASH_SIDE, k).sum(axis=(1, 3), dtype=np.uint32)
    return _phash_pixels(sums / float(k * k))


def is_flat(thumb: np.ndarray) -> bool:
    """A solid colour, an empty canvas: too little structure for a perceptual match (the luma
    signature's, its first DETAIL_SIDE^2 bytes)."""
    t = np.asarray(thumb).ravel()
    return float((t[:DETAIL_SIDE * DETAIL_SIDE] if t.size == THUMB_BYTES else t).std()) < FLAT_STD


def hash_bytes(key: str, data: bytes, max_pixels: int | None = None) -> HashedImage:
    """Hash one image's bytes. Never raises: undecodable bytes, or more pixels than `max_pixels`
    (None: Pillow's Image.MAX_IMAGE_PIXELS), give `error` (sha256 still set)."""
    sha = hashlib.sha256(data).hexdigest()
    try:
        with open_image(data, max_pixels) as im:
            width, height, fmt = *im.size, im.format  # the original size, before draft shrinks it
            jpeg = fmt == "JPEG"
            compiled = _compiled()
            resize = _resize if compiled else pillow_resize
            # A JPEG's draft decode comes in few sizes: it is resized by the compiled LANCZOS
            # (sigkernels.resize: Pillow's pixels in a third of the time, once its order of passes
            # is read for the size); any other image, at full size, by Pillow.
            # A colour JPEG (most) is decoded as YCbCr and read in one compiled call
            # (sigkernels.ycc_signature); the others, plane by plane, with the same bits.
            ycc = _jpeg_ycc(im) if jpeg else None
            fused = _ycc_signature(ycc) if ycc is not None and compiled else None
            if fused is not None:
                luma, sig, read, mean_cb, mean_cr, flat = fused
            else:
                if jpeg:
                    luma, cb, cr = _jpeg_draft(im, resize, ycc)
                    detail = resize(luma, DETAIL_SIDE, DETAIL_SIDE)
                else:
                    grey = _grey(im)
                    cb, cr = _chroma_planes(im)
                    detail = thumbnail(grey, DETAIL_SIDE)
                # The draft decode is approximate already: a JPEG's pHash and dHash resize the detail
                # (128 px) instead of the decode, which saves a pass over it; any other image's are
                # imagehash's, from the whole decode.
                read = read_detail(detail, with_hashes=jpeg, compiled=compiled)
                sig = np.concatenate([detail.ravel(), cb.ravel(), cr.ravel()])
                mean_cb, mean_cr = float(cb.mean()) - 128.0, float(cr.mean()) - 128.0
                flat = is_flat(sig)
            hashes = (read.phash, read.dhash) if jpeg else (phash(grey), dhash(grey))
            fine = None
            if read.background and jpeg:  # the draft may stop short of FINE_SIDE: decoded again then
                big = min(luma.shape) >= min(FINE_SIDE, width, height)
                fine = pack_fine(resize(luma if big else np.asarray(_jpeg_grey(data, max_pixels)), FINE_SIDE, FINE_SIDE))
            elif read.background:
                fine = pack_fine(thumbnail(grey, FINE_SIDE))
        return HashedImage(key, sha, *hashes, width, height, None, fmt, *read.regions, sig.tobytes(), fine, mean_cb,
                           mean_cr, read.robust, flat)
    except Exception as exc:  # Pillow raises many types for bad bytes; all mean "cannot hash"
        return HashedImage(key, sha, None, None, None, None, decode_problem(exc))


@dataclass(frozen=True)
class DetailRead:
    """What the signature reads off the DETAIL_SIDE luma (read_detail)."""

    phash: int | None  # of the detail (a JPEG's); None when not asked for
    dhash: int | None
    regions: tuple[int, int, int]  # crop_hash, top_hash, bottom_hash (region_hashes of the 64 px thumbnail)
    background: bool  # has_background
    robust: int | None  # robust_hash, for an image without a drawn background


def read_detail(detail: np.ndarray, with_hashes: bool = True, compiled: bool = True) -> DetailRead:
    """The 64 px thumbnail's region hashes, the drawn background, the robust hash and (with_hashes)
    the pHash and dHash of a DETAIL_SIDE x DETAIL_SIDE uint8 luma: in one compiled call
    (sigkernels.signature) or, not `compiled`, by phash, dhash, region_hashes(thumbnail(...)),
    has_background and robust_hash, with the same bits."""
    if not compiled:
        im = Image.fromarray(np.ascontiguousarray(detail, np.uint8))
        background = has_background(detail)
        return DetailRead(phash(im) if with_hashes else None, dhash(im) if with_hashes else None,
                          region_hashes(thumbnail(im)), background, None if background else robust_hash(detail))
    from pipeline.dedupe import sigkernels as sk

    out = np.zeros(8, np.int64)
    sk.signature(np.ascontiguousarray(detail, np.uint8), *_detail_taps(), _DCT, _region_matrices(), with_hashes,
                 float(BG_TOL), BG_MIN, ROBUST_CLIP[0], ROBUST_CLIP[1], out)
    background = bool(out[5])
    return DetailRead(int(out[0]) if with_hashes else None, int(out[1]) if with_hashes else None,
                      (int(out[2]), int(out[3]), int(out[4])), background, None if background else int(out[6]))


_hashed_here = 0  # images hashed in this process without the compiled loops


def _compiled() -> bool:
    """Whether this image is read by the compiled loops (sigkernels.py): yes once they are loaded
    (pool workers load them at their start, pool_warm.py); a process hashing on its own starts
    without them, as numba's start-up (~0.8 s) costs more than a small folder takes, and loads
    them after SMALL_BATCH images. Both ways give the same bits (tests/test_sigkernels.py)."""
    global _hashed_here
    if "pipeline.dedupe.sigkernels" in sys.modules:
        return True
    _hashed_here += 1
    if _hashed_here <= SMALL_BATCH:
        return False
    import pipeline.dedupe.sigkernels  # noqa: F401
    return True


def _resize(plane: np.ndarray, width: int, height: int, kind: str = "lanczos") -> np.ndarray:
    from pipeline.dedupe.sigkernels import resize
    return resize(plane, width, height, kind)


def pillow_resize(plane: np.ndarray, width: int, height: int, kind: str = "lanczos") -> np.ndarray:
    """A uint8 plane resized by Pillow's Image.resize (LANCZOS or BOX) of a mode "L" image of it."""
    filt = LANCZOS if kind == "lanczos" else Image.Resampling.BOX
    return np.asarray(Image.fromarray(np.ascontiguousarray(plane)).resize((width, height), filt))


def warm() -> None:
    """Load the compiled loops of the signature (sigkernels.py) and run each once: pool workers
    fork with them ready (pool_warm.py), verify.warm builds them on a new checkout."""
    from pipeline.dedupe import sigkernels

    sigkernels.warm()
    rows, cols = DETAIL_SIDE + 32, DETAIL_SIDE + 8
    sigkernels.probe(rows, cols, DETAIL_SIDE, DETAIL_SIDE, "lanczos")
    sigkernels.probe(rows, cols, CHROMA_SIDE, CHROMA_SIDE, "box")
    _ycc_signature(np.zeros((rows, DETAIL_SIDE + 16, 3), np.uint8)[:, :cols])
    read_detail(np.zeros((DETAIL_SIDE, DETAIL_SIDE), np.uint8))
    read_detail(np.arange(DETAIL_SIDE * DETAIL_SIDE, dtype=np.uint8).reshape(DETAIL_SIDE, DETAIL_SIDE), with_hashes=False)


@lru_cache(maxsize=1)
def _detail_taps():
    from pipeline.dedupe.sigkernels import lanczos_taps
    return (lanczos_taps(DETAIL_SIDE, THUMB_SIDE), lanczos_taps(DETAIL_SIDE, PHASH_SIDE),
            lanczos_taps(DETAIL_SIDE, HASH_SIDE + 1), lanczos_taps(DETAIL_SIDE, HASH_SIDE))


@lru_cache(maxsize=1)
def _region_matrices() -> np.ndarray:
    """(3, 2, 8, THUMB_SIDE): the rows and columns DCT matrices of each of REGIONS, in its order."""
    return np.ascontiguousarray([[_region_dct(*rows), _region_dct(*cols)] for rows, cols in REGIONS.values()])


FINE_SIDE = 256  # the second look's luma (fine.py), for images with a plain background


def pack_fine(luma: np.ndarray) -> bytes:
    """The fine luma as stored (fine.unpack reads it): zlib at its fast level, about 7.5 KB for a chart."""
    return zlib.compress(np.ascontiguousarray(luma, np.uint8).tobytes(), 1)


BG_TOL = 3  # grey levels from the border's median that count as a drawn background ...
BG_MIN = 0.4  # ... over at least this share of the frame: a chart, a page, a table, a diagram


def has_background(luma: np.ndarray) -> bool:
    """Does a (side, side) luma have a drawn background (a chart, a page, a diagram: the border's
    median grey, within BG_TOL, over at least BG_MIN of the frame)? Such images get the 256 px
    second look. Stricter than the verification's background (kernels.BG_TOL, BG_MIN): a sky is
    smooth, not one grey, and the second look's luma costs a photo a second JPEG decode. On the
    bench's sets 96 % of the figures and 14 % of the photos have one."""
    border = np.concatenate([luma[0], luma[-1], luma[1:-1, 0], luma[1:-1, -1]]).astype(np.int32)
    bg = np.median(border)
    return bool((np.abs(luma.astype(np.int32) - bg) <= BG_TOL).mean() >= BG_MIN)


def _jpeg_grey(data: bytes, max_pixels: int | None) -> Image.Image:
    """A JPEG's grey decoded again at >= FINE_SIDE px a side (the first decode stops at DETAIL_SIDE)."""
    with open_image(data, max_pixels) as im:
        im.draft("L", (FINE_SIDE, FINE_SIDE))
        return _grey(im)


_NEUTRAL = np.full((CHROMA_SIDE, CHROMA_SIDE), 128, np.uint8)


def _jpeg_ycc(im: Image.Image) -> np.ndarray | None:
    """A colour JPEG decoded at 1/2..1/8 scale (libjpeg's DCT scaling, >= DETAIL_SIDE px a side) as
    YCbCr: its rows x columns x 3 array; None for any other JPEG (left undecoded) or one that did
    not come out as YCbCr (decoded, in its own mode)."""
    if im.mode != "RGB":
        return None
    im.draft("YCbCr", (DRAFT_SIDE, DRAFT_SIDE))
    im.load()
    return _pixels(im, 3) if im.mode == "YCbCr" else None


def _pixels(im: Image.Image, bands: int) -> np.ndarray:
    """A loaded image's pixels as a rows x columns x bands uint8 array: a view of Pillow's own
    memory where Pillow exports it to Arrow (its 4-byte pixels, from Pillow 11.2) and pyarrow is
    loaded already, else np.asarray's copy (through tobytes: about 10 us more for a 160 x 120
    draft; importing pyarrow for it would cost a hashing worker 0.15 s before its first image)."""
    if "pyarrow" in sys.modules:
        try:
            import pyarrow as pa

            cells = pa.array(im)
            if cells.type.list_size != 4 or cells.offset:
                raise ValueError("not 4-byte pixels")
            return cells.values.to_numpy(zero_copy_only=True).reshape(im.size[1], im.size[0], 4)[:, :, :bands]
        except Exception:  # an older Pillow, an image in several blocks: the copy
            pass
    return np.asarray(im)


def _jpeg_draft(im: Image.Image, resize=pillow_resize, ycc: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A JPEG's planes from its draft decode (`_jpeg_ycc`, read here unless given): a colour JPEG's
    Y is the grey and its Cb/Cr planes are the chroma (each box-averaged to CHROMA_SIDE by
    `resize`, as Pillow's BOX resize of the image would); any other is decoded as grey.
    Returns the luma plane (uint8 rows x columns, possibly a strided view) and the chroma planes."""
    colour = im.mode == "RGB"
    if ycc is None and colour:
        ycc = _jpeg_ycc(im)
    if ycc is not None:
        return (ycc[..., 0], resize(ycc[..., 1], CHROMA_SIDE, CHROMA_SIDE, "box"),
                resize(ycc[..., 2], CHROMA_SIDE, CHROMA_SIDE, "box"))
    if colour:  # decoded already, not as YCbCr
        return (np.asarray(_grey(im)), *_chroma_planes(im))
    im.draft("L", (DRAFT_SIDE, DRAFT_SIDE))
    return np.asarray(_grey(im)), _NEUTRAL, _NEUTRAL


def _ycc_signature(ycc: np.ndarray):
    """(luma plane, signature, DetailRead, mean Cb - 128, mean Cr - 128, flat) of a YCbCr draft
    decode in one compiled call (sigkernels.ycc_signature), the bits of the plane-by-plane path;
    None when a plane's geometry is resized by Pillow itself (sigkernels.plane_taps)."""
    from pipeline.dedupe import sigkernels as sk

    rows, cols = ycc.shape[:2]
    lt = sk.plane_taps(rows, cols, DETAIL_SIDE, DETAIL_SIDE, "lanczos")
    ct = sk.plane_taps(rows, cols, CHROMA_SIDE, CHROMA_SIDE, "box")
    if lt is None or ct is None:
        return None
    out = np.zeros(8, np.int64)
    sig = np.empty(THUMB_BYTES, np.uint8)
    sums = np.zeros(4, np.int64)
    sk.ycc_signature(ycc, *lt, *ct, *_detail_taps(), _DCT, _region_matrices(), float(BG_TOL), BG_MIN,
                     ROBUST_CLIP[0], ROBUST_CLIP[1], out, sig, sums)
    background = bool(out[5])
    read = DetailRead(int(out[0]), int(out[1]), (int(out[2]), int(out[3]), int(out[4])), background,
                      None if background else int(out[6]))
    n = CHROMA_SIDE * CHROMA_SIDE
    return (ycc[..., 0], sig, read, float(sums[0]) / n - 128.0, float(sums[1]) / n - 128.0,
            _flat_from_sums(int(sums[2]), int(sums[3]), sig))


def _flat_from_sums(s1: int, s2: int, sig: np.ndarray) -> bool:
    """is_flat(sig) from the luma's sum and sum of squares, exactly in integers (variance against
    FLAT_STD squared); within a hair of the threshold, is_flat itself decides, as it always did."""
    n = DETAIL_SIDE * DETAIL_SIDE
    gap = n * s2 - s1 * s1 - FLAT_STD * FLAT_STD * n * n  # n^2 (variance - FLAT_STD^2)
    if abs(gap) > n:
        return gap < 0
    return is_flat(sig)


def _chroma_planes(im: Image.Image) -> tuple[np.ndarray, np.ndarray]:
    """Cb and Cr (JPEG's YCbCr, ITU-R BT.601, 128 = no colour) at CHROMA_SIDE x CHROMA_SIDE;
    neutral for grey images. Reduced before the colour conversion, so it costs little."""
    if im.mode in ("L", "LA", "1", "I", "F") or im.mode.startswith("I;16"):
        return _NEUTRAL, _NEUTRAL
    rgb = im.convert("RGBA" if im.mode in ("P", "PA") else im.mode)
    if rgb.mode != "RGB":
        rgb = rgb.convert("RGB")
    small = rgb.resize((CHROMA_SIDE, CHROMA_SIDE), Image.Resampling.BOX, reducing_gap=2.0).convert("YCbCr")
    ycc = np.asarray(small)
    return np.ascontiguousarray(ycc[..., 1]), np.ascontiguousarray(ycc[..., 2])


def _failed(key: str, error: str) -> HashedImage:
    return HashedImage(key, None, None, None, None, None, error)




def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


# ---- workers: each reads its own bytes --------------------------------------------------------

Chunk = list[tuple[int, str, object]]  # (position in items, key, path or entry name)


def _hash_file_chunk(chunk: Chunk, max_pixels: int | None = None) -> list[tuple[int, HashedImage]]:
    out = []
    for i, key, path in chunk:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            out.append((i, _failed(key, f"unreadable file: {exc}")))
            continue
        out.append((i, hash_bytes(key, data, max_pixels)))
    return out


def _hash_entries(zf: zipfile.ZipFile, chunk: Chunk, limits: ZipLimits) -> list[tuple[int, HashedImage]]:
    out = []
    for i, key, name in chunk:
        try:
            info = zf.getinfo(name)
        except KeyError:
            out.append((i, _failed(key, f"no entry {name!r} in the archive")))
            continue
        problem = entry_problem(info, limits)
        if problem:
            out.append((i, _failed(key, f"refused entry: {problem}")))
            continue
        try:
            data = read_entry(zf, info, limits)
        except READ_ERRORS as exc:
            out.append((i, _failed(key, f"unreadable entry: {exc}")))
            continue
        out.append((i, hash_bytes(key, data, limits.max_image_pixels)))
    return out


_WORKER_ZIPS: dict[str, zipfile.ZipFile] = {}  # a pool worker's open archives, for all its chunks


def _worker_zipfile(zip_path: str) -> zipfile.ZipFile:
    """This process's open archive (its central directory read once per process)."""
    if zip_path not in _WORKER_ZIPS:
        _WORKER_ZIPS[zip_path] = zipfile.ZipFile(zip_path)
    return _WORKER_ZIPS[zip_path]


def _hash_zip_chunk(chunk: Chunk, limits: ZipLimits, zip_path: str) -> list[tuple[int, HashedImage]]:
    return _hash_entries(_worker_zipfile(zip_path), chunk, limits)


TAIL_SPLIT = 4  # the last `workers` chunks' worth of jobs goes in chunks this many times smaller


def _chunks(jobs: Chunk, size: int, workers: int) -> list[Chunk]:
    """Jobs in chunks of `size`, in order; never fewer chunks than workers, so a small batch still
    uses every core. The last `workers` chunks' worth is cut TAIL_SPLIT times finer: the workers
    take chunks as they free up, so they end within a small chunk of each other instead of one
    waiting out the other's last whole chunk (at 64 images of about 3 ms, 0.1 s of a core)."""
    size = max(1, min(size, math.ceil(len(jobs) / max(workers, 1))))
    tail = max(0, len(jobs) - workers * size) if size >= 2 * TAIL_SPLIT else len(jobs)
    small = max(1, size // TAIL_SPLIT)
    return ([jobs[s:min(s + size, tail)] for s in range(0, tail, size)]
            + [jobs[s:min(s + small, len(jobs))] for s in range(tail, len(jobs), small)])


def _process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of hashing workers (fork server with this module and the compiled loops loaded)."""
    return ProcessPoolExecutor(workers, mp_context=forkserver.context(), initializer=_worker_init, initargs=(os.getpid(),))


def _run(jobs: Chunk, size: int, work, workers: int, progress: Progress | None = None, local=None,
         pool: ProcessPoolExecutor | None = None) -> list[HashedImage]:
    """Every job, in chunks of `size` (`_chunks`), through `work` over `workers` processes, each
    chunk giving (position, result) pairs; results in job order. `local`: a chunk's work in this
    process; with `workers` <= 1 every chunk is done here (by `local`, else `work`); otherwise,
    while the pool starts (its fork server imports this module and loads the compiled loops,
    about a second in a new process), this process takes chunks itself, from the same queue the
    pool is fed from, until the pool has taken the rest. `pool`: the caller's (from
    `_process_pool`, for several batches in turn; the caller shuts it down), else one of its own."""
    total = len(jobs)
    chunks = _chunks(jobs, size, max(workers, 1))
    results: list[HashedImage | None] = [None] * total
    done, start = 0, time.perf_counter()

    def record(part):
        nonlocal done
        for i, hashed in part:
            results[i] = hashed
        done += len(part)
        if progress:
            progress(done, total, done / max(time.perf_counter() - start, 1e-9))

    if workers <= 1:
        for chunk in chunks:
            record((local or work)(chunk))
        return results  # type: ignore[return-value]
    own = pool is None
    if own:
        pool = _process_pool(workers)
    queue = deque(chunks)
    futures = []
    failed: list[BaseException] = []  # what stopped the feeder (a pool that cannot start)
    stopped = threading.Event()

    def take() -> Chunk | None:
        try:
            return queue.popleft()  # one deque, two threads: popleft is atomic
        except IndexError:
            return None

    def feed() -> None:  # the first submit starts the workers, and waits for the fork server
        try:
            while not stopped.is_set() and (chunk := take()) is not None:
                futures.append(pool.submit(work, chunk))
        except BaseException as exc:  # a pool that cannot start: the run fails with its error
            failed.append(exc)

    feeder = threading.Thread(target=feed, name="hash-pool-feed", daemon=True)
    forkserver.start()  # here, not in the feeder: its start holds a Ctrl-C back only in the main thread
    try:
        feeder.start()
        while local is not None and feeder.is_alive() and (chunk := take()) is not None:
            record(local(chunk))
        feeder.join()
        if failed:
            raise failed[0]
        for future in as_completed(futures):
            record(future.result())
    except BaseException:
        # Stopped (an interrupt, a failed chunk): drop the queued chunks instead of hashing
        # them all first; only the chunks the workers hold now are finished.
        stopped.set()
        if feeder.ident is not None:  # started (an interrupt can come inside its start)
            feeder.join()
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
        else:
            for future in futures:
                future.cancel()
        raise
    if own:
        pool.shutdown(wait=True)
    return results  # type: ignore[return-value]


def _worker_init(owner: int) -> None:
    """Workers leave SIGINT/SIGTERM to the process that owns the pool (`owner`): a stop sent to
    the whole process group ends the run at a safe point there, not in the middle of a chunk here.
    So that a pool whose owner is gone without winding it down (killed outright) does not wait
    for work forever, each worker ends
    itself once the owner is gone (`_orphaned`; its parent, the fork server, lives as long as any
    worker does, so it is the owner that is watched)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    threading.Thread(target=_orphaned, args=(owner,), name="hash-worker-owner", daemon=True).start()


ORPHAN_CHECK = 0.5  # seconds between a worker's looks at the process that owns its pool


def _orphaned(owner: int) -> None:
    from pipeline.liveness import pid_exists

    while pid_exists(owner):
        time.sleep(ORPHAN_CHECK)
    os._exit(1)


def hash_files(items: list[tuple[str, Path]], workers: int | None = None, progress: Progress | None = None,
               chunk: int = 64, max_image_pixels: int | None = None) -> list[HashedImage]:
    """Hash (key, path) items over `workers` processes (default: every core, or this process
    alone for fewer than SMALL_BATCH items, which hash faster than a pool starts; <= 1 runs here);
    results in item order; while the pool starts, this process hashes chunks of the same queue
    itself. Tasks are `chunk` items (fewer when that keeps every worker busy);
    `progress(done, total, images_per_second)` is called after each. An image above
    `max_image_pixels` (None: Pillow's default) is an error row."""
    if workers is None:
        workers = default_workers() if len(items) >= SMALL_BATCH else 1
    jobs = [(i, key, str(path)) for i, (key, path) in enumerate(items)]
    work = partial(_hash_file_chunk, max_pixels=max_image_pixels)
    return _run(jobs, chunk, work, workers, progress, local=work)


def hash_zip(zip_path: Path, items: list[tuple[str, str]], limits: ZipLimits, workers: int | None = None,
             progress: Progress | None = None, chunk: int = 64) -> list[HashedImage]:
    """Hash (key, entry name) items of one zip, read in place (nothing extracted, each entry
    bounded by `limits`, each image by `limits.max_image_pixels`); results in item order. Chunks
    follow the archive's layout, so every worker reads one stretch of the file front to back.
    Workers, chunks and progress as in `hash_files`. An unreadable archive raises (`scan_zip` it
    first); a bad entry is an error row. Several batches of one archive: `ZipHasher`."""
    with ZipHasher(zip_path, limits, workers) as hasher:
        return hasher.hash(items, progress, chunk)


class ZipHasher:
    """`hash_zip` for several batches of one archive in turn (a step's partitions): the archive's
    central directory read once here (~0.2 s for 14,000 entries) and once per worker, one pool
    started once. Close it (or use it as a context manager) to stop the pool."""

    def __init__(self, zip_path: Path, limits: ZipLimits, workers: int | None = None):
        self.zip_path, self.limits = str(zip_path), limits
        self.workers = default_workers() if workers is None else workers
        self.zf: zipfile.ZipFile | None = None  # opened by the first batch (an unreadable archive raises there)
        self.offsets: dict[str, int] = {}
        self.pool = _process_pool(self.workers) if self.workers > 1 else None
        if self.pool is not None:  # its fork server gets ready while the central directory is read
            forkserver.start()

    def hash(self, items: list[tuple[str, str]], progress: Progress | None = None, chunk: int = 64) -> list[HashedImage]:
        if self.zf is None:
            self.zf = zipfile.ZipFile(self.zip_path)
            self.offsets = {info.filename: info.header_offset for info in self.zf.infolist()}
        jobs = sorted(((i, key, name) for i, (key, name) in enumerate(items)), key=lambda j: self.offsets.get(j[2], -1))
        return _run(jobs, chunk, partial(_hash_zip_chunk, limits=self.limits, zip_path=self.zip_path),
                    self.workers if self.pool else 1, progress, local=partial(_hash_entries, self.zf, limits=self.limits),
                    pool=self.pool)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if self.zf is not None:
            self.zf.close()

    def __enter__(self) -> "ZipHasher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()