"""The embedded sample: deterministic, in the exact upstream formats, with its planted quirks and faults."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import imagehash
import numpy as np
import pytest
from PIL import Image, ImageChops, ImageFile, ImageStat

from conftest import tree_digests
from pipeline.settings import MMRB2_TASKS, REPO_ROOT
from pipeline.mmrb2 import sample
from pipeline.sources.base import ChecksumCache, RawSnapshot
from pipeline.mmrb2.sample import SAMPLE_VERSION, SampleFacts, fetch_sample, write_sample

BENCH = Path("facebookresearch/MMRB2/benchmark")
ZIP = Path("facebook/MMRB2_image/image.zip")
PAIR_KEYS = ["id", "response_a", "response_b", "chosen", "human_annotations", "prompt_source", "prompt_metadata"]
NEW_TASK_KEYS = ["pair_id", "prompt_content", "prompt_source", "prompt_metadata"]


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, SampleFacts]:
    root = tmp_path_factory.mktemp("sample")
    return root, write_sample(root)


@pytest.fixture(scope="module")
def root(written) -> Path:
    return written[0]


@pytest.fixture(scope="module")
def facts(written) -> SampleFacts:
    return written[1]


@pytest.fixture(scope="module")
def tasks(root) -> dict[str, list[dict]]:
    return {t: json.loads((root / BENCH / f"{t}_response_only.json").read_text())["pairs"] for t in MMRB2_TASKS}


@pytest.fixture(scope="module")
def new_task(root) -> list[dict]:
    return json.loads((root / BENCH / "new_task_release.json").read_text())["pairs"]


@pytest.fixture(scope="module")
def zip_entries(root) -> dict[str, bytes]:
    with zipfile.ZipFile(root / ZIP) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def _images(response: dict) -> list[str]:
    return [value for kind, value in response["response_content"] if kind == "image"]


def _response_image_names(tasks) -> list[str]:
    sides = ("response_a", "response_b")
    return [n for pairs in tasks.values() for p in pairs for side in sides for n in _images(p[side])]


# -- determinism and writing ------------------------------------------------------------------


def test_layout_has_exactly_the_upstream_files(root):
    expected = [str(ZIP), str(BENCH / "new_task_release.json")]
    expected += [str(BENCH / f"{t}_response_only.json") for t in MMRB2_TASKS]
    assert sorted(tree_digests(root)) == sorted(expected)


def test_two_writes_in_two_dirs_and_processes_are_identical(root, tmp_path):
    other = tmp_path / "again"
    write_sample(other)
    assert tree_digests(other) == tree_digests(root)

    third = tmp_path / "subprocess"
    code = (
        "import sys; from pathlib import Path; from pipeline.mmrb2.sample import write_sample; "
        "write_sample(Path(sys.argv[1]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run([sys.executable, "-c", code, str(third)], cwd=tmp_path, env=env, check=True, timeout=120)
    assert tree_digests(third) == tree_digests(root)


def test_rewrite_keeps_identical_files_and_mtimes_and_repairs_changed_ones(tmp_path):
    write_sample(tmp_path)
    files = [p for p in sorted(tmp_path.rglob("*")) if p.is_file()]
    before = {p: p.stat().st_mtime_ns for p in files}
    victim = tmp_path / BENCH / "t2i_response_only.json"
    good = victim.read_bytes()
    victim.write_bytes(b'{"pairs": []}')
    write_sample(tmp_path)
    for p in files:
        if p != victim:
            assert p.stat().st_mtime_ns == before[p], p
    assert victim.read_bytes() == good
    assert not [p for p in tmp_path.rglob("*.tmp")], "temporary files left behind"


def test_total_size_is_small(root):
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert 100_000 < total < 1_000_000


def test_json_is_dumped_like_upstream(root):
    # json.dumps(obj, indent=2) reproduces the real upstream files byte for byte
    for p in (root / BENCH).glob("*.json"):
        raw = p.read_bytes()
        assert raw == json.dumps(json.loads(raw), indent=2).encode("ascii"), p.name
        assert not raw.endswith(b"\n")
    assert b"\\u2019" in (root / BENCH / "reasoning_response_only.json").read_bytes()


# -- annotation files ---------------------------------------------------------------------------


def test_pair_shape_and_key_order(tasks, facts):
    ids = [p["id"] for pairs in tasks.values() for p in pairs]
    assert len(ids) == len(set(ids))
    assert 24 <= len(ids) <= 32
    for task, pairs in tasks.items():
        assert 6 <= len(pairs) <= 8
        assert facts.pairs_per_task[task] == len(pairs)
        chosen = [p["chosen"] for p in pairs]
        assert set(chosen) == {"A", "B"}, task
        assert facts.chosen_a[task] == chosen.count("A")
        for p in pairs:
            assert list(p) == PAIR_KEYS
            for side in ("response_a", "response_b"):
                assert list(p[side]) == ["model_name", "response_content"]
                assert isinstance(p[side]["model_name"], str) and p[side]["model_name"]
                for item in p[side]["response_content"]:
                    assert isinstance(item, list) and len(item) == 2
                    assert item[0] in ("text", "image") and isinstance(item[1], str)


def test_facts_values(facts, tasks, zip_entries):
    """The facts write_sample returns, against the files it wrote, counted here (not the plan's own
    constants, which write_sample already holds equal to the plan)."""
    assert facts.pairs_per_task == {t: len(pairs) for t, pairs in tasks.items()} == {
        "t2i": 8, "edit": 8, "interleaved": 6, "reasoning": 7}
    assert facts.chosen_a == {t: sum(p["chosen"] == "A" for p in pairs) for t, pairs in tasks.items()}
    names = _response_image_names(tasks)
    assert facts.image_refs == len(names) == 73
    in_zip = {Path(name).name: data for name, data in zip_entries.items()}
    assert facts.missing_image in names and facts.missing_image not in in_zip
    assert facts.corrupt_image in in_zip
    with pytest.raises(Exception):
        Image.open(io.BytesIO(in_zip[facts.corrupt_image])).load()
    a, b = facts.exact_duplicates
    assert in_zip[a] == in_zip[b]
    for original, copy in (facts.cropped_copy, facts.brightened_copy, facts.near_duplicates):
        assert in_zip[original] != in_zip[copy]


def test_image_names_count_through_a_then_b(tasks):
    for pairs in tasks.values():
        for p in pairs:
            names = _images(p["response_a"]) + _images(p["response_b"])
            assert names == [f"{p['id']}_{k}.jpg" for k in range(len(names))]


def test_images_per_response(tasks):
    t2i = [len(_images(p[s])) for p in tasks["t2i"] for s in ("response_a", "response_b")]
    assert set(t2i) == {1}
    assert all(len(p[s]["response_content"]) == 1 for p in tasks["t2i"] for s in ("response_a", "response_b"))

    edit = [len(_images(p[s])) for p in tasks["edit"] for s in ("response_a", "response_b")]
    assert sorted(set(edit)) == [1, 2] and edit.count(2) == 1

    for p in tasks["interleaved"]:
        for s in ("response_a", "response_b"):
            kinds = [k for k, _ in p[s]["response_content"]]
            assert 1 <= kinds.count("image") <= 4
            assert "text" in kinds
            assert all(a != b for a, b in zip(kinds, kinds[1:])), "images and texts alternate"
    assert {len(_images(p[s])) for p in tasks["interleaved"] for s in ("response_a", "response_b")} == {1, 2, 3, 4}

    reasoning = [len(_images(p[s])) for p in tasks["reasoning"] for s in ("response_a", "response_b")]
    assert set(reasoning) == {0, 1, 2, 3}
    for p in tasks["reasoning"]:
        for s in ("response_a", "response_b"):
            assert p[s]["response_content"][0][0] == "text"


def test_human_annotations(tasks):
    for task in ("t2i", "edit", "interleaved"):
        for p in tasks[task]:
            ann = p["human_annotations"]
            assert isinstance(ann, list) and len(ann) == 3
            assert all(type(x) is int and 1 <= x <= 6 for x in ann)
            assert (sum(ann) > 10.5) == (p["chosen"] == "A")  # as in the real files
    empties = 0
    for p in tasks["reasoning"]:
        ann = p["human_annotations"]
        assert list(ann) == ["response_a_ratings", "response_b_ratings"]
        for ratings in ann.values():
            assert isinstance(ratings, list) and set(ratings) <= {"A", "B", "C"}
            empties += not ratings
        assert ann[f"response_{p['chosen'].lower()}_ratings"], "the chosen side is rated"
    assert empties >= 2


def test_prompt_metadata_types(tasks):
    id_types, category_types = {}, {}
    for pairs in tasks.values():
        for p in pairs:
            meta = p["prompt_metadata"]
            assert "id" in meta
            id_types.setdefault(p["prompt_source"], set()).add(type(meta["id"]))
            category_types.setdefault(p["prompt_source"], set()).add(type(meta.get("category")))
    assert id_types["wise"] == {int} and id_types["dreambench"] == {int} and id_types["mmmg"] == {int}
    assert id_types["oneigbench"] == {str} and id_types["risebench"] == {str} and id_types["blink"] == {str}
    assert category_types["mindcube"] == {list}
    assert category_types["chameleon"] == {str}
    assert category_types["evalmuse"] == {type(None)} and category_types["blink"] == {type(None)}
    assert {p["prompt_metadata"]["id"] for p in tasks["t2i"] if p["prompt_source"] == "evalmuse"} == {"02718"}
    mindcube = [p for p in tasks["reasoning"] if p["prompt_source"] == "mindcube"]
    assert mindcube and all(all(isinstance(c, str) for c in p["prompt_metadata"]["category"]) for p in mindcube)
    emu = next(p for p in tasks["edit"] if p["prompt_source"] == "emu-edit")
    assert list(emu["prompt_metadata"]) == ["id", "task", "split"]


def test_id_quirks(tasks, facts):
    ids = [p["id"] for pairs in tasks.values() for p in pairs]
    spaced = [i for i in ids if " " in i]
    assert spaced and all(i.startswith("r2ibench_logical_Sufficient Conditional_") for i in spaced)
    assert any("_-" in i for i in ids), "negative numbers inside ids"
    assert any(i.startswith("dreambench__") for i in ids) and any(i.startswith("interleavedeval__-") for i in ids)
    names = set(_response_image_names(tasks))
    assert facts.names_with_space == tuple(sorted(n for n in names if " " in n))
    assert len(facts.names_with_space) == 2 * len(spaced)


# -- new_task_release.json ----------------------------------------------------------------------


def test_new_task_release(new_task, tasks, facts, zip_entries):
    edit = {p["id"]: p for p in tasks["edit"]}
    released = {e["pair_id"] for e in new_task}
    assert [e["pair_id"] for e in new_task] == [p["id"] for p in tasks["edit"] if p["id"] in released]
    prompt_names = []
    for e in new_task:
        assert list(e) == NEW_TASK_KEYS
        assert e["pair_id"] in edit
        assert e["prompt_source"] == edit[e["pair_id"]]["prompt_source"]
        assert e["prompt_source"] in ("dreambench", "new_synthetic_edit", "text_heavy_edit")
        assert e["prompt_metadata"]["id"] == edit[e["pair_id"]]["prompt_metadata"]["id"]
        assert e["prompt_metadata"]["task"] is None
        kinds = [k for k, _ in e["prompt_content"]]
        assert kinds[-1] == "text" and set(kinds[:-1]) == {"image"}
        prompt_names += [v for k, v in e["prompt_content"] if k == "image"]
    assert len(prompt_names) > len(set(prompt_names)), "one prompt image is shared by two pairs"
    assert tuple(sorted(set(prompt_names))) == facts.prompt_images
    assert "dreambench_source:object_27_mug/2_0.jpg" in prompt_names
    colon = sorted({n for n in prompt_names if ":" in n})
    assert facts.names_with_colon == tuple(colon)
    assert any(n.startswith("synthetic_images/") and ":" in n for n in colon)
    assert any(n.startswith("dreambench_source:") and "/" in n for n in colon)
    for name in prompt_names:
        assert f"images/{name}" in zip_entries


# -- the image zip ------------------------------------------------------------------------------


def test_zip_entries_are_sorted_with_fixed_dates(root):
    with zipfile.ZipFile(root / ZIP) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    assert names == sorted(names) and len(names) == len(set(names))
    assert all(n.startswith("images/") and not n.endswith("/") for n in names)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.compress_type for i in infos} <= {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}


def test_every_reference_is_in_the_zip_except_the_missing_one(tasks, facts, zip_entries):
    refs = _response_image_names(tasks)
    assert len(refs) == facts.image_refs == len(set(refs))
    absent = [n for n in refs if f"images/{n}" not in zip_entries]
    assert absent == [facts.missing_image]
    assert facts.missing_image.startswith("vstar_")
    expected = {n for n in refs if n != facts.missing_image} | set(facts.prompt_images)
    assert set(zip_entries) == {f"images/{n}" for n in expected}


def test_only_the_corrupt_image_fails_to_decode(facts, zip_entries):
    sizes = set()
    for entry, data in zip_entries.items():
        name = entry.removeprefix("images/")
        if name == facts.corrupt_image:
            with pytest.raises(Exception):
                with Image.open(io.BytesIO(data)) as im:
                    im.load()
            continue
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            assert im.format == "JPEG" and im.mode == "RGB"
            assert 150 <= min(im.size) and max(im.size) <= 320
            sizes.add(im.size)
            extrema = im.convert("L").getextrema()
            assert extrema[1] - extrema[0] > 60, f"{name} looks flat"
    assert len(sizes) >= 5
    assert f"images/{facts.corrupt_image}" in zip_entries


def test_corrupt_image_fails_even_in_truncated_mode(facts, zip_entries, monkeypatch):
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(Exception):
        with Image.open(io.BytesIO(zip_entries[f"images/{facts.corrupt_image}"])) as im:
            im.load()


def test_planted_duplicates(facts, zip_entries):
    a, b = (zip_entries[f"images/{n}"] for n in facts.exact_duplicates)
    assert a == b
    assert facts.exact_duplicates[0].split("_")[1] != facts.exact_duplicates[1].split("_")[1], "across pairs"

    x, y = (zip_entries[f"images/{n}"] for n in facts.near_duplicates)
    assert x != y
    with Image.open(io.BytesIO(x)) as ix, Image.open(io.BytesIO(y)) as iy:
        assert ix.size != iy.size and abs(ix.size[0] - iy.size[0]) <= 16
        small = (64, 64)
        diff = ImageChops.difference(ix.convert("RGB").resize(small), iy.convert("RGB").resize(small))
        assert max(ImageStat.Stat(diff).mean) < 12

    # every other pair of images is clearly different
    digests = [hashlib.sha256(d).hexdigest() for d in zip_entries.values()]
    assert len(digests) - len(set(digests)) == 1


# -- the source entry point -----------------------------------------------------------------------


def test_fetch_sample_returns_a_snapshot_of_all_roles(tmp_path):
    cache = ChecksumCache(tmp_path / "cache" / "checksums.json")
    snap = fetch_sample(tmp_path / "raw", cache)
    assert isinstance(snap, RawSnapshot)
    assert snap.source == "sample"
    assert snap.revisions == {"sample": SAMPLE_VERSION}
    roles = [f.role for f in snap.files]
    assert roles == ["image_zip", *[f"annotations:{t}" for t in MMRB2_TASKS], "new_task_release"]
    for f in snap.files:
        data = Path(f.path).read_bytes()
        assert f.sha256 == hashlib.sha256(data).hexdigest()
        assert f.size == len(data)
    assert snap.image_zip == (tmp_path / "raw" / ZIP).resolve()
    assert set(snap.annotations()) == set(MMRB2_TASKS)
    assert RawSnapshot.from_dict(snap.to_dict()) == snap

    again = fetch_sample(tmp_path / "raw", ChecksumCache(tmp_path / "cache" / "checksums.json"))
    assert again.checksums() == snap.checksums()


# -- perceptual near-duplicates -----------------------------------------------------------------


def _phash_bits(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return imagehash.phash(im).hash.flatten()


def _pair_id(name: str) -> str:
    return name.rsplit("_", 1)[0]  # the image name without its "_{k}.jpg"


def test_planted_copies_are_within_phash_distance_6(facts, zip_entries):
    image = {entry.removeprefix("images/"): data for entry, data in zip_entries.items()}
    distances = {}
    for original, copy in sample.PLANTED_NEAR_PAIRS:
        assert original != copy
        bits = _phash_bits(image[original]), _phash_bits(image[copy])
        distances[copy] = int((bits[0] != bits[1]).sum())
        assert distances[copy] <= 6, (original, copy, distances[copy])
    assert distances[facts.exact_duplicates[1]] == 0
    for original, copy in (facts.exact_duplicates, facts.cropped_copy, facts.brightened_copy):
        assert _pair_id(original) != _pair_id(copy), "the copy sits under another pair's name"

    with Image.open(io.BytesIO(image[facts.cropped_copy[0]])) as a, Image.open(io.BytesIO(image[facts.cropped_copy[1]])) as b:
        assert image[facts.cropped_copy[0]] != image[facts.cropped_copy[1]]
        for full, cut in zip(a.size, b.size):  # about 4-6 % off each side
            assert 0.035 <= (full - cut) / 2 / full <= 0.065, (a.size, b.size)
    with Image.open(io.BytesIO(image[facts.brightened_copy[0]])) as a, Image.open(io.BytesIO(image[facts.brightened_copy[1]])) as b:
        assert a.size == b.size and image[facts.brightened_copy[0]] != image[facts.brightened_copy[1]]
        gain = ImageStat.Stat(b.convert("L")).mean[0] / ImageStat.Stat(a.convert("L")).mean[0]
        assert 1.08 <= gain <= 1.18, gain  # +12-18 %, a little less where bright pixels clip at 255


def test_no_other_two_images_are_near_in_phash(facts, zip_entries):
    names = sorted(e.removeprefix("images/") for e in zip_entries if e != f"images/{facts.corrupt_image}")
    bits = np.array([_phash_bits(zip_entries[f"images/{n}"]) for n in names])
    dist = (bits[:, None, :] != bits[None, :, :]).sum(axis=-1)
    index = {n: i for i, n in enumerate(names)}
    unrelated = np.triu(np.ones(dist.shape, dtype=bool), k=1)
    for a, b in sample.PLANTED_NEAR_PAIRS:
        unrelated[index[a], index[b]] = unrelated[index[b], index[a]] = False
    close = [(names[i], names[j], int(dist[i, j])) for i, j in np.argwhere(unrelated & (dist < 14))]
    assert not close, close
