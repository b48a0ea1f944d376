"""sgcs.analysis.class_archive: the driver uses the archive only when a complete one is in place."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from sgcs.analysis import build_class_archive, class_archive  # noqa: E402
from sgcs.analysis.session import SMALL_INPUT_JVM, driver_java_options  # noqa: E402


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "share" / "spark-classes-0123.jsa"
    monkeypatch.setattr(class_archive, "archive_path", lambda: path)
    monkeypatch.setattr(build_class_archive, "archive_path", lambda: path)
    monkeypatch.delenv(class_archive.ENV_SWITCH, raising=False)
    return path


def test_the_driver_maps_the_archive_only_when_it_exists(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "SharedArchiveFile" not in driver_java_options(small_input=True)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = driver_java_options(small_input=True)
    assert f"-XX:SharedArchiveFile={archive}" in options and SMALL_INPUT_JVM in options
    assert class_archive.QUIET in options  # a JVM that cannot use it must not say so in every analysis
    monkeypatch.setenv(class_archive.ENV_SWITCH, "0")
    assert "SharedArchiveFile" not in driver_java_options(small_input=False)


def test_the_archive_build_replaces_the_use_of_it(archive: Path) -> None:
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = driver_java_options(small_input=False, java_extra="-XX:ArchiveClassesAtExit=/x.jsa")
    assert "-XX:ArchiveClassesAtExit=/x.jsa" in options and "SharedArchiveFile" not in options
    assert SMALL_INPUT_JVM not in options


def _child(writes: bytes | None, code: int) -> Any:
    """A stand-in for the child process that dumps the archive: writes ``writes`` to the partial file."""
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        assert argv[1:4] == ["-m", "sgcs.analysis.build_class_archive", "--dump"]
        if writes is not None:
            Path(argv[4]).write_bytes(writes)
        return subprocess.CompletedProcess(argv, code, "", "java.lang.OutOfMemoryError: Java heap space\n")
    return run


@pytest.mark.parametrize("writes, code", [(b"half an archive", 1), (None, 0), (b"", 0)])
def test_a_failed_build_leaves_no_archive_and_says_why(archive: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str],
                                                       writes: bytes | None, code: int) -> None:
    monkeypatch.setattr(build_class_archive.subprocess, "run", _child(writes, code))
    assert build_class_archive.build() is None
    assert list(archive.parent.iterdir()) == []  # a JVM crashes on a truncated archive: none is left in place
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("spark class archive: not built")


def test_a_complete_build_is_renamed_into_place_and_replaces_stale_ones(archive: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    archive.parent.mkdir(parents=True)
    stale = archive.parent / "spark-classes-ffff.jsa"
    stale.write_bytes(b"an older JDK's")
    monkeypatch.setattr(build_class_archive.subprocess, "run", _child(b"a whole archive", 0))
    assert build_class_archive.build() == archive
    assert archive.read_bytes() == b"a whole archive"
    assert sorted(archive.parent.iterdir()) == [archive]
    monkeypatch.setattr(build_class_archive.subprocess, "run", _child(None, 1))
    assert build_class_archive.build() == archive  # built once: set-up runs it again for nothing


def test_the_key_follows_pyspark_and_java(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    first = class_archive.archive_path()
    assert first is not None  # the set-up installs java
    monkeypatch.setattr(pyspark, "__version__", "0.0.1")
    assert class_archive.archive_path() not in (None, first)
