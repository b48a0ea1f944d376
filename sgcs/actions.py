"""What the sans-I/O node asks its driver to do.

Every input method of ``sgcs.node.Node`` returns a list of these values. They
are frozen, slotted dataclasses: plain data that a driver routes, never objects
with behaviour. ``Address`` is opaque to the protocol: the simulator uses node
ids, the trio driver ``(host, port)`` tuples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, NamedTuple, Union

from .wire import MsgType

Address = Hashable


@dataclass(frozen=True, slots=True)
class Send:
    """Send one datagram to one address (unreliable)."""

    dst: Address
    data: bytes
    msg_type: MsgType


@dataclass(frozen=True, slots=True)
class Multicast:
    """Send one datagram by unreliable IP multicast.

    ``group`` names the group whose members should get it (the simulator fans
    out to them); None means every node listening on the multicast address.
    """

    data: bytes
    msg_type: MsgType
    group: str | None = None


class Delivery(NamedTuple):
    """One application message, handed over in the group's delivery order.

    The node's output and the application's event are one object (public as
    ``sgcs.Delivery``): one is made per message delivered, so it is a named
    tuple, immutable and built in a third of a frozen dataclass's time."""

    sender: int
    """Member id of the original sender (this node's own id for its own messages)."""
    seq: int
    """The sender's sequence number; ``(group, sender, seq)`` names the message."""
    payload: bytes
    view_id: str
    """The view in which the message was delivered."""
    group: str
    dest: int | None = None
    """This node's id when the message was a unicast to it; None for a multicast."""

    @property
    def unicast(self) -> bool:
        return self.dest is not None


Deliver = Delivery
"""The node's name for the action: hand one message to the application."""


class MessageId(NamedTuple):
    """The name of one multicast, as ``send`` returns it to its sender.

    ``(sender, seq)`` is what a ``Delivery`` or a ``Rollback`` names;
    ``incarnation`` tells the messages of a restarted process from its former
    self's."""

    sender: int
    incarnation: int
    seq: int


@dataclass(frozen=True, slots=True)
class NotDelivered:
    """One of this node's own messages that will not be delivered: a
    multicast that this node will not deliver, or a unicast (``to``) whose
    destination left.

    Every multicast a live member sends ends at that member with exactly one
    outcome: its own ``Delivery``, a ``Rollback`` (delivered nowhere), or this.
    ``reason`` says why, and what the other members may have done:

    * ``"left_out"``: it was sent under a view change this member was then
      left out of (or whose cut it could not complete); the members that
      went on may deliver it in the view they install.
    * ``"view_missed"``: it was sent under a view change whose view this
      member never installed (it moved on before the commit reached it); the
      members that installed that view delivered it there.
    * ``"withdrawn"``: it was sent under another coordinator's proposal that
      may have been installed elsewhere; members of that view may have
      delivered it, members of this node's view do not.

    * ``"destination_left"``: a unicast (``to`` names its destination) that
      was not acknowledged before its destination left the view (or
      restarted). It may have been delivered just before; nothing more of it
      will be.

    Either way no member of this node's next view delivers it: to be sure
    every current member gets it, send it again."""

    group: str
    message: MessageId
    reason: str
    to: int | None = None
    """The destination of a unicast; None for a multicast."""


NOT_DELIVERED_REASONS = ("left_out", "view_missed", "withdrawn", "destination_left")


@dataclass(frozen=True, slots=True)
class TransitionalView:
    """The deliveries that follow, up to the next ``ViewInstalled``, are made
    in view ``view_id`` among ``members`` only (extended virtual synchrony's
    transitional configuration): this node left the others of that view, and
    delivers there its own messages that no commit placed, so that none of
    them ends without an outcome."""

    group: str
    view_id: str
    members: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ViewInstalled:
    """A new view of ``group`` is installed; ``members`` is sorted."""

    group: str
    view_id: str
    members: tuple[int, ...]
    joined: tuple[int, ...] = ()
    left: tuple[int, ...] = ()
    """Members that left gracefully."""
    failed: tuple[int, ...] = ()
    """Members excluded as failed (or unresponsive during the change)."""
    names: tuple[tuple[int, str], ...] = ()
    """(member, name) of the members whose ``Config.name`` this node has heard
    (filled in by the driver, which asks the node)."""


