"""``sgcs chat``: an interactive member of a group, on the public trio API.

Theory of operation
-------------------
One node joins one group by discovery and runs two tasks:

* the *printer* iterates over the group's events and prints one line per
  event: ``[name] text`` for a delivery, ``* view <id>: N members (+joined
  -left !failed)`` for a view change, and ``* ...`` lines for suspicions,
  optimistic views and rollbacks;
* the *reader* takes lines from stdin and turns each into a multicast, a
  unicast (``/to ID text``) or a local command (``/who``, ``/help``,
  ``/quit``). It reads a ``trio.lowlevel.FdStream`` on a duplicate of fd 0,
  so waiting for the keyboard never blocks the event loop, which keeps
  serving heartbeats, retransmissions and ACKs meanwhile.

``/quit`` or the end of input leaves the group gracefully: the others see a
view change listing this member in ``left``, without waiting for suspicion.

Payload format (version 1): the first byte is a tag, the rest is UTF-8.

``T``  text: one chat line
``H``  hello of an older chat (its name, which sgcs now carries itself): ignored

Other first bytes are reserved; a message carrying one is shown by its size
only, so other programs may share the group. Members are shown by their
``Config.name`` (``--name``), which sgcs tells the other members
(``NodeHandle.name_of``); a member whose name has not reached us yet is
shown by its id.

Whatever comes from the network goes through ``printable`` before it
reaches the terminal, so a peer cannot send escape sequences.

The default order is total: every member sees the conversation in the same
order, its own lines included (they are printed when delivered, not when
typed).
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio

from ..api import (
    Delivery, Event, GroupHandle, MemberBusy, MemberSuspected, NotDelivered, OptimisticView, Rollback,
    TransitionalView, ViewChange, open_node,
)
from ..config import SECRET_ENV, SECRET_MIN, Config
from ..errors import UsageError
from .members import first_failure

TAG_HELLO = b"H"
TAG_TEXT = b"T"
MAX_LINE = 64 * 1024
"""Bytes of one input line; a longer one is sent in pieces of this size."""
DEMO_SECRET = b"sgcs-chat-demo-secret"
"""The secret when neither ``--secret`` nor ``SGCS_SECRET`` gives one: public
(it is in the source), so good only for a local demo."""
BEACON_INTERVAL = 0.25
"""Config.beacon_interval for chat members: people expect to see each other
within a moment of starting, and a coordinator's beacon is one small datagram."""
HELP = "commands: TEXT sends to all, /to ID-OR-NAME TEXT sends to one, /who lists the view, /quit leaves (so does EOF)"

Write = Callable[[str], None]


def text(line: str) -> bytes:
    return TAG_TEXT + line.encode()


def printable(value: str) -> str:
    """``value`` with control characters (terminal escapes) replaced."""
    return "".join(c if c.isprintable() else "\ufffd" for c in value)


def members(count: int) -> str:
    return f"{count} member" if count == 1 else f"{count} members"


def print_line(line: str) -> None:
    print(line, flush=True)  # flushed: stdout is often a pipe (tests, tee)


def resolve_secret(given: str | None) -> bytes | None:
    """``--secret``, else ``$SGCS_SECRET``; None when neither gives one."""
    secret = given if given is not None else os.environ.get(SECRET_ENV)
    if secret is not None and len(secret.encode()) < SECRET_MIN:
        raise UsageError(f"the secret (--secret or ${SECRET_ENV}) must be at least {SECRET_MIN} bytes (sgcs keygen prints one)")
    return None if secret is None else secret.encode()


