"""NACK recovery: fetching the records a member lacks (SGCS paper, 3.2).

Theory of operation
-------------------
A receiver learns that records exist from a gap, a piggybacked ACK or a
gossip digest (``Inbound.known_high``). One NACK timer per sender then asks
for what lies between ``contig`` and ``known_high``, with a jittered first
delay (``nack_delay``, so the receivers of one lost datagram do not all ask
at once) and exponential backoff up to ``nack_backoff_max``. Retries
alternate between the sender and a *holder*: the member last known (from
its ACKs) to hold most of that sender's stream, one per sender, so the state
stays O(senders). During a view change, the members whose flushes showed
they may hold records up to the cut are tried in turn when no ACK named a
holder (``expect``).

Any member answers a NACK from its buffer of unstable records, or from the
records the last view change ended or restarted (``left_behind``: a member
still completing that change's cut may lack them), at most ``push_budget``
records per NACK. The stream (``sgcs.transport.reliable``) owns the buffer
and the receive state; this module owns the timers, the holder hints and
the answers.
"""

from __future__ import annotations

import random

from ..msgtype import MsgType
from .state import Inbound
from .params import Params
from ..records import Out, OutNack, OutRecords, Range, Record


class Repair:
    """The NACK side of one member's reliable stream in one group."""

    def __init__(self, me: int, params: Params, rng: random.Random, counts: dict[str, int]) -> None:
        """``counts``: the stream's counters (``nacks``, ``retransmissions``, ``pushes``), shared."""
        self.me = me
        self.params = params
        self.rng = rng
        self.counts = counts
        self.nacking: dict[int, Inbound] = {}
        """Senders with a NACK timer running."""
        self.holders: dict[int, tuple[int, int]] = {}
        """Per sender, the member last known to hold most of its stream, and how
        far: a NACK target besides the sender (one per stream keeps this O(senders))."""
        self.cut_holders: dict[int, tuple[int, ...]] = {}
        """During a view change, per sender we lack records of up to the cut:
        the members that may hold them (one of them reported them in its
        flush), tried in turn when no ACK named a holder."""
        self.left_behind: dict[int, dict[int, Record]] = {}
        """The records of the streams the last view change ended or restarted,
        kept until the next one to answer NACKs: a member still completing
        that change's cut may lack them (``ReliableStream.expect``)."""

    def hint_holder(self, sender: int, member: int, high: int) -> None:
        """Remember the member known to hold most of ``sender``'s stream (the
        latest of equals: it is the likeliest to still be up)."""
        hint = self.holders.get(sender)
        if hint is None or high >= hint[1]:
            self.holders[sender] = (member, high)

    def reschedule(self, sender: int, inbound: Inbound, now: float) -> None:
        """Start ``sender``'s NACK timer when records are known missing, stop it when none are."""
        if inbound.known_high <= inbound.contig:
            inbound.nack_at, inbound.nack_tries = None, 0
            self.nacking.pop(sender, None)
        elif inbound.nack_at is None and self.params.nack_enabled:
            inbound.nack_at = now + self.params.nack_delay * (0.5 + self.rng.random())
            self.nacking[sender] = inbound

    def on_timeout(self, now: float) -> list[Out]:
        """The NACKs whose timers are due."""
        out: list[Out] = []
        for sender, inbound in list(self.nacking.items()):
            if inbound.nack_at is not None and inbound.nack_at <= now:
                nack = self._nack_due(sender, inbound, now)
                if nack is not None:
                    out.append(nack)
        return out

    def deadlines(self) -> list[float]:
        return [i.nack_at for i in self.nacking.values() if i.nack_at is not None]

    def _nack_due(self, sender: int, inbound: Inbound, now: float) -> Out | None:
        ranges = inbound.missing(self.params.nack_max_ranges)
        if not ranges:
            inbound.nack_at = None
            self.nacking.pop(sender, None)
            return None
        target = self._holder_for(sender, ranges[0][0], inbound.nack_tries)
        backoff = min(self.params.nack_backoff_max, self.params.nack_delay * 2 ** (inbound.nack_tries + 1))
        inbound.nack_tries += 1
        inbound.nack_at = now + backoff * (0.5 + self.rng.random())
        if target is None:
            return None
        self.counts["nacks"] += 1
        return OutNack(target, sender, ranges, pull=False)

    def _holder_for(self, sender: int, seq: int, tries: int) -> int | None:
        """The sender first; then any member whose ACKs show it holds ``seq``,
        else (during a view change) the members that may hold it, in turn."""
        if sender == self.me:
            return None
        if tries % 2 == 0:
            return sender  # retries alternate between the sender and a holder
        hint = self.holders.get(sender)
        if hint is not None and hint[1] >= seq and hint[0] != self.me:
            return hint[0]
        others = self.cut_holders.get(sender)
        return others[tries // 2 % len(others)] if others else sender

    def answer(self, src: int, sender: int, ranges: tuple[Range, ...], pull: bool,
               store: dict[int, dict[int, Record]]) -> list[Out]:
        """Answer a NACK (or a gossip pull) from ``store`` or what the last view
        change left behind, up to ``push_budget`` records."""
        budget = self.params.push_budget
        records = stored_in(store, sender, ranges, budget) or stored_in(self.left_behind, sender, ranges, budget)
        if not records:
            return []
        kind = MsgType.GOSSIP if pull else MsgType.RETRANSMIT
        self.counts["pushes" if pull else "retransmissions"] += len(records)
        return [OutRecords(src, tuple(records), kind)]

    def forget(self, sender: int) -> None:
        self.nacking.pop(sender, None)
        self.holders.pop(sender, None)


def stored_in(store: dict[int, dict[int, Record]], sender: int, ranges: tuple[Range, ...],
              budget: int) -> list[Record]:
    """The records of ``sender`` in ``ranges`` that ``store`` holds, at most ``budget``."""
    stored = store.get(sender, {})
    found: list[Record] = []
    for low, high in ranges:
        for seq in range(low, min(high, low + budget) + 1):
            record = stored.get(seq)
            if record is not None:
                found.append(record)
                if len(found) == budget:
                    return found
    return found
