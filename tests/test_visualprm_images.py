"""VisualPRM image inventory: embedded bytes, folder and zip resolution, hostile references."""

import hashlib
import io
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import stand_in_jpeg
from pipeline.settings import ZipLimits
from pipeline.visualprm.images import ImageStore, inventory_prm_images

MEDIA = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


def shard(path, media_rows):
    pq.write_table(pa.table({"id": [str(i) for i in range(len(media_rows))], "messages": ["[]"] * len(media_rows),
                             "media": pa.array(media_rows, type=MEDIA)}), path)
    return path


def test_embedded_folder_zip_unresolved_and_corrupt(tmp_path):
    a, b, c = stand_in_jpeg(1), stand_in_jpeg(2), stand_in_jpeg(3)
    s = shard(tmp_path / "train-0.parquet", [
        [{"bytes": a, "path": "src/a.jpg"}], [{"bytes": a, "path": "src/a.jpg"}],  # two rollouts, one image
        [{"bytes": None, "path": "src/b.jpg"}], [{"bytes": b"\xff\xd8broken", "path": "src/bad.jpg"}],
        [{"bytes": c, "path": None}],  # embedded without a path: keyed by content
    ])
    root = tmp_path / "ds"
    (root / "images" / "src").mkdir(parents=True)
    (root / "images" / "src" / "b.jpg").write_bytes(b)
    with zipfile.ZipFile(root / "more.zip", "w") as zf:
        zf.writestr("images/src/z.jpg", c)
    (tmp_path / "secret.jpg").write_bytes(a)
    refs = {"src/a.jpg", "src/b.jpg", "src/bad.jpg", "src/z.jpg", "src/none.jpg", "../secret.jpg", "/etc/passwd"}
    store = ImageStore(tmp_path / "store")
    calls = []
    table, rejected, hashed = inventory_prm_images(refs, [s], root, [root / "more.zip"], ZipLimits(), store,
                                                   progress=lambda *a: calls.append(a))
    assert calls[-1][:2] == (table.num_rows, table.num_rows) and calls[-1][2] > 0  # the run log's done/total/rate
    rows = {r["image_key"]: r for r in table.to_pylist()}
    assert (rows["src/a.jpg"]["origin"], rows["src/a.jpg"]["status"]) == ("embedded", "ok")
    assert (rows["src/b.jpg"]["origin"], rows["src/b.jpg"]["status"]) == ("path", "ok")
    assert rows["src/z.jpg"]["status"] == "ok" and rows["src/z.jpg"]["sha256"] == rows[next(k for k in rows if k.startswith("sha256:"))]["sha256"]
    assert rows["src/bad.jpg"]["status"] == "corrupt"
    assert rows["src/none.jpg"]["status"] == "unresolved"
    assert rows["../secret.jpg"]["status"] == rows["/etc/passwd"]["status"] == "unresolved"  # never read outside the root
    # A zip was given, so what no root holds is a fault (a `resolve` row), not a decision.
    assert sorted((r.stage, r.record_key) for r in rejected) == [
        ("decode", "src/bad.jpg"), ("resolve", "../secret.jpg"), ("resolve", "/etc/passwd"), ("resolve", "src/none.jpg")]
    assert rows["src/b.jpg"]["located_at"] == str(root / "images" / "src" / "b.jpg")
    assert rows["src/z.jpg"]["located_at"] == f"{root / 'more.zip'}!images/src/z.jpg"
    assert rows["src/a.jpg"]["located_at"] is None  # embedded
    # content-addressed: the shared image is stored once
    stored = sorted(p.name for p in (tmp_path / "store").rglob("*.jpg"))
    assert len(stored) == 3 and rows["src/a.jpg"]["store_path"].endswith(rows["src/a.jpg"]["sha256"] + ".jpg")
    # The decode that checked each image also hashed it: the same hashes as hashing the stored file.
    ok = sorted(k for k, r in rows.items() if r["status"] == "ok")
    assert [h.key for h in hashed] == ok
    # Checked against independent implementations: hashlib, Pillow, and imagehash's own pHash and
    # dHash (the stand-in JPEGs are small, so the decode is full-resolution and the bits are equal).
    import hashlib

    import imagehash
    from PIL import Image

    def signed(h) -> int:
        value = int(str(h), 16)
        return value - (1 << 64) if value >= 1 << 63 else value

    for h in hashed:
        data = (tmp_path / "store" / rows[h.key]["store_path"]).read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            expected = (hashlib.sha256(data).hexdigest(), signed(imagehash.phash(im)), signed(imagehash.dhash(im)), *im.size)
        assert (h.sha256, h.phash, h.dhash, h.width, h.height) == expected, h.key


def test_embedded_keys_name_paths_and_hash_only_unnamed_bytes(tmp_path):
    from pipeline.visualprm.images import embedded_keys

    s = shard(tmp_path / "train-0.parquet", [
        [{"bytes": b"a", "path": "x/a.jpg"}, {"bytes": None, "path": "x/b.jpg"}],  # b is a path reference only
        [{"bytes": b"c", "path": None}], [{"bytes": b"d", "path": ""}], [],
    ])
    assert embedded_keys([s]) == {
        "x/a.jpg",
        "sha256:2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6",  # sha256(b"c")
        "sha256:18ac3e7343f016890c510e93f935261169d9e3f565436429830faf0934f4f8e4",  # sha256(b"d")
    }


