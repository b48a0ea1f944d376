"""Packing transport records into datagrams under a byte budget.

Theory of operation
-------------------
Batching (issue: transport, point 6): records bound for the same destination
share datagrams, filled in order up to the budget (``Config.max_datagram``
minus the header, MAC and body framing). A record never spans datagrams;
fragmentation happened earlier, when the message was cut into records no
larger than ``fragment_size``. The sizes here follow ``sgcs.wire``'s layouts.
"""

from __future__ import annotations

from ..wire import OVERHEAD, encoded_record_size
from .records import Record

RECORDS_HEADER = 10
"""group tag (8) and record count (2)."""
UNICAST_HEADER = 8
"""destination id, before the records of a unicast."""
RECORD_HEADER = 23
ACK_ENTRY_MAX = 20
"""Two varints of at most 10 bytes each."""


def ack_budget(max_datagram: int) -> int:
    """ACK entries one record may carry: a quarter of the datagram at most."""
    return max(4, (max_datagram // 4 - 3) // ACK_ENTRY_MAX)


def fragment_size(max_datagram: int) -> int:
    """Payload bytes per record so that any record fits one datagram alone."""
    reserve = 3 + ack_budget(max_datagram) * ACK_ENTRY_MAX
    return max_datagram - OVERHEAD - RECORDS_HEADER - UNICAST_HEADER - RECORD_HEADER - reserve


def pack(records: tuple[Record, ...] | list[Record], max_datagram: int, unicast: bool = False) -> list[list[Record]]:
    """Split ``records`` into batches that each fit one datagram, in order."""
    budget = max_datagram - OVERHEAD - RECORDS_HEADER - (UNICAST_HEADER if unicast else 0)
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
