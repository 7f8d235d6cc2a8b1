"""`--source hf --hf-images`: VisualPRM path references resolved from a split image archive on the
loopback Hub by range, fetching only the central directory and the referenced entries."""

from __future__ import annotations

import io
import json
import random
import zipfile

import duckdb
import pyarrow.parquet as pq
import pytest

from conftest import serve_samples
from dedupe_images import encode, photo
from pipeline.cli import main
from pipeline.sources.http_archive import HttpParts, entry_span
from pipeline.visualprm.hub_images import IMAGE_REPO, resolve_from_hub
from pipeline.visualprm.images import ImageStore
from pipeline.visualprm.sample import PARQUET_RELPATH
from test_image_roots import build_zip

PARTS = ("images.zip_aa", "images.zip_ab", "images.zip_ac")


def path_only_refs(shard) -> list[str]:
    media = pq.read_table(shard, columns=["media"]).column("media").to_pylist()
    return sorted({m["path"] for row in media for m in row if m["bytes"] is None and m["path"]})


def split3(data: bytes) -> dict[str, bytes]:
    cuts = [0, len(data) // 3 + 101, 2 * len(data) // 3 + 7, len(data)]
    return {name: data[a:b] for name, a, b in zip(PARTS, cuts, cuts[1:])}


def served_bytes(hub) -> int:
    total = 0
    for r in hub.body_gets():
        if r.path.rsplit("/", 1)[-1] in PARTS:
            first, last = r.range.split("=")[1].split("-")
            total += int(last) - int(first) + 1
    return total


@pytest.mark.timeout(600)
def test_hf_images_fetch_the_directory_and_the_referenced_entries_only(hub, home, tmp_path, monkeypatch, capsys):
    upstream = tmp_path / "upstream"
    serve_samples(hub, upstream, monkeypatch)
    refs = path_only_refs(upstream / PARQUET_RELPATH)
    # A generated archive in which the references are 1 % of the entries (the rest filler bytes).
    rng = random.Random(7)
    entries = {f"VisualPRM400K/images/{ref}": encode(photo(2000 + i), "JPEG", 90) for i, ref in enumerate(refs)}
    entries.update({f"VisualPRM400K/images/filler/{i:05d}.jpg": rng.randbytes(12_000) for i in range(99 * len(refs))})
    data = build_zip(dict(sorted(entries.items())))
    commit = hub.add_dataset_commit(IMAGE_REPO, split3(data))

    assert main(["run", "--source", "hf", "--hf-images"]) == 0
    capsys.readouterr()
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        located = dict(con.execute("select image_key, located_at from prm_images where origin = 'path'").fetchall())
    where = f"hf://datasets/{IMAGE_REPO}@{commit[:12]}!VisualPRM400K/images/"
    assert set(located) >= set(refs) and all(located[r] == where + r for r in refs)
    # One copy on disk: the fetched images went straight into the content-addressed store.
    index = json.loads((home / "raw" / "hf" / IMAGE_REPO / "fetched.json").read_text())
    assert sorted(index) == sorted(f"VisualPRM400K/images/{r}" for r in refs)
    assert all((home / "images" / rel).is_file() for rel in index.values())
    assert not list((home / "raw" / "hf" / IMAGE_REPO).rglob("*.jpg"))
    manifest = json.loads(next((home / "releases").glob("*/manifest.json")).read_text())
    assert manifest["summary"]["export"]["removed"]["unresolved_by_source"] == {}
    # Only the end of the archive (its directory) and the referenced entries were served.
    served = served_bytes(hub)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        spans = sum(entry_span(zf.getinfo(f"VisualPRM400K/images/{r}"))[1] for r in refs)
        directory = len(data) - zf.start_dir
    assert spans + directory <= served <= spans + directory + 64 * 1024 + 22
    print(f"hf images: fetched {served} of {len(data)} archive bytes ({100 * served / len(data):.2f} %) "
          f"for {len(refs)} of {len(entries)} entries")
    assert served < len(data) * 0.05

    # A rerun fetches nothing: the images are already here.
    hub.clear_log()
    assert main(["run", "--source", "hf", "--hf-images"]) == 0
    assert served_bytes(hub) == 0


def small_archive(hub, n: int, seed: int) -> tuple[list[str], str, list[str], list[int]]:
    """n JPEGs under `top/src/` on the Hub in 3 parts: (references, commit, part URLs, part sizes)."""
    refs = [f"src/{i}.jpg" for i in range(n)]
    parts = split3(build_zip({f"top/{r}": encode(photo(seed + i), "JPEG", 85) for i, r in enumerate(refs)}))
    sha = hub.add_dataset_commit(IMAGE_REPO, parts)
    return refs, sha, [f"{hub.url}/datasets/{IMAGE_REPO}/resolve/{sha}/{name}" for name in parts], [len(p) for p in parts.values()]


@pytest.mark.fast
def test_an_entry_damaged_on_every_fetch_is_quarantined_and_the_rest_resolve(hub, tmp_path):
    refs, sha, urls, sizes = small_archive(hub, 6, 3000)
    source = HttpParts(urls, sizes)
    hub.serve_damaged(PARTS[0], times=2)  # the first entry's fetch and its second try are both damaged
    logged = []
    report, rejected, root = resolve_from_hub(set(refs), ImageStore(tmp_path / "store"), tmp_path / "fetched.json", source,
                                              IMAGE_REPO, sha, budget_bytes=0, log=logged.append)
    assert [(r.stage, r.record_key) for r in rejected] == [("resolve", "src/0.jpg")] and "fetched twice" in rejected[0].reason
    assert report.entries_fetched == 5 and report.damaged == ["src/0.jpg"]
    assert sorted(json.loads((tmp_path / "fetched.json").read_text())) == [f"top/src/{i}.jpg" for i in range(1, 6)]
    assert len(list((tmp_path / "store").rglob("*.jpg"))) == 5
    assert root.locate("src/0.jpg") == (None, None) and root.locate("src/3.jpg")[0][0] == "hub"
    assert "a full resolve fetches" in logged[0] and "% of the archive" in logged[0]


@pytest.mark.fast
def test_a_budget_bounds_what_a_run_fetches_and_the_next_run_goes_on(hub, tmp_path):
    refs, sha, urls, sizes = small_archive(hub, 8, 4000)
    first = HttpParts(urls, sizes)
    store, index = ImageStore(tmp_path / "store"), tmp_path / "fetched.json"
    report, _, _ = resolve_from_hub(set(refs), store, index, first, IMAGE_REPO, sha, budget_bytes=sum(sizes) // 2)
    assert 0 < report.entries_fetched < 8 and report.over_budget == 8 - report.entries_fetched
    assert report.fetched_bytes <= sum(sizes) // 2
    again, _, _ = resolve_from_hub(set(refs), store, index, HttpParts(urls, sizes), IMAGE_REPO, sha, budget_bytes=0)
    assert again.entries_cached == report.entries_fetched and again.entries_fetched == 8 - report.entries_fetched
