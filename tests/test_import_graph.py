"""The layout (docs/architecture.md): no import cycles among the modules of
sgcs/, simulations/, spark_analysis/ and benchmarks/, every module in a layer,
the layers only in the known order, and the diagram in the document drawn from
these sources. The graph is read with ``ast`` (scripts/import_graph.py says
what counts as an import: function-local and TYPE_CHECKING imports do)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from scripts import import_graph as ig

ROOT = Path(__file__).resolve().parents[1]

KNOWN_LAYER_CYCLES: list[list[str]] = []
"""Layer cycles the code may have: none. The values the wire, the transport
and membership share (records, rosters) sit in a layer below them all
(``sgcs/records.py``, ``sgcs/roster.py``). A new layer cycle fails here."""


def test_no_import_cycles() -> None:
    edges = ig.graph()
    found = ig.cycles(edges)
    paths = [" -> ".join(ig.cycle_path(component, edges)) for component in found]
    assert not found, "import cycles:\n" + "\n".join(paths)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import x\n")
    (package / "a.py").write_text("import pkg.b\nx = 1\n")
    (package / "b.py").write_text("def f():\n    from .sub import c\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\nimport os, numpy\n")
    edges = ig.graph(tmp_path, ["pkg"])
    assert edges == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.sub.c"}, "pkg.sub": set(),
                     "pkg.sub.c": {"pkg.a"}}
    assert ig.cycles(edges) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert ig.cycle_path(["pkg.a", "pkg.b", "pkg.sub.c"], edges) == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]


def test_every_module_is_in_a_layer_and_layer_cycles_are_known() -> None:
    edges = ig.graph()
    for module in edges:
        ig.layer_of(module)  # raises for a module in no layer
    assert ig.cycles(ig.layer_edges(edges)) == KNOWN_LAYER_CYCLES


def test_architecture_diagram_matches_the_sources() -> None:
    text = ig.DOC.read_text()
    assert ig.document_block(text) == ig.mermaid(ig.graph()), (
        "docs/architecture.md is out of date: run .venv/bin/python scripts/import_graph.py --write")


def test_console_script_target_exists() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["sgcs"].partition(":")
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), scripts["sgcs"]
    assert f"def {function}(" in (ROOT / (module.replace(".", "/") + ".py")).read_text()


def test_every_package_is_installed_and_nothing_generic_at_the_top() -> None:
    """pyproject lists packages by hand (two folders install inside sgcs):
    a new subpackage must be added there, and only ``sgcs`` is top-level."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"sgcs": "sgcs", **setup["package-dir"]}  # package -> folder
    wanted = set()
    for top, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            wanted.add(".".join((top, *init.parent.relative_to(ROOT / folder).parts)))
    assert set(setup["packages"]) == wanted
    assert {name.split(".")[0] for name in setup["packages"]} == {"sgcs"}


KNOWN_BENCHMARK_IMPORTS: dict[str, set[str]] = {
    "test_quiet_members.py": {"benchmarks"},
    "services/test_handles_survival.py": {"handles_table2"},
}
"""Test modules that still import benchmark code, and what they import: this
list may only shrink. The logic a test shares with a benchmark lives in the
product or in a helper of tests/ (``_fd_rounds``, ``_flood``, ``_nemesis``,
``_stability_rounds``), which the benchmark imports; a test of a benchmark
script itself runs it in a process of its own."""


def benchmark_imports(path: Path) -> set[str]:
    """Top-level names ``path`` imports that are benchmark code: the package
    ``benchmarks``, or a script of benchmarks/ imported by its bare name (with
    benchmarks/ put on the path) that no helper of tests/ shadows."""
    tests = ROOT / "tests"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return {name for name in names if name == "benchmarks" or (
        (ROOT / "benchmarks" / f"{name}.py").is_file() and not (tests / f"{name}.py").is_file())}


def test_tests_import_no_benchmark_code() -> None:
    tests = ROOT / "tests"
    found = {path.relative_to(tests).as_posix(): names for path in sorted(tests.rglob("*.py"))
             if (names := benchmark_imports(path))}
    new = {module: names - KNOWN_BENCHMARK_IMPORTS.get(module, set()) for module, names in found.items()}
    assert not any(new.values()), f"tests importing benchmark code: {new}"
