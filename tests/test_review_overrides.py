"""Reviewers' overrides (pipeline/review/overrides.py) and how the engine applies them, without
Dagster: the file's rules, then each decision against a hand-made set whose verdicts are known."""

import json

import pyarrow as pa
import pytest

from pipeline.dedupe.decisions import SIGNATURE_SCHEMA, find_duplicates
from pipeline.review import overrides as ov
from pipeline.settings import Settings

from tests.dedupe_images import bar_chart, crop, encode, half, photo, signatures

pytestmark = pytest.mark.fast

ROLES = {"eval_sets": ("mmrb2",), "train_sets": ("visualprm",)}  # as the pipeline passes the registry's


def _table():
    original = photo(11)
    return pa.concat_tables([
        signatures({"eval.jpg": encode(original, "JPEG", 92)}, "mmrb2"),
        signatures({"copy.jpg": encode(half(original), "JPEG", 80), "crop.png": encode(crop(original, 0.04), "PNG"),
                    "other.png": encode(photo(12)), "chart.png": encode(bar_chart([0.2, 0.9, 0.5]))}, "visualprm"),
    ]).cast(SIGNATURE_SCHEMA)


def _write(path, decisions):
    path.write_text(json.dumps({"format": 1, "revision": 1, "decisions": decisions}))
    return ov.load(str(path))


def test_without_overrides_the_copies_cluster_with_the_eval_image():
    clusters, contamination, result = find_duplicates(_table(), 8, **ROLES)
    assert {r["image_key"]: r["kind"] for r in clusters.to_pylist()} == {"eval.jpg": None, "copy.jpg": "near", "crop.png": "crop"}
    assert sorted(contamination["train_image_key"].to_pylist()) == ["copy.jpg", "crop.png"]
    assert result.applied.num_rows == 0


def test_not_duplicates_splits_an_accepted_pair_and_its_contamination(tmp_path):
    o = _write(tmp_path / "o.json", [{"decision": "not_duplicates", "images": ["visualprm:crop.png", "mmrb2:eval.jpg"],
                                      "reason": "different crop, different figure"}])
    clusters, contamination, result = find_duplicates(_table(), 8, **ROLES, overrides=o)
    assert {r["image_key"]: r["kind"] for r in clusters.to_pylist()} == {"eval.jpg": None, "copy.jpg": "near"}
    assert contamination["train_image_key"].to_pylist() == ["copy.jpg"]
    (row,) = result.applied.to_pylist()
    assert row["number"] == 1 and row["decision"] == "not_duplicates" and row["applied"] is True
    assert row["effect"].startswith("applied: verification had accepted the pair (crop, score ")
    assert row["reason"] == "different crop, different figure"


def test_not_duplicates_holds_when_both_are_copies_of_the_canonical(tmp_path):
    """copy.jpg and crop.png are each accepted against eval.jpg, the canonical: separated by a
    reviewer, they do not end in one cluster through it; the one that ranks later tries again
    with the rest (and finds no partner there)."""
    o = _write(tmp_path / "o.json", [{"decision": "not_duplicates", "images": ["visualprm:copy.jpg", "visualprm:crop.png"]}])
    clusters, contamination, result = find_duplicates(_table(), 8, **ROLES, overrides=o)
    rows = {r["image_key"]: r for r in clusters.to_pylist()}
    assert rows["eval.jpg"]["is_canonical"] and ("copy.jpg" in rows) != ("crop.png" in rows)
    assert len({r["cluster_id"] for r in rows.values()}) == 1
    # contamination is pairwise (train against eval): both copies still leak the eval image
    assert sorted(contamination["train_image_key"].to_pylist()) == ["copy.jpg", "crop.png"]


