"""Interned member lists: one immutable copy per distinct membership.

Theory of operation
-------------------
Every member of a group holds the same view, and its failure detector watches
the same members. A process that runs many nodes (the simulator runs 10,000
in one process) would otherwise hold 10,000 copies of a 10,000-entry tuple,
set, index and id array: tens of gigabytes, and minutes spent building them.
``roster_of`` returns one shared, read-only ``Roster`` per distinct member list,
from a small LRU cache keyed by the tuple, so a node's state is O(N) only
where it must be (its own counters and ACKs), and installing a view that
others already hold costs one hash. Callers must never mutate a roster's
containers; the id array is flagged read-only to catch that.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable, Iterator

import numpy as np

ROSTER_CACHE = 64
"""Distinct member lists kept; a view change makes a new one, so churn turns them over."""


@dataclass(frozen=True, eq=False, slots=True, weakref_slot=True)
class Roster:
    """A sorted member list with its set, positions and numpy ids (all shared)."""

    members: tuple[int, ...]
    member_set: frozenset[int]
    index: dict[int, int]
    """Member id -> position in ``members``. Read-only."""
    ids: np.ndarray
    tag: int
    """A 32-bit hash of the list: gossip about positions is only merged between equal rosters."""
    _view_ids: dict[tuple[int, int], str] = field(default_factory=dict)

    def view_id(self, epoch: int, name: Callable[[int, tuple[int, ...], int], str], salt: int = 0) -> str:
        """``name(epoch, members, salt)``, memoised: every holder of a view names it."""
        view_id = self._view_ids.get((epoch, salt))
        if view_id is None:
            view_id = self._view_ids[(epoch, salt)] = name(epoch, self.members, salt)
        return view_id

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[int]:
        return iter(self.members)

    def __contains__(self, member: object) -> bool:
        return member in self.member_set

    def with_member(self, member: int) -> Roster:
        return self if member in self.member_set else roster_of((*self.members, member))


def roster_of(members: Iterable[int]) -> Roster:
    """The shared roster of ``members`` (any order, duplicates ignored)."""
    if type(members) is Roster:
        return members
    if type(members) is tuple:
        # a roster's own tuple is found by identity: hashing 10,000 ints is not free
        known = _BY_TUPLE_ID.get(id(members))
        if known is not None and known.members is members:
            return known
        return _interned(members)
    return _interned(tuple(sorted(set(members))))


@lru_cache(maxsize=ROSTER_CACHE)
def _interned(key: tuple[int, ...]) -> Roster:
    ordered = tuple(sorted(set(key)))
    if ordered != key:
        return _interned(ordered)  # an unsorted key maps to the sorted list's roster
    ids = np.array(ordered, dtype=np.int64)
    ids.flags.writeable = False
    tag = int.from_bytes(hashlib.blake2b(ids.tobytes(), digest_size=4).digest(), "big")
    roster = Roster(ordered, frozenset(ordered), {m: i for i, m in enumerate(ordered)}, ids, tag)
    _BY_TUPLE_ID[id(ordered)] = roster  # the roster keeps the tuple alive, so the id stays unique
    return roster


_BY_TUPLE_ID: weakref.WeakValueDictionary[int, Roster] = weakref.WeakValueDictionary()
