"""What the release gate's checks return, and the helpers every dataset's own gate rules use
(plain Python + DuckDB). A dataset's rules live in its package and are named by its DatasetSpec
(`gate`, `drift`); checks/rules.py holds the rules that apply to every release."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

ERROR, WARN = "ERROR", "WARN"


@dataclass
class CheckOutcome:
    check: str
    passed: bool
    severity: str
    details: dict = field(default_factory=dict)

    @property
    def blocks(self) -> bool:
        return not self.passed and self.severity == ERROR

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)


def violations(con, rules: list[tuple[str, str]], sample: int = 5) -> dict:
    """rules: (name, query returning offending keys). Returns {name: {count, sample}} of the failing."""
    found = {}
    for name, sql in rules:
        rows = con.execute(f"select * from ({sql}) limit 1000000").fetchall()
        if rows:
            found[name] = {"count": len(rows), "sample": [r[0] if len(r) == 1 else list(r) for r in rows[:sample]]}
    return found


def psi(expected: dict, actual: dict, floor: float = 1e-4) -> float:
    """Population stability index of two categorical distributions (counts by category)."""
    keys = set(expected) | set(actual)
    te, ta = sum(expected.values()) or 1, sum(actual.values()) or 1
    total = 0.0
    for k in keys:
        e = max(expected.get(k, 0) / te, floor)
        a = max(actual.get(k, 0) / ta, floor)
        total += (a - e) * math.log(a / e)
    return total
