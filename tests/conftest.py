"""Shared fixtures: the real upstream annotation files (../shared) and mirrors built from them."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants
from PIL import Image

from hf_server import FakeHub

def _find_shared() -> Path:
    """The real MMRB2 files live in ../shared/data/mmrb2 beside the checkout (CI has them too);
    REWARDHOUSE_SHARED_DATA overrides. Ancestors are searched so a nested checkout works."""
    override = os.environ.get("REWARDHOUSE_SHARED_DATA")
    if override:  # the shared data folder, or its mmrb2 folder itself
        path = Path(override)
        return path if (path / "t2i_response_only.json").is_file() else path / "mmrb2"
    repo = Path(__file__).resolve().parents[1]
    for parent in repo.parents:
        candidate = parent / "shared" / "data" / "mmrb2"
        if candidate.is_dir():
            return candidate
    return repo.parent / "shared" / "data" / "mmrb2"


SHARED = _find_shared()
TASKS = ("t2i", "edit", "interleaved", "reasoning")


@pytest.fixture(scope="session", autouse=True)
def _compiled_kernels():
    """The verification's compiled loops are built (or loaded from their cache) once, before any
    test: on a new checkout that takes a minute, which no timed test should pay."""
    from pipeline.dedupe import verify

    verify.warm()


@pytest.fixture(autouse=True)
def _own_data_root(tmp_path_factory, monkeypatch):
    """Every test starts on an empty data root of its own, never the checkout's `data/` (which
    `make run` fills): a test that needs another root sets REWARDHOUSE_HOME itself."""
    if "REWARDHOUSE_HOME" not in os.environ:
        monkeypatch.setenv("REWARDHOUSE_HOME", str(tmp_path_factory.mktemp("home")))


def shared_mmrb2() -> Path:
    """The real annotation files (GitHub facebookresearch/MMRB2). A clone without them skips the
    tests that need them, with the reason; where they must be (REWARDHOUSE_REQUIRE_SHARED=1, set
    by .ci/run) their absence fails the test."""
    if not (SHARED / "t2i_response_only.json").is_file():
        why = (f"real MMRB2 annotation files not found at {SHARED} (facebookresearch/MMRB2's JSONs; put them in "
               "../shared/data/mmrb2 or set REWARDHOUSE_SHARED_DATA)")
        if os.environ.get("REWARDHOUSE_REQUIRE_SHARED") == "1":
            pytest.fail(f"{why}; REWARDHOUSE_REQUIRE_SHARED=1 requires them")
        pytest.skip(why)
    return SHARED


def tree_digests(root: Path) -> dict[str, str]:
    """sha256 of every file under root, by relative path (for determinism checks)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def stand_in_jpeg(seed: int) -> bytes:
    """A tiny real JPEG; a few variants so sha256s are not all equal."""
    im = Image.new("RGB", (16, 12), ((seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=70)
    return buf.getvalue()


def response_image_names(root: Path) -> list[str]:
    names = []
    for task in TASKS:
        for pair in json.loads((root / f"{task}_response_only.json").read_text())["pairs"]:
            for side in ("response_a", "response_b"):
                names += [v for k, v in pair[side]["response_content"] if k == "image"]
    return names


def shipped_prompt_image_names(root: Path) -> list[str]:
    """Prompt images the upstream zip ships (flat, by base name): new_images/ and synthetic_images/."""
    names = set()
    for pair in json.loads((root / "new_task_release.json").read_text())["pairs"]:
        names |= {v for k, v in pair["prompt_content"] if k == "image" and v.startswith(("new_images/", "synthetic_images/"))}
    return sorted(names)


def build_local_mirror(dest: Path, *, with_new_task: bool = True, zip_name: str = "image.zip") -> Path:
    """DIR/facebook/MMRB2_image/<zip> + DIR/facebookresearch/MMRB2/benchmark/*.json from the real
    files, with stand-in JPEGs under every response image name and the shipped prompt images."""
    src = shared_mmrb2()
    bench = dest / "facebookresearch" / "MMRB2" / "benchmark"
    bench.mkdir(parents=True)
    for task in TASKS:
        shutil.copyfile(src / f"{task}_response_only.json", bench / f"{task}_response_only.json")
    if with_new_task:
        shutil.copyfile(src / "new_task_release.json", bench / "new_task_release.json")
    variants = [stand_in_jpeg(i) for i in range(8)]
    zdir = dest / "facebook" / "MMRB2_image"
    zdir.mkdir(parents=True)
    with zipfile.ZipFile(zdir / zip_name, "w", zipfile.ZIP_STORED) as zf:
        for i, name in enumerate(response_image_names(src)):
            zf.writestr(f"images/{name}", variants[i % len(variants)])
        if with_new_task:
            for i, name in enumerate(shipped_prompt_image_names(src)):
                zf.writestr(f"images/{Path(name).name}", variants[i % len(variants)])
    return dest


@pytest.fixture(scope="session")
def real_mirror(tmp_path_factory) -> Path:
    return build_local_mirror(tmp_path_factory.mktemp("mirror"))


@contextlib.contextmanager
def published_home(root: Path, *argv: str):
    """A data root (and Dagster home) where `rewardhouse run *argv` has just published, for a
    module of tests; the environment is restored afterwards."""
    mp = pytest.MonkeyPatch()
    mp.setenv("REWARDHOUSE_HOME", str(root))
    mp.setenv("DAGSTER_HOME", str(root / "dagster"))
    from pipeline.cli import main

    try:
        assert main(["run", *argv]) == 0
        yield root
    finally:
        mp.undo()


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An isolated data root (and Dagster home) for one test."""
    root = tmp_path / "home"
    monkeypatch.setenv("REWARDHOUSE_HOME", str(root))
    monkeypatch.setenv("DAGSTER_HOME", str(root / "dagster"))
    return root


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A started FakeHub, with huggingface_hub's env and globals pointed at it and at tmp_path."""
    hf_home = tmp_path / "hf_home"
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    # huggingface_hub reads these at import time, so the env alone is not enough.
    monkeypatch.setattr(hf_constants, "HF_HOME", str(hf_home))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(hf_home / "token"))
    monkeypatch.setattr(hf_constants, "HF_STORED_TOKENS_PATH", str(hf_home / "stored_tokens"))
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr("pipeline.sources.hf.RETRY_PAUSE", 0)
    with FakeHub() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


# `make test-fast`: the unit and parser tests, for the inner loop (about two minutes on 2 cores).
# Everything else runs the pipeline, a server or a killed process; `make test` runs all of it.
FAST_MODULES = {
    "test_search", "test_hashing", "test_dedupe_engine", "test_dedupe_decisions", "test_dedupe_command",
    "test_parse_mmrb2", "test_parse_visualprm", "test_zipread", "test_liveness", "test_stopping",
    "test_quality_rules", "test_source_sample", "test_source_visualprm_sample", "test_hostile_records",
    "test_hostile_images", "test_hostile_archives", "test_visualprm_images", "test_source_local",
    "test_source_visualprm", "test_gc", "test_release_store", "test_contract", "test_vlrb",
}


# The longest files start first (`make test` hands out whole files, in this order, to workers as
# they free up): collected alphabetically, the run-recovery and UI files came last and ran alone
# for a quarter of an hour at the end. Longest first, as measured by `pytest --durations`.
LONG_MODULES = (
    "test_run_recovery", "test_disk_full", "test_ui_browser", "test_ui_recovery", "test_new_datasets",
    "test_datasets_end_to_end", "test_ray_executor", "test_s3_root", "test_ui_graphql", "test_release_gate",
    "test_fault_publish", "test_end_to_end_dedupe", "test_review_browser", "test_end_to_end_visualprm",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in FAST_MODULES:
            item.add_marker(pytest.mark.fast)
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rsplit(".", 1)[-1], len(rank)))  # stable


