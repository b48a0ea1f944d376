"""State transfer to joiners (``NodeHandle.join(..., state=...)``).

Theory of operation
-------------------
An application that keeps state built from a group's deliveries gives the
group an object with ``get_state() -> bytes`` and ``set_state(bytes)``. A
member that joins a group whose members already share state receives a
snapshot taken at one point of the group's delivery order, then every
delivery after that point, exactly once (JGroups' ``STATE_TRANSFER``; a
Raft ``InstallSnapshot`` for a group without a log).

The point must be the same in every member's stream, so state transfer needs
a total order (``Order.TOTAL`` or ``Order.SAFE``). A member *has state* once
it received a snapshot, once a view of members none of which had state
settled (a group forming), or once it stayed alone for ``founder_after``
seconds (3 beacon intervals: it found no group, as JGroups' first member
becomes coordinator after its join timeout). Until then it hands the
application no delivery: they wait. At every view change of more than one
member, every member multicasts HELLO(view, has state); the delivery of the
last HELLO of the view is the cut. There, if some members lack state and
others have it, the lowest-id member with state (the provider) calls
``get_state()`` and unicasts the snapshot to each of them in chunks, from a
background task so its application goes on. They drop the deliveries that
waited until the cut (the snapshot holds them), keep those after it, call
``set_state`` once the last chunk arrives, and then hand the kept deliveries
over. If no member had state, they all have it from the cut and hand over
what waited. Members with state keep theirs when two views that both had
state merge: reconciling two histories is the application's choice
(``TransitionalView`` and ``ViewChange.failed`` say who came from where). A
provider that leaves mid-transfer is replaced at the next view change.

``get_state()`` is called inside ``receive()``: it must describe exactly the
deliveries ``receive()`` returned before. So a stateful group hands events
over one at a time (``receive_many`` returns one). Every member of such a
group must join it with ``state=``: application payloads travel with a
one-byte kind ahead of them, and a payload of an unknown kind is dropped and
counted (``dropped``).
"""

from __future__ import annotations

import hashlib
import struct
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import trio

from .actions import Delivery, MessageId, NotDelivered, Rollback, ViewInstalled
from .errors import SgcsError

if TYPE_CHECKING:
    from .io.trio_driver import AppEvent


class _Group(Protocol):
    """What the layer needs of its group handle (``api._StatefulGroupHandle``)."""

    @property
    def node_id(self) -> int: ...

    async def _send_raw(self, payload: bytes, *, to: int | None = None) -> MessageId: ...

APP, HELLO, CHUNK = 0, 1, 2
_HELLO = struct.Struct(">BQB")
_CHUNK = struct.Struct(">BQII")
CHUNK_SIZE = 256 * 1024
"""Bytes of snapshot per unicast."""


class GroupState(Protocol):
    """What ``join(..., state=...)`` needs of the application's state."""

    def get_state(self) -> bytes:
        """The state after every delivery ``receive()`` returned so far."""
        ...

    def set_state(self, state: bytes) -> None:
        """Replace the state by a ``get_state()`` of another member."""
        ...


def _token(view_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(view_id.encode(), digest_size=8).digest(), "big")


