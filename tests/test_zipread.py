"""Reading images from a zip: hostile entries and archives become quarantine rows, not crashes."""

import io
import stat
import zipfile
import zlib

import pytest
from PIL import Image

from conftest import stand_in_jpeg
from pipeline.mmrb2.images import inventory_images
from pipeline.settings import ZipLimits
from pipeline.zipread import EntryTooLarge, is_within, read_entry, scan_zip


def _add(zf, name, data, *, mode=None, compress=zipfile.ZIP_STORED):
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = compress
    if mode is not None:
        info.external_attr = mode << 16
    zf.writestr(info, data)


def _zip(path, entries):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, kw in entries:
            _add(zf, name, data, **kw)
    return path


def test_zip_entry_outside_root_is_quarantined(tmp_path):
    z = _zip(tmp_path / "a.zip", [
        ("images/ok.jpg", stand_in_jpeg(1), {}),
        ("../evil.jpg", stand_in_jpeg(2), {}),
        ("images/../../evil2.jpg", stand_in_jpeg(3), {}),
        ("/etc/abs.jpg", stand_in_jpeg(4), {}),
        ("images/link.jpg", b"/etc/passwd", {"mode": stat.S_IFLNK | 0o777}),
    ])
    scan = scan_zip(z, ZipLimits())
    assert set(scan.entries) == {"ok.jpg"}
    reasons = dict(scan.refused)
    assert "escapes the archive root" in reasons["../evil.jpg"]
    assert "escapes the archive root" in reasons["images/../../evil2.jpg"]
    assert reasons["/etc/abs.jpg"] == "absolute path in archive"
    assert reasons["images/link.jpg"] == "symlink entry"
    assert not is_within(tmp_path / "out", "../evil.jpg") and is_within(tmp_path / "out", "images/ok.jpg")


def test_bomb_entry_and_bomb_archive_are_refused(tmp_path):
    bomb = b"\0" * (4 * 1024 * 1024)  # deflates ~1000:1
    limits = ZipLimits(max_entry_ratio=100, ratio_floor_bytes=1024 * 1024)
    z = _zip(tmp_path / "b.zip", [
        ("images/ok.jpg", stand_in_jpeg(1) * 600, {}),  # stored, large enough to dilute the archive ratio
        ("images/bomb.jpg", bomb, {"compress": zipfile.ZIP_DEFLATED}),
    ])
    scan = scan_zip(z, limits)
    assert scan.archive_error is None
    assert "compression ratio" in dict(scan.refused)["images/bomb.jpg"]

    only_bomb = _zip(tmp_path / "c.zip", [("images/bomb.jpg", bomb * 4, {"compress": zipfile.ZIP_DEFLATED})])
    scan = scan_zip(only_bomb, limits)
    assert scan.archive_error and "zip bomb" in scan.archive_error and not scan.entries

    big = scan_zip(z, ZipLimits(max_entry_bytes=1000))
    assert "exceeds the 1000-byte limit" in dict(big.refused)["images/ok.jpg"]
    assert "total uncompressed size" in scan_zip(z, ZipLimits(max_total_bytes=10)).archive_error


def test_lying_entry_header_is_caught_while_inflating(tmp_path):
    data = bytes(range(256)) * 20  # 5,120 bytes
    z = _zip(tmp_path / "d.zip", [("images/x.jpg", data, {"compress": zipfile.ZIP_DEFLATED})])
    with zipfile.ZipFile(z) as zf:
        info = zf.getinfo("images/x.jpg")
        info.file_size = 100  # the header lies: it claims far fewer bytes than the entry inflates to
        with pytest.raises(zipfile.BadZipFile, match="^Bad CRC-32 for file 'images/x.jpg'$"):
            read_entry(zf, info, ZipLimits())
        # With a CRC that matches its first 100 bytes, zipfile stops inflating at the declared size:
        # no more than the header claims is ever produced, so the lie costs nothing.
        info.CRC = zlib.crc32(data[:100])
        assert read_entry(zf, info, ZipLimits()) == data[:100]


