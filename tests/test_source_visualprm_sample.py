"""The embedded VisualPRM400K sample: deterministic, in the upstream forms, with its planted quirks and faults."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

import imagehash
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageChops, ImageFile, ImageStat

from conftest import tree_digests
from pipeline.settings import REPO_ROOT
from pipeline.mmrb2 import sample as mmrb2
from pipeline.visualprm import sample as vs
from pipeline.visualprm.sample import (
    PARQUET_RELPATH,
    PRM_SYSTEM_PROMPT,
    VisualPRMSampleFacts,
    visualprm_sample_facts,
    write_internvl_jsonl_sample,
    write_visualprm_sample,
)

SOLUTION = "\n\n### Solution Process:\n"


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, VisualPRMSampleFacts]:
    root = tmp_path_factory.mktemp("visualprm")
    return root, write_visualprm_sample(root)


@pytest.fixture(scope="module")
def root(written) -> Path:
    return written[0]


@pytest.fixture(scope="module")
def facts(written) -> VisualPRMSampleFacts:
    return written[1]


@pytest.fixture(scope="module")
def table(root) -> pa.Table:
    return pq.read_table(root / PARQUET_RELPATH)


@pytest.fixture(scope="module")
def rows(table) -> dict[str, dict]:
    return {r["id"]: r for r in table.to_pylist()}


@pytest.fixture(scope="module")
def expected(facts) -> dict[str, vs.ExpectedSample]:
    return {e.sample_id: e for e in facts.expected}


def _conversation(messages: list[dict]) -> tuple[str, list[str], list[str], int]:
    """(question, steps, labels, <image> tags) of an internvl or chat conversation, parsed by hand."""
    turns = []
    for turn in messages:
        if "from" in turn:
            role = {"system": "system", "human": "user", "gpt": "assistant"}[turn["from"]]
            text = turn["value"]
        else:
            role, content = turn["role"], turn["content"]
            text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
        turns.append((role, text))
    assert turns[0] == ("system", PRM_SYSTEM_PROMPT)
    dialog = turns[1:]
    assert [r for r, _ in dialog] == ["user", "assistant"] * (len(dialog) // 2)
    first = dialog[0][1]
    assert first.startswith("### Question:\n") and SOLUTION in first
    head, step0 = first[len("### Question:\n") :].split(SOLUTION, 1)
    tags = 0
    while head.startswith("<image>\n"):
        head, tags = head[len("<image>\n") :], tags + 1
    steps = [step0] + [t for r, t in dialog[2::2]]
    labels = [t for r, t in dialog[1::2]]
    return head, steps, labels, tags


def _parse(messages: str) -> dict:
    obj = json.loads(messages)
    if isinstance(obj, dict):
        scored = obj["steps_with_score"]
        images = obj["image"] if isinstance(obj["image"], list) else [obj["image"]]
        return {
            "format": "raw",
            "question": obj["question"],
            "steps": [s["step"] for s in scored],
            "labels": ["+" if s["score"] > 0.0 else "-" for s in scored],
            "scores": [s["score"] for s in scored],
            "images": images,
        }
    question, steps, labels, tags = _conversation(obj)
    return {
        "format": "internvl" if "from" in obj[0] else "chat",
        "question": question,
        "steps": steps,
        "labels": labels,
        "scores": [None] * len(steps),
        "tags": tags,
    }


# -- determinism and writing ------------------------------------------------------------------


def test_layout_is_one_parquet_file(root):
    assert sorted(tree_digests(root)) == [PARQUET_RELPATH]


def test_two_writes_in_two_dirs_and_processes_are_identical(root, tmp_path):
    other = tmp_path / "again"
    write_visualprm_sample(other)
    assert tree_digests(other) == tree_digests(root)

    third = tmp_path / "subprocess"
    code = (
        "import sys; from pathlib import Path; from pipeline.visualprm.sample import write_visualprm_sample; "
        "write_visualprm_sample(Path(sys.argv[1]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "4242", "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run([sys.executable, "-c", code, str(third)], cwd=tmp_path, env=env, check=True, timeout=120)
    assert tree_digests(third) == tree_digests(root)


def test_rewrite_keeps_identical_file_and_mtime_and_repairs_a_changed_one(tmp_path):
    write_visualprm_sample(tmp_path)
    target = tmp_path / PARQUET_RELPATH
    good, mtime = target.read_bytes(), target.stat().st_mtime_ns
    write_visualprm_sample(tmp_path)
    assert target.stat().st_mtime_ns == mtime
    target.write_bytes(b"PAR1 garbage")
    write_visualprm_sample(tmp_path)
    assert target.read_bytes() == good
    assert not list(tmp_path.rglob("*.tmp")), "temporary files left behind"


def test_facts_without_writing_are_the_same(facts):
    assert visualprm_sample_facts() == facts


def test_size_is_small(root):
    size = (root / PARQUET_RELPATH).stat().st_size
    assert 50_000 < size < 1_500_000


# -- parquet shape ------------------------------------------------------------------------------


def test_schema_is_the_hf_parquet_form(root, table):
    schema = pq.read_schema(root / PARQUET_RELPATH)
    assert schema.names == ["id", "media", "messages"]
    assert schema.field("id").type == pa.string()
    assert schema.field("messages").type == pa.string()
    media = schema.field("media").type
    assert pa.types.is_list(media)
    assert media.value_type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert set(features) == {"id", "media", "messages"}
    meta = pq.ParquetFile(root / PARQUET_RELPATH).metadata
    assert meta.num_row_groups == 1
    assert meta.row_group(0).column(0).compression == "ZSTD"


def test_rows_ids_and_facts_agree(table, rows, facts, expected):
    ids = table.column("id").to_pylist()
    assert len(ids) == facts.rows == len(rows)
    assert 220 <= facts.rows <= 260
    assert set(ids) == set(expected) | set(facts.malformed)
    assert not set(expected) & set(facts.malformed)
    assert len(facts.expected) + len(facts.malformed) == facts.rows
    assert [i for i in ids if i in expected] == [e.sample_id for e in facts.expected], "expected is in file order"
    assert facts.formats == dict(Counter(e.message_format for e in facts.expected))
    embedded = sum(any(m["bytes"] is not None for m in r["media"]) for r in rows.values())
    assert (facts.embedded_rows, facts.path_only_rows) == (embedded, facts.rows - embedded)


def test_every_expected_row_reparses_to_its_facts(rows, expected):
    for sid, e in expected.items():
        row = rows[sid]
        parsed = _parse(row["messages"])
        assert parsed["format"] == e.message_format, sid
        assert parsed["question"] == e.question, sid
        assert tuple(parsed["steps"]) == e.steps, sid
        assert tuple(parsed["labels"]) == e.labels, sid
        assert tuple(parsed["scores"]) == e.mc_scores, sid
        paths = tuple(m["path"] for m in row["media"])
        assert paths == e.image_refs, sid
        if e.message_format == "raw":
            assert tuple(parsed["images"]) == e.image_refs, sid
        first = paths[0]
        assert e.source == (first.split("/", 1)[0] if "/" in first else None), sid
        prefix = e.source or "unsourced"
        assert sid.startswith(prefix + "_") and sid.rsplit("_", 2)[-2].isdigit(), sid


def test_sources_and_image_counts(expected):
    sources = Counter(e.source for e in expected.values())
    assert len([s for s in sources if s]) >= 6
    assert {"MathV360K", "geoqa+", "ai2d", "chartqa", "CLEVR_math", "nlvr2", "scienceqa", "iconqa"} <= set(sources)
    assert sources[None] == 1
    none = next(e for e in expected.values() if e.source is None)
    assert none.image_refs == (vs.NO_FOLDER_IMAGE_PATH,) and "/" not in vs.NO_FOLDER_IMAGE_PATH
    for e in expected.values():
        assert len(e.image_refs) == (2 if e.source == "nlvr2" else 1), e.sample_id
        if e.source == "nlvr2":
            a, b = e.image_refs
            assert a.endswith("-img0.png") and b.endswith("-img1.png") and a[:-9] == b[:-9]


# -- steps and labels ---------------------------------------------------------------------------


def test_negative_share_is_about_ten_percent(facts):
    labels = [lab for e in facts.expected for lab in e.labels]
    assert set(labels) == {"+", "-"}
    share = labels.count("-") / len(labels)
    assert 0.07 <= share <= 0.13, share


def test_step_counts_cover_1_to_16(facts, expected):
    counts = Counter(len(e.steps) for e in facts.expected)
    assert min(counts) == 1 and max(counts) == 16
    assert len(counts) >= 12
    assert len(expected[vs.ONE_STEP_ID].steps) == 1 and expected[vs.ONE_STEP_ID].labels == ("+",)
    assert "Final answer:" in expected[vs.ONE_STEP_ID].steps[0]
    assert len(expected[vs.SIXTEEN_STEP_ID].steps) == 16
    assert all(len(e.steps) == len(e.labels) == len(e.mc_scores) for e in facts.expected)


def test_labels_are_cumulative_with_early_stops_and_continuations(facts):
    all_plus = early = cont = 0
    for e in facts.expected:
        labels = "".join(e.labels)
        assert set(labels) <= {"+", "-"}
        if "-" not in labels:
            all_plus += 1
            continue
        first = labels.index("-")
        assert labels[first:] == "-" * (len(labels) - first), e.sample_id
        if len(labels) - first == 1:
            early += 1
        else:
            cont += 1
    assert all_plus > 0.6 * len(facts.expected)
    assert early >= 5 and cont >= 5


def test_step_texts_look_like_reasoning(facts):
    steps = [s for e in facts.expected for s in e.steps]
    assert all(s and s == s.strip() and "\n\n" not in s for s in steps)
    assert any("\\frac{" in s for s in steps)
    assert any("^\\circ" in s for s in steps)
    assert sum("\n" in s for s in steps) >= 10
    assert len(set(steps)) > len(steps) // 4, "steps are not mostly repeats"
    complete = [e for e in facts.expected if "-" not in e.labels]
    assert all("Final answer:" in e.steps[-1] for e in complete)
    assert all("### Solution Process:" not in s and "<image>" not in s for s in steps)


def test_groups_have_about_four_rollouts_sharing_image_and_question(facts):
    groups: dict[tuple, list[vs.ExpectedSample]] = defaultdict(list)
    for e in facts.expected:
        groups[(e.image_refs, e.question)].append(e)
    assert 55 <= len(groups) <= 65
    sizes = [len(g) for g in groups.values()]
    assert 3.5 <= sum(sizes) / len(sizes) <= 4.5
    assert Counter(sizes).most_common(1)[0][0] == 4
    for members in groups.values():
        if len(members) > 1:
            assert len({e.steps for e in members}) > 1, "rollouts differ in their steps"
        assert len({e.sample_id.rsplit("_", 1)[0] for e in members}) == 1
    # the image pins the group: one question per image
    by_image = defaultdict(set)
    for image, question in groups:
        by_image[image].add(question)
    assert all(len(q) == 1 for q in by_image.values())


# -- message formats ----------------------------------------------------------------------------


def test_format_proportions(facts):
    n = len(facts.expected)
    assert set(facts.formats) == {"internvl", "chat", "raw"}
    assert 0.75 <= facts.formats["internvl"] / n <= 0.85
    assert 0.09 <= facts.formats["chat"] / n <= 0.15
    assert 0.05 <= facts.formats["raw"] / n <= 0.11


def test_internvl_rows(rows, expected):
    untagged = []
    for sid, e in expected.items():
        if e.message_format != "internvl":
            continue
        conv = json.loads(rows[sid]["messages"])
        assert conv[0] == {"from": "system", "value": PRM_SYSTEM_PROMPT}
        assert [t["from"] for t in conv[1:]] == ["human", "gpt"] * len(e.steps)
        assert all(set(t) == {"from", "value"} for t in conv)
        tags = _parse(rows[sid]["messages"])["tags"]
        assert tags in (0, len(e.image_refs)), sid
        if tags == 0:
            untagged.append(sid)
            assert conv[1]["value"] == f"### Question:\n{e.question}{SOLUTION}{e.steps[0]}"
        else:
            assert conv[1]["value"].startswith("### Question:\n" + "<image>\n" * tags + e.question)
    assert tuple(sorted(untagged)) == vs.NO_IMAGE_TAG_IDS
    # messages are dumped without ASCII escapes
    assert any("∠" in rows[sid]["messages"] for sid in expected)


def test_chat_rows_and_their_part_lists(rows, expected):
    with_parts = []
    for sid, e in expected.items():
        if e.message_format != "chat":
            continue
        conv = json.loads(rows[sid]["messages"])
        assert [t["role"] for t in conv] == ["system"] + ["user", "assistant"] * len(e.steps)
        assert all(set(t) == {"role", "content"} for t in conv)
        if isinstance(conv[1]["content"], list):
            with_parts.append(sid)
            first = conv[1]["content"]
            assert first[: len(e.image_refs)] == [{"type": "image"}] * len(e.image_refs)
            assert first[-1]["type"] == "text" and "<image>" not in first[-1]["text"]
            assert conv[2]["content"] == [{"type": "text", "text": e.labels[0]}]
        else:
            assert conv[1]["content"].startswith("### Question:\n" + "<image>\n" * len(e.image_refs))
    assert tuple(sorted(with_parts)) == vs.PARTS_CONTENT_IDS
    assert any(expected[s].source == "nlvr2" for s in with_parts)


def test_raw_rows_follow_the_mc_rules(rows, expected):
    raw = [sid for sid, e in expected.items() if e.message_format == "raw"]
    zero_of_16 = one_of_16 = not_sampled = 0
    for sid in raw:
        e, obj = expected[sid], json.loads(rows[sid]["messages"])
        assert list(obj) == ["image", "question", "answer", "response", "steps_with_score", "num_mc_sequences"]
        assert obj["num_mc_sequences"] == 16
        assert obj["image"] == (list(e.image_refs) if len(e.image_refs) == 2 else e.image_refs[0])
        assert obj["response"] == "\n\n".join(e.steps)
        assert obj["answer"]
        seen_zero = False
        for s in obj["steps_with_score"]:
            assert list(s) == ["step", "score", "num_mc_correct", "num_mc_total"]
            assert type(s["score"]) is float and type(s["num_mc_correct"]) is int
            if s["num_mc_total"]:
                assert s["score"] == s["num_mc_correct"] / s["num_mc_total"]
            else:
                assert s["score"] == 0.0 and s["num_mc_correct"] == 0
            if seen_zero:
                assert s["num_mc_total"] == 0, "nothing is sampled after the first 0-score step"
                not_sampled += 1
            elif s["score"] == 0.0:
                assert s["num_mc_total"] == 16
                seen_zero, zero_of_16 = True, zero_of_16 + 1
            one_of_16 += (s["num_mc_correct"], s["num_mc_total"]) == (1, 16)
    assert zero_of_16 >= 2 and one_of_16 >= 1 and not_sampled >= 1
    one = json.loads(rows[vs.MC_ONE_IN_SIXTEEN_ID]["messages"])["steps_with_score"]
    assert any(s["score"] == 1 / 16 for s in one) and expected[vs.MC_ONE_IN_SIXTEEN_ID].message_format == "raw"
    assert any(expected[s].source == "nlvr2" for s in raw)


# -- media --------------------------------------------------------------------------------------


def test_embedded_and_path_only_media(rows, expected, facts):
    assert 0.3 <= facts.embedded_rows / facts.rows <= 0.5
    by_path: dict[str, set] = defaultdict(set)
    for r in rows.values():
        kinds = {m["bytes"] is None for m in r["media"]}
        assert len(kinds) == 1, "a row embeds all its images or none"
        for m in r["media"]:
            by_path[m["path"]].add(None if m["bytes"] is None else hashlib.sha256(m["bytes"]).hexdigest())
    # the rollouts of one group share the path and, if embedded, identical bytes
    assert all(len(v) == 1 for v in by_path.values())
    for r in rows.values():
        if r["id"] in facts.malformed:
            continue
        assert tuple(m["path"] for m in r["media"]) == expected[r["id"]].image_refs


def _embedded(rows) -> dict[str, bytes]:
    return {m["path"]: m["bytes"] for r in rows.values() for m in r["media"] if m["bytes"] is not None}


def test_embedded_images_decode_except_the_corrupt_one(rows, facts):
    images = _embedded(rows)
    assert facts.corrupt_image_path == vs.CORRUPT_IMAGE_PATH in images
    for path, data in images.items():
        if path == facts.corrupt_image_path:
            continue
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            assert im.format == ("PNG" if path.endswith(".png") else "JPEG"), path
            assert all(64 <= side <= 160 for side in im.size), (path, im.size)
    bad = images[facts.corrupt_image_path]
    with pytest.raises(Exception):
        with Image.open(io.BytesIO(bad)) as im:
            im.load()
    ImageFile.LOAD_TRUNCATED_IMAGES = True
    try:
        with pytest.raises(Exception):
            with Image.open(io.BytesIO(bad)) as im:
                im.load()
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = False


def test_planted_duplicates(rows):
    images = _embedded(rows)
    a, b = vs.EXACT_DUPLICATE_PATHS
    assert a != b and images[a] == images[b]
    a, b = vs.NEAR_DUPLICATE_PATHS
    assert images[a] != images[b]
    with Image.open(io.BytesIO(images[a])) as x, Image.open(io.BytesIO(images[b])) as y:
        x, y = x.convert("RGB"), y.convert("RGB")
        assert 0 < x.width - y.width <= 8 and 0 < x.height - y.height <= 8
        diff = ImageStat.Stat(ImageChops.difference(x.resize(y.size), y)).mean
        assert max(diff) < 12, diff
    digests = Counter(hashlib.sha256(d).hexdigest() for d in images.values())
    assert sorted(digests.values())[-1] == 2 and list(digests.values()).count(2) == 1


def test_images_look_like_content(rows):
    rich = 0
    for path, data in _embedded(rows).items():
        if path == vs.CORRUPT_IMAGE_PATH:
            continue
        with Image.open(io.BytesIO(data)) as im:
            colours = im.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) >= 2, f"{path} is a flat fill"  # line drawings have two
        rich += colours is None or len(colours) >= 64
    assert rich >= len(_embedded(rows)) // 2, "most pictures have gradients, shapes and grain"


# -- perceptual near-duplicates, contamination, the duplicate sample ------------------------------


def _phash_bits(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return imagehash.phash(im).hash.flatten()


def _distance(a: bytes, b: bytes) -> int:
    return int((_phash_bits(a) != _phash_bits(b)).sum())


def _group_of(rows, path: str) -> set[str]:
    """The (image, question) groups, by id prefix, of the rows showing `path`."""
    return {sid.rsplit("_", 1)[0] for sid, r in rows.items() if path in [m["path"] for m in r["media"]]}


@pytest.fixture(scope="module")
def mmrb2_images(tmp_path_factory) -> dict[str, bytes]:
    """The decodable images of the MMRB2 sample, as its image.zip holds them."""
    root = tmp_path_factory.mktemp("mmrb2")
    facts = mmrb2.write_sample(root)
    with zipfile.ZipFile(root / "facebook/MMRB2_image/image.zip") as zf:
        images = {i.filename.removeprefix("images/"): zf.read(i) for i in zf.infolist()}
    del images[facts.corrupt_image]
    return images


def test_planted_near_pairs_are_within_phash_distance_6(rows):
    images = _embedded(rows)
    assert vs.PLANTED_NEAR_PAIRS == (vs.EXACT_DUPLICATE_PATHS, vs.NEAR_DUPLICATE_PATHS, vs.CROPPED_COPY, vs.BRIGHTENED_COPY)
    for original, copy in vs.PLANTED_NEAR_PAIRS:
        assert original in images and copy in images, "planted pairs are embedded"
        assert len(_group_of(rows, original) | _group_of(rows, copy)) == 2, "the copy shows in another group"
        assert _distance(images[original], images[copy]) <= 6, (original, copy)
    assert _distance(*(images[p] for p in vs.EXACT_DUPLICATE_PATHS)) == 0

    original, copy = vs.CROPPED_COPY
    with Image.open(io.BytesIO(images[original])) as a, Image.open(io.BytesIO(images[copy])) as b:
        assert images[original] != images[copy]
        for full, cut in zip(a.size, b.size):  # about 4-6 % off each side
            assert 0.035 <= (full - cut) / 2 / full <= 0.065, (a.size, b.size)
    original, copy = vs.BRIGHTENED_COPY
    with Image.open(io.BytesIO(images[original])) as a, Image.open(io.BytesIO(images[copy])) as b:
        assert a.size == b.size and images[original] != images[copy]
        gain = ImageStat.Stat(b.convert("L")).mean[0] / ImageStat.Stat(a.convert("L")).mean[0]
        assert 1.08 <= gain <= 1.18, gain


def test_contaminated_image_is_an_embedded_near_copy_of_an_mmrb2_picture(rows, mmrb2_images):
    path, name = vs.CONTAMINATED
    images = _embedded(rows)
    assert path in images and name in mmrb2_images
    assert len(_group_of(rows, path)) == 1, "one (image, question) group shows it"
    users = [r for r in rows.values() if path in [m["path"] for m in r["media"]]]
    assert len(users) >= 3 and all(m["bytes"] == images[path] for r in users for m in r["media"])
    assert images[path] != mmrb2_images[name]
    with Image.open(io.BytesIO(images[path])) as a, Image.open(io.BytesIO(mmrb2_images[name])) as b:
        assert a.format == "JPEG" and a.size != b.size
        assert all(0.85 * big <= small <= 0.95 * big for small, big in zip(a.size, b.size))
    assert _distance(images[path], mmrb2_images[name]) <= 6
    assert name not in {n for pair in mmrb2.PLANTED_NEAR_PAIRS for n in pair}


def test_no_other_two_images_of_both_samples_are_near_in_phash(rows, mmrb2_images):
    images = {f"visualprm:{p}": d for p, d in _embedded(rows).items() if p != vs.CORRUPT_IMAGE_PATH}
    images.update({f"mmrb2:{n}": d for n, d in mmrb2_images.items()})
    names = sorted(images)
    bits = np.array([_phash_bits(images[n]) for n in names])
    dist = (bits[:, None, :] != bits[None, :, :]).sum(axis=-1)
    index = {n: i for i, n in enumerate(names)}
    planted = [(f"visualprm:{a}", f"visualprm:{b}") for a, b in vs.PLANTED_NEAR_PAIRS]
    planted += [(f"mmrb2:{a}", f"mmrb2:{b}") for a, b in mmrb2.PLANTED_NEAR_PAIRS]
    planted += [(f"visualprm:{vs.CONTAMINATED[0]}", f"mmrb2:{vs.CONTAMINATED[1]}")]
    unrelated = np.triu(np.ones(dist.shape, dtype=bool), k=1)
    for a, b in planted:
        assert dist[index[a], index[b]] <= 6, (a, b)
        unrelated[index[a], index[b]] = unrelated[index[b], index[a]] = False
    close = [(names[i], names[j], int(dist[i, j])) for i, j in np.argwhere(unrelated & (dist < 14))]
    assert not close, close
    assert len(names) >= 100


def test_lookalikes_are_candidates_that_verification_refuses(rows):
    """Each planted look-alike pair is within the search radius on one route (a real test of the
    verification, not of the search) and is refused: different content from one template."""
    from pipeline.dedupe.engine import phash_distance
    from pipeline.dedupe.hashing import hash_bytes
    from pipeline.dedupe.verify import compare

    assert [tuple(p) for p in vs.LOOKALIKE_PAIRS] == [
        ("geoqa+/images/10579.png", "geoqa+/images/11111.png"),
        ("chartqa/train/png/two_col_38228.png", "chartqa/train/png/two_col_15672.png")]
    embedded = _embedded(rows)
    for first, second in vs.LOOKALIKE_PAIRS:
        a, b = hash_bytes(first, embedded[first]), hash_bytes(second, embedded[second])
        d = lambda x, y: int(phash_distance(np.array([x]), np.array([y]))[0])  # noqa: E731
        routes = [d(a.phash, b.phash), d(a.crop_hash, b.phash), d(a.phash, b.crop_hash), d(a.top_hash, b.top_hash),
                  d(a.bottom_hash, b.bottom_hash)]
        assert min(routes) <= 8 < routes[0], (first, routes)
        thumbs = [np.frombuffer(h.thumb, np.uint8)[None] for h in (a, b)]
        verdict = compare(*thumbs, np.array([a.width / a.height]), np.array([b.width / b.height]),
                          np.array([[a.chroma_cb, a.chroma_cr]]), np.array([[b.chroma_cb, b.chroma_cr]]))
        assert not verdict.accepted[0], (first, verdict.score[0])


def test_exactly_one_duplicate_sample(table, rows, expected):
    kept, dup = vs.DUPLICATE_SAMPLE_IDS
    ids = table.column("id").to_pylist()
    assert kept != dup and ids.index(kept) < ids.index(dup), "the duplicate comes later in the file"
    a, b = expected[kept], expected[dup]
    assert (a.image_refs, a.question, a.steps, a.labels) == (b.image_refs, b.question, b.steps, b.labels)
    assert rows[kept]["media"] == rows[dup]["media"] and rows[kept]["media"][0]["bytes"] is not None
    pa_, pb = _parse(rows[kept]["messages"]), _parse(rows[dup]["messages"])
    assert (pa_["question"], pa_["steps"], pa_["labels"]) == (pb["question"], pb["steps"], pb["labels"])

    # nowhere else: the same picture (by bytes where embedded), question and steps
    def picture(sid: str) -> tuple:
        return tuple(
            hashlib.sha256(m["bytes"]).hexdigest() if m["bytes"] is not None else m["path"] for m in rows[sid]["media"]
        )

    seen = defaultdict(list)
    for sid, e in expected.items():
        seen[(picture(sid), e.question, e.steps)].append(sid)
    assert [sorted(v) for v in seen.values() if len(v) > 1] == [sorted(vs.DUPLICATE_SAMPLE_IDS)]
    group = [e for sid, e in expected.items() if sid.rsplit("_", 1)[0] == kept.rsplit("_", 1)[0]]
    assert len(group) >= 3 and len({e.steps for e in group}) == len(group) - 1


# -- malformed rows -----------------------------------------------------------------------------


def test_every_malformed_row_carries_its_fault(rows, facts):
    assert tuple(sorted(facts.malformed)) == vs.MALFORMED_IDS
    seen = set()
    for sid, fault in facts.malformed.items():
        row = rows[sid]
        assert row["media"] and all(m["path"] for m in row["media"])
        text = row["messages"]
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            seen.add("invalid_json")
            assert "JSON" in fault
            continue
        if isinstance(obj, dict):
            assert obj == {"foo": 1} and "object" in fault
            seen.add("object")
        elif all(isinstance(x, str) for x in obj):
            assert "list of strings" in fault
            seen.add("strings")
        else:
            roles = [t["from"] for t in obj]
            values = [t["value"] for t in obj[2::2]]
            if roles[-1] == "human":
                assert "no label" in fault and set(values) <= {"+", "-"}
                seen.add("unlabelled")
            else:
                assert [v for v in values if v not in ("+", "-")] == ["maybe"] and "maybe" in fault
                seen.add("maybe")
            assert obj[0]["value"] == PRM_SYSTEM_PROMPT
    assert seen == {"invalid_json", "object", "strings", "unlabelled", "maybe"}
    assert len({sid.rsplit("_", 1)[0] for sid in facts.malformed}) == len(facts.malformed)


# -- the InternVL jsonl form --------------------------------------------------------------------


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory) -> tuple[Path, VisualPRMSampleFacts]:
    root = tmp_path_factory.mktemp("internvl")
    return root, write_internvl_jsonl_sample(root)


def test_jsonl_is_deterministic_and_not_rewritten(jsonl, tmp_path):
    root, _ = jsonl
    write_internvl_jsonl_sample(tmp_path)
    assert tree_digests(tmp_path) == tree_digests(root)
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    write_internvl_jsonl_sample(tmp_path)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == mtimes


def test_jsonl_lines_and_facts(jsonl, facts):
    root, jfacts = jsonl
    ann = root / vs.JSONL_ANNOTATION_DIR
    files = sorted(ann.glob("*_prm.jsonl"))
    assert {f.name for f in ann.iterdir()} == {f.name for f in files}
    assert len(files) >= 6
    assert 35 <= jfacts.rows <= 45 and len(jfacts.expected) == jfacts.rows
    assert jfacts.malformed == {} and jfacts.formats == {"internvl": jfacts.rows}
    assert (jfacts.embedded_rows, jfacts.path_only_rows, jfacts.corrupt_image_path) == (0, jfacts.rows, None)
    exp = {e.sample_id: e for e in jfacts.expected}
    parquet_rollouts = {(e.image_refs, e.question, e.steps, e.labels) for e in facts.expected}
    count = 0
    for f in files:
        source = f.stem[: -len("_prm")]
        raw = f.read_bytes()
        assert raw.isascii() and raw.endswith(b"\n")
        lines = raw.decode().splitlines()
        images = []
        for number, line in enumerate(lines, start=1):
            obj = json.loads(line)
            assert line == json.dumps(obj)
            assert list(obj) == ["id", "image", "conversations"] and obj["id"] == -1
            e = exp[f"{f.stem}:{number}"]
            assert e.source == source and e.message_format == "internvl"
            refs = obj["image"] if isinstance(obj["image"], list) else [obj["image"]]
            assert tuple(refs) == e.image_refs and refs[0].split("/", 1)[0] == source
            question, steps, labels, tags = _conversation(obj["conversations"])
            assert tags == 0, "upstream item2conv_prm writes no <image> tag"
            assert (question, tuple(steps), tuple(labels)) == (e.question, e.steps, e.labels)
            assert (e.image_refs, e.question, e.steps, e.labels) in parquet_rollouts
            images.append(str(obj["image"]))
            count += 1
        assert images == sorted(images), "upstream sorts by str(image)"
    assert count == jfacts.rows
    assert any(len(e.image_refs) == 2 for e in jfacts.expected)
    assert any("-" in e.labels for e in jfacts.expected)


def test_jsonl_images_loose_zipped_and_one_unresolved(jsonl):
    root, jfacts = jsonl
    refs = sorted({p for e in jfacts.expected for p in e.image_refs})
    loose_dir = root / vs.JSONL_IMAGE_DIR
    loose = {str(p.relative_to(loose_dir)) for p in loose_dir.rglob("*") if p.is_file()}
    with zipfile.ZipFile(root / vs.JSONL_IMAGE_ZIP) as zf:
        zipped = {i.filename: zf.read(i) for i in zf.infolist()}
    assert not loose & set(zipped)
    unresolved = [p for p in refs if p not in loose and p not in zipped]
    assert unresolved == [vs.JSONL_UNRESOLVED_IMAGE]
    assert loose | set(zipped) == set(refs) - {vs.JSONL_UNRESOLVED_IMAGE}
    assert abs(len(loose) - len(zipped)) <= 1 and len(zipped) >= 3
    assert set(vs.EXACT_DUPLICATE_PATHS) <= loose | set(zipped)
    for path in refs:
        if path == vs.JSONL_UNRESOLVED_IMAGE:
            continue
        data = (loose_dir / path).read_bytes() if path in loose else zipped[path]
        with Image.open(io.BytesIO(data)) as im:
            im.load()
