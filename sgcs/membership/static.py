"""The foundation's view: given at join, grown on contact, shrunk on leave.

Theory of operation
-------------------
A group's view starts as the members the caller names (the simulator passes the
scenario's list) or as the singleton {self} when discovering. A member is added
the first time a valid datagram from it arrives for the group, and removed when
it announces a graceful leave. There is no failure detection and no agreement:
two nodes may briefly hold different views. The view id is a hash of the
sorted membership, so nodes that hold the same membership name it alike.
The membership issue replaces this with gossip failure detection and the
three-phase view agreement (SGCS paper, section 4).
"""

from __future__ import annotations

import hashlib
import struct


def view_id_of(members: tuple[int, ...]) -> str:
    # One struct.pack, not a to_bytes per member: the simulator builds 10,000
    # views of 10,000 members at start-up. Same bytes as before.
    digest = hashlib.blake2b(struct.pack(f"!{len(members)}Q", *members), digest_size=8)
    return f"v{len(members)}-{digest.hexdigest()}"


class View:
    """One node's current membership of one group."""

    __slots__ = ("_members", "members", "view_id")

    def __init__(self, members: set[int]) -> None:
        self._members = set(members)
        self.members: tuple[int, ...] = ()
        self.view_id = ""
        self._refresh()

    def __contains__(self, member: int) -> bool:
        return member in self._members

    def add(self, member: int) -> bool:
        """Add a member; True if the view changed."""
        if member in self._members:
            return False
        self._members.add(member)
        self._refresh()
        return True

    def remove(self, member: int) -> bool:
        """Remove a member; True if the view changed."""
        if member not in self._members:
            return False
        self._members.discard(member)
        self._refresh()
        return True

    def _refresh(self) -> None:
        self.members = tuple(sorted(self._members))
        self.view_id = view_id_of(self.members)
