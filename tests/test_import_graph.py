"""The layout (docs/architecture.md): no import cycles among the modules of
sgcs/, simulations/, spark_analysis/ and benchmarks/, every module in a layer,
the layers only in the known order, and the diagram in the document drawn from
these sources. The graph is read with ``ast`` (scripts/import_graph.py says
what counts as an import: function-local and TYPE_CHECKING imports do)."""

from __future__ import annotations

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
