"""Score judge outputs against MMRB2 ground truth, as the upstream `compute_accuracy.py` does.

A judgement file is `{pair_id: {"forward": [{"judgement": "A"|"B", ...}], "reverse": [...]}}`.
Only the first entry of each list counts. Forward is right when it equals `chosen`; the reverse
answer is flipped (A<->B) first. Accuracy = correct / judgements made, pooled over a task's
judgements; pairs without any entry are counted as missing, not wrong. Overall pools every task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FLIP = {"A": "B", "B": "A"}


@dataclass
class TaskScore:
    task: str
    total_pairs: int
    evaluated_pairs: int = 0
    missing_pairs: int = 0
    correct: int = 0
    judgements: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.judgements if self.judgements else 0.0


class JudgementFileError(ValueError):
    pass


def load_judgements(paths: list[Path]) -> dict[str, dict]:
    """The judgements of several files, merged; a pair judged in two files must be judged the same
    in both (else which one counts would depend on the order of the files)."""
    merged: dict[str, dict] = {}
    source: dict[str, Path] = {}
    for path in paths:
        try:
            doc = json.loads(Path(path).read_bytes())
        except (OSError, ValueError) as exc:
            raise JudgementFileError(f"{path}: not a readable JSON file ({exc})") from None
        if not isinstance(doc, dict):
            raise JudgementFileError(f"{path}: expected an object mapping pair_id to judgements")
        for pair_id, entry in doc.items():
            if pair_id in merged and merged[pair_id] != entry:
                raise JudgementFileError(f"{path}: pair {pair_id} is also judged in {source[pair_id]}, differently; "
                                         "score one judge's files at a time")
            merged[pair_id] = entry
            source.setdefault(pair_id, Path(path))
    return merged


def _first_judgement(entry: dict, key: str) -> str | None:
    runs = entry.get(key) if isinstance(entry, dict) else None
    if isinstance(runs, list) and runs and isinstance(runs[0], dict):
        return runs[0].get("judgement") or None
    return None


def score(truth: list[tuple[str, str, str]], judgements: dict[str, dict]) -> tuple[list[TaskScore], int]:
    """truth: (pair_id, task, chosen). Returns per-task scores (tasks judged at least once, in
    first-seen order) and the number of judged ids that are not in the benchmark."""
    tasks: dict[str, TaskScore] = {}
    for pair_id, task, chosen in truth:
        ts = tasks.setdefault(task, TaskScore(task=task, total_pairs=0))
        ts.total_pairs += 1
        entry = judgements.get(pair_id)
        if entry is None:
            ts.missing_pairs += 1
            continue
        ts.evaluated_pairs += 1
        forward = _first_judgement(entry, "forward")
        if forward:
            ts.judgements += 1
            ts.correct += forward == chosen
        reverse = _first_judgement(entry, "reverse")
        if reverse:
            ts.judgements += 1
            ts.correct += FLIP.get(reverse, reverse) == chosen
    known = {pair_id for pair_id, _, _ in truth}
    unknown = sum(1 for pair_id in judgements if pair_id not in known)
    return [t for t in tasks.values() if t.evaluated_pairs], unknown


def overall(scores: list[TaskScore]) -> float:
    correct = sum(s.correct for s in scores)
    made = sum(s.judgements for s in scores)
    return correct / made if made else 0.0


def format_report(scores: list[TaskScore], unknown: int) -> str:
    lines = [f"{'task':<14} {'accuracy':>9} {'judged':>7} {'missing':>8}"]
    for s in scores:
        lines.append(f"{s.task:<14} {s.accuracy * 100:>8.2f}% {s.judgements:>7} {s.missing_pairs:>8}")
    lines.append(f"{'overall':<14} {overall(scores) * 100:>8.2f}% {sum(s.judgements for s in scores):>7}")
    if unknown:
        lines.append(f"({unknown} judged pair ids are not in the benchmark and were ignored)")
    return "\n".join(lines)
