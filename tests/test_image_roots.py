"""VisualPRM path references resolved from image roots: split zip parts read in place through a
virtual concatenated file (an entry and the central directory straddling part boundaries), the
longest matching path suffix, roots in order, and a local mirror with path-only rows and
OpenGVLab's split archive giving an export with every image and no concatenated copy."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from dedupe_images import encode, photo
from pipeline.archives import ArchiveError, archive_size, open_zip, split_parts
from pipeline.settings import ZipLimits
from pipeline.visualprm.images import RootIndex
from pipeline.visualprm.sample import write_visualprm_sample
from pipeline.zipread import scan_zip


def build_zip(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def split_straddling(data: bytes, folder: Path, stem: str = "images.zip") -> tuple[list[Path], list[int]]:
    """Cut `data` into 3 parts: the first cut inside an entry's data, the second inside the
    central directory. Returns the parts and the cut offsets."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        middle = infos[len(infos) // 2]
        inside_entry = middle.header_offset + 30 + len(middle.filename.encode()) + middle.compress_size // 2
        cd_start = zf.start_dir
    inside_cd = cd_start + (len(data) - cd_start) // 2
    cuts = [0, inside_entry, inside_cd, len(data)]
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        part = folder / f"{stem}_a{'abc'[i]}"
        part.write_bytes(data[a:b])
        parts.append(part)
    return parts, cuts[1:-1]


@pytest.mark.fast
def test_split_parts_are_read_in_place_as_one_archive(tmp_path):
    entries = {f"VisualPRM400K/images/Geo/{i}.jpg": encode(photo(i), "JPEG", 90) for i in range(12)}
    data = build_zip(entries)
    parts, cuts = split_straddling(data, tmp_path / "up")
    with zipfile.ZipFile(io.BytesIO(data)) as whole:
        straddling = [i.filename for i in whole.infolist()
                      if i.header_offset < cuts[0] < i.header_offset + 30 + len(i.filename) + i.compress_size]
    assert len(straddling) == 1 and cuts[1] > whole.start_dir  # an entry and the central directory straddle cuts
    assert split_parts(parts[0]) == parts and archive_size(parts[0]) == len(data)
    with open_zip(parts[0]) as zf:
        assert {i.filename: zf.read(i) for i in zf.infolist()} == entries
    scan = scan_zip(parts[0], ZipLimits())
    assert scan.archive_error is None and len(scan.entries) == 12
    # Nothing was concatenated: the folder holds the three parts and nothing else.
    assert sorted(p.name for p in (tmp_path / "up").iterdir()) == ["images.zip_aa", "images.zip_ab", "images.zip_ac"]


@pytest.mark.fast
def test_a_missing_or_misnamed_part_is_named(tmp_path):
    parts, _ = split_straddling(build_zip({f"x/{i}.bin": bytes([i]) * 5000 for i in range(6)}), tmp_path / "up")
    with pytest.raises(ArchiveError, match="not the first part.*name images.zip_aa"):
        split_parts(parts[1])
    parts[1].unlink()
    with pytest.raises(ArchiveError, match="part images.zip_ab is missing"):
        split_parts(parts[0])
    assert scan_zip(parts[0], ZipLimits()).archive_error.endswith("part images.zip_ab is missing (found images.zip_ac)")


