"""Build hook: a wheel of sgcs carries the compiled hot path.

Everything about the package is in pyproject.toml; this file only adds the
modules of ``sgcs/_compiled.py`` compiled by mypyc (about a third less CPU per
delivery). When they cannot be built (no C compiler, no Python headers), the
wheel is pure Python and sgcs runs its sources: an install never fails for it.
``sgcs --version`` says which one you got.

Editable installs skip it (``scripts/setup.sh`` builds in place with
``scripts/build_native.py``), as does ``SGCS_NO_NATIVE=1``.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

NATIVE_MODULES = (
    "sgcs/wire.py", "sgcs/security.py", "sgcs/node.py", "sgcs/group.py", "sgcs/membership/synchrony.py",
    "sgcs/membership/detector.py", "sgcs/membership/agreement.py", "sgcs/membership/change.py",
    "sgcs/transport/params.py",
    "sgcs/records.py", "sgcs/transport/state.py", "sgcs/transport/reliable.py",
    "sgcs/transport/repair.py", "sgcs/transport/stability.py", "sgcs/transport/framing.py",
    "sgcs/transport/unicast.py", "sgcs/transport/reassembly.py", "sgcs/ordering/total.py",
)
"""``sgcs._compiled.NATIVE_MODULES`` as paths (a test keeps the two lists equal)."""


class OptionalBuildExt(build_ext):
    """A compiler error leaves a pure-Python wheel (sgcs needs all the modules or none)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # setuptools' CompileError and the like
            self._give_up(exc)

    def build_extension(self, ext: object) -> None:
        try:
            super().build_extension(ext)  # type: ignore[arg-type]
        except Exception as exc:
            self._give_up(exc)

    def _give_up(self, exc: Exception) -> None:
        print(f"sgcs: the compiled hot path was not built ({exc}); this install runs pure Python",
              file=sys.stderr)
        self.extensions = []


def native_extensions() -> list[object]:
    editable = any(arg.startswith("editable") for arg in sys.argv)
    if editable or os.environ.get("SGCS_NO_NATIVE", "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    try:
        return list(mypycify(list(NATIVE_MODULES), group_name="sgcs._native", opt_level="3"))
    except (Exception, SystemExit) as exc:  # mypy's type errors exit; a missing source: pure Python
        print(f"sgcs: mypyc could not compile the hot path ({exc}); this install runs pure Python", file=sys.stderr)
        return []


setup(ext_modules=native_extensions(), cmdclass={"build_ext": OptionalBuildExt})
