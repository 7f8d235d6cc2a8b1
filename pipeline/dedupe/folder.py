"""`rewardhouse dedupe DIR`: the dedupe engine (engine.py, the pipeline's own) on any folder."""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa

import numpy as np

from pipeline.dedupe.clusters import cluster_id
from pipeline.dedupe.decisions import hashes_table, run_engine
from pipeline.dedupe.engine import DEGENERATE_BITS, ROUTES, Dedupe, phash_distance, routed
from pipeline.dedupe.hashing import hash_files, is_flat
from pipeline.settings import DEFAULT_MAX_DISTANCE

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp"}
REVIEW_MARKER = ".rewardhouse-review"  # in a report's thumbnail folder: skipped when hashing
CSV_HEADER = ("path", "cluster_id", "is_canonical", "distance", "kind", "score")


@dataclass
class FolderDedupe:
    # (path, cluster_id, is_canonical, distance, kind, score), sorted by path; every image, a
    # singleton being its own cluster (kind and score empty for canonicals and singletons)
    rows: list[tuple] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    result: Dedupe | None = None
    table: "pa.Table | None" = None  # the hashed images' rows (dataset "folder", image_key = path under DIR)
    max_distance: int = DEFAULT_MAX_DISTANCE  # the candidate radius it was found at

    @property
    def clusters(self) -> int:
        return len({r[1] for r in self.rows})

    @property
    def duplicates(self) -> int:
        return sum(1 for r in self.rows if not r[2])

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            if r[4]:
                out[r[4]] = out.get(r[4], 0) + 1
        return out

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(CSV_HEADER)
        writer.writerows((p, c, "true" if canon else "false", d, k or "", "" if s is None else f"{s:.4f}")
                         for p, c, canon, d, k, s in self.rows)
        return buf.getvalue()


