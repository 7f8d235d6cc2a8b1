"""One record contract for parse and gate (pipeline/contract.py): for every record-level rule of
every table contract, derived from the contracts themselves so none is missed, a record breaking it
is quarantined by `enforce` (naming the table, field and rule) while the rest stays, and the GX
expectation built from the same rule fails on the broken table and passes on what `enforce` keeps.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline import datasets
from pipeline.contract import Rule, TableContract, enforce, where
from pipeline.settings import QualitySettings
from pipeline.spec import load

QUALITY = QualitySettings()
CONTRACTS = datasets.table_contracts(QUALITY)


@lru_cache(maxsize=1)
def parsed_samples() -> dict[str, dict[str, pa.Table]]:
    """Each dataset's record tables as its parser leaves them, from the embedded samples (already
    enforced: the samples' planted bad records are gone), as each DatasetSpec.sample_records makes them.
    The samples are written to a folder of this process's own (pytest workers run side by side)."""
    root = Path(tempfile.mkdtemp(prefix="rewardhouse-contract-samples-"))
    atexit.register(shutil.rmtree, root, True)
    return {spec.name: load(spec.sample_records)(root / spec.name) for spec in datasets.DATASETS}


def record_cases() -> list[tuple[str, str, Rule]]:
    """(dataset, table, rule) for every record-level rule a parser's table can be checked against."""
    cases = []
    for spec in datasets.DATASETS:
        for name, contract in spec.contracts(QUALITY).items():
            if contract.record_key is None:
                continue
            present = parsed_samples()[spec.name].get(name)
            assert present is not None, f"{name} has a record key but its parser does not produce it"
            cases += [(spec.name, name, rule) for rule in contract.record_rules(present.column_names)]
    return cases


def _breaking_value(rule: Rule, table: pa.Table, row: int):
    column = table[rule.column]
    current = column[row].as_py()
    if rule.kind == "not_null":
        return None
    if rule.kind == "null":
        return 1 if pa.types.is_integer(column.type) else "set"
    if rule.kind == "in_set":
        if pa.types.is_boolean(column.type):  # a flag held to one value: the other
            return next(v for v in (True, False) if v not in rule.values)
        return "__not_in_the_set__"
    if rule.kind == "between":
        return rule.hi + 1 if rule.hi is not None else rule.lo - 1
    if rule.kind == "regex":
        return " "  # not a sha256, not "sha256:<hex>", and blank where text must not be
    if rule.kind == "json":
        return "{not json"
    if rule.kind == "json_schema":
        return json.dumps({"unexpected": True})
    if rule.kind == "greater":
        return table[rule.other][row].as_py()  # equal is not greater
    raise AssertionError(f"no breaking value for {rule.kind} (current {current!r})")


