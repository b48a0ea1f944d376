"""Compile sgcs's hot modules with mypyc, in place (``sgcs/_compiled.py`` says which, and why).

    .venv/bin/python scripts/build_native.py            # build when a source is newer than its extension
    .venv/bin/python scripts/build_native.py --force    # build anyway
    .venv/bin/python scripts/build_native.py --clean    # remove the extensions: sgcs runs its sources

``scripts/setup.sh`` runs it. It needs mypy (with mypyc), setuptools and a C compiler with
the Python headers; when the build fails, the extensions are removed, the error is in
``build/native/build.log``, and sgcs runs as pure Python. Exit code 0: built or up to date;
1: the build failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

with warnings.catch_warnings():  # "out of date" is why we are here
    warnings.simplefilter("ignore", RuntimeWarning)
    from sgcs import _compiled  # noqa: E402  (after the path: the checkout's sgcs, not an installed one)

BUILD_DIR = ROOT / "build" / "native"


def extensions() -> list[Path]:
    modules = (*_compiled.NATIVE_MODULES, "sgcs." + _compiled.SHARED_LIBRARY)
    return [Path(e) for m in modules if (e := _compiled.extension_of(m, str(ROOT))) is not None]


def clean() -> None:
    for path in extensions():
        path.unlink()


def build() -> None:
    from mypyc.build import mypycify
    from setuptools import setup

    sources = [os.path.relpath(_compiled.source_of(m, str(ROOT)), ROOT) for m in _compiled.NATIVE_MODULES]
    setup(
        name="sgcs-native",
        ext_modules=mypycify(sources, group_name="sgcs._native", opt_level="3", target_dir=str(BUILD_DIR)),
        script_args=["build_ext", "--inplace", "--build-temp", str(BUILD_DIR / "temp"),
                     "--build-lib", str(BUILD_DIR / "lib")],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="build even when up to date")
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules and stop")
    args = parser.parse_args(argv)
    if args.clean:
        clean()
        return 0
    mode, _ = _compiled.choose(str(ROOT), environ={})
    if mode == "native" and not args.force:
        return 0
    clean()  # a failed build must leave no extension older than its source
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    log = BUILD_DIR / "build.log"
    os.chdir(ROOT)
    with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            build()
            failed = None
        except (Exception, SystemExit) as exc:  # setuptools reports compiler errors as SystemExit
            failed = exc
    if failed is None:
        # build_ext copies an up-to-date module (a shim that did not change) with
        # its old mtime; every extension belongs to this build, so date them now
        for path in extensions():
            path.touch()
    if failed is not None or _compiled.choose(str(ROOT), environ={})[0] != "native":
        clean()
        print(f"build_native: mypyc build failed ({failed or 'incomplete'}); see {log}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