class StateTransfer:
    """The receive-side filter of a stateful group: control payloads, the cut,
    the deliveries that wait for state. ``GroupHandle`` calls it for every event."""

    def __init__(self, group: _Group, state: GroupState, spawn: trio.Nursery, founder_after: float) -> None:
        self.group = group
        self.state = state
        self.has_state = False
        self.transfers = 0
        """Snapshots this member loaded."""
        self.dropped = 0
        """Payloads of an unknown kind."""
        self.founder_after = founder_after
        self._spawn = spawn
        self._view = 0
        self._members: tuple[int, ...] = ()
        self._alone_since: float | None = None
        self._hellos: dict[int, bool] = {}
        self._provider: int | None = None
        """After the cut, while we wait for a snapshot: who sends it."""
        self._waiting: list[Delivery] = []
        """Deliveries that wait for state: before the cut, or after it until the snapshot."""
        self._chunks: dict[tuple[int, int], dict[int, bytes]] = {}
        """(sender, view) -> the snapshot chunks it sent us: a unicast may come before the cut."""
        self._control: set[int] = set()
        """Seqs of our own HELLOs, kept out of the application's Rollbacks."""
        self.ready: deque[AppEvent] = deque()
        """Events for the application that this layer released."""

    def take(self, event: AppEvent) -> None:
        """One event of the group (the node's action): what the application gets
        of it goes to ``ready``, in order."""
        self.found_alone()
        out: AppEvent | None = event
        if type(event) is Delivery:
            out = self._on_delivery(event)
        elif isinstance(event, ViewInstalled):
            self._on_view(event)
        elif isinstance(event, Rollback):
            mine = [m for m in event.messages if m[0] == self.group.node_id and m[1] in self._control]
            if mine:
                self._spawn.start_soon(self._send_hello, self._view)
                rest = tuple(m for m in event.messages if m not in mine)
                out = Rollback(rest, event.group) if rest else None
        elif isinstance(event, NotDelivered) and event.to is None and event.message.seq in self._control:
            self._spawn.start_soon(self._send_hello, self._view)
            out = None
        if out is not None:
            self.ready.append(out)

    def founding_at(self) -> float | None:
        """When this member, alone and without state, founds the group (see ``found_alone``)."""
        since = self._alone_since
        return None if self.has_state or since is None else since + self.founder_after

    def found_alone(self) -> None:
        """Alone long enough: no group to join, so this member founds one."""
        at = self.founding_at()
        if at is not None and trio.current_time() >= at:
            self._gain_state(keep_waiting=True)

    def _gain_state(self, *, keep_waiting: bool) -> None:
        self.has_state, self._provider, self._chunks = True, None, {}
        if keep_waiting:
            self.ready.extend(self._waiting)
        self._waiting = []

    def _on_view(self, event: ViewInstalled) -> None:
        self._view, self._members = _token(event.view_id), event.members
        self._hellos, self._provider = {}, None
        self._chunks = {key: chunks for key, chunks in self._chunks.items() if key[1] == self._view}
        alone = event.members == (self.group.node_id,)
        self._alone_since = trio.current_time() if alone and not self.has_state else None
        if not alone:
            self._spawn.start_soon(self._send_hello, self._view)

    async def _send_hello(self, view: int) -> None:
        if view != self._view:
            return
        try:
            message: MessageId = await self.group._send_raw(_HELLO.pack(HELLO, view, int(self.has_state)))
        except (SgcsError, trio.ClosedResourceError):
            return
        self._control.add(message.seq)

    def _on_delivery(self, delivery: Delivery) -> Delivery | None:
        payload = delivery.payload
        kind = payload[0] if payload else -1
        if kind == APP:
            plain = delivery._replace(payload=payload[1:])
            if self.has_state or delivery.dest is not None:
                return plain
            self._waiting.append(plain)
            return None
        if kind == HELLO and len(payload) == _HELLO.size and delivery.dest is None:
            _, view, has_state = _HELLO.unpack(payload)
            self._on_hello(delivery.sender, view, bool(has_state))
            return None
        if kind == CHUNK and len(payload) >= _CHUNK.size and delivery.dest is not None:
            self._on_chunk(delivery.sender, payload)
            return None
        self.dropped += 1
        return None

    def _on_hello(self, sender: int, view: int, has_state: bool) -> None:
        if view != self._view or sender not in self._members or sender in self._hellos:
            return
        self._hellos[sender] = has_state
        if len(self._hellos) < len(self._members):
            return
        # The cut: the same place in every member's stream (total order).
        holders = sorted(m for m, held in self._hellos.items() if held)
        lacking = tuple(sorted(m for m, held in self._hellos.items() if not held))
        if not holders:
            self._gain_state(keep_waiting=True)  # a group forming: what waited is everyone's
        elif not self.has_state:
            self._provider, self._waiting = holders[0], []  # the snapshot holds what waited
            self._load_if_complete()
        elif lacking and self.group.node_id == holders[0]:
            self._spawn.start_soon(self._send_state, self._view, self.state.get_state(), lacking)

    async def _send_state(self, view: int, image: bytes, to: tuple[int, ...]) -> None:
        chunks = [image[i:i + CHUNK_SIZE] for i in range(0, len(image), CHUNK_SIZE)] or [b""]
        try:
            for member in to:
                for index, chunk in enumerate(chunks):
                    if view != self._view:
                        return  # the view changed: the next cut sends again
                    await self.group._send_raw(_CHUNK.pack(CHUNK, view, index, len(chunks)) + chunk, to=member)
        except (SgcsError, trio.ClosedResourceError):
            return  # the group closed, or the member left: the next view change decides

    def _on_chunk(self, sender: int, payload: bytes) -> None:
        _, view, index, total = _CHUNK.unpack_from(payload)
        if self.has_state or not index < total:
            return
        chunks = self._chunks.setdefault((sender, view), {})
        chunks[index] = payload[_CHUNK.size:]
        chunks[-1] = total.to_bytes(4, "big")
        self._load_if_complete()

    def _load_if_complete(self) -> None:
        if self._provider is None:
            return
        chunks = self._chunks.get((self._provider, self._view))
        if chunks is None or -1 not in chunks:
            return
        total = int.from_bytes(chunks[-1], "big")
        if len(chunks) - 1 < total:
            return
        image = b"".join(chunks[i] for i in range(total))
        self.state.set_state(image)
        self.transfers += 1
        self._gain_state(keep_waiting=True)  # what came after the cut


def framed(payloads: Iterable[bytes]) -> list[bytes]:
    return [bytes((APP,)) + p for p in payloads]
