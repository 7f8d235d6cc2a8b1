"""The signature's compiled loops (pipeline/dedupe/sigkernels.py) give Pillow's and numpy's results
bit for bit: the resizes against Image.resize, what is read off the 128 px luma against the
hashing functions it replaces, on random, drawn, flat and photo-like planes of many sizes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from pipeline.dedupe import hashing, sigkernels

RNG = np.random.default_rng(11)


def planes():
    """Random noise, smooth fields, drawn blocks on white, stripes and flats, in odd sizes."""
    out = []
    for k, (h, w) in enumerate([(128, 128), (240, 320), (150, 200), (97, 131), (64, 300), (513, 17), (128, 129),
                                (1000, 60), (33, 33), (300, 260)]):
        kind = k % 5
        if kind == 0:
            a = RNG.integers(0, 256, (h, w), dtype=np.uint8)
        elif kind == 1:
            a = np.asarray(Image.fromarray(RNG.integers(0, 256, (4, 5), dtype=np.uint8)).resize((w, h), Image.BICUBIC))
        elif kind == 2:
            a = np.full((h, w), 255, np.uint8)
            for _ in range(6):
                y, x = RNG.integers(0, max(h - 8, 1)), RNG.integers(0, max(w - 8, 1))
                a[y:y + RNG.integers(2, max(h // 3, 3)), x:x + RNG.integers(2, max(w // 3, 3))] = RNG.integers(0, 256)
        elif kind == 3:
            a = np.zeros((h, w), np.uint8)
            a[::3] = 255
        else:
            a = np.full((h, w), int(RNG.integers(0, 256)), np.uint8)
        out.append(a)
    return out


@pytest.mark.parametrize("kind", ["lanczos", "box"])
def test_resize_equals_pillow_bit_for_bit(kind):
    resample = Image.Resampling.LANCZOS if kind == "lanczos" else Image.Resampling.BOX
    for a in planes():
        for size in [(128, 128), (64, 64), (32, 32), (9, 8), (256, 256), (40, 70)]:
            ours = sigkernels.resize(a, *size, kind)
            theirs = np.asarray(Image.fromarray(a).resize(size, resample))
            assert ours.shape == theirs.shape
            assert np.array_equal(ours, theirs), (a.shape, size, kind)


def test_a_strong_reduction_of_a_drawn_plane_takes_pillow_s_order_of_passes():
    """Reduced a hundredfold, plain noise comes out one grey whichever pass runs first, so a probe
    of noise alone could not see Pillow's order there; a drawn plane (bars on white) shows it."""
    a = np.full((1046, 226), 255, np.uint8)
    for k, top in enumerate((300, 520, 150, 700)):
        a[top:1000, 20 + 50 * k:55 + 50 * k] = 40 + 50 * k
    a[:, ::17] = 90
    for size in [(9, 8), (32, 32)]:
        ours = sigkernels.resize(a, *size)
        theirs = np.asarray(Image.fromarray(a).resize(size, Image.Resampling.LANCZOS))
        assert np.array_equal(ours, theirs), size


def test_resize_reads_strided_planes_as_pillow_reads_the_channel():
    ycc = RNG.integers(0, 256, (150, 200, 3), dtype=np.uint8)
    for c in range(3):
        theirs = np.asarray(Image.fromarray(np.ascontiguousarray(ycc[..., c])).resize((128, 128), Image.LANCZOS))
        assert np.array_equal(sigkernels.resize(ycc[..., c], 128, 128), theirs)


def test_large_planes_are_left_to_pillow_with_the_same_result():
    a = RNG.integers(0, 256, (800, 800), dtype=np.uint8)
    assert a.size > sigkernels.COMPILED_MAX
    assert np.array_equal(sigkernels.resize(a, 128, 128), np.asarray(Image.fromarray(a).resize((128, 128), Image.LANCZOS)))


def test_what_is_read_off_the_detail_equals_the_functions_it_replaces():
    details = [sigkernels.resize(a, 128, 128) for a in planes()]
    details += [RNG.integers(0, 256, (128, 128), dtype=np.uint8) for _ in range(40)]
    backgrounds = 0
    for d in details:
        read = hashing.read_detail(d)
        im = Image.fromarray(d)
        bg = hashing.has_background(d)
        backgrounds += bg
        assert read.phash == hashing.phash(im)
        assert read.dhash == hashing.dhash(im)
        assert read.regions == hashing.region_hashes(hashing.thumbnail(im))
        assert read.background == bg
        assert read.robust == (None if bg else hashing.robust_hash(d))
        assert hashing.read_detail(d, with_hashes=False).phash is None
    assert 0 < backgrounds < len(details)  # both branches were read