def serve_samples(hub, upstream: Path, monkeypatch) -> dict[str, str]:
    """Every dataset's sample on a loopback Hub (and the MMRB2 annotations on its GitHub-raw
    stand-in), as `--source hf` reads them; the commit of each Hub repo."""
    from pipeline.mmrb2.sample import write_sample
    from pipeline.settings import MMRB2_ANNOTATION_COMMIT, MMRB2_ANNOTATION_REPO, MMRB2_IMAGE_REPO, VISUALPRM_REPO
    from pipeline.visualprm.sample import PARQUET_RELPATH, write_visualprm_sample

    write_sample(upstream)
    commits = {MMRB2_IMAGE_REPO: hub.add_dataset_commit(MMRB2_IMAGE_REPO, {"image.zip": (upstream / MMRB2_IMAGE_REPO / "image.zip").read_bytes()})}
    bench = upstream / MMRB2_ANNOTATION_REPO / "benchmark"
    hub.add_raw_files(MMRB2_ANNOTATION_REPO, MMRB2_ANNOTATION_COMMIT,
                      {f"benchmark/{p.name}": p.read_bytes() for p in bench.glob("*.json")})
    monkeypatch.setenv("REWARDHOUSE_GITHUB_RAW", hub.url)
    write_visualprm_sample(upstream)
    commits[VISUALPRM_REPO] = hub.add_dataset_commit(VISUALPRM_REPO, {
        "README.md": b"# VisualPRM400K\n", PARQUET_RELPATH[len(VISUALPRM_REPO) + 1:]: (upstream / PARQUET_RELPATH).read_bytes()})
    commits.update(serve_hub_datasets(hub, upstream))
    return commits


