"""Releases: content-addressed ids, atomic publish, a crash leaves the previous release current."""

import json
import os
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from warehouse.duck import sync_warehouse, warehouse_release
from warehouse.store import ReleaseStore, release_id_for


def _tables(n):
    return {"things": pa.table({"k": list(range(n))}), "quarantine": pa.table({"reason": ["x"] * (n % 2)})}


def test_release_id_depends_on_inputs_code_and_settings_only():
    base = release_id_for({"a": "1"}, "v1", {"s": 1})
    assert base == release_id_for({"a": "1"}, "v1", {"s": 1})
    assert len({base, release_id_for({"a": "2"}, "v1", {"s": 1}), release_id_for({"a": "1"}, "v2", {"s": 1}),
                release_id_for({"a": "1"}, "v1", {"s": 2})}) == 4


def test_publish_writes_parquet_and_manifest_and_is_idempotent(tmp_path):
    store = ReleaseStore(tmp_path / "releases")
    manifest, published = store.publish("r1", _tables(3), code_version="v1", sources={"x": 1}, settings={})
    assert published and store.current() == "r1"
    files = sorted(p.name for p in store.path("r1").iterdir())
    assert files == ["manifest.json", "quarantine.parquet", "things.parquet"]
    on_disk = json.loads((store.path("r1") / "manifest.json").read_text())
    assert on_disk["tables"]["things"]["rows"] == 3 and len(on_disk["tables"]["things"]["sha256"]) == 64
    assert pq.read_table(store.path("r1") / "things.parquet").num_rows == 3
    again, published = store.publish("r1", _tables(99), code_version="v1", sources={}, settings={})
    assert not published and again.row_counts == {"things": 3, "quarantine": 1}


def test_crash_mid_publish_leaves_previous_release_current(tmp_path, monkeypatch):
    store = ReleaseStore(tmp_path / "releases")
    store.publish("r1", _tables(3), code_version="v1", sources={}, settings={})
    calls = {"n": 0}
    real = pq.write_table

    def dying_write(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(*a, **kw)

    monkeypatch.setattr(pq, "write_table", dying_write)
    with pytest.raises(OSError):
        store.publish("r2", _tables(4), code_version="v1", sources={}, settings={})
    assert store.current() == "r1" and not store.exists("r2")
    assert [m.release_id for m in store.list()] == ["r1"]
    assert not [p for p in store.dir.iterdir() if p.name.startswith(".tmp-")]


def test_crash_after_rename_before_current_swap_keeps_previous(tmp_path, monkeypatch):
    store = ReleaseStore(tmp_path / "releases")
    store.publish("r1", _tables(3), code_version="v1", sources={}, settings={})
    monkeypatch.setattr(store, "set_current", lambda rid: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        store.publish("r2", _tables(4), code_version="v1", sources={}, settings={})
    assert ReleaseStore(store.dir).current() == "r1"


def test_leftover_temporaries_are_invisible_and_swept(tmp_path):
    store = ReleaseStore(tmp_path / "releases")
    store.publish("r1", _tables(1), code_version="v1", sources={}, settings={})
    half = store.dir / ".tmp-r2-deadbeef"
    half.mkdir()
    (half / "things.parquet").write_bytes(b"PAR1 half")
    assert [m.release_id for m in store.list()] == ["r1"]
    assert store.sweep_temporaries() == [".tmp-r2-deadbeef"] and not half.exists()


def test_prune_keeps_newest_and_current(tmp_path):
    store = ReleaseStore(tmp_path / "releases")
    for i in range(4):
        store.publish(f"r{i}", _tables(i), code_version="v1", sources={}, settings={})
    assert store.prune(2) == ["r1", "r0"]
    assert [m.release_id for m in store.list()] == ["r3", "r2"]


def test_warehouse_has_a_schema_per_release_and_main_views_on_current(tmp_path):
    store = ReleaseStore(tmp_path / "releases")
    db = tmp_path / "warehouse.duckdb"
    store.publish("r1", _tables(3), code_version="v1", sources={}, settings={})
    sync_warehouse(store, db)
    store.publish("r2", _tables(5), code_version="v1", sources={}, settings={})
    sync_warehouse(store, db)
    assert warehouse_release(db) == "r2"
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("select count(*) from things").fetchone() == (5,)
        assert con.execute("select count(*) from release_r1.things").fetchone() == (3,)
        rows = con.execute("select release_id, is_current, row_counts->>'things' from releases order by created_at").fetchall()
    assert rows == [("r1", False, "3"), ("r2", True, "5")]


def test_warehouse_opens_read_only_from_any_directory(tmp_path):
    store = ReleaseStore(tmp_path / "releases")
    db = tmp_path / "warehouse.duckdb"
    store.publish("r1", _tables(3), code_version="v1", sources={}, settings={})
    sync_warehouse(store, db)
    moved = tmp_path / "elsewhere" / "copy.duckdb"
    moved.parent.mkdir()
    os.rename(db, moved)  # the data root moved: tables are inside the file, nothing points back
    code = f"import duckdb; c = duckdb.connect({str(moved)!r}, read_only=True); print(c.execute('select sum(k) from things').fetchone()[0])"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3"
