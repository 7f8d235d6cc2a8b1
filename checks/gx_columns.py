"""Two of GX's column-map expectations with their per-value Python replaced by one pass over the
column. GX still runs them, counts and samples the offending rows and renders them in Data Docs
with its own renderers (they are subclasses); only the metric that says which rows pass differs.

- `expect_column_json_to_match_schema` (for `expect_column_values_to_match_json_schema`): GX
  calls `jsonschema.validate` for every value, which checks the schema against its meta-schema
  each time: four fifths of the cost, and on a full-scale release (4,000 MMRB2 ratings, 1,250
  VL-RewardBench rankings) about a second of the GX step. Here the schema is checked and compiled
  once, and each distinct text (ratings repeat: a few hundred among thousands) parsed and judged
  once. Text that is not JSON at all is an offending value (GX's metric raises instead, and the
  sample is lost).
- `expect_column_numbers_to_be_between` (for `expect_column_values_to_be_between`): GX compares
  in a vectorised way only for numpy dtypes; the nullable integer and float columns GX is given
  here (checks/suites.py `to_frame`) fall back to a Python call per value, 282k of them for a
  full-scale `prm_steps`. Here the comparison is one numpy pass (nulls are not offending values,
  as in GX: column-map metrics see the non-null rows only).

Imported by checks/suites.py before any suite is built or read back (GX finds an expectation class
by its registered name), and only then: importing GX takes seconds.
"""

from __future__ import annotations

import json
import operator
from typing import Any, ClassVar, Dict, Tuple

import jsonschema
from great_expectations.execution_engine import PandasExecutionEngine
from great_expectations.expectations.core.expect_column_values_to_be_between import ExpectColumnValuesToBeBetween
from great_expectations.expectations.core.expect_column_values_to_match_json_schema import (
    ExpectColumnValuesToMatchJsonSchema,
)
from great_expectations.expectations.metrics.map_metric_provider import ColumnMapMetricProvider, column_condition_partial

JSON_EXPECTATION = "expect_column_json_to_match_schema"
JSON_METRIC = "column_values.rewardhouse_json_matches_schema"
BETWEEN_METRIC = "column_values.rewardhouse_numbers_between"


def matching_texts(texts, schema: dict) -> set:
    """Those of `texts` (JSON text) whose parsed value `schema` accepts, each distinct text judged
    once by one validator (the schema is checked against its meta-schema first: a bad schema raises
    jsonschema.SchemaError, as GX's expectation does)."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
    accepted = set()
    for text in set(texts):
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            continue
        if validator.is_valid(value):
            accepted.add(text)
    return accepted


class ColumnJsonMatchesSchema(ColumnMapMetricProvider):
    condition_metric_name = JSON_METRIC
    condition_value_keys = ("json_schema",)

    @column_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column, json_schema, **kwargs):
        return column.isin(matching_texts(column.unique(), json_schema))


class ExpectColumnJsonToMatchSchema(ExpectColumnValuesToMatchJsonSchema):
    """Expect each value of the column to be JSON text whose value matches `json_schema`."""

    map_metric = JSON_METRIC
    library_metadata: ClassVar[Dict[str, Any]] = {"maturity": "production", "tags": ["column map expectation"],
                                                  "contributors": ["rewardhouse"]}
    success_keys: ClassVar[Tuple[str, ...]] = ("json_schema", "mostly")

    class Config:
        title = "Expect column JSON to match schema"


def numbers_between(values, min_value=None, max_value=None, strict_min=False, strict_max=False):
    """A boolean numpy array: each number of `values` (no nulls) within the bounds (a None bound is
    open), compared in one pass."""
    import numpy as np

    values = np.asarray(values)
    inside = np.ones(len(values), dtype=bool)
    if min_value is not None:
        inside &= (operator.gt if strict_min else operator.ge)(values, min_value)
    if max_value is not None:
        inside &= (operator.lt if strict_max else operator.le)(values, max_value)
    return inside


class ColumnNumbersBetween(ColumnMapMetricProvider):
    condition_metric_name = BETWEEN_METRIC
    condition_value_keys = ("min_value", "max_value", "strict_min", "strict_max")

    @column_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column, min_value=None, max_value=None, strict_min=None, strict_max=None, **kwargs):
        import pandas as pd

        if min_value is None and max_value is None:
            raise ValueError("min_value and max_value cannot both be None")
        if min_value is not None and max_value is not None and min_value > max_value:
            raise ValueError("min_value cannot be greater than max_value")
        if not pd.api.types.is_numeric_dtype(column.dtype) or pd.api.types.is_bool_dtype(column.dtype):
            raise TypeError(f"expected a numeric column, found {column.dtype}")
        values = column.to_numpy(dtype=column.dtype.numpy_dtype if hasattr(column.dtype, "numpy_dtype") else None)
        return pd.Series(numbers_between(values, min_value, max_value, bool(strict_min), bool(strict_max)),
                         index=column.index)


class ExpectColumnNumbersToBeBetween(ExpectColumnValuesToBeBetween):
    """Expect each number of the column to lie between `min_value` and `max_value`."""

    map_metric = BETWEEN_METRIC
    library_metadata: ClassVar[Dict[str, Any]] = {"maturity": "production", "tags": ["column map expectation"],
                                                  "contributors": ["rewardhouse"]}

    class Config:
        title = "Expect column numbers to be between"