@pytest.mark.fast
def test_references_resolve_by_the_longest_matching_path_suffix(tmp_path):
    data = build_zip({"VisualPRM400K/images/Geometry3K/train/1471/img_diagram.png": b"a",
                      "VisualPRM400K/images/Geometry3K/train/1472/img_diagram.png": b"b",
                      "VisualPRM400K/images/MathV360K/a/1.png": b"c", "VisualPRM400K/images/Other/a/1.png": b"d"})
    parts, _ = split_straddling(data, tmp_path / "up")
    index = RootIndex(parts[0], ZipLimits())
    where = lambda ref: (index.locate(ref)[0] or (None, None, None))[2]  # noqa: E731
    assert where("Geometry3K/train/1471/img_diagram.png").filename.endswith("1471/img_diagram.png")  # a top folder upstream
    assert where("data/Geometry3K/train/1472/img_diagram.png").filename.endswith("1472/img_diagram.png")  # one in the ref
    location, problem = index.locate("a/1.png")
    assert location is None and problem.endswith("2 files end in 'a/1.png'")
    assert index.locate("train/img_diagram.png") == (None, None)  # only the file name is shared
    assert index.locate("img_diagram.png")[1].endswith("2 files end in 'img_diagram.png'")
    assert index.locate("Geometry3K/train/9999/img_diagram.png") == (None, None)  # the same file name, another folder
    assert index.locate("nowhere/x.png") == (None, None) and index.locate("../MathV360K/a/1.png") == (None, None)
    folder = tmp_path / "folder" / "MathV360K" / "a"
    folder.mkdir(parents=True)
    (folder / "1.png").write_bytes(b"c")
    assert RootIndex(tmp_path / "folder", ZipLimits()).locate("MathV360K/a/1.png")[0] == ("file", str(folder / "1.png"))


@pytest.mark.timeout(600)
def test_a_local_mirror_with_path_only_rows_and_split_parts_exports_every_image(tmp_path, home):
    from pipeline.cli import main

    mirror = tmp_path / "mirror"
    write_visualprm_sample(mirror)
    shard = next((mirror / "mm-eval" / "VisualPRM400K" / "data").glob("train-*.parquet"))
    media = pq.read_table(shard, columns=["media"]).column("media").to_pylist()
    path_only = sorted({m["path"] for row in media for m in row if m["bytes"] is None and m["path"]})
    assert len(path_only) > 20
    # OpenGVLab's layout: one more top folder than the references carry, split by `split`.
    images = {f"VisualPRM400K/images/{ref}": encode(photo(1000 + i), "PNG") for i, ref in enumerate(path_only)}
    parts, _ = split_straddling(build_zip(images), mirror / "OpenGVLab" / "VisualPRM400K")
    total = archive_size(parts[0])

    assert main(["run", "--source", "local", "--path", str(mirror)]) == 0
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        located = dict(con.execute("select image_key, located_at from prm_images where origin = 'path'").fetchall())
        unresolved = con.execute("select count(*) from prm_images where status = 'unresolved'").fetchone()[0]
        summary = json.loads(con.execute("select sources from releases").fetchone()[0])
        exported = con.execute("select count(*) from prm_samples where in_export").fetchone()[0]
        left_out = dict(con.execute("""select reason like '%unresolved%', count(*) from quarantine
                                       where dataset = 'visualprm' and stage = 'export' group by 1""").fetchall())
    assert unresolved == 0 and left_out.get(True, 0) == 0
    assert {k: v for k, v in located.items() if k in path_only} == {
        ref: f"{parts[0]}!VisualPRM400K/images/{ref}" for ref in path_only}
    assert summary["visualprm"]  # the mirror was read
    manifest = json.loads(next((home / "releases").glob("*/manifest.json")).read_text())
    assert manifest["summary"]["export"]["removed"]["unresolved_by_source"] == {}
    assert exported == manifest["summary"]["export"]["rows"] > 200
    # No concatenated copy anywhere: no file as large as the archive outside its own parts (but the
    # TRL export, which embeds the images of the rows it holds, as the Hub's Parquet does).
    big = [p for root in (home, tmp_path) for p in root.rglob("*")
           if p.is_file() and p not in parts and p.stat().st_size >= total * 0.9 and not p.name.endswith("_trl.parquet")]
    assert big == [], big


