"""Great Expectations suites for every published table, built from the table contracts, and their validation.

Plain module (no Dagster): `build_suite(table)` turns the table's contract (pipeline/contract.py,
declared beside each dataset and read through the registry) into a GX 1.x `ExpectationSuite` —
the same rules the parsers enforce per record;
`validate_tables(tables, docs_root, run_name)` validates Arrow tables against them and renders
GX Data Docs under `docs_root`. dagster-ge is pinned to GX < 1.0, so GX is called directly.

How the data reaches GX (GX's DuckDB SQL path is unreliable, so frames are validated in pandas):

- Arrow → pandas with one fixed type mapping (`to_frame`): integers → pandas nullable `Int*`,
  floats → `Float*`, booleans → `boolean`, strings → `StringDtype()` (NA-backed), lists → object
  columns of Python lists. So a null int stays an int column (plain `to_pandas` would turn it into
  float64) and every column's pandas dtype says exactly what its Arrow type was.
- The schema is one expectation per table (checks/gx_schema.py,
  `expect_table_schema_to_match_contract`): the exact column set, each column's *kind* (string,
  integer, 64-bit integer, float, boolean, list) by the pandas extension dtypes above, and every
  column the contract says is never null. A width change (int32 → int64) is not a contract change,
  a kind change is; `phash`/`dhash` must be 64-bit; a list column is an object column whose every
  set value is a list. GX's cost is per expectation, not per row: one per column for its type and
  another for its nulls were two thirds of every suite and of its time. A failed schema is reported
  as one failure per fault (the column set, a column's kind, a column's nulls).
- Human ratings (MMRB2 `human_annotations`, JSON text) are checked without derived columns:
  `expect_column_json_to_match_schema` (checks/gx_columns.py: GX's JSON-schema expectation with the
  schema compiled once and each distinct text validated once) with a row condition per task family — for
  t2i/edit/interleaved a list of exactly three integers within `QualitySettings.ratings`, for reasoning an
  object of `response_a_ratings`/`response_b_ratings` lists of "A"/"B"/"C". The offending JSON text
  is the sample.
- Conditional rules (image_name where kind = image, width where status = ok, ...) use GX 1.x
  row conditions (`Column("kind") == "image"`), which the pandas engine runs as `DataFrame.query`.

GX's own per-call overheads, shortened where it reads the same thing again and again (both
checked against GX's methods in tests/test_gx_suites.py): an expectation's configuration is built
once per kwargs lookup instead of once per key (`_read_configuration_once_per_call`), and a row
condition is queried once per table instead of once per metric (`_filter_each_condition_once`).
Together the full-scale tables' validation and Data Docs went from 3.0-3.1 s to 2.5-2.7 s.

Data Docs come from a file-backed GX context at `docs_root/gx` (analytics and progress bars off
in its config); suites and validation definitions are added with `add_or_update`, so one
`docs_root` serves many runs and its index lists them all.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote, urlparse

import pyarrow as pa

from checks.deferred import deferring
from pipeline.contract import BOOL, FLOAT, INT, INT64, LIST, STRING, Rule, TableContract, When
from pipeline.datasets import table_contracts
from pipeline.settings import QualitySettings

if TYPE_CHECKING:  # GX takes seconds to import: only validate_tables/build_suite pay for it.
    import great_expectations as gx
    import pandas as pd

log = logging.getLogger(__name__)


DATASOURCE = "rewardhouse"
# One dataframe asset for every table (the suite, named after the table, says which): GX rewrites
# its whole project config for every asset and batch definition added, 42 writes of a growing
# file on a fresh context, a second of the validation.
ASSET = "release_table"
BATCH_DEFINITION = "whole_table"
SAMPLE_SIZE = 5
JSON_SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"
_PARTIAL_UNEXPECTED = 20  # asked of GX, then de-duplicated down to SAMPLE_SIZE
# BASIC: each expectation's unexpected count and share, and a partial list of offending values (the
# samples). SUMMARY adds counts per offending value and their row indices, which cost GX further
# passes over every row of every expectation (a fifth of a full-scale validation) and are not used.
RESULT_FORMAT = "BASIC"

# Column kinds (pipeline/contract.py) and the pandas dtypes `to_frame` gives them (names as GX's
# type list resolves them).
_TYPE_LISTS: dict[str, list[str]] = {
    STRING: ["StringDtype"],
    INT: ["Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype"],
    INT64: ["Int64Dtype"],
    FLOAT: ["Float32Dtype", "Float64Dtype"],
    BOOL: ["BooleanDtype"],
    LIST: ["list"],
}


def suite_tables() -> tuple[str, ...]:
    """Every published table with a suite: the registry's datasets' tables, then the shared ones."""
    return tuple(table_contracts())


def columns(table: str, quality: QualitySettings = QualitySettings()) -> dict[str, str]:
    """The docs/tables.md contract of one table: every column and its kind (matched exactly)."""
    return table_contracts(quality)[table].columns


@dataclass
class Failure:
    """One failed expectation: its type, column, arguments, and up to 5 offending values."""

    expectation: str
    column: str | None
    kwargs: dict
    unexpected_count: int | None
    sample: list
    error: str | None = None  # set when GX raised instead of evaluating (e.g. the column is absent)


@dataclass
class TableResult:
    table: str
    passed: bool
    evaluated: int
    failures: list[Failure]
    rows: int


# --------------------------------------------------------------------------------------------
# Suites


def build_suite(table: str, quality: QualitySettings = QualitySettings()) -> gx.ExpectationSuite:
    """The expectation suite of one published table (named after the table), from its contract."""
    import_gx()
    import great_expectations as gx

    contracts = table_contracts(quality)
    if table not in contracts:
        raise KeyError(f"no suite for table {table!r}; suites exist for {', '.join(contracts)}")
    contract = contracts[table]
    # Expectations go in through the constructor: `suite.add_expectation` writes the whole suite
    # to the store of the current context on every call once a suite of that name is stored.
    return gx.ExpectationSuite(
        name=table,
        expectations=_schema_expectations(contract) + [_expectation(r) for r in contract.rules if not _in_schema(r)],
        meta={"rewardhouse_limits": {"max_steps": quality.max_steps, "ratings": list(quality.ratings)}},
    )


def _schema_expectations(contract: TableContract) -> list:
    """The table's schema as one expectation (checks/gx_schema.py): its exact column set, each
    column's kind, and the columns never null (the contract's not_null rules without a condition)."""
    from checks.gx_schema import ExpectTableSchemaToMatchContract

    return [ExpectTableSchemaToMatchContract(
        columns={c: _TYPE_LISTS[kind] for c, kind in contract.columns.items()},
        not_null=[r.column for r in contract.rules if _in_schema(r)],
        notes="docs/tables.md contract: columns may be added there, never renamed",
    )]


def _in_schema(rule: Rule) -> bool:
    """A not_null rule without a condition is part of the schema expectation."""
    return rule.kind == "not_null" and rule.when is None


def _condition(when: When | None):
    if when is None:
        return None
    from great_expectations.expectations.row_conditions import Column

    column = Column(when.column)
    return column == when.values[0] if len(when.values) == 1 else column.is_in(list(when.values))


def _expectation(rule: Rule):
    """The GX expectation that checks `rule` on a whole table."""
    import great_expectations.expectations as gxe

    when = _condition(rule.when)
    if rule.kind == "not_null":
        return gxe.ExpectColumnValuesToNotBeNull(column=rule.column, row_condition=when)
    if rule.kind == "null":
        return gxe.ExpectColumnValuesToBeNull(column=rule.column, row_condition=when)
    if rule.kind == "unique":
        cols = rule.column.split(",")
        if len(cols) == 1:
            return gxe.ExpectColumnValuesToBeUnique(column=cols[0])
        return gxe.ExpectCompoundColumnsToBeUnique(column_list=cols)
    if rule.kind == "in_set":
        return gxe.ExpectColumnValuesToBeInSet(column=rule.column, value_set=list(rule.values), row_condition=when)
    if rule.kind == "between":
        from checks.gx_columns import ExpectColumnNumbersToBeBetween  # one numpy pass (checks/gx_columns.py)

        return ExpectColumnNumbersToBeBetween(column=rule.column, min_value=rule.lo, max_value=rule.hi, row_condition=when)
    if rule.kind == "regex":
        return gxe.ExpectColumnValuesToMatchRegex(column=rule.column, regex=rule.pattern, row_condition=when)
    if rule.kind == "json":
        return gxe.ExpectColumnValuesToBeJsonParseable(column=rule.column, row_condition=when)
    if rule.kind == "json_schema":
        # checks/gx_columns.py: the schema checked once, each distinct text validated once. The schema
        # is checked under draft-07's meta-schema (a third of 2020-12's cost; these schemas mean the
        # same there).
        from checks.gx_columns import ExpectColumnJsonToMatchSchema

        schema = {"$schema": JSON_SCHEMA_DIALECT, **json.loads(rule.schema)}
        return ExpectColumnJsonToMatchSchema(column=rule.column, json_schema=schema, row_condition=when, notes=rule.notes)
    if rule.kind == "greater":
        return gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A=rule.column, column_B=rule.other,
                                                            ignore_row_if="either_value_is_missing")
    raise ValueError(f"no expectation for rule kind {rule.kind!r}")


# --------------------------------------------------------------------------------------------
# Arrow → pandas


def _pandas_dtype(arrow_type: pa.DataType):
    import pandas as pd

    t = arrow_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pd.StringDtype()
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    if pa.types.is_integer(t):
        return {
            pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
            pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
            pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(),
        }[t]
    if pa.types.is_float32(t):
        return pd.Float32Dtype()
    if pa.types.is_float64(t):
        return pd.Float64Dtype()
    return None  # pyarrow's default conversion


def to_frame(table: pa.Table) -> pd.DataFrame:
    """The pandas frame GX validates (see the module docstring for the type mapping)."""
    import pandas as pd

    frame = table.to_pandas(types_mapper=_pandas_dtype)
    for name, column in zip(table.column_names, table.columns):
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            frame[name] = pd.Series(column.to_pylist(), index=frame.index, dtype=object)
    return frame


# --------------------------------------------------------------------------------------------
# Validation and Data Docs


_IMPORT_LOCK = threading.Lock()
_IMPORTING: threading.Thread | None = None


def import_gx() -> None:
    """Import GX and this package's expectations, without the modules GX imports for expectations
    no suite here has (scipy.stats, altair: checks/deferred.py); once per process."""
    global _GX_IMPORTED
    if _GX_IMPORTED:
        return
    with deferring():
        import checks.gx_columns  # noqa: F401  (imports GX itself)
        import checks.gx_schema  # noqa: F401
        import great_expectations.expectations.row_conditions  # noqa: F401
    _GX_IMPORTED = True


_GX_IMPORTED = False


def import_in_background() -> threading.Thread:
    """Start importing GX, pandas and this module's expectations on a thread (join it before
    validating), once per process: GX's import is seconds of Python that can overlap GIL-free
    work done meanwhile, such as reading the candidate's Parquet tables. A failed import is left
    for the caller's own import to raise."""
    global _IMPORTING

    def load() -> None:
        try:
            import_gx()
        except Exception:  # the caller imports these again and reports what is wrong
            pass

    with _IMPORT_LOCK:
        if _IMPORTING is None:
            # What GX imports and Dagster's storage imports lazily (an error's path reaches
            # sqlalchemy.orm.exc) is imported here first: two threads importing one package can hand
            # each other a partly initialised module ("partially initialized module
            # 'sqlalchemy.orm.exc'", seen when GX was imported while steps ran)
            import sqlalchemy.orm  # noqa: F401  (50 ms)

            _IMPORTING = threading.Thread(target=load, name="import great_expectations", daemon=True)
            _IMPORTING.start()
        return _IMPORTING


