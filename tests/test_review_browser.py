"""The review page and the GX Data Docs as a person sees them: headless Chromium (the system's
Debian package, driven by Playwright) opens the files of the sample's release from disk, with
every request that is not a file of the page refused and recorded.

- The review page shows every planted contamination pair and duplicate cluster with both images
  loaded, and its filters change what is shown and the sql command; a screenshot is saved.
- A reviewer's "not a leak" override removes the pair from `contamination`, puts its samples back
  in the training export, and is listed on the next release's page.
- GX Data Docs render offline: the index lists validation results, a validation page renders its
  expectation rows, and no request leaves the machine.

The planted decisions are literal names of the embedded sample (pipeline/*/sample.py plants them).
"""

from __future__ import annotations

import contextlib
import os
import json
from pathlib import Path

import duckdb
import pytest

from conftest import published_home
from pipeline.cli import main

CHROMIUM = Path(os.environ.get("REWARDHOUSE_CHROMIUM", "/usr/bin/chromium"))  # Debian's package
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not installed (Debian package chromium; .ci/run installs it)"),
]

VLRB_COPY = "vlrb:sha256:cbb2c5f62159606a4f200c87e8b0e7c0b9f20677c055a9eabb6a1ad58d0a0741"
MMRB2_LEAKED = "mmrb2:muirbench_14_gpt-4.1_1662_GPT5_Gemini_SketchpadAgent_1660_0.jpg"
# RLAIF-V's planted copy (pipeline/rlaifv/sample.py CONTAMINATED): its picture, and the VL-RewardBench one it copies.
RLAIFV_COPY = ("rlaifv:sha256:f141e1d437ae97fe1b719a8c7fda69f4ed28e67f53dc6da2582c08feaab234f0",
               "vlrb:sha256:4adaadc7a35ebac68d160a9212712a5e02dec75a23ec284ecbd96f71c3c4755d")
# (train image, eval image): the training pictures planted as copies of an eval image.
PLANTED_CONTAMINATION = {
    ("visualprm:MathV360K/data_images/34505.jpg", MMRB2_LEAKED),
    ("visualprm:ai2d/abc_images/2524.png", VLRB_COPY),
    RLAIFV_COPY,
}
# Every planted duplicate pair (canonical, member), across the three datasets.
PLANTED_CLUSTERS = {
    (VLRB_COPY, "visualprm:ai2d/abc_images/2524.png"),
    RLAIFV_COPY,  # (canonical, member): the training picture is the larger one
    (MMRB2_LEAKED, "visualprm:MathV360K/data_images/34505.jpg"),
    ("mmrb2:interleavedeval__2747862600049231019_gpt-imagen-agent_6797_gpt-gemini-agent_797_1.jpg",
     "mmrb2:hq-edit_318_-2263586102388815385_gemini-2.5-flash_5508_flux-kontext_508_0.jpg"),
    ("mmrb2:evalmuse_02718_-2890980219122741248_imagen4-ultra_4505_imagen4-ultra_505_0.jpg",
     "mmrb2:evalmuse_02718_-2890980219122741248_imagen4-ultra_4505_imagen4-ultra_505_1.jpg"),
    ("mmrb2:isgbench_0412_-8328960670581685083_gemini-2.0-flash_2757_gemini-2.0-flash_757_1.jpg",
     "mmrb2:wise_412_3591808398015666109_imagen3_5161_gemini-2.0-flash_161_0.jpg"),
    ("visualprm:CLEVR_math/images/CLEVR_train_048334.png", "visualprm:CLEVR_math/images/CLEVR_train_020057.png"),
    ("visualprm:MathV360K/data_images/16422.jpg", "visualprm:MathV360K/data_images/34384.jpg"),
    ("visualprm:geoqa+/images/5627.png", "visualprm:geoqa+/images/1508.png"),
    ("mmrb2:chameleon_e5107129-7e4f-4a40-861b-4b6b11ab566b_-794683830333257013_gemini-2.0-flash_6552_gpt-gemini-agent_552_2.jpg",
     "mmrb2:chameleon_ef9a2d51-9f2c-41b1-bff9-857c56cd516e_1861549491225900207_gpt-imagen-agent_2414_gpt-image-agent_414_0.jpg"),
    ("visualprm:CLEVR_math/images/CLEVR_train_031570.png", "visualprm:CLEVR_math/images/CLEVR_train_042207.png"),
}
LEAK_SAMPLES = ["ai2d_00043_0", "ai2d_00043_1", "ai2d_00043_2"]  # the rollouts over ai2d/abc_images/2524.png


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    with published_home(tmp_path_factory.mktemp("review") / "home") as root:
        yield root


