"""The review page: a static HTML report of dedupe decisions that opens from disk or a bucket.

`write_review` takes the decision tables (`duplicate_clusters`, `contamination`,
`dedupe_near_misses`, `dedupe_overrides`), the hashed images they name, the records that use
each image, and a reader of image bytes; for a release also the record leaks
(`record_contamination`, `eval_overlap`, `leak_overrides`) and a reader of records' texts; it writes

    <out>/index.html              the page: data embedded as JSON, rendered by inline JavaScript
    <out>/thumbs/ab/<sha256>.jpg  one thumbnail per image content shown (hard links into the store)

Nothing is fetched from anywhere else, so the page works offline and from object storage.

What it shows: every contamination pair; the largest clusters and a seeded random sample of
the others (members paged in the browser; thumbnails for the first MEMBERS_WITH_THUMBS of a
cluster, the rest listed by name); a sample of the near-misses (the best-scoring ones and a random
draw of the rest); the text leaks between records (text and full; the largest overlaps and a
seeded sample of the others), both texts side by side with the copied words marked in each; a
sample of the eval-to-eval overlap; the overrides and what each did. Filters: dataset, rule, eval
set. Each section shows the `rewardhouse sql` command that lists the same rows, following the
filters.

Plain Python: no Dagster.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import time
import unicodedata
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.review.thumbnails import ThumbnailStore, make_thumbnail, thumbnail_from_signature, thumbnail_relpath

TOP_CLUSTERS = 50  # the largest clusters, all shown
SAMPLED_CLUSTERS = 50  # and a random sample of the others
MEMBERS_WITH_THUMBS = 96  # per cluster; further members are listed by name (sql lists them all)
NEAR_TOP = 50  # best-scoring near-misses
NEAR_SAMPLED = 50  # and a random sample of the rest
BATCH = 64  # images read and reduced at a time
RECORDS_SHOWN = 8  # record ids listed per image (with the total)
TEXT_TOP = 50  # text and full leaks with the largest overlap
TEXT_SAMPLED = 50  # and a random sample of the others
OVERLAP_TOP = 50  # eval-to-eval overlaps, the largest text overlap first
OVERLAP_SAMPLED = 50
CONTEXT_CHARS = 240  # of a record's text, shown on each side of the copied span
SPAN_CHARS = 1200  # of the span itself; a longer one is shown by its two ends
MATCHED_CHARS = 240  # of an overlap's matched words in the eval-overlap list
TEMPLATE = Path(__file__).with_name("template.html")

ImageId = tuple[str, str]  # (dataset, image_key)
Reader = Callable[[str, list[str]], Iterator[tuple[str, bytes]]]  # (dataset, keys) -> (key, bytes)
# sha256s -> {sha256: (stored verification signature, width, height)} for those it has
Signatures = Callable[[set[str]], dict[str, tuple[bytes, int, int]]]
RecordId = tuple[str, str]  # (dataset, record key)
TextReader = Callable[[list[RecordId]], dict[RecordId, str]]  # records -> the text that identifies each


@dataclass(frozen=True)
class RecordLeaks:
    """Leaks between records (pipeline/decontam/records.py), for a release's page."""

    contamination: pa.Table | None = None  # record_contamination; None: the candidate has none (built before it)
    overlap: pa.Table | None = None  # eval_overlap
    texts: TextReader | None = None  # the records' texts (each dataset's `record_text`)


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
    record_leaks: RecordLeaks | None = None  # None: no such section (a folder report)
    leak_overrides: pa.Table | None = None  # leak_overrides: the text not_leak decisions and their effects
    rerun: str | None = None  # a folder report: how to run it again (another threshold); no contamination,
    # eval sets or override commands on such a page (the overrides file is the pipeline's)
    signatures: Signatures | None = None  # the stored verification signatures: thumbnails without a read


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
    text_leaks: int = 0  # text and full rows of record_contamination
    text_leaks_shown: int = 0


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
                    workers: int = 0, signatures: Signatures | None = None) -> tuple[dict[str, str | None], int]:
    """Thumbnails for every sha256 in `wanted` (sha -> an image with that content): those already in
    the store are reused; those whose verification signature `signatures` gives are made from it
    (no read); the rest read per dataset through `reader` and reduced on a thread pool (Pillow
    releases the GIL while decoding and resizing). Returns (sha -> relpath or None, made)."""
    out: dict[str, str | None] = {}
    missing = {sha: im for sha, im in wanted.items() if not store.path(sha).is_file()}
    out.update((sha, thumbnail_relpath(sha)) for sha in wanted if sha not in missing)
    made = 0
    for sha, (signature, width, height) in (signatures(set(missing)) if signatures and missing else {}).items():
        if sha in missing:
            store.put(sha, thumbnail_from_signature(signature, width, height))
            out[sha] = thumbnail_relpath(sha)
            made += 1
            del missing[sha]
    todo: dict[str, list[str]] = defaultdict(list)
    for sha, (dataset, key) in missing.items():
        todo[dataset].append(key)
    key_sha = {(d, k): s for s, (d, k) in wanted.items()}

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
    thumbs, made = make_thumbnails(store, wanted, reader, signatures=data.signatures)

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
        "sqlHint": data.sql_hint, "folder": data.rerun is not None, "rerun": data.rerun,
        "contamination": [[ref((r["train_dataset"], r["train_image_key"])), ref((r["eval_dataset"], r["eval_image_key"])),
                           r["distance"], r["kind"], _round(r["score"])] for r in contamination],
        "clusters": [],
        "clusterCount": n_clusters,
        "clusterRows": data.clusters.num_rows,
        "near": [[ref((r["dataset_a"], r["image_key_a"])), ref((r["dataset_b"], r["image_key_b"])), r["route"],
                  r["route_distance"], _round(r["score"]), r["sampled"]] for r in near],
        "nearTotal": data.near_misses.num_rows if data.near_misses is not None else 0,
        "overrides": _rows(data.overrides),
        "leakOverrides": _rows(data.leak_overrides) if data.leak_overrides is not None else None,
        "leaks": _leaks_section(data.record_leaks, rng),
    }
    for cid in chosen:
        rows = members[cid]
        page["clusters"].append([cid, [[ref((r["dataset"], r["image_key"]), i < MEMBERS_WITH_THUMBS), r["is_canonical"],
                                        r["distance_to_canonical"], r["kind"], _round(r["score"])]
                                       for i, r in enumerate(rows)]])
    page["images"] = table
    page["limits"] = {"membersWithThumbs": MEMBERS_WITH_THUMBS, "topClusters": TOP_CLUSTERS,
                      "sampledClusters": SAMPLED_CLUSTERS, "nearTop": NEAR_TOP, "nearSampled": NEAR_SAMPLED,
                      "textTop": TEXT_TOP, "textSampled": TEXT_SAMPLED, "overlapTop": OVERLAP_TOP,
                      "overlapSampled": OVERLAP_SAMPLED}
    html = TEMPLATE.read_text(encoding="utf-8")
    # Records' texts are anyone's text ("<image>", "<!--", "</script>"): no "<" reaches the HTML parser.
    payload = json.dumps(page, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    html = html.replace("__TITLE__", _escape(data.title)).replace("/*__DATA__*/null", payload)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{page_path.name}.tmp"
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, page_path)
    top = [(table[c[0]], table[c[1]]) for c in page["contamination"][:5]]
    leaks = page["leaks"] or {}
    return ReviewStats(page_path, time.perf_counter() - start, len(contamination), n_clusters, len(chosen),
                       len(near), len(page["overrides"]), len(table), made,
                       sum(1 for v in thumbs.values() if v is None), len(html.encode()), top,
                       leaks.get("total", 0), len(leaks.get("rows", [])))


