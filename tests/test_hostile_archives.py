"""Hostile and broken zips: every bad entry or archive is a quarantine row with stage `unpack`
(or `decode` for an entry that cannot be inflated) and a reason, never a traceback, and nothing is
ever written outside the data root."""

from __future__ import annotations

import io
import random
import stat
import warnings
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from conftest import stand_in_jpeg, tree_digests
from pipeline.dedupe.hashing import hash_zip
from pipeline.mmrb2.images import inventory_images
from pipeline.settings import ZipLimits
from pipeline.visualprm.images import ImageStore, inventory_prm_images
from pipeline.zipread import scan_zip

JPEG = stand_in_jpeg(1)
MEDIA = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


def write_zip(path: Path, entries: list[tuple[str, bytes, dict]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns about the duplicate names planted here
        for name, data, kw in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = kw.get("compress", zipfile.ZIP_STORED)
            if "mode" in kw:
                info.external_attr = kw["mode"] << 16
            zf.writestr(info, data)
    return path


def patch_name(path: Path, placeholder: bytes, raw: bytes) -> Path:
    """Replace an entry name's bytes in the local header and the central directory (same length),
    to plant a name zipfile itself would never write."""
    assert len(placeholder) == len(raw)
    data = path.read_bytes()
    assert data.count(placeholder) == 2
    path.write_bytes(data.replace(placeholder, raw))
    return path


# ---- entries: each refused with a reason, the good entry beside it still read ----------------

HOSTILE_ENTRIES = [
    ("../escape.jpg", {}, "path escapes the archive root ('..')"),
    ("images/../../escape.jpg", {}, "path escapes the archive root ('..')"),
    ("images/..\\..\\escape.jpg", {}, "path escapes the archive root ('..')"),
    ("/etc/escape.jpg", {}, "absolute path in archive"),
    ("\\\\server\\share\\escape.jpg", {}, "absolute path in archive"),
    ("C:/Windows/escape.jpg", {}, "absolute path in archive"),
    ("images/link.jpg", {"mode": stat.S_IFLNK | 0o777}, "symlink entry"),
]


@pytest.mark.parametrize("name,kw,reason", HOSTILE_ENTRIES, ids=[h[0] for h in HOSTILE_ENTRIES])
def test_hostile_entry_is_quarantined_and_never_extracted(tmp_path, name, kw, reason):
    z = write_zip(tmp_path / "image.zip", [("images/ok.jpg", JPEG, {}), (name, b"/etc/passwd" if kw else JPEG, kw)])
    before = tree_digests(tmp_path)
    table, rejected, _ = inventory_images(z, {"ok.jpg"}, ZipLimits())
    assert [(r.stage, r.record_key, r.reason) for r in rejected] == [("unpack", name, reason)]
    assert table.to_pylist()[0]["status"] == "ok" and table.num_rows == 1
    assert tree_digests(tmp_path) == before  # nothing extracted, here or above
    assert not (tmp_path.parent / "escape.jpg").exists()


def test_nul_and_non_utf8_entry_names_are_refused_and_a_lying_utf8_flag_refuses_the_archive(tmp_path):
    z = write_zip(tmp_path / "names.zip", [("images/ok.jpg", JPEG, {}), ("images/QQ.jpg", JPEG, {}), ("images/NUL.jpg", JPEG, {})])
    patch_name(z, b"images/QQ.jpg", b"images/\xe9\xff.jpg")  # latin-1-ish bytes, no UTF-8 flag
    patch_name(z, b"images/NUL.jpg", b"images/N\x00L.jpg")
    scan = scan_zip(z, ZipLimits())
    assert set(scan.entries) == {"ok.jpg"} and scan.archive_error is None
    assert sorted(reason for _, reason in scan.refused) == [
        "NUL byte in entry name",
        "entry name is neither ASCII nor flagged as UTF-8: its encoding is unknown",
    ]

    flagged = write_zip(tmp_path / "flagged.zip", [("images/ok.jpg", JPEG, {}), ("images/é.jpg", JPEG, {})])
    patch_name(flagged, "images/é.jpg".encode(), b"images/\xff\xfe.jpg")  # flagged UTF-8, but is not
    table, rejected, _ = inventory_images(flagged, {"ok.jpg"}, ZipLimits())
    assert table.to_pylist()[0]["status"] == "missing"
    assert rejected[0].stage == "file" and rejected[0].record_key == "flagged.zip"
    assert rejected[0].reason.startswith("unreadable archive: 'utf-8' codec can't decode")


def test_utf8_entry_names_are_read(tmp_path):
    z = write_zip(tmp_path / "u.zip", [("images/café 1.jpg", JPEG, {})])
    table, rejected, _ = inventory_images(z, {"café 1.jpg"}, ZipLimits())
    assert rejected == [] and table.to_pylist()[0]["status"] == "ok"


@pytest.mark.parametrize("names", [("images/a.jpg", "images/a.jpg"), ("images/a.jpg", "a.jpg")], ids=["same name", "same image name"])
def test_duplicate_entries_are_ambiguous_so_every_copy_is_refused(tmp_path, names):
    # zipfile looks a name up to its *last* entry while a scan would keep the first: a hostile
    # second copy could swap the image between inventory and hashing. Neither is trusted.
    z = write_zip(tmp_path / "d.zip", [(names[0], stand_in_jpeg(1), {}), (names[1], stand_in_jpeg(2), {}), ("images/b.jpg", JPEG, {})])
    table, rejected, _ = inventory_images(z, {"a.jpg", "b.jpg"}, ZipLimits())
    status = {r["image_name"]: r["status"] for r in table.to_pylist()}
    assert status == {"a.jpg": "missing", "b.jpg": "ok"}
    assert [(r.stage, r.record_key) for r in rejected] == [("unpack", names[0]), ("unpack", names[1]), ("resolve", "a.jpg")]
    assert all(r.reason == "2 entries for image 'a.jpg': ambiguous, every copy refused" for r in rejected[:2])


# ---- zip bombs --------------------------------------------------------------------------------


def test_zip_bomb_entry_ratio_and_total_size_are_refused_before_inflating(tmp_path):
    bomb = b"\0" * (3 * 1024 * 1024)  # deflates ~1000:1
    noise = Image.frombytes("RGB", (128, 128), random.Random(3).randbytes(128 * 128 * 3))
    buf = io.BytesIO()
    noise.save(buf, "PNG")  # ~50 KB that do not compress: the archive as a whole stays under 100:1
    mixed = write_zip(tmp_path / "mixed.zip", [("images/ok.png", buf.getvalue(), {}),
                                               ("images/bomb.jpg", bomb, {"compress": zipfile.ZIP_DEFLATED})])
    limits = ZipLimits(max_entry_ratio=100)
    table, rejected, _ = inventory_images(mixed, {"ok.png", "bomb.jpg"}, limits)
    assert {r["image_name"]: r["status"] for r in table.to_pylist()} == {"ok.png": "ok", "bomb.jpg": "missing"}
    bomb_row = next(r for r in rejected if r.record_key == "images/bomb.jpg")
    assert bomb_row.stage == "unpack" and bomb_row.reason.startswith("compression ratio") and "exceeds 100:1" in bomb_row.reason

    only_bomb = write_zip(tmp_path / "bomb.zip", [(f"images/{i}.jpg", bomb, {"compress": zipfile.ZIP_DEFLATED}) for i in range(3)])
    table, rejected, _ = inventory_images(only_bomb, {"0.jpg"}, limits)
    assert rejected[0].stage == "file" and rejected[0].record_key == "bomb.zip"
    assert "refusing a zip bomb" in rejected[0].reason and table.to_pylist()[0]["status"] == "missing"

    huge = inventory_images(only_bomb, set(), ZipLimits(max_total_bytes=8 * 1024 * 1024))[1]
    assert huge[0].reason == f"total uncompressed size {9 * 1024 * 1024} bytes exceeds the {8 * 1024 * 1024}-byte limit"
    many = inventory_images(only_bomb, set(), ZipLimits(max_entries=2))[1]
    assert many[0].reason == "3 entries exceed the 2-entry limit"


# ---- whole archives that are broken: MMRB2 inventory and VisualPRM image zips ------------------


def broken_archives(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = write_zip(tmp_path / "good.zip", [("images/a.jpg", JPEG, {}), ("images/b.jpg", stand_in_jpeg(2), {})])
    out = {}
    for kind, data, reason in [
        ("truncated", good.read_bytes()[: len(good.read_bytes()) // 2], "unreadable archive: File is not a zip file"),
        ("not a zip", b"<html>404 Not Found</html>\n", "unreadable archive: File is not a zip file"),
        ("zero bytes", b"", "unreadable archive: File is not a zip file"),
        ("empty zip", write_zip(tmp_path / "e.zip", []).read_bytes(), "empty archive: no files in it"),
    ]:
        path = tmp_path / f"{kind.replace(' ', '_')}.zip"
        path.write_bytes(data)
        out[kind] = (path, reason)
    return out


@pytest.mark.parametrize("kind", ["truncated", "not a zip", "zero bytes", "empty zip"])
def test_broken_mmrb2_archive_is_one_file_row_and_every_reference_missing(tmp_path, kind):
    path, reason = broken_archives(tmp_path)[kind]
    table, rejected, _ = inventory_images(path, {"a.jpg", "b.jpg"}, ZipLimits())
    assert table.column("status").to_pylist() == ["missing", "missing"]
    assert [(r.stage, r.record_key, r.reason) for r in rejected] == [
        ("file", path.name, reason),
        ("resolve", "a.jpg", "referenced image not found in the archive"),
        ("resolve", "b.jpg", "referenced image not found in the archive"),
    ]


def test_broken_visualprm_image_zips_are_file_rows_and_the_good_zip_still_resolves(tmp_path):
    broken = broken_archives(tmp_path)
    ok_zip = write_zip(tmp_path / "ok.zip", [("images/src/a.jpg", JPEG, {})])
    shard = tmp_path / "train-0.parquet"
    pq.write_table(pa.table({"id": ["0"], "messages": ["[]"], "media": pa.array([[{"bytes": None, "path": "src/a.jpg"}]], MEDIA)}), shard)
    store = ImageStore(tmp_path / "data" / "images")
    zips = [p for p, _ in broken.values()] + [ok_zip]
    refs = {"src/a.jpg", "src/b.jpg", "src/\0.jpg", "../good.zip"}  # a NUL byte, a path out of the image root
    table, rejected, _ = inventory_prm_images(refs, [shard], tmp_path / "root", zips, ZipLimits(), store)
    assert {r["image_key"]: r["status"] for r in table.to_pylist()} == \
        {"src/a.jpg": "ok", "src/b.jpg": "unresolved", "src/\0.jpg": "unresolved", "../good.zip": "unresolved"}
    # Image roots were given (the zips), so an unresolved reference is a fault, not a decision.
    missing = [("resolve", ref, "not found in the dataset folder or the image roots") for ref in ("src/b.jpg", "src/\0.jpg", "../good.zip")]
    assert sorted((r.stage, r.record_key, r.reason) for r in rejected) == \
        sorted([("file", p.name, reason) for p, reason in broken.values()] + missing)


def test_damaged_entry_data_is_a_decode_row_not_a_crash(tmp_path):
    payload = random.Random(0).randbytes(4000) + b"x" * 4000
    z = write_zip(tmp_path / "dmg.zip", [("images/deflated.jpg", payload, {"compress": zipfile.ZIP_DEFLATED}),
                                         ("images/lzma.jpg", payload, {"compress": zipfile.ZIP_LZMA}),
                                         ("images/stored.jpg", payload, {})])
    data = bytearray(z.read_bytes())
    with zipfile.ZipFile(z) as zf:
        for info in zf.infolist():  # flip bytes inside each entry's compressed data, headers intact
            start = info.header_offset + 30 + len(info.filename) + 40
            data[start:start + 32] = bytes(b ^ 0xFF for b in data[start:start + 32])
    z.write_bytes(bytes(data))
    names = {"deflated.jpg", "lzma.jpg", "stored.jpg"}
    table, rejected, _ = inventory_images(z, names, ZipLimits())
    assert set(table.column("status").to_pylist()) == {"corrupt"}
    reasons = {r.record_key: r.reason for r in rejected}
    assert set(reasons) == names and all(r.stage == "decode" for r in rejected)
    assert reasons["stored.jpg"] == "unreadable entry: Bad CRC-32 for file 'images/stored.jpg'"
    assert reasons["deflated.jpg"].startswith("unreadable entry: Error -3 while decompressing data")
    hashed = hash_zip(z, [(n, f"images/{n}") for n in sorted(names)], ZipLimits(), workers=1)
    assert all(h.error.startswith("unreadable entry") and h.phash is None for h in hashed)


def test_mangled_archives_never_raise(tmp_path):
    """A few hundred truncations and byte flips of a small archive (deflate, bzip2, lzma, stored):
    the scan, the inventory and the hashing each answer with rows, never an exception."""
    base = write_zip(tmp_path / "base.zip", [
        ("images/a.jpg", stand_in_jpeg(1) + random.Random(1).randbytes(300), {"compress": zipfile.ZIP_DEFLATED}),
        ("images/b.jpg", stand_in_jpeg(2), {"compress": zipfile.ZIP_BZIP2}),
        ("images/c.jpg", stand_in_jpeg(3), {"compress": zipfile.ZIP_LZMA}),
        ("images/d.jpg", stand_in_jpeg(4), {}),
    ]).read_bytes()
    rng, path, outcomes = random.Random(7), tmp_path / "m.zip", set()
    for trial in range(300):
        data = bytearray(base)
        if trial % 3 == 0:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
        table, rejected, _ = inventory_images(path, {"a.jpg", "b.jpg", "c.jpg", "d.jpg"}, ZipLimits())
        assert table.num_rows >= 4 and all(r.reason for r in rejected)
        ok = [(r["image_name"], r["zip_entry"]) for r in table.to_pylist() if r["status"] == "ok"]
        if ok:  # an archive the scan could not open is never handed to hashing
            assert len(hash_zip(path, ok, ZipLimits(), workers=1)) == len(ok)
        outcomes |= {r.stage for r in rejected}
    assert outcomes == {"file", "unpack", "decode", "resolve"}
