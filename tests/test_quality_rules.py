"""The release gate's rules on a real sample candidate, and on copies broken in the ways that matter."""

import pyarrow as pa
import pytest

from checks import rules
from conftest import published_home
from pipeline.visualprm.gate import step_labels
from pipeline.settings import QualitySettings
from warehouse.store import ReleaseStore

Q = QualitySettings()


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    with published_home(tmp_path_factory.mktemp("rules")) as root:
        store = ReleaseStore(root / "releases")
        rid = store.current()
        import pyarrow.parquet as pq

        yield {p.stem: pq.read_table(p) for p in store.path(rid).glob("*.parquet")}


def replace_column(table: pa.Table, name: str, values) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, table.schema.field(name).type))


def test_sample_passes_every_rule(tables):
    con = rules.connect(tables)
    outcomes = [rules.referential_integrity(con), *rules.dataset_rules(con, Q), rules.dedupe_sanity(con, Q),
                rules.quarantine_budget(con, Q), rules.drift(con, None, None, {}, None, Q)]
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]
    assert outcomes[-1].details == {"note": "first release: nothing to compare"}
    labels = next(o for o in outcomes if o.check == "step_label_distribution")
    assert 0.75 < labels.details["positive_rate"] < 0.97


def test_label_x_fails_the_label_rule(tables):
    steps = tables["prm_steps"]
    labels = steps["label"].to_pylist()
    labels[3] = "x"
    out = step_labels(rules.connect({**tables, "prm_steps": replace_column(steps, "label", labels)}), Q)
    assert not out.passed and out.blocks and out.details["violations"]["label not + or -"]["count"] == 1


def test_forty_point_drop_in_positive_rate_fails(tables):
    steps = tables["prm_steps"]
    labels = steps["label"].to_pylist()
    flip = [i for i, l in enumerate(labels) if l == "+"][: int(0.4 * len(labels))]
    for i in flip:
        labels[i] = "-"
    broken = {**tables, "prm_steps": replace_column(steps, "label", labels)}
    out = step_labels(rules.connect(broken), Q)
    assert out.blocks and "overall positive rate out of bounds" in out.details["violations"]
    drift = rules.drift(rules.connect(broken), rules.connect(tables), "r0", {}, None, Q)
    assert not drift.passed and drift.details["drifted"]["label_distribution_psi"] > Q.drift_psi


def test_dangling_image_reference_fails_referential_integrity(tables):
    items = tables["mmrb2_response_items"]
    names = items["image_name"].to_pylist()
    first = next(i for i, n in enumerate(names) if n)
    names[first] = "nowhere_0.jpg"
    out = rules.referential_integrity(rules.connect({**tables, "mmrb2_response_items": replace_column(items, "image_name", names)}))
    assert out.blocks and out.details["violations"]["response image not in inventory"]["sample"] == ["nowhere_0.jpg"]


def test_a_leak_naming_no_record_fails_referential_integrity_and_leaks_are_counted_per_class(tables):
    leaks = tables["record_contamination"]
    sanity = rules.dedupe_sanity(rules.connect(tables), Q).details
    counts = {}
    for r in leaks.to_pylist():
        counts[r["leak"]] = counts.get(r["leak"], 0) + 1
    assert sanity["record_leaks_by_class"] == {c: counts.get(c, 0) for c in ("text", "image", "full")}
    assert counts.get("text") and counts.get("full")  # the sample plants both
    keys = leaks["eval_key"].to_pylist()
    keys[0] = "VLRB_9999"
    out = rules.referential_integrity(rules.connect({**tables, "record_contamination": replace_column(leaks, "eval_key", keys)}))
    (name,) = [n for n in out.details["violations"]]
    assert out.blocks and "leak names no" in name and out.details["violations"][name]["sample"] == ["VLRB_9999"]


