"""Local member processes: what ``sgcs bench`` and ``sgcs demo`` share.

Theory of operation
-------------------
Both commands start one OS process per member (``python -P -m MODULE SPEC``,
SPEC a JSON object) on 127.0.0.1, with a multicast group and port of the run's
own (``private_network``: a free UDP port and a random 239.255.x.y), so
concurrent runs do not hear each other. The group secret goes to the members
in their environment (``SECRET_ENV``, hex), never on the command line.
``-P`` (Python 3.11) keeps the caller's working directory off the members'
``sys.path``: a stray ``trio.py`` or ``attrs.py`` there would otherwise
replace the real library in every member (``python -m`` puts the working
directory first). The members keep the parent's environment and site-packages.

Parent side: ``spawn`` starts a member with a pipe on stdin and stdout and
its stderr in a temporary file; one daemon thread per member turns its stdout
into ``(index, message)`` pairs on one queue (``None`` when the stream ends,
i.e. the member exited), so the parent waits on one queue with its own
deadline. ``release`` closes the members' stdin (their signal to finish)
and waits a while; ``stop_all`` makes sure no member outlives the parent's
command: stdin closed, terminate, then kill after ``KILL_GRACE`` seconds.

Member side: ``member_main`` parses SPEC and the secret, runs the member
under trio, and turns whatever ends it into one ``{"event": "error"}`` line
for the parent (``report`` writes the JSON lines). A member's stdin is the
parent's leash: ``stdin_closed`` returns when it closes, which is how the
parent says "stop", and also what happens when the parent dies.
"""

from __future__ import annotations

import json
import os
import queue
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import trio

from ..errors import UsageError

SECRET_ENV = "SGCS_MEMBER_SECRET"
KILL_GRACE = 2.0
"""Seconds between terminating a member and killing it."""

Lines = queue.Queue[tuple[int, dict[str, Any] | None]]
"""What the reader threads produce: (member index, message), None at end of stream."""
Spec = TypeVar("Spec")


# ----------------------------------------------------------------- parent side


def private_network() -> tuple[str, int]:
    """A free UDP port and a random administratively scoped multicast group."""
    rng = random.SystemRandom()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"239.255.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}", port


@dataclass(slots=True)
class Child:
    """One member process and the file holding its stderr."""

    index: int
    process: subprocess.Popen[str]
    stderr: IO[str]

    def last_error_line(self) -> str:
        self.stderr.seek(0)
        lines = [line.strip() for line in self.stderr.read().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit code {self.process.poll()}"

    def close_stdin(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass  # it has exited already


def spawn(
    module: str, index: int, spec_json: str, secret: bytes, lines: Lines, prefix: Sequence[str] = ()
) -> tuple[subprocess.Popen[str], IO[str]]:
    """Start ``python -P -m module spec_json``; its JSON lines go to ``lines``.

    ``-P``: the working directory is not put on the child's ``sys.path``, so
    modules lying there cannot shadow sgcs's dependencies. ``prefix``: a
    command that runs it elsewhere, e.g. ``ip netns exec NAME`` (which execs
    the program, so the child's pid stays the member's).
    """
    stderr = tempfile.TemporaryFile(mode="w+", prefix="sgcs-member-")
    env = {**os.environ, SECRET_ENV: secret.hex()}
    process = subprocess.Popen(
        [*prefix, sys.executable, "-P", "-m", module, spec_json],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True, bufsize=1,
    )
    threading.Thread(target=_read_lines, args=(index, process.stdout, lines), daemon=True).start()
    return process, stderr


def _read_lines(index: int, stream: IO[str], lines: Lines) -> None:
    for line in stream:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            message = {"event": "noise", "line": line}
        lines.put((index, message))
    lines.put((index, None))


def release(children: Iterable[Child], grace: float) -> None:
    """Close their stdin and give them ``grace`` seconds to exit; ``stop_all`` deals with the rest."""
    children = list(children)
    for child in children:
        child.close_stdin()
    _wait_all(children, grace)


def stop_all(children: Iterable[Child]) -> None:
    """No member outlives the run: terminate, then kill what is left."""
    children = list(children)
    for child in children:
        child.close_stdin()
        if child.process.poll() is None:
            child.process.terminate()
    for child in _wait_all(children, KILL_GRACE):
        child.process.kill()
        child.process.wait()
    for child in children:
        child.stderr.close()


def _wait_all(children: list[Child], grace: float) -> list[Child]:
    """Wait up to ``grace`` seconds in all for them to exit; returns those still running."""
    stop_by = time.monotonic() + grace
    running = []
    for child in children:
        try:
            child.process.wait(timeout=max(0.0, stop_by - time.monotonic()))
        except subprocess.TimeoutExpired:
            running.append(child)
    return running


# ----------------------------------------------------------------- member side


def report(event: str, **fields: Any) -> None:
    """One JSON line to the parent."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


async def stdin_closed() -> None:
    """Returns once the parent closes our stdin (or is gone)."""
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(4096):
            pass


def member_main(
    argv: Sequence[str], command: str, load_spec: Callable[[str], Spec],
    run: Callable[[Spec, bytes], Awaitable[None]], failures: tuple[type[BaseException], ...],
) -> int:
    """A member process's ``main``: 0 done, 1 failed (reported), 2 bad invocation."""
    try:
        spec = load_spec(argv[0])
        secret = bytes.fromhex(os.environ[SECRET_ENV])
    except (IndexError, KeyError, ValueError, TypeError) as exc:
        print(f"sgcs {command} member: bad invocation ({exc}); it is started by `sgcs {command}`", file=sys.stderr)
        return 2
    try:
        trio.run(run, spec, secret)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # one line to the parent, whatever it was
        failure = first_failure(exc)
        expected = isinstance(failure, (*failures, UsageError))
        report("error", message=str(failure) if expected else f"{type(failure).__name__}: {failure}")
        if not expected:
            raise
        return 1
    return 0


def first_failure(exc: BaseException) -> BaseException:
    """The meaningful exception inside trio's exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        exc = next((e for e in exc.exceptions if not isinstance(e, trio.Cancelled)), exc.exceptions[0])
    return exc
