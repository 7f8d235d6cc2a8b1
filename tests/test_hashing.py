"""Image hashes: imagehash's bits on full decodes, close to them under JPEG draft, storable as
BIGINT, the same with one worker or many, and measured distances under everyday edits."""

from __future__ import annotations

import io
import os
import statistics
import zipfile

import duckdb
import imagehash
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter, ImageOps

from pipeline.dedupe.hashing import (
    HASH_BITS,
    HashedImage,
    dhash,
    hash_bytes,
    hash_files,
    hash_zip,
    phash,
    to_signed64,
)
from pipeline.settings import ZipLimits

MASK = (1 << HASH_BITS) - 1


def hamming(a: int, b: int) -> int:
    return ((a ^ b) & MASK).bit_count()


def reference(fn, data: bytes) -> int:
    """imagehash's hash of the same file, as the signed int64 we store."""
    return to_signed64(int(str(fn(Image.open(io.BytesIO(data)))), 16))


def encode(im: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def shapes(rng: np.random.Generator, w: int, h: int) -> Image.Image:
    im = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(im)
    for _ in range(6):
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        box = [x, y, x + int(rng.integers(1, w)), y + int(rng.integers(1, h))]
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=colour)
    return im


def photo_like(rng: np.random.Generator, w: int, h: int) -> Image.Image:
    """Smooth colour field + soft shapes + sensor noise: what a photo's low frequencies look like."""
    field = Image.fromarray(rng.integers(0, 256, (3, 4, 3), dtype=np.uint8)).resize((w, h), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(field)
    for _ in range(8):
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        rw, rh = int(rng.integers(w // 10, w // 2)), int(rng.integers(h // 10, h // 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x - rw, y - rh, x + rw, y + rh], fill=colour)
    pixels = np.asarray(field.filter(ImageFilter.GaussianBlur(2)), dtype=np.float32) + rng.normal(0, 8, (h, w, 1))
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


# ---- imagehash's definitions ------------------------------------------------------------------


def full_resolution_images() -> list[tuple[str, Image.Image]]:
    rng = np.random.default_rng(5)
    images = [(f"shapes-{w}x{h}", shapes(rng, w, h)) for w, h in [(640, 480), (333, 517), (64, 64), (31, 20), (1200, 90)]]
    ramp = np.linspace(0, 255, 300).astype(np.uint8)
    images += [
        ("grey", Image.new("L", (120, 80), 128)),
        ("black", Image.new("RGB", (50, 50))),
        ("horizontal-gradient", Image.fromarray(np.tile(ramp, (200, 1)))),  # coefficients exactly 0
        ("diagonal-gradient", Image.fromarray(((ramp[None, :200].astype(int) + ramp[:150, None]) // 2).astype(np.uint8))),
        ("photo-like", photo_like(rng, 400, 300)),
        ("palette", shapes(rng, 200, 150).convert("P")),
    ]
    rgba = shapes(rng, 256, 192).convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(rgba.size))
    images.append(("rgba", rgba))
    symmetric = np.asarray(shapes(rng, 64, 64))
    images.append(("mirror-both-ways", Image.fromarray(np.concatenate([symmetric, symmetric[:, ::-1]], axis=1))))
    return images


@pytest.mark.parametrize("name,image", [pytest.param(n, im, id=n) for n, im in full_resolution_images()])
def test_hashes_equal_imagehash_bit_for_bit_on_full_resolution_decodes(name, image):
    data = encode(image, "PNG")
    hashed = hash_bytes(name, data)
    assert hashed.error is None
    assert hashed.phash == reference(imagehash.phash, data)
    assert hashed.dhash == reference(imagehash.dhash, data)
    assert (hashed.width, hashed.height) == image.size
    # The functions themselves, on a grey image, print as imagehash's hex.
    grey = Image.open(io.BytesIO(data)).convert("L")
    assert format(phash(grey) & MASK, "016x") == str(imagehash.phash(grey))
    assert format(dhash(grey) & MASK, "016x") == str(imagehash.dhash(grey))


def test_jpeg_draft_decode_stays_within_a_few_bits_of_imagehash():
    rng = np.random.default_rng(11)
    sizes = [(320, 240), (400, 300), (512, 384), (640, 480), (300, 400)]
    p_dist, d_dist = [], []
    for i in range(30):
        w, h = sizes[i % len(sizes)]
        data = encode(photo_like(rng, w, h), "JPEG", quality=85 + i % 8)
        hashed = hash_bytes(f"{i}.jpg", data)
        assert (hashed.width, hashed.height) == (w, h)  # original size, not the draft's
        p_dist.append(hamming(hashed.phash, reference(imagehash.phash, data)))
        d_dist.append(hamming(hashed.dhash, reference(imagehash.dhash, data)))
    print(f"\ndraft vs imagehash on 30 JPEGs: pHash mean {statistics.mean(p_dist):.2f} max {max(p_dist)} "
          f"identical {p_dist.count(0) / 30:.0%}; dHash mean {statistics.mean(d_dist):.2f} max {max(d_dist)} "
          f"identical {d_dist.count(0) / 30:.0%}")
    assert statistics.mean(p_dist) <= 2 and max(p_dist) <= 6
    assert statistics.mean(d_dist) <= 2.5 and max(d_dist) <= 8


# ---- storage ------------------------------------------------------------------------------------


def test_hashes_are_stored_as_signed_bigint_and_xor_in_duckdb_counts_the_same_bits():
    a, b = 0xF0F0_1234_5678_9ABC, 0x8000_0000_0000_0001  # both >= 2^63
    sa, sb = to_signed64(a), to_signed64(b)
    assert sa < 0 and sb < 0 and sa & MASK == a and sb & MASK == b
    assert to_signed64(0x7FFF_FFFF_FFFF_FFFF) == 2**63 - 1 and to_signed64(0) == 0
    with pytest.raises(ValueError):
        to_signed64(1 << 64)

    con = duckdb.connect()
    con.execute("create table h (a bigint, b bigint)")
    con.execute("insert into h values (?, ?), (?, ?)", [sa, sb, sa, 12345])
    distances = [r[0] for r in con.execute("select bit_count(xor(a, b)) from h").fetchall()]
    assert distances == [(a ^ b).bit_count(), (a ^ 12345).bit_count()]


# ---- many files, many workers ------------------------------------------------------------------


def corpus() -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(3)
    good = [(f"img{i}.jpg", encode(photo_like(rng, 320 + 40 * i, 240), "JPEG", quality=88)) for i in range(7)]
    good.append(("img7.png", encode(shapes(rng, 100, 90).convert("RGBA"), "PNG")))
    truncated = ("truncated.jpg", good[0][1][: len(good[0][1]) // 2])
    return good[:4] + [truncated, ("notes.jpg", b"this is not an image")] + good[4:]


def assert_results(results: list[HashedImage], names: list[str]) -> None:
    assert [r.key for r in results] == names
    by_key = {r.key: r for r in results}
    for bad in ("truncated.jpg", "notes.jpg"):
        assert by_key[bad].error and by_key[bad].phash is None and by_key[bad].sha256 is not None
    assert all(r.error is None and r.phash is not None and r.dhash is not None for r in results
               if r.key not in ("truncated.jpg", "notes.jpg", "missing.jpg"))


def test_hash_files_gives_the_same_results_in_item_order_with_one_or_two_workers(tmp_path):
    files = corpus()
    for name, data in files:
        (tmp_path / name).write_bytes(data)
    items = [(name, tmp_path / name) for name, _ in files] + [("missing.jpg", tmp_path / "missing.jpg")]
    calls = []
    one = hash_files(items, workers=1)
    two = hash_files(items, workers=2, chunk=3, progress=lambda done, total, rate: calls.append((done, total, rate)))
    assert one == two
    assert_results(one, [k for k, _ in items])
    assert one[-1].error.startswith("unreadable file") and one[-1].sha256 is None
    assert [c[0] for c in calls] == sorted(c[0] for c in calls) and calls[-1][:2] == (len(items), len(items))
    assert all(rate > 0 for _, _, rate in calls)


def _where_hashed(chunk):
    """A chunk's 'work' for _run: which process took each item."""
    return [(i, os.getpid()) for i, _, _ in chunk]


def test_this_process_takes_chunks_while_the_pool_starts_and_every_item_is_done_once():
    """_run feeds the pool from one queue in a thread (its first submit waits for the fork server);
    meanwhile this process takes chunks from the same queue: every item is done exactly once,
    some here and the rest by the workers."""
    from pipeline.dedupe.hashing import _run

    jobs = [(i, f"k{i}", None) for i in range(400)]
    calls = []
    got = _run(jobs, 4, _where_hashed, 2, lambda done, total, rate: calls.append(done), local=_where_hashed)
    assert len(got) == 400 and None not in got
    here = sum(pid == os.getpid() for pid in got)
    assert here >= 4 and here % 4 == 0, here  # at least the first chunk the pool did not take
    assert calls == sorted(calls) and calls[-1] == 400


@pytest.mark.parametrize("n,size,workers", [(3000, 64, 2), (14017, 64, 2), (130, 64, 2), (100, 64, 2), (7, 64, 4),
                                             (400, 4, 2), (0, 64, 2), (1, 64, 2), (3000, 64, 1)])
def test_chunks_take_every_job_once_in_order_and_end_in_small_ones(n, size, workers):
    """hashing._chunks: every job once, in order (a zip's chunks follow its layout), never fewer
    chunks than workers; the last `workers` chunks' worth is cut TAIL_SPLIT times finer, so no
    worker is left waiting out another's last whole chunk."""
    from pipeline.dedupe.hashing import TAIL_SPLIT, _chunks

    jobs = [(i, f"k{i}", None) for i in range(n)]
    chunks = _chunks(jobs, size, workers)
    assert [j for c in chunks for j in c] == jobs
    assert all(chunks) and len(chunks) >= min(n, workers)
    sizes = [len(c) for c in chunks]
    if n >= 2 * workers * size and size >= 2 * TAIL_SPLIT:
        small = size // TAIL_SPLIT
        assert max(sizes) == size and sum(sizes[-workers * TAIL_SPLIT:]) == workers * size
        assert max(sizes[-workers * TAIL_SPLIT:]) == small
    assert max(sizes, default=0) <= size


def test_a_stop_while_this_process_hashes_ends_the_pool_too(tmp_path):
    """A stop raised from the progress callback (a run told to stop) while this process is
    hashing its own chunk: the exception reaches the caller, the queued chunks are dropped and the
    pool is shut down (no hang, no worker left)."""
    import multiprocessing

    files = corpus()
    for name, data in files:
        (tmp_path / name).write_bytes(data)
    items = [(name, tmp_path / name) for name, _ in files] * 20

    class Stop(Exception):
        pass

    def progress(done, total, rate):
        raise Stop

    with pytest.raises(Stop):
        hash_files(items, workers=2, chunk=2, progress=progress)
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


def test_hash_zip_reads_entries_in_place_and_matches_hash_files(tmp_path):
    files = corpus()
    z = tmp_path / "images.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for name, data in reversed(files):  # archive order differs from item order
            zf.writestr(f"images/{name}", data)
        limits = ZipLimits(max_entry_bytes=max(len(data) for _, data in files))
        zf.writestr("images/big.png", np.random.default_rng(1).bytes(limits.max_entry_bytes + 1))
    items = [(name, f"images/{name}") for name, _ in files] + [("absent.jpg", "images/absent.jpg"), ("big.png", "images/big.png")]
    calls = []
    one = hash_zip(z, items, limits, workers=1)
    two = hash_zip(z, items, limits, workers=2, chunk=2, progress=lambda *c: calls.append(c))
    assert one == two
    assert_results(one[:-2], [name for name, _ in files])
    assert "no entry" in one[-2].error and "exceeds" in one[-1].error
    assert calls[-1][:2] == (len(items), len(items))
    for name, data in files:  # the same bytes hash the same, whether from a file or an entry
        assert next(r for r in one if r.key == name) == hash_bytes(name, data)
    assert not list(tmp_path.glob("images")), "nothing is extracted"


def test_one_zip_hasher_serves_several_batches_with_one_pool(tmp_path):
    """A step's partitions hashed in turn by one ZipHasher: each batch's results are hash_zip's,
    the workers started for the first batch serve the next, and closing it stops them."""
    import multiprocessing

    from pipeline.dedupe.hashing import ZipHasher

    files = corpus()
    z = tmp_path / "images.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for name, data in files:
            zf.writestr(f"images/{name}", data)
    items = [(name, f"images/{name}") for name, _ in files]
    batches = [items[::2], items[1::2], items[:3] + [("absent.jpg", "images/absent.jpg")]]
    with ZipHasher(z, ZipLimits(), workers=2) as hasher:
        got, workers = [], []
        for batch in batches:
            got.append(hasher.hash(batch, chunk=2))
            workers.append(sorted(p.pid for p in hasher.pool._processes.values()))
    assert got == [hash_zip(z, batch, ZipLimits(), workers=1) for batch in batches]
    # the pool's workers (started as the work needs them) are the same processes batch after batch
    assert workers[0] and set(workers[0]) <= set(workers[1]) <= set(workers[2]) and len(workers[2]) <= 2
    assert "no entry" in got[2][-1].error
    assert not [p for p in multiprocessing.active_children() if p.is_alive() and p.pid in workers[2]]


# ---- odd inputs -----------------------------------------------------------------------------------


def test_decompression_bomb_warning_is_an_error_for_that_image(monkeypatch):
    data = encode(Image.new("RGB", (40, 40), "red"), "PNG")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 1600 px: warns (errors only above 2x)
    hashed = hash_bytes("bomb.png", data)
    assert hashed.error.endswith("above the max_image_pixels limit of 1000") and hashed.phash is None and hashed.sha256


def test_sixteen_bit_grey_hashes_like_its_eight_bit_version():
    rng = np.random.default_rng(2)
    eight = np.asarray(shapes(rng, 160, 120).convert("L"))
    sixteen = Image.fromarray(eight.astype(np.uint16) * 257)
    assert sixteen.mode.startswith("I;16")
    a, b = hash_bytes("16", encode(sixteen, "PNG")), hash_bytes("8", encode(Image.fromarray(eight), "PNG"))
    assert a.error is None and (a.phash, a.dhash) == (b.phash, b.dhash)


def test_cmyk_and_greyscale_jpegs_hash_close_to_the_rgb_original():
    rgb = photo_like(np.random.default_rng(4), 640, 480)
    base = hash_bytes("rgb", encode(rgb, "JPEG", quality=92))
    for mode in ("CMYK", "L"):
        hashed = hash_bytes(mode, encode(rgb.convert(mode), "JPEG", quality=92))
        assert hashed.error is None and (hashed.width, hashed.height) == (640, 480)
        assert hamming(hashed.phash, base.phash) <= 4


# ---- how far everyday edits move pHash (sets the search radius) --------------------------------

EDITS = {
    "resize 50%": lambda im: im.resize((im.width // 2, im.height // 2), Image.Resampling.LANCZOS),
    "resize 75%": lambda im: im.resize((im.width * 3 // 4, im.height * 3 // 4), Image.Resampling.LANCZOS),
    "jpeg q=60": None,
    "brightness +15%": lambda im: ImageEnhance.Brightness(im).enhance(1.15),
    "crop 5% per side": lambda im: im.crop((im.width // 20, im.height // 20, im.width - im.width // 20, im.height - im.height // 20)),
    "horizontal flip": ImageOps.mirror,
}


def edit_distances(n: int = 8) -> dict[str, list[int]]:
    rng = np.random.default_rng(11)
    sizes = [(640, 480), (800, 600), (480, 640), (512, 512)]
    out: dict[str, list[int]] = {name: [] for name in EDITS}
    for i in range(n):
        im = photo_like(rng, *sizes[i % len(sizes)])
        original = hash_bytes("original", encode(im, "JPEG", quality=90))
        for name, edit in EDITS.items():
            data = encode(im, "JPEG", quality=60) if edit is None else encode(edit(im), "JPEG", quality=90)
            out[name].append(hamming(original.phash, hash_bytes(name, data).phash))
    return out


def test_phash_distance_under_everyday_edits():
    distances = edit_distances()
    print()
    for name, d in distances.items():
        print(f"  {name:<18} median {statistics.median(d):4.1f}  max {max(d):2}  {sorted(d)}")
    median = {name: statistics.median(d) for name, d in distances.items()}
    for mild in ("resize 50%", "resize 75%", "jpeg q=60", "brightness +15%"):
        assert median[mild] <= 4 and max(distances[mild]) <= 8, mild
    assert 2 <= median["crop 5% per side"] <= 16
    assert median["horizontal flip"] >= 20  # a mirrored image is a different image to pHash


def test_pool_warm_cuts_short_the_exit_of_the_fork_server_only():
    """pool_warm ends the hashing pool's fork server without the interpreter's teardown (os._exit
    at exit); any other process that imports it keeps its own exit status."""
    import subprocess
    import sys

    for code in ("import pipeline.dedupe.pool_warm; raise SystemExit(3)",
                 "import multiprocessing.forkserver, pipeline.dedupe.pool_warm; raise SystemExit(3)"):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, (code, done.stderr[-2000:])


def test_an_interrupt_while_the_feeder_starts_is_raised_as_it_is(monkeypatch):
    """A Ctrl-C inside the feeder thread's start (Thread.start waits for it, and the wait can be
    interrupted) leaves _run as the KeyboardInterrupt, not as a join of a thread never started."""
    import threading

    from pipeline.dedupe import hashing

    start = threading.Thread.start

    def interrupted(self):
        if self.name == "hash-pool-feed":
            raise KeyboardInterrupt
        return start(self)

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hashing._run([(i, str(i), "/nonexistent") for i in range(10)], 2, hashing._hash_file_chunk, 2)


def test_pool_workers_end_when_the_process_that_owns_them_is_killed(tmp_path):
    """Workers ignore SIGTERM (the run that owns them winds them down); when the owner is killed
    without doing so, each worker ends itself once its parent, the fork server, is gone:
    nothing of the pool is left waiting for work."""
    import signal
    import subprocess
    import sys
    import time

    from pipeline.liveness import pid_exists

    script = tmp_path / "owner.py"
    script.write_text(
        "import time\n"
        "from pipeline.dedupe import hashing\n"
        "if __name__ == '__main__':\n"
        "    pool = hashing._process_pool(2)\n"
        "    print(sorted(pool.submit(hashing.os.getpid).result() for _ in range(4)), flush=True)\n"
        "    print(sorted(p.pid for p in pool._processes.values()), flush=True)\n"
        "    time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        p.stdout.readline()
        workers = [int(x) for x in p.stdout.readline().strip("[]\n").split(",")]
        assert workers  # the pool starts as many as its work needs
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        deadline = time.monotonic() + 10
        alive = workers
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [w for w in workers if pid_exists(w)]
        assert not alive, f"workers {alive} still running 10 s after their owner was killed"
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

