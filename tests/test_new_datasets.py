"""A new dataset of either role plugs in by its own folder and one registry line, and the shared
tests pick it up without an edit.

The two fixture datasets under tests/fixture_datasets/ (an eval set and a train set with an
export, a gate rule and a drift signal, built only from the generic modules) exist nowhere else.
A copy of this checkout gets them in its registry (pipeline/datasets.py, as a contributor adds a
dataset: an import and a name in DATASETS, nothing else changed); there, the registry-derived
shared tests run as they are: the record contract cases, the layering check, the sample that
publishes every dataset, the TRL exports that load with `datasets`. Then the published release is
read: the fixtures' tables are in the warehouse, their planted leaks (a copied picture, a copied
question) found and left out of the train set's export, their bad records quarantined."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = {"TOYEVAL": "tests.fixture_datasets.toyeval.spec", "TOYTRAIN": "tests.fixture_datasets.toytrain.spec"}
SHARED_TESTS = ["tests/test_contract.py", "tests/test_layers.py", "tests/test_trl_exports.py",
                "tests/test_datasets_end_to_end.py::test_the_sample_publishes_every_dataset_of_the_registry"]
_NOT_SOURCE = {".git", ".venv", ".bench-venv", ".pytest_cache", "__pycache__", "data", ".web-assets"}


def source_files(repo: Path) -> list[str]:
    """The checkout's files as a clone holds them (git's list when it is a git checkout)."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                             capture_output=True, check=True).stdout.decode()
        return [f for f in out.split("\0") if f and (repo / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [p.relative_to(repo).as_posix() for p in repo.rglob("*")
                if p.is_file() and not _NOT_SOURCE & set(p.relative_to(repo).parts)]


def add_to_registry(text: str, specs: dict[str, str]) -> str:
    """pipeline/datasets.py with each `alias: module` imported and appended to DATASETS."""
    imports = "".join(f"from {module} import SPEC as {alias}\n" for alias, module in specs.items())
    text, n = re.subn(r"^(DATASETS: tuple\[DatasetSpec, \.\.\.\] = \()([^)]*)\)",
                      lambda m: f"{imports}\n{m.group(1)}{m.group(2)}, {', '.join(specs)})", text, flags=re.M)
    assert n == 1, "the registry's DATASETS line moved: update add_to_registry"
    return text


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("extended") / "repo"
    for rel in source_files(REPO):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, copy / rel)
    if (REPO / ".web-assets").is_dir():  # the Data Docs' vendored assets, fetched by `make` beside the checkout
        (copy / ".web-assets").symlink_to(REPO / ".web-assets")
    registry = copy / "pipeline" / "datasets.py"
    registry.write_text(add_to_registry(registry.read_text(), FIXTURES))
    return copy


def changed_files(a: Path, b: Path) -> list[str]:
    files = set(source_files(a)) | {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()
                                     and not _NOT_SOURCE & set(p.relative_to(b).parts)}
    return sorted(f for f in files if not ((a / f).is_file() and (b / f).is_file()
                                           and (a / f).read_bytes() == (b / f).read_bytes()))


def test_the_registry_line_is_the_only_change(extended):
    assert changed_files(REPO, extended) == ["pipeline/datasets.py"]
    before = (REPO / "pipeline" / "datasets.py").read_text().splitlines()
    after = (extended / "pipeline" / "datasets.py").read_text().splitlines()
    added, removed = [x for x in after if x not in before], [x for x in before if x not in after]
    assert added[:-1] == [f"from {m} import SPEC as {a}" for a, m in FIXTURES.items()]
    assert [line.startswith("DATASETS:") for line in (*removed, added[-1])] == [True, True]
    assert added[-1] == removed[0][:-1] + ", " + ", ".join(FIXTURES) + ")"


def test_the_shared_tests_take_the_new_datasets_and_they_publish(extended, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REWARDHOUSE_", "DAGSTER_", "PYTEST_"))}
    env.update(PYTHONPATH=str(extended), PYTHONDONTWRITEBYTECODE="1")
    inner = tmp_path / "inner"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           f"--basetemp={inner}", *SHARED_TESTS], cwd=extended, env=env, capture_output=True,
                          text=True, timeout=1500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    passed = [line for line in out.splitlines() if line.startswith("PASSED")]
    # the registry-derived cases include the new datasets: contract rules, TRL export, layering
    assert any("toyeval" in line for line in passed) and any("toytrain" in line for line in passed), out[-3000:]
    assert any("test_each_train_export_loads_with_datasets_with_image_features[toytrain]" in line for line in passed)

    homes = [p for p in inner.rglob("warehouse.duckdb") if "toytrain_pairs" in _tables(p)]
    assert homes, "no published warehouse holds the fixture tables"
    warehouse = homes[0]
    sys.path.insert(0, str(REPO))
    from tests.fixture_datasets.toytrain.data import FACTS

    with duckdb.connect(str(warehouse), read_only=True) as con:
        q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
        assert q("select count(*) from toyeval_pairs") == [(39,)] and q("select count(*) from toytrain_pairs") == [(59,)]
        leaks = set(q("select train_key, eval_key, leak from record_contamination where train_dataset = 'toytrain'"))
        (image_train, image_eval), (text_train, text_eval) = FACTS["image_leak"], FACTS["text_leak"]
        assert {(image_train, image_eval, "image"), (text_train, text_eval, "text")} <= leaks
        assert {r[0] for r in leaks} == {image_train, text_train}
        out_of_export = dict(q("select pair_id, excluded_reason from toytrain_pairs where not in_export"))
        assert out_of_export == {image_train: f"image leak of toyeval:{image_eval}",
                                 text_train: f"text leak of toyeval:{text_eval}"}
        assert set(q("select dataset, record_key, stage from quarantine where dataset like 'toy%'")) == {
            ("toyeval", "toyeval:7", "parse"), ("toytrain", FACTS["bad"], "parse")}
        checks = dict(q("""select "check", passed from quality_results where "check" in
                           ('toytrain_answers_differ', 'gx_toyeval_pairs', 'gx_toytrain_pairs', 'gx_toytrain_images')"""))
        assert checks == {"toytrain_answers_differ": True, "gx_toyeval_pairs": True, "gx_toytrain_pairs": True,
                          "gx_toytrain_images": True}
        assert q("select count(*) from image_hashes where dataset in ('toyeval', 'toytrain')") == [(40 + 60,)]  # every picture, the quarantined pairs' too


def _tables(path: Path) -> set[str]:
    with duckdb.connect(str(path), read_only=True) as con:
        return {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}
