"""The datagram types of the wire (``sgcs.wire``), a value every layer above it names.

The transport names the kind of records it sends with them (a first
transmission, an answer to a NACK, a gossip push), the wire encodes them in
every header, and the trace labels its datagrams with them.
"""

from __future__ import annotations

import enum


class MsgType(enum.IntEnum):
    """Message types. Append only: a value, once released, keeps its meaning."""

    DATA = 1
    HELLO = 2
    LEAVE = 3
    RETRANSMIT = 4
    GOSSIP = 5
    NACK = 6
    DIGEST = 7
    NULL = 8
    STABLE = 9
    UNICAST_ACK = 10
    HEARTBEAT = 11
    PROBE = 12
    PROBE_ACK = 13
    ASK = 14
    ASK_REPLY = 15
    BEACON = 16
    PROPOSE = 17
    FLUSH = 18
    COMMIT = 19
    INSTALLED = 20
    HEARTBEAT_ROSTER = 21
    OBITUARY = 22

    @property
    def label(self) -> str:
        """Lower-case name, as in the trace's ``net.msg_type`` column (both
        heartbeat forms count as ``heartbeat``)."""
        return "heartbeat" if self is MsgType.HEARTBEAT_ROSTER else self.name.lower()
