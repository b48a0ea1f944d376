"""A group chat on the sgcs trio API: three members agree on one transcript.

With no arguments, three nodes (alice, then bob, then carol) start in this
one trio process, each joining the group "chat" with total order once the
one before it is in. They use a multicast group and port of this run's own.
Then they hold a scripted conversation: each sends its next line only after
the line before it has been delivered, the way people reply. Every member
collects what it delivers, its own lines included. The script prints the
transcript and checks that each member saw every line, in the order of the
script.

With ``--interactive NAME`` it is a real member of the group "chat" on the
default network, the same as ``sgcs chat chat --name NAME``. Start a second
one in another terminal to talk to it.

    python examples/chat.py
    python examples/chat.py --interactive alice
"""

from __future__ import annotations

import secrets
import socket
import sys

import trio

import sgcs

SCRIPT = [
    ("alice", "hi, anyone here?"),
    ("bob", "hi alice"),
    ("carol", "hello both"),
    ("alice", "each of us sees these lines in one order"),
    ("bob", "total order: same transcript everywhere"),
    ("carol", "bye!"),
]
NAMES = ("alice", "bob", "carol")
SECRET = b"examples/chat.py secret"
TIMEOUT = 30.0
"""Seconds for the whole conversation; it takes about 1 s."""


def private_network() -> dict[str, object]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # a free port and a random 239.255.x.y,
        probe.bind(("127.0.0.1", 0))  # so that concurrent runs never hear each other
        x, y = secrets.randbelow(254) + 1, secrets.randbelow(254) + 1
        return {"multicast_group": f"239.255.{x}.{y}", "multicast_port": probe.getsockname()[1]}


class Member:
    """What one member has seen so far."""

    def __init__(self, name: str) -> None:
        self.name, self.view_size, self.heard = name, 0, list[str]()

    async def chat(self, network: dict[str, object], everyone: list[Member], done: trio.Event,
                   task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        config = sgcs.Config(name=self.name, secret=SECRET, beacon_interval=0.1, **network)
        async with sgcs.open_node(config) as node, node.join("chat", order=sgcs.Order.TOTAL) as group:
            said: set[int] = set()
            async for event in group:
                if isinstance(event, sgcs.ViewChange):
                    self.view_size = len(event.members)
                    if self.view_size == NAMES.index(self.name) + 1:
                        task_status.started()  # we are in: the next member may come
                elif isinstance(event, sgcs.Delivery):
                    self.heard.append(event.payload.decode())
                turn = len(self.heard)  # the script's next line
                if turn == len(SCRIPT):
                    break
                if self.view_size == len(NAMES) and SCRIPT[turn][0] == self.name and turn not in said:
                    said.add(turn)
                    await group.send(f"{self.name}: {SCRIPT[turn][1]}".encode())
            if all(len(m.heard) == len(SCRIPT) for m in everyone):
                done.set()
            await done.wait()  # stay until everyone is done: the others may still need our messages repaired


async def conversation(everyone: list[Member]) -> None:
    network, done = private_network(), trio.Event()
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            for member in everyone:  # one after the other, as people arrive
                await nursery.start(member.chat, network, everyone, done)


def main(args: list[str]) -> int:
    if args and (args[0] != "--interactive" or len(args) != 2):
        return fail("usage: python examples/chat.py [--interactive NAME]", code=2)
    everyone = [Member(name) for name in NAMES]
    try:
        if args:
            from sgcs.apps.chat import run_command  # what `sgcs chat` runs

            return run_command(args[1], "chat", "total", secret=None, network={}, trace=None)
        trio.run(conversation, everyone)
    except trio.TooSlowError:
        seen = "; ".join(f"{m.name}: view of {m.view_size}, {len(m.heard)} lines" for m in everyone)
        return fail(f"the conversation did not finish within {TIMEOUT:g} s ({seen})")
    except Exception as exc:  # e.g. no multicast on this host: one line, not a traceback
        while isinstance(exc, ExceptionGroup):
            exc = exc.exceptions[0]
        return fail(f"{type(exc).__name__}: {exc}")
    expected = [f"{who}: {line}" for who, line in SCRIPT]
    print("\n".join(f"  {line}" for line in everyone[0].heard))
    wrong = [m for m in everyone if m.heard != expected]
    if wrong:
        return fail("; ".join(f"{m.name} saw another transcript: {m.heard}" for m in wrong))
    print(f"all {len(NAMES)} members saw the {len(SCRIPT)} lines in the same order")
    return 0


def fail(message: str, code: int = 1) -> int:
    print(f"examples/chat.py: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
