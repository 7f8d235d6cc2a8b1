"""MMRB2 annotation files → pairs, response items and prompt items (plain Python, no Dagster).

The upstream files are `{"pairs": [...]}` with a pair per judgement task; see ../shared/SOURCES.md.
Anything that does not fit the known shape becomes a Rejection, never an exception. A file that
cannot be used is refused whole (stage `file`): unreadable, not that shape, an empty "pairs" list,
or (`refused_files`, once the record contract has run) not one usable pair.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.quarantine import FILE_STAGE, Rejection, whole_file_faults

DATASET = "mmrb2"
SIDES = (("A", "response_a"), ("B", "response_b"))

PAIRS_SCHEMA = pa.schema(
    [
        ("pair_id", pa.string()),
        ("task", pa.string()),
        ("prompt_source", pa.string()),
        ("prompt_metadata", pa.string()),
        ("model_a", pa.string()),
        ("model_b", pa.string()),
        ("chosen", pa.string()),
        ("human_annotations", pa.string()),
        ("n_images_a", pa.int32()),
        ("n_images_b", pa.int32()),
        ("n_texts_a", pa.int32()),
        ("n_texts_b", pa.int32()),
        ("has_prompt_content", pa.bool_()),
    ]
)

ITEMS_SCHEMA = pa.schema(
    [
        ("pair_id", pa.string()),
        ("side", pa.string()),
        ("position", pa.int32()),
        ("kind", pa.string()),
        ("text", pa.string()),
        ("image_name", pa.string()),
    ]
)

PROMPT_ITEMS_SCHEMA = pa.schema(
    [
        ("pair_id", pa.string()),
        ("position", pa.int32()),
        ("kind", pa.string()),
        ("text", pa.string()),
        ("image_name", pa.string()),
    ]
)


def _json_text(value) -> str:
    # Types are preserved (an int id stays an int, a list category stays a list).
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def _not_unicode(value) -> str | None:
    """A reason when some string in `value` cannot be stored as UTF-8 (a lone surrogate escape
    such as "\\ud800" in the JSON), else None."""
    try:
        _json_text(value).encode("utf-8")
    except UnicodeEncodeError:
        return "text holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), not valid Unicode"
    return None


@dataclass
class ParsedMMRB2:
    pairs: list[dict] = field(default_factory=list)
    items: list[dict] = field(default_factory=list)
    prompt_items: list[dict] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    # (file name, its task or None for the prompt file, entries in its "pairs" list) per file read
    read: list[tuple[str, str | None, int]] = field(default_factory=list)

    def tables(self) -> dict[str, pa.Table]:
        return {
            "mmrb2_pairs": pa.Table.from_pylist(self.pairs, schema=PAIRS_SCHEMA),
            "mmrb2_response_items": pa.Table.from_pylist(self.items, schema=ITEMS_SCHEMA),
            "mmrb2_prompt_items": pa.Table.from_pylist(self.prompt_items, schema=PROMPT_ITEMS_SCHEMA),
        }

    def refused_files(self, pairs: pa.Table) -> list[Rejection]:
        """Stage-`file` rows for the files read that held no pairs or gave none to `pairs` (the
        mmrb2_pairs table once the record contract has run): a task file is judged by its pairs,
        the prompt file by the pairs that kept its prompt content."""
        per_task = {c["values"]: c["counts"] for c in pc.value_counts(pairs["task"]).to_pylist()}
        with_prompt = pc.sum(pairs["has_prompt_content"]).as_py() or 0
        counts = [(name, n, per_task.get(task, 0) if task is not None else with_prompt) for name, task, n in self.read]
        return whole_file_faults(DATASET, counts, "pairs")

    def response_images(self) -> set[str]:
        """Images the responses show: every one of them must be in the image zip."""
        return {i["image_name"] for i in self.items if i["image_name"] is not None}

    def prompt_images(self) -> set[str]:
        """Prompt images: only some ship in the zip (new_images/, synthetic_images/, stored flat);
        the rest come from the 21 upstream benchmarks, so their absence is not a fault."""
        return {i["image_name"] for i in self.prompt_items if i["image_name"] is not None}


def _load_pairs(path: Path, out: ParsedMMRB2, task: str | None = None) -> list | None:
    """The "pairs" list of one annotation file; a file that cannot be used is refused whole."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        out.rejected.append(Rejection(DATASET, FILE_STAGE, path.name, f"unreadable JSON: {exc}"))
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("pairs"), list):
        out.rejected.append(Rejection(DATASET, FILE_STAGE, path.name, 'expected an object with a "pairs" list'))
        return None
    out.read.append((path.name, task, len(doc["pairs"])))
    return doc["pairs"]


def _content_items(content, key: str) -> tuple[list[tuple[str, str]], str | None]:
    """Validate a `[[kind, value], ...]` list; return the items or the reason it is malformed."""
    if not isinstance(content, list):
        return [], f"{key} is not a list"
    items = []
    for pos, item in enumerate(content):
        if not (isinstance(item, (list, tuple)) and len(item) == 2):
            return [], f"{key}[{pos}] is not a [kind, value] pair"
        kind, value = item
        if kind not in ("text", "image"):
            return [], f"{key}[{pos}] has unknown kind {kind!r}"
        if not isinstance(value, str) or (kind == "image" and not value):
            return [], f"{key}[{pos}] {kind} value is not a non-empty string"
        items.append((kind, value))
    return items, None


