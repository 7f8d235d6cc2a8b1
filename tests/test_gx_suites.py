"""GX suites of the published tables: a real sample release passes, planted faults are caught with
the right expectation and the offending values, and Data Docs are rendered under docs_root."""

from __future__ import annotations

import dataclasses
import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from checks.suites import build_suite, columns, suite_tables, validate_tables
from pipeline.datasets import table_contracts
from pipeline.settings import QualitySettings

SUITE_TABLES = suite_tables()
from conftest import published_home


@pytest.fixture(scope="session")
def release_tables(tmp_path_factory) -> dict[str, pa.Table]:
    """Every published table of `rewardhouse run` on the embedded sample."""
    with published_home(tmp_path_factory.mktemp("gx_release")) as root:
        release = root / "releases" / (root / "releases" / "CURRENT").read_text().strip()
        return {table: pq.read_table(release / f"{table}.parquet") for table in SUITE_TABLES}


@pytest.fixture(scope="session")
def sample_run(release_tables, tmp_path_factory):
    """One validation of the whole sample release, shared by the tests that only read it."""
    docs_root = tmp_path_factory.mktemp("gx_docs")
    results, index = validate_tables(release_tables, docs_root, "sample")
    return docs_root, results, index


def with_cell(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table[column].to_pylist()
    values[row] = value
    i = table.schema.get_field_index(column)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def only_failure(results, table: str):
    result = results[table]
    assert not result.passed
    assert len(result.failures) == 1, [(f.expectation, f.column) for f in result.failures]
    failure = result.failures[0]
    json.dumps(dataclasses.asdict(failure))  # JSON-safe, as the docs promise
    return failure


def test_every_table_of_the_sample_release_passes_its_suite(sample_run, release_tables):
    _, results, _ = sample_run
    assert set(results) == set(SUITE_TABLES)
    for table, result in results.items():
        assert result.passed, (table, [dataclasses.asdict(f) for f in result.failures])
        assert result.failures == []
        assert result.rows == release_tables[table].num_rows
        assert result.evaluated == len(build_suite(table).expectations) >= 2  # the schema + the rules
    assert results["prm_steps"].rows > 1000 and results["mmrb2_pairs"].rows == 29


# Column kind -> (the Arrow types a published column of that kind may have, the pandas dtypes its
# GX type expectation accepts), written out here rather than read from checks/suites.py.
KINDS = {
    "string": (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), ["StringDtype"]),
    "int": (pa.types.is_integer, ["Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype"]),
    "int64": (lambda t: t == pa.int64(), ["Int64Dtype"]),
    "float": (pa.types.is_floating, ["Float32Dtype", "Float64Dtype"]),
    "bool": (pa.types.is_boolean, ["BooleanDtype"]),
    "list": (lambda t: pa.types.is_list(t) or pa.types.is_large_list(t), ["list"]),
}


def test_suites_match_the_published_schema(release_tables):
    for table in SUITE_TABLES:
        schema = release_tables[table].schema
        kinds = columns(table)
        assert set(schema.names) == set(kinds), table
        for name, kind in kinds.items():  # each published column has its contract's type
            assert KINDS[kind][0](schema.field(name).type), (table, name, str(schema.field(name).type), kind)
        suite = build_suite(table)
        assert suite.name == table
        by_type = {}
        for e in suite.expectations:
            by_type.setdefault(e.expectation_type, []).append(e)
        (schema_check,) = by_type["expect_table_schema_to_match_contract"]
        assert {c: list(k) for c, k in schema_check.columns.items()} == {name: KINDS[kind][1] for name, kind in kinds.items()}, table
        # every unconditional not_null rule of the contract is in the schema check, and only there
        never_null = [r.column for r in table_contracts()[table].rules if r.kind == "not_null" and r.when is None]
        assert list(schema_check.not_null) == never_null
        assert not [e for e in by_type.get("expect_column_values_to_not_be_null", []) if e.row_condition is None]


def test_a_label_that_is_neither_plus_nor_minus_is_caught(release_tables, tmp_path):
    steps = with_cell(release_tables["prm_steps"], "label", 3, "x")
    results, _ = validate_tables({"prm_steps": steps}, tmp_path, "label")
    failure = only_failure(results, "prm_steps")
    assert (failure.expectation, failure.column) == ("expect_column_values_to_be_in_set", "label")
    assert failure.unexpected_count == 1 and failure.sample == ["x"]
    assert failure.kwargs["value_set"] == ["+", "-"]


