"""A skipped test never passes unnoticed: the run ends by listing skips, and where the browser tests
are required (REWARDHOUSE_REQUIRE_BROWSER=1, as .ci/run sets it) a skipped one fails the run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast
REPO = Path(__file__).resolve().parents[1]
TARGET = "tests/test_review_browser.py::test_gx_data_docs_render_offline"


def _pytest(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("REWARDHOUSE_", "PYTEST_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TARGET], cwd=REPO,
                          env={**clean, "REWARDHOUSE_CHROMIUM": "/nonexistent/chromium", **env},
                          capture_output=True, text=True, timeout=300)


def test_skips_are_listed_and_a_skipped_browser_test_fails_where_required():
    listed = _pytest()
    assert listed.returncode == 0, listed.stdout[-2000:]
    assert "skipped: 1" in listed.stdout
    assert f"SKIPPED {TARGET}: /nonexistent/chromium not installed" in listed.stdout

    required = _pytest(REWARDHOUSE_REQUIRE_BROWSER="1")
    assert required.returncode == 1, required.stdout[-2000:]
    assert "FAILED: browser tests were skipped, and REWARDHOUSE_REQUIRE_BROWSER=1 requires them" in required.stdout