def _row_for(rule: Rule, table: pa.Table) -> int:
    """A row the rule applies to (its condition holds, and for `greater` the other column is set)."""
    mask = pa.array([True] * table.num_rows)
    if rule.when is not None:
        mask = rule.when.mask(table)
    if rule.kind == "greater":
        mask = pc.and_(mask, pc.is_valid(table[rule.other]))
    rows = [i for i, ok in enumerate(mask.to_pylist()) if ok]
    assert rows, f"the samples hold no row where {rule.describe()} applies: plant one"
    return rows[len(rows) // 2]


def _with_value(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table[column].to_pylist()
    values[row] = value
    at = table.column_names.index(column)
    return table.set_column(at, table.field(column), pa.array(values, table.field(column).type))


CASES = record_cases()


def test_the_cases_cover_every_record_level_rule_of_every_dataset():
    by_kind = {}
    for _, _, rule in CASES:
        by_kind[rule.kind] = by_kind.get(rule.kind, 0) + 1
    # Every kind a contract uses at record level is exercised; at least the per-task JSON shapes,
    # value sets, ranges and nulls.
    assert {"not_null", "in_set", "between", "json", "json_schema", "regex", "greater", "null"} <= set(by_kind)
    assert len(CASES) >= 60
    assert ("mmrb2", "mmrb2_pairs") in {(d, t) for d, t, r in CASES if r.kind == "json_schema"}
    assert ("vlrb", "vlrb_pairs") in {(d, t) for d, t, r in CASES if r.kind == "json_schema"}


@pytest.mark.parametrize("dataset,table_name,rule", CASES, ids=[f"{t}.{r.describe()}" for _, t, r in CASES])
def test_a_record_breaking_the_rule_is_quarantined_at_parse_and_the_rest_stays(dataset, table_name, rule):
    tables = dict(parsed_samples()[dataset])
    contract: TableContract = CONTRACTS[table_name]
    table = tables[table_name]
    row = _row_for(rule, table)
    key = table[contract.record_key][row].as_py()
    tables[table_name] = _with_value(table, rule.column, row, _breaking_value(rule, table, row))
    assert pc.any(rule.broken(tables[table_name])).as_py(), "the planted value must break the rule"

    out = enforce(dataset, tables, CONTRACTS)

    if rule.column == contract.record_key and rule.kind == "not_null":  # a row without a key goes alone
        assert [(r.stage, r.record_key) for r in out.rejected] == [("parse", f"{table_name} row {row}")]
        assert out.tables[table_name].num_rows == table.num_rows - 1
        return
    assert [(r.dataset, r.stage, r.record_key) for r in out.rejected] == [(dataset, "parse", key)]
    assert out.rejected[0].reason.startswith(f"record contract: {table_name}.{rule.column} ")
    for name, before in tables.items():  # the record leaves every table keyed by it; nothing else does
        record_key = CONTRACTS[name].record_key
        kept = pc.sum(pc.not_equal(before[record_key], key)).as_py()
        assert out.tables[name].num_rows == kept, name
        assert key not in out.tables[name][record_key].to_pylist()


@pytest.fixture(scope="module")
def gx_batch():
    """validate(expectation, table) on an ephemeral GX context: the gate's own evaluation."""
    import great_expectations as gx

    from checks.suites import _expectation, to_frame

    context = gx.get_context(mode="ephemeral")
    asset = context.data_sources.add_pandas("contract").add_dataframe_asset("t")
    definition = asset.add_batch_definition_whole_dataframe("whole")

    def validate(rule: Rule, table: pa.Table) -> bool:
        batch = definition.get_batch(batch_parameters={"dataframe": to_frame(table)})
        return batch.validate(_expectation(rule)).success

    return validate


@pytest.mark.parametrize("dataset,table_name,rule", CASES, ids=[f"{t}.{r.describe()}" for _, t, r in CASES])
def test_the_gate_reads_the_same_rule(gx_batch, dataset, table_name, rule):
    """The GX expectation built from the rule fails where `enforce` finds a break, and passes on
    what `enforce` keeps: parse and gate apply one definition."""
    tables = dict(parsed_samples()[dataset])
    table = tables[table_name]
    row = _row_for(rule, table)
    broken = _with_value(table, rule.column, row, _breaking_value(rule, table, row))
    assert gx_batch(rule, table) is True
    assert gx_batch(rule, broken) is False
    kept = enforce(dataset, {**tables, table_name: broken}, CONTRACTS).tables[table_name]
    assert gx_batch(rule, kept) is True


def test_conditions_and_descriptions_read_as_a_user_would():
    rule = CONTRACTS["mmrb2_pairs"].rules
    shapes = [r for r in rule if r.kind == "json_schema"]
    assert [str(r.when) for r in shapes] == ["task in ['t2i', 'edit', 'interleaved']", "task = 'reasoning'"]
    assert where("status", "ok").column == "status"
    ranking = next(r for r in CONTRACTS["vlrb_pairs"].rules if r.column == "human_ranking" and r.kind == "json_schema")
    assert ranking.describe() == "human_ranking must match the JSON shape a permutation of (0, 1)"