def test_a_duplicate_pair_id_is_caught(release_tables, tmp_path):
    pairs = release_tables["mmrb2_pairs"]
    doubled = pa.concat_tables([pairs, pairs.slice(2, 1)])
    results, _ = validate_tables({"mmrb2_pairs": doubled}, tmp_path, "duplicate")
    failure = only_failure(results, "mmrb2_pairs")
    assert (failure.expectation, failure.column) == ("expect_column_values_to_be_unique", "pair_id")
    assert failure.unexpected_count == 2
    assert failure.sample == [pairs["pair_id"][2].as_py()]


def test_a_human_rating_outside_the_limits_is_caught(release_tables, tmp_path):
    pairs = release_tables["mmrb2_pairs"]
    row = pairs["task"].to_pylist().index("t2i")
    bad = with_cell(pairs, "human_annotations", row, "[7, 5, 5]")
    results, _ = validate_tables({"mmrb2_pairs": bad}, tmp_path, "rating")
    failure = only_failure(results, "mmrb2_pairs")
    assert (failure.expectation, failure.column) == ("expect_column_json_to_match_schema", "human_annotations")
    assert failure.unexpected_count == 1 and failure.sample == ["[7, 5, 5]"]
    assert failure.kwargs["json_schema"]["items"]["maximum"] == 6

    # the same ratings pass once the limits allow 7
    results, _ = validate_tables({"mmrb2_pairs": bad}, tmp_path, "rating-wide", QualitySettings(ratings=(1, 7)))
    assert results["mmrb2_pairs"].passed


def test_ratings_that_are_not_json_are_offending_values_of_the_schema_expectation(release_tables, tmp_path):
    pairs = release_tables["mmrb2_pairs"]
    rows = [i for i, task in enumerate(pairs["task"].to_pylist()) if task == "t2i"][:2]
    bad = with_cell(with_cell(pairs, "human_annotations", rows[0], "[5, 5,"), "human_annotations", rows[1], "[5, 5,")
    results, _ = validate_tables({"mmrb2_pairs": bad}, tmp_path, "not-json")
    failures = {f.expectation: f for f in results["mmrb2_pairs"].failures}
    assert set(failures) == {"expect_column_values_to_be_json_parseable", "expect_column_json_to_match_schema"}
    shape = failures["expect_column_json_to_match_schema"]
    assert shape.error is None and shape.unexpected_count == 2 and shape.sample == ["[5, 5,"]


def test_json_texts_are_judged_by_value_each_distinct_text_once():
    from checks.gx_columns import matching_texts

    schema = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 6}, "minItems": 3, "maxItems": 3}
    texts = ["[1, 2, 3]", "[1,2,3]", "[1, 2, 7]", "[1, 2]", "{}", "not json", "[1, 2, 3]", "null"]
    assert matching_texts(texts, schema) == {"[1, 2, 3]", "[1,2,3]"}
    import jsonschema

    with pytest.raises(jsonschema.SchemaError):
        matching_texts(texts, {"type": "no such type"})


def test_numbers_are_compared_with_open_and_strict_bounds_in_one_pass():
    from checks.gx_columns import numbers_between

    values = [0, 1, 5, 16, 17, -3]
    assert numbers_between(values, 1, 16).tolist() == [False, True, True, True, False, False]
    assert numbers_between(values, 1, 16, strict_min=True, strict_max=True).tolist() == [False, False, True, False, False, False]
    assert numbers_between(values, None, 5).tolist() == [True, True, True, False, False, True]
    assert numbers_between([2**63 - 1, 2**62], 2**63 - 2, None).tolist() == [True, False]  # 64-bit ints stay exact


def test_a_null_is_not_out_of_range_but_a_value_beside_it_is(release_tables, tmp_path):
    steps = release_tables["prm_steps"]
    rules = table_contracts()["prm_steps"].rules
    never_null = {r.column for r in rules if r.kind == "not_null" and r.when is None}
    nullable = next(r for r in rules if r.kind == "between" and r.when is None and r.column not in never_null)
    column = steps[nullable.column].to_pylist()
    column[0], column[1] = None, (nullable.hi + 1 if nullable.hi is not None else nullable.lo - 1)
    changed = steps.set_column(steps.schema.get_field_index(nullable.column), nullable.column,
                               pa.array(column, steps.schema.field(nullable.column).type))
    results, _ = validate_tables({"prm_steps": changed}, tmp_path, "range")
    failure = next(f for f in results["prm_steps"].failures if f.column == nullable.column)
    assert failure.expectation == "expect_column_numbers_to_be_between"
    assert failure.unexpected_count == 1 and failure.sample == [column[1]]


