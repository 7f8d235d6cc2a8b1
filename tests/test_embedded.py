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


def test_batches_come_back_in_order_checked_once_each_with_the_next_batch_already_handed_to_the_pool(monkeypatch):
    batches = [_rows([1, 2]), _rows([2, 3]), _rows([4]) + [{"id": "none", "image": None}]]
    handed = []
    original = embedded._submit

    def submit(dataset, rows, seen, *args):
        handed.append([r["id"] for r in rows])
        return original(dataset, rows, seen, *args)

    monkeypatch.setattr(embedded, "_submit", submit)
    got, submitted = [], set()
    with ThreadPoolExecutor(2) as pool:
        for i, (rows, keys, checked) in enumerate(checked_batches("t", iter(batches), submitted, ZipLimits(), pool)):
            assert len(handed) == min(i + 2, len(batches))  # the next batch is with the pool already
            got.append((rows, keys, checked))
    assert [rows for rows, _, _ in got] == batches
    key = {s: "sha256:" + hashlib.sha256(encode(photo(s), "JPEG")).hexdigest() for s in (1, 2, 3, 4)}
    assert [keys for _, keys, _ in got] == [[key[1], key[2]], [key[2], key[3]], [key[4], None]]
    assert [sorted(checked) for _, _, checked in got] == [sorted([key[1], key[2]]), [key[3]], [key[4]]]
    assert submitted == set(key.values())
    # the same results as checking each batch in turn
    seen: dict = {}
    with ThreadPoolExecutor(2) as pool:
        for rows, keys, checked in got:
            k, c = check_images("t", rows, seen, ZipLimits(), pool)
            assert k == keys and list(c) == list(checked)
            assert [(row, vars(h) if h else h, bad) for row, h, bad in c.values()] == \
                   [(row, vars(h) if h else h, bad) for row, h, bad in checked.values()]
            seen.update(c)


def test_a_batch_that_cannot_be_read_raises_after_the_batches_before_it_come_back():
    def batches():
        yield _rows([1])
        yield _rows([2])
        raise OSError("damaged row group")

    got = []
    with ThreadPoolExecutor(2) as pool, pytest.raises(OSError, match="damaged row group"):
        for rows, keys, checked in checked_batches("t", batches(), set(), ZipLimits(), pool):
            got.append([r["id"] for r in rows])
    assert got == [[1], [2]]
