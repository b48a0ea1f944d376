"""`sgcs demo`: a short real run shows the kill and the survivors' new view.

Two runs of three real member processes (about 7 s and 5 s, the second
with ``--trace``), the one-line errors of bad arguments, and the verdict
logic of ``DemoRun`` fed by hand (no processes), including the failures that
make the command exit 1.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import pytest

from sgcs.apps.cli import main
from sgcs.apps.demo import DemoMember, DemoOptions, DemoRun
from sgcs.apps.demo_display import summary


def _exit_code(argv: list[str]) -> int:
    """main's return value, or argparse's exit code."""
    try:
        return main(argv)
    except SystemExit as exit:
        return int(exit.code or 0)


def _member_children() -> list[int]:
    """Live processes started by this one that run a demo member."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == os.getpid() and b"sgcs.apps.demo_member" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.integration
def test_three_members_one_killed_survivors_agree(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--members", "3", "--duration", "6", "--plain"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    killed = re.search(r"(m\d) killed \(SIGKILL\) at ", out)
    assert killed, out
    victim = killed.group(1)
    assert re.search(rf"view \S+: 2 members, failed \[{victim}\]", out), out
    assert "all 2 survivors agree on " in out and f"without {victim}" in out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("sgcs demo: 3 members, total order") and "all 2 survivors installed a view" in summary
    assert "status:" in out  # the once-a-second status lines of plain mode
    assert _member_children() == []


@pytest.mark.integration
def test_trace_records_every_member_and_the_kill_as_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyarrow")
    from sgcs.sim import checks

    run = tmp_path / "run"
    code = main(["demo", "--members", "3", "--duration", "4", "--plain", "--trace", str(run)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    killed = re.search(r"m(\d) killed \(SIGKILL\)", out)
    assert killed, out
    events = checks.read_events(run)
    crashes = events[events["kind"] == "crash"]
    assert list(crashes["node"]) == [int(killed.group(1))]
    assert set(events["node"]) == {1, 2, 3}
    assert not any(checks.violations(events).values())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--members", "1"], "--members must be an integer in [2, 16]"),
        (["--members", "17"], "--members must be an integer in [2, 16]"),
        (["--duration", "0"], "--duration must be in (0,"),
        (["--duration", "6", "--kill-at", "6"], "--kill-at must be 0 (never) or inside the run"),
        (["--rate", "-1"], "--rate must be in (0,"),
        (["--order", "random"], "invalid choice"),
        (["--members", "three"], "invalid int value"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = _exit_code(["demo", "--plain", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err and len(err.strip().splitlines()) == 1


def test_trace_into_a_non_empty_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "old").write_text("a previous run")
    assert _exit_code(["demo", "--plain", "--trace", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "must be a new or empty directory" in err and len(err.strip().splitlines()) == 1


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["demo", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--members", "--duration", "--kill-at", "--rate", "--order", "--trace", "--plain"):
        assert option in out


# ------------------------------------------------------- the verdict, by hand


class _FakeProcess:
    pid = 0
    returncode: int | None = None

    def kill(self) -> None:
        self.returncode = -9

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = 1
        return 1

    def poll(self) -> int | None:
        return self.returncode


def _run(members: int = 3) -> DemoRun:
    stderr = "Traceback\nRuntimeError: boom\n"
    rows = [DemoMember(i, _FakeProcess(), io.StringIO(stderr), node_id=i + 1)  # type: ignore[arg-type]
            for i in range(members)]
    run = DemoRun(DemoOptions(members=members, duration=6.0), rows, on_event=lambda line: None)
    for row in rows:
        run.handle(row, {"event": "joined", "t": run.started, "id": row.node_id})
    return run


def _view(run: DemoRun, member: DemoMember, view_id: str, ids: list[int], **changes: Any) -> None:
    message = {"event": "view", "t": run.kill_t or run.started, "view_id": view_id, "members": ids,
               "joined": [], "left": [], "failed": [], **changes}
    run.handle(member, message)


def _formed(run: DemoRun) -> DemoRun:
    """Every member in view v1.3 of all three."""
    for row in run.members:
        _view(run, row, "v1.3", [1, 2, 3])
    return run


def test_verdict_success_and_timing() -> None:
    run = _formed(_run())
    assert run.agree() and not run.settled()  # the kill is still to come
    run._kill(run.members[2])
    for row in run.members[:2]:
        _view(run, row, "v2.2", [1, 2], failed=[3])
    assert run.verdict() is None and run.kill_to_view() == [0.0, 0.0]
    assert "failed [m3]" in "\n".join(run.events)
    assert "all 2 survivors installed a view without it 0.00 s after the kill, and agree on v2.2" in summary(run)


@pytest.mark.parametrize(
    ("views", "reason"),
    [
        ([(1, "v2.2", [2, 3])], "m3 never installed a view without m1"),
        ([(1, "v2.2", [2, 3]), (2, "v2.1", [3])], "the members do not agree on one view of the 2 survivors"),
    ],
)
def test_verdict_fails_unless_every_survivor_installs_one_view(
    views: list[tuple[int, str, list[int]]], reason: str
) -> None:
    run = _formed(_run())
    run._kill(run.members[0])
    for index, view_id, ids in views:
        _view(run, run.members[index], view_id, ids, failed=[1])
    assert (run.verdict() or "").startswith(reason)
    assert "survivors installed a view without it" in summary(run)


def test_an_error_line_or_an_early_exit_fails_the_run() -> None:
    run = _run()
    run.handle(run.members[1], {"event": "error", "message": "Config.secret must be at least 8 bytes"})
    assert run.verdict() == "m2: Config.secret must be at least 8 bytes" and run.finished()


def test_a_member_that_exits_fails_the_run_unless_killed() -> None:
    run = _run()
    run._kill(run.members[0])
    run.handle(run.members[0], None)  # the victim's stdout closes: expected
    assert run.failure is None
    run.handle(run.members[2], None)
    assert run.verdict() == "m3 exited unexpectedly: RuntimeError: boom"
