"""Verification of candidate pairs: is B a copy of A, apart from one edited region?

The candidate search (search.py) is exact, but a 64-bit pHash cannot tell two charts of one
template apart (they sit a few bits apart), and a global similarity cannot either: a grey
thumbnail of a pie chart is a disc on white, and its correlation with another pie of the same
palette measures the layout, not whether the pixels are the same. So verification asks the
question a copy answers: after aligning the pair, are the pixels the same everywhere, or
everywhere but inside one compact region (a caption, a watermark, a banner, a logo)?

The signature (hashing.py, from the one decode, THUMB_BYTES per image): the luma at 128x128 and
Cb, Cr at 32x32. The per-pixel loops are compiled (kernels.py); this module holds the rule and
batches the pairs over the cores.

1. **Alignment.** Every pair is judged at the whole frame first. A pair refused there is aligned
   (`kernels.align_pair`): where b's frame lies in a's, as a span per axis plus a gain and an
   offset (a grey or brightened copy), fitted by Gauss-Newton with residuals beyond a few grey
   levels weighed down (an overlay does not pull it): first on the mean row and column profiles,
   coarse to fine, then, when the profiles show a crop, on the 32 and 64 px images. A fit that
   leaves out more than 15 % of a side of either image, or fails, is given up. The pair is judged
   again at the alignment found (step 2) and keeps the better verdict. The fit runs one way, so a
   pair is always judged in one order (the signature whose bytes sort first is A), whichever order
   it is given in: the verdict of (A, B) is the verdict of (B, A).
2. **Identity** (`identity`): at the alignment, each pixel of B against the tone curve of A's (a
   non-decreasing table fitted per pair: brightness, contrast, gamma, clipping; in each band of A's
   values the most common shift wins, so what a caption bar covers is outvoted) and against the
   other image's envelope (the lowest and highest value a shift of `shift` of a pixel can show
   there), the smaller of the two ways: noise, resampling and sub-pixel shifts stay near 0,
   content that one image lacks does not. The curve is fitted both ways (A's onto B, B's onto A),
   then again both ways on the pixels that matched, and the reading with the fewest differing
   pixels stands: the verdict does not depend on which image comes first. A luma curve that keeps
   almost none of A's contrast (a star field mapped onto a plain navy tile) does not stand, nor
   one that stretches the contrast between the two largest areas more than threefold or cuts it
   to less than a third, neither ending near black or white (two tones map onto any other two:
   a dark disc on grey onto a pale disc on darker grey; a copy's brightness or contrast edit
   stays within that); when every reading, either way, is of those, the two are not one picture. A banner over an
   edge can pull a curve (a caption bar hiding most of a sky: the sky's greys map to the bar's):
   when one edge's quarter differs much more densely than the rest, or is one flat colour in one
   image only, the curves are fitted again without it, and that reading stands when less differs
   outside the strip. When both images are coloured, Cb and Cr are read against one factor for
   both planes, about grey (a brightness, contrast or saturation change scales a copy's colour so;
   a curve per plane would map any two plain colours onto any other two, and a recolouring is no
   copy), fitted on the pixels whose luma matched; where the image that shows less colour than
   the factor says has an RGB channel at 0 or 255 (clipped), colour pulled towards grey is not a
   difference. Their differing pixels join the luma's; they are read only when the luma's own map leaves the pair in doubt (a pair whose luma
   already differs over too large a region, too much of the content or in too many stray places
   is refused without them: colour only adds differing pixels). A pixel differs beyond `luma_tol` / `chroma_tol`; the luma's
   tolerance shrinks with the contrast the curve keeps (between the two largest areas of
   distinct grey; rounded to whole levels) when it keeps less than `contrast_full` of it, down
   to half: a brightened copy that clips pale bars from 225 to 245 shrinks every difference to a
   third, and a bar present in one chart only would pass under the plain tolerance. A cell (1/16 of
   the side) differs when `cell_min` of its pixels (per 8x8) do. At 64 px first; what that
   accepts is judged again at 128 px (the flat test below is left to 128 px: `quick_rule`).
3. **Decision** on the differing cells (grouped when at most one cell apart):
       identical  no cell differs                                   -> near (whole frame) or crop
       overlay    the largest group's bounding box is at most `region_max` of the frame, covers
                  at most `hidden_max` of the *content* (pixels that are not the plain background
                  the border shows; all of a photo), outside it at most `stray_max` of the frame
                  differs, a group hiding more than `hidden_small` of the content differs
                  over at least `fill_min` of what it covers (unless it is a band at most
                  `band_max` of the side high and twice as wide: a line of text laid over
                  the picture, a watermark, differs over little of its box; and unless both
                  images are photos, all content and neither a screenshot (kernels._drawn),
                  and `photo_fill` is off: the test keeps a
                  pie slice turned from passing as a caption, and a photo has no such slices;
                  and unless at most `quiet_max` of the frame differs in all: what a crop's
                  resampling leaves around fine detail, in a picture with a plain sky),
                  and its interior
                  is not flat in both images over more than `flat_max` (unless `edges_min` of the frame inside
                  its box is not flat, or, when `banner`, it spans the frame's width at its top
                  or bottom): one colour there in one image and another in the other is a bar
                  grown or a slice turned, not a caption, a box or a logo put over the picture;
                  a banner across an edge is put over it, never grown; and, between two
                  drawn figures, not a banner, one image continues across the region's tight
                  box: its worst side runs along a clean step between two flat areas, where the
                  other image shows something else, over at most `seam_max` of it
                  (kernels._seam: a box laid over a chart leaves the chart under it whole; bars
                  of other heights end on the box in both images)    -> overlay
       otherwise  refused: a look-alike differs in scattered places across its content (bars of
                  other heights, slices of other sizes, other words), or over most of it.
   `score` is the share of the content that is the same (1 for an identical frame).

   A pair refused by the flat test alone whose two images both have a plain background is read
   again at 256 px (`fine_flats`): a watermark's letters over a coloured bar are strokes of 1-3 px
   at 128 px, blurred into one flat block; at 256 px they are letters, and a block recoloured is
   still flat. Where it is not flat there, the pair goes on as an overlay.

4. **Second look** (fine.py): a pair accepted here whose two images both have a plain background
   (charts, pages, tables, diagrams: hashing stores their luma at 256 px, compressed) is judged
   again at 256 px, where text 2 px high at 128 px is legible: after refining the alignment and
   matching the blur of the sharper image to the other, the differing cells outside the one
   region are counted, and `fine_stray` of them refuse the pair (other numbers across a table);
   so does a region that hides more than `hidden_max` of the content and differs in `fill_min` of
   its cells that hold any (a table whose every row holds other numbers: the region is the table).
   Photos keep the verdict of steps 1-3.

The parameters (`Rule`) are chosen on the tuning half of tests/benchmarks/bench_dedupe_quality.py
(families of look-alike figures and photos with edited copies) and reported on its held-back half,
whose families the choice never saw.

Flat images (a solid colour, an empty canvas: luma standard deviation below FLAT_STD grey levels)
have no structure to compare; their pHash is degenerate (all AC coefficients ~0, 0 or 1 bit set)
and would match every other flat image. They are left out of the near search and are duplicates
only of identical bytes.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from pipeline.dedupe.hashing import CHROMA_SIDE, DETAIL_SIDE, FLAT_STD, THUMB_BYTES, THUMB_SIDE as SIDE

MIN_OVERLAY = 0.005  # an accepted region where less than this share of the frame differs is not called an overlay
MIN_CROP = 0.01  # an alignment that leaves out less than this is "near", not "crop"
MOVED = 0.25 / DETAIL_SIDE  # an alignment closer than a quarter pixel to the whole frame is the whole frame

KINDS = ("exact", "near", "crop", "overlay")

# An alignment: the span of each image, per axis, that shows the same content, as fractions:
# (a_x0, a_x1, a_y0, a_y1, b_x0, b_x1, b_y0, b_y1). The whole frame is (0, 1) * 4.
WHOLE = (0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0)


# ---- identity: are the aligned pixels the same, apart from one compact region? ---------------


@dataclass(frozen=True)
class Rule:
    """The parameters of the identity rule (module docstring), chosen on the tuning half of
    tests/benchmarks/bench_dedupe_quality.py and reported on its held-back half."""

    luma_tol: float = 12.0  # grey levels a pixel may differ beyond its half-pixel envelope
    chroma_tol: float = 16.0  # the same for Cb and Cr (of 128), when both images are coloured
    cell_min: int = 3  # differing pixels (of CELL_PX^2) that make a cell differ
    region_max: float = 0.35  # the one differing region's bounding box, share of the frame
    hidden_max: float = 0.50  # share of the content the region may cover
    stray_max: float = 0.01  # differing pixels outside the region, share of the frame
    hidden_small: float = 0.10  # a region hiding more of the content than this ...
    fill_min: float = 0.5  # ... must differ over at least this share of its box
    shift: float = 0.5  # the envelope: what a shift of this much of a pixel can show (0.25 or 0.5)
    flat_max: float = 0.9  # an overlay's interior may be flat in both images over at most this share ...
    edges_min: float = 1.0  # ... unless what is not flat there (text, edges) covers this share of the frame
    contrast_full: float = 1.0  # a tone curve keeping less of the contrast than this shrinks the tolerances with it
    band_max: float = 0.15  # a region at most this share of the side high, twice as wide, needs no fill (0: off)
    banner: bool = True  # a region across the frame's width at its top or bottom (or its height at a side) may be flat
    photo_fill: bool = False  # the fill test applies to photos too (False: only where either image has a plain background)
    seam_max: float = 0.35  # a region is put over the picture when one image continues across its sides but this share of the worst one (figures)
    quiet_max: float = 0.002  # a pair where at most this share of the frame differs needs no fill (step 3)
    fine_stray: int = 11  # the second look (fine.py): this many differing cells (of 32 x 32) outside the one region refuse


DEFAULT_RULE = Rule()


def tuning_grid() -> list[Rule]:
    """The rules the benchmark chooses from (the default among them)."""
    base = DEFAULT_RULE
    out = []
    for banner, luma_tol, fill_min, stray_max, flat_max, edges_min, contrast_full, band_max in itertools.product(
            (False, True), (8.0, 12.0), (0.5, 0.65), (0.004, 0.01), (0.9, 1.0), (0.01, 1.0), (0.8, 1.0), (0.0, 0.15)):
        out.append(replace(base, banner=banner, luma_tol=luma_tol, fill_min=fill_min, stray_max=stray_max,
                           flat_max=flat_max, edges_min=edges_min, contrast_full=contrast_full, band_max=band_max))
    # the second look's threshold, around the default (fine.py; its figures barely move with the rest)
    out += [replace(base, fine_stray=n) for n in (8, 14, 18)] + [replace(base, photo_fill=True)]
    # the seam test (kernels._seam), off (1.0) and around the default
    out += [replace(base, seam_max=x) for x in (0.2, 0.5, 1.0)]
    # the quiet pair's waiver of the fill test, off (0) and around the default
    out += [replace(base, quiet_max=x) for x in (0.0, 0.001, 0.004)]
    return out


CHUNK = 64  # pairs judged at once by one thread
CELL_PX = 8  # the differing area is read in cells of CELL_PX x CELL_PX detail pixels
CELLS = DETAIL_SIDE // CELL_PX  # kernels.CELLS


def split_signature(sig: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, THUMB_BYTES) uint8 signatures -> luma (B, 128, 128), Cb and Cr (B, 32, 32), each contiguous."""
    sig = np.asarray(sig, np.uint8).reshape(-1, THUMB_BYTES)
    n, ls, cs = sig.shape[0], DETAIL_SIDE * DETAIL_SIDE, CHROMA_SIDE * CHROMA_SIDE
    return (np.ascontiguousarray(sig[:, :ls]).reshape(n, DETAIL_SIDE, DETAIL_SIDE),
            np.ascontiguousarray(sig[:, ls:ls + cs]).reshape(n, CHROMA_SIDE, CHROMA_SIDE),
            np.ascontiguousarray(sig[:, ls + cs:]).reshape(n, CHROMA_SIDE, CHROMA_SIDE))


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
    flat: np.ndarray  # float32: share of the region's interior that is flat in both images (kernels._flat_inside)
    edges: np.ndarray  # float32: the rest of that interior (edges, text), share of the frame
    seam: np.ndarray  # float32: where the image that continues best breaks across the region's worst side (kernels._seam)
    flat_only: np.ndarray  # bool: refused by the flat test alone (read again at 256 px where both images have a fine luma)