def validate_tables(
    tables: dict[str, pa.Table],
    docs_root: Path,
    run_name: str,
    quality: QualitySettings = QualitySettings(),
    between: Callable[[], None] = lambda: None,
) -> tuple[dict[str, TableResult], Path | None]:
    """Validate every table with a suite (`suite_tables()`) present in `tables` (others are skipped or ignored),
    render Data Docs under `docs_root`, and return the results and the Data Docs index.html
    (None, with a warning logged, when the docs could not be built). `between()` is called before
    each table and before the docs (where a run may stop)."""
    docs_root = Path(docs_root)
    started = time.perf_counter()
    import_gx()
    context, docs_problem = _open_context(docs_root)
    import great_expectations as gx

    run_id = gx.RunIdentifier(run_name=_safe_run_name(run_name))
    _no_frame_fingerprint()
    _read_configuration_once_per_call()
    _filter_each_condition_once()
    batch_definition = _batch_definition(_datasource(context))
    results: dict[str, TableResult] = {}
    for table in suite_tables():
        if table not in tables:
            continue
        between()
        arrow = tables[table]
        suite = _store_suite(context, build_suite(table, quality))
        definition = _store_validation_definition(context, table, batch_definition, suite)
        with _conditions_read_once():
            outcome = definition.run(
                batch_parameters={"dataframe": to_frame(arrow)},
                result_format={"result_format": RESULT_FORMAT, "partial_unexpected_count": _PARTIAL_UNEXPECTED},
                run_id=run_id,
            )
        results[table] = _table_result(table, arrow, outcome)
    log.info("validated %d tables in %.2f s", len(results), time.perf_counter() - started)

    if docs_problem:
        log.warning("GX Data Docs not built: %s", docs_problem)
        return results, None
    between()
    started = time.perf_counter()
    index = _build_docs(context, run_id, list(results))
    log.info("built GX Data Docs in %.2f s: %s", time.perf_counter() - started, index)
    return results, index


