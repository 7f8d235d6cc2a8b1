"""The dataset contract: what the pipeline needs to know about one dataset, in one description.

Each dataset's package (`pipeline/<name>/`) holds its `SPEC`, its source, parser, inventory,
sample generator and table contracts; its Dagster assets (and checks, if any) are thin glue in
`assets/<name>.py` (`checks/<name>.py`). `pipeline/datasets.py` lists the specs, and everything
that loops over datasets reads that list: the code location, `image_hashes`, contamination (every
eval set against every train set), the release candidate's inputs, the quarantine budget, the
referential rules, the GX value sets, upstream pins and the change sensor, the manifest and
`rewardhouse releases`.

Plain Python: no Dagster. Callables are named as "module:function" and imported when used, so
reading the registry stays cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from pipeline.contract import TableContract
from pipeline.settings import QualitySettings

EVAL, TRAIN = "eval", "train"


@dataclass(frozen=True)
class Upstream:
    """One upstream repository the `hf` source reads, pinned to a revision."""

    repo: str  # "owner/name"
    kind: str  # "hf" (a Hugging Face dataset) | "github"
    files: str  # which files, as a user reads it (a glob, or a list)
    pin_setting: str | None = None  # a resource field that pins a run to a revision; None: `hf_revisions[repo]`
    select: Callable[[list[str]], list[str]] | None = None  # Hub files -> the ones the source downloads
    pinned: str | None = None  # a revision fixed in code (GitHub annotation commit), if any


@dataclass(frozen=True)
class GateRule:
    """A rule of the release gate that a dataset brings: a blocking check on `release_candidate`
    named `name` (its result lands in `quality_results` under that name)."""

    name: str
    description: str
    run: str  # "module:function(con, quality: QualitySettings) -> pipeline.gate.CheckOutcome" over the candidate's tables


@dataclass(frozen=True)
class DatasetSpec:
    name: str  # the value of `dataset` in shared tables (image_hashes, quarantine, ...)
    title: str
    role: str  # EVAL | TRAIN
    licence: str
    upstream: tuple[Upstream, ...]
    local_layout: tuple[str, ...]  # what `local --path DIR` looks for under DIR
    contracts: Callable[[QualitySettings], dict[str, TableContract]]  # its published tables
    record_table: str  # one row per upstream record (pair, sample)
    record_noun: str  # what a record is called ("pairs", "samples")
    image_table: str  # its image inventory
    record_stages: tuple[str, ...]  # quarantine stages that refuse records
    image_stages: tuple[str, ...]  # quarantine stages that refuse images
    fetch: str  # "module:function(settings, layout, log) -> RawSnapshot | None"
    sample: str  # "module:function(root)": writes the embedded sample in the upstream layout
    # "module:function(root) -> {table: pa.Table}": the record tables its parser makes of the
    # embedded sample (written under root), record contract enforced. Tests take their cases from
    # it (every record-level rule of every contract is broken once on these rows).
    sample_records: str
    assets: str  # the module of its Dagster assets
    raw_asset: str  # the asset whose value is its RawSnapshot (as a dict) or None
    staged_assets: tuple[str, ...]  # assets whose `tables` go into the release
    image_asset: str  # the asset whose `internal.image_hashes` holds its image signatures
    checks: str | None = None  # the module of its own asset checks
    # A train set's training export: the asset whose value is a staging.Export (its tables, the
    # files to publish under exports/, the images they link, what it left out); any number of
    # train sets each bring one, and the release publishes them all.
    export_asset: str | None = None
    # Its own release-gate rules (checks on the candidate) and drift signals: (name, SQL over the
    # candidate's tables giving (category, count)), compared with the previous release by PSI.
    gate: tuple[GateRule, ...] = ()
    drift: tuple[tuple[str, str], ...] = ()
    integrity: tuple[tuple[str, str], ...] = ()  # referential rules: (name, SQL returning offenders)
    # The review page (pipeline/review): "module:function" reading chosen images' bytes, and SQL over
    # the release's tables giving (image_key, record, in_export) for the records that use an image.
    review_images: str | None = None
    image_records: str | None = None
    # Leaks per record (pipeline/decontam): the asset whose staged tables (published or internal)
    # hold the records; SQL over them giving the text that identifies a record, as (record, text),
    # and the images a record uses, as (image_key, record). A dataset without a text is compared
    # by its images only.
    record_asset: str = ""
    record_text: str | None = None
    record_images: str | None = None
    description: str = ""

    def tables(self, quality: QualitySettings = QualitySettings()) -> dict[str, TableContract]:
        return self.contracts(quality)

    def fetcher(self) -> Callable:
        return load(self.fetch)


def load(ref: str):
    """The object a "module:name" reference names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