def test_embedded_keys_read_only_the_row_groups_that_hold_bytes(tmp_path, monkeypatch):
    """Row groups of path references only (nine in ten upstream) are skipped from their footers;
    the keys are those of the groups that hold bytes, whichever group they sit in."""
    from pipeline.visualprm import images
    rows = [[{"bytes": None, "path": "x/p0.jpg"}], [{"bytes": b"a", "path": "x/a.jpg"}],
            [{"bytes": None, "path": "x/p1.jpg"}], [{"bytes": b"c", "path": None}], [{"bytes": None, "path": "x/p2.jpg"}]]
    path = tmp_path / "train-0.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(len(rows))], "messages": ["[]"] * len(rows),
                              "media": pa.array(rows, type=MEDIA)}), path, row_group_size=1)
    read: list[list[int]] = []
    real = images.streaming_parquet

    def spying(f):
        pf = real(f)
        original = pf.iter_batches

        def iter_batches(*args, row_groups=None, **kw):
            read.append(list(row_groups))
            return original(*args, row_groups=row_groups, **kw)
        pf.iter_batches = iter_batches
        return pf

    monkeypatch.setattr(images, "streaming_parquet", spying)
    assert images.embedded_keys([path]) == {"x/a.jpg", f"sha256:{hashlib.sha256(b'c').hexdigest()}"}
    assert sorted(g for groups in read for g in groups) == [1, 3]


def test_many_path_references_are_read_over_the_pool_with_the_rows_of_one_process(tmp_path):
    """Past SMALL_BATCH located references the images are read, hashed and stored by the hashing
    pool's workers (each archive opened once per worker): the rows, hashes and stored files are
    those of reading them one at a time here, corrupt and zipped images included."""
    from pipeline.dedupe.hashing import SMALL_BATCH
    from pipeline.visualprm.images import PathResolver, _read_located

    n = SMALL_BATCH + 60
    root = tmp_path / "ds"
    (root / "images" / "src").mkdir(parents=True)
    refs = set()
    with zipfile.ZipFile(root / "more.zip", "w") as zf:
        for i in range(n):
            ref = f"src/{i:04d}.jpg"
            data = b"\xff\xd8not a jpeg" if i % 97 == 5 else stand_in_jpeg(i)
            if i % 3 == 0:
                zf.writestr(f"images/{ref}", data)
            else:
                (root / "images" / ref).write_bytes(data)
            refs.add(ref)
    shard_path = shard(tmp_path / "train-0.parquet", [[{"bytes": None, "path": r}] for r in sorted(refs)])
    table, rejected, hashed = inventory_prm_images(refs, [shard_path], root, [root / "more.zip"], ZipLimits(),
                                                   ImageStore(tmp_path / "pool"))
    resolver = PathResolver(root, [root / "more.zip"], ZipLimits())
    located = [(ref, resolver.locate(ref)[0]) for ref in sorted(refs)]
    serial = _read_located(located, ImageStore(tmp_path / "one"), ZipLimits(), workers=1)
    assert table.to_pylist() == [row for _, row, _ in serial]
    assert hashed == [h for _, _, h in serial if h is not None]
    corrupt = {r["image_key"] for r in table.to_pylist() if r["status"] == "corrupt"}
    assert corrupt == {f"src/{i:04d}.jpg" for i in range(n) if i % 97 == 5}
    assert sorted(r.record_key for r in rejected) == sorted(corrupt)
    assert sum(r["located_at"].endswith(".jpg") and "!" in r["located_at"] for r in table.to_pylist()) == len(range(0, n, 3))
    pool_files = sorted(p.relative_to(tmp_path / "pool").as_posix() for p in (tmp_path / "pool").rglob("*.jpg"))
    assert pool_files == sorted(p.relative_to(tmp_path / "one").as_posix() for p in (tmp_path / "one").rglob("*.jpg"))
    assert len(pool_files) == len({r["sha256"] for r in table.to_pylist() if r["status"] == "ok"}) > SMALL_BATCH // 2


def test_embedded_images_hashed_over_the_pool_in_windows_give_the_rows_of_one_process(tmp_path, monkeypatch):
    """Embedded images are read here a window at a time and hashed by the pool's workers (one pool
    for every window): the first occurrence of each key in shard order, and the same rows, hashes
    and stored files as hashing them one at a time here, repeats across windows and row groups,
    corrupt and unnamed images included."""
    from pipeline.visualprm import images as vi

    media = []
    for i in range(300):
        n = i % 170  # keys 0..129 come back later in the shard, after several windows
        data = b"\xff\xd8not a jpeg" if n % 53 == 7 else stand_in_jpeg(n)
        media.append([{"bytes": data, "path": None if n % 41 == 3 else f"src/{n:04d}.jpg"}])
    path = tmp_path / "train-0.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(len(media))], "messages": ["[]"] * len(media),
                             "media": pa.array(media, type=MEDIA)}), path, row_group_size=40)
    monkeypatch.setattr(vi, "EMBEDDED_WINDOW_BYTES", 20_000)  # a few dozen stand-ins per window
    pooled = vi._read_embedded([path], ImageStore(tmp_path / "pool"), ZipLimits().max_image_pixels, workers=2)
    serial = vi._read_embedded([path], ImageStore(tmp_path / "one"), ZipLimits().max_image_pixels, workers=1)
    assert [k for k, _, _ in pooled] == [k for k, _, _ in serial]
    assert len(pooled) == 170 and len({k for k, _, _ in pooled}) == 170
    assert [r for _, r, _ in pooled] == [r for _, r, _ in serial]
    assert [h for _, _, h in pooled] == [h for _, _, h in serial]
    assert sum(r["status"] == "corrupt" for _, r, _ in pooled) == len([n for n in range(170) if n % 53 == 7])
    assert sum(k.startswith("sha256:") for k, _, _ in pooled) == len([n for n in range(170) if n % 41 == 3])
    files = lambda root: sorted(p.relative_to(root).as_posix() for p in root.rglob("*.*"))  # noqa: E731
    assert files(tmp_path / "pool") == files(tmp_path / "one") and len(files(tmp_path / "one")) > 100