HANDLED_APART = ("mmrb2", "visualprm")  # served by serve_samples itself (a GitHub stand-in, a README of their own)


def serve_hub_datasets(hub, upstream: Path) -> dict[str, str]:
    """Every other registry dataset whose upstream is the Hub only (VL-RewardBench, RLAIF-V, and
    whatever is added next): its sample written under `upstream` and its files put on the loopback
    Hub as the repo's main commit; the commit per dataset name."""
    from pipeline import datasets
    from pipeline.spec import load

    commits = {}
    for spec in datasets.DATASETS:
        if spec.name in HANDLED_APART or not spec.upstream or any(u.kind != "hf" for u in spec.upstream):
            continue
        load(spec.sample)(upstream)
        for up in spec.upstream:
            folder = upstream / up.repo
            files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
            commits[spec.name] = hub.add_dataset_commit(up.repo, {"README.md": f"# {spec.title}\n".encode(), **files})
    return commits


# ---- skips are never silent ---------------------------------------------------------------------
_SKIPPED: list[tuple[str, str, bool]] = []  # (test, reason, is a browser test)


def pytest_runtest_logreport(report):
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        _SKIPPED.append((report.nodeid, reason, "browser" in report.keywords))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """`make test` ends with the skipped tests and why (or says none was); where the browser tests
    must run (REWARDHOUSE_REQUIRE_BROWSER=1, set by .ci/run), a skipped one fails the session."""
    tr = terminalreporter
    tr.write_sep("-", f"skipped: {len(_SKIPPED) or 'none'}")
    for nodeid, reason, _ in _SKIPPED:
        tr.write_line(f"SKIPPED {nodeid}: {reason}")
    if os.environ.get("REWARDHOUSE_REQUIRE_BROWSER") == "1" and any(b for *_, b in _SKIPPED):
        tr.write_line("FAILED: browser tests were skipped, and REWARDHOUSE_REQUIRE_BROWSER=1 requires them", red=True)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("REWARDHOUSE_REQUIRE_BROWSER") == "1" and any(b for *_, b in _SKIPPED) and exitstatus == 0:
        session.exitstatus = 1