@dataclass(frozen=True, slots=True)
class View:
    """One membership of a group, as this node has installed it."""

    view_id: str
    """Names the membership; nodes that hold the same membership name it alike."""
    members: tuple[int, ...]
    """Member ids, sorted."""

    def __contains__(self, member: object) -> bool:
        return member in self.members

    def __len__(self) -> int:
        return len(self.members)


@dataclass(frozen=True, slots=True)
class OptimisticView:
    """A view change of the group began; ``members`` estimates the next view.

    Messages this node sends from now until the next ``ViewChange`` are
    optimistic: they are delivered in the new view if it holds these members,
    otherwise they come back in a ``Rollback``. An application that must not
    risk that can hold its sends until the ``ViewChange``; most just keep
    sending and handle ``Rollback``."""

    view_id: str
    """The proposed view's name; the installed one may differ."""
    members: tuple[int, ...]
    """Estimated member ids, sorted."""
    group: str

    @property
    def view(self) -> View:
        return View(self.view_id, self.members)


@dataclass(frozen=True, slots=True)
class Rollback:
    """Optimistic messages that were delivered to no member, anywhere.

    Each entry is ``(sender, seq)``, the name of a message sent during a view
    change whose estimate turned out wrong. No member delivered them and none
    will: if this node is the sender and the message still matters, send it
    again (it goes out in the new view)."""

    messages: tuple[tuple[int, int], ...]
    group: str


@dataclass(frozen=True, slots=True)
class MemberSuspected:
    """The failure detector suspects ``member`` and is probing it.

    Advisory only: the member stays in the view until a ``ViewChange``
    excludes it (listed in ``failed``), or it proves alive (``MemberBusy``, or
    simply nothing more). An application may stop waiting on replies from it,
    but must not treat it as gone before the ``ViewChange``."""

    member: int
    group: str


@dataclass(frozen=True, slots=True)
class MemberBusy:
    """A suspected ``member`` is alive but slow: another member heard from it
    recently, so it is not excluded now.

    Advisory: expect it to lag (replies, stability, flow control of the
    group may wait on it). Nothing needs doing; an application may route work
    away from it."""

    member: int
    group: str


@dataclass(frozen=True, slots=True)
class CheckHost:
    """The failure detector began to suspect ``member``: ask the host at
    ``address`` whether anything listens there (the trio driver makes a TCP
    handshake with the same port number) and report a refusal or silence
    with ``Node.handle_host_unreachable``. One per suspicion, whatever the
    number of groups that hold the member; a driver that cannot check ignores it."""

    member: int
    address: Address


@dataclass(frozen=True, slots=True)
class GroupError:
    """The group refused this node, e.g. it joined with a different order.
    The node has left the group; the application gets ``message``."""

    group: str
    message: str


class TraceEvent(NamedTuple):
    """One row of the trace (docs/traces.md, trace schema 1).

    The driver adds ``t`` and ``node``. Fields that do not apply stay None.
    A named tuple, like ``Deliver``: a node traces every send and delivery,
    and a frozen dataclass's twelve ``object.__setattr__`` calls were 1.5 %
    of a simulation (the node builds them with ``tuple.__new__``).
    """

    kind: str
    group: str | None = None
    sender: int | None = None
    seq: int | None = None
    order: str | None = None
    view_id: str | None = None
    members: tuple[int, ...] | None = None
    optimistic: bool | None = None
    target: int | None = None
    size: int | None = None
    dest: int | None = None
    reason: str | None = None


Action = Union[Send, Multicast, Deliver, ViewInstalled, OptimisticView, Rollback, NotDelivered, TransitionalView,
               MemberSuspected, MemberBusy, CheckHost, GroupError, TraceEvent]
