"""The Dagster UI as a person uses it: headless Chromium (the system's Debian package, driven by
Playwright; no browser is downloaded) opens the global asset graph, clicks "Materialize all…",
picks every partition of the partitioned asset and launches the backfill; the daemon runs it
(unpartitioned assets, then the task partitions in one run, then the rest), it succeeds, a
release is published, and a screenshot of the graph is saved under the data root
(screenshots/asset_graph.png)."""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import pytest

from pipeline.mmrb2.tasks import PARTITION_KEYS
from ui_server import assert_release_published, dagster_ui

CHROMIUM = Path(os.environ.get("REWARDHOUSE_CHROMIUM", "/usr/bin/chromium"))  # Debian's package
# As root on this machine: no sandbox, and none of Chromium's own network traffic (the network
# is closed; without these flags it keeps trying Google's hosts).
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
GRAPH_PATH = "/asset-groups"  # "Global asset lineage": every asset of every group
# The accessible name is "materialization Materialize all…": the ellipsis because a partitioned
# asset is in the selection, so a dialog asks which partitions.
MATERIALIZE_ALL = re.compile(r"Materialize all…?$")
BACKFILLS = """
{ partitionBackfillsOrError(limit: 5) {
    __typename
    ... on PartitionBackfills { results { id status isAssetBackfill runs(limit: 20) { runId status jobName } } }
    ... on PythonError { message } } }
"""

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (Debian package chromium; .ci/run installs it)"),
]


@pytest.mark.timeout(900)
def test_materialize_all_from_the_asset_graph_in_chromium(tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import expect, sync_playwright

    with dagster_ui(tmp_path) as ui, sync_playwright() as pw:
        shots = ui.data_root / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1920, "height": 1080})
        try:
            assert ui.recent_runs() == []
            page.goto(ui.url + GRAPH_PATH)
            button = page.get_by_role("button", name=MATERIALIZE_ALL)
            expect(button).to_be_enabled(timeout=60_000)
            button.click()

            # The partitioned asset (MMRB2 images, one partition per task) makes this a backfill:
            # the dialog asks which partitions; take them all.
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("Partition selection")).to_be_visible(timeout=30_000)
            dialog.get_by_role("button", name="All", exact=True).click()
            expect(dialog.get_by_text(f"{len(PARTITION_KEYS)} partitions")).to_be_visible(timeout=10_000)
            launch = dialog.get_by_role("button", name="Launch backfill")
            expect(launch).to_be_enabled(timeout=10_000)
            started = time.monotonic()
            launch.click()

            backfill = _wait_for_backfill(ui, timeout=420)
            print(f"backfill {backfill['id']} finished in {time.monotonic() - started:.1f} s: "
                  f"{len(backfill['runs'])} runs {[r['status'] for r in backfill['runs']]}")
            assert backfill["isAssetBackfill"] and backfill["status"] == "COMPLETED_SUCCESS", (backfill, ui.diagnostics())
            assert backfill["runs"] and all(r["status"] == "SUCCESS" for r in backfill["runs"]), backfill

            # The graph after success, every group expanded (the graph's ⌥E shortcut).
            page.reload()
            expect(page.get_by_role("button", name=MATERIALIZE_ALL)).to_be_enabled(timeout=60_000)
            page.keyboard.press("Alt+e")
            expect(page.get_by_text("warehouse_release", exact=True).first).to_be_visible(timeout=30_000)
            with contextlib.suppress(PlaywrightTimeoutError):  # the UI polls; idle is only likely
                page.wait_for_load_state("networkidle", timeout=15_000)
            page.wait_for_timeout(1500)  # the graph animates into place
            page.screenshot(path=str(shots / "asset_graph.png"))
        except BaseException:
            page.screenshot(path=str(shots / "failure.png"))
            print(f"failure screenshot: {shots / 'failure.png'}\n{ui.diagnostics()}")
            raise
        finally:
            browser.close()

    png = (ui.data_root / "screenshots" / "asset_graph.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 20_000, f"screenshot is only {len(png)} bytes"
    assert_release_published(ui.data_root)


def _wait_for_backfill(ui, timeout: float) -> dict:
    """The one backfill, once the daemon has finished it (the backfill daemon ticks every ~30 s)."""
    deadline = time.monotonic() + timeout
    while True:
        result = ui.graphql(BACKFILLS)["partitionBackfillsOrError"]
        assert result["__typename"] == "PartitionBackfills", result
        backfills = result["results"]
        assert len(backfills) <= 1, backfills
        if backfills and backfills[0]["status"] not in ("REQUESTED", "CANCELING"):
            return backfills[0]
        assert time.monotonic() < deadline, f"backfill not finished after {timeout} s: {backfills}\n{ui.diagnostics()}"
        ui.assert_alive()
        time.sleep(3)
