"""Plain unreliable multicast: the foundation's placeholder transport.

Theory of operation
-------------------
Each application message gets the next per-sender sequence number of its
group (unicasts: the next per-destination number) and leaves as one DATA
datagram, by IP multicast or unicast. Nothing is retransmitted: a lost datagram
is lost. This is the "unreliable IP multicast" first step of PSRM (SGCS paper,
section 3.1) without the gossip repair that the transport issue adds on top.
"""

from __future__ import annotations

from ..wire import DataMsg, Flag, MsgType, encode_data, seal


class UnreliableTransport:
    """Numbers and frames one member's outgoing messages in one group."""

    __slots__ = ("_key", "_sender", "_tag", "_next_seq", "_next_unicast_seq")

    def __init__(self, key: bytes, sender: int, tag: int) -> None:
        self._key = key
        self._sender = sender
        self._tag = tag
        self._next_seq = 1
        self._next_unicast_seq: dict[int, int] = {}

    def frame_multicast(self, payload: bytes) -> tuple[int, bytes]:
        seq = self._next_seq
        self._next_seq += 1
        body = encode_data(DataMsg(self._tag, seq, None, payload))
        return seq, seal(self._key, MsgType.DATA, Flag.NONE, self._sender, body)

    def frame_unicast(self, dest: int, payload: bytes) -> tuple[int, bytes]:
        seq = self._next_unicast_seq.get(dest, 1)
        self._next_unicast_seq[dest] = seq + 1
        body = encode_data(DataMsg(self._tag, seq, dest, payload))
        return seq, seal(self._key, MsgType.DATA, Flag.UNICAST, self._sender, body)
