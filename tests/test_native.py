"""The compiled hot path (sgcs/_compiled.py): all or nothing, never stale, and
the mode this run was asked for (scripts/test.sh runs the suite both ways)."""

from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

import pytest

from sgcs import _compiled

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
MODULES = ("pkg.a", "pkg.sub.b")


def _tree(root: Path, compiled: bool = True, shared: bool = True, checkout: bool = True) -> None:
    if checkout:
        (root / "pyproject.toml").write_text("")
    for module in MODULES:
        source = Path(_compiled.source_of(module, str(root)))
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("x = 1\n")
        os.utime(source, (1_000, 1_000))
        if compiled:
            source.with_suffix(SUFFIX).write_bytes(b"")
            os.utime(source.with_suffix(SUFFIX), (2_000, 2_000))
    if shared:
        (root / "sgcs").mkdir(exist_ok=True)
        (root / "sgcs" / (_compiled.SHARED_LIBRARY + SUFFIX)).write_bytes(b"")


def test_every_module_built_and_newer_than_its_source_is_native(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert _compiled.choose(str(tmp_path), MODULES, {})[0] == "native"


def test_a_source_edited_after_the_build_makes_the_whole_set_stale(tmp_path: Path) -> None:
    _tree(tmp_path)
    os.utime(_compiled.source_of("pkg.sub.b", str(tmp_path)), (3_000, 3_000))
    mode, why = _compiled.choose(str(tmp_path), MODULES, {})
    assert mode == "stale" and "b.py" in why


def test_an_installed_wheel_is_never_stale(tmp_path: Path) -> None:
    """Outside a checkout (no pyproject.toml beside the package) the files'
    times are the installer's, not edits: extensions present means native."""
    _tree(tmp_path, checkout=False)
    os.utime(_compiled.source_of("pkg.sub.b", str(tmp_path)), (3_000, 3_000))
    assert _compiled.choose(str(tmp_path), MODULES, {})[0] == "native"


def test_setup_py_compiles_the_modules_sgcs_expects() -> None:
    text = (Path(__file__).resolve().parent.parent / "setup.py").read_text()
    listed = text[text.index("NATIVE_MODULES = ("):text.index(")", text.index("NATIVE_MODULES = ("))]
    paths = [m.replace(".", "/") + ".py" for m in _compiled.NATIVE_MODULES]
    assert [p for p in paths if f'"{p}"' not in listed] == [] and listed.count(".py") == len(paths)


def test_nothing_built_or_no_shared_library_or_asked_for_is_pure(tmp_path: Path) -> None:
    _tree(tmp_path, compiled=False)
    assert _compiled.choose(str(tmp_path), MODULES, {})[0] == "pure"
    _tree(tmp_path, shared=False)
    for path in (tmp_path / "sgcs").glob("*"):
        path.unlink()
    assert _compiled.choose(str(tmp_path), MODULES, {})[0] == "pure"
    _tree(tmp_path)
    assert _compiled.choose(str(tmp_path), MODULES, {_compiled.PURE_ENV: "1"})[0] == "pure"
    assert _compiled.choose(str(tmp_path), MODULES, {_compiled.PURE_ENV: "0"})[0] == "native"


def test_the_source_finder_loads_a_listed_module_from_its_source(tmp_path: Path) -> None:
    _tree(tmp_path)
    finder = _compiled._SourceFinder(MODULES, str(tmp_path))
    spec = finder.find_spec("pkg.sub.b", None)
    assert spec is not None and spec.origin == _compiled.source_of("pkg.sub.b", str(tmp_path))
    assert finder.find_spec("pkg.other", None) is None


def _loaded_from() -> dict[str, str]:
    import sgcs.node  # noqa: F401  (imports every compiled module)

    return {m: str(sys.modules[m].__file__) for m in _compiled.NATIVE_MODULES if m in sys.modules}


@pytest.mark.skipif(not os.environ.get("SGCS_EXPECT_NATIVE"), reason="scripts/test.sh sets it when set-up built the extensions")
def test_this_run_uses_the_compiled_modules() -> None:
    assert _compiled.MODE == "native", _compiled.WHY
    assert all(path.endswith(SUFFIX) for path in _loaded_from().values())


@pytest.mark.skipif(_compiled.MODE == "native", reason="this run uses the compiled modules")
def test_otherwise_every_listed_module_runs_from_its_source() -> None:
    assert all(path.endswith(".py") for path in _loaded_from().values())
