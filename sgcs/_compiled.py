"""The compiled hot path: which modules mypyc compiles, and whether to use them.

Theory of operation
-------------------
``scripts/build_native.py`` (run by ``scripts/setup.sh``) compiles the modules
in ``NATIVE_MODULES`` with mypyc, in place: next to ``sgcs/node.py`` lies
``sgcs/node.cpython-311-x86_64-linux-gnu.so``, and all of them share one
library, ``sgcs/_native__mypyc...so``. Python's import system prefers an
extension module to the source beside it, so once built, ``import sgcs.node``
loads the compiled code: the same source, type-checked by mypy and turned into
C, about a third less CPU per delivery.

The compiled modules call each other directly, through the shared library,
not through ``sys.modules``: mixing compiled and source versions of them would
run old code behind new. So the choice is all or nothing, made once, when
``sgcs`` is imported (``install``):

* ``native``: every listed module has an extension no older than its source;
* ``pure``: ``SGCS_PURE_PYTHON`` is set (CI runs the suite this way too), or
  nothing was built (no C compiler: set-up says so and goes on);
* ``stale``: in a checkout (a ``pyproject.toml`` beside the package), some
  source changed after the build. sgcs warns once and runs the sources;
  ``scripts/setup.sh`` rebuilds. A wheel (``pip install .``, built by
  ``setup.py``) carries its extensions, and nothing there is edited.

In the last two cases a finder placed first on ``sys.meta_path`` loads the
listed modules from their ``.py`` files, so an extension never runs code its
source no longer has.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

NATIVE_MODULES: tuple[str, ...] = (
    "sgcs.wire",
    "sgcs.security",
    "sgcs.node",
    "sgcs.group",
    "sgcs.membership.synchrony",
    "sgcs.membership.detector",
    "sgcs.membership.agreement",
    "sgcs.membership.change",
    "sgcs.transport.params",
    "sgcs.records",
    "sgcs.transport.state",
    "sgcs.transport.reliable",
    "sgcs.transport.repair",
    "sgcs.transport.stability",
    "sgcs.transport.framing",
    "sgcs.transport.unicast",
    "sgcs.transport.reassembly",
    "sgcs.ordering.total",
)
"""Modules compiled by mypyc: the per-message path of the node."""
SHARED_LIBRARY = "_native__mypyc"
"""The shared library of the compiled group (mypyc's ``group_name`` "sgcs._native")."""
PURE_ENV = "SGCS_PURE_PYTHON"
"""Set (to anything but empty or 0) to run the sources even when compiled modules exist."""

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The directory that holds the ``sgcs`` package. (os.path, not pathlib: this
module runs at every ``import sgcs``, and start-up time is measured.)"""


def source_of(module: str, root: str = PACKAGE_ROOT) -> str:
    return os.path.join(root, *module.split(".")) + ".py"


def extension_of(module: str, root: str = PACKAGE_ROOT) -> str | None:
    """The compiled module beside the source, if any."""
    stem = os.path.join(root, *module.split("."))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(stem + suffix):
            return stem + suffix
    return None


def choose(root: str = PACKAGE_ROOT, modules: Sequence[str] = NATIVE_MODULES,
           environ: dict[str, str] | os._Environ[str] = os.environ) -> tuple[str, str]:
    """("native" | "pure" | "stale", why): see the module docstring."""
    if environ.get(PURE_ENV, "") not in ("", "0"):
        return "pure", f"{PURE_ENV} is set"
    checkout = os.path.exists(os.path.join(root, "pyproject.toml"))  # installed from a wheel: nothing is edited
    for module in modules:
        extension = extension_of(module, root)
        if extension is None:
            return "pure", "not compiled (scripts/build_native.py)"
        if checkout and os.path.getmtime(source_of(module, root)) > os.path.getmtime(extension):
            return "stale", f"{os.path.basename(source_of(module, root))} changed after it was compiled"
    if extension_of("sgcs." + SHARED_LIBRARY, root) is None:
        return "pure", f"the shared library {SHARED_LIBRARY} is missing"
    return "native", "compiled by mypyc"


class _SourceFinder:
    """Loads the listed modules from their sources, never their extensions
    (a meta path finder: ``find_spec`` is all ``sys.meta_path`` asks)."""

    def __init__(self, modules: Sequence[str], root: str) -> None:
        self.modules = frozenset(modules)
        self.root = root

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_of(fullname, self.root))


MODE, WHY = "pure", "not yet decided"


def install() -> None:
    """Decide once per process (``sgcs/__init__.py`` calls this first)."""
    global MODE, WHY
    MODE, WHY = choose()
    if MODE == "stale":
        warnings.warn(f"sgcs: compiled modules are out of date ({WHY}); running the pure-Python sources. "
                      "Run scripts/setup.sh to rebuild them.", RuntimeWarning, stacklevel=3)
    if MODE != "native" and not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder(NATIVE_MODULES, PACKAGE_ROOT))


def describe() -> str:
    """One line for ``sgcs --version`` and bench reports."""
    return "compiled (mypyc)" if MODE == "native" else f"pure Python ({WHY})"