def default_name() -> str:
    """The user's login name; without one (a container's bare uid), one made of the process id."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"member-{os.getpid()}"


class ChatMember:
    """One member's conversation: shows the group's events, runs typed lines."""

    def __init__(self, group: GroupHandle, name: str, write: Write = print_line,
                 name_of: Callable[[int], str | None] = lambda member: None) -> None:
        """``name_of``: a member's name as sgcs heard it (``NodeHandle.name_of``)."""
        self.group = group
        self.name = name
        self.write = write
        self.name_of = name_of
        self.introduced: set[int] = {group.node_id}
        """Members whose "NAME is member ID" line was shown; pruned to each new view."""

    def label(self, member: int) -> str:
        if member == self.group.node_id:
            return self.name
        name = self.name_of(member)
        return str(member) if not name else printable(name)

    def introduce(self, member: int) -> None:
        """Show which id a name stands for, once the name is known."""
        if member not in self.introduced and self.name_of(member):
            self.introduced.add(member)
            self.write(f"* {self.label(member)} is member {member}")

    # ------------------------------------------------------------ the printer

    async def show_events(self) -> None:
        async for event in self.group:
            await self.show_event(event)

    async def show_event(self, event: Event) -> None:
        await self._ON_EVENT[type(event)](self, event)

    async def _on_delivery(self, event: Delivery) -> None:
        tag, body = event.payload[:1], printable(event.payload[1:].decode(errors="replace"))
        self.introduce(event.sender)
        if tag == TAG_HELLO:
            pass  # an older chat's hello: sgcs carries names now
        elif tag == TAG_TEXT:
            private = " (to you)" if event.unicast else ""
            self.write(f"[{self.label(event.sender)}]{private} {body}")
        else:
            self.write(f"[{self.label(event.sender)}] ({len(event.payload)} bytes of another application)")

    async def _on_view(self, event: ViewChange) -> None:
        changes = [f"+{self.label(m)}" for m in event.joined if m != self.group.node_id]
        changes += [f"-{self.label(m)}" for m in event.left] + [f"!{self.label(m)}" for m in event.failed]
        detail = f" ({' '.join(changes)})" if changes else ""
        self.write(f"* view {event.view_id}: {members(len(event.members))}{detail}")
        self.introduced &= set(event.members)
        for member in event.members:
            self.introduce(member)

    async def _on_optimistic(self, event: OptimisticView) -> None:
        self.write(f"* view change under way: about {members(len(event.members))}")

    async def _on_rollback(self, event: Rollback) -> None:
        senders = sorted({self.label(sender) for sender, _ in event.messages})
        self.write(f"* {len(event.messages)} messages sent during the view change were delivered nowhere"
                   f" (from {', '.join(senders)}); their senders may type them again")

    async def _on_not_delivered(self, event: NotDelivered) -> None:
        self.write(f"* a line you typed during a view change was not delivered here ({event.reason});"
                   " other members may not have it: type it again")

    async def _on_transitional(self, event: TransitionalView) -> None:
        self.write(f"* cut off from the others: lines below reached {members(len(event.members))} only")

    async def _on_suspected(self, event: MemberSuspected) -> None:
        self.write(f"* {self.label(event.member)} is suspected: no news from it lately")

    async def _on_busy(self, event: MemberBusy) -> None:
        self.write(f"* {self.label(event.member)} is slow but alive")

    # each handler takes its own event type, which a dict's value type cannot say
    _ON_EVENT: dict[type[Event], Callable[[ChatMember, Any], Awaitable[None]]] = {
        Delivery: _on_delivery, ViewChange: _on_view, OptimisticView: _on_optimistic,
        Rollback: _on_rollback, NotDelivered: _on_not_delivered, TransitionalView: _on_transitional,
        MemberSuspected: _on_suspected, MemberBusy: _on_busy,
    }

    # ------------------------------------------------------------- the reader

    async def command(self, line: str) -> bool:
        """Run one typed line; False once the member should leave."""
        if not line.strip():
            return True
        if not line.startswith("/") or line.startswith("//"):  # "//" sends a line that starts with "/"
            await self.group.send(text(line[1:] if line.startswith("//") else line))
            return True
        verb, _, rest = line[1:].partition(" ")
        handler = self._COMMANDS.get(verb)
        if handler is None:
            self.write(f"* unknown command /{verb}; {HELP}")
            return True
        return await handler(self, rest.strip())

    async def _to(self, rest: str) -> bool:
        who, _, line = rest.partition(" ")
        member = self._member_named(who)
        if member is None or not line:
            self.write("* usage: /to ID-OR-NAME TEXT, with a member of the view (/who lists them)")
            return True
        try:
            await self.group.send(text(line), to=member)
        except UsageError as exc:  # e.g. it left meanwhile: the chat goes on
            self.write(f"* not sent: {exc}")
        else:
            self.write(f"[{self.name} to {self.label(member)}] {line}")
        return True

    def _member_named(self, who: str) -> int | None:
        members = self.group.view.members
        if who.isdigit() and int(who) in members:
            return int(who)
        named = [m for m in members if self.label(m) == who]
        return named[0] if len(named) == 1 else None

    async def _who(self, rest: str) -> bool:
        view = self.group.view
        self.write(f"* view {view.view_id}: {members(len(view))}")
        for member in view.members:
            you = " (you)" if member == self.group.node_id else ""
            self.write(f"*   {self.label(member)} (id {member}){you}")
        return True

    async def _help(self, rest: str) -> bool:
        self.write(f"* {HELP}; // at the start sends a line beginning with /")
        return True

    async def _quit(self, rest: str) -> bool:
        return False

    _COMMANDS: dict[str, Callable[[ChatMember, str], Awaitable[bool]]] = {
        "to": _to, "who": _who, "help": _help, "quit": _quit,
    }


