"""`rewardhouse diff` and `warehouse.diff`: two real releases of the embedded sample, made with
different settings, compared table by table; every count is checked against a computation of its
own here (Python sets and counters over the rows pyarrow reads), not against DuckDB. Edge cases
(a table added and one removed, a key that is not unique, a schema change, list and struct values)
are releases published through the ReleaseStore from copies of the sample's real tables."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import published_home
from pipeline.cli import main
from pipeline.contract import INT64, TableContract, unique
from pipeline.datasets import table_contracts
from warehouse import diff
from warehouse.diff import rows, table_keys
from warehouse.store import ReleaseStore

# Settings that change the sample's content: labels of the raw-form steps (Monte-Carlo threshold),
# fewer near duplicates (so fewer clusters and leaks), and a pixel limit that refuses some images.
SECOND_RUN = ("--prm-label-threshold", "0.5", "--max-distance", "2", "--set", "max_image_pixels=90000")


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """A data root with two releases of the sample: default settings, then SECOND_RUN's."""
    root = tmp_path_factory.mktemp("diff") / "home"
    ids = []
    for argv in ((), SECOND_RUN):
        with published_home(root, *argv):
            ids.append(ReleaseStore(root / "releases").current())
    assert ids[0] != ids[1]
    return root, ids[0], ids[1]


@pytest.fixture
def at(monkeypatch):
    def point(root: Path) -> Path:
        monkeypatch.setenv("REWARDHOUSE_HOME", str(root))
        return root
    return point