# ---- leaks between records ----------------------------------------------------------------------

def _pick_ranked(table: pa.Table, order: list[tuple[str, str]], top: int, sampled: int,
                 rng: random.Random) -> list[dict]:
    """The first `top` rows of `table` by `order` and a seeded sample of `sampled` others (in that
    order), each with `sampled` saying which; only the rows picked become Python objects."""
    ranked = table.sort_by(order)
    picked = [dict(r, sampled=False) for r in ranked.slice(0, top).to_pylist()]
    rest = ranked.num_rows - len(picked)
    if rest > 0 and sampled > 0:
        draw = pa.array(sorted(rng.sample(range(rest), min(sampled, rest))), pa.int64())
        picked += [dict(r, sampled=True) for r in ranked.slice(len(picked)).take(draw).to_pylist()]
    return picked


def _leaks_section(leaks: RecordLeaks | None, rng: random.Random) -> dict | None:
    """The page's text-leak and eval-overlap data: the rows shown, both records' texts with the
    copied span located in each, and how many rows there are in all."""
    if leaks is None:
        return None
    rc, overlap = leaks.contamination, leaks.overlap
    counts: dict[str, int] = {}
    text_rows: list[dict] = []
    if rc is not None and rc.num_rows:
        counted = rc.group_by("leak").aggregate([("leak", "count")]).to_pydict()
        counts = dict(zip(counted["leak"], counted["leak_count"]))
        with_text = rc.filter(pc.is_in(rc["leak"], value_set=pa.array(["text", "full"], pa.string())))
        text_rows = _pick_ranked(with_text, [("text_overlap", "descending"), ("longest_span", "descending"),
                                             ("train_dataset", "ascending"), ("train_key", "ascending"),
                                             ("eval_dataset", "ascending"), ("eval_key", "ascending")],
                                 TEXT_TOP, TEXT_SAMPLED, rng)
    overlap_rows: list[dict] = []
    if overlap is not None and overlap.num_rows:
        overlap_rows = _pick_ranked(overlap, [("text_overlap", "descending"), ("dataset_a", "ascending"),
                                              ("key_a", "ascending"), ("dataset_b", "ascending"), ("key_b", "ascending")],
                                    OVERLAP_TOP, OVERLAP_SAMPLED, rng)
    wanted = sorted({(r[d], r[k]) for r in text_rows for d, k in (("train_dataset", "train_key"), ("eval_dataset", "eval_key"))})
    texts = leaks.texts(wanted) if leaks.texts is not None and wanted else {}
    sides = [(texts.get((r[d], r[k])), r["matched_text"])
             for r in text_rows for d, k in (("train_dataset", "train_key"), ("eval_dataset", "eval_key"))]
    marked = marked_texts(sides)
    rows = []
    for i, r in enumerate(text_rows):
        rows.append([f"{r['train_dataset']}:{r['train_key']}", f"{r['eval_dataset']}:{r['eval_key']}", r["leak"],
                     _round(r["text_overlap"]), r["image_kind"], r["longest_span"], marked[2 * i], marked[2 * i + 1],
                     r["sampled"]])
    return {
        "present": rc is not None, "rows": rows, "total": counts.get("text", 0) + counts.get("full", 0),
        "byLeak": counts,
        "overlapPresent": overlap is not None, "overlapTotal": overlap.num_rows if overlap is not None else 0,
        "overlap": [[f"{r['dataset_a']}:{r['key_a']}", f"{r['dataset_b']}:{r['key_b']}", r["leak"],
                     _round(r["text_overlap"]), r["image_kind"], _clip_words(r["matched_text"]), r["sampled"]]
                    for r in overlap_rows],
    }