def identity(a: np.ndarray, b: np.ndarray, aligns: np.ndarray, rule: Rule = DEFAULT_RULE,
             side: int = DETAIL_SIDE) -> Identity:
    """Compare the pixels of signature pairs (a[i], b[i], (B, THUMB_BYTES)) at their alignments
    (B, 8): luma with each pixel's half-pixel envelope after the tone curve, chroma too when both
    are coloured; then the differing cells, their largest group, its bounding box and the content
    it covers (module docstring, steps 2 and 3; the loops are kernels.judge_pair). `side` 64 reads
    the luma at half resolution (2x2 means): a quick first look that refuses what differs already
    there."""
    from pipeline.dedupe import kernels  # numba: imported when a pair is first judged

    n = len(a)
    al = np.ascontiguousarray(np.asarray(aligns, np.float32).reshape(n, 8))
    la, cba, cra = split_signature(a)
    lb, cbb, crb = split_signature(b)
    params = np.array([rule.luma_tol, rule.chroma_tol, rule.cell_min, rule.region_max, rule.hidden_max,
                       rule.stray_max, rule.hidden_small, rule.fill_min, rule.shift, rule.flat_max,
                       rule.edges_min, rule.contrast_full, rule.band_max, float(rule.banner),
                       float(rule.photo_fill), rule.seam_max, rule.quiet_max], np.float64)
    f = np.zeros((n, 12), np.float64)
    box = np.zeros((n, 4), np.int64)
    kernels.judge_pairs(la, lb, cba, cbb, cra, crb, al, side, params, f, box)
    return Identity(f[:, 0] > 0, f[:, 1] > 0, *(f[:, i].astype(np.float32) for i in (2, 3)), box,
                    *(f[:, i].astype(np.float32) for i in (4, 5, 6, 7, 8, 9, 10)), f[:, 11] > 0)


