"""Broken, hostile and merely unusual images, through the inventories (imaging) and the hashing:
broken ones are quarantined with a reason that is the same on every run, unusual-but-valid ones
are accepted and hashed, and the decompression-bomb guard is on with a configurable pixel limit."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image, features

from pipeline.dedupe.hashing import hash_bytes, hash_files, hash_zip
from pipeline.imaging import NOT_AN_IMAGE, inspect_image
from pipeline.mmrb2.images import inventory_images
from pipeline.resources import RewardhouseResource, default_resource
from pipeline.settings import DEFAULT_MAX_IMAGE_PIXELS, Settings, ZipLimits
from pipeline.visualprm.images import ImageStore, inventory_prm_images

PILLOW_DEFAULT = int(1024 * 1024 * 1024 // 4 // 3)  # PIL.Image.MAX_IMAGE_PIXELS as Pillow ships it
MEDIA = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))


def encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def picture(w: int = 48, h: int = 32) -> Image.Image:
    """Something with structure, so hashes are not degenerate."""
    y, x = np.mgrid[0:h, 0:w]
    return Image.fromarray(np.stack([x * 255 // w, y * 255 // h, (x + y) % 256], axis=-1).astype(np.uint8))


def png_header_only(width: int, height: int) -> bytes:
    """A 70-byte PNG that claims width x height pixels: what a decompression bomb looks like before
    anyone decodes it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")


def unusual() -> dict[str, tuple[bytes, tuple[int, int], str]]:
    """name -> (bytes, stored size, format): valid images in the modes and shapes upstream data can hold."""
    rgb = picture()
    palette = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    sixteen = Image.fromarray((np.asarray(rgb.convert("L"), dtype=np.uint16) * 257))
    exif = rgb.getexif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW to display
    frames = [rgb, rgb.rotate(90), rgb.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]
    images = {
        "cmyk.jpg": (encode(rgb.convert("CMYK"), "JPEG"), (48, 32), "JPEG"),
        "grey16.png": (encode(sixteen, "PNG"), (48, 32), "PNG"),
        "grey16.tif": (encode(sixteen, "TIFF"), (48, 32), "TIFF"),
        "palette_transparent.png": (encode(palette, "PNG", transparency=0), (48, 32), "PNG"),
        "palette_transparent.gif": (encode(palette, "GIF", transparency=0), (48, 32), "GIF"),
        "grey_alpha.png": (encode(rgb.convert("LA"), "PNG"), (48, 32), "PNG"),
        "one_bit.png": (encode(rgb.convert("1"), "PNG"), (48, 32), "PNG"),
        "animated.gif": (encode(frames[0].convert("P"), "GIF", save_all=True, append_images=[f.convert("P") for f in frames[1:]],
                                duration=50, loop=0), (48, 32), "GIF"),
        "exif_rotated.jpg": (encode(rgb, "JPEG", exif=exif), (48, 32), "JPEG"),
        "one_by_n.png": (encode(Image.new("L", (1, 3000), 90), "PNG"), (1, 3000), "PNG"),
        "n_by_one.jpg": (encode(picture(3000, 1), "JPEG"), (3000, 1), "JPEG"),
    }
    if features.check("webp"):
        images["animated.webp"] = (encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=50), (48, 32), "WEBP")
    return images


