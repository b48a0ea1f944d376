"""What the parts of one member's reliable stream share (SGCS paper, 3.1 to 3.3).

``Inbound`` is the receive state of one sender's stream: how far it is held
in order (``contig``), the records that came ahead of a gap (``pending``),
the highest number known to exist (``known_high``, from a gap, an ACK or a
digest), the NACK timer that fetches what lies between
(``sgcs.transport.repair``), and a fragmented message in progress.
``StreamState`` holds those of every sender with the view, our own
numbering, the buffer of unstable records and their stable prefixes: the
stream (``sgcs.transport.reliable``) fills the buffer, the all-reduce
(``sgcs.transport.stability``) empties it.
"""

from __future__ import annotations

from collections import deque

from ..roster import Roster
from .reassembly import Reassembly
from ..records import Range, Record

MISSING_SCAN = 65_536
"""Sequence numbers examined past the contiguous prefix when listing gaps, so a
member that ACKs an absurd number cannot make us loop."""


IN_ORDER: dict[int, Record] = {}
"""The pending table of every stream with nothing out of order: shared and
always empty (``_accept`` gives a stream its own table before it stores one),
so the hundreds of streams a member of a large group hears cost no table each."""


class Inbound:
    """Receive state of one sender's stream."""

    __slots__ = ("contig", "pending", "known_high", "nack_at", "nack_tries", "reassembly", "synced", "from_cut")

    def __init__(self, synced: bool = True) -> None:
        self.synced = synced
        """False: we joined after this stream began; it starts at the first record seen."""
        self.from_cut = False
        """Our copy starts at a view change's cut (``starts``): we hold its
        prefix without ever having had it, so we know none of it stable until
        an all-reduce of ours says so (``_rejoined``)."""
        self.contig = 0
        self.pending: dict[int, Record] = IN_ORDER
        self.known_high = 0
        self.nack_at: float | None = None
        self.nack_tries = 0
        self.reassembly: Reassembly | None = None
        """A fragmented message in progress; None for the usual one-record messages."""

    def missing(self, limit: int) -> tuple[Range, ...]:
        """Gaps between ``contig`` and ``known_high``, at most ``limit`` ranges."""
        ranges: list[Range] = []
        start = None
        high = min(self.known_high, self.contig + MISSING_SCAN)
        for seq in range(self.contig + 1, high + 1):
            if seq not in self.pending:
                start = seq if start is None else start
            elif start is not None:
                ranges.append((start, seq - 1))
                start = None
                if len(ranges) == limit:
                    return tuple(ranges)
        if start is not None:
            ranges.append((start, high))
        return tuple(ranges[:limit])


class StreamState:
    """What the parts of one member's stream share (``ReliableStream`` and
    ``Stability``): the view, our own numbering, the receive state per
    sender, the buffer of unstable records and their stable prefixes, and
    the group's settings for this view. Each part changes its own fields
    through its own methods; these are the ones both read."""

    def __init__(self, me: int, first_seq: int) -> None:
        self.me = me
        self.next_seq = first_seq
        """The number our next record takes."""
        self.members: tuple[int, ...] = ()
        self.index: dict[int, int] = {}
        self.roster: Roster | None = None
        self.position = 0
        """Our place in ``members``."""
        self.depth = 0
        """Levels of the stability gossip: ceil(log2 N)."""
        self.round = 0
        """Our gossip rounds so far (our own count: members share no clock)."""
        self.inbound: dict[int, Inbound] = {}
        self.store: dict[int, dict[int, Record]] = {}
        """sender -> seq -> record, unstable only."""
        self.stable: dict[int, int] = {}
        """Per sender, the prefix collected here as stable."""
        self.buffered = 0
        """Records in ``store``: the flow-control window."""
        self.peak = 0
        """The most records held at once (``peak_buffered``)."""
        self.gc_senders: set[int] = set()
        """Senders whose stable prefix may have risen since the last collection."""
        self.gc_due = False
        """Every stream's stable prefix may have risen (not only ``gc_senders``')."""
        self.own_clocks: deque[tuple[int, int]] = deque()
        """(last record, timestamp) of our own messages not yet stable, oldest first."""
        self.acked: dict[int, dict[int, int]] | None = None
        """Small views (``ACK_MATRIX_MAX``): per member, per sender, the highest
        number that member ACKed (or, for its own stream, sent). The paper's
        direct stability: stable once every member ACKed. None in larger views."""
        self.stability_cap: dict[int, int] | None = None
        """During a view change: nothing past the snapshot (then the cut) becomes
        stable, since members new to the next view start there and may need it."""
        self.promise_gossip = False
        """Carry promise clocks in the stability all-reduce instead of nulls (the group sets it per view)."""
        self.lamport = 0
        """Our Lamport clock, as the group's order last told us."""

    def contig_of(self, sender: int) -> int:
        """How far we hold ``sender``'s stream in order (our own: how far we sent)."""
        if sender == self.me:
            return self.next_seq - 1
        inbound = self.inbound.get(sender)
        return inbound.contig if inbound else 0
