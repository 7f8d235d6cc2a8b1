"""The review page: a static HTML report of dedupe decisions that opens from disk or a bucket.

`write_review` takes the decision tables (`duplicate_clusters`, `contamination`,
`dedupe_near_misses`, `dedupe_overrides`), the hashed images they name, the records that use
each image, and a reader of image bytes; it writes

    <out>/index.html              the page: data embedded as JSON, rendered by inline JavaScript
    <out>/thumbs/ab/<sha256>.jpg  one thumbnail per image content shown (hard links into the store)

Nothing is fetched from anywhere else, so the page works offline and from object storage.

What it shows: every contamination pair; the largest clusters and a seeded random sample of
the others (members paged in the browser; thumbnails for the first MEMBERS_WITH_THUMBS of a
cluster, the rest listed by name); a sample of the near-misses (the best-scoring ones and a random
draw of the rest); the overrides and what each did. Filters: dataset, rule, eval set. Each section
shows the `rewardhouse sql` command that lists the same rows, following the filters.

Plain Python: no Dagster.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.review.thumbnails import ThumbnailStore, make_thumbnail, thumbnail_relpath

TOP_CLUSTERS = 50  # the largest clusters, all shown
SAMPLED_CLUSTERS = 50  # and a random sample of the others
MEMBERS_WITH_THUMBS = 96  # per cluster; further members are listed by name (sql lists them all)
NEAR_TOP = 50  # best-scoring near-misses
NEAR_SAMPLED = 50  # and a random sample of the rest
BATCH = 64  # images read and reduced at a time
RECORDS_SHOWN = 8  # record ids listed per image (with the total)
TEMPLATE = Path(__file__).with_name("template.html")

ImageId = tuple[str, str]  # (dataset, image_key)
Reader = Callable[[str, list[str]], Iterator[tuple[str, bytes]]]  # (dataset, keys) -> (key, bytes)


@dataclass
class ReviewInput:
    title: str
    images: pa.Table  # dataset, image_key, sha256, width, height, bytes (every hashed image)
    clusters: pa.Table  # duplicate_clusters
    contamination: pa.Table | None = None
    near_misses: pa.Table | None = None
    overrides: pa.Table | None = None  # dedupe_overrides
    records: pa.Table | None = None  # dataset, image_key, record, in_export
    release_id: str | None = None
    schema: str | None = None  # the warehouse schema of the release, for sql commands
    sql_hint: str | None = None  # shown instead of sql commands (e.g. a folder report's CSV command)
    subtitle: str = ""


@dataclass
class ReviewStats:
    path: Path
    seconds: float
    contamination_pairs: int
    clusters: int
    clusters_shown: int
    near_misses_shown: int
    overrides: int
    images_shown: int
    thumbnails_made: int
    thumbnails_missing: int
    page_bytes: int
    top_pairs: list = field(default_factory=list)  # the best contamination pairs: (train, eval, thumb paths)


def _rows(table: pa.Table | None) -> list[dict]:
    return table.to_pylist() if table is not None and table.num_rows else []


def _pick_clusters(clusters: pa.Table, rng: random.Random) -> tuple[list[str], int]:
    """The largest clusters and a seeded sample of the others (ids), and how many there are."""
    counted = clusters.group_by("cluster_id").aggregate([("cluster_id", "count")]).to_pydict()
    sizes = dict(zip(counted["cluster_id"], counted["cluster_id_count"]))
    ranked = sorted(sizes, key=lambda c: (-sizes[c], c))
    top, rest = ranked[:TOP_CLUSTERS], ranked[TOP_CLUSTERS:]
    sampled = sorted(rng.sample(rest, min(SAMPLED_CLUSTERS, len(rest))), key=lambda c: (-sizes[c], c))
    return top + sampled, len(ranked)


def _pick_near(near: list[dict], rng: random.Random) -> list[dict]:
    ranked = sorted(near, key=lambda r: -r["score"])
    top, rest = ranked[:NEAR_TOP], ranked[NEAR_TOP:]
    picked = top + sorted(rng.sample(rest, min(NEAR_SAMPLED, len(rest))), key=lambda r: -r["score"])
    for i, r in enumerate(picked):
        r["sampled"] = i >= len(top)
    return picked


def make_thumbnails(store: ThumbnailStore, wanted: dict[str, ImageId], reader: Reader,
                    workers: int = 0) -> tuple[dict[str, str | None], int]:
    """Thumbnails for every sha256 in `wanted` (sha -> an image with that content): those already in
    the store are reused, the rest read per dataset through `reader` and reduced on a thread pool
    (Pillow releases the GIL while decoding and resizing). Returns (sha -> relpath or None, made)."""
    out: dict[str, str | None] = {}
    todo: dict[str, list[str]] = defaultdict(list)
    for sha, (dataset, key) in wanted.items():
        if store.path(sha).is_file():
            out[sha] = thumbnail_relpath(sha)
        else:
            todo[dataset].append(key)
    key_sha = {(d, k): s for s, (d, k) in wanted.items()}
    made = 0

    def reduce(item: tuple[str, bytes]) -> tuple[str, bytes | None]:
        sha, data = item
        try:
            return sha, make_thumbnail(data)
        except Exception:  # not an image after all: a placeholder on the page
            return sha, None

    def loaded() -> Iterator[tuple[str, bytes]]:
        for dataset, keys in todo.items():
            for key, data in reader(dataset, keys):
                yield key_sha[(dataset, key)], data

    # `pool.map` would read every image first; a batch at a time keeps memory to BATCH images.
    with ThreadPoolExecutor(max_workers=workers or min(8, (os.cpu_count() or 2) * 2)) as pool:
        source = loaded()
        while batch := list(itertools.islice(source, BATCH)):
            for sha, thumb in pool.map(reduce, batch):
                if thumb is not None:
                    store.put(sha, thumb)
                    made += 1
                out[sha] = thumbnail_relpath(sha) if thumb is not None else None
    for sha in wanted:
        out.setdefault(sha, None)  # the reader did not find it
    return out, made


def _link(src: Path, dst: Path) -> None:
    if dst.exists():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def write_review(page_path: Path, data: ReviewInput, reader: Reader, store: ThumbnailStore, seed: str = "",
                 thumbs_dir: str = "thumbs") -> ReviewStats:
    """Write the page for `data` to `page_path`, its thumbnails under `thumbs_dir` beside it (see the
    module docstring). When `store` is that very folder the thumbnails are already in place."""
    start = time.perf_counter()
    rng = random.Random(seed or data.release_id or "review")
    contamination = sorted(_rows(data.contamination), key=lambda r: (-(r["score"] or 0), r["train_image_key"]))
    near = _pick_near(_rows(data.near_misses), rng)
    chosen, n_clusters = _pick_clusters(data.clusters, rng)

    # Clusters shown: canonical first, then members by score (best first), then name.
    members: dict[str, list[dict]] = defaultdict(list)
    picked = data.clusters.filter(pc.is_in(data.clusters["cluster_id"], value_set=pa.array(chosen, pa.string())))
    for r in picked.to_pylist():
        members[r["cluster_id"]].append(r)
    for rows in members.values():
        rows.sort(key=lambda r: (not r["is_canonical"], -(r["score"] or 0), r["dataset"], r["image_key"]))

    # Every image shown, and the one image per content whose bytes make its thumbnail.
    shown: list[ImageId] = []
    thumb_of: set[ImageId] = set()
    for r in contamination:
        for im in ((r["train_dataset"], r["train_image_key"]), (r["eval_dataset"], r["eval_image_key"])):
            shown.append(im)
            thumb_of.add(im)
    for cid in chosen:
        for i, r in enumerate(members[cid]):
            shown.append((r["dataset"], r["image_key"]))
            if i < MEMBERS_WITH_THUMBS:
                thumb_of.add((r["dataset"], r["image_key"]))
    for r in near:
        for im in ((r["dataset_a"], r["image_key_a"]), (r["dataset_b"], r["image_key_b"])):
            shown.append(im)
            thumb_of.add(im)
    images = _images_of(data.images, set(shown))
    wanted: dict[str, ImageId] = {}
    for im in sorted(thumb_of):
        row = images.get(im)
        if row is not None:
            wanted.setdefault(row["sha256"], im)
    thumbs, made = make_thumbnails(store, wanted, reader)

    # The page's own copy of each thumbnail (hard links: a few KB each, shared with the store).
    out = page_path.parent
    target = out / thumbs_dir
    in_place = (store.root / "thumbs").resolve() == target.resolve()
    if not in_place:
        if target.exists():
            shutil.rmtree(target)
        for sha, rel in thumbs.items():
            if rel:
                _link(store.root / rel, out / thumbs_dir / rel[len("thumbs/"):])
    thumbs = {sha: (f"{thumbs_dir}/{rel[len('thumbs/'):]}" if rel else None) for sha, rel in thumbs.items()}

    # Image table of the page: one entry per image shown, referenced by number.
    index: dict[ImageId, int] = {}
    table: list[list] = []
    records = _records(data.records, set(shown))

    def ref(im: ImageId, with_thumb: bool = True) -> int:
        if im not in index:
            row = images.get(im) or {}
            sha = row.get("sha256")
            recs = records.get(im, (0, [], 0))
            index[im] = len(table)
            table.append([im[0], im[1], sha, row.get("width"), row.get("height"), row.get("bytes"),
                          thumbs.get(sha) if with_thumb and sha else None, recs[0], recs[1], recs[2]])
        elif with_thumb and table[index[im]][6] is None and (sha := table[index[im]][2]):
            table[index[im]][6] = thumbs.get(sha)
        return index[im]

    page = {
        "title": data.title, "subtitle": data.subtitle, "release": data.release_id, "schema": data.schema,
        "sqlHint": data.sql_hint,
        "contamination": [[ref((r["train_dataset"], r["train_image_key"])), ref((r["eval_dataset"], r["eval_image_key"])),
                           r["distance"], r["kind"], _round(r["score"])] for r in contamination],
        "clusters": [],
        "clusterCount": n_clusters,
        "clusterRows": data.clusters.num_rows,
        "near": [[ref((r["dataset_a"], r["image_key_a"])), ref((r["dataset_b"], r["image_key_b"])), r["route"],
                  r["route_distance"], _round(r["score"]), r["sampled"]] for r in near],
        "nearTotal": data.near_misses.num_rows if data.near_misses is not None else 0,
        "overrides": _rows(data.overrides),
    }
    for cid in chosen:
        rows = members[cid]
        page["clusters"].append([cid, [[ref((r["dataset"], r["image_key"]), i < MEMBERS_WITH_THUMBS), r["is_canonical"],
                                        r["distance_to_canonical"], r["kind"], _round(r["score"])]
                                       for i, r in enumerate(rows)]])
    page["images"] = table
    page["limits"] = {"membersWithThumbs": MEMBERS_WITH_THUMBS, "topClusters": TOP_CLUSTERS,
                      "sampledClusters": SAMPLED_CLUSTERS, "nearTop": NEAR_TOP, "nearSampled": NEAR_SAMPLED}
    html = TEMPLATE.read_text(encoding="utf-8")
    payload = json.dumps(page, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    html = html.replace("__TITLE__", _escape(data.title)).replace("/*__DATA__*/null", payload)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{page_path.name}.tmp"
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, page_path)
    top = [(table[c[0]], table[c[1]]) for c in page["contamination"][:5]]
    return ReviewStats(page_path, time.perf_counter() - start, len(contamination), n_clusters, len(chosen),
                       len(near), len(page["overrides"]), len(table), made,
                       sum(1 for v in thumbs.values() if v is None), len(html.encode()), top)


def _images_of(images: pa.Table, shown: set[ImageId]) -> dict[ImageId, dict]:
    """The hashed-image rows of the images shown (the table may hold every image of every dataset)."""
    if not shown:
        return {}
    joined = pc.binary_join_element_wise(images["dataset"], images["image_key"], "\x00")
    wanted = pa.array([f"{d}\x00{k}" for d, k in shown], pa.string())
    rows = images.filter(pc.is_in(joined, value_set=wanted)).select(
        ["dataset", "image_key", "sha256", "width", "height", "bytes"]).to_pylist()
    return {(r["dataset"], r["image_key"]): r for r in rows}


def _round(x):
    return None if x is None else round(float(x), 4)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _records(records: pa.Table | None, shown: set[ImageId]) -> dict[ImageId, tuple[int, list[str], int]]:
    """(dataset, key) -> (records using it, the first RECORDS_SHOWN ids, how many are out of the export)."""
    out: dict[ImageId, list] = {}
    if records is None or not records.num_rows:
        return {}
    for d, k, rec, in_export in zip(*(records[c].to_pylist() for c in ("dataset", "image_key", "record", "in_export"))):
        if (d, k) not in shown:
            continue
        entry = out.setdefault((d, k), [0, [], 0])
        entry[0] += 1
        if len(entry[1]) < RECORDS_SHOWN:
            entry[1].append(rec)
        if in_export is False:
            entry[2] += 1
    return {k: tuple(v) for k, v in out.items()}


def images_of(rows: Iterable[dict]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=pa.schema([
        ("dataset", pa.string()), ("image_key", pa.string()), ("sha256", pa.string()),
        ("width", pa.int32()), ("height", pa.int32()), ("bytes", pa.int64())]))