def _parse_pair(pair, task: str) -> tuple[dict | None, list[dict], str | None]:
    if not isinstance(pair, dict):
        return None, [], "pair is not an object"
    pair_id = pair.get("id")
    if not isinstance(pair_id, str) or not pair_id:
        return None, [], "missing or non-string id"
    if pair.get("chosen") not in ("A", "B"):
        return None, [], f"chosen is {pair.get('chosen')!r}, expected 'A' or 'B'"
    row = {
        "pair_id": pair_id,
        "task": task,
        "prompt_source": pair.get("prompt_source") if isinstance(pair.get("prompt_source"), str) else None,
        "prompt_metadata": _json_text(pair.get("prompt_metadata")),
        "chosen": pair["chosen"],
        "human_annotations": _json_text(pair.get("human_annotations")),
        "has_prompt_content": False,
    }
    items = []
    for side, key in SIDES:
        response = pair.get(key)
        if not isinstance(response, dict):
            return None, [], f"{key} is not an object"
        model = response.get("model_name")
        content, problem = _content_items(response.get("response_content"), f"{key}.response_content")
        if problem:
            return None, [], problem
        row[f"model_{side.lower()}"] = model if isinstance(model, str) else None
        row[f"n_images_{side.lower()}"] = sum(k == "image" for k, _ in content)
        row[f"n_texts_{side.lower()}"] = sum(k == "text" for k, _ in content)
        for pos, (kind, value) in enumerate(content):
            items.append(
                {
                    "pair_id": pair_id,
                    "side": side,
                    "position": pos,
                    "kind": kind,
                    "text": value if kind == "text" else None,
                    "image_name": value if kind == "image" else None,
                }
            )
    return row, items, None


def parse_mmrb2(annotation_files: dict[str, Path], new_task_file: Path | None = None) -> ParsedMMRB2:
    """Parse the per-task `*_response_only.json` files (and optional `new_task_release.json`)."""
    out = ParsedMMRB2()
    seen: dict[str, str] = {}
    for task, path in annotation_files.items():
        pairs = _load_pairs(path, out, task)
        for index, pair in enumerate(pairs or []):
            row, items, problem = _parse_pair(pair, task)
            problem = problem or _not_unicode(pair)
            raw_id = pair.get("id") if isinstance(pair, dict) else None
            key = raw_id if isinstance(raw_id, str) and raw_id else f"{path.name}#{index}"
            if problem is None and key in seen:
                problem = f"duplicate pair id (first seen in task {seen[key]})"
            if problem:
                out.rejected.append(Rejection(DATASET, "parse", key, problem))
                continue
            seen[key] = task
            out.pairs.append(row)
            out.items.extend(items)
    if new_task_file is not None:
        _parse_prompts(new_task_file, out)
    return out


def _parse_prompts(path: Path, out: ParsedMMRB2) -> None:
    """`new_task_release.json` carries prompt content (text + prompt images) for some edit pairs."""
    by_id = {row["pair_id"]: row for row in out.pairs}
    for index, entry in enumerate(_load_pairs(path, out) or []):
        pair_id = entry.get("pair_id") if isinstance(entry, dict) else None
        key = pair_id if isinstance(pair_id, str) else f"{path.name}#{index}"
        if not isinstance(pair_id, str):
            out.rejected.append(Rejection(DATASET, "parse_prompts", key, "missing or non-string pair_id"))
            continue
        content, problem = _content_items(entry.get("prompt_content"), "prompt_content")
        problem = problem or _not_unicode(entry)
        if problem is None and pair_id not in by_id:
            problem = "prompt for a pair that is not in the annotation files"
        if problem is None and by_id[pair_id]["has_prompt_content"]:
            problem = "duplicate prompt entry"
        if problem:
            out.rejected.append(Rejection(DATASET, "parse_prompts", key, problem))
            continue
        by_id[pair_id]["has_prompt_content"] = True
        for pos, (kind, value) in enumerate(content):
            out.prompt_items.append(
                {
                    "pair_id": pair_id,
                    "position": pos,
                    "kind": kind,
                    "text": value if kind == "text" else None,
                    "image_name": value if kind == "image" else None,
                }
            )


def sample_records(root: Path) -> dict[str, pa.Table]:
    """The record tables this parser makes of the embedded sample (written under `root`), its
    record contract enforced (DatasetSpec.sample_records: tests derive their cases from it)."""
    from pipeline.contract import enforce
    from pipeline.mmrb2.contract import contracts
    from pipeline.mmrb2.sample import write_sample
    from pipeline.mmrb2.layout import snapshot_from_layout
    from pipeline.settings import QualitySettings
    from pipeline.sources.base import ChecksumCache

    write_sample(root)
    snap = snapshot_from_layout(root, "sample", ChecksumCache(root / "checksums.json"))
    parsed = parse_mmrb2(snap.annotations(), snap.path("new_task_release"))
    return enforce("mmrb2", parsed.tables(), contracts(QualitySettings())).tables
