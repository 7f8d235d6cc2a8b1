"""pipeline.embedded.checked_batches: a parser's batches of rows with embedded images, checked
over a pool one batch ahead. Real images, a real thread pool."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from dedupe_images import encode, photo
from pipeline import embedded
from pipeline.embedded import check_images, checked_batches
from pipeline.settings import ZipLimits


def _rows(seeds):
    return [{"id": s, "image": {"bytes": encode(photo(s), "JPEG"), "path": None}} for s in seeds]


def _key(seed):
    return "sha256:" + hashlib.sha256(encode(photo(seed), "JPEG")).hexdigest()


def test_batches_come_back_in_order_with_the_next_batch_already_handed_to_the_pool(monkeypatch):
    batches = [_rows([1, 2]), _rows([2, 3]), _rows([4]) + [{"id": "none", "image": None}], _rows([1])]
    handed = []
    original = embedded._submit

    def submit(dataset, rows, seen, *args):
        handed.append([r["id"] for r in rows])
        return original(dataset, rows, seen, *args)

    monkeypatch.setattr(embedded, "_submit", submit)
    got, kept = [], {}
    with ThreadPoolExecutor(2) as pool:
        for i, (rows, keys, checked) in enumerate(checked_batches("t", iter(batches), kept, ZipLimits(), pool)):
            assert len(handed) == min(i + 2, len(batches))  # the next batch is with the pool already
            for key in keys:  # the caller keeps every image, as a parser keeps its rows' images
                if key is not None and key not in kept:
                    kept[key] = checked[key]
            got.append((rows, keys, sorted(checked)))
    k = {s: _key(s) for s in (1, 2, 3, 4)}
    assert [rows for rows, _, _ in got] == batches
    assert [keys for _, keys, _ in got] == [[k[1], k[2]], [k[2], k[3]], [k[4], None], [k[1]]]
    # 2 was in flight with batch 1: not handed over again, its check comes back with batch 2 too;
    # 1 was kept by then: not checked again
    assert [checked for _, _, checked in got] == [sorted([k[1], k[2]]), sorted([k[2], k[3]]), [k[4]], []]
    assert sorted(kept) == sorted(k.values())


def test_the_checks_are_those_of_each_batch_in_turn_when_rows_are_dropped_before_their_image_is_kept():
    """A parser drops a row (no id, a repeated id) before it keeps the row's image: a later row with
    the same image, in the next batch (in flight meanwhile) or further on, still finds its check, and
    every check equals what check_images gives batch by batch."""
    batches = [_rows([1, 2]), _rows([1, 3]), _rows([5]), _rows([2, 3])]
    drop = {(0, 0), (0, 1)}  # batch 0's rows are dropped: their images are not kept there

    def run(pairs):
        kept, out = {}, []
        for b, (rows, keys, checked) in enumerate(pairs(kept)):
            for r, key in enumerate(keys):
                if (b, r) in drop or key is None or key in kept:
                    continue
                kept[key] = checked[key]  # a KeyError here is the fault this guards against
                out.append((b, r, key, kept[key][0], vars(kept[key][1]), kept[key][2]))
        return out

    with ThreadPoolExecutor(2) as pool:
        ahead = run(lambda kept: checked_batches("t", iter(batches), kept, ZipLimits(), pool))
        in_turn = run(lambda kept: ((rows, *check_images("t", rows, kept, ZipLimits(), pool)) for rows in batches))
    assert ahead == in_turn
    assert [(b, r) for b, r, *_ in ahead] == [(1, 0), (1, 1), (2, 0), (3, 0)]


def test_a_batch_that_cannot_be_read_raises_after_the_batches_before_it_come_back():
    def batches():
        yield _rows([1])
        yield _rows([2])
        raise OSError("damaged row group")

    got = []
    with ThreadPoolExecutor(2) as pool, pytest.raises(OSError, match="damaged row group"):
        for rows, keys, checked in checked_batches("t", batches(), {}, ZipLimits(), pool):
            got.append([r["id"] for r in rows])
    assert got == [[1], [2]]
