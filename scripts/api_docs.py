"""Build the API reference (HTML) from the docstrings with pdoc.

    .venv/bin/python scripts/api_docs.py [OUT]     (default build/api; open OUT/index.html)

Any pdoc warning (a name in ``__all__`` that does not resolve, a broken
cross-reference) fails the build, so the reference stays complete.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pdoc

MODULES = ["sgcs", "sgcs.blocking", "sgcs.metrics", "sgcs.services.queues", "sgcs.services.flows",
           "sgcs.services.handles", "sgcs.services.mailboxes"]
"""The public API: the library, its facades, and the four services."""


def build(out: Path) -> list[str]:
    """Write the reference into ``out``; returns pdoc's warnings."""
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            # the services load their trio parts on first use (module __getattr__), which pdoc does not call
            setattr(module, attr, getattr(module, attr))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*MODULES, output_directory=out)
    return [str(w.message) for w in caught]


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "build/api")
    problems = build(out)
    for problem in problems:
        print(f"api_docs: {problem}", file=sys.stderr)
    if not problems:
        print(f"api_docs: {out / 'index.html'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
