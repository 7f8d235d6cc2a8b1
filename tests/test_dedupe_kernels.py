"""The compiled loops of the verification (pipeline/dedupe/kernels.py) on their own: the envelope
a shift can show, the tone curve, the alignment fit recovering known crops, and a batch judged on
several threads giving the same figures as one pair at a time."""

import numpy as np
import pytest

from pipeline.dedupe import kernels
from pipeline.dedupe.hashing import hash_bytes
from pipeline.dedupe.verify import DEFAULT_RULE, WHOLE, _in_chunks, identity, split_signature

from tests.dedupe_images import bar_chart, crop, encode, photo

pytestmark = pytest.mark.fast


def luma(im) -> np.ndarray:
    return split_signature(np.frombuffer(hash_bytes("x", encode(im)).thumb, np.uint8))[0][0]


def test_the_envelope_is_what_a_shift_of_that_much_of_a_pixel_can_show():
    x = np.full((8, 8), 200, np.uint8)
    x[4, 4] = 100  # one dark pixel: a shift moves its value towards 200, its neighbours' towards 100
    for quarters, reach in ((1, 25), (2, 50), (4, 100)):
        lo, hi = kernels.envelope(x, quarters)
        assert (lo[4, 4], hi[4, 4]) == (100, 100 + reach)
        assert (lo[3, 4], hi[3, 4]) == (200 - reach, 200)
        assert (lo[0, 0], hi[0, 0]) == (200, 200)  # nothing near it moves
        assert lo[3, 3] == 200  # a diagonal neighbour is not within the shift


def test_the_tone_curve_maps_a_brightness_edit_and_ignores_an_overlay():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 200, (64, 64)).astype(np.uint8)
    y = np.clip(x.astype(np.int32) * 1.2 + 10, 0, 255).astype(np.uint8)
    y[:8, :8] = 255  # an overlay in a corner
    table, slope, kept, stretch = kernels.tone_table(x, y, np.ones((64, 64), bool), False)
    assert 1.1 <= slope <= 1.3 and 1.1 <= kept <= 1.3  # the contrast the curve keeps: two largest bins, whole range
    assert stretch in (slope, 1.0)  # the slope, unless one of the two bins ends near black or white
    for v in (20, 80, 150):
        assert abs(int(table[v]) - (v * 1.2 + 10)) <= 2
    assert all(np.diff(table.astype(np.int32)) >= 0)  # non-decreasing
    same, one, whole, _ = kernels.tone_table(x, x, np.ones((64, 64), bool), False)
    assert one == pytest.approx(1.0) and whole == pytest.approx(1.0, abs=0.05)
    # the identity between the lowest and highest bins' means (beyond them the curve is flat: clipping)
    assert all(abs(int(same[v]) - v) <= 1 for v in range(16, 190, 8))


def test_a_copy_that_flattens_the_contrast_is_read_with_a_smaller_tolerance():
    """Pale bars (225) on white, brightened until they sit at 245: where a bar is taller in one
    chart than in the other the two differ by 10 levels in the copy's greys, under a tolerance of
    12; the tolerance shrinks with the contrast the tone curve keeps, so they differ there."""
    x = np.full((64, 64), 255, np.uint8)
    for c in (8, 24, 40):
        x[20:60, c:c + 8] = 225  # three bars
    other = np.full((64, 64), 255, np.uint8)
    for c, top in ((8, 20), (24, 20), (40, 40)):
        other[top:60, c:c + 8] = 245  # a brightened chart whose third bar is shorter
    lo, hi = kernels.envelope(x, 2)
    olo, ohi = kernels.envelope(other, 2)
    diff, n = kernels.differs(x, lo, hi, other, olo, ohi, 12.0, 1.0)
    assert diff[22:38, 42:46].all() and n == diff[18:42, 38:50].sum()  # the third bar's top, and only it
    copy = np.where(x == 225, 245, 255).astype(np.uint8)  # the brightened copy of the same chart
    clo, chi = kernels.envelope(copy, 2)
    assert kernels.differs(x, lo, hi, copy, clo, chi, 12.0, 1.0)[1] == 0


@pytest.mark.parametrize("forward", [True, False])
def test_a_plain_frame_is_no_copy_of_a_star_field(forward):
    """Sparse bright dots on black against a plain dark frame: the curve from the dots' image onto
    the plain one maps every grey to one value (it keeps none of the contrast) and would find
    nothing differing; such a reading only stands when every reading flattens the content."""
    rng = np.random.default_rng(5)
    stars = np.zeros((64, 64), np.uint8)
    dots = rng.random((64, 64)) < 0.03
    stars[dots] = 200
    plain = np.full((64, 64), 30, np.uint8)
    a, b = (stars, plain) if forward else (plain, stars)
    alo, ahi = kernels.envelope(a, 2)
    blo, bhi = kernels.envelope(b, 2)
    diff, n = kernels.differs(a, alo, ahi, b, blo, bhi, 12.0, 1.0)
    assert diff[dots].mean() > 0.9 and n == diff.sum()


