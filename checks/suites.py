"""Great Expectations suites for every published table, built in code, and their validation.

Plain module (no Dagster): `build_suite(table)` returns the table's GX 1.x `ExpectationSuite`;
`validate_tables(tables, docs_root, run_name)` validates Arrow tables against them and renders
GX Data Docs under `docs_root`. dagster-ge is pinned to GX < 1.0, so GX is called directly.

How the data reaches GX (GX's DuckDB SQL path is unreliable, so frames are validated in pandas):

- Arrow → pandas with one fixed type mapping (`to_frame`): integers → pandas nullable `Int*`,
  floats → `Float*`, booleans → `boolean`, strings → `StringDtype()` (NA-backed), lists → object
  columns of Python lists. So a null int stays an int column (plain `to_pandas` would turn it into
  float64) and every column's pandas dtype says exactly what its Arrow type was.
- Types are checked per *kind* (string, integer, 64-bit integer, float, boolean, list) with
  `expect_column_values_to_be_in_type_list`, naming the pandas extension dtypes above; a width
  change (int32 → int64) is not a contract change, a kind change is. `phash`/`dhash` must be
  64-bit. List columns are object columns, where GX checks every value's Python type instead.
- Human ratings (MMRB2 `human_annotations`, JSON text) are checked without derived columns:
  `expect_column_values_to_match_json_schema` with a row condition per task family — for
  t2i/edit/interleaved a list of exactly three integers within `limits.ratings`, for reasoning an
  object of `response_a_ratings`/`response_b_ratings` lists of "A"/"B"/"C". The offending JSON text
  is the sample.
- Conditional rules (image_name where kind = image, width where status = ok, ...) use GX 1.x
  row conditions (`Column("kind") == "image"`), which the pandas engine runs as `DataFrame.query`.

Data Docs come from a file-backed GX context at `docs_root/gx` (analytics and progress bars off
in its config); suites and validation definitions are added with `add_or_update`, so one
`docs_root` serves many runs and its index lists them all.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote, urlparse

import pyarrow as pa

from pipeline.dedupe.verify import KINDS as DEDUPE_KINDS

if TYPE_CHECKING:  # GX takes seconds to import: only validate_tables/build_suite pay for it.
    import great_expectations as gx
    import pandas as pd

log = logging.getLogger(__name__)


SUITE_TABLES: tuple[str, ...] = (
    "mmrb2_pairs",
    "mmrb2_response_items",
    "mmrb2_prompt_items",
    "mmrb2_images",
    "prm_samples",
    "prm_steps",
    "prm_images",
    "prm_label_stats",
    "image_hashes",
    "duplicate_clusters",
    "contamination",
    "quarantine",
)

DATASOURCE = "rewardhouse"
BATCH_DEFINITION = "whole_table"
SAMPLE_SIZE = 5
_PARTIAL_UNEXPECTED = 20  # asked of GX, then de-duplicated down to SAMPLE_SIZE

MMRB2_TASKS = ("t2i", "edit", "interleaved", "reasoning")
RATED_TASKS = ("t2i", "edit", "interleaved")  # three 1..6 human ratings; reasoning has A/B/C lists
QUARANTINE_STAGES = ("read", "parse", "parse_prompts", "unpack", "decode", "resolve", "export", "hash")
SHA256_HEX = r"^[0-9a-f]{64}$"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
HASH_BITS = 64

# Column kinds and the pandas dtypes `to_frame` gives them (names as GX's type list resolves them).
STRING, INT, INT64, FLOAT, BOOL, LIST = "string", "int", "int64", "float", "bool", "list"
_TYPE_LISTS: dict[str, list[str]] = {
    STRING: ["StringDtype"],
    INT: ["Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype"],
    INT64: ["Int64Dtype"],
    FLOAT: ["Float32Dtype", "Float64Dtype"],
    BOOL: ["BooleanDtype"],
    LIST: ["list"],
}

# The README "Tables" contract: every column and its kind. The column set is matched exactly.
COLUMNS: dict[str, dict[str, str]] = {
    "mmrb2_pairs": {
        "pair_id": STRING, "task": STRING, "prompt_source": STRING, "prompt_metadata": STRING,
        "model_a": STRING, "model_b": STRING, "chosen": STRING, "human_annotations": STRING,
        "n_images_a": INT, "n_images_b": INT, "n_texts_a": INT, "n_texts_b": INT,
        "has_prompt_content": BOOL,
    },
    "mmrb2_response_items": {
        "pair_id": STRING, "side": STRING, "position": INT, "kind": STRING, "text": STRING, "image_name": STRING,
    },
    "mmrb2_prompt_items": {"pair_id": STRING, "position": INT, "kind": STRING, "text": STRING, "image_name": STRING},
    "mmrb2_images": {
        "image_name": STRING, "sha256": STRING, "bytes": INT, "width": INT, "height": INT, "format": STRING,
        "status": STRING, "referenced": BOOL, "zip_entry": STRING,
    },
    "prm_samples": {
        "sample_id": STRING, "source": STRING, "question": STRING, "image_refs": LIST, "n_steps": INT,
        "n_positive": INT, "n_negative": INT, "first_negative_step": INT, "message_format": STRING,
        "answer": STRING, "row_index": INT, "image_clusters": LIST, "is_duplicate": BOOL,
        "duplicate_of": STRING, "is_contaminated": BOOL, "in_export": BOOL,
    },
    "prm_steps": {
        "sample_id": STRING, "step_index": INT, "text": STRING, "label": STRING, "mc_score": FLOAT,
        "num_mc_correct": INT, "num_mc_total": INT,
    },
    "prm_images": {
        "image_key": STRING, "origin": STRING, "sha256": STRING, "bytes": INT, "width": INT, "height": INT,
        "format": STRING, "status": STRING, "store_path": STRING, "problem": STRING,
    },
    "prm_label_stats": {
        "scope": STRING, "source": STRING, "samples": INT, "steps": INT, "positive_rate": FLOAT,
        "steps_min": INT, "steps_p25": INT, "steps_median": INT, "steps_p75": INT, "steps_max": INT,
        "steps_mean": FLOAT, "steps_histogram": STRING, "samples_with_negative": INT,
        "first_negative_last_share": FLOAT, "first_negative_last_share_of_negative": FLOAT,
    },
    "image_hashes": {
        "dataset": STRING, "image_key": STRING, "sha256": STRING, "phash": INT64, "dhash": INT64,
        "width": INT, "height": INT, "bytes": INT,
    },
    "duplicate_clusters": {
        "cluster_id": STRING, "dataset": STRING, "image_key": STRING, "is_canonical": BOOL,
        "distance_to_canonical": INT, "kind": STRING, "score": FLOAT,
    },
    "contamination": {"train_image_key": STRING, "eval_image_key": STRING, "distance": INT, "kind": STRING,
                      "score": FLOAT},
    "quarantine": {"dataset": STRING, "stage": STRING, "record_key": STRING, "reason": STRING},
}
assert set(COLUMNS) == set(SUITE_TABLES)


@dataclass(frozen=True)
class Limits:
    """Settings the suites read; the caller passes them from the project settings."""

    max_steps: int = 16
    ratings: tuple[int, int] = (1, 6)


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


def build_suite(table: str, limits: Limits = Limits()) -> gx.ExpectationSuite:
    """The expectation suite of one published table (named after the table)."""
    import great_expectations as gx

    if table not in COLUMNS:
        raise KeyError(f"no suite for table {table!r}; suites exist for {', '.join(SUITE_TABLES)}")
    # Expectations go in through the constructor: `suite.add_expectation` writes the whole suite
    # to the store of the current context on every call once a suite of that name is stored.
    return gx.ExpectationSuite(
        name=table,
        expectations=_schema_expectations(table) + _RULES[table](_Rules(), limits),
        meta={"rewardhouse_limits": {"max_steps": limits.max_steps, "ratings": list(limits.ratings)}},
    )


def _schema_expectations(table: str) -> list:
    import great_expectations.expectations as gxe

    columns = COLUMNS[table]
    out = [gxe.ExpectTableColumnsToMatchSet(column_set=list(columns), exact_match=True,
                                            notes="README 'Tables' contract: columns may be added there, never renamed")]
    out += [gxe.ExpectColumnValuesToBeInTypeList(column=c, type_list=_TYPE_LISTS[kind]) for c, kind in columns.items()]
    return out


class _Rules:
    """Short constructors for the expectations the table rules use (`when` = a row condition)."""

    def __init__(self) -> None:
        import great_expectations.expectations as gxe
        from great_expectations.expectations.row_conditions import Column

        self.gxe, self.col = gxe, Column

    def not_null(self, *columns: str, when=None) -> list:
        return [self.gxe.ExpectColumnValuesToNotBeNull(column=c, row_condition=when) for c in columns]

    def null(self, column: str, when=None) -> list:
        return [self.gxe.ExpectColumnValuesToBeNull(column=column, row_condition=when)]

    def unique(self, *columns: str) -> list:
        if len(columns) == 1:
            return [self.gxe.ExpectColumnValuesToBeUnique(column=columns[0])]
        return [self.gxe.ExpectCompoundColumnsToBeUnique(column_list=list(columns))]

    def in_set(self, column: str, values, when=None) -> list:
        return [self.gxe.ExpectColumnValuesToBeInSet(column=column, value_set=list(values), row_condition=when)]

    def between(self, column: str, lo=None, hi=None, when=None) -> list:
        return [self.gxe.ExpectColumnValuesToBeBetween(column=column, min_value=lo, max_value=hi, row_condition=when)]

    def sha256(self, column: str) -> list:
        return [self.gxe.ExpectColumnValuesToMatchRegex(column=column, regex=SHA256_HEX)]

    def json(self, *columns: str) -> list:
        return [self.gxe.ExpectColumnValuesToBeJsonParseable(column=c) for c in columns]

    def json_schema(self, column: str, schema: dict, when=None, notes: str | None = None) -> list:
        return [self.gxe.ExpectColumnValuesToMatchJsonSchema(column=column, json_schema=schema, row_condition=when,
                                                              notes=notes)]


def _mmrb2_pairs(r: _Rules, limits: Limits) -> list:
    lo, hi = limits.ratings
    task = r.col("task")
    three_ratings = {"type": "array", "minItems": 3, "maxItems": 3,
                     "items": {"type": "integer", "minimum": lo, "maximum": hi}}
    letters = {"type": "array", "items": {"enum": ["A", "B", "C"]}}
    reasoning = {"type": "object", "required": ["response_a_ratings", "response_b_ratings"],
                 "properties": {"response_a_ratings": letters, "response_b_ratings": letters}}
    return [
        *r.not_null("pair_id", "task", "chosen", "prompt_metadata", "human_annotations", "has_prompt_content",
                    "n_images_a", "n_images_b", "n_texts_a", "n_texts_b"),
        *r.unique("pair_id"),
        *r.in_set("task", MMRB2_TASKS),
        *r.in_set("chosen", ("A", "B")),
        *[e for c in ("n_images_a", "n_images_b", "n_texts_a", "n_texts_b") for e in r.between(c, 0)],
        *r.json("prompt_metadata", "human_annotations"),
        *r.json_schema("human_annotations", three_ratings, when=task.is_in(RATED_TASKS),
                       notes=f"t2i/edit/interleaved: three human ratings, integers within {lo}..{hi}"),
        *r.json_schema("human_annotations", reasoning, when=task == "reasoning",
                       notes="reasoning: response_a_ratings / response_b_ratings, lists of A/B/C"),
    ]


def _items(r: _Rules, key: tuple[str, ...]) -> list:
    kind = r.col("kind")
    return [
        *r.not_null(*key, "kind"),
        *r.unique(*key),
        *r.between("position", 0),
        *r.in_set("kind", ("text", "image")),
        *r.not_null("image_name", when=kind == "image"),
        *r.not_null("text", when=kind == "text"),
        *r.null("image_name", when=kind == "text"),
        *r.null("text", when=kind == "image"),
    ]


def _mmrb2_response_items(r: _Rules, limits: Limits) -> list:
    return [*_items(r, ("pair_id", "side", "position")), *r.in_set("side", ("A", "B"))]


def _mmrb2_prompt_items(r: _Rules, limits: Limits) -> list:
    return _items(r, ("pair_id", "position"))


def _mmrb2_images(r: _Rules, limits: Limits) -> list:
    status = r.col("status")
    return [
        *r.not_null("image_name", "status", "referenced"),
        *r.unique("image_name"),
        *r.in_set("status", ("ok", "corrupt", "missing")),
        *r.sha256("sha256"),
        *r.not_null("sha256", "bytes", when=status.is_in(["ok", "corrupt"])),
        *r.not_null("width", "height", when=status == "ok"),
        *r.between("width", 1, when=status == "ok"),
        *r.between("height", 1, when=status == "ok"),
        *r.between("bytes", 0),
    ]


def _prm_samples(r: _Rules, limits: Limits) -> list:
    return [
        *r.not_null("sample_id", "n_steps", "n_positive", "n_negative", "message_format", "row_index",
                    "is_duplicate", "is_contaminated", "in_export"),
        *r.unique("sample_id"),
        *r.between("n_steps", 1, limits.max_steps),
        *r.between("n_positive", 0),
        *r.between("n_negative", 0),
        *r.between("first_negative_step", 0, limits.max_steps - 1),
        *r.between("row_index", 0),
        *r.in_set("message_format", ("internvl", "chat", "raw")),
        *r.not_null("duplicate_of", when=r.col("is_duplicate") == True),  # noqa: E712 (a Condition, not a test)
        r.gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="n_steps", column_B="first_negative_step",
                                                      ignore_row_if="either_value_is_missing"),
    ]


def _prm_steps(r: _Rules, limits: Limits) -> list:
    return [
        *r.not_null("sample_id", "step_index", "label", "text"),
        *r.unique("sample_id", "step_index"),
        *r.between("step_index", 0, limits.max_steps - 1),
        *r.in_set("label", ("+", "-")),
        *r.between("mc_score", 0, 1),
        *r.between("num_mc_correct", 0),
        *r.between("num_mc_total", 0),
    ]


def _prm_images(r: _Rules, limits: Limits) -> list:
    status = r.col("status")
    return [
        *r.not_null("image_key", "origin", "status"),
        *r.unique("image_key"),
        *r.in_set("origin", ("embedded", "path")),
        *r.in_set("status", ("ok", "corrupt", "unresolved")),
        *r.sha256("sha256"),
        *r.not_null("sha256", "bytes", when=status.is_in(["ok", "corrupt"])),
        *r.not_null("width", "height", when=status == "ok"),
        *r.between("width", 1, when=status == "ok"),
        *r.between("height", 1, when=status == "ok"),
        *r.between("bytes", 0),
    ]


def _prm_label_stats(r: _Rules, limits: Limits) -> list:
    share = ("positive_rate", "first_negative_last_share", "first_negative_last_share_of_negative")
    return [
        *r.not_null("scope", "source", "samples", "steps", "positive_rate"),
        *r.unique("source"),
        *r.in_set("scope", ("source", "overall")),
        *[e for c in share for e in r.between(c, 0, 1)],
        *r.between("samples", 1),
        *r.between("steps", 0),
        *r.between("samples_with_negative", 0),
        *r.between("steps_min", 1, limits.max_steps),
        *r.between("steps_max", 1, limits.max_steps),
        *r.json("steps_histogram"),
    ]


def _image_hashes(r: _Rules, limits: Limits) -> list:
    return [
        *r.not_null("dataset", "image_key", "sha256", "phash", "dhash", "width", "height"),
        *r.unique("dataset", "image_key"),
        *r.in_set("dataset", ("mmrb2", "visualprm")),
        *r.between("phash", INT64_MIN, INT64_MAX),
        *r.between("dhash", INT64_MIN, INT64_MAX),
        *r.sha256("sha256"),
        *r.between("width", 1),
        *r.between("height", 1),
        *r.between("bytes", 0),
    ]


def _duplicate_clusters(r: _Rules, limits: Limits) -> list:
    canonical = r.col("is_canonical")
    return [
        *r.not_null("cluster_id", "dataset", "image_key", "is_canonical", "distance_to_canonical"),
        *r.unique("dataset", "image_key"),
        *r.in_set("dataset", ("mmrb2", "visualprm")),
        *r.in_set("kind", DEDUPE_KINDS),
        *r.between("distance_to_canonical", 0, HASH_BITS),
        *r.null("kind", when=canonical == True),  # noqa: E712
        *r.not_null("kind", when=canonical == False),  # noqa: E712
        *r.null("score", when=canonical == True),  # noqa: E712
        *r.not_null("score", when=canonical == False),  # noqa: E712
        *r.between("score", -1.0, 1.0),
    ]


def _contamination(r: _Rules, limits: Limits) -> list:
    return [
        *r.not_null("train_image_key", "eval_image_key", "distance", "kind", "score"),
        *r.unique("train_image_key", "eval_image_key"),
        *r.between("distance", 0, HASH_BITS),
        *r.in_set("kind", DEDUPE_KINDS),
        *r.between("score", -1.0, 1.0),
    ]


def _quarantine(r: _Rules, limits: Limits) -> list:
    return [
        *r.not_null("dataset", "stage", "record_key", "reason"),
        *r.in_set("dataset", ("mmrb2", "visualprm")),
        *r.in_set("stage", QUARANTINE_STAGES),
    ]


_RULES = {
    "mmrb2_pairs": _mmrb2_pairs,
    "mmrb2_response_items": _mmrb2_response_items,
    "mmrb2_prompt_items": _mmrb2_prompt_items,
    "mmrb2_images": _mmrb2_images,
    "prm_samples": _prm_samples,
    "prm_steps": _prm_steps,
    "prm_images": _prm_images,
    "prm_label_stats": _prm_label_stats,
    "image_hashes": _image_hashes,
    "duplicate_clusters": _duplicate_clusters,
    "contamination": _contamination,
    "quarantine": _quarantine,
}


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


def validate_tables(
    tables: dict[str, pa.Table],
    docs_root: Path,
    run_name: str,
    limits: Limits = Limits(),
    between: Callable[[], None] = lambda: None,
) -> tuple[dict[str, TableResult], Path | None]:
    """Validate every table of SUITE_TABLES present in `tables` (others are skipped or ignored),
    render Data Docs under `docs_root`, and return the results and the Data Docs index.html
    (None, with a warning logged, when the docs could not be built). `between()` is called before
    each table and before the docs (where a run may stop)."""
    docs_root = Path(docs_root)
    started = time.perf_counter()
    context, docs_problem = _open_context(docs_root)
    import great_expectations as gx

    run_id = gx.RunIdentifier(run_name=_safe_run_name(run_name))
    datasource = _datasource(context)
    results: dict[str, TableResult] = {}
    for table in SUITE_TABLES:
        if table not in tables:
            continue
        between()
        arrow = tables[table]
        suite = _store_suite(context, build_suite(table, limits))
        definition = _store_validation_definition(context, table, _batch_definition(datasource, table), suite)
        outcome = definition.run(
            batch_parameters={"dataframe": to_frame(arrow)},
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": _PARTIAL_UNEXPECTED},
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

    try:
        stored = context.validation_definitions.get(name)
    except (DataContextError, LookupError, ValueError):  # absent, or stored against a replaced suite
        stored = None
    if stored is not None and stored.suite.id == suite.id and stored.data.id == batch_definition.id:
        return stored
    return context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=name, data=batch_definition, suite=suite)
    )


def _datasource(context):
    try:
        return context.data_sources.get(DATASOURCE)
    except KeyError:
        return context.data_sources.add_pandas(DATASOURCE)


def _batch_definition(datasource, table: str):
    try:
        asset = datasource.get_asset(table)
    except LookupError:
        asset = datasource.add_dataframe_asset(table)
    try:
        return asset.get_batch_definition(BATCH_DEFINITION)
    except KeyError:
        return asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)


def _build_docs(context, run_id, suite_names: list[str]) -> Path | None:
    """Render this run's validation results and suites, then the index; return index.html."""
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

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
            return index
    log.warning("GX Data Docs not built: no local index.html among %s", sites)
    return None


def _safe_run_name(run_name: str) -> str:
    """GX uses the run name as a folder name."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", run_name).strip("._") or "run"


def _table_result(table: str, arrow: pa.Table, outcome) -> TableResult:
    failures = [_failure(r, set(arrow.column_names)) for r in outcome.results if not r.success]
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
    mismatched = (details.get("details") or {}).get("mismatched")
    if mismatched:  # expect_table_columns_to_match_set
        values = [f"missing: {c}" for c in mismatched.get("missing") or []]
        values += [f"unexpected: {c}" for c in mismatched.get("unexpected") or []]
    elif "partial_unexpected_list" in details:
        values = details["partial_unexpected_list"] or []
    elif "observed_value" in details:  # aggregate expectations, e.g. a column's type
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