def test_drift_on_row_counts_and_unchanged_data(tables):
    con = rules.connect(tables)
    counts = {t: v.num_rows for t, v in tables.items()}
    same = rules.drift(con, rules.connect(tables), "prev", counts, counts, Q)
    assert same.passed and same.details["label_distribution_psi"] == 0
    halved = {t: n * 3 for t, n in counts.items() if n}
    moved = rules.drift(con, rules.connect(tables), "prev", counts, halved, Q)
    assert not moved.passed and moved.severity == "WARN" and "prm_steps" in moved.details["drifted"]["row_counts"]


def test_quarantine_budget_and_cluster_bound(tables):
    q = QualitySettings(quarantine_budget=0.001, max_cluster_size=1)
    con = rules.connect(tables)
    budget = rules.quarantine_budget(con, q)
    assert not budget.passed and not budget.blocks and "visualprm records" in budget.details["over_budget"]
    sanity = rules.dedupe_sanity(con, q)
    assert not sanity.passed and sanity.details["contamination_pairs"] >= 1


def test_a_drifted_or_empty_upstream_file_blocks_the_release(tmp_path):
    """The parser's whole-file refusals reach the gate: drift and an empty shard block, unless
    allow_unusable_files lets the release publish without them (then they warn)."""
    import pyarrow.parquet as pq

    from pipeline.quarantine import quarantine_table
    from pipeline.settings import ZipLimits
    from pipeline.vlrb.parse import parse_vlrb

    schema = pa.schema([("id", pa.string()), ("query", pa.string()), ("response", pa.list_(pa.string())),
                        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("human_ranking", pa.list_(pa.string()))])  # ranks drifted to text
    pq.write_table(pa.Table.from_pylist([{"id": "p1", "query": "q", "response": ["a", "b"], "image": None,
                                          "human_ranking": ["0", "1"]}], schema=schema), tmp_path / "drifted.parquet")
    pq.write_table(schema.empty_table().cast(schema.set(4, pa.field("human_ranking", pa.list_(pa.int64())))),
                   tmp_path / "empty.parquet")
    parsed = parse_vlrb([tmp_path / "drifted.parquet", tmp_path / "empty.parquet"], ZipLimits())
    con = rules.connect({"quarantine": quarantine_table(parsed.rejected)})
    out = rules.upstream_files(con)
    assert out.blocks and out.severity == "ERROR"
    assert out.details["unusable_files"] == [
        {"dataset": "vlrb", "file": "drifted.parquet",
         "reason": "parquet schema drift: column human_ranking is list<string>, expected list<int>"},
        {"dataset": "vlrb", "file": "empty.parquet", "reason": "holds no rows: nothing to publish"},
    ]
    allowed = rules.upstream_files(con, allow_unusable=True)
    assert not allowed.passed and not allowed.blocks and allowed.severity == "WARN"


def test_psi_is_zero_for_equal_and_grows_with_shift():
    assert rules.psi({"a": 10, "b": 10}, {"a": 10, "b": 10}) == 0
    assert rules.psi({"a": 90, "b": 10}, {"a": 50, "b": 50}) > 0.25 > rules.psi({"a": 90, "b": 10}, {"a": 88, "b": 12})


def test_every_quality_setting_is_a_resource_field_declared_once():
    """QualitySettings declares the gate's bounds; the resource exposes each of them (a pair as
    _min/_max) without restating them, so a new bound reaches the launchpad and --set by itself."""
    import dataclasses

    from pipeline.resources import RewardhouseResource

    names = set(RewardhouseResource.model_fields)
    for f in dataclasses.fields(QualitySettings):
        wanted = {f"{f.name}_min", f"{f.name}_max"} if isinstance(f.default, tuple) else {f.name}
        assert wanted <= names, f.name
    custom = RewardhouseResource(ratings_max=7, source_positive_rate_min=0.4, min_source_samples=5,
                                 budget_severity="error").settings().quality
    assert (custom.ratings, custom.source_positive_rate[0], custom.min_source_samples, custom.budget_severity) == \
        ((1, 7), 0.4, 5, "ERROR")
    assert RewardhouseResource().settings().quality == QualitySettings()