@pytest.mark.parametrize("forward", [True, False])
def test_a_banner_that_hides_most_of_a_band_of_grey_does_not_pull_the_curve(forward):
    """The top quarter is the only place with values 200..215 but for a few pixels elsewhere (the
    rest lies in 0..100 and 220..255); a bar of 128 over it makes 200..215 map to 128 in a curve
    fitted on every pixel (still non-decreasing), and those few pixels differ. Fitted without the
    strip, only the bar differs."""
    rng = np.random.default_rng(3)
    blocks = np.where(rng.random((16, 16)) < 0.5, rng.integers(0, 101, (16, 16)), rng.integers(220, 256, (16, 16)))
    blocks[:4] = rng.integers(200, 216, (4, 16))
    blocks[[6, 9, 13], [3, 11, 7]] = 208  # the few blocks of that grey elsewhere
    x = np.kron(blocks, np.ones((4, 4))).astype(np.uint8)  # 4-pixel blocks: the envelope stays tight inside
    y = x.copy()
    y[:16] = 128  # the bar
    a, b = (x, y) if forward else (y, x)
    alo, ahi = kernels.envelope(a, 2)
    blo, bhi = kernels.envelope(b, 2)
    diff, n = kernels.differs(a, alo, ahi, b, blo, bhi, 12.0, 1.0)
    assert not diff[17:].any()  # nothing outside the bar (row 16 is within the envelope's reach)
    assert diff[:15].mean() > 0.9 and n == diff[:17].sum()


@pytest.mark.parametrize("box", [(0.04, 0.96, 0.04, 0.96), (0.0, 0.94, 0.0, 1.0), (0.03, 1.0, 0.0, 0.95),
                                 (0.1, 1.0, 0.02, 0.98)])
@pytest.mark.parametrize("make", [lambda: photo(21), lambda: bar_chart([0.3, 0.7, 0.5, 0.9, 0.2])])
def test_the_fit_finds_a_crop_both_ways_within_a_quarter_pixel(box, make):
    im = make()
    w, h = im.size
    x0, x1, y0, y1 = box
    cut = im.crop((round(x0 * w), round(y0 * h), round(x1 * w), round(y1 * h)))
    a, b = luma(im), luma(cut)
    out = np.array(WHOLE, np.float64)
    assert kernels.align_pair(a, b, out)
    tol = 0.25 / 128 + 1 / min(w, h)  # a quarter of a thumbnail pixel, and the crop's rounding to pixels
    assert np.allclose(out[:4], box, atol=tol) and np.allclose(out[4:], (0, 1, 0, 1), atol=tol), out
    back = np.array(WHOLE, np.float64)  # the other way round: a's frame in b's
    assert kernels.align_pair(b, a, back)
    assert np.allclose(back[4:], box, atol=tol) and np.allclose(back[:4], (0, 1, 0, 1), atol=tol), back


def test_two_different_photos_are_not_aligned_into_a_crop():
    out = np.array(WHOLE, np.float64)
    ok = kernels.align_pair(luma(photo(31)), luma(photo(32)), out)
    assert not ok or max(out[0], 1 - out[1], out[2], 1 - out[3], out[4], 1 - out[5], out[6], 1 - out[7]) <= 0.15


def test_a_batch_on_threads_gives_the_figures_of_one_pair_at_a_time():
    ims = [photo(40 + i) for i in range(6)] + [bar_chart([0.2 + 0.1 * i, 0.5, 0.7]) for i in range(6)]
    sigs = [np.frombuffer(hash_bytes(str(i), encode(im, "JPEG", 80)).thumb, np.uint8) for i, im in enumerate(ims)]
    crops = [np.frombuffer(hash_bytes("c", encode(crop(im, 0.03))).thumb, np.uint8) for im in ims]
    a = np.stack(sigs * 12)  # 144 pairs: several chunks
    b = np.stack((sigs[1:] + sigs[:1] + crops) * 6)
    aligns = np.tile(np.array(WHOLE, np.float32), (len(a), 1))
    aligns[1::3] = (0.03, 0.97, 0.03, 0.97, 0, 1, 0, 1)
    batch = _in_chunks(a, b, aligns, DEFAULT_RULE, 128, np.arange(len(a)))  # chunks of verify.CHUNK pairs on the threads
    rows = np.random.default_rng(0).permutation(len(a))  # pairs picked by row inside the threads
    picked = _in_chunks(a, b, aligns[rows], DEFAULT_RULE, 128, rows)
    for i in range(0, len(a), 7):
        one = identity(a[i:i + 1], b[i:i + 1], aligns[i:i + 1], DEFAULT_RULE)
        for f in ("accepted", "region", "score", "differing", "box", "hidden", "fill", "stray"):
            assert np.array_equal(getattr(one, f)[0], getattr(batch, f)[i]), (i, f)
            assert np.array_equal(getattr(batch, f)[rows[i]], getattr(picked, f)[i]), (i, f)