def image_files(root: Path) -> list[Path]:
    """Every image under root, recursively, by suffix (case-insensitive), in a stable order; the
    thumbnails of a review report (a folder holding REVIEW_MARKER) are not images of the set."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        if REVIEW_MARKER in filenames:
            dirnames[:] = []
            continue
        dirnames.sort()
        for name in sorted(filenames):
            if Path(name).suffix.lower() in IMAGE_SUFFIXES:
                found.append(Path(dirpath) / name)
    return found


def dedupe_folder(root: Path, max_distance: int = DEFAULT_MAX_DISTANCE, workers: int | None = None,
                  progress: Callable[[int, int, float], None] | None = None, executor=None, rule=None,
                  hashed: list | None = None) -> FolderDedupe:
    """`executor` (pipeline/dedupe/executor.py): where to hash, e.g. on Ray; default the local pool.
    `rule`: verify.Rule (default verify.DEFAULT_RULE); `hashed`: the folder's images hashed
    already (hash_files over (path relative to root, path)), to judge them again by another rule."""
    files = image_files(root)
    items = [(p.relative_to(root).as_posix(), p) for p in files]
    if hashed is not None:
        results = hashed
    elif executor is not None:
        results = executor.hash_files(items, progress=progress)
    else:
        results = hash_files(items, workers=workers, progress=progress)
    out = FolderDedupe(errors=[(r.key, r.error) for r in results if r.error], max_distance=max_distance)
    ok = [r for r in results if not r.error]
    if not ok:
        return out
    rows = hashes_table("folder", ok, {r.key: (root / r.key).stat().st_size for r in ok})
    result = run_engine(rows, max_distance, rule=rule)
    out.result, out.table = result, rows
    c = result.clusters
    listed = {}
    for row, cid, canon, dist, kind, score in zip(c["row"].to_pylist(), c["cluster_id"].to_pylist(),
                                                  c["is_canonical"].to_pylist(), c["distance_to_canonical"].to_pylist(),
                                                  c["kind"].to_pylist(), c["score"].to_pylist()):
        listed[row] = (ok[row].key, cid, canon, dist, kind, score)
    out.rows = sorted(listed.get(i) or (r.key, cluster_id("folder", r.key), True, 0, None, None) for i, r in enumerate(ok))
    return out


def explain_pair(a: Path, b: Path, max_distance: int = DEFAULT_MAX_DISTANCE) -> tuple[list[str], bool | None]:
    """Lines that explain the engine's decision on two image files, and whether they are
    duplicates (None: one of them could not be read)."""
    from pipeline.dedupe.fine import MOVE_MAX, MOVE_MIN
    from pipeline.dedupe.verify import explain

    ha, hb = hash_files([(str(a), a), (str(b), b)], workers=1)
    lines = []
    for h in (ha, hb):
        if h.error:
            return [f"{h.key}: cannot be hashed: {h.error}"], None
        lines.append(f"{h.key}: {h.width}x{h.height} {h.format}, sha256 {h.sha256[:16]}…")
    if ha.sha256 == hb.sha256:
        return lines + ["same bytes (sha256): exact duplicates"], True
    ta, tb = (np.frombuffer(h.thumb, np.uint8) for h in (ha, hb))
    flat = (is_flat(ta), is_flat(tb))
    def dist(x, y):  # None ("-"): a hash the search leaves out of its route (engine.routed)
        if x is None or y is None or not routed(np.array([x, y])).all():
            return None
        return int(phash_distance(np.array([x]), np.array([y]))[0])

    crops = [v for v in (dist(ha.crop_hash, hb.phash), dist(ha.phash, hb.crop_hash)) if v is not None]
    d = {
        "phash": dist(ha.phash, hb.phash),
        "crop": min(crops) if crops else None,
        "top": dist(ha.top_hash, hb.top_hash),
        "bottom": dist(ha.bottom_hash, hb.bottom_hash),
        # pictures only (no plain background in either): "-" where one of them is not searched on it
        "robust": dist(ha.robust_hash, hb.robust_hash),
    }
    lines.append("candidate search, Hamming distance per route (radius " + str(max_distance) + "): "
                 + ", ".join(f"{r} {'-' if d[r] is None else d[r]}" for r in ROUTES))
    if any(flat):
        lines.append("flat image (no structure): only identical bytes count as a duplicate")
        return lines + ["not duplicates"], False
    found = [v for v in d.values() if v is not None]
    candidate = bool(found) and min(found) <= max_distance
    if not found:
        lines.append(f"not a candidate: every route's hash has fewer than {DEGENERATE_BITS} bits set in one of them "
                     "(a picture of a few plain areas: its hashes would match every such picture)")
    elif not candidate:
        lines.append("not a candidate: no route within the radius")
    e = explain(ta, tb, ha.width / ha.height, hb.width / hb.height, (ha.chroma_cb, ha.chroma_cr), (hb.chroma_cb, hb.chroma_cr),
                fine_a=ha.fine, fine_b=hb.fine)
    r = e["rule"]
    al = e["alignment"]
    searched = ((f"fitted (refused at the whole frame): a's x {al[0]:.3f}-{al[1]:.3f}, y {al[2]:.3f}-{al[3]:.3f} "
                 f"on b's x {al[4]:.3f}-{al[5]:.3f}, y {al[6]:.3f}-{al[7]:.3f}") if e["aligned"]
                else "the whole frame (refused there, and no alignment fitted either way)" if e["searched"]
                else "the whole frame (accepted there, no fit)")
    lines.append(f"alignment: {searched}, {e['crop_per_side'] * 100:.1f} % off the most "
                 f"cropped side; mean grey {e['mean_grey'][0]} vs {e['mean_grey'][1]}, spread {e['std_grey'][0]} vs "
                 f"{e['std_grey'][1]}")
    lines.append(f"residual map: {e['differing'] * 100:.2f} % of the frame differs (luma > {r.luma_tol:g}, chroma > "
                 f"{r.chroma_tol:g} beyond the half-pixel envelope); largest region "
                 + (f"{e['region']}: {e['region_share'] * 100:.1f} % of the frame (<= {r.region_max * 100:g} %), "
                    f"{e['hidden'] * 100:.1f} % of the content (<= {r.hidden_max * 100:g} %; above "
                    f"{r.hidden_small * 100:g} % it must differ over >= {r.fill_min * 100:g} % of its box, unless "
                    f"<= {r.quiet_max * 100:g} % of the frame differs: {e['fill'] * 100:.0f} %)" if e["region"] else "none")
                 + f"; outside it {e['stray'] * 100:.2f} % (<= {r.stray_max * 100:g} %)"
                 + (f"; its inside flat in both images {e['flat'] * 100:.0f} % (<= {r.flat_max * 100:g} %, or edges "
                    f"over {e['edges'] * 100:.2f} % of the frame >= {r.edges_min * 100:g} %); the image that "
                    f"continues best across its sides breaks on {e['seam'] * 100:.0f} % of the worst one (<= "
                    f"{r.seam_max * 100:g} % with a plain background)" if e["region"] else "")
                 + f"; score {e['score']:.4f}")
    flat = e["flat_at_256"]
    if flat is not None:
        lines.append(f"flat test read again at 256 px (it alone refused at 128 px; both have a plain background): "
                     f"its inside flat in both images {flat['flat'] * 100:.0f} % (<= {r.flat_max * 100:g} %)")
    look = e["second_look"]
    if look is not None:
        lines.append(f"second look at 256 px (both have a plain background): {look['stray_cells']} differing 8 px cells "
                     f"outside the one region (refused at >= {look['refuses_at']}), {look['differing_cells']} in all, "
                     f"{look['differing'] * 100:.2f} % of the frame; the one region holds {look['hidden'] * 100:.0f} % "
                     f"of the content and differs in {look['fill'] * 100:.0f} % of its cells that hold any (refused above "
                     f"{look['hidden_max'] * 100:g} % and from {look['fill_min'] * 100:g} %)"
                     + ("; the alignment refined there" if look["alignment_refined"] else "")
                     + (f"; the region is an edge moved: {MOVE_MIN}-{MOVE_MAX} px along one axis takes it away (a "
                        "bar grown, other data), refused" if look["edge_moved"] else ""))
    elif any(h.fine is None for h in (ha, hb)):
        lines.append("second look: none (" + ("neither has" if ha.fine is None and hb.fine is None else "one has no")
                     + " plain background: a photo keeps the first look's verdict)")
    if e["accepted"]:
        how = {"near": "the same pixels over the whole frame", "crop": f"the same pixels, cropped {e['crop_per_side'] * 100:.1f} %",
               "overlay": f"the same pixels but inside {e['region']}"}
        lines.append(f"accepted as {e['kind']}: {how[e['kind']]}")
    elif look is not None and look["edge_moved"]:
        lines.append(f"rejected by the second look (the first accepted it as {e['first_look_kind']}): the one "
                     "region is an edge of the picture moved, not something put over it")
    elif look is not None and look["stray_cells"] >= look["refuses_at"]:
        lines.append(f"rejected by the second look (the first accepted it as {e['first_look_kind']}): other "
                     "content in scattered places that 128 px does not resolve")
    else:
        lines.append("rejected by verification")
    duplicate = candidate and e["accepted"]
    return lines + ["duplicates" if duplicate else "not duplicates"], duplicate


def write_report(root: Path, found: FolderDedupe, report: Path):
    """The review page (pipeline/review) of a folder's dedupe: `report` plus its thumbnails in
    `<report stem>_files/` beside it (content-addressed, reused by the next report)."""
    from pipeline.dedupe.decisions import CLUSTERS_SCHEMA, clusters_table, near_misses
    from pipeline.review.page import ReviewInput, write_review
    from pipeline.review.thumbnails import ThumbnailStore

    files = report.parent / f"{report.stem}_files"
    files.mkdir(parents=True, exist_ok=True)
    (files / REVIEW_MARKER).write_text("thumbnails of a rewardhouse review page; not images of the set\n")
    table = found.table
    if table is None:
        from pipeline.review.page import images_of

        table = images_of([])
    clusters = clusters_table(table, found.result) if found.result is not None else CLUSTERS_SCHEMA.empty_table()

    def reader(dataset: str, keys: list[str]):
        for key in keys:
            path = root / key
            if path.is_file():
                yield key, path.read_bytes()

    data = ReviewInput(
        title=f"rewardhouse dedupe: {root}", subtitle=f"{table.num_rows} images",
        images=table, clusters=clusters, near_misses=near_misses(table, found.result) if found.result else None,
        sql_hint=f"rewardhouse dedupe {root} --output clusters.csv   (every image with its cluster, rule and score)",
        rerun=(f"rewardhouse dedupe {root} --max-distance N --report {report}   (this page was made at a candidate "
               f"radius of {found.max_distance} bits; every candidate is verified)"),
    )
    return write_review(report, data, reader, ThumbnailStore(files), seed=str(root), thumbs_dir=f"{files.name}/thumbs")