_TOKEN = re.compile(r"\S+")
_WORD = re.compile(r"\w+")
LOCATED_SHARE = 0.5  # of the matched words that must be placed in the text as written to mark them


def _plain_words(texts: list[str]) -> list[str]:
    """A plain normalisation (case, compatibility forms, punctuation), word by word: the fallback
    for what the project's normaliser does not place."""
    return [" ".join(_WORD.findall(unicodedata.normalize("NFKC", t).casefold())) for t in texts]


def _find_run(words: list[str], run: list[str]) -> int | None:
    """The index of the first word of the first occurrence of `run` in `words`."""
    if not run or len(run) > len(words):
        return None
    hay, needle = " " + " ".join(words) + " ", " " + " ".join(run) + " "
    at = hay.find(needle)
    return None if at < 0 else hay.count(" ", 0, at + 1) - 1


def _stream(words_of_tokens: list[str]) -> tuple[list[str], list[int]]:
    """The words of a text normalised token by token, and the token each word comes from."""
    words, owner = [], []
    for j, normalised in enumerate(words_of_tokens):
        for w in (normalised or "").split():
            words.append(w)
            owner.append(j)
    return words, owner


def _project_spans(texts: list[str], runs: list[str], tokens: list[list[tuple[int, int]]]) -> list[tuple[int, int] | None]:
    """Spans by the project's normalisation (pipeline/decontam/text.py, the one `matched_text` is
    in): the run is looked for in the whole text normalised (which also drops wrapper text, labels
    and stock instructions), then its words are aligned with the text's words normalised token by
    token (difflib), which say where each is in the text as written."""
    try:
        from pipeline.decontam.text import normalise
    except ImportError:  # no project normaliser: the plain one places what it can
        return [None] * len(texts)
    wholes = normalise(texts).to_list()
    per_token = normalise([t[a:b] for t, spans in zip(texts, tokens) for a, b in spans]).to_list()
    out: list[tuple[int, int] | None] = []
    at = 0
    for text, run, whole, spans in zip(texts, runs, wholes, tokens):
        stream, owner = _stream(per_token[at:at + len(spans)])
        at += len(spans)
        whole_words, run_words = (whole or "").split(), run.split()
        first = _find_run(whole_words, run_words)
        if first is None:
            out.append(None)
            continue
        to_stream = {}
        for a, b, size in SequenceMatcher(None, whole_words, stream, autojunk=False).get_matching_blocks():
            to_stream.update(zip(range(a, a + size), range(b, b + size)))
        placed = [to_stream[k] for k in range(first, first + len(run_words)) if k in to_stream]
        if len(placed) < max(1, LOCATED_SHARE * len(run_words)):
            out.append(None)
            continue
        out.append((spans[owner[placed[0]]][0], spans[owner[placed[-1]]][1]))
    return out