def test_too_many_steps_are_caught_with_the_limit_from_settings(release_tables, tmp_path):
    samples = with_cell(release_tables["prm_samples"], "n_steps", 0, 17)
    results, _ = validate_tables({"prm_samples": samples}, tmp_path, "steps")
    failure = only_failure(results, "prm_samples")
    assert (failure.expectation, failure.column) == ("expect_column_numbers_to_be_between", "n_steps")
    assert failure.sample == [17] and failure.kwargs["max_value"] == 16

    results, _ = validate_tables({"prm_samples": samples}, tmp_path, "steps-wide", QualitySettings(max_steps=17))
    assert results["prm_samples"].passed


def test_a_missing_column_is_caught_by_the_column_set(release_tables, tmp_path):
    items = release_tables["mmrb2_response_items"].drop_columns(["image_name"])
    results, _ = validate_tables({"mmrb2_response_items": items}, tmp_path, "missing")
    result = results["mmrb2_response_items"]
    assert not result.passed
    schema = [f for f in result.failures if f.error is None]
    assert [(f.expectation, f.column, f.kwargs["check"], f.sample) for f in schema] == [
        ("expect_table_schema_to_match_contract", None, "columns", ["missing: image_name"])]
    # the expectations on the absent column cannot run; they fail and say why
    errors = [f for f in result.failures if f.error is not None]
    assert errors and all(f.column == "image_name" and "absent" in f.error for f in errors)


def test_an_extra_column_is_a_schema_change(release_tables, tmp_path):
    quarantine = release_tables["quarantine"]
    extra = quarantine.append_column("note", pa.array([None] * quarantine.num_rows, pa.string()))
    results, _ = validate_tables({"quarantine": extra}, tmp_path, "extra")
    failure = only_failure(results, "quarantine")
    assert failure.expectation == "expect_table_schema_to_match_contract" and failure.sample == ["unexpected: note"]


def test_a_bad_sha256_is_caught(release_tables, tmp_path):
    hashes = with_cell(release_tables["image_hashes"], "sha256", 0, "ABC123")
    results, _ = validate_tables({"image_hashes": hashes}, tmp_path, "sha")
    failure = only_failure(results, "image_hashes")
    assert (failure.expectation, failure.column) == ("expect_column_values_to_match_regex", "sha256")
    assert failure.sample == ["ABC123"]


def test_a_wrong_column_type_is_caught(release_tables, tmp_path):
    steps = release_tables["prm_steps"]
    i = steps.schema.get_field_index("step_index")
    as_text = steps.set_column(i, "step_index", steps["step_index"].cast(pa.string()))
    results, _ = validate_tables({"prm_steps": as_text}, tmp_path, "types")
    failed = {(f.expectation, f.column): f for f in results["prm_steps"].failures}
    failure = failed[("expect_table_schema_to_match_contract", "step_index")]  # (its range check fails too)
    assert failure.kwargs == {"check": "kind", "type_list": KINDS["int"][1]} and failure.sample == ["StringDtype"]


def test_a_list_column_holding_text_is_a_kind_change(release_tables, tmp_path):
    steps = release_tables["prm_samples"]
    name = "image_refs"
    assert columns("prm_samples")[name] == "list"
    i = steps.schema.get_field_index(name)
    as_text = steps.set_column(i, name, pa.array([None if v is None else str(v) for v in steps[name].to_pylist()], pa.large_string()))
    results, _ = validate_tables({"prm_samples": as_text}, tmp_path, "list")
    failure = only_failure(results, "prm_samples")
    assert (failure.column, failure.kwargs["check"], failure.sample) == (name, "kind", ["StringDtype"])


def test_a_null_in_a_never_null_column_is_counted(release_tables, tmp_path):
    pairs = release_tables["mmrb2_pairs"]
    bad = with_cell(with_cell(pairs, "pair_id", 4, None), "pair_id", 7, None)
    results, _ = validate_tables({"mmrb2_pairs": bad}, tmp_path, "nulls")
    failures = {(f.expectation, f.column): f for f in results["mmrb2_pairs"].failures}
    null = failures[("expect_table_schema_to_match_contract", "pair_id")]
    assert null.kwargs == {"check": "not_null"} and null.unexpected_count == 2


def test_missing_tables_are_skipped_and_unknown_ones_ignored(release_tables, tmp_path):
    results, _ = validate_tables({"contamination": release_tables["contamination"],
                                  "not_a_table": release_tables["quarantine"]}, tmp_path, "subset")
    assert list(results) == ["contamination"] and results["contamination"].passed


