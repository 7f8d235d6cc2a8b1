"""The Dagster UI as a person uses it: headless Chromium (the system's Debian package, driven by
Playwright; no browser is downloaded) opens the global asset graph, clicks "Materialize all",
the run is queued and picked up by the daemon, it succeeds, a release is published, and a
screenshot of the graph is saved under the data root (screenshots/asset_graph.png)."""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path

import pytest

from ui_server import assert_release_published, dagster_ui

CHROMIUM = Path("/usr/bin/chromium")
# As root on this machine: no sandbox, and none of Chromium's own network traffic (the network
# is closed; without these flags it keeps trying Google's hosts).
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
GRAPH_PATH = "/asset-groups"  # "Global asset lineage": every asset of every group
MATERIALIZE_ALL = re.compile(r"Materialize all$")  # the accessible name is "materialization Materialize all"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (Debian package chromium; .ci/run installs it)"),
]


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

            # Every asset here has default config, so the click launches at once and a toast says
            # "Launched run <id>"; should a dialog ask first (launchpad, confirmation), confirm it.
            toast = page.get_by_text(re.compile(r"Launched run [0-9a-f]{8}"))
            dialog = page.get_by_role("dialog")
            expect(toast.or_(dialog).first).to_be_visible(timeout=30_000)
            if dialog.count() and dialog.first.is_visible():
                dialog.first.get_by_role("button", name=re.compile(r"^(Launch|Materialize|Confirm)", re.I)).last.click()
                expect(toast).to_be_visible(timeout=30_000)
            short_id = re.search(r"[0-9a-f]{8}", toast.first.inner_text()).group(0)

            runs = [r for r in ui.recent_runs() if r["runId"].startswith(short_id)]
            assert len(runs) == 1, (short_id, ui.recent_runs())
            started = time.monotonic()
            ui.wait_for_run(runs[0]["runId"], timeout=240)
            print(f"run {runs[0]['runId']} ({runs[0]['jobName']}) succeeded {time.monotonic() - started:.1f} s after the click")

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