def _no_frame_fingerprint() -> None:
    """GX's pandas engine md5s every frame under HASH_THRESHOLD bytes (`hash_pandas_object` over
    every cell) only to store it as a batch marker, `pandas_data_fingerprint`: about a second for
    the 282k step texts of a full-scale `prm_steps`. Here the run name carries the release id,
    which names what the tables were built from, so the marker adds nothing: the threshold is 0."""
    from great_expectations.execution_engine import pandas_execution_engine

    pandas_execution_engine.HASH_THRESHOLD = 0


def _open_context(docs_root: Path):
    """A file context at docs_root/gx, configured quiet; an ephemeral one (and the reason) if the
    folder cannot hold one, so validation still runs."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    gx_log = logging.getLogger("great_expectations")
    if gx_log.level == logging.NOTSET:  # GX logs every config (de)serialisation at INFO
        gx_log.setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    try:
        docs_root.mkdir(parents=True, exist_ok=True)
        context = gx.get_context(mode="file", project_root_dir=docs_root)
    except Exception as exc:  # an unwritable or odd folder must not stop validation
        context = gx.get_context(mode="ephemeral")
        problem = f"no GX file context at {docs_root}: {type(exc).__name__}: {exc}"
    else:
        problem = None
    _read_config_variables_once(context)
    variables = context.variables
    bars = variables.progress_bars  # a ProgressBarsConfig, or a dict once read back from the yml
    bars = dict(bars) if isinstance(bars, dict) else vars(bars) if bars is not None else {}
    if variables.analytics_enabled is not False or bars.get("globally", True) or bars.get("metric_calculations", True):
        variables.analytics_enabled = False
        variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        if problem is None:
            try:
                variables.save()
            except Exception as exc:
                problem = f"could not save the GX config under {docs_root}: {type(exc).__name__}: {exc}"
    return context, problem


GX_OWN: dict[str, Callable] = {}  # GX's own methods that _read_configuration_once_per_call replaced


def _read_configuration_once_per_call() -> None:
    """GX's `Expectation.configuration` is a property that builds a new ExpectationConfiguration
    from the model (a pydantic `dict()` of every field) on each read, and `_get_domain_kwargs`,
    `_get_success_kwargs`, `_get_success_kwarg` and `_get_runtime_kwargs` read it once per key
    they look up: about 18,000 builds in a full-scale validation, a third of its time. The four
    are replaced by the same lookups made on one build per call (what they return is unchanged:
    nothing changes the expectation while it is read). Only where GX still has the methods read
    here; with another GX, its own stay."""
    from great_expectations.expectations import expectation as module

    cls = module.Expectation
    if getattr(cls, "_rewardhouse_one_read", False):
        return
    names = ("_get_domain_kwargs", "_get_success_kwargs", "_get_success_kwarg", "_get_runtime_kwargs",
             "_get_default_value")
    if not all(hasattr(cls, m) for m in names) or not hasattr(module, "parse_result_format"):
        return

    def kwarg(self, kwargs, key, default=None):  # GX's _get_success_kwarg on kwargs read already
        if key in kwargs:
            return kwargs[key]
        field = self.__fields__.get(key)
        if field is not None:
            return field.default if not field.required else default
        module.logger.warning(f'_get_success_kwarg called with key "{key}", '
                              f"but it is not a known field of {type(self).__name__}")
        return default

    def domain_of(self, kwargs):
        return {key: kwargs.get(key, self._get_default_value(key)) for key in self.domain_keys}

    def success_of(self, kwargs):
        out = {key: kwargs.get(key, self._get_default_value(key)) for key in self.success_keys}
        out.update(domain_of(self, kwargs))
        return out

    def runtime(self, runtime_configuration=None):
        runtime_configuration = runtime_configuration or {}
        kwargs = self.configuration.kwargs
        out = {key: runtime_configuration.get(key, kwarg(self, kwargs, key)) for key in self.runtime_keys}
        out.update(success_of(self, kwargs))
        out["result_format"] = module.parse_result_format(out["result_format"])
        return out

    GX_OWN.update({m: getattr(cls, m) for m in names[:4]})
    cls._get_domain_kwargs = lambda self: domain_of(self, self.configuration.kwargs)
    cls._get_success_kwargs = lambda self: success_of(self, self.configuration.kwargs)
    cls._get_success_kwarg = lambda self, key, default=None: kwarg(self, self.configuration.kwargs, key, default)
    cls._get_runtime_kwargs = runtime
    cls._rewardhouse_one_read = True


_FILTERED: dict | None = None  # (frame id, condition) -> (frame, its filtered rows), while one table is validated


def _filter_each_condition_once() -> None:
    """GX's pandas engine runs a row condition (`DataFrame.query`) again for every metric of every
    expectation that has it: 166 queries in a full-scale validation, of 27 distinct conditions on
    a table. While `_conditions_read_once()` is open, each (frame, condition) is queried once and
    its rows handed on (GX reads them, a new frame per step it takes)."""
    from great_expectations.execution_engine.pandas_execution_engine import PandasExecutionEngine as engine

    if getattr(engine, "_rewardhouse_filter_once", False) or not hasattr(engine, "_apply_row_condition_filter"):
        return
    own = engine._apply_row_condition_filter
    GX_OWN["_apply_row_condition_filter"] = own

    def apply(self, data, row_condition, domain_kwargs):
        cache = _FILTERED
        if cache is None:
            return own(self, data, row_condition, domain_kwargs)
        key = (id(data), repr(row_condition), repr(domain_kwargs.get("condition_parser")))
        hit = cache.get(key)
        if hit is None or hit[0] is not data:
            hit = cache[key] = (data, own(self, data, row_condition, domain_kwargs))
        return hit[1]

    engine._apply_row_condition_filter = apply
    engine._rewardhouse_filter_once = True


@contextlib.contextmanager
def _conditions_read_once():
    global _FILTERED
    _FILTERED = {}
    try:
        yield
    finally:
        _FILTERED = None


def _read_config_variables_once(context) -> None:
    """A file context reads and parses its uncommitted/config_variables.yml (and copies the
    environment) on every read of a context variable, such as the name of the expectations store:
    about 2 ms each, 270 times in a full-scale validation. The values are read once here and
    handed back for the context's life (one step: nothing edits that file meanwhile)."""
    provider = context.config_provider
    values = provider.get_values()
    provider.get_values = lambda: values