def broken() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, how the reason starts)."""
    jpeg = encode(picture(), "JPEG")
    return {
        "truncated.jpg": (jpeg[: len(jpeg) // 2], "OSError: Truncated File Read"),
        "empty.jpg": (b"", NOT_AN_IMAGE),
        "text.jpg": (b"this is a caption, not a picture\n", NOT_AN_IMAGE),
        "truncated.png": (encode(picture(), "PNG")[:-40], "OSError: image file is truncated"),
        "bomb.png": (png_header_only(10_000, 10_000),
                     f"DecompressionBombError: 10000x10000 image has 100000000 pixels, above the max_image_pixels limit of {DEFAULT_MAX_IMAGE_PIXELS}"),
        "huge_bomb.png": (png_header_only(60_000, 60_000),
                          f"DecompressionBombError: 60000x60000 image has 3600000000 pixels, above the max_image_pixels limit of {DEFAULT_MAX_IMAGE_PIXELS}"),
    }


def zip_of(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(f"images/{name}", data)
    return path


def shard_of(path: Path, files: dict[str, bytes]) -> Path:
    media = [[{"bytes": data, "path": f"src/{name}"}] for name, data in files.items()]
    pq.write_table(pa.table({"id": [str(i) for i in range(len(media))], "messages": ["[]"] * len(media),
                             "media": pa.array(media, type=MEDIA)}), path)
    return path


# ---- valid but unusual: accepted, inventoried as stored, hashed -------------------------------


def test_unusual_images_are_accepted_and_hashed_everywhere(tmp_path):
    images = unusual()
    assert Image.open(io.BytesIO(images["animated.gif"][0])).n_frames == 3
    assert Image.open(io.BytesIO(images["exif_rotated.jpg"][0])).getexif()[0x0112] == 6
    for name, (data, size, fmt) in images.items():
        assert inspect_image(data, DEFAULT_MAX_IMAGE_PIXELS) == (*size, fmt, None), name
        hashed = hash_bytes(name, data, DEFAULT_MAX_IMAGE_PIXELS)
        assert hashed.error is None and (hashed.width, hashed.height) == size and isinstance(hashed.phash, int), name

    files = {name: data for name, (data, _, _) in images.items()}
    table, rejected, _ = inventory_images(zip_of(tmp_path / "image.zip", files), set(files), ZipLimits())
    assert rejected == [] and set(table.column("status").to_pylist()) == {"ok"}
    assert {r["image_name"]: (r["width"], r["height"], r["format"]) for r in table.to_pylist()} == \
        {n: (*s, f) for n, (_, s, f) in images.items()}

    store = ImageStore(tmp_path / "store")
    prm, rejected, _ = inventory_prm_images(set(), [shard_of(tmp_path / "train-0.parquet", files)], None, [], ZipLimits(), store)
    assert rejected == [] and set(prm.column("status").to_pylist()) == {"ok"}
    assert {r["image_key"]: Path(r["store_path"]).suffix for r in prm.to_pylist()}["src/grey16.tif"] == ".tif"

    # The worker processes hash the same as this one, from the zip and from the image store.
    entries = [(n, f"images/{n}") for n in files]
    one = hash_zip(tmp_path / "image.zip", entries, ZipLimits(), workers=1)
    assert hash_zip(tmp_path / "image.zip", entries, ZipLimits(), workers=2, chunk=3) == one
    assert all(h.error is None for h in one)
    stored = [(r["image_key"].removeprefix("src/"), store.root / r["store_path"]) for r in prm.to_pylist()]
    by_store = {h.key: h for h in hash_files(stored, workers=2, chunk=3)}
    assert all(by_store[h.key] == h for h in one)


def test_exif_orientation_is_not_applied(tmp_path):
    rgb = picture()
    exif = rgb.getexif()
    exif[0x0112] = 6
    rotated = hash_bytes("r", encode(rgb, "JPEG", exif=exif, quality=95))
    plain = hash_bytes("p", encode(rgb, "JPEG", quality=95))
    assert (rotated.width, rotated.height, rotated.phash, rotated.dhash) == (plain.width, plain.height, plain.phash, plain.dhash)


# ---- broken and hostile: quarantined with a reproducible reason -------------------------------


def test_broken_images_are_quarantined_with_reproducible_reasons(tmp_path):
    bad = broken()
    for name, (data, starts) in bad.items():
        width, height, fmt, problem = inspect_image(data, DEFAULT_MAX_IMAGE_PIXELS)
        assert (width, height, fmt) == (None, None, None) and problem.startswith(starts), name
        assert " at 0x" not in problem and inspect_image(data, DEFAULT_MAX_IMAGE_PIXELS)[3] == problem  # no object address
        hashed = hash_bytes(name, data, DEFAULT_MAX_IMAGE_PIXELS)
        assert hashed.phash is None and hashed.sha256 and hashed.error.startswith(starts), name
    assert len(bad["bomb.png"][0]) < 100 and len(bad["huge_bomb.png"][0]) < 100

    files = {name: data for name, (data, _) in bad.items()} | {"good.jpg": encode(picture(), "JPEG")}
    table, rejected, _ = inventory_images(zip_of(tmp_path / "image.zip", files), set(files), ZipLimits())
    status = {r["image_name"]: r["status"] for r in table.to_pylist()}
    assert status == {**{n: "corrupt" for n in bad}, "good.jpg": "ok"}
    reasons = {r.record_key: r.reason for r in rejected}
    assert set(reasons) == set(bad) and {r.stage for r in rejected} == {"decode"}
    assert all(reasons[n].startswith(bad[n][1]) for n in bad)

    store = ImageStore(tmp_path / "store")
    prm, rejected, _ = inventory_prm_images(set(), [shard_of(tmp_path / "train-0.parquet", files)], None, [], ZipLimits(), store)
    rows = {r["image_key"]: r for r in prm.to_pylist()}
    assert {k for k, r in rows.items() if r["status"] == "corrupt"} == {f"src/{n}" for n in bad}
    assert {(r.stage, r.record_key) for r in rejected} == {("decode", f"src/{n}") for n in bad}
    assert all(rows[f"src/{n}"]["problem"].startswith(bad[n][1]) and rows[f"src/{n}"]["store_path"] is None for n in bad)
    assert len(list(store.root.rglob("*.*"))) == 1  # only the good image was kept


# ---- the decompression-bomb guard and its setting ----------------------------------------------


def test_image_above_the_configured_limit_is_quarantined_naming_the_limit(tmp_path):
    data = encode(picture(40, 30), "PNG")  # 1200 pixels
    reason = "DecompressionBombError: 40x30 image has 1200 pixels, above the max_image_pixels limit of 1000"
    limits = ZipLimits(max_image_pixels=1000)
    assert inspect_image(data, 1000)[3] == reason
    assert inspect_image(data, 1200)[3] is None  # the limit itself is allowed

    z = zip_of(tmp_path / "image.zip", {"big.png": data, "small.jpg": encode(picture(20, 20), "JPEG")})
    table, rejected, _ = inventory_images(z, {"big.png", "small.jpg"}, limits)
    assert {r["image_name"]: r["status"] for r in table.to_pylist()} == {"big.png": "corrupt", "small.jpg": "ok"}
    assert [(r.stage, r.record_key, r.reason) for r in rejected] == [("decode", "big.png", reason)]

    store = ImageStore(tmp_path / "store")
    prm, rejected, _ = inventory_prm_images(set(), [shard_of(tmp_path / "t.parquet", {"big.png": data})], None, [], limits, store)
    assert prm.to_pylist()[0]["status"] == "corrupt" and [(r.stage, r.reason) for r in rejected] == [("decode", reason)]

    # Worker processes apply the same limit: from the zip (via ZipLimits) and from files.
    hashed = hash_zip(z, [("big.png", "images/big.png"), ("small.jpg", "images/small.jpg")], limits, workers=2, chunk=1)
    assert [h.error for h in hashed] == [reason, None]
    (tmp_path / "big.png").write_bytes(data)
    assert [h.error for h in hash_files([("big.png", tmp_path / "big.png")] * 2, workers=2, chunk=1, max_image_pixels=1000)] == [reason] * 2
    assert hash_files([("big.png", tmp_path / "big.png")], workers=1)[0].error is None  # default limit


def test_default_limit_is_pillows_and_the_guard_is_never_off(tmp_path, monkeypatch):
    assert DEFAULT_MAX_IMAGE_PIXELS == PILLOW_DEFAULT == Settings().max_image_pixels == ZipLimits().max_image_pixels
    assert Image.MAX_IMAGE_PIXELS == PILLOW_DEFAULT
    bomb = png_header_only(10_000, 10_000)
    z = zip_of(tmp_path / "image.zip", {"bomb.png": bomb})
    table, rejected, _ = inventory_images(z, {"bomb.png"}, ZipLimits())
    hash_zip(z, [("bomb.png", "images/bomb.png")], ZipLimits(), workers=1)
    assert rejected[0].reason.endswith(f"above the max_image_pixels limit of {PILLOW_DEFAULT}")
    assert Image.MAX_IMAGE_PIXELS == PILLOW_DEFAULT  # the pipeline never turns Pillow's guard off (or changes it)

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # someone else switched Pillow's guard off
    assert inspect_image(bomb)[3].endswith(f"above the max_image_pixels limit of {PILLOW_DEFAULT}")
    assert hash_bytes("bomb", bomb).error.endswith(f"above the max_image_pixels limit of {PILLOW_DEFAULT}")


def test_the_setting_decides_over_pillows_warning_and_pillows_hard_error_stays(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow warns above 1000 and raises above 2000
    warned = encode(picture(40, 30), "PNG")  # 1200
    # No setting: Pillow's limit is the limit, and the reason names it as the setting's.
    assert inspect_image(warned)[3] == "DecompressionBombError: 40x30 image has 1200 pixels, above the max_image_pixels limit of 1000"
    assert inspect_image(warned, 1500)[3] is None  # a raised limit lets it through
    assert hash_bytes("w", warned, 1500).error is None
    over = encode(picture(50, 50), "PNG")  # 2500 > 2 x 1000: Pillow's own ceiling, which the setting cannot lift
    assert inspect_image(over, 10_000)[3] == ("DecompressionBombError: 50x50 image has 2500 pixels, above Pillow's own "
                                             "ceiling of 2000 (twice PIL.Image.MAX_IMAGE_PIXELS), which "
                                             "max_image_pixels=10000 does not lift")


@pytest.mark.parametrize("side", [10_000, 14_000])  # 1.1 and 2.2 times the limit: Pillow warns, then refuses itself
def test_a_bomb_reason_names_the_max_image_pixels_limit_never_pillows_twice(side):
    bomb = png_header_only(side, side)
    reason = (f"DecompressionBombError: {side}x{side} image has {side * side} pixels, "
              f"above the max_image_pixels limit of {DEFAULT_MAX_IMAGE_PIXELS}")
    for limit in (DEFAULT_MAX_IMAGE_PIXELS, None):  # as a run sets it, and `rewardhouse dedupe DIR` (Pillow's own)
        assert inspect_image(bomb, limit)[3] == reason
        assert hash_bytes("bomb.png", bomb, limit).error == reason
    assert str(2 * DEFAULT_MAX_IMAGE_PIXELS) not in reason


def test_max_image_pixels_is_a_setting_resource_field_env_var_and_in_the_release_id(monkeypatch):
    assert "max_image_pixels" in RewardhouseResource.model_fields  # so `rewardhouse run --set max_image_pixels=N` takes it
    settings = RewardhouseResource(max_image_pixels=1234).settings()
    assert settings.max_image_pixels == settings.zip_limits.max_image_pixels == 1234
    assert settings.fingerprint()["zip_limits"]["max_image_pixels"] == 1234
    assert settings.fingerprint() != RewardhouseResource().settings().fingerprint()
    assert RewardhouseResource().settings().max_image_pixels == PILLOW_DEFAULT
    monkeypatch.setenv("REWARDHOUSE_MAX_IMAGE_PIXELS", "5000")
    assert default_resource().settings().max_image_pixels == 5000
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_image_pixels must be a positive integer"):
            ZipLimits(max_image_pixels=bad)


def test_the_one_decode_that_hashes_catches_every_truncation_a_full_decode_catches(tmp_path):
    # The MMRB2 inventory validates with the reduced-scale decode that hashes (one pass); a cut
    # JPEG, baseline or progressive, anywhere in its data, must fail it exactly as it fails a full decode.
    rng = np.random.default_rng(3)
    photo = Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8))
    names = {}
    for progressive in (False, True):
        data = encode(photo, "JPEG", quality=90, progressive=progressive)
        for frac in (0.2, 0.5, 0.8, 0.95, 0.995):
            names[f"cut_{int(progressive)}_{frac}.jpg"] = data[: int(len(data) * frac)]
        names[f"whole_{int(progressive)}.jpg"] = data
    zip_path = tmp_path / "image.zip"
    with zipfile.ZipFile(zip_path, "w") as zf:
        for name, data in names.items():
            zf.writestr(f"images/{name}", data)
    table, rejected, hashed = inventory_images(zip_path, set(names), ZipLimits(), workers=2)
    status = dict(zip(table["image_name"].to_pylist(), table["status"].to_pylist()))
    for name, data in names.items():
        try:  # Pillow's own full decode, not the project's
            with Image.open(io.BytesIO(data)) as im:
                im.load()
            full_decode_ok = True
        except OSError:
            full_decode_ok = False
        assert (status[name] == "ok") == full_decode_ok == name.startswith("whole_"), name
    assert sorted(r.key for r in hashed) == ["whole_0.jpg", "whole_1.jpg"]
    assert {r.record_key for r in rejected} == {n for n in names if n.startswith("cut_")}
    assert all(r.stage == "decode" and "truncated" in r.reason for r in rejected)
