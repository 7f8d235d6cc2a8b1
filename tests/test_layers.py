"""The layers hold (docs: ../shared/STYLE.md, "Layers"): the static import graph of pipeline/,
assets/, checks/ and warehouse/ has no circle, and no module learns the names of a layer above it.

Every `import` and `from ... import` statement counts, wherever it is in the file: an import inside
a function that dodges a circle is the circle still there. Relative imports are resolved, and
`from pkg import name` imports `pkg.name` when that is a module (else `pkg`). Imports by string
(`importlib`, the registry's "module:function" references) are how the upper layers reach the
lower ones' plug-ins and are not edges.

The dataset packages are the registry's (each DatasetSpec's `assets` module and the package of
its `fetch`), so a new dataset is covered by its registry line alone.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from pipeline import datasets

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]
TOPS = ("pipeline", "assets", "checks", "warehouse")
GLUE = ("assets", "checks", "pipeline.definitions")  # Dagster glue: wires the layers, may import any
REGISTRY = "pipeline.datasets"


def module_files(root: Path, tops: tuple[str, ...]) -> dict[str, Path]:
    """Module name -> file, for every .py file of the packages (or modules) `tops` of `root`,
    named by their dotted paths from `root`."""
    found = {}
    for top in tops:
        where = root.joinpath(*top.split("."))
        for path in sorted(where.rglob("*.py")) if where.is_dir() else [where.with_suffix(".py")]:
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _targets(node: ast.AST, name: str, is_package: bool) -> list[str]:
    """The absolute module names one import statement names, before they are matched to files."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: from the module's own package, one level up per extra dot
        package = name.split(".") if is_package else name.split(".")[:-1]
        base = ".".join(package[:len(package) - (node.level - 1)] + ([node.module] if node.module else []))
    else:
        base = node.module
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` (at `path`) imports anywhere in its file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = _targets(node, name, path.name == "__init__.py")
        if isinstance(node, ast.ImportFrom):
            # `from pkg import a, b`: each name that is a module is imported; pkg itself only for
            # names that are not (its attributes).
            modules = [n for n in names[:-1] if n in known]
            names = modules if len(modules) == len(names) - 1 else [*modules, names[-1]]
        for target in names:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph(root: Path = REPO, tops: tuple[str, ...] | None = None) -> dict[str, set[str]]:
    """The graph of `tops`; by default the project's top-level packages and wherever else a
    dataset of the registry keeps its package or assets (a fixture dataset under tests/)."""
    if tops is None:
        tops = (*TOPS, *(m for m in dataset_modules() if not within(m, TOPS)))
    files = module_files(root, tops)
    return {name: imports(name, path, set(files)) for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other in a circle (strongly connected components of
    two or more modules, Tarjan's algorithm without recursion), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def within(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def dataset_packages() -> tuple[str, ...]:
    """The packages of the registry's datasets (`pipeline.<dataset>`): where each spec's fetch lives."""
    return tuple(sorted({d.fetch.partition(":")[0].rpartition(".")[0] for d in datasets.DATASETS}))


def dataset_modules() -> tuple[str, ...]:
    """Everything that is one dataset's own: its package and its assets module."""
    return (*dataset_packages(), *sorted({d.assets for d in datasets.DATASETS}))


def breaks(graph: dict[str, set[str]], importers, forbidden) -> list[str]:
    return sorted(f"{m} imports {t}" for m, targets in graph.items() if importers(m)
                  for t in targets if within(t, forbidden))


GRAPH = import_graph()


def test_there_is_no_import_circle():
    found = circles(GRAPH)
    assert not found, "modules that import each other in a circle (count every import, inside functions too):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_generic_modules_name_no_dataset_and_nothing_above_them():
    """Only the registry and the Dagster glue may import a dataset's package; no plain module imports
    the glue."""
    special = (*dataset_modules(), REGISTRY, *GLUE)
    found = breaks(GRAPH, lambda m: not within(m, special), (*dataset_modules(), "assets", "checks"))
    assert not found, "\n".join(found)


def test_dataset_packages_import_no_glue():
    """A dataset's plain modules import no Dagster glue (its assets module, wherever it lives, is glue)."""
    glue = {d.assets for d in datasets.DATASETS}
    found = breaks(GRAPH, lambda m: within(m, dataset_packages()) and not within(m, glue),
                   ("assets", "checks", "pipeline.definitions"))
    assert not found, "\n".join(found)


def test_the_warehouse_knows_neither_the_glue_nor_a_dataset():
    found = breaks(GRAPH, lambda m: within(m, ("warehouse",)), ("assets", "checks", *dataset_modules()))
    assert not found, "\n".join(found)


def test_every_dataset_of_the_registry_has_its_package_and_assets_in_the_graph():
    assert len(dataset_packages()) == len(datasets.DATASETS)
    assert set(dataset_modules()) <= set(GRAPH)


def test_a_circle_closed_inside_a_function_by_a_relative_import_is_reported(tmp_path):
    """A copy of settings (a leaf), env and imaging (which imports settings) has no circle; a
    function-level relative import of imaging in settings closes one, and the check names both."""
    for name in ("__init__", "env", "settings", "imaging", "archives"):
        (tmp_path / "pipeline").mkdir(exist_ok=True)
        shutil.copy(REPO / "pipeline" / f"{name}.py", tmp_path / "pipeline" / f"{name}.py")
    assert circles(import_graph(tmp_path, ("pipeline",))) == []

    settings = tmp_path / "pipeline" / "settings.py"
    settings.write_text(settings.read_text() + "\n\ndef decoder():\n    from .imaging import open_image\n\n"
                        "    return open_image\n")
    assert circles(import_graph(tmp_path, ("pipeline",))) == [["pipeline.imaging", "pipeline.settings"]]


def test_from_a_package_import_a_module_is_an_import_of_that_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg import b\nfrom pkg import VERSION\n")
    (tmp_path / "pkg" / "b.py").write_text("import json\n\n\ndef later():\n    from . import a\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": set(), "pkg.a": {"pkg", "pkg.b"}, "pkg.b": {"pkg.a"}}
    assert circles(graph) == [["pkg.a", "pkg.b"]]

