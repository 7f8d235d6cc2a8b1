"""The dedupe engine without Dagster: verification on hand-made pairs, the candidate routes,
clusters without chaining, flat images."""

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image, ImageDraw

from pipeline.dedupe.decisions import ThumbColumn, run_engine
from pipeline.dedupe.engine import ROUTES, candidate_pairs
from pipeline.dedupe.hashing import hash_bytes
from pipeline.dedupe.verify import NEAR_MIN, OVERLAY_MIN, compare

from tests.dedupe_images import (bar_chart, blur, caption, crop, encode, geometry, grey, half, photo, signatures,
                                 text_page)


def judge(a: bytes, b: bytes):
    """The verdict on one pair of image bytes, as the engine computes it."""
    x, y = hash_bytes("a", a), hash_bytes("b", b)
    thumbs = [np.frombuffer(h.thumb, np.uint8).reshape(1, 64, 64) for h in (x, y)]
    v = compare(*thumbs, np.array([x.width / x.height]), np.array([y.width / y.height]),
                np.array([[x.chroma_cb, x.chroma_cr]]), np.array([[y.chroma_cb, y.chroma_cr]]))
    return v.kind[0], float(v.score[0]), v


PHOTO = photo(11)
CHART = bar_chart([0.35, 0.8, 0.55, 0.62, 0.2])
DIAGRAM = geometry([(240, 40), (60, 320), (420, 300)])
PAGE = text_page(3)


@pytest.mark.parametrize("name, edit, kind", [
    ("jpeg q30", lambda im: encode(im, "JPEG", 30), "near"),
    ("half size", lambda im: encode(half(im), "PNG"), "near"),
    ("blur", lambda im: encode(blur(im), "JPEG", 90), "near"),
    ("grey", lambda im: encode(grey(im), "JPEG", 90), "near"),
    ("crop 4 %", lambda im: encode(crop(im, 0.04), "JPEG", 90), "crop"),
    ("crop 7 %", lambda im: encode(crop(im, 0.07), "PNG"), "crop"),
])
@pytest.mark.parametrize("image", ["photo", "chart", "diagram", "page"])
def test_edited_copies_are_accepted_by_the_rule_that_fits(name, edit, kind, image):
    im = {"photo": PHOTO, "chart": CHART, "diagram": DIAGRAM, "page": PAGE}[image]
    got, score, _ = judge(encode(im), edit(im))
    assert got == kind and NEAR_MIN <= score <= 1.0, (image, name, got, score)


def test_an_off_centre_crop_is_found_from_the_profiles():
    w, h = PHOTO.size
    shifted = PHOTO.crop((0, 0, w - round(w * 0.06), h))  # 6 % off the right side only
    kind, score, v = judge(encode(PHOTO), encode(shifted, "JPEG", 90))
    assert kind == "crop" and score >= NEAR_MIN and 0.05 <= v.crop[0] <= 0.07


@pytest.mark.parametrize("corner", ["top-left", "top-right", "bottom-left", "bottom-right"])
def test_a_caption_box_in_any_corner_is_an_overlay(corner):
    kind, score, v = judge(encode(PHOTO), encode(caption(PHOTO, corner), "JPEG", 90))
    assert kind == "overlay" and score >= OVERLAY_MIN
    assert v.rest[0] - v.full[0] >= 0.01  # leaving the corner out explains the difference


@pytest.mark.parametrize("a, b, why", [
    (bar_chart([0.35, 0.8, 0.55, 0.62, 0.2]), bar_chart([0.6, 0.3, 0.7, 0.25, 0.5]), "same chart layout, other values"),
    (bar_chart([0.35, 0.8, 0.55]), bar_chart([0.35, 0.8, 0.55], colour=(200, 120, 30)), "same bars, other colour"),
    (geometry([(240, 40), (60, 320), (420, 300)]), geometry([(300, 60), (80, 300), (400, 320)]), "same template, other triangle"),
    (text_page(3), text_page(4), "same page layout, other words"),
    (photo(11), photo(12), "two photos"),
])
def test_unrelated_look_alikes_are_refused(a, b, why):
    kind, score, _ = judge(encode(a), encode(b))
    assert kind is None and score < NEAR_MIN, (why, kind, score)


def test_the_crop_and_overlay_routes_find_what_the_plain_phash_misses():
    original = PHOTO.resize((640, 480))
    images = {"o.png": encode(original), "crop.jpg": encode(crop(original, 0.06), "JPEG", 90),
              "cap.jpg": encode(caption(original, "bottom-left"), "JPEG", 90),
              "cap2.jpg": encode(caption(original, "top-right"), "JPEG", 90), "other.png": encode(photo(12))}
    rows = signatures(images)
    pairs = candidate_pairs(*(rows[c].to_numpy() for c in ("phash", "crop_hash", "top_hash", "bottom_hash")),
                            np.ones(5, bool), 6)
    found = {(int(a), int(b)): ROUTES[r] for a, b, r in zip(pairs.a, pairs.b, pairs.route)}
    assert (found[(0, 1)], found[(0, 2)], found[(0, 3)]) == ("crop", "top", "bottom")
    assert not any(4 in p for p in found)
    plain = [bin((rows["phash"][0].as_py() ^ rows["phash"][i].as_py()) & (2**64 - 1)).count("1") for i in (1, 2, 3)]
    assert min(plain) > 6  # no copy is within the radius of the plain pHash