def _cell(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def expected(a: Path | None, b: Path | None, key: tuple[str, ...] | None, ignore: tuple[str, ...] = ()) -> dict:
    """Added, removed and changed rows, computed row by row in Python: by key when the key is unique
    on both sides, else as multisets of whole rows (over the columns both sides have)."""
    ta = pq.read_table(a) if a else None
    tb = pq.read_table(b) if b else None
    if ta is None or tb is None:
        n = (ta or tb).num_rows
        return {"added": n if ta is None else 0, "removed": n if tb is None else 0, "changed": None}
    common = [c for c in tb.column_names if c in ta.column_names and c not in ignore]
    ra = [tuple(_cell(r[c]) for c in common) for r in ta.select(common).to_pylist()]
    rb = [tuple(_cell(r[c]) for c in common) for r in tb.select(common).to_pylist()]
    if key is not None:
        at = [common.index(k) for k in key]
        ka = {tuple(r[i] for i in at): r for r in ra}
        kb = {tuple(r[i] for i in at): r for r in rb}
        if len(ka) == len(ra) and len(kb) == len(rb):
            return {"added": len(kb.keys() - ka.keys()), "removed": len(ka.keys() - kb.keys()),
                    "changed": sum(ka[k] != kb[k] for k in ka.keys() & kb.keys())}
    ca, cb = Counter(ra), Counter(rb)
    return {"added": sum((cb - ca).values()), "removed": sum((ca - cb).values()), "changed": None}


def files(root: Path, rid: str) -> dict[str, Path]:
    return {p.stem: p for p in (root / "releases" / rid).glob("*.parquet")}


def test_the_keys_are_the_contracts_unique_columns_and_tables_without_one_compare_whole_rows():
    keys = table_keys()
    assert keys["prm_steps"] == ("sample_id", "step_index")
    assert keys["prm_samples"] == ("sample_id",)
    assert keys["duplicate_clusters"] == ("dataset", "image_key")
    assert {name for name, key in keys.items() if key is None} == {"quarantine", "dedupe_near_misses"}
    # built by the publish step, no contract: keyed by its check, its release_id column not compared
    assert keys["quality_results"] == ("check",)


def test_two_sample_releases_with_different_settings_are_counted_exactly_table_by_table(sample):
    root, first, second = sample
    got = diff(first, second, home=root)
    fa, fb = files(root, first), files(root, second)
    keys = table_keys()
    assert set(got["tables"]) == fa.keys() | fb.keys()
    for table, entry in got["tables"].items():
        want = expected(fa.get(table), fb.get(table), keys.get(table),
                        ("release_id",) if table == "quality_results" else ())
        counted = {k: entry[k] for k in want}
        if entry["status"] == "unchanged":  # the same file, not read: 0 changed however rows are matched
            assert want["added"] == want["removed"] == 0 and not want["changed"], table
            assert counted == {"added": 0, "removed": 0, "changed": 0}, table
        else:
            assert counted == want, table
        assert (entry["rows_before"], entry["rows_after"]) == (pq.read_metadata(fa[table]).num_rows,
                                                               pq.read_metadata(fb[table]).num_rows)
    changed = {t for t, e in got["tables"].items() if e["status"] == "changed"}
    # what these settings are known to change on the sample, and what they leave alone
    assert {"prm_steps", "prm_samples", "prm_label_stats", "quarantine", "contamination", "duplicate_clusters",
            "record_contamination", "image_hashes", "vlrb_images"} <= changed
    assert not changed & {"mmrb2_pairs", "vlrb_pairs", "prm_images"}
    t = got["tables"]
    assert t["prm_steps"]["changed"] > 0 and t["prm_steps"]["added"] == t["prm_steps"]["removed"] == 0
    assert t["quarantine"]["added"] > 0 and t["quarantine"]["changed"] is None
    assert t["quarantine"]["note"] == "no key in its contract: compared as whole rows"
    gl = got["gained_lost"]
    assert gl["contamination"]["lost"] == t["contamination"]["removed"] > 0
    assert gl["duplicate_clusters"]["lost"] == t["duplicate_clusters"]["removed"] > 0
    assert gl["quarantine"]["gained"] == t["quarantine"]["added"]
    leaks = gl["record_contamination"]
    assert (leaks["gained"], leaks["lost"]) == (t["record_contamination"]["added"], t["record_contamination"]["removed"])


def test_the_inputs_that_changed_are_the_settings_given_and_nothing_else(sample):
    root, first, second = sample
    inputs = diff(first, second, home=root)["inputs"]
    assert inputs == {
        "settings.dedupe_max_distance": {"before": 8, "after": 2},
        "settings.prm_label_threshold": {"before": 0.0, "after": 0.5},
        "settings.zip_limits.max_image_pixels": {"before": 89478485, "after": 90000},
    }


def test_the_step_label_distribution_and_steps_per_sample_before_and_after(sample):
    root, first, second = sample
    dist = diff(first, second, home=root)["distributions"]
    assert list(dist) == ["prm_steps"]
    for side, rid in (("before", first), ("after", second)):
        steps = pq.read_table(files(root, rid)["prm_steps"], columns=["sample_id", "label"])
        labels = Counter(steps["label"].to_pylist())
        per = sorted(Counter(steps["sample_id"].to_pylist()).values())
        assert dist["prm_steps"][side]["label"] == dict(labels)
        stats = dist["prm_steps"][side]["rows per sample_id"]
        assert (stats["records"], stats["min"], stats["max"]) == (len(per), per[0], per[-1])
        assert stats["mean"] == round(sum(per) / len(per), 3)
    assert dist["prm_steps"]["before"]["label"] != dist["prm_steps"]["after"]["label"]


def test_the_command_compares_the_previous_release_with_the_current_one(sample, at, capsys):
    root, first, second = at(sample[0]), sample[1], sample[2]
    assert main(["diff"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith(f"release {first} (") and f"-> {second} (" in text.splitlines()[0]
    got = diff(home=root)
    line = next(x for x in text.splitlines() if x.startswith("prm_steps "))
    steps = got["tables"]["prm_steps"]
    assert line.split() == ["prm_steps", "changed", str(steps["rows_before"]), str(steps["rows_after"]), "+0", "-0",
                            f"~{steps['changed']}"]
    quarantine = next(x for x in text.splitlines() if x.startswith("quarantine "))
    assert f"+{got['tables']['quarantine']['added']}" in quarantine.split()
    assert "  settings.dedupe_max_distance: 8 -> 2" in text.splitlines()
    assert main(["diff", first, second, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(got, default=str))


def test_rows_lists_the_changed_rows_of_one_table(sample, at, capsys):
    root, first, second = at(sample[0]), sample[1], sample[2]
    assert main(["diff", "--table", "prm_steps", "--rows", "--limit", "0", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    a = {(r["sample_id"], r["step_index"]): r for r in pq.read_table(files(root, first)["prm_steps"]).to_pylist()}
    b = {(r["sample_id"], r["step_index"]): r for r in pq.read_table(files(root, second)["prm_steps"]).to_pylist()}
    changed = {k for k in a if a[k] != b.get(k)}
    assert {r["change"] for r in listed} == {"changed from", "changed to"}
    for change, side in (("changed from", a), ("changed to", b)):
        rows_of = [r for r in listed if r["change"] == change]
        assert {(r["sample_id"], r["step_index"]) for r in rows_of} == changed
        assert all({k: v for k, v in r.items() if k != "change"} == side[(r["sample_id"], r["step_index"])]
                   for r in rows_of)
    # whole rows: the quarantine rows gained, as a multiset
    qa = Counter(map(_cell, pq.read_table(files(root, first)["quarantine"]).to_pylist()))
    qb = Counter(map(_cell, pq.read_table(files(root, second)["quarantine"]).to_pylist()))
    gained = rows(first, second, "quarantine", home=root)
    assert set(gained["change"].to_pylist()) == {"added"}
    assert Counter(_cell(r) for r in gained.drop(["change"]).to_pylist()) == qb - qa
    # text, cut at --limit
    assert main(["diff", "--table", "prm_steps", "--rows", "--limit", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split(" | ")[0].strip() == "change" and out[-2:] == ["(3 rows)", "(the first 3; --limit 0 lists them all)"]


@pytest.mark.parametrize("argv, said", [
    (["diff", "0000000000000000"], "no release '0000000000000000' under "),
    (["diff", "--table", "no_such_table"], "no table no_such_table in release "),
    (["diff", "--rows"], "--rows lists the rows of one table: name it with --table T"),
])
def test_a_release_or_table_that_is_not_there_is_one_line_and_exit_2(sample, at, capsys, argv, said):
    at(sample[0])
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and captured.err.startswith(f"rewardhouse: {said}")


def test_with_one_release_or_none_there_is_nothing_to_compare(tmp_path, at, capsys):
    root = at(tmp_path / "home")
    assert main(["diff"]) == 2
    assert capsys.readouterr().err.startswith("rewardhouse: no current release under ")
    ReleaseStore(root / "releases").publish("only", {"t": pa.table({"x": [1]})}, code_version="1", sources={},
                                            settings={})
    assert main(["diff"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "release only is the oldest under" in err and "nothing before it" in err


# A table of struct values (with a list inside), before and after: key 2 changes inside the list, key 3
# becomes null, key 4 is new.
SHAPE = pa.struct([("x", pa.int64()), ("y", pa.list_(pa.int64()))])
SHAPES = [pa.table({"k": [1, 2, 3], "s": pa.array([{"x": 1, "y": [1]}, {"x": 2, "y": [2]}, {"x": 3, "y": []}], SHAPE)}),
          pa.table({"k": [1, 2, 3, 4], "s": pa.array([{"x": 1, "y": [1]}, {"x": 2, "y": [2, 3]}, None,
                                                      {"x": 4, "y": None}], SHAPE)})]


@pytest.fixture(scope="module")
def edges(sample, tmp_path_factory):
    """Two releases made from the sample's first release: the second drops `quarantine`, adds a
    table, repeats a `prm_steps` row (its key is no longer unique), changes one `prm_samples` list
    value, and gives `contamination` a column more, one less and one row changed; both hold SHAPES."""
    root, first, _ = sample
    real = files(root, first)
    home = tmp_path_factory.mktemp("edges") / "home"
    store = ReleaseStore(home / "releases")
    old = {t: pq.read_table(real[t]) for t in ("prm_steps", "prm_samples", "quarantine", "contamination")}
    store.publish("edges-a", {**old, "shapes": SHAPES[0]}, code_version="10", sources={}, settings={"edge": 1})
    steps = pa.concat_tables([old["prm_steps"], old["prm_steps"].slice(5, 1)])
    samples = old["prm_samples"]
    refs = samples["image_refs"].to_pylist()
    refs[0] = [*(refs[0] or []), "edge.jpg"]
    samples = samples.set_column(samples.schema.get_field_index("image_refs"), "image_refs",
                                 pa.array(refs, samples.schema.field("image_refs").type))
    cont = old["contamination"]
    distance = cont["distance"].to_pylist()
    distance[0] += 1
    cont = cont.drop(["score"]).set_column(cont.schema.get_field_index("distance"), "distance",
                                           pa.array(distance, cont.schema.field("distance").type))
    cont = cont.append_column("note", pa.array(["edge"] * cont.num_rows))
    store.publish("edges-b", {"prm_steps": steps, "prm_samples": samples, "contamination": cont, "shapes": SHAPES[1],
                              "extra": pa.table({"k": ["x", "y"], "v": [[1], [2, 3]]})},
                  code_version="10", sources={}, settings={"edge": 2})
    return home, {rid: files(home, rid) for rid in ("edges-a", "edges-b")}


def test_a_table_added_a_table_removed_a_key_not_unique_a_list_and_a_schema_change(edges):
    home, f = edges
    got = diff(home=home)["tables"]
    a, b = f["edges-a"], f["edges-b"]
    keys = table_keys()
    assert got["extra"]["status"] == "added" and (got["extra"]["added"], got["extra"]["rows_after"]) == (2, 2)
    assert got["quarantine"]["status"] == "removed"
    assert got["quarantine"]["removed"] == got["quarantine"]["rows_before"] == pq.read_metadata(a["quarantine"]).num_rows
    steps = got["prm_steps"]
    assert steps["note"] == "key (sample_id, step_index) not unique: compared as whole rows" and steps["key"] is None
    assert {k: steps[k] for k in ("added", "removed", "changed")} == {"added": 1, "removed": 0, "changed": None}
    assert {k: got["prm_samples"][k] for k in ("added", "removed", "changed")} == \
        expected(a["prm_samples"], b["prm_samples"], keys["prm_samples"]) == {"added": 0, "removed": 0, "changed": 1}
    cont = got["contamination"]
    assert (cont["columns_added"], cont["columns_removed"]) == (["note"], ["score"])
    assert {k: cont[k] for k in ("added", "removed", "changed")} == \
        expected(a["contamination"], b["contamination"], keys["contamination"])
    assert cont["changed"] == 1 and cont["status"] == "changed"
    assert diff(home=home)["inputs"] == {"settings.edge": {"before": 1, "after": 2}}


def test_struct_and_list_values_are_compared_by_key(edges):
    home, f = edges
    shapes = TableContract("shapes", {"k": INT64}, tuple(unique("k")))  # only its key matters to a diff
    got = diff(home=home, tables=["shapes"], contracts={**table_contracts(), "shapes": shapes})["tables"]["shapes"]
    assert {k: got[k] for k in ("added", "removed", "changed")} == {"added": 1, "removed": 0, "changed": 2} == \
        expected(f["edges-a"]["shapes"], f["edges-b"]["shapes"], ("k",))
    listed = rows(None, None, "shapes", home=home, contracts={"shapes": shapes})
    assert list(zip(listed["change"].to_pylist(), listed["k"].to_pylist())) == [
        ("changed from", 2), ("changed to", 2), ("changed from", 3), ("changed to", 3), ("added", 4)]


def test_rows_of_an_added_table_a_repeated_row_and_a_schema_change(edges):
    home, _ = edges
    extra = rows(None, None, "extra", home=home)
    assert extra.to_pylist() == [{"change": "added", "k": "x", "v": [1]}, {"change": "added", "k": "y", "v": [2, 3]}]
    repeated = rows(None, None, "prm_steps", home=home)
    assert repeated["change"].to_pylist() == ["added"] and repeated.num_rows == 1
    cont = rows(None, None, "contamination", home=home)
    assert cont["change"].to_pylist() == ["changed from", "changed to"]
    before, after = cont.to_pylist()
    assert after["distance"] == before["distance"] + 1 and after["note"] == "edge" and before["note"] is None
    assert after["score"] is None and before["score"] is not None  # each side shown whole
    samples = rows(None, None, "prm_samples", home=home)
    assert pc.list_value_length(samples["image_refs"]).to_pylist()[1] == \
        pc.list_value_length(samples["image_refs"]).to_pylist()[0] + 1


def test_a_bucket_root_is_compared_in_place(edges, monkeypatch):
    pytest.importorskip("obstore")
    from tests.s3_server import aws_env, make_bucket, start_moto
    from warehouse.objectstore import ObjectReleaseStore, Root

    home, _ = edges
    proc, endpoint = start_moto()
    try:
        for key, value in aws_env(endpoint).items():
            monkeypatch.setenv(key, value)
        url = f"s3://{make_bucket(endpoint, 'diff-root')}/team"
        bucket = ObjectReleaseStore(Root.parse(url))
        local = ReleaseStore(home / "releases")
        for rid in ("edges-a", "edges-b"):
            m = local.manifest(rid)
            bucket.publish(rid, {e["file"]: local.path(rid) / e["file"] for e in m.tables.values()}, m.__dict__)
        remote, here = diff(home=url), diff(home=home)
        assert remote["tables"] == here["tables"] and remote["before"] == here["before"]
        assert rows(None, None, "contamination", home=url).equals(rows(None, None, "contamination", home=home))
    finally:
        proc.terminate()
        proc.wait(10)


def test_tags_rollback_and_sql_release_from_the_command_line(sample, at, capsys, tmp_path):
    """The lifecycle commands on a copy of the two sample releases: a tag reads as its release in
    `diff`, `sql --release` and `review`; a rollback moves the warehouse's views and pins."""
    import shutil

    src, first, second = sample
    root = at(tmp_path / "home")
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("dagster"))
    assert main(["tag", "baseline", first]) == 0
    assert capsys.readouterr().out.strip() == f"tag baseline names release {first}"
    assert main(["tag", "baseline", second]) == 2
    assert capsys.readouterr().err.strip() == (f"rewardhouse: tag 'baseline' already names release {first}; "
                                               "`rewardhouse untag baseline` first")
    assert main(["diff", "baseline", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(diff(first, second, home=root), default=str))
    steps = {rid: pq.read_metadata(root / "releases" / rid / "prm_steps.parquet").num_rows for rid in (first, second)}
    labels = {rid: Counter(pq.read_table(root / "releases" / rid / "prm_steps.parquet", columns=["label"])
                           .column("label").to_pylist()) for rid in (first, second)}
    assert labels[first] != labels[second]
    for ref, rid in (("baseline", first), (second, second), (None, second)):
        argv = ["sql", "select label, count(*) n from prm_steps group by 1 order by 1", "--format", "csv"]
        assert main(argv + (["--release", ref] if ref else [])) == 0
        lines = capsys.readouterr().out.strip().splitlines()[1:]
        assert {line.split(",")[0]: int(line.split(",")[1]) for line in lines} == labels[rid]
    assert main(["review", "baseline", "--no-open"]) == 0
    assert capsys.readouterr().out.startswith(str(root / "releases" / first / "review"))

    assert main(["rollback", "baseline"]) == 0
    assert capsys.readouterr().out.startswith(f"release {first} is current again (was {second}); pinned")
    assert main(["sql", "select count(*) from prm_steps", "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ["count_star()", str(steps[first])]
    assert main(["releases"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"pinned to release {first} by a rollback on ")
    assert f"* {first} [baseline, pinned]" in out and f"  {second}  " in out
    assert main(["gc", "--dry-run", "--keep-releases", "1", "--grace-minutes", "0"]) == 0
    # the newer release is the newest one kept; the older is current, pinned and tagged: nothing goes
    assert "would remove 0 release(s) beyond the newest 1" in capsys.readouterr().out
    assert main(["rollback", "--unpin"]) == 0
    assert capsys.readouterr().out.startswith(f"unpinned (was pinned to release {first})")
    assert main(["rollback", "nope"]) == 2
    assert capsys.readouterr().err.startswith("rewardhouse: no release or tag 'nope'")
    assert main(["untag", "baseline"]) == 0 and main(["untag", "baseline"]) == 2


def test_every_release_keeps_its_changelog_against_the_release_it_replaced(sample, at, capsys):
    from warehouse.diff import changelog, changelog_markdown, summary_line

    root, first, second = sample
    store = ReleaseStore(at(root) / "releases")
    assert store.manifest(first).changes == {}  # the first: nothing to compare with
    log = store.manifest(second).changes
    assert log == json.loads(json.dumps(changelog(diff(first, second, home=root)), default=str))
    assert log["against"] == first and set(log["inputs"]) >= {"settings.prm_label_threshold"}
    assert not any(v["before"] == v["after"] for v in log["inputs"].values())  # tuples and lists read alike
    assert log["tables"]["prm_steps"]["changed"] > 0 and log["tables"]["prm_steps"]["status"] == "changed"
    text = (store.path(second) / "CHANGES.md").read_text()
    assert text == changelog_markdown(log) and f"Changes against release `{first}`." in text
    assert "CHANGES.md" in store.manifest(second).files
    assert main(["releases"]) == 0
    assert f"    {summary_line(log)}" in capsys.readouterr().out.splitlines()
    page = (store.path(second) / "review" / "index.html").read_text()
    assert 'href: "../CHANGES.md"' in page
