"""The release gate's bookkeeping, shared by the candidate asset and its checks (no Dagster): which
checks must have judged a candidate, and their outcome records in the candidate's folder."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.datasets import DATASETS, table_contracts
from pipeline.gate import CheckOutcome
from pipeline.staging import Candidate, write_text_atomic

CHECKS_DIR = "checks"

# Published tables with a GX suite: every table contract of the registry (checks/suites.py builds
# the suites; the names are read here so loading the code location does not import GX).
GX_TABLES = tuple(table_contracts())
# The gate's rules: those of every release, with each dataset's own (DatasetSpec.gate) after the first.
DATASET_RULES = tuple(rule.name for d in DATASETS for rule in d.gate)
RULE_CHECKS = ("referential_integrity", *DATASET_RULES, "drift_vs_previous", "dedupe_sanity", "quarantine_budget",
               "upstream_files")
REQUIRED_CHECKS = tuple(f"gx_{t}" for t in GX_TABLES) + RULE_CHECKS


def write_outcome(candidate: Candidate, outcome: CheckOutcome) -> None:
    folder = Path(candidate.dir) / CHECKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / f"{outcome.check}.json", outcome.to_json())


def read_outcomes(candidate: Candidate) -> dict[str, dict]:
    folder = Path(candidate.dir) / CHECKS_DIR
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
