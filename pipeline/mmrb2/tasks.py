"""MMRB2's image work split by judgement task: the partitions of `mmrb2_task_images`.

Each task owns the images its pairs reference (response images, and the prompt images the zip
ships for edit pairs). What no pair references, and faults of the archive itself, are left to the
step that combines the tasks (`unreferenced`). The parts are disjoint and together cover exactly
what one inventory of the whole zip covers, so the combined table does not depend on the split.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.settings import MMRB2_TASKS

PARTITION_KEYS = MMRB2_TASKS


@dataclass(frozen=True)
class TaskImages:
    """The names one partition inventories: `referenced` must be in the zip, `optional` may be."""

    referenced: frozenset[str]
    optional: frozenset[str]

    def digest(self) -> str:
        blob = json.dumps([sorted(self.referenced), sorted(self.optional)]).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _names_by_pair(items: pa.Table) -> dict[str, set[str]]:
    images = items.filter(pc.is_valid(items["image_name"]))
    out: dict[str, set[str]] = {}
    for pair_id, name in zip(images["pair_id"].to_pylist(), images["image_name"].to_pylist()):
        out.setdefault(pair_id, set()).add(name)
    return out


def images_by_task(pairs: pa.Table, response_items: pa.Table, prompt_items: pa.Table) -> dict[str, TaskImages]:
    """Every task → its names. A name two tasks share belongs to the first task in MMRB2_TASKS
    order (and a prompt image that is also a response image stays a response image), so no image
    is inventoried twice."""
    task_of = dict(zip(pairs["pair_id"].to_pylist(), pairs["task"].to_pylist()))
    responses, prompts = _names_by_pair(response_items), _names_by_pair(prompt_items)
    claimed: set[str] = set()
    out: dict[str, TaskImages] = {}
    for task in MMRB2_TASKS:
        pair_ids = [p for p, t in task_of.items() if t == task]
        referenced = {n for p in pair_ids for n in responses.get(p, ())} - claimed
        claimed |= referenced
        out[task] = TaskImages(frozenset(referenced), frozenset())
    for task in MMRB2_TASKS:
        pair_ids = [p for p, t in task_of.items() if t == task]
        optional = {n for p in pair_ids for n in prompts.get(p, ())} - claimed
        claimed |= optional
        out[task] = TaskImages(out[task].referenced, frozenset(optional))
    return out


def owned_by_any(parts: dict[str, TaskImages]) -> TaskImages:
    """Every name some task owns: what the `unreferenced` part leaves out."""
    return TaskImages(frozenset().union(*(p.referenced for p in parts.values())),
                      frozenset().union(*(p.optional for p in parts.values())))
