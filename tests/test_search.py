"""Exact radius search, union-find clusters and the canonical rule, against brute force."""

from __future__ import annotations

import hashlib
from collections import deque

import numpy as np
import pyarrow as pa
import pytest

from pipeline.dedupe import search
from pipeline.dedupe.clusters import canonical_rank, connected_components
from pipeline.dedupe.search import _even_layout, band_layout, band_radii, count_candidates, near_pairs

MASK64 = (1 << 64) - 1


@pytest.fixture(autouse=True)
def joins(monkeypatch):
    """The search's DuckDB band joins, whatever the number of hashes (a few thousand are otherwise
    compared pair by pair, search.every_pair): the tests of its spill folder and memory limit are
    the joins'; those of its pairs run both ways (`both_ways`)."""
    monkeypatch.setattr(search, "BRUTE_MAX", 0)


@pytest.fixture(params=["joins", "every_pair"])
def both_ways(request, monkeypatch):
    monkeypatch.setattr(search, "BRUTE_MAX", 0 if request.param == "joins" else 1 << 30)
    return request.param


both = pytest.mark.usefixtures("both_ways")


def brute_force(ids: np.ndarray, hashes: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # np.bitwise_count counts the bits of |x| on signed ints, so XOR as unsigned.
    u = hashes.view(np.uint64)
    dist = np.bitwise_count(u[:, None] ^ u[None, :])
    i, j = np.nonzero(np.triu(dist <= r, k=1))
    a, b = np.minimum(ids[i], ids[j]), np.maximum(ids[i], ids[j])
    order = np.lexsort((b, a))
    return a[order], b[order], dist[i, j][order].astype(np.int64)


def planted_hashes(seed: int, n: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """n random hashes (half with the top bit set) in which pairs at every distance 0..r+2 are
    planted, some flipping bit 63, plus groups of identical hashes and a near chain; ids are
    shuffled, sparse and partly negative."""
    rng = np.random.default_rng(seed)
    values = [int(v) for v in rng.integers(0, 1 << 64, size=n, dtype=np.uint64)]
    pos = 0
    for d in range(r + 3):
        for _ in range(4):
            if d and pos % 3 == 0:  # the sign bit differs
                bits = [63, *(int(b) for b in rng.choice(63, size=d - 1, replace=False))]
            else:
                bits = [int(b) for b in rng.choice(64, size=d, replace=False)]
            values[pos + 1] = values[pos] ^ sum(1 << b for b in bits)
            pos += 2
    for size in (2, 3, 6):  # identical hashes
        values[pos : pos + size] = [values[pos]] * size
        pos += size
    for _ in range(5):  # a chain: each link within r, the ends maybe not
        bits = [int(b) for b in rng.choice(64, size=max(r // 2, 1), replace=False)]
        values[pos + 1] = values[pos] ^ sum(1 << b for b in bits)
        pos += 1
    assert pos < n
    hashes = np.array(values, dtype=np.uint64).view(np.int64)
    ids = rng.permutation(np.arange(-n, 3 * n, dtype=np.int64))[:n]
    return ids, hashes


def assert_same_pairs(table: pa.Table, expected: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    a, b, d = expected
    assert table.schema.names == ["a", "b", "distance"]
    assert table.num_rows == len(a)
    np.testing.assert_array_equal(table["a"].to_numpy(), a)
    np.testing.assert_array_equal(table["b"].to_numpy(), b)
    np.testing.assert_array_equal(table["distance"].to_numpy().astype(np.int64), d)


@both
@pytest.mark.parametrize("r", [0, 1, 3, 6, 8, 10, 16])
def test_near_pairs_equal_brute_force_on_planted_hashes(r):
    for seed in range(2):
        ids, hashes = planted_hashes(seed * 100 + r, 2000, r)
        expected = brute_force(ids, hashes, r)
        assert len(expected[0]) >= 4 * (r + 1)  # the planted pairs at least
        assert_same_pairs(near_pairs(ids, hashes, r), expected)


@pytest.mark.parametrize("r", [2, 6, 9])
def test_every_band_count_is_exact(r):
    ids, hashes = planted_hashes(7 + r, 1500, r)
    expected = brute_force(ids, hashes, r)
    for bands in range(2, r + 2):
        assert_same_pairs(near_pairs(ids, hashes, r, layout=_even_layout(r, bands)), expected)


@both
def test_radius_boundary_is_inclusive_on_negative_hashes():
    lo = -(1 << 63)  # only the top bit set
    hashes = np.array([lo, lo ^ 0b111, (1 << 63) - 1, 0, 0b1111], dtype=np.int64)
    three = [(0, 1, 3), (0, 3, 1), (1, 4, 2)]
    assert [tuple(p.values()) for p in near_pairs(np.arange(5), hashes, 3).to_pylist()] == three
    four = sorted(three + [(1, 3, 4), (3, 4, 4)])
    assert [tuple(p.values()) for p in near_pairs(np.arange(5), hashes, 4).to_pylist()] == four


@both
def test_identical_hashes_pair_at_distance_zero_once_each():
    hashes = np.array([5, 9, 5, 5, 9], dtype=np.int64)
    pairs = near_pairs(np.array([40, 30, 20, 10, 0]), hashes, 0).to_pylist()
    assert pairs == [
        {"a": 0, "b": 30, "distance": 0},
        {"a": 10, "b": 20, "distance": 0},
        {"a": 10, "b": 40, "distance": 0},
        {"a": 20, "b": 40, "distance": 0},
    ]


@both
def test_arrow_and_unsigned_inputs_give_the_same_pairs():
    ids, hashes = planted_hashes(3, 600, 5)
    expected = brute_force(ids, hashes, 5)
    assert_same_pairs(near_pairs(pa.array(ids), pa.array(hashes), 5), expected)
    assert_same_pairs(near_pairs(ids, hashes.view(np.uint64), 5), expected)


@both
def test_bad_inputs_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="unique"):
        near_pairs(np.array([1, 1]), np.array([0, 0]), 2)
    with pytest.raises(ValueError, match="null"):
        near_pairs(pa.array([1, 2]), pa.array([0, None], pa.int64()), 2)
    with pytest.raises(ValueError, match="ids but"):
        near_pairs(np.array([1, 2, 3]), np.array([0, 0]), 2)
    with pytest.raises(ValueError, match="max_distance"):
        near_pairs(np.array([1, 2]), np.array([0, 0]), 40)
    for not_whole in (2.5, np.float64(2.0), True):  # both ways: never rounded, never read as 1
        with pytest.raises(TypeError, match="whole number"):
            near_pairs(np.array([1, 2, 3]), np.array([0, 3, 1]), not_whole)
    empty = near_pairs(np.array([7]), np.array([0]), 4)
    assert empty.num_rows == 0 and empty.schema.names == ["a", "b", "distance"]
    from pipeline.dedupe.search import NearPairs

    with NearPairs(np.arange(5), np.zeros(5, np.int64), 2) as found:
        for rows in (0, -1):
            with pytest.raises(ValueError, match="rows"):
                next(found.batches(rows))
        first = next(found.batches(3))
        with pytest.raises(ValueError, match="read-only"):  # both ways: what is read again later is kept
            first[0][:] = -7
        assert sorted(int(x) for a, _, _ in found.batches(3) for x in a) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 3]


@pytest.mark.parametrize("n", [2_000, 1_000_000])
def test_band_layout_tiles_the_hash_and_meets_the_pigeonhole_bound(n):
    for r in range(0, 17):
        layout = band_layout(r, n_hashes=n)
        radii = band_radii(r, layout)
        assert [s for s, _ in layout] == list(np.cumsum([0] + [w for _, w in layout])[:-1])
        assert sum(w for _, w in layout) == 64
        assert min(radii) >= 0 and sum(t + 1 for t in radii) == r + 1


def test_default_radii_layouts_are_the_measured_fast_ones():
    # Chosen by the cost model; measured fastest on 1M random hashes (see the module docstring).
    assert [w for _, w in band_layout(8)] == [18, 16, 15, 15]
    assert band_radii(8, band_layout(8)) == [2, 1, 1, 1]
    assert band_radii(10, band_layout(10)) == [2, 2, 2, 1]


def test_candidates_are_far_fewer_than_all_pairs():
    rng = np.random.default_rng(1)
    hashes = rng.integers(0, 1 << 64, size=20_000, dtype=np.uint64)
    candidates = count_candidates(hashes, 8)
    assert 0 < candidates < 20_000 * 19_999 / 2 / 20


# --- connected components ---------------------------------------------------------------------


def bfs_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    adj = [[] for _ in range(n)]
    for x, y in zip(a.tolist(), b.tolist()):
        adj[x].append(y)
        adj[y].append(x)
    labels = np.full(n, -1)
    for start in range(n):  # ascending, so each component is labelled by its smallest node
        if labels[start] >= 0:
            continue
        labels[start] = start
        queue = deque([start])
        while queue:
            for y in adj[queue.popleft()]:
                if labels[y] < 0:
                    labels[y] = start
                    queue.append(y)
    return labels


def test_chain_in_scrambled_order_is_one_component_labelled_by_its_smallest_node():
    order = np.random.default_rng(0).permutation(100)
    a, b = order[:-1], order[1:]  # a path through all nodes in random order
    labels = connected_components(100, b, a)
    assert (labels == 0).all()


def test_star_isolated_nodes_self_loops_and_repeated_edges():
    a = np.array([9, 9, 9, 4, 7, 7])
    b = np.array([2, 5, 8, 4, 3, 3])
    labels = connected_components(11, a, b)
    assert labels.tolist() == [0, 1, 2, 3, 4, 2, 6, 3, 2, 2, 10]


def test_no_edges_leaves_every_node_alone():
    assert connected_components(4, np.array([], np.int64), np.array([], np.int64)).tolist() == [0, 1, 2, 3]


def test_components_match_breadth_first_search_on_random_graphs():
    rng = np.random.default_rng(5)
    for n, m in ((50, 30), (500, 400), (2000, 2500)):
        a, b = rng.integers(0, n, m), rng.integers(0, n, m)
        np.testing.assert_array_equal(connected_components(n, a, b), bfs_labels(n, a, b))


def test_edges_outside_the_nodes_are_refused():
    with pytest.raises(ValueError, match="nodes 0..2"):
        connected_components(3, np.array([0]), np.array([3]))


# --- canonical choice -------------------------------------------------------------------------


DATASET_ORDER = ("mmrb2", "visualprm")  # eval sets before train sets, as the pipeline passes the registry's


def order(rows: list[tuple]) -> list[str]:
    """image_keys in canonical order for rows (dataset, image_key, width, height, bytes)."""
    ds, keys, w, h, b = zip(*rows)
    rank = canonical_rank(list(ds), list(keys), np.array(w, float), np.array(h, float), np.array(b, float),
                          DATASET_ORDER)
    return [keys[i] for i in np.argsort(rank)]


def test_resolution_beats_bytes_dataset_and_key():
    assert order([("mmrb2", "a", 100, 100, 9_000), ("visualprm", "z", 200, 100, 10)]) == ["z", "a"]


def test_bytes_decide_between_equal_resolutions():
    assert order([("mmrb2", "a", 100, 100, 500), ("visualprm", "z", 50, 200, 900)]) == ["z", "a"]


def test_eval_dataset_wins_a_tie_on_resolution_and_bytes():
    rows = [("visualprm", "a", 64, 64, 100), ("mmrb2", "z", 64, 64, 100), ("folder", "0", 64, 64, 100)]
    assert order(rows) == ["z", "a", "0"]


def test_smallest_key_wins_a_full_tie():
    rows = [("visualprm", "img_2.jpg", 64, 64, 100), ("visualprm", "img_10.jpg", 64, 64, 100)]
    assert order(rows) == ["img_10.jpg", "img_2.jpg"]  # string order: "img_10" < "img_2"


def test_unknown_sizes_never_beat_known_ones():
    assert order([("mmrb2", "a", float("nan"), float("nan"), float("nan")), ("visualprm", "b", 1, 1, 1)]) == ["b", "a"]


def test_kind_distance_and_cluster_id_of_members():
    """Through the engine: identical bytes are exact, a verified copy near, an unrelated image alone."""
    from pipeline.dedupe.engine import dedupe

    from pipeline.dedupe.hashing import CHROMA_SIDE, DETAIL_SIDE

    grey = np.full(2 * CHROMA_SIDE * CHROMA_SIDE, 128, np.uint8)  # neutral chroma planes
    texture = np.concatenate([np.random.default_rng(3).integers(0, 255, DETAIL_SIDE ** 2, dtype=np.uint8), grey])
    other = np.concatenate([np.random.default_rng(4).integers(0, 255, DETAIL_SIDE ** 2, dtype=np.uint8), grey])
    rows = pa.table({
        "dataset": ["mmrb2", "visualprm", "visualprm", "visualprm"],
        "image_key": ["big", "copy", "edit", "alone"],
        "sha256": ["same", "same", "other", "x"],
        "phash": pa.array([-1, -1, -1 ^ 0b1011, 0x0F0F_0F0F_0F0F_0F0F], pa.int64()),
        "crop_hash": pa.array([0x3333_3333_3333_3333] * 4, pa.int64()),
        "top_hash": pa.array([0x5555_5555_5555_5555] * 3 + [0x0F0F_0F0F_0F0F_0F0F], pa.int64()),
        "bottom_hash": pa.array([0x5555_5555_5555_5555] * 3 + [0x0F0F_0F0F_0F0F_0F0F], pa.int64()),
        "width": pa.array([200, 100, 100, 10], pa.int32()), "height": pa.array([200, 100, 100, 10], pa.int32()),
        "bytes": pa.array([100, 100, 100, 10], pa.int64()), "flat": [False] * 4,
        "chroma_cb": pa.array([0.0] * 4, pa.float32()), "chroma_cr": pa.array([0.0] * 4, pa.float32()),
    })
    result = dedupe(rows, np.stack([texture, texture, texture, other]).reshape(4, -1), 8)
    keys = rows["image_key"].to_pylist()
    got = {keys[r["row"]]: (r["cluster_id"], r["is_canonical"], r["distance_to_canonical"], r["kind"], r["score"])
           for r in result.clusters.to_pylist()}
    cid = hashlib.sha256(b"mmrb2/big").hexdigest()[:16]
    assert got == {"big": (cid, True, 0, None, None), "copy": (cid, False, 0, "exact", 1.0),
                   "edit": (cid, False, 3, "near", 1.0)}


@both
def test_search_then_components_end_to_end():
    # Three near copies of one image (a chain) and an unrelated one.
    base = 0x0123_4567_89AB_CDEF
    hashes = np.array([base, base ^ 0b11, base ^ 0b1111, ~base], dtype=np.int64)
    pairs = near_pairs(np.arange(4), hashes, 2)
    labels = connected_components(4, pairs["a"].to_numpy(), pairs["b"].to_numpy())
    assert labels.tolist() == [0, 0, 0, 3]


def _crowd(seed: int, n: int, templates: int, bits: int = 3) -> np.ndarray:
    """n hashes in `templates` families, each its template with up to `bits` bits flipped: every
    family a clique of pairs within 2 * bits."""
    rng = np.random.default_rng(seed)
    t = rng.integers(-2**63, 2**63 - 1, templates, dtype=np.int64)
    masks = np.zeros(n, np.uint64)
    for _ in range(bits):
        masks |= np.uint64(1) << rng.integers(0, 64, n).astype(np.uint64)
    return (t[rng.integers(0, templates, n)].view(np.uint64) ^ masks).view(np.int64)


@both
def test_near_pairs_read_in_batches_are_the_pairs_read_at_once_and_leave_nothing_behind(tmp_path, monkeypatch):
    """search.NearPairs: its batches (read twice, in batches of a few pairs) hold exactly the pairs
    of its table and of brute force; leaving it removes its spill folder."""
    import tempfile

    from pipeline.dedupe.search import SPILL_PREFIX, NearPairs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ids, hashes = planted_hashes(3, 400, 6)
    a, b, d = brute_force(ids, hashes, 6)
    expected = sorted(zip(a.tolist(), b.tolist(), d.tolist()))
    with NearPairs(ids, hashes, 6) as found:
        # the joins keep their pairs in DuckDB, spilling to a folder of their own; every_pair in memory
        assert [p.name.startswith(SPILL_PREFIX) for p in tmp_path.iterdir()] == ([True] if found.held is None else [])
        for _ in range(2):
            got = [(x, y, z) for ba, bb, bd in found.batches(rows=37) for x, y, z in zip(ba.tolist(), bb.tolist(), bd.tolist())]
            assert sorted(got) == expected
        assert [tuple(r.values()) for r in found.table().to_pylist()] == expected
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("limit,writable", [("64MB", True), ("8MB", True), ("64MB", False)])
def test_a_search_over_its_memory_limit_spills_or_starts_again_unlimited_with_the_same_pairs(limit, writable, tmp_path,
                                                                                           monkeypatch):
    """Crowds of look-alikes (6,000 hashes in 6 families: millions of pairs) searched under a DuckDB
    memory limit far below their pairs: at 64 MB DuckDB spills to the search's folder; at 8 MB a
    step cannot fit, and where the spill folder cannot be written (a file in its place), DuckDB
    cannot spill: the search runs again without the limit. Every way the engine keeps the same
    candidates as without a limit, and no spill folder is left."""
    import tempfile

    from pipeline.dedupe import search
    from pipeline.dedupe.engine import candidate_pairs

    routes = [_crowd(seed, 6000, 6) for seed in range(4)]
    free = candidate_pairs(*routes, np.ones(6000, bool), 8)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(search, "MEMORY_LIMIT", limit)
    if not writable:
        blocked = tmp_path / "not-a-folder"
        blocked.write_text("a file where the spill folder should be")

        class Blocked:  # a spill folder DuckDB cannot write to
            path = blocked

            def close(self):
                pass

        monkeypatch.setattr(search, "spill_folder", Blocked)
    limits, own = [], search._connect

    def connect(spill=None):
        con = own(spill)
        limits.append(con.execute("select current_setting('memory_limit')").fetchall()[0][0])
        return con

    spilled, close = [], search.NearPairs.close

    def closing(self):
        if self.con is not None:
            spilled.append(self.con.execute("select coalesce(sum(size), 0) from duckdb_temporary_files()").fetchall()[0][0])
        close(self)

    monkeypatch.setattr(search, "_connect", connect)
    monkeypatch.setattr(search.NearPairs, "close", closing)
    tight = candidate_pairs(*routes, np.ones(6000, bool), 8)
    assert free.capped > 1_000_000 and tight.capped == free.capped
    for x, y in ((free.a, tight.a), (free.b, tight.b), (free.route, tight.route), (free.distance, tight.distance)):
        assert np.array_equal(x, y)
    import duckdb

    with duckdb.connect(config={"memory_limit": limit}) as con:
        limited = con.execute("select current_setting('memory_limit')").fetchall()[0][0]
    assert limits[0] == limited
    if writable and limit == "64MB":  # kept to the limit by writing to its folder
        assert limits.count(limited) == len(limits) and max(spilled) > 10_000_000
        assert list(tmp_path.iterdir()) == []
    else:  # started again without the limit
        assert any(x != limited for x in limits)
        assert list(tmp_path.iterdir()) == ([] if writable else [blocked])


def test_a_search_killed_outright_leaves_a_spill_folder_the_next_search_removes(tmp_path):
    """A process killed (SIGKILL) while its search holds a spill folder full of DuckDB's files: the
    kernel drops the folder's lock, and the next search removes the folder; a folder whose search
    is alive stays (pipeline.spill)."""
    import os
    import signal
    import subprocess
    import sys

    from pipeline.dedupe.search import SPILL_PREFIX, NearPairs

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    holder = """
import sys, numpy as np
import pipeline.dedupe.search as search
from pipeline.dedupe.search import NearPairs
search.BRUTE_MAX = 0  # the joins, which hold a spill folder
found = NearPairs(np.arange(50, dtype=np.int64), np.zeros(50, dtype=np.int64), 4)
(found.spill.path / "duckdb_temp_storage-0.tmp").write_bytes(b"x" * 1000)
print(found.spill.path.name, flush=True)
sys.stdin.read()
"""
    procs = [subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=env, cwd=os.path.dirname(os.path.dirname(__file__))) for _ in range(2)]
    try:
        killed, alive = (p.stdout.readline().strip() for p in procs)
        assert killed.startswith(SPILL_PREFIX) and alive.startswith(SPILL_PREFIX)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        assert (tmp_path / killed).is_dir()  # DuckDB's files and all: nobody removed them
        import tempfile
        before = tempfile.tempdir
        tempfile.tempdir = str(tmp_path)
        try:
            with NearPairs(np.arange(50, dtype=np.int64), np.zeros(50, dtype=np.int64), 4) as found:
                mine = found.spill.path.name
                assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive, mine])
        finally:
            tempfile.tempdir = before
        assert [p.name for p in tmp_path.iterdir()] == [alive]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_sort_of_every_pair_over_the_memory_limit_runs_again_under_duckdbs_own(tmp_path, monkeypatch):
    """NearPairs.table() sorted: 7.2 M pairs of a crowd searched within a 24 MB limit, whose sort
    cannot be done within it, still come back whole and in order (the connection's limit reset to
    DuckDB's own); and a connection without a spill folder writes nowhere (no `.tmp` in the working
    directory, DuckDB's default)."""
    import tempfile

    import duckdb

    from pipeline.dedupe import search

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(search, "MEMORY_LIMIT", "24MB")
    with duckdb.connect() as con:
        own = con.execute("select current_setting('memory_limit')").fetchall()[0][0]
    hashes = _crowd(0, 12000, 10)
    with search.NearPairs(np.arange(12000), hashes, 8) as found:
        unordered = found.table(ordered=False)
        table = found.table()
        assert found.con.execute("select current_setting('memory_limit')").fetchall()[0][0] == own
    assert table.num_rows == unordered.num_rows > 7_000_000
    a, b = table["a"].to_numpy(), table["b"].to_numpy()
    assert np.all((a[1:] > a[:-1]) | ((a[1:] == a[:-1]) & (b[1:] > b[:-1])))
    assert table.sort_by([("a", "ascending"), ("b", "ascending")]).equals(unordered.sort_by([("a", "ascending"), ("b", "ascending")]))
    with search._connect(None) as con:
        assert con.execute("select current_setting('temp_directory')").fetchall()[0][0] == ""
    assert list(tmp_path.iterdir()) == []


def test_no_progress_bar_reaches_standard_output():
    """DuckDB draws a progress bar on standard output, terminal or not, for a query that runs past
    progress_bar_time (2 s): the search's connection (whose pairs `rewardhouse dedupe` may print as
    CSV on standard output) and the other connections this code opens have it off
    (settings.quiet_duckdb), and a search's query of 3-4 s prints nothing."""
    import subprocess
    import sys
    from pathlib import Path

    script = """
import duckdb
from pipeline.dedupe.search import _connect
from pipeline.visualprm.readers import connect
from pipeline.decontam.records import quiet_duckdb
bar = duckdb.connect()
bar.execute("set progress_bar_time = 0")
bar.execute("select count(*) from range(60000000) t(x) where x % 7 = 3").fetchall()
print("default drew", flush=True)
for con in (_connect(None), connect(), quiet_duckdb(duckdb.connect())):
    print(con.execute("select current_setting('enable_progress_bar')").fetchall()[0][0], flush=True)
_connect(None).execute("select count(*) from range(1500000000) t(x) where x % 7 = 3").fetchall()
print("done", flush=True)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=str(Path(__file__).resolve().parents[1]))
    assert out.returncode == 0, out.stderr[-2000:]
    drawn, rest = out.stdout.split("default drew\n", 1)
    assert "%" in drawn  # DuckDB's default draws one: the check can fail
    assert rest == "False\nFalse\nFalse\ndone\n"


def test_a_crowd_found_pair_by_pair_is_handed_to_the_joins_with_the_same_pairs(monkeypatch, tmp_path):
    """search.every_pair stops once it has found more than BRUTE_PAIRS pairs (look-alikes whose
    pairs grow with the square of their number): the search then runs as the joins, which keep them
    within DuckDB's memory limit, and finds the same pairs. Below the limit the pairs are held."""
    import tempfile

    from pipeline.dedupe.search import NearPairs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(search, "BRUTE_MAX", 1 << 30)
    hashes = _crowd(7, 1500, 3)
    ids = np.arange(1500, dtype=np.int64) * 3 - 100
    a, b, d = brute_force(ids, hashes, 6)
    expected = sorted(zip(a.tolist(), b.tolist(), d.tolist()))
    assert len(expected) > 100_000
    for most, held in ((len(expected) - 1, False), (len(expected), True)):
        monkeypatch.setattr(search, "BRUTE_PAIRS", most)
        with NearPairs(ids, hashes, 6) as found:
            assert (found.held is not None) == held and (found.con is None) == held
            got = [(x, y, z) for ba, bb, bd in found.batches(rows=50_000)
                   for x, y, z in zip(ba.tolist(), bb.tolist(), bd.tolist())]
            assert sorted(got) == expected
            assert [tuple(r.values()) for r in found.table().to_pylist()] == expected
