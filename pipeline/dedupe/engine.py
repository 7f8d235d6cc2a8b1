"""The near-duplicate engine: exact candidate search, verification, clusters without chaining.

One engine for every caller (the pipeline's `duplicate_clusters` and `contamination`, the
sample dedupe that reads those clusters, and `rewardhouse dedupe DIR`):

1. **Nodes.** Images with identical bytes (sha256) are one node: exact duplicates, never compared
   again. Flat nodes (verify.py: a solid colour, an empty canvas) take no part in the near search,
   so identical blank images are exact duplicates and blank images of different colours are
   nothing to each other.
2. **Candidates** (search.py, exact multi-index search, radius `max_distance` bits), by five
   routes over the hashes of hashing.py:

       phash    pHash against pHash                 re-encodes, resizes, blur, brightness, grey
       crop     crop_hash of one against pHash of    a copy cropped a few % per side
                the other
       top      top_hash against top_hash           an overlay in a bottom corner
       bottom   bottom_hash against bottom_hash     an overlay in a top corner
       robust   robust_hash against robust_hash     letters over a low-contrast picture (a
                (pictures only: no plain background) watermark across a smooth wallpaper)

   A hash with fewer than DEGENERATE_BITS bits set (the pHash of a flat region: every AC
   coefficient ~0, all tied at the median) stays out of its route: it would match every other.
3. **Verification** (verify.py) of every candidate pair on the thumbnails: accepted as near, crop
   or overlay with a score, or rejected; what it accepts between two images with a plain
   background is looked at again at 256 px (fine.py), which may refuse it.
4. **Clusters without chaining.** Connected components of the accepted pairs are only a start:
   each component's canonical image is chosen (clusters.py's rule), and a node joins the cluster
   only if its pair with the canonical is accepted, by the search or by a verification made
   then. The nodes left over form components among themselves and the same is done again until
   nothing is left. So a cluster never holds two images merely linked through a third.
5. **Contamination**: train/eval image pairs that are the same bytes or an accepted pair, directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np
import pyarrow as pa

from pipeline.dedupe.clusters import canonical_rank, cluster_id, connected_components
from pipeline.dedupe.search import NearPairs
from pipeline.dedupe.verify import DEFAULT_RULE, Rule, Sides, compare_rows

ENGINE_VERSION = "17"  # bump when a decision can change: part of the staged result's key
DEGENERATE_BITS = 8
MAX_CANDIDATES_PER_IMAGE = 16  # nearest candidates kept per image (crowded look-alikes; see _nearest)
BATCH = 2048  # pairs verified at once: memory is BATCH x 2 thumbnails x a few float copies
ROUTES = ("phash", "crop", "top", "bottom", "robust")


class Thumbs(Protocol):
    def __getitem__(self, rows: np.ndarray) -> np.ndarray: ...  # (k, THUMB_BYTES) uint8

    # optional: fine(rows) -> the packed 256 px lumas of the second look (fine.py), None where none


@dataclass
class Pairs:
    """Node pairs a < b with the route and pHash-route distance that found them, and the verdict."""

    a: np.ndarray
    b: np.ndarray
    route: np.ndarray  # int8 index into ROUTES
    distance: np.ndarray  # int16: the distance on that route
    accepted: np.ndarray | None = None
    kind: np.ndarray | None = None
    score: np.ndarray | None = None
    capped: int = 0  # findings within the radius the per-image cap left out, per route (see candidate_pairs)

    def __len__(self) -> int:
        return len(self.a)


def popcount(x: np.ndarray) -> np.ndarray:
    u = np.asarray(x, np.int64).view(np.uint64)
    return np.unpackbits(u.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)


def phash_distance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return popcount(np.bitwise_xor(np.asarray(x, np.int64), np.asarray(y, np.int64)))


# ---- 2. candidates ---------------------------------------------------------------------------


def routed(hashes: np.ndarray) -> np.ndarray:
    """Which hashes are searched on their route: those of DEGENERATE_BITS or more bits set."""
    return popcount(hashes) >= DEGENERATE_BITS


def _capped(ids: np.ndarray, hashes: np.ndarray, max_distance: int, k: int, size: int,
            split: Callable[[np.ndarray, np.ndarray, np.ndarray], list[tuple[np.ndarray, np.ndarray, np.ndarray]]],
            routes: int) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], int]:
    """One search (the routed `hashes` of `ids`), its pairs split by `split` into `routes` routes
    of node pairs (nodes below `size`), each route capped per image (`_nearest_of`'s rule): the
    kept (a, b, distance) of each route and how many pairs the caps left out. The search's pairs
    stay in DuckDB (search.NearPairs) and are read three times, batch by batch (capkernel): to
    count each image's pairs per distance, to rank the ties at each image's k-th distance in at
    most k slots per image, and to keep what the counts and the ranks say. Memory holds the counts,
    the slots, one batch and the pairs kept, never every pair a crowd of look-alikes makes."""
    searched = routed(hashes)
    levels = max_distance + 1
    kept: list[list] = [[] for _ in range(routes)]
    total = 0
    with NearPairs(ids[searched], hashes[searched], max_distance) as found:
        batches = found.batches(max(SMALL_PAIRS, 1))
        first = next(batches, None)
        if first is None or next(batches, None) is None:  # few pairs, held at once: _keep_nearest
            parts = split(*first) if first is not None else []
            out = [(a[keep], b[keep], d[keep]) for a, b, d in parts for keep in [_keep_nearest(a, b, d, k)]]
            out += [(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int16))] * (routes - len(out))
            return out, sum(len(x[0]) for x in parts) - sum(len(x[0]) for x in out)
        del first, batches
        from pipeline.dedupe import capkernel as ck

        counts = [np.zeros((size, levels), np.int32) for _ in range(routes)]
        for batch in found.batches():
            for r, (a, b, d) in enumerate(split(*batch)):
                ck.add_counts(a, b, d, counts[r])
                total += len(a)
        threshold = [np.empty(size, np.int64) for _ in range(routes)]
        ranks = []
        for r in range(routes):
            before, offsets = np.empty(size, np.int64), np.empty(size + 1, np.int64)
            ck.limits(counts[r], k, threshold[r], before)
            counts[r] = None
            ranks.append((offsets, np.empty(ck.tie_slots(threshold[r], before, k, levels, offsets), np.int64),
                          np.zeros(size, np.int64)))
        del counts
        for batch in found.batches():
            for r, (a, b, d) in enumerate(split(*batch)):
                ck.rank_ties(a, b, d, threshold[r], *ranks[r])
        cutoff = []
        for r in range(routes):
            cutoff.append(np.empty(size, np.int64))
            ck.cutoffs(*ranks[r], cutoff[r])
        del ranks
        for batch in found.batches():
            for r, (a, b, d) in enumerate(split(*batch)):
                keep = np.empty(len(a), bool)
                ck.keep_at(a, b, d, threshold[r], cutoff[r], keep)
                kept[r].append((a[keep], b[keep], d[keep]))
    out = [tuple(np.concatenate(x) for x in zip(*parts)) if parts else
           (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int16)) for parts in kept]
    return out, total - sum(len(x[0]) for x in out)


def _whole(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A route whose ids are its nodes: the batch as it is."""
    return [(a, b, d)]


def _phash_crop(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The pHash and crop hashes' one search (ids 2 node for a pHash, 2 node + 1 for a crop hash)
    as three routes in which no node pair repeats: pHash-pHash, pHash-crop, crop-pHash (a < b by
    id); a node's pHash against its own crop hash is no pair."""
    na, nb = a >> 1, b >> 1
    a_crop, b_crop = (a & 1) == 1, (b & 1) == 1
    other = na != nb
    return [(na[w], nb[w], d[w]) for w in (~a_crop & ~b_crop & other, ~a_crop & b_crop & other,
                                           a_crop & ~b_crop & other)]


def candidate_pairs(phash: np.ndarray, crop: np.ndarray, top: np.ndarray, bottom: np.ndarray,
                    searchable: np.ndarray, max_distance: int, max_per_image: int | None = None,
                    robust: np.ndarray | None = None, robust_ok: np.ndarray | None = None) -> Pairs:
    """Every node pair within `max_distance` on any route (nodes where `searchable` is false are
    left out; the robust route takes the nodes where `robust_ok` is true too, none when `robust` is
    None), once, with the route of its smallest distance (ties: the earlier route); then each
    image's `max_per_image` nearest (`_nearest`; `capped` counts the pairs left out).

    Each route's pairs are capped as they come, before they meet the others': the pairs kept in
    the end are among them. (A pair among an image's k nearest over all routes is among its k
    nearest on the route where its distance is smallest: a pair ranked before it there, by
    distance and then the other image's number, is at that distance or nearer over all routes, so
    it ranks before it in the end too.) So crowded look-alikes, whose pairs grow with the square of
    their number, hold memory only for k pairs per image and route and those tied at an image's
    k-th distance (`_capped`; the search's own time still grows with the pairs). The pHash and crop
    hashes share one search; their pairs are capped as three routes in which no node pair repeats:
    pHash-pHash, and the two cross directions."""
    max_per_image = MAX_CANDIDATES_PER_IMAGE if max_per_image is None else max_per_image
    n = len(phash)
    nodes = np.flatnonzero(searchable).astype(np.int64)
    parts = []
    capped = 0

    def add(found: list, route_numbers: tuple[int, ...], left_out: int) -> None:
        nonlocal capped
        capped += left_out
        for (a, b, d), route in zip(found, route_numbers):
            parts.append((a, b, np.full(len(a), route, np.int8), d))

    # phash and crop share one search: ids 2n are pHashes, 2n+1 crop hashes.
    ids = np.concatenate([2 * nodes, 2 * nodes + 1])
    found, left_out = _capped(ids, np.concatenate([phash[nodes], crop[nodes]]), max_distance, max_per_image, n,
                              _phash_crop, 3)
    add(found, (0, 1, 1), left_out)
    for r, hashes in ((2, top), (3, bottom)):
        found, left_out = _capped(nodes, hashes[nodes], max_distance, max_per_image, n, _whole, 1)
        add(found, (r,), left_out)
    if robust is not None:
        pictures = np.flatnonzero(searchable if robust_ok is None else searchable & robust_ok).astype(np.int64)
        found, left_out = _capped(pictures, robust[pictures], max_distance, max_per_image, n, _whole, 1)
        add(found, (4,), left_out)
    pairs = Pairs(*_one_per_pair(parts, n))
    # `capped` counts findings: a pair a route's cap left out counts for that route (even when
    # another route brought it in), and the final cap's leavings once. Counting distinct pairs
    # would take the dedupe of every finding that the caps are there to avoid.
    keep = _nearest(pairs, max_per_image)
    pairs.capped = capped + int((~keep).sum())
    return _subset(pairs, keep) if not keep.all() else pairs


ROUTE_BITS, DISTANCE_BITS = 3, 8  # a route number (0..4) and a distance (0..32) in the packed key


def _one_per_pair(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], n: int):
    """One row per unordered pair of nodes below n among the findings `parts` ((a, b, route, dist)
    arrays, emptied as they are read): the smallest distance, then the earliest route; returned as
    (lo, hi, route, dist) sorted by (lo, hi). When two node numbers, the distance and the route fit
    one int64, each part becomes that key and the keys are sorted themselves and read back (7.7 M
    crowded findings: 3.3 s for an argsort and the gathers after, against 0.9 s; the parts are let
    go as their keys are made); otherwise a lexsort of the columns (more than 2^26 nodes)."""
    node_bits = max(1, int(n - 1).bit_length())
    low = ROUTE_BITS + DISTANCE_BITS
    if 2 * node_bits + low > 63:
        a, b, route, dist = (np.concatenate([p[i] for p in parts]) for i in range(4))
        parts.clear()
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        order = np.lexsort((route, dist, hi, lo))
        lo, hi, route, dist = lo[order], hi[order], route[order], dist[order]
        first = np.ones(len(lo), bool)
        first[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
        return lo[first], hi[first], route[first], dist[first]
    keys = []
    while parts:
        a, b, route, dist = parts.pop(0)
        key = np.minimum(a, b).astype(np.int64)
        key <<= np.int64(node_bits)
        key |= np.maximum(a, b)
        key <<= np.int64(DISTANCE_BITS)
        key |= dist.astype(np.int64)
        key <<= np.int64(ROUTE_BITS)
        key |= route.astype(np.int64)
        keys.append(key)
        del a, b, route, dist
    key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    del keys
    key.sort()
    first = np.ones(len(key), bool)
    first[1:] = (key[1:] >> np.int64(low)) != (key[:-1] >> np.int64(low))
    key = key[first]
    return (key >> np.int64(low + node_bits), (key >> np.int64(low)) & np.int64((1 << node_bits) - 1),
            (key & np.int64((1 << ROUTE_BITS) - 1)).astype(np.int8),
            ((key >> np.int64(ROUTE_BITS)) & np.int64((1 << DISTANCE_BITS) - 1)).astype(np.int16))


def _nearest(pairs: Pairs, k: int) -> np.ndarray:
    """Keep a pair when it is among the k nearest of either of its images (distance, then the
    other image's number): in crowded regions of the hash space (look-alike figures) every image
    keeps its k best candidates, so verification work grows with the images, not with their pairs."""
    return _nearest_of(pairs.a, pairs.b, pairs.distance, k)


def _nearest_of(a: np.ndarray, b: np.ndarray, distance: np.ndarray, k: int, size: int | None = None) -> np.ndarray:
    """`_nearest` over node pairs (a[i], b[i]), each pair listed once, nodes below `size`.

    Without sorting every pair from both ends (12.6 s and 1.5 GB for 11 M pairs): each image's
    pairs are counted per distance, which gives its threshold distance (the k-th nearest's); a pair
    nearer than the threshold of either image is kept, one farther from both is not, and only the
    pairs at an image's threshold are ranked, by the other image's number. The loops are compiled
    (capkernel.nearest_keep): the same arithmetic as whole-array numpy made temporaries of every
    pair and of every image x distance (5.3 M crowded pairs: 1.6-5 s, most of it fresh pages
    zeroed, against 0.3 s)."""
    n = len(a)
    keep = np.zeros(n, bool)
    if n == 0:
        return keep
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if n <= SMALL_PAIRS:
        return _keep_nearest(a, b, np.asarray(distance), k)
    from pipeline.dedupe.capkernel import nearest_keep

    size = int(max(a.max(), b.max())) + 1 if size is None else size
    nearest_keep(a, b, np.asarray(distance).astype(np.int16, copy=False), int(k), int(size), keep)
    return keep


SMALL_PAIRS = 1 << 16  # pairs ranked at once by _keep_nearest; more, by the compiled phases (capkernel)


def _keep_nearest(a: np.ndarray, b: np.ndarray, distance: np.ndarray, k: int) -> np.ndarray:
    """capkernel.nearest_keep's rule for pairs held at once, by sorting: each image's pairs from
    both ends, by distance and then the other image's number; a pair stays when it is among the
    k first of either image. For few pairs (SMALL_PAIRS) this costs less than loading the
    compiled loops (about half a second in a new process), the same keep either way."""
    n = len(a)
    keep = np.zeros(n, bool)
    if n == 0 or k <= 0:
        return keep
    me, other = np.concatenate([a, b]), np.concatenate([b, a])
    order = np.lexsort((other, np.concatenate([distance, distance]), me))
    me = me[order]
    start = np.ones(2 * n, bool)
    start[1:] = me[1:] != me[:-1]
    first = np.maximum.accumulate(np.where(start, np.arange(2 * n), 0))
    keep[order[np.arange(2 * n) - first < k] % n] = True
    return keep


# ---- 3. verification -------------------------------------------------------------------------


def verify(a: np.ndarray, b: np.ndarray, thumbs: Thumbs, stop: Callable[[], None] | None = None,
           aspect: np.ndarray | None = None, chroma: np.ndarray | None = None,
           rule: Rule = DEFAULT_RULE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(accepted, kind, score) for node pairs (a[i], b[i]), in batches of BATCH pairs; `aspect`
    (width / height per node) lets verification look for crops that are not central, `chroma`
    ((n, 2) mean Cb, Cr per node) tells colours apart."""
    n = len(a)
    accepted = np.zeros(n, bool)
    kind = np.full(n, None, dtype=object)
    score = np.zeros(n, np.float32)
    for s in range(0, n, BATCH):
        if stop:
            stop()
        sl = slice(s, s + BATCH)
        regions = getattr(thumbs, "region_hashes", None)  # (nodes, 2) top, bottom: the banner test's hint
        # the signatures are picked by row in the threads that judge them, never gathered whole;
        # the 256 px lumas only for the pairs read again there (the flat test, the second look)
        v = compare_rows(Sides(thumbs, a[sl], thumbs, b[sl]), rule,
                         **({"regions_a": regions[a[sl]], "regions_b": regions[b[sl]]} if regions is not None else {}))
        accepted[sl], kind[sl], score[sl] = v.accepted, v.kind, v.score
    return accepted, kind, score


# ---- 4. clusters -----------------------------------------------------------------------------


@dataclass
class Clustering:
    canonical: np.ndarray  # per node: its cluster's canonical node, or -1 when it is alone
    kind: np.ndarray  # per node: near | crop | overlay against the canonical (None: canonical/alone)
    score: np.ndarray  # per node: verification score against the canonical (nan: none)
    rounds: int
    late_checks: int  # pairs with the canonical verified during clustering (not candidates)
    split_off: int  # nodes a component offered that their canonical's check refused
    late_accepted: list  # (a, b, kind, score) of the late checks that were accepted, a < b


def cluster_nodes(n: int, pairs: Pairs, rank: np.ndarray, thumbs: Thumbs,
                  stop: Callable[[], None] | None = None, aspect: np.ndarray | None = None,
                  chroma: np.ndarray | None = None, separate: frozenset = frozenset(),
                  rule: Rule = DEFAULT_RULE, pixels: np.ndarray | None = None) -> Clustering:
    """Clusters over accepted pairs without chaining (module docstring, step 4). `rank[i]` orders
    nodes for the canonical choice (smaller is better, all distinct); among nodes of as many
    `pixels` (when given), the one with the most pairs accepted as the same pixels comes first,
    then the one with the most accepted pairs;
    node pairs (a < b) in `separate` are never accepted, nor end in one cluster (a reviewer's
    override)."""
    canonical = np.full(n, -1, np.int64)
    kind = np.full(n, None, dtype=object)
    score = np.full(n, np.nan, np.float32)
    ok = pairs.accepted.astype(bool)
    ea, eb = pairs.a[ok], pairs.b[ok]
    verdict = {(int(x), int(y)): (k, s) for x, y, k, s in zip(ea, eb, pairs.kind[ok], pairs.score[ok])}
    open_ = np.ones(n, bool)
    rounds = late = split = 0
    late_accepted = []
    while len(ea):
        rounds += 1
        labels = connected_components(n, ea, eb)
        in_edge = np.zeros(n, bool)
        in_edge[ea] = in_edge[eb] = True
        members = np.flatnonzero(in_edge & open_)
        if members.size == 0:
            break
        # Each component's canonical: the most pixels, then the most pairs in it accepted as the same
        # pixels (near or crop: an original is, against each of its re-encoded, resized or cropped
        # copies; a copy with a caption of the same size is not against one that is cropped; an
        # overlay counts for neither: a copy whose caption hides where two look-alikes differ is
        # accepted against both), then the most pairs in it accepted at all (the members that join
        # it without a new check: an original and its brightened copy tie on the first, but a
        # captioned copy is accepted against the original, not always against the brightened
        # one), then the best-ranked (clusters.py's rule).
        same = np.array([verdict[(int(x), int(y))][0] in ("near", "crop") for x, y in zip(ea, eb)], bool)
        degree = np.bincount(np.concatenate([ea[same], eb[same]]), minlength=n)
        joins = np.bincount(np.concatenate([ea, eb]), minlength=n)
        area = np.zeros(n) if pixels is None else -np.asarray(pixels, np.float64)
        order = members[np.lexsort((rank[members], -joins[members], -degree[members], area[members],
                                    labels[members]))]
        first = np.ones(len(order), bool)
        first[1:] = labels[order[1:]] != labels[order[:-1]]
        head = np.empty(n, np.int64)
        head[labels[order[first]]] = order[first]
        canon_of = head[labels[members]]
        others = members[canon_of != members]
        their_canon = canon_of[canon_of != members]
        by_rank = np.argsort(rank[others], kind="stable")
        others, their_canon = others[by_rank], their_canon[by_rank]
        known = np.array([(min(m, c), max(m, c)) in verdict for m, c in zip(others, their_canon)], bool)
        missing = np.flatnonzero(~known)
        if missing.size:
            late += missing.size
            acc, k, s = verify(others[missing], their_canon[missing], thumbs, stop, aspect, chroma, rule)
            for i, x, y, z in zip(missing, acc, k, s):
                m, c = int(others[i]), int(their_canon[i])
                x = x and (min(m, c), max(m, c)) not in separate
                verdict[(min(m, c), max(m, c))] = (y, z) if x else (None, z)
                if x:
                    late_accepted.append((min(m, c), max(m, c), y, float(z)))
        joined = []
        held: dict[int, list[int]] = {}  # canonical -> its members so far (for the reviewers' separations)
        for m, c in zip(others, their_canon):
            k, s = verdict[(min(int(m), int(c)), max(int(m), int(c)))]
            if k is not None and separate:
                # a pair a reviewer separated never ends in one cluster, not even through a canonical
                # both are accepted against: the later one (in rank order) tries again with the rest
                k = None if any((min(int(m), x), max(int(m), x)) in separate for x in held.get(int(c), [])) else k
            if k is not None:
                joined.append(m)
                held.setdefault(int(c), []).append(int(m))
                canonical[m], kind[m], score[m] = c, k, s
        heads = np.unique(canon_of)
        got_members = np.unique(canonical[np.asarray(joined, np.int64)]) if joined else np.zeros(0, np.int64)
        canonical[got_members] = got_members
        # Settled: every canonical and every member that joined. The rest try again among themselves.
        settled = np.zeros(n, bool)
        settled[heads] = True
        settled[np.asarray(joined, np.int64)] = True
        split += int(len(others) - len(joined))
        open_ &= ~settled
        keep = open_[ea] & open_[eb]
        ea, eb = ea[keep], eb[keep]
    return Clustering(canonical, kind, score, rounds, late, split, late_accepted)


# ---- the whole engine over image rows --------------------------------------------------------

ROW_COLUMNS = ("dataset", "image_key", "sha256", "phash", "crop_hash", "top_hash", "bottom_hash",
               "width", "height", "bytes", "flat", "chroma_cb", "chroma_cr")
OPTIONAL_ROW_COLUMNS = ("robust_hash",)  # absent or null: the image takes no part in the robust route


@dataclass
class Dedupe:
    """The engine's result over image rows (row = index into the input table)."""

    clusters: pa.Table  # row, cluster_id, is_canonical, distance_to_canonical, kind, score (rows in clusters)
    node_of_row: np.ndarray  # rows with the same node have identical bytes
    node_rep: np.ndarray  # each node's representative row (its best-ranked)
    accepted: pa.Table  # a < b (nodes), kind, score: every accepted pair of distinct nodes
    candidates: int  # candidate node pairs from the search (after the per-image cap)
    capped: int  # findings within the radius the per-image cap left out, per route (see candidate_pairs)
    verified: int  # of those, accepted by verification
    rejected: Pairs  # the candidate pairs verification refused (with scores), for review
    clustering: Clustering
    flat_nodes: int
    nodes: int
    forced: dict | None = None  # the effect of each forced decision, by its tag
    applied: pa.Table | None = None  # decisions.find_duplicates: the overrides' effect table


def row_rank(rows: pa.Table, dataset_order: Sequence[str] = ()) -> np.ndarray:
    """Each row's place in the canonical order (clusters.canonical_rank); 0 is the best."""
    def num(name):
        return rows[name].to_numpy(zero_copy_only=False).astype(np.float64)

    return canonical_rank(rows["dataset"].to_pylist(), rows["image_key"].to_pylist(), num("width"), num("height"),
                          num("bytes"), dataset_order)


class _NodeThumbs:
    def __init__(self, thumbs: Thumbs, rep: np.ndarray, region_hashes: np.ndarray | None = None):
        self.thumbs, self.rep, self.region_hashes = thumbs, rep, region_hashes

    def __getitem__(self, nodes: np.ndarray) -> np.ndarray:
        rows = self.rep[np.asarray(nodes, np.int64)]
        order = np.argsort(rows, kind="stable")  # read a memory-mapped file front to back
        out = np.empty((len(rows), self.thumbs[rows[:1]].shape[-1] if len(rows) else 0), np.uint8)
        out[order] = np.asarray(self.thumbs[rows[order]])
        return out

    def fine(self, nodes: np.ndarray) -> list:
        if not hasattr(self.thumbs, "fine"):
            return [None] * len(nodes)
        return self.thumbs.fine(self.rep[np.asarray(nodes, np.int64)])


@dataclass(frozen=True)
class Forced:
    """A reviewer's decisions as (sha256, sha256, tag): `separate` are never a pair, `join` always
    are (accepted with kind OVERRIDE_KIND and the score verification gives them). `Dedupe.forced`
    says what each did, by its tag."""

    separate: tuple[tuple[str, str, object], ...] = ()
    join: tuple[tuple[str, str, object], ...] = ()


OVERRIDE_KIND = "override"


def _force(pairs: Pairs, nodes: np.ndarray, forced: Forced, node_thumbs, stop, aspect, chroma,
           phash: np.ndarray, rule: Rule = DEFAULT_RULE) -> tuple[Pairs, frozenset, dict]:
    """Apply `forced` to verified candidate pairs: (pairs, separate node pairs, the effect of each
    decision by its tag)."""
    node_of = {sha: i for i, sha in enumerate(nodes.tolist())}  # one lookup per named image

    def node_pair(x: str, y: str) -> tuple[int, int] | None:
        i, j = node_of.get(x), node_of.get(y)
        if i is None or j is None:
            return None
        return (min(i, j), max(i, j))

    def settled(p, same: str) -> str | None:  # the effect when there is nothing to do
        if p is None:
            return "not applied: an image is not in this release"
        return same if p[0] == p[1] else None

    index = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(pairs.a, pairs.b))}
    effects, separate = {}, set()
    for x, y, tag in forced.separate:
        p = node_pair(x, y)
        if (done := settled(p, "not applicable: identical bytes are always duplicates")) is not None:
            effects[tag] = done
        else:
            separate.add(p)
            i = index.get(p)
            if i is not None and pairs.accepted[i]:
                effects[tag] = f"applied: verification had accepted the pair ({pairs.kind[i]}, score {pairs.score[i]:.3f}); now refused"
                pairs.accepted[i], pairs.kind[i] = False, None
            else:
                effects[tag] = "applied: the engine had not paired them (kept apart also when clustering)"
    extra = []
    for x, y, tag in forced.join:
        p = node_pair(x, y)
        if (done := settled(p, "applied: identical bytes, already exact duplicates")) is not None:
            effects[tag] = done
        elif p in separate:
            effects[tag] = "not applied: also marked not duplicates"
        elif (i := index.get(p)) is not None:
            effects[tag] = (f"applied: was {'accepted as ' + str(pairs.kind[i]) if pairs.accepted[i] else 'refused'} "
                            f"(score {pairs.score[i]:.3f}); now kind {OVERRIDE_KIND}")
            pairs.accepted[i], pairs.kind[i] = True, OVERRIDE_KIND
        else:
            extra.append((tag, p))
    if extra:
        a = np.array([p[0] for _, p in extra], np.int64)
        b = np.array([p[1] for _, p in extra], np.int64)
        _, _, score = verify(a, b, node_thumbs, stop, aspect, chroma, rule)
        for (tag, _), sc in zip(extra, score):
            effects[tag] = f"applied: not a candidate of the search (score {sc:.3f}); now kind {OVERRIDE_KIND}"
        n = len(a)
        pairs = Pairs(np.concatenate([pairs.a, a]), np.concatenate([pairs.b, b]),
                      np.concatenate([pairs.route, np.zeros(n, np.int8)]),
                      np.concatenate([pairs.distance, phash_distance(phash[a], phash[b]).astype(np.int16)]),
                      np.concatenate([pairs.accepted, np.ones(n, bool)]),
                      np.concatenate([pairs.kind, np.full(n, OVERRIDE_KIND, dtype=object)]),
                      np.concatenate([pairs.score, score.astype(np.float32)]), pairs.capped)
    return pairs, frozenset(separate), effects


def dedupe(rows: pa.Table, thumbs: Thumbs, max_distance: int, stop: Callable[[], None] | None = None,
           forced: Forced | None = None, rule: Rule = DEFAULT_RULE, dataset_order: Sequence[str] = ()) -> Dedupe:
    """The engine (module docstring) over image rows with ROW_COLUMNS (and OPTIONAL_ROW_COLUMNS); `thumbs[rows]` gives their
    thumbnails; `forced` overrules verification for chosen pairs (`Dedupe.forced` says how); `dataset_order`
    ranks the datasets for the canonical choice (clusters.py)."""
    n_rows = rows.num_rows
    sha = rows["sha256"].to_pylist()
    nodes, inverse = np.unique(np.array(sha, dtype=object), return_inverse=True)
    n = len(nodes)
    rank_row = row_rank(rows, dataset_order)
    # A node's representative is its best-ranked row; a node ranks as that row.
    best = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(best, inverse, rank_row)
    rep_of_rank = np.empty(n_rows, np.int64)
    rep_of_rank[rank_row] = np.arange(n_rows)
    rep = rep_of_rank[best]

    def col(name):
        return rows[name].to_numpy(zero_copy_only=False)[rep]

    flat = col("flat").astype(bool)
    phash, crop, top, bottom = (col(c).astype(np.int64) for c in ("phash", "crop_hash", "top_hash", "bottom_hash"))
    robust = robust_ok = None
    if "robust_hash" in rows.column_names:
        column = rows["robust_hash"]
        robust_ok = column.is_valid().to_numpy(zero_copy_only=False)[rep]
        robust = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)[rep]
    pairs = candidate_pairs(phash, crop, top, bottom, ~flat, max_distance, robust=robust, robust_ok=robust_ok)
    node_thumbs = _NodeThumbs(thumbs, rep, np.stack([top, bottom], axis=1))
    width, height = col("width").astype(np.float64), col("height").astype(np.float64)
    aspect = np.where((width > 0) & (height > 0), width / np.maximum(height, 1), 1.0)
    chroma = np.stack([col("chroma_cb"), col("chroma_cr")], axis=1).astype(np.float64)
    pairs.accepted, pairs.kind, pairs.score = verify(pairs.a, pairs.b, node_thumbs, stop, aspect, chroma, rule)
    separate, effects = frozenset(), {}
    if forced is not None and (forced.separate or forced.join):
        pairs, separate, effects = _force(pairs, nodes, forced, node_thumbs, stop, aspect, chroma, phash, rule)
    pixels = np.nan_to_num(width * height, nan=-1.0)
    clustering = cluster_nodes(n, pairs, best, node_thumbs, stop, aspect, chroma, separate, rule, pixels)

    # Accepted node pairs: candidates and late checks.
    ok = pairs.accepted
    late = clustering.late_accepted
    accepted = pa.table({
        "a": pa.array(np.concatenate([pairs.a[ok], np.array([x[0] for x in late], np.int64)])),
        "b": pa.array(np.concatenate([pairs.b[ok], np.array([x[1] for x in late], np.int64)])),
        "kind": pa.array(np.concatenate([pairs.kind[ok], np.array([x[2] for x in late], dtype=object)]).tolist(), pa.string()),
        "score": pa.array(np.concatenate([pairs.score[ok], np.array([x[3] for x in late], np.float32)]), pa.float32()),
    })
    all_phash = rows["phash"].to_numpy(zero_copy_only=False).astype(np.int64)

    # Cluster rows: a node with a canonical, or alone with identical copies.
    canon_node = clustering.canonical.copy()
    sizes = np.bincount(inverse, minlength=n)
    alone_copies = (canon_node < 0) & (sizes > 1)
    canon_node[alone_copies] = np.flatnonzero(alone_copies)
    in_cluster = canon_node[inverse] >= 0
    r_idx = np.flatnonzero(in_cluster)
    v = inverse[r_idx]
    c_node = canon_node[v]
    c_row = rep[c_node]
    datasets, keys = rows["dataset"].to_pylist(), rows["image_key"].to_pylist()
    is_canon = r_idx == c_row
    kind = np.where(v == c_node, "exact", clustering.kind[v]).astype(object)
    kind[is_canon] = None
    score = np.where(v == c_node, 1.0, clustering.score[v]).astype(np.float32)
    order = np.lexsort((rank_row[r_idx], rank_row[c_row]))
    clusters = pa.table({
        "row": pa.array(r_idx[order]),
        "cluster_id": pa.array([cluster_id(datasets[c], keys[c]) for c in c_row[order]], pa.string()),
        "is_canonical": pa.array(is_canon[order]),
        "distance_to_canonical": pa.array(phash_distance(all_phash[r_idx], all_phash[c_row])[order].astype(np.int32)),
        "kind": pa.array(kind[order].tolist(), pa.string()),
        "score": pa.array([None if c else float(s) for c, s in zip(is_canon[order], score[order])], pa.float32()),
    })
    return Dedupe(clusters, inverse.astype(np.int64), rep, accepted, len(pairs), pairs.capped, int(ok.sum()), _subset(pairs, ~ok),
                  clustering, int(flat.sum()), n, effects)


def _subset(p: Pairs, mask: np.ndarray) -> Pairs:
    def take(x):
        return None if x is None else x[mask]

    return Pairs(p.a[mask], p.b[mask], p.route[mask], p.distance[mask], take(p.accepted), take(p.kind), take(p.score),
                 p.capped)
