"""One GX expectation for a table's whole schema: its exact column set, each column's kind, and the
columns that may never hold a null.

GX's cost is per expectation, not per row: on the sample release each expectation costs 20-40 ms
of configuration handling whatever the table's size, and one expectation per column for its type
and another for its nulls were two thirds of every suite. Here they are one expectation per table,
on one metric computed in one pass over the frame, and GX still runs it, stores its result and
renders it in Data Docs like any other.

Imported by checks/suites.py before any suite is built or read back (GX finds an expectation class
by its registered name), and only then: importing GX takes seconds.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Optional, Tuple

from great_expectations.compatibility import pydantic
from great_expectations.core.metric_domain_types import MetricDomainTypes
from great_expectations.execution_engine import ExecutionEngine, PandasExecutionEngine
from great_expectations.expectations.expectation import BatchExpectation
from great_expectations.expectations.metrics.metric_provider import metric_value
from great_expectations.expectations.metrics.table_metric_provider import TableMetricProvider

EXPECTATION = "expect_table_schema_to_match_contract"
METRIC = "table.rewardhouse_schema"
LIST_TYPE = "list"  # an object column whose every set value is a Python list


def dtype_name(series) -> str:
    """The name a column's kind is checked by: a pandas extension dtype's class name
    (`StringDtype`, `Int64Dtype`, ...), `list` for an object column of lists, else numpy's name."""
    import pandas as pd

    dtype = series.dtype
    if isinstance(dtype, pd.api.extensions.ExtensionDtype):
        return type(dtype).__name__
    if dtype == object:
        values = series.dropna()
        if all(isinstance(v, list) for v in values):
            return LIST_TYPE
        kinds = sorted({type(v).__name__ for v in values})
        return "object of " + ", ".join(kinds)
    return str(dtype)


class TableSchema(TableMetricProvider):
    """Every column of the batch: its kind name (`dtype_name`) and how many nulls it holds."""

    metric_name = METRIC

    @metric_value(engine=PandasExecutionEngine)
    def _pandas(cls, execution_engine, metric_domain_kwargs, metric_value_kwargs, metrics, runtime_configuration):
        df, _, _ = execution_engine.get_compute_domain(metric_domain_kwargs, domain_type=MetricDomainTypes.TABLE)
        nulls = df.isna().sum()
        return {str(name): {"kind": dtype_name(df[name]), "nulls": int(nulls[name])} for name in df.columns}


class ExpectTableSchemaToMatchContract(BatchExpectation):
    """Expect the table to have exactly `columns`, each of one of its accepted kinds, and no null in
    any column of `not_null`."""

    columns: Dict[str, List[str]] = pydantic.Field(description="every column and the kinds it may have")
    not_null: List[str] = pydantic.Field(default_factory=list, description="columns that never hold a null")

    metric_dependencies: ClassVar[Tuple[str, ...]] = (METRIC,)
    success_keys: ClassVar[Tuple[str, ...]] = ("columns", "not_null")
    args_keys: ClassVar[Tuple[str, ...]] = ("columns", "not_null")
    library_metadata: ClassVar[Dict[str, Any]] = {"maturity": "production", "tags": ["table expectation"],
                                                  "contributors": ["rewardhouse"]}

    class Config:
        title = "Expect table schema to match contract"

    def _validate(self, metrics: Dict, runtime_configuration: Optional[dict] = None,
                  execution_engine: Optional[ExecutionEngine] = None):
        observed: dict = metrics[METRIC]
        problems = schema_problems(self.columns, self.not_null, observed)
        return {"success": not any(problems.values()),
                "result": {"observed_value": {c: v["kind"] for c, v in observed.items()}, "details": problems}}


def schema_problems(columns: dict[str, list[str]], not_null: list[str], observed: dict) -> dict:
    """What breaks the schema: missing and unexpected columns, columns of another kind (the kind
    found), and columns with nulls (how many)."""
    return {
        "missing": [c for c in columns if c not in observed],
        "unexpected": [c for c in observed if c not in columns],
        "kinds": {c: observed[c]["kind"] for c, kinds in columns.items() if c in observed and observed[c]["kind"] not in kinds},
        "nulls": {c: observed[c]["nulls"] for c in not_null if c in observed and observed[c]["nulls"]},
    }