def test_an_entry_above_the_limit_is_refused_while_inflating_when_not_screened(tmp_path):
    # scan_zip refuses such an entry from its header (entry_problem); read_entry's own cap stops a
    # caller that did not screen it, at the limit, before the rest is inflated.
    data = bytes(range(256)) * 20
    z = _zip(tmp_path / "e.zip", [("images/x.jpg", data, {"compress": zipfile.ZIP_DEFLATED})])
    with zipfile.ZipFile(z) as zf:
        with pytest.raises(EntryTooLarge, match="^entry inflates past 4096 bytes$"):
            read_entry(zf, zf.getinfo("images/x.jpg"), ZipLimits(max_entry_bytes=4096), chunk=1024)
        assert read_entry(zf, zf.getinfo("images/x.jpg"), ZipLimits(max_entry_bytes=len(data))) == data


def test_inventory_marks_ok_corrupt_missing_and_quarantines_each(tmp_path):
    jpeg = stand_in_jpeg(5)
    z = _zip(tmp_path / "e.zip", [
        ("images/p 1_0.jpg", jpeg, {}),
        ("images/p 1_1.jpg", jpeg[: len(jpeg) // 2], {}),  # truncated: corrupt
        ("images/flat_dir_name.jpg", stand_in_jpeg(6), {}),  # referenced with a folder prefix
        ("images/extra.jpg", stand_in_jpeg(7), {}),  # in the zip, referenced by nobody
        ("../evil.jpg", jpeg, {}),
    ])
    refs = {"p 1_0.jpg", "p 1_1.jpg", "p 1_2.jpg"}
    prompts = {"synthetic_images/flat_dir_name.jpg", "dreambench_source:x/0_0.jpg"}  # the second is not shipped
    table, rejected, _ = inventory_images(z, refs, ZipLimits(), optional=prompts)
    rows = {r["image_name"]: r for r in table.to_pylist()}
    assert rows["p 1_0.jpg"]["status"] == "ok" and rows["p 1_0.jpg"]["width"] == 16 and rows["p 1_0.jpg"]["format"] == "JPEG"
    assert rows["p 1_0.jpg"]["bytes"] == len(jpeg) and len(rows["p 1_0.jpg"]["sha256"]) == 64
    assert rows["p 1_1.jpg"]["status"] == "corrupt"
    assert rows["p 1_2.jpg"]["status"] == "missing" and rows["p 1_2.jpg"]["zip_entry"] is None
    assert rows["synthetic_images/flat_dir_name.jpg"]["status"] == "ok"
    assert rows["extra.jpg"]["referenced"] is False
    assert "dreambench_source:x/0_0.jpg" not in rows
    stages = {(r.stage, r.record_key) for r in rejected}
    assert stages == {("decode", "p 1_1.jpg"), ("resolve", "p 1_2.jpg"), ("unpack", "../evil.jpg")}


def test_unreadable_archive_makes_every_reference_missing(tmp_path):
    z = tmp_path / "f.zip"
    z.write_bytes(b"this is not a zip")
    table, rejected, _ = inventory_images(z, {"a.jpg", "b.jpg"}, ZipLimits())
    assert table.column("status").to_pylist() == ["missing", "missing"]
    assert rejected[0].stage == "file" and "unreadable archive" in rejected[0].reason


def test_decompression_bomb_image_is_corrupt_not_a_crash(tmp_path):
    im = Image.new("L", (12000, 12000))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    z = _zip(tmp_path / "g.zip", [("images/huge.png", buf.getvalue(), {"compress": zipfile.ZIP_DEFLATED})])
    table, rejected, _ = inventory_images(z, {"huge.png"}, ZipLimits(max_entry_ratio=1e9))
    assert table.column("status").to_pylist() == ["corrupt"]
    assert "DecompressionBomb" in rejected[0].reason
