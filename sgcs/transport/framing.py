"""Packing transport records into datagrams under a byte budget.

Theory of operation
-------------------
Bundling, as JGroups' bundler does: records bound for the same destination
share datagrams, filled in order up to the budget (``Config.bundle_size``
minus the header, MAC and body framing). A record never spans datagrams;
fragmentation happened earlier, when the message was cut into records no
larger than ``fragment_size``, which is what fits one ``Config.max_datagram``
alone with the few ACKs a FIFO record carries (``Config.fifo_acks``). A
record of an ordered group may carry more ACKs (its whole causal past) and
then travels alone in a larger datagram: a 1 KB message is never cut in two
to reserve ACK space.
The sizes here follow ``sgcs.wire``'s layouts.
"""

from __future__ import annotations

from ..records import Record
from ..wire import OVERHEAD, RECORD_HEADER, RECORDS_HEADER, UNICAST_HEADER, encoded_record_size

ACK_ENTRY_MAX = 20
"""Two varints of at most 10 bytes each."""


def fragment_size(max_datagram: int, acks: int) -> int:
    """Payload bytes per record so that a record with ``acks`` ACKs (what a
    FIFO record carries at most, ``Config.fifo_acks``) fits one datagram alone."""
    reserve = 3 + acks * ACK_ENTRY_MAX
    return max_datagram - OVERHEAD - RECORDS_HEADER - UNICAST_HEADER - RECORD_HEADER - reserve


def pack(records: tuple[Record, ...] | list[Record], bundle_size: int, unicast: bool = False) -> list[list[Record]]:
    """Split ``records`` into batches that each fit one datagram of
    ``bundle_size`` bytes, in order (a record larger than that goes alone)."""
    budget = bundle_size - OVERHEAD - RECORDS_HEADER - (UNICAST_HEADER if unicast else 0)
    batches: list[list[Record]] = []
    current: list[Record] = []
    used = 0
    for record in records:
        size = encoded_record_size(record)
        if current and used + size > budget:
            batches.append(current)
            current, used = [], 0
        current.append(record)
        used += size
    if current:
        batches.append(current)
    return batches