def _suite_fingerprint(suite) -> str:
    return json.dumps(
        [[e.expectation_type, e.configuration.kwargs, e.notes] for e in suite.expectations] + [suite.meta],
        sort_keys=True, default=repr,
    )


def _store_suite(context, suite):
    """Add the suite, or replace a stored one that differs (`suites.add_or_update` compares every
    expectation with every other, which costs more than the validation itself)."""
    from great_expectations.exceptions import DataContextError

    try:
        stored = context.suites.get(suite.name)
    except DataContextError:
        return context.suites.add(suite)
    if _suite_fingerprint(stored) == _suite_fingerprint(suite):
        return stored
    context.suites.delete(suite.name)
    return context.suites.add(suite)


def _store_validation_definition(context, name: str, batch_definition, suite):
    import great_expectations as gx
    from great_expectations.exceptions import DataContextError

    definitions = context.validation_definitions
    try:
        stored = definitions.get(name)
    except DataContextError:  # absent: added as it is (add_or_update would store the suite again)
        return definitions.add(gx.ValidationDefinition(name=name, data=batch_definition, suite=suite))
    except (LookupError, ValueError):  # stored against a replaced suite
        stored = None
    if stored is not None and stored.suite.id == suite.id and stored.data.id == batch_definition.id:
        return stored
    return definitions.add_or_update(gx.ValidationDefinition(name=name, data=batch_definition, suite=suite))