def test_hash_bytes_is_the_same_with_and_without_the_compiled_loops(monkeypatch):
    """A process hashing on its own starts on Pillow and numpy and moves to the compiled loops after
    SMALL_BATCH images (hashing._compiled): every field of every row is the same either way."""
    import io

    from tests.dedupe_images import bar_chart, encode, grey, photo, text_page

    datas = []
    for i in range(4):
        for im in (photo(i), bar_chart([0.2 + 0.1 * i, 0.6, 0.4]), text_page(i)):
            datas += [encode(im, "JPEG", 85), encode(grey(im), "JPEG", 80), encode(im, "PNG")]
    buf = io.BytesIO()
    Image.fromarray(RNG.integers(0, 256, (700, 40, 3), dtype=np.uint8)).save(buf, "JPEG")  # a tall, narrow draft
    datas.append(buf.getvalue())
    rows = {}
    for compiled in (False, True):
        monkeypatch.setattr(hashing, "_compiled", lambda c=compiled: c)
        rows[compiled] = [hashing.hash_bytes(str(i), d) for i, d in enumerate(datas)]
    assert rows[False] == rows[True]
    assert any(r.fine for r in rows[True]) and any(r.robust_hash is not None for r in rows[True])


def test_the_one_call_ycc_signature_equals_the_plane_by_plane_path():
    """hashing._ycc_signature (sigkernels.ycc_signature: a colour JPEG's three planes resized,
    read and summed in one compiled call) gives what the plane-by-plane path gives: the same
    signature bytes, hashes, chroma means and flatness, for geometries Pillow resizes horizontally
    first and vertically first (portrait drafts), on noise, smooth, drawn and flat images."""
    from pipeline.dedupe.hashing import (CHROMA_SIDE, DETAIL_SIDE, _ycc_signature, is_flat, read_detail)

    shapes = [(240, 320), (239, 169), (313, 210), (350, 128), (256, 192), (150, 200), (384, 512), (129, 4000 // 8)]
    orders = set()
    for k, (h, w) in enumerate(shapes):
        assert sigkernels.plane_taps(h + 1, w, DETAIL_SIDE, DETAIL_SIDE, "lanczos") is None  # not probed yet
        sigkernels.probe(h, w, DETAIL_SIDE, DETAIL_SIDE, "lanczos")
        sigkernels.probe(h, w, CHROMA_SIDE, CHROMA_SIDE, "box")
        lt = sigkernels.plane_taps(h, w, DETAIL_SIDE, DETAIL_SIDE, "lanczos")
        ct = sigkernels.plane_taps(h, w, CHROMA_SIDE, CHROMA_SIDE, "box")
        orders.add((lt[4], ct[4]))
        for a in (RNG.integers(0, 256, (h, w, 3), dtype=np.uint8),
                  np.asarray(Image.fromarray(RNG.integers(0, 256, (4, 5, 3), dtype=np.uint8)).resize((w, h), Image.BICUBIC)),
                  np.full((h, w, 3), (200, 120, 140), np.uint8) + (np.arange(w) % 2).astype(np.uint8)[None, :, None]):
            ycc = np.ascontiguousarray(a)
            luma, sig, read, mean_cb, mean_cr, flat = _ycc_signature(ycc)
            detail = sigkernels.resize(ycc[..., 0], DETAIL_SIDE, DETAIL_SIDE)
            cb = sigkernels.resize(ycc[..., 1], CHROMA_SIDE, CHROMA_SIDE, "box")
            cr = sigkernels.resize(ycc[..., 2], CHROMA_SIDE, CHROMA_SIDE, "box")
            expected = np.concatenate([detail.ravel(), cb.ravel(), cr.ravel()])
            assert np.array_equal(sig, expected), (h, w)
            assert read == read_detail(detail), (h, w)
            assert (mean_cb, mean_cr) == (float(cb.mean()) - 128.0, float(cr.mean()) - 128.0)
            assert flat == is_flat(expected) and np.array_equal(luma, ycc[..., 0])
    assert {(False, False), (True, True)} <= orders or {(False, False), (True, False)} <= orders, orders


def test_a_geometry_is_probed_only_once_it_comes_back_and_every_resize_is_pillow_s(monkeypatch):
    """A folder of figures of every size meets most geometries once: those are resized by Pillow,
    and the order of passes (a probe worth 10-30 resizes) is read only on a geometry's
    PROBE_AFTER-th plane; the pixels are Pillow's before and after. The remembered geometries are
    bounded (KNOWN_MAX), whatever the number of sizes met."""
    probes = []
    real = sigkernels._order.__wrapped__
    monkeypatch.setattr(sigkernels, "_order", lambda *a: probes.append(a) or real(*a))
    monkeypatch.setattr(sigkernels, "_MET", {})
    monkeypatch.setattr(sigkernels, "_KNOWN", {})
    plane = RNG.integers(0, 256, (97, 141), dtype=np.uint8)
    pillow = np.asarray(Image.fromarray(plane).resize((128, 128), Image.LANCZOS))
    for k in range(1, sigkernels.PROBE_AFTER + 3):
        assert np.array_equal(sigkernels.resize(plane, 128, 128), pillow)
        assert len(probes) == (k >= sigkernels.PROBE_AFTER)
        assert (sigkernels.known_order(97, 141, 128, 128, "lanczos") is not None) == (k >= sigkernels.PROBE_AFTER)
    monkeypatch.setattr(sigkernels, "KNOWN_MAX", 50)
    for h in range(20, 200):  # every size once: no probe, and the counts stay bounded
        small = RNG.integers(0, 256, (h, 60), dtype=np.uint8)
        assert np.array_equal(sigkernels.resize(small, 32, 32, "box"),
                              np.asarray(Image.fromarray(small).resize((32, 32), Image.BOX)))
    assert len(probes) == 1 and len(sigkernels._MET) <= 50