def test_data_docs_index_names_the_suites_and_a_second_run_adds_to_it(sample_run, release_tables):
    docs_root, _, index = sample_run
    assert index is not None and index.is_file()
    assert index.is_relative_to(docs_root)
    html = index.read_text()
    assert "mmrb2_pairs" in html and "prm_steps" in html

    results, again = validate_tables({"prm_steps": release_tables["prm_steps"]}, docs_root, "second")
    assert results["prm_steps"].passed and again == index
    html = index.read_text()
    assert "validations/prm_steps/second/" in html and "validations/prm_steps/sample/" in html  # both runs listed
    gx_root = docs_root / "gx"
    assert len(list((gx_root / "expectations").glob("*.json"))) == len(SUITE_TABLES)  # updated, not added again
    assert len(list((gx_root / "validation_definitions").glob("*.json"))) == len(SUITE_TABLES)
    assert "analytics_enabled: false" in (gx_root / "great_expectations.yml").read_text()


def test_nothing_is_written_outside_docs_root(release_tables, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    validate_tables({"quarantine": release_tables["quarantine"]}, tmp_path / "docs", "where")
    assert [p.name for p in tmp_path.iterdir()] == ["docs"]
    assert [p.name for p in (tmp_path / "docs").iterdir()] == ["gx"]


def test_unusable_docs_root_still_validates_and_says_why(release_tables, tmp_path, caplog):
    not_a_folder = tmp_path / "docs"
    not_a_folder.write_text("a file where the docs should go")
    with caplog.at_level(logging.WARNING, logger="checks.suites"):
        results, index = validate_tables({"quarantine": release_tables["quarantine"]}, not_a_folder, "nodocs")
    assert results["quarantine"].passed and index is None
    assert "Data Docs not built" in caplog.text



def test_the_kwargs_read_once_per_call_are_the_ones_gx_reads_per_key():
    """checks.suites replaces four of GX's Expectation methods by the same lookups on one build of
    the configuration per call: on every expectation of every suite they return what GX's own do."""
    from checks.suites import GX_OWN, _read_configuration_once_per_call

    _read_configuration_once_per_call()
    assert {"_get_domain_kwargs", "_get_success_kwargs", "_get_success_kwarg", "_get_runtime_kwargs"} <= set(GX_OWN)
    formats = [None, {"result_format": "BASIC", "partial_unexpected_count": 20}, {"result_format": "SUMMARY"}]
    compared = 0
    for table in suite_tables():
        for e in build_suite(table).expectations:
            assert e._get_domain_kwargs() == GX_OWN["_get_domain_kwargs"](e)
            assert e._get_success_kwargs() == GX_OWN["_get_success_kwargs"](e)
            for key in (*e.success_keys, *e.domain_keys, "result_format", "no_such_key"):
                assert e._get_success_kwarg(key, "dflt") == GX_OWN["_get_success_kwarg"](e, key, "dflt")
            for rc in formats:
                assert e._get_runtime_kwargs(rc) == GX_OWN["_get_runtime_kwargs"](e, rc)
            compared += 1
    assert compared > 100  # every table's suite, not a handful


def test_validation_with_each_condition_filtered_once_says_what_gx_alone_says(release_tables, tmp_path, monkeypatch):
    """The same results, failures and samples with checks.suites' two shortcuts into GX (one build
    of an expectation's configuration per call, each row condition queried once per table) as with
    GX's own methods, on tables whose first rows are emptied in every column (conditional rules,
    value sets, keys and schema fail)."""
    from great_expectations.execution_engine.pandas_execution_engine import PandasExecutionEngine
    from great_expectations.expectations.expectation import Expectation

    from checks.suites import GX_OWN

    def emptied(table: pa.Table) -> pa.Table:
        for i, field in enumerate(table.schema):
            values = table[field.name].to_pylist()
            table = table.set_column(i, field, pa.array([None] * min(3, len(values)) + values[3:], field.type))
        return table

    broken = {t: emptied(v) for t, v in release_tables.items() if v.num_rows}

    def summary(results):
        return {t: (r.passed, r.evaluated, r.rows, [dataclasses.asdict(f) for f in r.failures]) for t, r in results.items()}

    ours, _ = validate_tables(broken, tmp_path / "ours", "ours")
    assert {"_apply_row_condition_filter", "_get_runtime_kwargs"} <= set(GX_OWN)
    assert sum(not r.passed for r in ours.values()) == len(broken)
    for name, method in GX_OWN.items():
        owner = PandasExecutionEngine if name == "_apply_row_condition_filter" else Expectation
        monkeypatch.setattr(owner, name, method)
    theirs, _ = validate_tables(broken, tmp_path / "theirs", "theirs")
    assert summary(ours) == summary(theirs)
