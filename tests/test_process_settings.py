"""Process-wide settings the package makes when it is imported (pipeline/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = ("import pipeline.cli, numpy; from numpy._core import multiarray; "
         "print(multiarray._get_madvise_hugepage())")


def _hugepages(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if value is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = value
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_numpy_huge_pages_are_off_in_rewardhouse_processes_unless_asked_for():
    """The CLI's process (and so the workers it starts) runs NumPy without huge pages; a user who
    sets NUMPY_MADVISE_HUGEPAGE=1 gets them."""
    assert _hugepages(None) == "False"
    assert _hugepages("1") == "True"