def test_no_chaining_a_member_must_match_the_canonical_itself():
    """Accepted pairs 0~1 and 1~2 link 2 to 0 only through 1: clustering verifies 2 against the
    canonical 0 itself, refuses it, and 2 stays out of 0's cluster."""
    from pipeline.dedupe.engine import Pairs, cluster_nodes

    images = [encode(PHOTO), encode(PHOTO, "JPEG", 85), encode(photo(12))]
    thumbs = np.stack([np.frombuffer(hash_bytes(str(i), d).thumb, np.uint8) for i, d in enumerate(images)])
    pairs = Pairs(np.array([0, 1]), np.array([1, 2]), np.zeros(2, np.int8), np.array([2, 6], np.int16),
                  np.array([True, True]), np.array(["near", "near"], dtype=object), np.array([0.99, 0.97], np.float32))
    c = cluster_nodes(3, pairs, np.array([0, 1, 2]), thumbs)
    assert list(c.canonical) == [0, 0, -1] and list(c.kind) == [None, "near", None]
    assert c.late_checks == 1 and c.split_off == 1 and c.late_accepted == []


def test_no_chaining_in_the_whole_engine():
    """A photo, a copy cropped 14 % off the right, and that copy cropped 14 % off its right again:
    each step is a crop the engine accepts, the two ends (26 % apart) are not."""
    a = PHOTO.resize((640, 480))
    b = a.crop((0, 0, 550, 480))
    c = b.crop((0, 0, 473, 480))
    images = {"a.png": encode(a), "b.png": encode(b), "c.png": encode(c)}
    assert judge(images["a.png"], images["b.png"])[0] == "crop"
    assert judge(images["b.png"], images["c.png"])[0] == "crop"
    assert judge(images["a.png"], images["c.png"])[0] is None
    result = run_engine(signatures(images), 32)  # a radius wide enough that all three are candidates
    cid = dict(zip(result.clusters["row"].to_pylist(), result.clusters["cluster_id"].to_pylist()))
    assert cid[0] == cid[1] and cid.get(2) != cid[0]


def test_flat_images_are_exact_duplicates_only():
    """5,000 solid images of different colours have degenerate pHashes (all within 1 bit): none is
    a duplicate of another; identical blank files are exact duplicates; a flat image never meets
    the near search."""
    images = {}
    for i in range(5000):
        im = Image.new("RGB", (40, 30), ((i * 37) % 256, (i * 91) % 256, (i * 53 + i // 256) % 256))
        images[f"solid{i}.png"] = encode(im)
    assert len(set(images.values())) == 5000
    blank = encode(Image.new("RGB", (300, 200), "white"))
    images["blank1.png"] = images["blank2.png"] = blank
    canvas = Image.new("RGB", (300, 200), "white")
    ImageDraw.Draw(canvas).point((150, 100), fill="black")
    images["dot.png"] = encode(canvas)
    rows = signatures(images)
    result = run_engine(rows, 8, ThumbColumn(rows["thumb"]))
    assert result.flat_nodes == 5002 and result.candidates == 0  # blank1/blank2 are one node
    keys = rows["image_key"].to_pylist()
    listed = {keys[r]: k for r, k in zip(result.clusters["row"].to_pylist(), result.clusters["kind"].to_pylist())}
    assert listed == {"blank1.png": None, "blank2.png": "exact"}


def test_many_identical_hashes_stay_bounded():
    """A thousand distinct flat-ish images sharing one pHash do not become a million candidates."""
    images = {f"g{i}.png": encode(Image.new("L", (64, 48), 100 + i % 2).convert("RGB")) for i in range(2)}
    rows = signatures(images)
    big = pa.concat_tables([rows] * 500)
    keys = pa.array([f"k{i}" for i in range(big.num_rows)])
    shas = pa.array([f"{i:064x}" for i in range(big.num_rows)])
    big = big.set_column(big.schema.get_field_index("image_key"), "image_key", keys)
    big = big.set_column(big.schema.get_field_index("sha256"), "sha256", shas)
    result = run_engine(big, 8)
    assert result.flat_nodes == 1000 and result.candidates == 0 and result.clusters.num_rows == 0


def test_crowded_hashes_keep_each_images_nearest_candidates():
    """40 look-alikes all 2 bits from each other: 780 pairs within the radius; each image keeps its
    16 nearest, so the work grows with the images, and the pairs left out are counted."""
    base = 0x0123_4567_89AB_CDEF
    phash = np.array([base ^ (1 << i) for i in range(40)], np.int64)
    far = np.random.default_rng(1).integers(-2**63, 2**63 - 1, (3, 40), dtype=np.int64)
    pairs = candidate_pairs(phash, *far, np.ones(40, bool), 8, max_per_image=16)
    assert len(pairs) + pairs.capped == 780 and pairs.capped > 0
    per_image = np.bincount(np.concatenate([pairs.a, pairs.b]), minlength=40)
    assert per_image.min() >= 16 and len(pairs) <= 40 * 16
    everything = candidate_pairs(phash, *far, np.ones(40, bool), 8, max_per_image=1000)
    assert len(everything) == 780 and everything.capped == 0
