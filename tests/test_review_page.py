"""The review page writer (pipeline/review/page.py) without Dagster or a browser: what it selects,
the thumbnails it makes (once per content), paging of a large cluster, and `rewardhouse dedupe
DIR --report` on a folder (whose thumbnails the next run does not take for images)."""

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.review import page as review_page
from pipeline.review.page import ReviewInput, images_of, write_review
from pipeline.review.thumbnails import ThumbnailStore

from tests.dedupe_images import caption, encode, folder_with_a_crop, half, photo

pytestmark = pytest.mark.fast


def _embedded(html: str) -> dict:
    return json.loads(re.search(r"const DATA = (\{.*?\});\n", html, re.S).group(1))


def _set(n_members: int):
    """One cluster of `n_members` images (canonical big.png), and one contamination pair."""
    data = {("mmrb2", "eval.png"): encode(photo(1)), ("visualprm", "leak.jpg"): encode(half(photo(1)), "JPEG", 80)}
    rows = [{"cluster_id": "c1", "dataset": "visualprm", "image_key": "big.png", "is_canonical": True,
             "distance_to_canonical": 0, "kind": None, "score": None}]
    data[("visualprm", "big.png")] = encode(photo(2))
    for i in range(n_members):
        key = f"m{i:03d}.jpg"
        data[("visualprm", key)] = encode(caption(photo(2), text=f"copy {i}"), "JPEG", 60 + i % 30)
        rows.append({"cluster_id": "c1", "dataset": "visualprm", "image_key": key, "is_canonical": False,
                     "distance_to_canonical": i % 5, "kind": "overlay", "score": 0.99 - i / 10000})
    images = images_of({"dataset": d, "image_key": k, "sha256": f"{hash((d, k)) & (2**64 - 1):064x}", "width": 480,
                        "height": 360, "bytes": len(b)} for (d, k), b in data.items())
    contamination = pa.Table.from_pylist([{"train_dataset": "visualprm", "train_image_key": "leak.jpg",
                                           "eval_dataset": "mmrb2", "eval_image_key": "eval.png", "distance": 2,
                                           "kind": "near", "score": 0.991}])
    return data, images, pa.Table.from_pylist(rows), contamination


def _reading(data: dict, reads: list):
    """A review reader over `data` ((dataset, key) -> bytes) that notes each image it reads."""
    def reader(dataset, keys):
        for key in keys:
            reads.append((dataset, key))
            yield key, data[(dataset, key)]

    return reader


def test_every_pair_and_a_large_cluster_paged_with_bounded_thumbnails(tmp_path, monkeypatch):
    monkeypatch.setattr(review_page, "MEMBERS_WITH_THUMBS", 40)
    data, images, clusters, contamination = _set(120)
    reads = []
    reader = _reading(data, reads)

    store = ThumbnailStore(tmp_path / "store")
    out = tmp_path / "release" / "review" / "index.html"
    stats = write_review(out, ReviewInput("t", images, clusters, contamination, release_id="r1", schema="release_r1"),
                         reader, store)
    page = _embedded(out.read_text())
    # The pair, both images with thumbnails that exist beside the page.
    (pair,) = page["contamination"]
    train, ev = page["images"][pair[0]], page["images"][pair[1]]
    assert (train[0], train[1], ev[0], ev[1]) == ("visualprm", "leak.jpg", "mmrb2", "eval.png")
    assert pair[2:] == [2, "near", 0.991]
    for im in (train, ev):
        assert (out.parent / im[6]).is_file() and (out.parent / im[6]).stat().st_size <= 8 * 1024
    # The cluster: all 121 members listed, canonical first; thumbnails for the first 40 only.
    (cluster,) = page["clusters"]
    assert cluster[0] == "c1" and len(cluster[1]) == 121 and cluster[1][0][1] is True
    with_thumb = [m for m in cluster[1] if page["images"][m[0]][6]]
    assert len(with_thumb) == 40 and with_thumb == cluster[1][:40]
    assert stats.thumbnails_made == 42 and len(reads) == 42  # 40 members + the pair
    assert len(list((out.parent / "thumbs").rglob("*.jpg"))) == 42
    assert stats.page_bytes < 200_000
    # A second page over the same images reads nothing: thumbnails are content-addressed.
    reads.clear()
    again = write_review(tmp_path / "other" / "index.html", ReviewInput("t", images, clusters, contamination), reader, store)
    assert reads == [] and again.thumbnails_made == 0
    assert page["schema"] == "release_r1" and page["release"] == "r1"  # the sql commands name the release's schema