class LineReader:
    """Lines of a trio stream, decoded as UTF-8 (bad bytes replaced)."""

    def __init__(self, stream: trio.abc.ReceiveStream, limit: int = MAX_LINE) -> None:
        self.stream = stream
        self.limit = limit
        self.buffer = bytearray()
        self.ended = False

    async def next(self) -> str | None:
        """The next line without its end of line; None at the end of input."""
        while True:
            end = self.buffer.find(b"\n", 0, self.limit)
            if end >= 0 or len(self.buffer) >= self.limit or (self.ended and self.buffer):
                cut = end if end >= 0 else min(len(self.buffer), self.limit)
                line = bytes(self.buffer[:cut])
                del self.buffer[: cut + (end >= 0)]
                return line.decode(errors="replace").rstrip("\r")
            if self.ended:
                return None
            chunk = await self.stream.receive_some(self.limit)
            self.ended = not chunk
            self.buffer += chunk


async def run(config: Config, group: str, order: str = "total", *, trace: str | Path | None = None,
              stdin_fd: int = 0, write: Write = print_line) -> None:
    """Chat in ``group`` until ``/quit`` or the end of input on ``stdin_fd``."""
    async with open_node(config, trace=trace) as node, node.join(group, order=order) as handle:
        member = ChatMember(handle, config.name, write, node.name_of)
        where = ", ".join(config.peers) if not config.use_multicast else \
            f"{config.multicast_group}:{config.multicast_port}"
        write(f"* {config.name} is member {node.id} of {group!r} ({order} order, {where}); /help for commands")
        await member.show_event(await handle.receive())  # the first event is the initial view: shown before any input
        async with trio.lowlevel.FdStream(os.dup(stdin_fd)) as stdin, trio.open_nursery() as nursery:
            nursery.start_soon(member.show_events)
            lines = LineReader(stdin)
            while (line := await lines.next()) is not None and await member.command(line):
                pass
            nursery.cancel_scope.cancel()


def run_command(name: str | None, group: str, order: str, secret: str | None, network: dict[str, object],
                trace: str | None) -> int:
    """``sgcs chat``: ``network`` holds the Config fields given on the command line."""
    given = resolve_secret(secret)
    config = Config.from_mapping({"name": name or default_name(), "secret": given or DEMO_SECRET,
                                  "beacon_interval": BEACON_INTERVAL, **network})
    if given is None:  # warned only once the input is known good: a usage error stays one line
        print(f"sgcs chat: warning: no --secret and no ${SECRET_ENV}: using the demo secret, which is not secret",
              file=sys.stderr)
    try:
        try:
            trio.run(partial(run, config, group, order, trace=trace))
        except BaseExceptionGroup as failures:  # e.g. the printer's UsageError: the group uses another order
            raise first_failure(failures) from None
    except BrokenPipeError:  # whoever read our output went away (`sgcs chat g | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the final flush does not fail too
    return 0