@pytest.mark.fast
def test_without_image_roots_unresolved_references_are_a_decision_with_counts_by_source(tmp_path):
    """The sample has path-only rows and no image root: those samples are left out, counted by
    source, and no `resolve` quarantine row counts against the budget."""
    import pyarrow as pa

    from pipeline.visualprm.images import ImageStore, inventory_prm_images

    shard = tmp_path / "train-0.parquet"
    kind = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"id": ["0", "1"], "messages": ["[]", "[]"],
                             "media": pa.array([[{"bytes": None, "path": "src/a.jpg"}],
                                                [{"bytes": encode(photo(5), "JPEG", 80), "path": "src/b.jpg"}]], kind)}), shard)
    table, rejected, _ = inventory_prm_images({"src/a.jpg", "src/b.jpg"}, [shard], tmp_path, [], ZipLimits(),
                                              ImageStore(tmp_path / "store"))
    rows = {r["image_key"]: r for r in table.to_pylist()}
    assert rows["src/a.jpg"]["status"] == "unresolved" and rejected == []
    assert rows["src/a.jpg"]["problem"] == "not embedded, and no image root was given (--images)"


def test_an_image_root_in_a_bucket_is_read_by_range_parts_and_all(tmp_path, monkeypatch):
    """Split parts in moto's S3 server: the references resolve from them in place, each part read
    by range; a missing part is named as a whole-file fault."""
    import obstore
    import pyarrow as pa
    from obstore.store import S3Store

    from pipeline.visualprm.images import ImageStore, inventory_prm_images
    from tests.s3_server import aws_env, make_bucket, start_moto

    proc, endpoint = start_moto()
    try:
        for key, value in aws_env(endpoint).items():
            monkeypatch.setenv(key, value)
        bucket = make_bucket(endpoint, "image-roots")
        store = S3Store(bucket, config={"endpoint": endpoint, "region": "us-east-1"}, client_options={"allow_http": True})
        refs = [f"Geometry3K/train/{i}/img_diagram.png" for i in range(8)]
        entries = {f"VisualPRM400K/images/{r}": encode(photo(500 + i), "PNG") for i, r in enumerate(refs)}
        parts, _ = split_straddling(build_zip(entries), tmp_path / "up")
        for part in parts:
            obstore.put(store, f"upstream/{part.name}", part)
        shard = tmp_path / "train-0.parquet"
        kind = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        pq.write_table(pa.table({"id": [str(i) for i in range(8)], "messages": ["[]"] * 8,
                                 "media": pa.array([[{"bytes": None, "path": r}] for r in refs], kind)}), shard)
        root = f"s3://{bucket}/upstream/images.zip_aa"
        table, rejected, hashed = inventory_prm_images(set(refs), [shard], None, [], ZipLimits(), ImageStore(tmp_path / "store"),
                                                       image_roots=[root])
        rows = {r["image_key"]: r for r in table.to_pylist()}
        assert rejected == [] and len(hashed) == 8
        assert {k: (r["status"], r["located_at"]) for k, r in rows.items()} == {
            r: ("ok", f"{root}!VisualPRM400K/images/{r}") for r in refs}
        # Loose images under a prefix are a root too.
        for i, r in enumerate(refs):
            obstore.put(store, f"loose/VisualPRM400K/{r}", entries[f"VisualPRM400K/images/{r}"])
        table, rejected, _ = inventory_prm_images(set(refs), [shard], None, [], ZipLimits(), ImageStore(tmp_path / "store3"),
                                                  image_roots=[f"s3://{bucket}/loose/"])
        assert rejected == [] and {r["image_key"]: r["located_at"] for r in table.to_pylist()} == {
            r: f"s3://{bucket}/loose/VisualPRM400K/{r}" for r in refs}
        assert {r["image_key"]: r["sha256"] for r in table.to_pylist()} == {k: r["sha256"] for k, r in rows.items()}
        obstore.delete(store, "upstream/images.zip_ab")
        _, rejected, _ = inventory_prm_images(set(refs), [shard], None, [], ZipLimits(), ImageStore(tmp_path / "store2"),
                                              image_roots=[root])
        assert [(r.stage, r.record_key) for r in rejected][0] == ("file", "images.zip_aa")
        assert "part images.zip_ab is missing" in rejected[0].reason
    finally:
        proc.terminate()
        proc.wait(10)
