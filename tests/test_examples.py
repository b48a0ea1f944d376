"""The examples run, and `sgcs chat` works when driven through its stdin.

Every ``examples/*.py`` runs as a subprocess with no arguments from the
repository root, as a reader would run it, and must exit 0 and print its
success line. ``sgcs chat`` runs as real processes on a multicast group and
port of the test's own: what one member types reaches the others, ``/who``
lists the view, ``/to`` reaches one member, and closing a member's stdin
makes it leave gracefully (the others see it in ``-left``). Every wait is
bounded, so a broken run fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import trio.testing

import sgcs
from sgcs.apps.chat import SECRET_ENV, ChatMember, LineReader, printable, resolve_secret

from _net import free_udp_port, private_group

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
EXAMPLE_TIMEOUT = 60.0
"""Seconds one example may run (each stops itself after 30 s with a one-line error)."""
WAIT = 30.0
"""Seconds any single wait for a chat's output may take (generous: the machine is shared)."""
SETTLE = 1.0
"""Seconds without a view change after which a chat's group counts as formed."""
SUCCESS_LINES = {
    "chat.py": "all 3 members saw the 6 lines in the same order",
    "replicated_counter.py": "all 3 replicas agree",
    "flow_graph.py": "the durable subscriber caught up: its state equals the live subscriber's",
}
"""The line each example prints when its demonstration succeeded; other examples need only exit 0."""
EXPECTED_EXAMPLES = {"chat.py", "replicated_counter.py", "blocking_facade.py", "flow_graph.py"}


# ------------------------------------------------------------------- examples


@pytest.mark.parametrize("name", sorted(EXPECTED_EXAMPLES | {path.name for path in EXAMPLES.glob("*.py")}))
def test_example_runs_and_succeeds(name: str) -> None:
    path = EXAMPLES / name
    if not path.exists():
        pytest.skip(f"examples/{name} does not exist yet (it is written with the blocking facade, sgcs/blocking.py)")
    done = subprocess.run([sys.executable, str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=EXAMPLE_TIMEOUT)
    assert done.returncode == 0, f"examples/{name} exited {done.returncode}: {done.stderr.strip()}"
    if name in SUCCESS_LINES:
        assert SUCCESS_LINES[name] in done.stdout, done.stdout


def test_every_example_is_listed_in_the_examples_readme() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for path in EXAMPLES.glob("*.py"):
        assert f"`{path.name}`" in readme, f"examples/README.md does not describe {path.name}"


def test_example_with_bad_arguments_exits_2_with_one_line() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "chat.py"), "--bogus"], cwd=ROOT, capture_output=True,
                          text=True, timeout=EXAMPLE_TIMEOUT)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "usage" in done.stderr


# -------------------------------------------------------- sgcs chat, processes


class Chat:
    """One ``sgcs chat`` process: type lines into it, wait for lines out of it."""

    def __init__(self, name: str, network: dict[str, str]) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sgcs", "chat", "room", "--name", name,
             "--multicast-group", network["group"], "--multicast-port", network["port"]],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            env={**os.environ, SECRET_ENV: "test-examples chat secret"},
        )
        self.lines: list[str] = []
        self.view_at = time.monotonic()
        """When the last view line came (``settle``)."""
        self._ended = False
        self._incoming: queue.Queue[str | None] = queue.Queue()
        assert self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._incoming.put(line.rstrip("\n"))
        self._incoming.put(None)

    def _pull(self, timeout: float) -> bool:
        """One more output line into ``lines``; False if none came within ``timeout`` s, or the output ended."""
        try:
            line = None if self._ended else self._incoming.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return False
        if line is None:
            self._ended = True
            return False
        self.lines.append(line)
        if line.startswith("* view"):
            self.view_at = time.monotonic()
        return True

    def type(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first output line (since the start) that matches ``pattern``; fails after ``WAIT`` s."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + WAIT
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if match := regex.search(line):
                    return match
            seen = len(self.lines)
            if not self._pull(deadline - time.monotonic()):
                pytest.fail(f"{self.name} printed no line matching {pattern!r} within {WAIT:g} s "
                            f"(or exited); its output: {self.lines}")

    def settle(self) -> None:
        """Returns once no view line has come for ``SETTLE`` s.

        A forming group can change view again at once (a newcomer excluded
        on its own stale discovery beacon, then merged back), and a line
        typed in a view that splits reaches one side only."""
        deadline = time.monotonic() + WAIT
        while (quiet_for := self.view_at + SETTLE - time.monotonic()) > 0:
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name}'s view kept changing for {WAIT:g} s: {self.lines}")
            self._pull(quiet_for)

    def leave(self) -> int:
        """Close stdin (end of input: a graceful leave) and wait for the exit code."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=WAIT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT)


@pytest.fixture
def chats() -> Iterator[list[Chat]]:
    """Three chat members (ann, ben, cat) on a multicast group and port of this test's own."""
    network = {"group": private_group(), "port": str(free_udp_port())}
    members: list[Chat] = []
    try:
        for name in ("ann", "ben", "cat"):  # one after the other, as people arrive
            members.append(Chat(name, network))
            members[-1].wait_for(rf"^\* view \S+: {len(members)} members?\b")
        yield members
    finally:
        for member in members:
            member.stop()


