"""Who imports whom in sgcs/, simulations/, spark_analysis/ and benchmarks/, read
from the sources with ``ast`` (nothing is imported, nothing runs).

    .venv/bin/python scripts/import_graph.py            # import cycles (exit 1 if any) and the layer diagram
    .venv/bin/python scripts/import_graph.py --write    # rewrite the diagram in docs/architecture.md

Theory of operation
-------------------
A *module* is a ``.py`` file of the four packages (``pkg/__init__.py`` is the
module ``pkg``). An *edge* A -> B is an import statement in A that names B:

* every ``import`` and ``from ... import`` statement counts, wherever it is:
  at module level, inside a function (a lazy import), or under
  ``if TYPE_CHECKING:``. A lazy import still runs and still ties the two
  modules together, and a type-only import still makes one module's meaning
  depend on the other's, so a cycle through either is a cycle;
* ``import a.b.c`` names the longest prefix that is a module;
  ``from p import x`` names ``p.x`` when that is a module, else ``p``;
  relative imports are resolved against the importing module's package;
* the parent packages an import runs on the way (``import a.b`` runs
  ``a/__init__.py``) are not edges: otherwise every package whose
  ``__init__`` imports its own submodules would be a cycle;
* imports by computed name (``importlib.import_module(f"...")``) are not
  seen: ``sgcs/__init__.py`` loads ``sgcs.blocking`` and ``sgcs.metrics``
  that way, on first use;
* a module importing itself, and imports of anything outside the four
  packages (the standard library, trio, numpy...), are not edges.

``cycles`` returns the strongly connected components of more than one module
(Tarjan); ``tests/test_import_graph.py`` asserts there are none. ``LAYERS``
assigns every module to one layer of docs/architecture.md; ``mermaid`` draws
the layer graph, and the same test checks that the drawing in the document is
the one these sources give.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sgcs", "simulations", "spark_analysis", "benchmarks")
INSTALLED_AS = {"simulations": "sgcs.sim", "spark_analysis": "sgcs.analysis"}
"""Folders that install inside sgcs (pyproject.toml, package-dir): their modules' dotted names."""
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- import-graph: begin (scripts/import_graph.py --write) -->", "<!-- import-graph: end -->"

LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (layer, what it is, module prefixes): a module belongs to the layer of its longest matching prefix
    ("benchmarks", "benchmarks/: measurements (ratios, never tests)", ("benchmarks",)),
    ("apps", "sgcs.apps: the sgcs command line, chat, demo, bench, stats", ("sgcs.apps", "sgcs.__main__")),
    ("spark_analysis", "sgcs.analysis (spark_analysis/): PySpark jobs over traces", ("sgcs.analysis",)),
    ("simulations", "sgcs.sim (simulations/): the discrete-event simulator (a driver)", ("sgcs.sim",)),
    ("services", "sgcs.services: queues, handles, flows, mailboxes", ("sgcs.services",)),
    ("api", "public API: sgcs, sgcs.api, sgcs.blocking, sgcs.metrics",
     ("sgcs", "sgcs.api", "sgcs.blocking", "sgcs.metrics")),
    ("io", "sgcs.io: the trio/asyncio driver, sockets, trace recorder", ("sgcs.io",)),
    ("node", "sgcs.node, sgcs.group: one node, one group's stack; actions, trace rows",
     ("sgcs.node", "sgcs.group", "sgcs.actions", "sgcs.trace")),
    ("ordering", "sgcs.ordering: total and safe order", ("sgcs.ordering",)),
    ("membership", "sgcs.membership: detector, view agreement, synchrony", ("sgcs.membership",)),
    ("transport", "sgcs.transport: reliable streams, repair, stability, framing", ("sgcs.transport",)),
    ("wire", "wire and security: codec, sealing", ("sgcs.wire", "sgcs.security")),
    ("values", "records, rosters, datagram types: the values the wire, the transport and membership share",
     ("sgcs.records", "sgcs.roster", "sgcs.msgtype")),
    ("common", "config, errors, version, compiled-module choice",
     ("sgcs.config", "sgcs.errors", "sgcs._version", "sgcs._compiled")),
)
"""Top to bottom. ``sgcs`` itself (the package's ``__init__``) is the public API."""


def modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of the packages."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((INSTALLED_AS.get(parts[0], parts[0]), *parts[1:]))] = path
    return found


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports (see the module docstring)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(_longest_module(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                child = f"{base}.{alias.name}" if base else alias.name
                targets.add(child if child in known else _longest_module(base, known))
    targets.discard("")
    targets.discard(name)
    return targets


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _longest_module(dotted: str, known: Mapping[str, Path]) -> str:
    while dotted and dotted not in known:
        dotted = dotted.rpartition(".")[0]
    return dotted


def graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules it imports."""
    known = modules(root, packages)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node, each sorted, sorted
    (Tarjan's algorithm, iterative: no recursion limit on a long chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
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


def cycle_path(component: list[str], edges: Mapping[str, Iterable[str]]) -> list[str]:
    """One closed path through a component, for the message: a -> b -> ... -> a."""
    members = set(component)
    start = component[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first, inside the component, back to start
        following = []
        for node in frontier:
            for succ in sorted(edges.get(node, ())):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if succ in members and succ not in parent:
                    parent[succ] = node
                    following.append(succ)
        frontier = following
    return [start]


def layer_of(module: str) -> str:
    best, length = "", -1
    for layer, _, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = layer, len(prefix)
    if not best:
        raise ValueError(f"{module}: in no layer of scripts/import_graph.py LAYERS")
    return best


def layer_edges(edges: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Layer -> the other layers its modules import."""
    result: dict[str, set[str]] = {layer: set() for layer, _, _ in LAYERS}
    for module, targets in edges.items():
        for target in targets:
            if layer_of(module) != layer_of(target):
                result[layer_of(module)].add(layer_of(target))
    return result


def mermaid(edges: Mapping[str, Iterable[str]]) -> str:
    """The layer graph as a mermaid flowchart, top to bottom. An edge that goes
    up (against the order of ``LAYERS``) is dashed; edges into ``common``,
    which every layer imports, are left out."""
    order = [layer for layer, _, _ in LAYERS]
    lines = ["```mermaid", "flowchart TD"]
    lines += [f'    {layer}["{layer}<br/><small>{text}</small>"]' for layer, text, _ in LAYERS]
    for source, targets in layer_edges(edges).items():
        for target in sorted(targets - {"common"}, key=order.index):
            arrow = "-.->" if order.index(target) < order.index(source) else "-->"
            lines.append(f"    {source} {arrow} {target}")
    lines.append("```")
    return "\n".join(lines)


def document_block(text: str) -> str:
    """The generated part of docs/architecture.md, between the markers."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n")


def write_document(edges: Mapping[str, Iterable[str]], path: Path = DOC) -> None:
    text = path.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(text[:start] + "\n" + mermaid(edges) + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the diagram in {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    edges = graph()
    found = cycles(edges)
    for component in found:
        print("import cycle: " + " -> ".join(cycle_path(component, edges)), file=sys.stderr)
    print(f"{len(edges)} modules, {sum(len(t) for t in edges.values())} imports, {len(found)} import cycles")
    if args.write:
        write_document(edges)
    else:
        print(mermaid(edges))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