def test_clusters_beyond_the_largest_are_a_seeded_sample(tmp_path, monkeypatch):
    monkeypatch.setattr(review_page, "TOP_CLUSTERS", 3)
    monkeypatch.setattr(review_page, "SAMPLED_CLUSTERS", 4)
    rows, keys = [], []
    for c in range(20):
        size = 2 + (c == 0) * 5 + (c == 1) * 3 + (c == 2) * 2  # clusters 0, 1, 2 are the largest
        for m in range(size):
            key = f"c{c:02d}_{m}.png"
            keys.append(key)
            rows.append({"cluster_id": f"c{c:02d}", "dataset": "visualprm", "image_key": key, "is_canonical": m == 0,
                         "distance_to_canonical": 0, "kind": None if m == 0 else "near", "score": None if m == 0 else 0.99})
    images = images_of({"dataset": "visualprm", "image_key": k, "sha256": f"{i:064x}", "width": 10, "height": 10,
                        "bytes": 1} for i, k in enumerate(keys))

    def shown(seed):
        out = tmp_path / seed / "index.html"
        write_review(out, ReviewInput("t", images, pa.Table.from_pylist(rows)), lambda d, k: iter(()),
                     ThumbnailStore(tmp_path / "s"), seed=seed)
        return [c[0] for c in _embedded(out.read_text())["clusters"]]

    first = shown("a")
    assert first[:3] == ["c00", "c01", "c02"] and len(first) == 7 and len(set(first)) == 7
    assert shown("a") == first  # the same seed, the same sample
    assert any(shown(s)[3:] != first[3:] for s in ("b", "c", "d"))


def test_dedupe_report_on_a_folder(tmp_path, capsys):
    folder = folder_with_a_crop(tmp_path / "pics")
    report = folder / "report.html"
    assert main(["dedupe", str(folder), "--report", str(report), "--output", str(tmp_path / "c.csv")]) == 0
    page = _embedded(report.read_text())
    (cluster,) = page["clusters"]
    names = {page["images"][m[0]][1]: m for m in cluster[1]}
    assert set(names) == {"a.png", "a_crop.png"} and names["a_crop.png"][3] == "crop"
    for m in cluster[1]:
        assert (folder / page["images"][m[0]][6]).is_file()  # report_files/thumbs/ab/<sha>.jpg
    assert page["sqlHint"].startswith(f"rewardhouse dedupe {folder} --output")
    assert page["leaks"] is None and page["leakOverrides"] is None  # no records in a folder: no leak section
    assert page["folder"] and page["rerun"].startswith(f"rewardhouse dedupe {folder} --max-distance N --report {report}")
    # The report's thumbnails are not images of the set on the next run.
    capsys.readouterr()
    assert main(["dedupe", str(folder)]) == 0
    listed = capsys.readouterr().out.splitlines()[1:]
    assert sorted(line.split(",")[0] for line in listed) == ["a.png", "a_crop.png", "b.png"]


def test_thumbnails_come_from_the_stored_signatures_without_reading_the_images(tmp_path):
    """With the release's stored signatures at hand, the page's thumbnails are made from them: no
    image is read again, each has the image's aspect at make_thumbnail's size, and its colours are
    the image's (a red, a green and a blue picture stay so). Images without a signature are read."""
    import io

    import numpy as np
    from PIL import Image

    from pipeline.dedupe.hashing import hash_bytes
    from pipeline.review.release import stored_signatures
    from pipeline.review.thumbnails import make_thumbnail

    data, images, clusters, contamination = _set(6)
    colours = [(200, 30, 30), (30, 180, 40), (40, 60, 210)]
    for i, key in enumerate(sorted(data)):  # each image a flat colour with a dark bar, in the aspect of its size
        w, h = (400, 225) if i % 2 else (180, 320)
        im = Image.new("RGB", (w, h), colours[i % 3])
        im.paste((20, 20, 20), (w // 4, h // 3, w // 4 + 20 + 4 * i, h // 2))  # each image its own
        buf = io.BytesIO()
        im.save(buf, "PNG")
        data[key] = buf.getvalue()
    shas = {key: hash_bytes(key[1], blob).sha256 for key, blob in data.items()}
    images = pa.Table.from_pylist([{**r, "sha256": shas[(r["dataset"], r["image_key"])]} for r in images.to_pylist()])
    without = sorted(data)[0]  # this one has no stored signature: read as before
    rows = []
    for key, blob in data.items():
        h = hash_bytes(key[1], blob)
        if key != without:
            rows.append({"sha256": h.sha256, "thumb": h.thumb, "width": h.width, "height": h.height})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "signatures.parquet", row_group_size=2)
    reads = []
    reader = _reading(data, reads)

    store = ThumbnailStore(tmp_path / "store")
    stats = write_review(tmp_path / "page" / "index.html",
                         ReviewInput("t", images, clusters, contamination,
                                     signatures=stored_signatures(tmp_path / "signatures.parquet", batch_rows=3)),
                         reader, store)
    assert reads == [without] and stats.thumbnails_made == len(data)
    for i, key in enumerate(sorted(data)):
        made = Image.open(store.path(shas[key]))
        reference = Image.open(io.BytesIO(make_thumbnail(data[key])))
        assert made.size == reference.size, key
        corner = np.asarray(made.convert("RGB"))[2:8, 2:8].reshape(-1, 3).mean(axis=0)
        assert np.abs(corner - colours[i % 3]).max() < 25, (key, corner)