@dataclass(frozen=True)
class Verdict:
    accepted: np.ndarray  # bool (B,)
    kind: np.ndarray  # object (B,): near | crop | overlay, None when refused
    score: np.ndarray  # float32 (B,): share of the content that is the same, at the alignment judged
    crop: np.ndarray  # float32 (B,): fraction off the most cropped side of that alignment (0: whole frame)
    align: np.ndarray  # float32 (B, 8): that alignment (a_x0, a_x1, a_y0, a_y1, b_x0, b_x1, b_y0, b_y1)
    identity: Identity | None = None  # the residual map's figures at that alignment
    aligned: np.ndarray | None = None  # bool (B,): refused at the whole frame, an alignment was fitted
    fine: np.ndarray | None = None  # float (B, fine.FIGURES): the second look's figures (fine.fine_pair); NaN: not looked
    swapped: np.ndarray | None = None  # bool (B,): judged b first (its signature sorts first; compare_rows)
    searched: np.ndarray | None = None  # bool (B,): refused at the whole frame, an alignment was searched for
    flat_fine: np.ndarray | None = None  # float (B, 2): the flat test read at 256 px (fine.flat_pair: flat, edges); NaN: not read


class Sides:
    """The two signatures of each pair, picked chunk by chunk in the threads that judge them:
    pair i is (src_a[ia[i]], src_b[ib[i]]), each (THUMB_BYTES,) uint8; `src_*` is an array of
    signatures or anything indexed by an array of rows the same way (decisions.ThumbColumn,
    ThumbFile), so a batch of pairs is never gathered whole. `swap` (set by `order`): the pairs
    judged the other way round."""

    def __init__(self, src_a, ia: np.ndarray, src_b, ib: np.ndarray):
        self.src_a, self.ia, self.src_b, self.ib = src_a, np.asarray(ia), src_b, np.asarray(ib)
        self.swap: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ia)

    def pick(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The signatures of pairs `rows` ((k, THUMB_BYTES) each) in the order they are judged."""
        x = np.asarray(self.src_a[self.ia[rows]], np.uint8).reshape(-1, THUMB_BYTES)
        y = np.asarray(self.src_b[self.ib[rows]], np.uint8).reshape(-1, THUMB_BYTES)
        if self.swap is not None:
            s = self.swap[rows]
            if s.any():
                x, y = np.where(s[:, None], y, x), np.where(s[:, None], x, y)
        return x, y

    def fines(self, rows: np.ndarray) -> tuple[list, list] | None:
        """The packed 256 px lumas (hashing.pack_fine; None for an image without) of pairs `rows`,
        in the order they are judged; None when the sources keep none (`fine(rows)`, as
        decisions.ThumbColumn)."""
        if not (hasattr(self.src_a, "fine") and hasattr(self.src_b, "fine")):
            return None
        x, y = list(self.src_a.fine(self.ia[rows])), list(self.src_b.fine(self.ib[rows]))
        if self.swap is not None:
            for k, w in enumerate(self.swap[rows]):
                if w:
                    x[k], y[k] = y[k], x[k]
        return x, y

    def order(self) -> np.ndarray:
        """Sets and returns `swap`: the pairs whose a's signature sorts after b's (sorts_after),
        read chunk by chunk on the threads."""
        n = len(self)
        swap = np.zeros(n, bool)

        def read(s: int) -> None:
            x, y = self.pick(np.arange(s, min(s + CHUNK * 4, n)))
            swap[s:s + CHUNK * 4] = sorts_after(x, y)

        starts = range(0, n, CHUNK * 4)
        list(_threads().map(read, starts)) if len(starts) > 1 else [read(s) for s in starts]
        self.swap = swap
        return swap


def compare(a: np.ndarray, b: np.ndarray, aspect_a: np.ndarray | None = None, aspect_b: np.ndarray | None = None,
            chroma_a: np.ndarray | None = None, chroma_b: np.ndarray | None = None,
            rule: Rule = DEFAULT_RULE, fine_a: list | None = None, fine_b: list | None = None,
            regions_a: np.ndarray | None = None, regions_b: np.ndarray | None = None) -> Verdict:
    """Judge pairs of signatures: a and b are (B, THUMB_BYTES) uint8 (hashing.HashedImage.thumb),
    pair i is (a[i], b[i]). Each pair is judged at the whole frame; a pair refused there is aligned
    (module docstring, step 1) and judged again at its alignment. `aspect_*` and `chroma_*` (the
    original's width / height, the mean Cb and Cr) are accepted from the engine's callers but not
    read: the alignment is fitted on the pixels, and the chroma planes are compared pixel by pixel.
    `fine_*` (hashing.HashedImage.fine, None for an image without): the accepted pairs whose two
    images both have one get the second look (fine.py), which may refuse them. `regions_*`
    ((B, 2) top_hash, bottom_hash as hashing computed them) point the banner test at an edge;
    without them they are computed from the signatures."""
    a = np.asarray(a, np.uint8).reshape(-1, THUMB_BYTES)
    b = np.asarray(b, np.uint8).reshape(-1, THUMB_BYTES)
    rows = np.arange(a.shape[0])
    return compare_rows(Sides(a, rows, b, rows), rule, fine_a, fine_b, regions_a, regions_b)


def compare_rows(sides: Sides, rule: Rule = DEFAULT_RULE, fine_a: list | None = None, fine_b: list | None = None,
                 regions_a: np.ndarray | None = None, regions_b: np.ndarray | None = None) -> Verdict:
    """compare() of the pairs `sides` picks (the engine's: rows of its signature column, never
    gathered whole); the Verdict's `swapped` says which pairs were judged b first."""
    n = len(sides)
    if n == 0:
        z = np.zeros(0, np.float32)
        return Verdict(np.zeros(0, bool), np.full(0, None, dtype=object), z, z,
                       np.zeros((0, 8), np.float32), _empty(0), np.zeros(0, bool), swapped=np.zeros(0, bool),
                       searched=np.zeros(0, bool), flat_fine=np.zeros((0, 2)))
    # The alignment is fitted one way (where b's frame lies in a's), so each pair is judged in one
    # order whichever order it comes in: the signature that sorts first is a. The alignment is
    # handed back in the caller's order.
    swap = sides.order()
    if swap.any():
        if fine_a is not None and fine_b is not None:
            fine_a, fine_b = ([y if w else x for x, y, w in zip(fine_a, fine_b, swap)],
                              [x if w else y for x, y, w in zip(fine_a, fine_b, swap)])
        if regions_a is not None and regions_b is not None:
            regions_a, regions_b = (np.where(swap[:, None], regions_b, regions_a),
                                    np.where(swap[:, None], regions_a, regions_b))
    verdict = _compare(sides, rule, fine_a, fine_b, regions_a, regions_b)
    verdict.align[swap] = verdict.align[swap][:, [4, 5, 6, 7, 0, 1, 2, 3]]
    return replace(verdict, swapped=swap)


def sorts_after(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: does a's signature sort after b's (bytes, lexicographically)?"""
    differ = a != b
    first = differ.argmax(axis=1)
    rows = np.arange(a.shape[0])
    return differ[rows, first] & (a[rows, first] > b[rows, first])


def _compare(sides: Sides, rule: Rule, fine_a: list | None, fine_b: list | None,
             regions_a: np.ndarray | None, regions_b: np.ndarray | None) -> Verdict:
    """compare() of pairs in the order they are judged in."""
    n = len(sides)
    kind = np.full(n, None, dtype=object)
    align = np.tile(np.array(WHOLE, np.float32), (n, 1))
    # pairs are picked by row inside each chunk's thread (no copy of the whole batch)
    figures = _cascade(sides, align, rule, np.arange(n))
    aligned = np.zeros(n, bool)
    searched = ~figures.accepted
    todo = np.flatnonzero(searched)
    # The fit runs one way (b's frame in a's) and may hold only one way: both are tried, the
    # second's alignment mirrored into this order (judging at an alignment is the same either way).
    # Both ways are fitted at once (each image smoothed once for both); the second is judged only
    # for the pairs the first leaves refused.
    fitted, searched_rows = (_aligned(sides, todo) if todo.size else None), todo
    for way in (0, 1):
        if not todo.size:
            break
        at = np.searchsorted(searched_rows, todo)
        found, ok = fitted[2 * way][at], fitted[2 * way + 1][at]
        if way == 1:
            found = found[:, [4, 5, 6, 7, 0, 1, 2, 3]]
        # An alignment is judged with at least the half-pixel envelope (a resampled thumbnail is
        # smoother than one made at its size): under a stricter rule, only a crop of MIN_CROP or more
        # is judged, so that a sub-pixel move cannot loosen the whole frame's verdict.
        moved = np.abs(found - np.array(WHOLE, np.float32)).max(axis=1) > MOVED
        cropped = _crops_of(found) >= MIN_CROP
        sel = ok & moved & (cropped | (rule.shift >= 0.5))
        aligned[todo[ok]] = True
        if sel.any():
            idx = todo[sel]
            again = _cascade(sides, found[sel], rule, idx)
            # the alignment stands when it is accepted there, or shows more of the content the same
            better = again.accepted | (again.score > figures.score[idx])
            pos = idx[better]
            align[pos] = found[sel][better]
            for f in Identity.__dataclass_fields__:
                getattr(figures, f)[pos] = getattr(again, f)[better]
        todo = todo[~figures.accepted[todo]]
    _banners(sides, figures, align, rule, regions_a, regions_b)

    def fines(idx: np.ndarray) -> tuple[list, list] | None:  # the caller's lists, else the sources' own
        if fine_a is not None and fine_b is not None:
            return [fine_a[k] for k in idx], [fine_b[k] for k in idx]
        return sides.fines(idx)

    flat_fine = np.full((n, 2), np.nan)
    idx = np.flatnonzero(figures.flat_only & ~figures.accepted)
    if idx.size and (looked := fines(idx)) is not None:
        flat_fine[idx] = fine_flats(*looked, align[idx], figures.box[idx], rule)
        ok = idx[_not_flat(flat_fine[idx], rule)]
        figures.accepted[ok] = figures.region[ok] = True
        figures.flat_only[ok] = False  # `flat` keeps the 128 px figure; flat_fine has the 256 px one
    accepted = figures.accepted
    crop = _crops_of(align).astype(np.float32)
    kind[:] = _kinds(figures.region, figures.differing, align)
    from pipeline.dedupe.fine import FIGURES
    fine = np.full((n, FIGURES), np.nan)
    idx = np.flatnonzero(accepted)
    if idx.size and (looked := fines(idx)) is not None:
        fine[idx] = _second_looks(*looked, align[idx], rule)
        accepted = accepted & ~_fine_refuses(fine, rule)
    kind[~accepted] = None
    crop[~accepted] = 0.0
    return Verdict(accepted, kind, figures.score.astype(np.float32), crop, align, figures, aligned, fine,
                   searched=searched, flat_fine=flat_fine)


def _kinds(region: np.ndarray, differing: np.ndarray, aligns: np.ndarray) -> np.ndarray:
    """The kind of accepted pairs (object array) at their alignments: an overlay where a region
    differs, unless it changes almost nothing (a few cells of re-encoding noise, under MIN_OVERLAY
    of the frame); else a crop (MIN_CROP or more off a side) or near."""
    region = np.asarray(region) & (np.asarray(differing) >= MIN_OVERLAY)
    return np.where(region, "overlay", np.where(_crops_of(aligns) >= MIN_CROP, "crop", "near")).astype(object)


def fine_flats(fine_a: list, fine_b: list, aligns: np.ndarray, boxes: np.ndarray, rule: Rule = DEFAULT_RULE) -> np.ndarray:
    """The flat test read again at 256 px (fine.flat_pair) for pairs the 128 px look refused by it
    alone: (B, 2) flat, edges; NaN where either image has no fine luma (a photo). A watermark's
    letters laid over a coloured bar are 1-3 px strokes at 128 px, blurred into one flat block
    there; at 256 px they are letters. A bar grown or a slice turned is flat at every size."""
    from pipeline.dedupe.fine import flat_looks
    return flat_looks(fine_a, fine_b, aligns, boxes, rule.luma_tol)


def _not_flat(flat_fine: np.ndarray, rule: Rule) -> np.ndarray:
    """Which fine_flats rows pass the flat test (NaN rows do not)."""
    with np.errstate(invalid="ignore"):
        return (flat_fine[:, 0] <= rule.flat_max) | (flat_fine[:, 1] >= rule.edges_min)


def _crops_of(aligns: np.ndarray) -> np.ndarray:
    """How much of a frame each alignment (rows of 8) leaves out, the largest side (fraction, float64)."""
    al = np.asarray(aligns, np.float64).reshape(-1, 8)
    if al.shape[0] == 0:
        return np.zeros(0)
    return np.maximum(np.concatenate([al[:, 0::2], 1 - al[:, 1::2]], axis=1).max(axis=1), 0.0)


BANNER_HINT = 8  # bits: the top (bottom) 75 % region hashes this close say what a bottom (top) banner left alone
BANNER_FILL = 0.5  # a banner hides the picture: at least this share of its strip differs


def _banners(sides: Sides, figures: Identity, align: np.ndarray, rule: Rule,
             regions_a: np.ndarray | None = None, regions_b: np.ndarray | None = None) -> None:
    """Step 3's last chance for a refused pair whose top (bottom) 75 % hashes close to the other's
    (the candidate search's region routes) at the whole frame: a full-width banner over its bottom
    (top) edge, 10-25 % of the height, is tested directly (kernels.banner_pair: the tone curve
    fitted without the strip, nothing outside it may differ beyond `stray_max`, the strip must be
    one flat colour in one image only, an opaque bar (between two pictures, with no drawn
    background in either, in at least one: the sky a bar hides can be as flat), and differ over
    at least BANNER_FILL of it). Accepted pairs become overlays of that strip at the whole frame, in place."""
    from pipeline.dedupe import kernels
    from pipeline.dedupe.hashing import region_hashes

    todo = np.flatnonzero(~figures.accepted)  # at the whole frame, whatever alignment was tried
    if todo.size == 0:
        return
    if regions_a is None or regions_b is None:
        regions_a, regions_b = (np.array([region_hashes(t)[1:] for t in _reduce(split_signature(x)[0])], np.int64)
                                .reshape(-1, 2) for x in sides.pick(todo))
    else:
        regions_a, regions_b = np.asarray(regions_a, np.int64)[todo], np.asarray(regions_b, np.int64)[todo]
    d_top = _bits(regions_a[:, 0] ^ regions_b[:, 0])
    d_bottom = _bits(regions_a[:, 1] ^ regions_b[:, 1])
    # the top left alone: the banner is at the bottom (edge 1); the bottom left alone: at the top
    edges = np.where(np.minimum(d_top, d_bottom) <= BANNER_HINT, np.where(d_top <= d_bottom, 1, 0), -1)
    sel = np.flatnonzero(edges >= 0)
    if sel.size == 0:
        return
    res = np.zeros((sel.size, 4))
    rows, picked = todo[sel], edges[sel].astype(np.int64)

    def test(s: int) -> None:  # a chunk per thread (the kernel lets go of the GIL)
        x, y = sides.pick(rows[s:s + CHUNK])
        la, lb = split_signature(x)[0], split_signature(y)[0]
        kernels.banner_pairs(la, lb, picked[s:s + CHUNK], rule.luma_tol, rule.contrast_full, rule.stray_max,
                             res[s:s + CHUNK])

    starts = range(0, sel.size, CHUNK)
    list(_threads().map(test, starts)) if len(starts) > 1 else test(0)
    for k, (found, rows, outside, fill) in zip(sel, res):
        if not found or fill < BANNER_FILL:
            continue
        i = todo[k]
        cells = int(np.ceil(rows * CELLS / DETAIL_SIDE))
        align[i] = WHOLE
        figures.accepted[i] = figures.region[i] = True
        figures.box[i] = (0, cells, 0, CELLS) if edges[k] == 0 else (CELLS - cells, CELLS, 0, CELLS)
        figures.box_share[i] = cells / CELLS
        figures.stray[i] = outside
        figures.fill[i] = fill
        figures.score[i] = max(float(figures.score[i]), 1.0 - rows / DETAIL_SIDE)


def _bits(x: np.ndarray) -> np.ndarray:
    """Set bits per int64 (popcount)."""
    v = x.view(np.uint64)
    return np.unpackbits(v.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)


def _aligned(sides: Sides, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fitted alignments of each pair `rows` (kernels.align_pair) both ways, and whether each
    fit held: (b's frame in a's, held, a's frame in b's, held)."""
    from pipeline.dedupe import kernels
    out = np.tile(np.array(WHOLE, np.float64), (len(rows), 1))
    back = out.copy()
    ok = np.zeros(len(rows), bool)
    ok_back = np.zeros(len(rows), bool)

    def fit(s: int) -> None:  # a chunk's luma is picked and split off in its own thread
        x, y = sides.pick(rows[s:s + CHUNK])
        la, lb = split_signature(x)[0], split_signature(y)[0]
        kernels.align_pairs_both(la, lb, out[s:s + CHUNK], ok[s:s + CHUNK], back[s:s + CHUNK], ok_back[s:s + CHUNK])

    starts = range(0, len(rows), CHUNK)
    list(_threads().map(fit, starts)) if len(starts) > 1 else fit(0)
    return out.astype(np.float32), ok, back.astype(np.float32), ok_back


_POOL_THREADS: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    """Chunks are judged on every core: numpy lets go of the GIL for the whole-array operations."""
    global _POOL_THREADS
    if _POOL_THREADS is None:
        _POOL_THREADS = ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                               else os.cpu_count() or 1), thread_name_prefix="verify")
    return _POOL_THREADS


def _in_chunks(sides: Sides | np.ndarray, b: np.ndarray | None, aligns: np.ndarray, rule: Rule, side: int,
               rows: np.ndarray) -> Identity:
    """`identity` of the pairs `rows` (of `sides`, or of the arrays sides=a and b) at aligns[i],
    CHUNK pairs per thread."""
    if not isinstance(sides, Sides):
        sides = Sides(sides, np.arange(len(sides)), b, np.arange(len(b)))
    starts = range(0, len(rows), CHUNK)
    judge = lambda s: identity(*sides.pick(rows[s:s + CHUNK]), aligns[s:s + CHUNK], rule, side)  # noqa: E731
    parts = list(_threads().map(judge, starts)) if len(starts) > 1 else [judge(0)]
    return Identity(*(np.concatenate([getattr(p, f) for p in parts]) for f in Identity.__dataclass_fields__))


def _cascade(sides: Sides, aligns: np.ndarray, rule: Rule, rows: np.ndarray) -> Identity:
    """`identity` at 64 px first (a quarter of the pixels); what it accepts is judged again at
    128 px, where the words of a page and the ticks of a chart show. A pair refused at 64 px keeps
    that verdict (what differs there differs at 128 px too), with one exception: the 64 px look
    does not refuse a region for being flat in both images (`quick_rule`)."""
    first = _in_chunks(sides, None, aligns, quick_rule(rule), SIDE, rows)
    again = np.flatnonzero(first.accepted)
    if again.size == 0:
        return first
    second = _in_chunks(sides, None, aligns[again], rule, DETAIL_SIDE, rows[again])
    out = {f: getattr(first, f).copy() for f in Identity.__dataclass_fields__}
    for f in Identity.__dataclass_fields__:
        out[f][again] = getattr(second, f)
    return Identity(**out)


def quick_rule(rule: Rule) -> Rule:
    """The rule of the 64 px look: `rule` without the flat test (flat_max 1). Halving the side
    averages a texture into one tone: the letters of a watermark over a white page, 2-3 px strokes
    at 128 px, are a flat grey block at 64 px, which the flat test takes for a bar grown. A block
    recoloured is flat at both sides, so the 128 px look still refuses it."""
    return replace(rule, flat_max=1.0)


LOOK_CHUNK = 16  # pairs per thread at a time in the second look (a figure pair costs 1-5 ms)


def _second_looks(fine_a: list, fine_b: list, aligns: np.ndarray, rule: Rule) -> np.ndarray:
    """fine.second_look of the pairs, LOOK_CHUNK pairs per thread (the compiled loop lets go of the GIL)."""
    from pipeline.dedupe.fine import second_look
    starts = range(0, len(fine_a), LOOK_CHUNK)
    look = lambda s: second_look(fine_a[s:s + LOOK_CHUNK], fine_b[s:s + LOOK_CHUNK], aligns[s:s + LOOK_CHUNK],  # noqa: E731
                                 rule.luma_tol, rule.fine_stray, rule.hidden_max, rule.fill_min)
    return np.concatenate(list(_threads().map(look, starts)) if len(starts) > 1 else [look(0)])


def _fine_refuses(fine: np.ndarray, rule: Rule) -> np.ndarray:
    """The second look's figures (fine.fine_pair; NaN rows: not looked) that refuse a pair:
    `fine_stray` stray cells or more, or the one region hiding more than `hidden_max` of the content
    and differing in at least `fill_min` of its cells that hold any (other words in every cell of a
    table: the region is the table), or the region an edge moved (fine._moved: a bar grown)."""
    looked = ~np.isnan(fine[:, 0])
    f = np.nan_to_num(fine)
    return looked & ((f[:, 0] >= rule.fine_stray) | ((f[:, 4] > rule.hidden_max) & (f[:, 5] >= rule.fill_min))
                     | (f[:, 6] > 0))


def _reduce(detail: np.ndarray) -> np.ndarray:
    """(B, 128, 128) uint8 luma -> (B, 64, 64) float32 (2x2 means)."""
    n, f = detail.shape[0], DETAIL_SIDE // SIDE
    return detail.reshape(n, SIDE, f, SIDE, f).mean(axis=(2, 4), dtype=np.float32)


def _empty(n: int) -> Identity:
    """Figures for n pairs not judged yet (zeros)."""
    return Identity(**{f: np.zeros((n, 4), np.int64) if f == "box" else np.zeros(n, bool if f in ("accepted", "region",
                                                                                                 "flat_only")
                                                                                  else np.float32)
                       for f in Identity.__dataclass_fields__})


def explain(a: np.ndarray, b: np.ndarray, aspect_a: float | None = None, aspect_b: float | None = None,
            chroma_a=None, chroma_b=None, rule: Rule = DEFAULT_RULE, fine_a: bytes | None = None,
            fine_b: bytes | None = None) -> dict:
    """Every number behind the verdict on one pair of signatures, for `rewardhouse dedupe --explain`."""
    aspects = (np.array([aspect_a]), np.array([aspect_b])) if aspect_a and aspect_b else (None, None)
    chromas = (np.array([chroma_a]), np.array([chroma_b])) if chroma_a is not None and chroma_b is not None else (None, None)
    v = compare(a[None], b[None], *aspects, *chromas, rule=rule, fine_a=[fine_a], fine_b=[fine_b])
    la, lb = _reduce(split_signature(a)[0])[0], _reduce(split_signature(b)[0])[0]
    sa, sb = float(la.std()), float(lb.std())
    f = v.identity
    first = compare(a[None], b[None], *aspects, *chromas, rule=rule)  # without the second look
    out = {
        "accepted": bool(v.accepted[0]),
        "kind": v.kind[0],
        "first_look_kind": first.kind[0],
        "score": round(float(v.score[0]), 4),
        "crop_per_side": round(float(_crops_of(v.align[:1])[0]), 3),
        "aligned": bool(v.aligned[0]),  # refused at the whole frame: an alignment was fitted
        "searched": bool(v.searched[0]),  # refused at the whole frame: an alignment was searched for (fitted or not)
        "alignment": tuple(round(float(x), 4) for x in v.align[0]),
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
        "flat": round(float(f.flat[0]), 3),
        "edges": round(float(f.edges[0]), 4),
        "seam": round(float(f.seam[0]), 3),
        "flat_at_256": (None if np.isnan(v.flat_fine[0, 0]) else
                        {"flat": round(float(v.flat_fine[0, 0]), 3), "edges": round(float(v.flat_fine[0, 1]), 4)}),
        "second_look": (None if np.isnan(v.fine[0, 0]) else
                        {"stray_cells": int(v.fine[0, 0]), "differing_cells": int(v.fine[0, 1]),
                         "differing": round(float(v.fine[0, 2]), 4), "alignment_refined": bool(v.fine[0, 3] == 2),
                         "hidden": round(float(v.fine[0, 4]), 3), "hidden_max": rule.hidden_max,
                         "fill": round(float(v.fine[0, 5]), 3), "fill_min": rule.fill_min,
                         "refuses_at": rule.fine_stray, "edge_moved": bool(v.fine[0, 6] > 0)}),
    })
    return out


def warm() -> None:
    """Compile (or load from the cache) every compiled loop a pair can meet: the first look's
    (kernels.py) and the second look's (fine.py), the signature's (sigkernels.py) and the
    candidate search's per-image cap (capkernel.py). A new checkout pays the compilation here,
    once, rather than inside a timed step."""
    from pipeline.dedupe import capkernel, fine, hashing, kernels

    kernels.warm()
    fine.warm()
    hashing.warm()
    capkernel.warm()