def test_the_verdict_does_not_depend_on_which_image_comes_first():
    """Both orders of every pair: the same acceptance and kind, and the score within a hair (the
    tone curve is fitted both ways and the better reading stands; at a crop, the image resampled
    is the one cropped from, so the score moves by a few pixels)."""
    from pipeline.dedupe.verify import compare

    from tests.dedupe_images import blur, caption_bar, grey, half, pie_chart

    ims = [photo(61), bar_chart([0.3, 0.6, 0.45, 0.8]), pie_chart([3, 5, 2, 4])]
    edits = [lambda im: encode(crop(im, 0.05), "JPEG", 85), lambda im: encode(caption_bar(im), "JPEG", 90),
             lambda im: encode(blur(im)), lambda im: encode(grey(half(im)), "JPEG", 80)]
    sig = lambda data: np.frombuffer(hash_bytes("x", data).thumb, np.uint8)  # noqa: E731
    a = np.stack([sig(encode(im)) for im in ims for _ in edits] + [sig(encode(ims[0]))])
    b = np.stack([sig(edit(im)) for im in ims for edit in edits] + [sig(encode(photo(62)))])
    one, other = compare(a, b), compare(b, a)
    assert list(one.kind) == list(other.kind) and np.array_equal(one.accepted, other.accepted)
    assert np.allclose(one.score, other.score, atol=0.01)
    assert one.accepted[:-1].sum() >= len(a) - 3 and not one.accepted[-1]


def _page_with_block(seed: int, box=(60, 196, 40, 216)) -> np.ndarray:
    """A 256 px white page whose only content is a block of dark strokes (a table's words)."""
    rng = np.random.default_rng(seed)
    x = np.full((256, 256), 250, np.uint8)
    y0, y1, x0, x1 = box
    for row in range(y0, y1, 8):  # lines of "words": dark runs 2 px high
        for col in range(x0, x1, 12):
            if rng.random() < 0.5:
                x[row:row + 2, col:col + rng.integers(4, 10)] = 30
    return x


def test_the_second_look_refuses_a_region_that_is_all_of_the_content():
    """Two pages whose only content is one block of other words differ in one compact region, with
    no stray cell: the region hides all the content and differs in most of its cells, so the
    second look refuses it. A box of other words over a quarter of one page's block does not."""
    from pipeline.dedupe import fine

    rule = DEFAULT_RULE
    a, b = _page_with_block(1), _page_with_block(2)
    boxed = a.copy()
    boxed[60:100, 40:100] = _page_with_block(3)[60:100, 40:100]
    res = np.zeros((2, fine.FIGURES))
    fine.fine_pairs(np.stack([a, a]), np.stack([b, boxed]), np.tile(np.array(WHOLE, np.float64), (2, 1)),
                    rule.luma_tol, rule.fine_stray, rule.hidden_max, rule.fill_min, res)
    other, box = res
    assert other[0] < rule.fine_stray and other[4] > rule.hidden_max and other[5] >= rule.fill_min, other
    assert box[0] < rule.fine_stray and box[4] <= rule.hidden_max, box
    from pipeline.dedupe.verify import _fine_refuses
    assert _fine_refuses(res, rule).tolist() == [True, False]


def test_both_ways_at_once_fit_what_two_one_way_calls_fit():
    """kernels.align_pairs_both (each image smoothed once for both ways, as verify fits them) gives
    the alignments and verdicts of align_pairs one way and then the other, number for number: on
    crops either way round, look-alike charts, unrelated photos and a pair with nothing to fit."""
    ims = [photo(50), crop(photo(50), 0.06), bar_chart([0.2, 0.6, 0.4]), bar_chart([0.5, 0.3, 0.8]), photo(51),
           crop(bar_chart([0.3, 0.7, 0.5, 0.6]), 0.05), bar_chart([0.3, 0.7, 0.5, 0.6])]
    lumas = [luma(im) for im in ims]
    pairs = [(0, 1), (1, 0), (2, 3), (0, 4), (5, 6), (6, 5), (2, 2)]
    la = np.stack([lumas[i] for i, _ in pairs])
    lb = np.stack([lumas[j] for _, j in pairs])
    whole = np.tile(np.array(WHOLE, np.float64), (len(pairs), 1))
    out, ok, back, ok_back = whole.copy(), np.zeros(len(pairs), bool), whole.copy(), np.zeros(len(pairs), bool)
    kernels.align_pairs_both(la, lb, out, ok, back, ok_back)
    one, one_ok, other, other_ok = whole.copy(), np.zeros(len(pairs), bool), whole.copy(), np.zeros(len(pairs), bool)
    kernels.align_pairs(la, lb, one, one_ok)
    kernels.align_pairs(lb, la, other, other_ok)
    assert np.array_equal(ok, one_ok) and np.array_equal(out, one)
    assert np.array_equal(ok_back, other_ok) and np.array_equal(back, other)
    assert ok[0] and ok_back[1] and not ok[6] and not ok_back[6]  # the crop is found; a pair with itself is the whole frame