def _datasource(context):
    try:
        return context.data_sources.get(DATASOURCE)
    except KeyError:
        return context.data_sources.add_pandas(DATASOURCE)


def _batch_definition(datasource):
    try:
        asset = datasource.get_asset(ASSET)
    except LookupError:
        asset = datasource.add_dataframe_asset(ASSET)
    try:
        return asset.get_batch_definition(BATCH_DEFINITION)
    except KeyError:
        return asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)


def _build_docs(context, run_id, suite_names: list[str]) -> Path | None:
    """Render this run's validation results and suites, then the index; return index.html."""
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    started = time.time()
    try:
        ran = [key for key in context.validation_results_store.list_keys() if key.run_id == run_id]
        suites = [ExpectationSuiteIdentifier(name=name) for name in suite_names]
        sites = context.build_data_docs(resource_identifiers=[*ran, *suites])
    except Exception as exc:  # docs are a report; a failure to render them must not fail the run
        log.warning("GX Data Docs not built: %s: %s", type(exc).__name__, exc)
        return None
    for url in sites.values():
        parsed = urlparse(url)
        index = Path(unquote(parsed.path)) if parsed.scheme == "file" else None
        if index is not None and index.is_file():
            from checks.web_assets import vendor_site

            try:  # the pages' CDN assets from the site itself, so they render offline
                vendor_site(index.parent, since=started)
            except OSError as exc:
                log.warning("GX Data Docs keep their CDN links: %s", exc)
            return index
    log.warning("GX Data Docs not built: no local index.html among %s", sites)
    return None