def test_chat_members_talk_list_the_view_whisper_and_leave(chats: list[Chat]) -> None:
    ann, ben, cat = chats
    ann.wait_for(r"^\* view \S+: 2 members \(\+ben\)$")  # ben's name came with his join
    for chat in chats:
        chat.wait_for(r"^\* view \S+: 3 members")
        for other in chats:
            if other is not chat:
                chat.wait_for(rf"^\* {other.name} is member \d+$")  # sgcs carries names
    for chat in chats:
        chat.settle()

    ann.type("hello from ann")
    for chat in chats:
        chat.wait_for(r"^\[ann\] hello from ann$")  # the sender's own line too: it is printed when delivered

    ben.type("/who")
    ann_id = ben.wait_for(r"^\*   ann \(id (\d+)\)$").group(1)
    ben.wait_for(r"^\*   ben \(id \d+\) \(you\)$")
    ben.wait_for(r"^\*   cat \(id \d+\)$")

    ben.type(f"/to {ann_id} psst")
    ann.wait_for(r"^\[ben\] \(to you\) psst$")

    assert cat.leave() == 0, cat.process.stderr.read() if cat.process.stderr else ""
    for chat in (ann, ben):
        chat.wait_for(r"^\* view \S+: 2 members \(-cat\)$")
    assert not any("psst" in line for line in cat.lines)  # a unicast reaches its one member only

    ann.type("/quit")
    assert ann.process.wait(timeout=WAIT) == 0
    ben.wait_for(r"^\* view \S+: 1 member \(-ann\)$")


def test_chat_help_describes_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "sgcs", "chat", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=EXAMPLE_TIMEOUT)
    assert done.returncode == 0
    assert "GROUP" in done.stdout and "--order" in done.stdout and "/who" in done.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--order", "random"], "invalid choice"),
        (["--secret", "short"], "must be at least 16 bytes"),
        (["--multicast-group", "10.0.0.1"], "multicast_group must be in 224.0.0.0/4"),
        (["--peers", "nowhere"], "peers entries must be 'host:port'"),
    ],
)
def test_chat_bad_input_exits_2_with_one_line(args: list[str], expected: str) -> None:
    done = subprocess.run([sys.executable, "-m", "sgcs", "chat", "room", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=EXAMPLE_TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# ------------------------------------------------------------ sgcs chat, parts


def test_the_secret_comes_from_the_option_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    assert resolve_secret(None) is None  # the caller falls back to the demo secret, with a warning
    monkeypatch.setenv(SECRET_ENV, "from the environment")
    assert resolve_secret(None) == b"from the environment"
    assert resolve_secret("given on the line") == b"given on the line"


def test_the_demo_secret_comes_with_a_warning_and_trace_records_the_run(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != SECRET_ENV}
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "sgcs", "chat", "room", "--multicast-port", str(free_udp_port()),
                           "--trace", str(run)], cwd=ROOT, capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT,
                          stdin=subprocess.DEVNULL, env=env)  # end of input at once: join, then leave
    assert done.returncode == 0, done.stderr
    assert "the demo secret, which is not secret" in done.stderr
    assert re.search(r"^\* view \S+: 1 member$", done.stdout, re.MULTILINE), done.stdout
    assert json.loads((run / "meta.json").read_text())["schema"] == 1
    assert list((run / "events").glob("*.parquet")), "the trace holds the member's events"


async def test_line_reader_splits_joins_and_caps_lines() -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    reader = LineReader(receive, limit=8)
    await send.send_all(b"one\r\ntw")
    await send.send_all(b"o\n0123456789\nlast \xff")
    await send.aclose()
    lines = [await reader.next() for _ in range(6)]
    assert lines == ["one", "two", "01234567", "89", "last \ufffd", None]


class FakeGroup:
    """What ChatMember uses of a GroupHandle, without a network."""

    node_id = 1

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, int | None]] = []

    async def send(self, payload: bytes, *, to: int | None = None) -> None:
        self.sent.append((payload, to))


async def test_network_text_cannot_reach_the_terminal_as_escapes() -> None:
    printed: list[str] = []
    member = ChatMember(FakeGroup(), "me", printed.append, {7: "\x1b[2Jeve"}.get)  # type: ignore[arg-type]
    await member.show_event(sgcs.Delivery(7, 1, b"Hsomeone", "v", "room"))  # an older chat's hello: ignored
    await member.show_event(sgcs.Delivery(7, 2, b"Thi\x07", "v", "room"))
    await member.show_event(sgcs.Delivery(7, 3, b"\x00\x01binary", "v", "room"))
    assert printed == ["* \ufffd[2Jeve is member 7", "[\ufffd[2Jeve] hi\ufffd",
                       "[\ufffd[2Jeve] (8 bytes of another application)"]
    assert printable("tab\there") == "tab\ufffdhere"


async def test_a_view_shows_members_by_name_once_sgcs_has_told_them() -> None:
    group, printed = FakeGroup(), list[str]()
    names = {2: "bea"}
    member = ChatMember(group, "me", printed.append, names.get)  # type: ignore[arg-type]
    await member.show_event(sgcs.ViewChange("v1", (1,), "room", joined=(1,)))
    assert printed == ["* view v1: 1 member"]
    await member.show_event(sgcs.ViewChange("v2", (1, 2, 3), "room", joined=(2, 3), left=(4,), failed=(5,)))
    assert printed[1:] == ["* view v2: 3 members (+bea +3 -4 !5)", "* bea is member 2"]
    names[3] = "cy"  # told after the view (a merge): introduced with its first line
    await member.show_event(sgcs.Delivery(3, 1, b"Thi", "v2", "room"))
    assert printed[3:] == ["* cy is member 3", "[cy] hi"]
    assert group.sent == [], "no hello of our own: sgcs carries the names"