def test_duplicates_joins_a_pair_the_engine_refused(tmp_path):
    o = _write(tmp_path / "o.json", [{"decision": "duplicates", "images": ["visualprm:other.png", "mmrb2:eval.jpg"]}])
    clusters, contamination, result = find_duplicates(_table(), 8, **ROLES, overrides=o)
    rows = {r["image_key"]: r for r in clusters.to_pylist()}
    # eval.jpg and other.png have as many pixels; eval.jpg, accepted as the same pixels against its
    # two copies, is the canonical of the joined component: other.png joins it by the override and
    # the copies stay with it.
    assert rows["eval.jpg"]["is_canonical"] and rows["other.png"]["kind"] == "override"
    assert len({r["cluster_id"] for r in rows.values()}) == 1
    assert (rows["copy.jpg"]["kind"], rows["crop.png"]["kind"]) == ("near", "crop")
    assert {(r["train_image_key"], r["kind"]) for r in contamination.to_pylist()} == {
        ("copy.jpg", "near"), ("crop.png", "crop"), ("other.png", "override")}
    (row,) = result.applied.to_pylist()
    assert row["applied"] and row["effect"].startswith("applied: not a candidate of the search (score ")


def test_not_leak_drops_only_that_train_image_and_keeps_its_cluster(tmp_path):
    o = _write(tmp_path / "o.json", [{"decision": "not_leak", "train": "visualprm:copy.jpg"}])
    clusters, contamination, result = find_duplicates(_table(), 8, **ROLES, overrides=o)
    assert contamination["train_image_key"].to_pylist() == ["crop.png"]
    assert len(clusters) == 3  # the cluster is a fact about pixels; only the leak verdict changes
    assert result.applied.to_pylist()[0]["effect"] == "applied: removed 1 contamination row"


def test_names_by_sha256_and_names_not_in_the_release(tmp_path):
    table = _table()
    sha = dict(zip(table["image_key"].to_pylist(), table["sha256"].to_pylist()))
    o = _write(tmp_path / "o.json", [
        {"decision": "not_leak", "train": f"sha256:{sha['crop.png']}", "eval": "mmrb2:eval.jpg"},
        {"decision": "not_duplicates", "images": ["visualprm:gone.png", "mmrb2:eval.jpg"]},
        {"decision": "not_leak", "train": "visualprm:chart.png"},
    ])
    _, contamination, result = find_duplicates(table, 8, **ROLES, overrides=o)
    assert contamination["train_image_key"].to_pylist() == ["copy.jpg"]
    assert [(r["number"], r["applied"], r["effect"]) for r in result.applied.to_pylist()] == [
        (1, True, "applied: removed 1 contamination row"),
        (2, False, "not applied: no hashed image named visualprm:gone.png in this release"),
        (3, True, "applied: no contamination row matched (nothing to remove)"),
    ]


DEEP = '{"format": 1, "decisions": ' + "[" * 100_000 + "]" * 100_000 + "}"
FILE_FAULTS = [
    ("not json", "not JSON"),
    ('{"decisions": []}', 'expected {"format": 1'),
    ('{"format": 1, "decisions": [{"decision": "maybe", "images": ["a:b", "c:d"]}]}', "decision 1: `decision` must be one of"),
    ('{"format": 1, "decisions": [{"decision": "duplicates", "images": ["a:b"]}]}', "names exactly two images"),
    ('{"format": 1, "decisions": [{"decision": "not_leak", "train": "plainname"}]}', "<dataset>:<image_key> or sha256:<hex>"),
    ('{"format": 1, "decisions": [{"decision": "duplicates", "images": ["a:b", "a:b"]}]}', "the same image twice"),
    ('{"format": 1, "revision": "two", "decisions": []}', ": `revision` must be a whole number of 0 or more, got 'two'"),
    ('{"format": 1, "revision": true, "decisions": []}', ": `revision` must be a whole number"),
    (DEEP, ": not usable JSON (nested too deeply)"),
    (b'{"format": 1, "decisions": [{"decision": "not_leak", "train": "a:\xff"}]}', ": not UTF-8 text (byte 65 is 0xff)"),
    ('{"format": 1, "decisions": [{"decision": "not_leak", "train": "a:b"}, {"decision": "not_leak", "train": "a:c", '
     '"reason": {"why": 1}}]}', "decision 2: `reason` must be text, got an object"),
    ('{"format": 1, "decisions": [{"decision": "not_leak", "train": "a:b", "eval": 7}]}', "decision 1: `eval`: an image is named"),
    ('{"format": 1, "decisions": [{"decision": "duplicates", "images": ["a:b", ["c:d"]]}]}', "decision 1: `images`: an image is named"),
    ('{"format": 1, "decisions": [{"decision": "not_leak", "train": "a:b", "by": 3}]}', "decision 1: `by` must be text, got a number"),
    ('{"format": 1, "decisions": ["not_leak a:b"]}', "decision 1: a decision is an object, got text"),
]


