"""The table contract: every published table's columns and rules, declared once.

Two users read the same declaration:

- the parser, through `enforce`: a record (an MMRB2 pair, a VisualPRM sample, a VL-RewardBench
  pair) whose rows break a record-level rule is quarantined with the field and the rule, and its
  rows leave every table of its dataset, so the rest publishes;
- the release gate: `checks/suites.py` turns each rule into a great_expectations expectation.

Record-level rules look at one row (types, nulls, value sets, ranges, patterns, JSON shapes, a
comparison of two columns). `unique` looks at the whole table and stays with the gate, as do
distributions, referential integrity, the quarantine budget and drift (checks/rules.py).

Plain Python and pyarrow: no Dagster, no great_expectations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.quarantine import Rejection

# Column kinds (checks/suites.py maps them to the pandas dtypes GX sees).
STRING, INT, INT64, FLOAT, BOOL, LIST = "string", "int", "int64", "float", "bool", "list"
SHA256_HEX = r"^[0-9a-f]{64}$"
CONTRACT_STAGE = "parse"  # a record that breaks its contract is refused where it is parsed


@dataclass(frozen=True)
class When:
    """A row condition: `column == value`, or `column in values`."""

    column: str
    values: tuple

    def mask(self, table: pa.Table) -> pa.ChunkedArray:
        return pc.fill_null(pc.is_in(table[self.column], value_set=pa.array(list(self.values))), False)

    def __str__(self) -> str:
        if len(self.values) == 1:
            return f"{self.column} = {self.values[0]!r}"
        return f"{self.column} in {list(self.values)}"


@dataclass(frozen=True)
class Rule:
    """One rule on one column (or two, for `greater`). `kind` is one of KINDS."""

    kind: str
    column: str
    values: tuple = ()  # in_set
    lo: float | None = None  # between
    hi: float | None = None
    pattern: str | None = None  # regex
    schema: str | None = None  # json_schema, as JSON text (hashable)
    other: str | None = None  # greater: column > other, where both are set
    when: When | None = None
    notes: str | None = None

    @property
    def record_level(self) -> bool:
        return self.kind != "unique"

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column, self.other) if self.other else (self.column,)

    def describe(self) -> str:
        text = {
            "not_null": "must be set",
            "null": "must be empty",
            "in_set": f"must be one of {list(self.values)}",
            "between": f"must be within {_bound(self.lo)}..{_bound(self.hi)}",
            "regex": f"must be {self.notes}" if self.notes else f"must match {self.pattern}",
            "json": "must be valid JSON",
            "json_schema": f"must match the JSON shape {self.notes or self.schema}",
            "greater": f"must be greater than {self.other}",
            "unique": "must be unique",
        }[self.kind]
        return f"{self.column} {text}" + (f" where {self.when}" if self.when else "")

    def broken(self, table: pa.Table) -> pa.Array:
        """A boolean mask of the rows that break this rule (record-level rules only)."""
        col = table[self.column]
        if self.kind == "not_null":
            bad = pc.is_null(col)
        elif self.kind == "null":
            bad = pc.is_valid(col)
        elif self.kind == "in_set":
            bad = pc.and_(pc.is_valid(col), pc.invert(pc.fill_null(pc.is_in(col, value_set=pa.array(list(self.values))), False)))
        elif self.kind == "between":
            low = pc.less(col, self.lo) if self.lo is not None else None
            high = pc.greater(col, self.hi) if self.hi is not None else None
            bad = pc.or_(low, high) if low is not None and high is not None else low if low is not None else high
            if bad is None:
                raise ValueError(f"between on {self.column} has no bound")
        elif self.kind == "regex":
            bad = pc.and_(pc.is_valid(col), pc.invert(pc.fill_null(pc.match_substring_regex(col, self.pattern), False)))
        elif self.kind == "greater":
            both = pc.and_(pc.is_valid(col), pc.is_valid(table[self.other]))
            bad = pc.and_(both, pc.fill_null(pc.less_equal(col, table[self.other]), False))
        elif self.kind in ("json", "json_schema"):
            check = _json_checker(self)
            bad = pa.array([v is not None and not check(v) for v in col.to_pylist()], pa.bool_())
        else:
            raise ValueError(f"{self.kind} is not a record-level rule")
        if self.when is not None:
            bad = pc.and_(bad, self.when.mask(table))
        return pc.fill_null(bad, False)


KINDS = ("not_null", "null", "in_set", "between", "regex", "json", "json_schema", "greater", "unique")


def _bound(value) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _json_checker(rule: Rule):
    if rule.kind == "json":
        def parses(text: str) -> bool:
            try:
                json.loads(text)
            except ValueError:
                return False
            return True
        return parses
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(rule.schema))

    def matches(text: str) -> bool:
        try:
            return validator.is_valid(json.loads(text))
        except ValueError:
            return False
    return matches


@dataclass(frozen=True)
class TableContract:
    """A published table: its columns (name → kind, matched exactly by the gate) and its rules.
    `record_key` names the column that says which upstream record a row belongs to; tables without
    one are built by the pipeline (inventories, dedupe decisions) and judged by the gate only.
    `distribution` names columns whose value counts, and the rows per record key, are worth
    comparing from one release to the next (`rewardhouse diff`)."""

    name: str
    columns: dict[str, str]
    rules: tuple[Rule, ...]
    record_key: str | None = None
    description: str = ""
    distribution: tuple[str, ...] = ()

    @property
    def row_key(self) -> tuple[str, ...] | None:
        """The columns that name one row: those of the table's first `unique` rule (None: rows have
        no name, a table is then a multiset of rows)."""
        found = next((r.column for r in self.rules if r.kind == "unique"), None)
        return tuple(found.split(",")) if found else None

    def record_rules(self, present: Iterable[str] | None = None) -> list[Rule]:
        """The record-level rules, those whose columns are all in `present` when given (a parser's
        table may not hold the columns later stages add)."""
        have = set(present) if present is not None else set(self.columns)
        return [r for r in self.rules if r.record_level and set(r.columns) <= have
                and (r.when is None or r.when.column in have)]


# --- rule constructors (what the contract modules write) ----------------------------------------

def not_null(*columns: str, when: When | None = None) -> list[Rule]:
    return [Rule("not_null", c, when=when) for c in columns]


def null(column: str, when: When | None = None) -> list[Rule]:
    return [Rule("null", column, when=when)]


def unique(*columns: str) -> list[Rule]:
    return [Rule("unique", ",".join(columns))]


def in_set(column: str, values: Iterable, when: When | None = None) -> list[Rule]:
    return [Rule("in_set", column, values=tuple(values), when=when)]


def between(column: str, lo=None, hi=None, when: When | None = None) -> list[Rule]:
    return [Rule("between", column, lo=lo, hi=hi, when=when)]


def sha256(column: str) -> list[Rule]:
    return [Rule("regex", column, pattern=SHA256_HEX)]


def regex(column: str, pattern: str, notes: str | None = None) -> list[Rule]:
    return [Rule("regex", column, pattern=pattern, notes=notes)]


def json_text(*columns: str) -> list[Rule]:
    return [Rule("json", c) for c in columns]


def json_schema(column: str, schema: dict, when: When | None = None, notes: str | None = None) -> list[Rule]:
    return [Rule("json_schema", column, schema=json.dumps(schema, sort_keys=True), when=when, notes=notes)]


def greater(column: str, other: str) -> list[Rule]:
    return [Rule("greater", column, other=other)]


def where(column: str, *values) -> When:
    return When(column, tuple(values))


# --- the columns of an upstream file, checked on its Arrow schema before any row is read ---------

@dataclass(frozen=True)
class FileColumns:
    """The columns an upstream columnar file (a parquet shard) must hold, with their Arrow types as
    the upstream format writes them; a column may allow several types (a tuple).

    Types match by family: any integer width, string or large string, list or large list, a
    dictionary of the right values, and a struct holding (at least) the named fields. The null
    type (a column with no values) matches anything. A change of family (list<int> → list<string>,
    struct → binary, list<string> → string, string → int64, int → float) is drift: read row by row
    it would either refuse every record or silently coerce ids and rankings, so the whole file is
    refused instead."""

    required: dict[str, pa.DataType | tuple[pa.DataType, ...]]
    optional: dict[str, pa.DataType | tuple[pa.DataType, ...]] = field(default_factory=dict)

    def problem(self, schema: pa.Schema) -> str | None:
        """Why a file of `schema` is not in the upstream format (missing columns, then drifted
        ones, each named with the type expected and the type found), or None."""
        missing = [c for c in self.required if c not in schema.names]
        if missing:
            return f"lacks column(s) {', '.join(missing)}; columns are {', '.join(schema.names)}"
        drifted = []
        for name, expected in {**self.required, **self.optional}.items():
            if name not in schema.names:
                continue
            found = schema.field(name).type
            options = expected if isinstance(expected, tuple) else (expected,)
            if not any(_same_family(found, e) for e in options):
                wanted = " or ".join(_shown_type(e, family=True) for e in options)
                drifted.append(f"column {name} is {_shown_type(found)}, expected {wanted}")
        return f"schema drift: {'; '.join(drifted)}" if drifted else None

    def parquet_problem(self, path) -> str | None:
        """Why a parquet file cannot be used at all (unreadable, or not in the upstream format), or
        None; read from its footer, before any row."""
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            return f"unreadable parquet: {exc}"
        problem = self.problem(schema)
        return f"parquet {problem}" if problem else None


def _family(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _family(t.value_type)
    for name, test in (("null", pa.types.is_null), ("int", pa.types.is_integer), ("float", pa.types.is_floating),
                       ("bool", pa.types.is_boolean), ("string", _is_string), ("binary", _is_binary),
                       ("list", _is_list), ("struct", pa.types.is_struct)):
        if test(t):
            return name
    return str(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t)


def _is_binary(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or getattr(pa.types, "is_binary_view", lambda _: False)(t))


def _is_list(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or getattr(pa.types, "is_list_view", lambda _: False)(t))


def _same_family(found: pa.DataType, expected: pa.DataType) -> bool:
    if pa.types.is_dictionary(found):
        found = found.value_type
    kind = _family(found)
    if kind == "null":
        return True
    if kind != _family(expected):
        return False
    if kind == "list":
        return _same_family(found.value_type, expected.value_type)
    if kind == "struct":
        fields = {f.name: f.type for f in found}
        return all(f.name in fields and _same_family(fields[f.name], f.type) for f in expected)
    return True


def _shown_type(t: pa.DataType, family: bool = False) -> str:
    """`list<string>`, `struct<bytes: binary, path: string>`: the found type by its own name
    (int64, double), the expected one by family (int, float); a struct of no named fields is any
    struct."""
    if pa.types.is_dictionary(t):
        return f"dictionary<{_shown_type(t.value_type, family)}>"
    if _is_list(t):
        return f"list<{_shown_type(t.value_type, family)}>"
    if pa.types.is_struct(t):
        inner = ", ".join(f"{f.name}: {_shown_type(f.type, family)}" for f in t)
        return f"struct<{inner}>" if inner else "struct"
    return _family(t) if family else str(t)


# --- enforcement at parse time -------------------------------------------------------------------

@dataclass
class Enforced:
    tables: dict[str, pa.Table]
    rejected: list[Rejection] = field(default_factory=list)


def enforce(dataset: str, tables: dict[str, pa.Table], contracts: dict[str, TableContract]) -> Enforced:
    """Check every record-level rule of every table in `tables` that has a contract with a record
    key. A record with any broken row is quarantined once (stage `parse`, naming the first table,
    field and rule it breaks) and all its rows leave every table keyed by the same record key. A
    row without a record key is refused alone, named `<table> row <n>`."""
    bad: dict[str, str] = {}
    keyless: dict[str, dict[int, str]] = {}
    keyed = {name: c for name, c in contracts.items() if name in tables and c.record_key}
    for name, contract in keyed.items():
        table = tables[name]
        if table.num_rows == 0:
            continue
        for rule in contract.record_rules(table.column_names):
            mask = rule.broken(table)
            if not pc.any(mask).as_py():
                continue
            rows = pc.indices_nonzero(mask).to_pylist()
            keys = table[contract.record_key].take(rows).to_pylist()
            values = table[rule.column].take(rows).to_pylist()
            for row, key, value in zip(rows, keys, values):
                reason = f"record contract: {name}.{rule.describe()} (got {_shown(value)})"
                if key is None:
                    keyless.setdefault(name, {}).setdefault(row, reason)
                elif key not in bad:
                    bad[key] = reason
    if not bad and not keyless:
        return Enforced(dict(tables))
    drop = pa.array(sorted(bad), pa.string())
    out = dict(tables)
    for name, contract in keyed.items():
        table = tables[name]
        if not table.num_rows:
            continue
        keep = pc.invert(pc.fill_null(pc.is_in(table[contract.record_key], value_set=drop), False))
        if name in keyless:
            alone = np.zeros(table.num_rows, bool)
            alone[list(keyless[name])] = True
            keep = pc.and_(keep, pa.array(~alone))
        out[name] = table.filter(keep)
    rejected = [Rejection(dataset, CONTRACT_STAGE, key, reason) for key, reason in sorted(bad.items())]
    rejected += [Rejection(dataset, CONTRACT_STAGE, f"{name} row {row}", reason)
                 for name, rows in sorted(keyless.items()) for row, reason in sorted(rows.items())]
    return Enforced(out, rejected)


def _shown(value, width: int = 80) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