def _plain_spans(texts: list[str], runs: list[str], tokens: list[list[tuple[int, int]]]) -> list[tuple[int, int] | None]:
    """Spans by the plain normalisation, both sides word by word, the run looked for as it is."""
    per_token = _plain_words([t[a:b] for t, spans in zip(texts, tokens) for a, b in spans])
    out: list[tuple[int, int] | None] = []
    at = 0
    for run, spans, plain_run in zip(runs, tokens, _plain_words(runs)):
        stream, owner = _stream(per_token[at:at + len(spans)])
        at += len(spans)
        run_words = plain_run.split()
        first = _find_run(stream, run_words)
        out.append(None if first is None else (spans[owner[first]][0], spans[owner[first + len(run_words) - 1]][1]))
    return out


def marked_texts(items: list[tuple[str | None, str | None]]) -> list[dict | None]:
    """For each (text, matched words), the text as the page shows it: {before, match, after,
    located}, the matched words found in the text as written (tolerant to case, punctuation,
    spacing and the text the normalisation drops), clipped to CONTEXT_CHARS around the span; None
    for a missing text. The project's normaliser first, then a plain one for what it did not place;
    each is called once over all the texts still to place."""
    tokens = [[(m.start(), m.end()) for m in _TOKEN.finditer(t)] if t else [] for t, _ in items]
    found: list[tuple[int, int] | None] = [None] * len(items)
    for spans_by in (_project_spans, _plain_spans):
        todo = [i for i, (t, m) in enumerate(items) if t and m and found[i] is None]
        if not todo:
            break
        for i, span in zip(todo, spans_by([items[i][0] for i in todo], [items[i][1] for i in todo],
                                          [tokens[i] for i in todo])):
            found[i] = span
    return [None if t is None else _clip(t, found[i]) for i, (t, _) in enumerate(items)]


def _clip(text: str, span: tuple[int, int] | None) -> dict:
    if span is None:
        head = text[:2 * CONTEXT_CHARS]
        return {"before": head + ("…" if len(text) > len(head) else ""), "match": "", "after": "", "located": False}
    a, b = span
    # the mark leaves out punctuation at its ends ("ABC?" marks ABC), not symbols ("110°")
    while a < b - 1 and unicodedata.category(text[a]).startswith("P"):
        a += 1
    while b > a + 1 and unicodedata.category(text[b - 1]).startswith("P"):
        b -= 1
    before, match, after = text[:a], text[a:b], text[b:]
    if len(before) > CONTEXT_CHARS:
        before = "…" + before[-CONTEXT_CHARS:]
    if len(match) > SPAN_CHARS:
        match = match[:SPAN_CHARS // 2] + " … " + match[-SPAN_CHARS // 2:]
    if len(after) > CONTEXT_CHARS:
        after = after[:CONTEXT_CHARS] + "…"
    return {"before": before, "match": match, "after": after, "located": True}


def _clip_words(text: str | None) -> str | None:
    return text if text is None or len(text) <= MATCHED_CHARS else text[:MATCHED_CHARS] + "…"


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