def _plant(path, doc):
    path.write_bytes(doc if isinstance(doc, bytes) else doc.encode())


@pytest.mark.parametrize("doc, message", FILE_FAULTS)
def test_a_file_that_cannot_be_used_is_named_with_the_entry(tmp_path, doc, message):
    path = tmp_path / "overrides.json"
    _plant(path, doc)
    with pytest.raises(ov.OverridesError) as err:
        ov.load(str(path))
    assert str(err.value).startswith(str(path)) and message in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_a_directory_in_place_of_the_file_is_refused_not_read_as_no_decisions(tmp_path):
    (tmp_path / "overrides.json").mkdir()
    with pytest.raises(ov.OverridesError, match=r"overrides\.json: a directory, not an overrides file"):
        ov.load(str(tmp_path / "overrides.json"))
    (tmp_path / "gone.json").symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(ov.OverridesError, match="a link to a file that does not exist"):
        ov.load(str(tmp_path / "gone.json"))
    assert not ov.load(str(tmp_path / "absent.json"))  # no file at all: no decisions
    # Only the dedupe step reads the file: the settings other steps key their work by do not.
    assert "overrides" not in Settings(overrides=str(tmp_path / "overrides.json")).fingerprint()


@pytest.mark.parametrize("argv", [["list"], ["remove", "1"], ["not-leak", "visualprm:a.png"]])
@pytest.mark.parametrize("doc, message", [FILE_FAULTS[6], FILE_FAULTS[8], FILE_FAULTS[9], FILE_FAULTS[10]])
def test_the_override_command_says_what_is_wrong_in_one_line_and_leaves_the_file(tmp_path, capsys, argv, doc, message):
    from pipeline.cli import main

    path = tmp_path / "overrides.json"
    _plant(path, doc)
    before = path.read_bytes()
    assert main(["override", "--file", str(path), *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"rewardhouse: {path}") and message in err
    assert path.read_bytes() == before


def test_the_override_command_refuses_a_directory(tmp_path, capsys):
    from pipeline.cli import main

    (tmp_path / "overrides.json").mkdir()
    for argv in (["list"], ["duplicates", "a:b", "c:d"]):
        assert main(["override", "--file", str(tmp_path / "overrides.json"), *argv]) == 2
        assert capsys.readouterr().err == f"rewardhouse: {tmp_path}/overrides.json: a directory, not an overrides file\n"


def test_the_cli_file_is_versioned_and_its_digest_is_the_decisions_content(tmp_path):
    path = str(tmp_path / "overrides.json")
    assert ov.load(path).digest() is None  # no file: the release id is what it was before overrides existed
    ov.add(path, "not_leak", ["visualprm:a.png"], reason="public diagram", by="ana")
    first = ov.load(path).digest()
    again = ov.add(path, "not_leak", ["visualprm:a.png"], reason="reworded", by="bo")  # same decision replaced
    assert again.revision == 2 and len(again.decisions) == 1 and again.decisions[0].by == "bo"
    assert ov.load(path).digest() == first  # notes are not content
    ov.add(path, "duplicates", ["visualprm:a.png", "mmrb2:b.png"], by="ana")
    second = ov.load(path).digest()
    assert second != first
    doc = json.loads((tmp_path / "overrides.json").read_text())
    assert doc["format"] == 1 and doc["revision"] == 3
    assert [d["decision"] for d in doc["decisions"]] == ["not_leak", "duplicates"]
    after = ov.remove(path, 2)
    assert after.revision == 4 and ov.load(path).digest() == first
    with pytest.raises(ov.OverridesError, match="there is no decision 5"):
        ov.remove(path, 5)
    # The settings never read the file: the digest reaches the release id with the dedupe step's
    # output, as that step read it (a second read could see another file).
    assert "overrides" not in Settings(overrides=path).fingerprint()