@contextlib.contextmanager
def offline_page(viewport=(1400, 900)):
    """A Chromium page on which every request but file: URLs is refused; yields (page, refused)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        refused, errors = [], []

        def route(r):
            if r.request.url.startswith("file:"):
                r.continue_()
            else:
                refused.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield page, refused, errors
        finally:
            browser.close()


def _current(root: Path) -> str:
    return (root / "releases" / "CURRENT").read_text().strip()


def _loaded(page, selector: str) -> list[tuple[str, int]]:
    """(data-image, naturalWidth) of every picture under `selector` (placeholders count as 0)."""
    return page.eval_on_selector_all(
        f"{selector} [data-image]", "els => els.map(e => [e.dataset.image, e.tagName === 'IMG' ? e.naturalWidth : 0])")


def test_review_page_shows_every_planted_decision_and_filters(home, capsys):
    capsys.readouterr()
    assert main(["review", "--no-open"]) == 0
    page_path = Path(capsys.readouterr().out.strip())
    assert page_path == home / "releases" / _current(home) / "review" / "index.html" and page_path.is_file()
    with offline_page() as (page, refused, errors):
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        # Every planted contamination pair: one card, both images loaded.
        cards = page.eval_on_selector_all(".pair.contamination", "els => els.map(e => [e.dataset.train, e.dataset.eval])")
        assert {tuple(c) for c in cards} == PLANTED_CONTAMINATION
        for train, ev in PLANTED_CONTAMINATION:
            shown = dict(_loaded(page, f'.pair.contamination[data-train="{train}"]'))
            assert shown[train] > 0 and shown[ev] > 0, shown
        # Every planted cluster: its canonical and member, both loaded (ten a page: every page read).
        clusters = []
        while True:
            page.wait_for_function("[...document.querySelectorAll('.cluster img')].every(i => i.complete)")
            clusters += page.eval_on_selector_all(
                ".cluster", "els => els.map(e => [...e.querySelectorAll('[data-image]')].map(i => [i.dataset.image, i.naturalWidth || 0]))")
            following = page.locator("#clusters .pager button", has_text="next")
            if following.is_disabled():
                break
            following.click()
        assert {tuple(i for i, _ in c) for c in clusters} == PLANTED_CLUSTERS and len(clusters) == len(PLANTED_CLUSTERS)
        assert all(w > 0 for c in clusters for _, w in c)
        while not page.locator("#clusters .pager button", has_text="previous").is_disabled():
            page.locator("#clusters .pager button", has_text="previous").click()
        page.screenshot(path=str(home / "review.png"), full_page=True)
        assert (home / "review.png").stat().st_size > 10_000

        # Filters: eval set vlrb leaves the two VL-RewardBench pairs and names it in the sql.
        page.select_option("#f-eval", "vlrb")
        cards = page.eval_on_selector_all(".pair.contamination", "els => els.map(e => e.dataset.eval)")
        assert sorted(cards) == sorted([VLRB_COPY, RLAIFV_COPY[1]])
        assert page.inner_text("#contamination .sql").endswith(
            "where eval_dataset = 'vlrb' order by score desc\"")
        assert page.eval_on_selector_all(".cluster", "els => els.length") == 2
        # Rule crop (with every eval set again): the two planted crops.
        page.select_option("#f-eval", "")
        page.select_option("#f-rule", "crop")
        crops = page.eval_on_selector_all(".cluster", "els => els.map(e => e.querySelectorAll('[data-image]')[1].dataset.image)")
        assert sorted(crops) == ["mmrb2:hq-edit_318_-2263586102388815385_gemini-2.5-flash_5508_flux-kontext_508_0.jpg",
                                 "visualprm:CLEVR_math/images/CLEVR_train_020057.png"]
        assert page.eval_on_selector_all(".pair.contamination", "els => els.length") == 0  # both leaks are 'near'
        # Dataset mmrb2: five clusters hold an MMRB2 image.
        page.select_option("#f-rule", "")
        page.select_option("#f-dataset", "mmrb2")
        assert page.eval_on_selector_all(".cluster", "els => els.length") == 5
        assert "where dataset = 'mmrb2'" in page.inner_text("#clusters .sql")
        assert refused == [] and errors == []

    # The sql command the page shows lists the same rows.
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    rows = con.execute(f"select train_image_key from release_{_current(home)}.contamination where eval_dataset = 'vlrb' and train_dataset = 'visualprm'").fetchall()
    con.close()
    assert rows == [("ai2d/abc_images/2524.png",)]


def test_a_not_leak_override_puts_the_samples_back_and_is_listed(home, capsys):
    before = _current(home)
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    assert con.execute("select count(*) from contamination").fetchone() == (len(PLANTED_CONTAMINATION),)
    assert con.execute("select list(in_export order by sample_id) from prm_samples where sample_id like 'ai2d_00043_%'"
                       ).fetchone() == ([False, False, False],)
    con.close()
    assert main(["override", "not-leak", "visualprm:ai2d/abc_images/2524.png", "--eval", VLRB_COPY,
                 "--reason", "public textbook diagram"]) == 0
    capsys.readouterr()
    with published_home(home):
        pass
    out = capsys.readouterr().out
    after = _current(home)
    assert after != before  # the decision is part of the release id
    assert f"review the dedupe and contamination decisions: {home / 'releases' / after / 'review' / 'index.html'}" in out
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    assert con.execute("select train_image_key, eval_dataset from contamination where train_dataset = 'visualprm'").fetchall() == [
        ("MathV360K/data_images/34505.jpg", "mmrb2")]
    # The picture is no leak any more, but the eval pair also copies their question: the samples
    # stay out, now for the text alone (their full leak became a text leak).
    assert con.execute("""select list(in_export order by sample_id), list(distinct excluded_reason)
                          from prm_samples where sample_id like 'ai2d_00043_%'""").fetchone() == (
        [False, False, False], ["text leak of vlrb:VLRB_0007"])
    assert con.execute("select distinct leak from record_contamination where train_key like 'ai2d_00043_%'").fetchall() == [("text",)]
    assert con.execute("select number, decision, applied, effect, reason from dedupe_overrides").fetchall() == [
        (1, "not_leak", True, "applied: removed 1 contamination row", "public textbook diagram")]
    con.close()
    exported = [json.loads(line)["id"] for line in
                (home / "releases" / after / "exports" / "visualprm_train.jsonl").read_text().splitlines()]
    assert not set(LEAK_SAMPLES) & set(exported)
    with offline_page() as (page, refused, errors):
        page.goto((home / "releases" / after / "review" / "index.html").as_uri())
        page.wait_for_load_state("load")
        rows = page.eval_on_selector_all("#overrides tr.override", "els => els.map(e => e.innerText)")
        assert len(rows) == 1 and "not_leak" in rows[0] and "applied: removed 1 contamination row" in rows[0]
        cards = page.eval_on_selector_all(".pair.contamination", "els => els.map(e => e.dataset.train)")
        assert sorted(cards) == sorted(["visualprm:MathV360K/data_images/34505.jpg", RLAIFV_COPY[0]])
        assert refused == [] and errors == []


def test_gx_data_docs_render_offline(home):
    site = home / "quality" / "gx" / "uncommitted" / "data_docs" / "local_site"
    with offline_page() as (page, refused, errors):
        page.goto((site / "index.html").as_uri())
        page.wait_for_load_state("load")
        page.wait_for_selector("table tbody tr td", timeout=15_000)
        tables = page.eval_on_selector_all("table tbody tr", "els => els.map(e => e.innerText)")
        assert any("contamination" in t for t in tables) and page.query_selector(".no-records-found") is None
        # Bootstrap's stylesheet is applied (not the browser's default serif).
        assert "Times" not in page.evaluate("getComputedStyle(document.body).fontFamily")
        page.screenshot(path=str(home / "gx_index.png"))
        result = sorted((site / "validations").rglob("*.html"))[0]
        page.goto(result.as_uri())
        page.wait_for_load_state("load")
        rows = page.eval_on_selector_all("table tbody tr", "els => els.length")
        assert rows > 3
        assert refused == [], refused
        assert errors == [], errors


def test_text_leaks_render_both_texts_with_the_copied_words_marked(tmp_path):
    """The text-leak section of a hand-made candidate (tests/test_text_leak_review.py) as Chromium
    renders it: both texts, the copied words in a <mark> in each, nothing of a text run as markup."""
    from tests.test_text_leak_review import review_page

    path = review_page(tmp_path)
    with offline_page() as (page, refused, errors):
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        cards = page.eval_on_selector_all("#textleaks .textleak", "els => els.map(e => [e.dataset.train, e.dataset.eval, e.dataset.leak])")
        assert cards == [["visualprm:s3", "vlrb:p3", "full"], ["visualprm:s1", "vlrb:p1", "text"],
                         ["visualprm:s1", "mmrb2:m1", "full"], ["visualprm:s2", "vlrb:p1", "text"]]
        card = '#textleaks .textleak[data-train="visualprm:s1"][data-eval="vlrb:p1"]'
        marks = page.eval_on_selector_all(f"{card} mark", "els => els.map(e => e.textContent)")
        assert marks == ["What is the AREA of the  triangle, ABC", "what is the area of the\n   triangle abc"]
        assert page.text_content(f"{card} .text.train p").endswith("? <script>alert(1)</script> Give cm².")
        assert page.eval_on_selector_all("script", "els => els.length") == 1
        assert page.text_content(f"{card} code.cmd") == "rewardhouse override not-leak visualprm:s1 --eval vlrb:p1 --text"
        assert page.eval_on_selector_all("#evaloverlap tr.overlap", "els => els.map(e => e.dataset.a + ' ' + e.dataset.b)") == [
            "mmrb2:m1 vlrb:p1"]
        assert page.eval_on_selector_all("#overrides tr.leak-override", "els => els.length") == 1
        page.select_option("#f-eval", "mmrb2")
        assert page.eval_on_selector_all("#textleaks .textleak", "els => els.map(e => e.dataset.eval)") == ["mmrb2:m1"]
        assert "eval_dataset = 'mmrb2'" in page.text_content("#textleaks .sql")
        page.screenshot(path=str(tmp_path / "text_leaks.png"), full_page=True)
        assert refused == [] and errors == []


TEXT_COPY = "vlrb:VLRB_0007"  # VL-RewardBench's pair over VLRB_COPY also asks the ai2d rollouts' question
TEXT_ONLY = "vlrb:VLRB_0034"  # a pair whose query copies a geoqa+ question, over an unrelated picture


def test_a_text_not_leak_override_drops_the_text_link_and_is_listed(home, capsys):
    """The ai2d rollouts copy VL-RewardBench's pair by picture and by text: with the picture
    declared not a leak they still copy its text; a text decision per rollout puts them back in
    the export, and the page lists what each decision did."""
    from pipeline.dedupe.decisions import TEXT_DECISION_EFFECT

    assert main(["override", "not-leak", "visualprm:ai2d/abc_images/2524.png", "--eval", VLRB_COPY,
                 "--reason", "public textbook diagram"]) == 0
    for sample in LEAK_SAMPLES:
        assert main(["override", "not-leak", f"visualprm:{sample}", "--eval", TEXT_COPY, "--text",
                     "--reason", "public textbook question"]) == 0
    capsys.readouterr()
    with published_home(home):
        pass
    after = _current(home)
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    assert con.execute("select count(*) from record_contamination where train_key like 'ai2d_00043_%'").fetchone() == (0,)
    assert con.execute("select number, images, applied, effect from leak_overrides order by number").fetchall() == [
        (n, f"visualprm:{s} | {TEXT_COPY}", True, "applied: removed the text link of 1 pair")
        for n, s in zip((2, 3, 4), LEAK_SAMPLES)]
    assert con.execute("select number, applied, effect from dedupe_overrides order by number").fetchall() == [
        (1, True, "applied: removed 1 contamination row"), *[(n, False, TEXT_DECISION_EFFECT) for n in (2, 3, 4)]]
    assert con.execute("select list(in_export order by sample_id) from prm_samples where sample_id like 'ai2d_00043_%'"
                       ).fetchone() == ([True, True, True],)
    con.close()
    with offline_page() as (page, refused, errors):
        page.goto((home / "releases" / after / "review" / "index.html").as_uri())
        page.wait_for_load_state("load")
        rows = page.eval_on_selector_all("#overrides tr.leak-override", "els => els.map(e => e.innerText)")
        assert len(rows) == 3 and all("applied: removed the text link of 1 pair" in r for r in rows)
        assert page.eval_on_selector_all('#textleaks .textleak[data-train^="visualprm:ai2d_00043_"]', "els => els.length") == 0
        # The planted text-only leak: every geoqa+ rollout, both texts with the copied words marked,
        # the eval query's stock hint left unmarked.
        card = f'#textleaks .textleak[data-eval="{TEXT_ONLY}"]'
        assert page.eval_on_selector_all(card, "els => els.length") >= 1
        train_mark = page.text_content(f"{card} .text.train mark")
        eval_mark = page.text_content(f"{card} .text.eval mark")
        assert train_mark.startswith("As shown in the figure, AB") and eval_mark.startswith("As shown in the figure,\nAB")
        assert page.text_content(f"{card} .text.eval p").startswith("Hint: Please answer the question")
        assert refused == [] and errors == []


def test_a_folder_report_shows_clusters_and_near_misses_and_how_to_run_it_again(tmp_path, capsys):
    """`rewardhouse dedupe DIR --report`: no contamination, eval-set filter or overrides (a folder
    has no eval sets, and the overrides file is the pipeline's), no `rewardhouse override`
    command anywhere; the cluster is there, with the command that runs it again."""
    from tests.dedupe_images import folder_with_a_crop

    folder = folder_with_a_crop(tmp_path / "pics")
    report = tmp_path / "report.html"
    assert main(["dedupe", str(folder), "--report", str(report), "--output", str(tmp_path / "c.csv")]) == 0
    with offline_page() as (page, refused, errors):
        page.goto(report.as_uri())
        page.wait_for_selector("#clusters .cluster")
        for gone in ("#contamination", "#textleaks", "#evaloverlap", "#overrides", "#f-eval"):
            assert page.query_selector(gone) is None, gone
        assert page.eval_on_selector_all("nav a", "as => as.map(a => a.getAttribute('href'))") == ["#clusters", "#near"]
        text = page.inner_text("body")
        assert "rewardhouse override" not in text and "contamination" not in text.lower()
        assert f"rewardhouse dedupe {folder} --max-distance N --report {report}" in page.inner_text("#rerun")
        shown = {e for e, _ in _loaded(page, "#clusters")}
        assert shown == {"folder:a.png", "folder:a_crop.png"}
        assert not errors and not refused, (errors, refused)