def _safe_run_name(run_name: str) -> str:
    """GX uses the run name as a folder name."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", run_name).strip("._") or "run"


def _table_result(table: str, arrow: pa.Table, outcome) -> TableResult:
    from checks.gx_schema import EXPECTATION

    failures: list[Failure] = []
    for r in outcome.results:
        if r.success:
            continue
        if r.expectation_config.type == EXPECTATION and not _error_message(r.exception_info):
            failures += _schema_failures(r)
        else:
            failures.append(_failure(r, set(arrow.column_names)))
    return TableResult(table=table, passed=bool(outcome.success), evaluated=len(outcome.results),
                       failures=failures, rows=arrow.num_rows)


def _failure(result, present: set[str]) -> Failure:
    config = result.expectation_config
    kwargs = {k: _json_safe(v) for k, v in config.kwargs.items() if k != "batch_id" and v is not None}
    error = _error_message(result.exception_info)
    if error is not None:  # GX's own message for an absent column is an IndexError or a KeyError
        absent = [c for c in (config.kwargs.get("column"), *(config.kwargs.get("column_list") or []),
                              config.kwargs.get("column_A"), config.kwargs.get("column_B"))
                  if c and c not in present]
        if absent:
            error = f"column {', '.join(map(repr, absent))} absent ({error})"
    details = result.result or {}
    return Failure(
        expectation=config.type,
        column=config.kwargs.get("column"),
        kwargs=kwargs,
        unexpected_count=details.get("unexpected_count"),
        sample=[] if error else _sample(details),
        error=error,
    )


def _schema_failures(result) -> list[Failure]:
    """A broken schema as one failure per fault: the column set (its missing and unexpected
    columns), then each column of another kind (the kind found) and each column with nulls."""
    from checks.gx_schema import EXPECTATION

    details = (result.result or {}).get("details") or {}
    kinds = result.expectation_config.kwargs.get("columns") or {}
    out = []
    if details.get("missing") or details.get("unexpected"):
        out.append(Failure(EXPECTATION, None, {"check": "columns", "columns": list(kinds)}, None,
                           [f"missing: {c}" for c in details.get("missing") or []]
                           + [f"unexpected: {c}" for c in details.get("unexpected") or []]))
    for column, found in (details.get("kinds") or {}).items():
        out.append(Failure(EXPECTATION, column, {"check": "kind", "type_list": list(kinds.get(column, []))}, None, [found]))
    for column, count in (details.get("nulls") or {}).items():
        out.append(Failure(EXPECTATION, column, {"check": "not_null"}, int(count), [None]))
    return out


def _error_message(info) -> str | None:
    """The exception message(s) of a result GX could not evaluate. `exception_info` is a flat
    dict for an expectation that raised, or a dict of ExceptionInfo per failed metric."""
    if not info:
        return None
    if isinstance(info, dict) and "raised_exception" in info:
        return (info.get("exception_message") or "raised an exception") if info["raised_exception"] else None
    messages: list[str] = []
    items = info.values() if isinstance(info, dict) else info if isinstance(info, (list, set, tuple)) else [info]
    for item in items:
        if isinstance(item, (dict, list, set, tuple)):
            message = _error_message(item)
        elif getattr(item, "raised_exception", False):
            message = getattr(item, "exception_message", None) or "raised an exception"
        else:
            message = None
        if message and message not in messages:
            messages.append(message)
    return "; ".join(messages) or None


def _sample(details: dict) -> list:
    """Up to SAMPLE_SIZE distinct offending values, JSON-safe."""
    if "partial_unexpected_list" in details:
        values = details["partial_unexpected_list"] or []
    elif "observed_value" in details:  # aggregate expectations
        values = [details["observed_value"]]
    else:
        values = []
    out, seen = [], set()
    for value in values:
        value = _json_safe(value)
        key = json.dumps(value, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(value)
        if len(out) == SAMPLE_SIZE:
            break
    return out


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return _json_safe(item())
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        return _json_safe(tolist())
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    from great_expectations.expectations.row_conditions import Condition

    return repr(value) if isinstance(value, Condition) else str(value)  # a row condition reads as its repr
