"""The registry: every dataset the pipeline knows, each described once by its DatasetSpec
(pipeline/spec.py). Adding a dataset is one line here (and its own package, assets and tests)."""

from __future__ import annotations

from pipeline.mmrb2.spec import SPEC as MMRB2
from pipeline.rlaifv.spec import SPEC as RLAIFV
from pipeline.spec import EVAL, TRAIN, DatasetSpec
from pipeline.settings import QualitySettings
from pipeline.visualprm.spec import SPEC as VISUALPRM
from pipeline.vlrb.spec import SPEC as VLRB

DATASETS: tuple[DatasetSpec, ...] = (MMRB2, VISUALPRM, VLRB, RLAIFV)


def names() -> tuple[str, ...]:
    return tuple(d.name for d in DATASETS)


def get(name: str) -> DatasetSpec:
    for d in DATASETS:
        if d.name == name:
            return d
    raise KeyError(f"unknown dataset {name!r}; known: {', '.join(names())}")


def eval_sets() -> tuple[str, ...]:
    return tuple(d.name for d in DATASETS if d.role == EVAL)


def train_sets() -> tuple[str, ...]:
    return tuple(d.name for d in DATASETS if d.role == TRAIN)


def table_contracts(quality: QualitySettings = QualitySettings()) -> dict:
    """Every dataset's table contracts, then the shared tables' (dedupe decisions, quarantine)."""
    from pipeline.shared_tables import contracts as shared

    out = {}
    for d in DATASETS:
        out.update(d.contracts(quality))
    out.update(shared(quality, names(), eval_sets(), train_sets(), quarantine_stages()))
    return out


def quarantine_stages() -> tuple[str, ...]:
    from pipeline.quarantine import FILE_STAGE

    stages = [s for d in DATASETS for s in (*d.record_stages, *d.image_stages)] + ["export", FILE_STAGE]
    return tuple(dict.fromkeys(stages))
