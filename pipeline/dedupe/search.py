"""Exact Hamming-radius search over 64-bit hashes: every pair within `max_distance`, not quadratic.

Hashes are signed 64-bit integers (the two's complement of the unsigned hash); the distance of
two hashes is `bit_count(xor(a, b))`, which DuckDB computes on all 64 bits of a BIGINT.

The search is multi-index hashing with per-band radii (the "general pigeonhole" of GPH, Qin et
al., ICDE 2018), run as equality joins in DuckDB:

1. The 64 bits are cut into m contiguous bands of widths w_1..w_m, and each band i gets a radius
   t_i >= 0 with  sum_i (t_i + 1) = r + 1  (`band_layout`, `band_radii`).
2. Why this is exact: let e_i be the number of differing bits of a pair inside band i, so the
   pair's distance is sum_i e_i. If e_i >= t_i + 1 held for every band, the distance would be at
   least sum_i (t_i + 1) = r + 1. So a pair within r has e_i <= t_i in at least one band. (With
   t_i = 0 and m = r + 1 this is the plain pigeonhole split. The default at r = 8 is bands of
   18/16/15/15 bits with radii 2/1/1/1: 3 + 2 + 2 + 2 = 9, so a pair within 8 differs in at most 2
   bits of the 18-bit band or in at most 1 bit of one of the others.)
3. Candidates for band i: every hash x is expanded into the probe keys  band_i(x) XOR mask  for all
   masks of weight 1..t_i inside the band, and the probes are equality-joined with band_i(y) of
   every hash y; the mask  band_i(x) XOR band_i(y)  has weight e_i <= t_i, so each pair of step 2
   is produced. Weight-0 (equal band keys) is a plain self-join on band_i. A pair at e_i >= 1 would
   be produced from both ends; only the end whose key has a 0 at the mask's highest bit probes
   (`k & top = 0`), which halves the probes and yields each pair once: the highest bit of
   x_i XOR y_i is 0 in exactly one of x_i, y_i.
4. Each candidate is verified exactly (`bit_count(xor(x, y)) <= r`) and kept only in the first
   band where it qualifies (e_j > t_j for every earlier band j, checked on the XOR), so a pair is
   reported once without DISTINCT.
5. Locality: each band's rows are sorted by band key before the join, so a chunk of probes
   (consecutive keys under one mask) meets build rows stored close together. Measured at 1M
   hashes this halves the join time; explicit partitioning of the key space did not beat it.

The search runs over distinct hash values; ids sharing a hash are paired at distance 0 and the
near pairs of distinct values are expanded to their ids at the end.

Choosing the bands: `band_layout` minimises a cost model fitted to timings of single bands on
1M random hashes (DuckDB 2.0, 2 cores). Band i costs  n * (V(w_i, t_i) - 1) / 2  probes (~12 ns
each: the cross product with the masks, a hash-join probe),  n^2 / 2 * V(w_i, t_i) / 2^w_i
candidates (~2 ns each: a match and its verification) and ~100 ns per hash of fixed work (sort,
self-join), V(w, t) being the number of masks of weight <= t in w bits. Probes dominate, so the
model prefers narrower bands and radius 1-2 over wide bands with radius 3. Measured on 1M random
hashes (whole search):

    r = 8   18/16/15/15, radii 2/1/1/1   3.9 s   (22/21/21 at 2/2/2: 5.0 s; 13/13/13/13/12 at 1/1/1/1/0: 8.7 s)
    r = 10  17/17/17/13, radii 2/2/2/1   8.3 s   (22/22/20 at 3/3/2: 23.8 s)

Plain pigeonhole (r + 1 bands of ~7 bits, radius 0) would verify about n^2/2 * 9/2^7, 3.5e10
candidates at r = 8. Any layout is exact; the layout only changes the speed.
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import pyarrow as pa

from pipeline.settings import MAX_DEDUPE_DISTANCE, quiet_duckdb
from pipeline.spill import SpillFolder

if TYPE_CHECKING:
    import duckdb

HASH_BITS = 64
MAX_RADIUS = MAX_DEDUPE_DISTANCE  # beyond half the bits nothing is a near duplicate, and the search would be quadratic

# Cost model (see module docstring), in units of one probe.
CANDIDATE_COST = 0.18
BAND_COST_PER_HASH = 8.0

PAIRS_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("distance", pa.int8())])


def _masks_within(width: int, radius: int) -> int:
    """V(width, radius): how many bit masks of weight <= radius fit in `width` bits."""
    return sum(math.comb(width, d) for d in range(min(radius, width) + 1))


def _radii_for(widths: list[int], max_distance: int) -> list[int]:
    # The slack r + 1 - m is spread evenly; the remainder goes to the first (widest) bands.
    slack = max_distance + 1 - len(widths)
    base, extra = divmod(slack, len(widths))
    return [base + (1 if i < extra else 0) for i in range(len(widths))]


def _cost(widths: list[int], radii: list[int], n: int) -> float:
    total = 0.0
    for w, t in zip(widths, radii):
        v = _masks_within(w, t)
        total += n * (v - 1) / 2 + CANDIDATE_COST * n * n / 2 * v / 2.0**w + BAND_COST_PER_HASH * n
    return total


def _descending_widths(bits: int, m: int, spread: int) -> list[list[int]]:
    """Every non-increasing split of `bits` into m widths (each <= 32) whose widest and narrowest
    differ by at most `spread`."""
    lo_even, hi_even = bits // m, -(-bits // m)
    out: list[list[int]] = []

    def extend(prefix: list[int], left: int, slots: int, cap: int) -> None:
        if slots == 0:
            if left == 0:
                out.append(prefix)
            return
        top = min(cap, left - (slots - 1), 32, lo_even + spread)
        bottom = max(1, hi_even - spread, -(-left // slots))
        for w in range(top, bottom - 1, -1):
            if prefix and prefix[0] - w > spread:
                break
            extend(prefix + [w], left - w, slots - 1, w)

    extend([], bits, m, bits)
    return out


@lru_cache(maxsize=256)
def _best_widths(max_distance: int, bits: int, n_hashes: int) -> tuple[int, ...]:
    if max_distance == 0:
        return (bits,)
    best: tuple[float, tuple[int, ...]] | None = None
    for m in range(max(2, -(-bits // 32)), min(max_distance + 1, bits) + 1):
        spread = 8 if m <= 6 else 3
        for widths in _descending_widths(bits, m, spread):
            cost = _cost(widths, _radii_for(widths, max_distance), n_hashes)
            if best is None or cost < best[0]:
                best = (cost, tuple(widths))
    assert best is not None
    return best[1]


def band_layout(max_distance: int, bits: int = HASH_BITS, n_hashes: int = 1_000_000) -> list[tuple[int, int]]:
    """(shift, width) of each band, widest first from the low bits, for a search of `n_hashes`
    hashes at radius `max_distance` (the cheapest layout under the cost model; all are exact).
    r = 0 is a single band: equal hashes only."""
    if not 0 <= max_distance <= min(MAX_RADIUS, bits):
        raise ValueError(f"max_distance must be within 0..{min(MAX_RADIUS, bits)}, got {max_distance}")
    widths = _best_widths(max_distance, bits, max(int(n_hashes), 2))
    shifts = [0, *itertools.accumulate(widths)][:-1]
    return list(zip(shifts, widths))


def band_radii(max_distance: int, layout: list[tuple[int, int]]) -> list[int]:
    """The radius t_i searched in each band: sum(t_i + 1) = max_distance + 1 (the exactness
    condition), spread evenly, the remainder to the first bands."""
    if len(layout) > max_distance + 1:
        raise ValueError(f"{len(layout)} bands need max_distance >= {len(layout) - 1}, got {max_distance}")
    return _radii_for([w for _, w in layout], max_distance)


def _even_layout(max_distance: int, bands: int, bits: int = HASH_BITS) -> list[tuple[int, int]]:
    """`bands` near-equal bands, widest first: for tests and measurements of a given band count."""
    base, extra = divmod(bits, bands)
    widths = [base + (1 if i < extra else 0) for i in range(bands)]
    shifts = [0, *itertools.accumulate(widths)][:-1]
    if bands > max_distance + 1 or max(widths) > 32:
        raise ValueError(f"{bands} bands do not fit radius {max_distance} on {bits} bits")
    return list(zip(shifts, widths))


# ---------------------------------------------------------------------------------------------
# Inputs


def _as_int64(values: pa.Array | pa.ChunkedArray | np.ndarray, what: str) -> np.ndarray:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if values.null_count:
            raise ValueError(f"{what} has {values.null_count} null value(s); drop those rows before the search")
        values = values.to_numpy(zero_copy_only=False)
    arr = np.asarray(values)
    if arr.dtype == np.uint64:
        return arr.view(np.int64)  # the unsigned hash, reinterpreted as its two's complement
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{what} must be 64-bit integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


MEMORY_LIMIT = "400MB"  # DuckDB's working memory for one search; beyond it, it spills to its temp folder


SPILL_PREFIX = "rewardhouse-search-"  # a search's DuckDB spill folder in the system's temp folder (pipeline.spill)


def spill_folder() -> SpillFolder | None:
    """A new folder for one search's DuckDB spill files in the system's temp folder (TMPDIR),
    locked while the search holds it, so a search killed before DuckDB could remove its files
    leaves a folder the next search removes (pipeline.spill). None where no folder can be made:
    the search then runs without the memory limit."""
    try:
        return SpillFolder(Path(tempfile.gettempdir()), SPILL_PREFIX, make_base=False)
    except OSError:
        return None


def _connect(spill: str | None = None) -> duckdb.DuckDBPyConnection:
    """A connection on every core; with `spill` (a folder), DuckDB keeps to MEMORY_LIMIT and writes
    what does not fit there; without, it keeps to its own limit and spills nowhere (in-memory
    DuckDB's default folder is `.tmp` in the working directory)."""
    import duckdb  # here: a search of a few thousand hashes (every_pair) never loads it

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    config = {"threads": cores, "preserve_insertion_order": False}
    if spill is not None:
        config.update(memory_limit=MEMORY_LIMIT, temp_directory=spill)
    else:  # DuckDB's own limit, and nothing written to the working directory
        config.update(temp_directory="")
    return quiet_duckdb(duckdb.connect(config=config))


# ---------------------------------------------------------------------------------------------
# The band joins


def _mask_rows(width: int, radius: int) -> pa.Table:
    """Masks of weight 1..radius in `width` bits, with their highest set bit (`top`, for the
    one-end-probes rule)."""
    masks = [
        sum(1 << b for b in combo)
        for d in range(1, min(radius, width) + 1)
        for combo in itertools.combinations(range(width), d)
    ]
    top = [1 << (m.bit_length() - 1) for m in masks]
    return pa.table({"mask": pa.array(masks, pa.int64()), "top": pa.array(top, pa.int64())})


def _earlier_bands_miss(layout: list[tuple[int, int]], radii: list[int], band: int, xor: str) -> str:
    # The pair belongs to the first band where it is within that band's radius.
    conds = [
        f"bit_count(({xor} >> {s}) & {(1 << w) - 1}) > {t}"
        for (s, w), t in zip(layout[:band], radii[:band])
    ]
    return "".join(f" and {c}" for c in conds)


def _search_band(
    con: duckdb.DuckDBPyConnection,
    layout: list[tuple[int, int]],
    radii: list[int],
    band: int,
    max_distance: int,
    count_only: bool,
) -> int:
    """Insert the band's verified pairs of distinct hashes into `found` (or, with count_only,
    return how many candidates the band's joins produce)."""
    shift, width = layout[band]
    radius = radii[band]
    con.execute(
        f"create or replace temp table band as select hash, (hash >> {shift}) & {(1 << width) - 1} as k "
        "from hv order by k"
    )
    keep = f"bit_count(x) <= {max_distance}" + _earlier_bands_miss(layout, radii, band, "x")

    def emit(candidates_sql: str) -> int:
        if count_only:
            return con.execute(f"select count(*) from ({candidates_sql})").fetchall()[0][0]
        con.execute(
            f"insert into found select least(ha, hb), greatest(ha, hb), bit_count(x) "
            f"from ({candidates_sql}) where {keep}"
        )
        return 0

    # Equal band keys (mask 0): a self-join, each pair once by hash order.
    total = emit(
        "select p.hash as ha, q.hash as hb, xor(p.hash, q.hash) as x "
        "from band p join band q on p.k = q.k and p.hash < q.hash"
    )
    if radius == 0:
        return total

    con.register("masks_in", _mask_rows(width, radius))
    con.execute("create or replace temp table masks as select * from masks_in")
    con.unregister("masks_in")
    # `band` is sorted by k, so a chunk of probes (consecutive keys, one mask) meets build rows
    # that sit close together: this ordering halves the join time against unsorted input.
    total += emit(
        "select p.hash as ha, q.hash as hb, xor(p.hash, q.hash) as x "
        "from (select p.hash, xor(p.k, m.mask) as probe from band p, masks m where p.k & m.top = 0) p "
        "join band q on q.k = p.probe"
    )
    return total


def _prepare(con: duckdb.DuckDBPyConnection, ids: np.ndarray | None, hashes: np.ndarray) -> int:
    if ids is None:
        con.register("input", pa.table({"hash": hashes}))
        con.execute("create temp table hv as select distinct hash from input")
    else:
        con.register("input", pa.table({"id": ids, "hash": hashes}))
        con.execute("create temp table ids as select id, hash from input")
        dupes = con.execute("select count(*) - count(distinct id) from ids").fetchall()[0][0]
        if dupes:
            raise ValueError(f"ids must be unique; {dupes} repeat(s)")
        con.execute("create temp table hv as select distinct hash from ids")
    con.unregister("input")
    return con.execute("select count(*) from hv").fetchall()[0][0]


def _resolve_layout(
    max_distance: int, n: int, layout: list[tuple[int, int]] | None
) -> tuple[list[tuple[int, int]], list[int]]:
    if layout is None:
        layout = band_layout(max_distance, HASH_BITS, n)
    widths = [w for _, w in layout]
    if sum(widths) != HASH_BITS or [s for s, _ in layout] != [0, *itertools.accumulate(widths)][:-1]:
        raise ValueError(f"bands must tile the {HASH_BITS} bits from bit 0: {layout}")
    if not all(1 <= w <= 32 for w in widths):
        raise ValueError(f"band widths must be 1..32 bits: {layout}")
    return layout, band_radii(max_distance, layout)


_EXPAND = """
    select least(x.id, y.id) as a, greatest(x.id, y.id) as b, f.distance
    from found f join ids x on x.hash = f.ha join ids y on y.hash = f.hb
    union all
    select x.id as a, y.id as b, 0::tinyint as distance
    from ids x join ids y on x.hash = y.hash and x.id < y.id
"""
BATCH_ROWS = 1 << 20  # pairs per batch read back from NearPairs


BRUTE_MAX = 6144  # up to this many hashes, every pair is compared in NumPy (`every_pair`) ...
BRUTE_PAIRS = 1 << 20  # ... unless more pairs than this are found: then the joins, whose pairs DuckDB spills
BRUTE_CELLS = 1 << 16  # the distances compared at once there (a block of rows against the rest)


def every_pair(ids: np.ndarray, hashes: np.ndarray, max_distance: int, most: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`near_pairs` by comparing every pair (a, b, distance: int64, int64, int16, a < b, in no
    given order), for a few thousand hashes: below BRUTE_MAX the joins' fixed costs (a connection,
    tables, a join per band) take longer than n^2 / 2 XORs and bit counts (3,000 hashes: 15 ms
    against 56-59 ms, 6,000: 50 against 66, 8,192: 91 against 70, on 2 cores). None when more than `most` pairs are found (a crowd of look-alikes: the joins
    keep their pairs within DuckDB's memory limit instead)."""
    u = hashes.view(np.uint64)
    n = len(u)
    block = max(1, BRUTE_CELLS // max(n, 1))
    found_a, found_b, found_d = [], [], []
    total = 0
    for s in range(0, n - 1, block):
        e = min(s + block, n - 1)
        dist = np.bitwise_count(u[s:e, None] ^ u[None, s + 1:])  # row i (s + i) against s + 1 ..: column c is s + 1 + c
        i, c = np.nonzero(dist <= max_distance)
        upper = c >= i  # each pair once: j = s + 1 + c > s + i
        i, c = i[upper], c[upper]
        total += len(i)
        if total > most:
            return None
        x, y = ids[s + i], ids[s + 1 + c]
        found_a.append(np.minimum(x, y))
        found_b.append(np.maximum(x, y))
        found_d.append(dist[i, c].astype(np.int16))
    if not found_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int16)
    return np.concatenate(found_a), np.concatenate(found_b), np.concatenate(found_d)


class NearPairs:
    """`near_pairs` kept where the search left them (its DuckDB connection) and read back in
    batches, as many times as asked: a caller that reduces the pairs (engine.candidate_pairs caps
    them per image, in three passes) holds one batch of them at a time, never all. A context manager:
    leaving it closes the connection and drops the pairs. Up to BRUTE_MAX hashes whose pairs are
    at most BRUTE_PAIRS, the pairs are found by `every_pair` and held in memory (`held`) instead:
    the same pairs, without DuckDB's fixed costs."""

    def __init__(self, ids: pa.Array | np.ndarray, hashes: pa.Array | np.ndarray, max_distance: int, *,
                 layout: list[tuple[int, int]] | None = None):
        ids_np = _as_int64(ids, "ids")
        hashes_np = _as_int64(hashes, "hashes")
        if len(ids_np) != len(hashes_np):
            raise ValueError(f"{len(ids_np)} ids but {len(hashes_np)} hashes")
        if not isinstance(max_distance, (int, np.integer)) or isinstance(max_distance, bool):
            raise TypeError(f"max_distance must be a whole number of bits, got {max_distance!r}")
        if not 0 <= max_distance <= MAX_RADIUS:
            raise ValueError(f"max_distance must be within 0..{MAX_RADIUS}, got {max_distance}")
        self.con: duckdb.DuckDBPyConnection | None = None
        self.spill: SpillFolder | None = None
        self.held: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the pairs of a search by `every_pair`
        if len(ids_np) < 2:
            return
        if len(ids_np) <= BRUTE_MAX and layout is None:  # a layout asked for is the joins'
            if len(np.unique(ids_np)) < len(ids_np):
                raise ValueError(f"ids must be unique; {len(ids_np) - len(np.unique(ids_np))} repeat(s)")
            self.held = every_pair(ids_np, hashes_np, max_distance, BRUTE_PAIRS)
            if self.held is not None:
                for column in self.held:  # read-only, as the joins' batches are: read again later
                    column.flags.writeable = False
                return
        import duckdb

        self.spill = spill_folder()
        limited = self.spill is not None
        try:
            self._search(ids_np, hashes_np, max_distance, layout)
        except (duckdb.OutOfMemoryException, duckdb.IOException):
            if not limited:
                raise
            # a step DuckDB could not fit in MEMORY_LIMIT, or could not spill (a temp folder full
            # or unwritable): the search again in memory, unlimited
            self._search(ids_np, hashes_np, max_distance, layout)

    def _search(self, ids: np.ndarray, hashes: np.ndarray, max_distance: int,
                layout: list[tuple[int, int]] | None) -> None:
        try:
            self.con = _connect(str(self.spill.path) if self.spill is not None else None)
            n = _prepare(self.con, ids, hashes)
            self.con.execute("create temp table found (ha bigint, hb bigint, distance tinyint)")
            if max_distance > 0 and n > 1:
                layout, radii = _resolve_layout(max_distance, n, layout)
                for band in range(len(layout)):
                    _search_band(self.con, layout, radii, band, max_distance, count_only=False)
            # the pairs of distinct hashes expanded to ids once, for every read that follows
            self.con.execute(f"create temp table pairs as {_EXPAND}")
            self.con.execute("drop table found")
        except BaseException:
            self.close()
            raise

    def table(self, ordered: bool = True) -> pa.Table:
        """Every pair at once (near_pairs' table)."""
        if self.held is not None:
            a, b, d = self.held
            order = np.lexsort((b, a)) if ordered else slice(None)
            return pa.table([a[order], b[order], d[order].astype(np.int8)], schema=PAIRS_SCHEMA)
        if self.con is None:
            return PAIRS_SCHEMA.empty_table()
        import duckdb

        query = "select * from pairs" + (" order by a, b" if ordered else "")
        try:
            return self.con.sql(query).to_arrow_table().cast(PAIRS_SCHEMA)
        except (duckdb.OutOfMemoryException, duckdb.IOException):
            # the sort of every pair did not fit MEMORY_LIMIT nor its folder: DuckDB's own limit
            self.con.execute("reset memory_limit")
            return self.con.sql(query).to_arrow_table().cast(PAIRS_SCHEMA)

    def batches(self, rows: int = BATCH_ROWS) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The pairs as (a, b, distance) arrays (int64, int64, int16) of at most `rows` pairs each,
        in no given order; each call reads them again."""
        if rows < 1:
            raise ValueError(f"rows must be at least 1, got {rows}")
        if self.held is not None:
            a, b, d = self.held
            for s in range(0, len(a), rows):
                yield a[s:s + rows], b[s:s + rows], d[s:s + rows]
            return
        if self.con is None:
            return
        reader = self.con.sql("select * from pairs").to_arrow_reader(rows)
        for batch in reader:
            if batch.num_rows:
                yield (batch.column(0).to_numpy().astype(np.int64, copy=False),
                       batch.column(1).to_numpy().astype(np.int64, copy=False),
                       batch.column(2).to_numpy().astype(np.int16))

    def close(self) -> None:
        self.held = None
        if self.con is not None:
            self.con.close()
            self.con = None
        if self.spill is not None:
            self.spill.close()
            self.spill = None

    def __enter__(self) -> "NearPairs":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def near_pairs(
    ids: pa.Array | np.ndarray,
    hashes: pa.Array | np.ndarray,
    max_distance: int,
    *,
    layout: list[tuple[int, int]] | None = None,
    ordered: bool = True,
) -> pa.Table:
    """Every unordered pair of distinct ids whose hashes are within `max_distance` bits
    (identical hashes included, at distance 0): columns a < b (int64) and distance (int8), one row
    per pair, sorted by (a, b) (in no given order with `ordered=False`). Ids must be unique.
    `layout` overrides the chosen bands (it must tile the 64 bits; the result is the same, only the
    speed changes). NearPairs reads the same pairs back in batches."""
    with NearPairs(ids, hashes, max_distance, layout=layout) as found:
        return found.table(ordered)


def count_candidates(
    hashes: pa.Array | np.ndarray, max_distance: int, *, layout: list[tuple[int, int]] | None = None
) -> int:
    """How many candidate pairs (join matches) `near_pairs` verifies for these hashes: a
    diagnostic for benchmarks, run as the same joins without the verification."""
    hashes_np = _as_int64(hashes, "hashes")
    con = _connect()
    try:
        n = _prepare(con, None, hashes_np)
        if max_distance == 0 or n < 2:
            return 0
        layout, radii = _resolve_layout(max_distance, n, layout)
        return sum(_search_band(con, layout, radii, b, max_distance, count_only=True) for b in range(len(layout)))
    finally:
        con.close()
