"""Gossip failure detection with hypercube targets and three-stage confirmation.

Theory of operation
-------------------
One detector runs per node and watches every member of every group the node
is in (SGCS paper, section 4.1, after Van Renesse, Minsky and Hayden's gossip
failure detector; the confirmation follows the ADS middleware paper's
three-stage survival signal).

* **Heartbeats (push).** Each member keeps a counter per watched member in
  numpy arrays. Every round (``gossip_interval``) it raises its own counter and
  sends the whole table to one target: the member at index
  ``(self + 2**(r-1)) mod N`` of the sorted member list, r cycling through
  1..ceil(log2 N). Lists merge by element-wise maximum, so a heartbeat crosses
  one hypercube dimension per round and reaches everyone within ceil(log2 N)
  rounds when nothing is lost. Counters travel modulo 2**16 and merge by
  wrap-around difference. The table travels in one of two forms
  (``Config.heartbeat``): ``roster``, 2 bytes a member, the counters in the
  order of the sorted member list, named by that list's 32-bit tag; or
  ``pairs``, 10 bytes a member, (id, counter). Members that watch the same
  list (every member of one view, once it is installed everywhere) merge the
  roster form by position; a receiver whose list differs (a change is being
  installed) cannot place the counters and takes only the sender's own
  evidence from it (``mismatched``), which the pairs form never loses. Any authenticated datagram from a member is direct
  evidence that it lives, so an application multicast carries its sender's
  heartbeat to every receiver: a round in which we multicast sends no
  separate gossip.
* **Suspicion.** A member whose counter has not risen, and from which nothing
  arrived, for ``suspect_timeout = suspect_factor * max(suspect_min_rounds,
  ceil(log2 N)) * gossip_interval`` is suspected (``Params.suspect_timeout``).
  ceil(log2 N) rounds is the paper's minimum, the age of the freshest news in
  lockstep with nothing lost; in small groups that is one or two rounds,
  which any scheduling jitter overruns (a group of two suspected its live
  peer about once a second), hence the floor (3 rounds by default).
* **Pull.** A suspect gets ``probe_count`` direct probes, ``probe_interval``
  apart. Any answer, indeed any datagram from it, ends the suspicion. An ICMP
  "port unreachable" reported by the driver answers the pull stage at once:
  the host says nobody listens there (``on_unreachable``). So does the
  driver's host check (``Config.host_check``; the node asks for one per
  suspicion, while the stage is ``pulling``) when the suspect's host refuses
  a TCP handshake on its port, or does not answer one within a few tenths
  of a second: a host that lost power or its link sends no ICMP. A paused
  process's kernel still completes the handshake, so a pause keeps the
  whole pull stage; the ask stage that follows a silent host still asks its
  neighbours, in case the silence was ours alone. A probe carries the suspicion's random
  nonce and the answer echoes it, but nothing matches the two, by design: an
  answer counts only as a datagram from the suspect, which the node has
  already authenticated (``sgcs.wire``) and checked against replay, and
  an honest answer to an earlier probe (delayed, or sent to our former
  incarnation) could not be told from a mismatch without keeping every nonce
  ever sent. The nonce stays on the wire, unread, so that the format and the
  random draws (which reproduce recorded simulator seeds) are unchanged.
* **Ask.** Then ``ask_count`` of the suspect's hypercube neighbours (the
  members it gossips to, which hear from it first) are asked how long ago they
  heard from it. If any heard from it within the suspect timeout, it is
  *busy*, not dead: its suspicion is dropped and its clock restarted. Once
  every neighbour asked has said it did not (or ``ask_timeout`` passed), all
  three stages agree and it is declared failed. With no neighbour to ask (a
  group of two) the stage is skipped.
* **Ring neighbourhoods** (``Config.heartbeat = "ring"``, for views of
  thousands, where a whole table is 20 KB a round). Member i of the sorted
  list is watched only by its K = ceil(log2 N) successors i+1 .. i+K, as in
  SWIM's and memberlist's "a few members check each one", made deterministic
  so that every member knows who watches whom. Each round it sends one
  heartbeat, to i+d, d cycling through the powers of two up to K, carrying
  the counters of its own neighbourhood i-K .. i: O(log N) bytes. A counter
  of member j reaches each watcher j+k along every path of such hops that
  sums to k, so news keeps coming when some are lost, and no news arrives
  from a neighbourhood that lost j. Only the K members before us are
  suspected, and the ask stage asks the suspect's other watchers, which hold
  its counter too. The verdict is then *told* (``Obituary``) to the lowest
  members of each view holding the member, its coordinator and the next
  ones (the node picks them), and told again every suspect timeout while
  the member is still in a view; a receiver that heard from the member
  itself within a suspect timeout does not take it. Every member runs the
  same three stages for its own neighbourhood with the same timeout, at
  O(log N) bytes per member per round instead of O(N), and O(log N) work
  per round instead of O(N); its watchers' news is fresher than news that
  crossed the whole hypercube, so it is found sooner, and suspected falsely
  less often (``benchmarks/README.md``). Members newly watched after a view
  change get one suspect timeout of grace. In a partition, no member on the
  side without the coordinator watches the members below it; the node
  then lets a watcher whose verdict stands, and whose coordinator fell
  silent, propose the change itself (``Node._on_stall``,
  ``ViewAgreement.take_charge``).

Outputs are ``FdSend`` (a body for one member) and ``FdEvent`` (suspect,
unsuspect, busy, failed); the node seals, addresses and routes them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import Enum
from typing import Iterable

import numpy as np

from ..transport.params import Params
from ..wire import MAX_HEARTBEAT_ENTRIES, MAX_ROSTER_HEARTBEAT_ENTRIES, MsgType, encode_heartbeat, \
    encode_roster_heartbeat
from .messages import Ask, AskReply, Probe, ProbeAck, encode
from ..roster import roster_of

NEVER_MS = 2**62
"""Age reported for a member never heard from."""
REBASE_MS = 2**30
"""Times are kept as int32 milliseconds since the detector's epoch (4 bytes a
member, not 8: two such tables are a gigabyte at 10,000 nodes of 10,000
members); past this many the epoch moves forward (about every 12 days)."""
OLDEST_MS = -(2**29)
"""A rebase clamps older times here, so a difference of two stays in int32."""


@dataclass(frozen=True, slots=True)
class FdSend:
    dst: int
    msg_type: MsgType
    body: bytes


class Verdict(str, Enum):
    """What the detector concluded about a member (a ``str`` for traces)."""

    SUSPECT = "suspect"
    """Silent for ``suspect_timeout``: the pull and ask stages begin."""
    UNSUSPECT = "unsuspect"
    """Heard from again while suspected."""
    BUSY = "busy"
    """A neighbour heard from it recently: alive, only slow to us."""
    FAILED = "failed"
    """All three stages agree: it is gone."""


@dataclass(frozen=True, slots=True)
class FdEvent:
    kind: Verdict
    member: int
    told: bool = False
    """A verdict another member told us (``Obituary``), not our own."""


FdOut = FdSend | FdEvent


class _Confirmation:
    """Pull and ask stages of one suspect."""

    __slots__ = ("since", "stage", "probes", "due", "nonce", "refused", "awaiting")

    def __init__(self, since: float, nonce: int) -> None:
        self.since = since
        self.awaiting: set[int] = set()
        """Neighbours asked that have not answered yet."""
        self.refused = False
        """The network refused a datagram to it: only evidence newer than that counts."""
        self.stage = "pull"
        self.probes = 0
        self.due = since
        self.nonce = nonce


@dataclass(frozen=True, slots=True)
class DetectorStatistics:
    rounds: int
    heartbeats_sent: int
    heartbeats_skipped: int
    suspicions: int
    refuted: int
    busy: int
    failures: int
    mismatched: int = 0
    """Roster heartbeats whose member list was not ours: only their sender's own evidence was taken."""
    told: int = 0
    """Verdicts other members told us and we took (``heartbeat = "ring"``)."""


class FailureDetector:
    """Per-node heartbeat table, suspicion and confirmation; a pure state machine."""

    def __init__(self, me: int, params: Params, rng: random.Random, now: float) -> None:
        """``params``: ``gossip_interval`` (a round), the suspicion timeout's
        ``suspect_factor`` and ``suspect_min_rounds``, the pull stage's
        ``probe_count`` and ``probe_interval``, the ask stage's ``ask_count``
        and ``ask_timeout``, and the heartbeat's form (``roster_heartbeats``)."""
        self.me = me
        self.params = params
        self.rng = rng
        self.ids = np.array([me], dtype=np.int64)
        self.counters = np.zeros(1, dtype=np.uint16)
        """As they travel: modulo 2**16, merged by wrap-around difference."""
        self._epoch = now
        self.heard_at = np.zeros(1, dtype=np.int32)
        """When each member was last heard from (genuine evidence), in ms since ``_epoch``."""
        self.grace_from = np.zeros(1, dtype=np.int32)
        """When each member's suspicion clock last restarted for another reason
        (a busy verdict, a newcomer's grace), which must not count as evidence
        to others; ms since ``_epoch``."""
        self._index: dict[int, int] = {me: 0}
        self._roster_tag = roster_of((me,)).tag
        self.suspects: dict[int, _Confirmation] = {}
        self.failed: set[int] = set()
        self._round = 0
        self._next_round = now + params.gossip_interval * rng.random()
        self._last_multicast = -math.inf
        self._counts = dict.fromkeys(("rounds", "sent", "skipped", "suspicions", "refuted", "busy", "failures",
                                      "mismatched", "told"), 0)
        self._watched = np.zeros(0, dtype=np.intp)
        """Ring form: the positions of the members we watch (the K before us)."""
        self._neighbourhood = np.zeros(1, dtype=np.intp)
        """Ring form: the positions our heartbeat carries (the K before us, and us)."""
        self._retell: dict[int, float] = {}
        """Ring form: our own verdicts, and when each is told again."""

    # ------------------------------------------------------------------ membership

    def set_members(self, members: Iterable[int], now: float) -> None:
        """Watch exactly ``members`` (and ourselves); newcomers start fresh."""
        roster = roster_of(members).with_member(self.me)  # shared, read-only ids and index
        if roster.index is self._index:
            return
        watched_before = set(self._watched_ids())
        self._roster_tag = roster.tag
        ids = roster.ids
        counters = np.zeros(len(ids), dtype=np.uint16)
        heard_at = np.full(len(ids), self._ms(now), dtype=np.int32)
        # a newcomer's heartbeat needs log2 N rounds to reach us: one timeout of grace
        grace_from = np.full(len(ids), self._ms(now + self.params.suspect_timeout(len(ids))), dtype=np.int32)
        if len(self.ids) == 1:  # only ourselves so far: nothing to carry over
            counters[roster.index[self.me]] = self.counters[0]
            self.ids, self.counters, self.heard_at, self.grace_from = ids, counters, heard_at, grace_from
            self._index = roster.index
            self._place_in_ring()
            return
        pos = np.searchsorted(self.ids, ids)
        pos_clipped = np.minimum(pos, len(self.ids) - 1)
        kept = self.ids[pos_clipped] == ids
        counters[kept] = self.counters[pos_clipped[kept]]
        heard_at[kept] = self.heard_at[pos_clipped[kept]]
        grace_from[kept] = self.grace_from[pos_clipped[kept]]
        self.ids, self.counters, self.heard_at, self.grace_from = ids, counters, heard_at, grace_from
        self._index = roster.index
        for member in [m for m in self.suspects if m not in self._index]:
            del self.suspects[member]
        self.failed = {m for m in self.failed if m in self._index}
        self._retell = {m: t for m, t in self._retell.items() if m in self.failed}
        self._place_in_ring()
        for i in self._watched.tolist():
            if int(self.ids[i]) not in watched_before:  # watched from now on: our news of it may be old
                self.grace_from[i] = max(int(self.grace_from[i]), self._ms(now + self.suspect_timeout()))

    def _watched_ids(self) -> list[int]:
        return [int(self.ids[i]) for i in self._watched.tolist()] if len(self._watched) else []

    def _place_in_ring(self) -> None:
        """Ring form: who we watch and what our heartbeat carries."""
        if not self.params.ring_heartbeats:
            return
        n, me = len(self.ids), self._index[self.me]
        width = ring_width(n)
        self._watched = np.array([(me - k) % n for k in range(width, 0, -1)], dtype=np.intp)
        self._neighbourhood = np.append(self._watched, me)

    def readmit(self, member: int, now: float) -> None:
        """Watch a member declared failed afresh, with a newcomer's grace: a
        view installed with it (a merge brought it back) outranks a verdict
        no group acts on. If it is dead, it is suspected and confirmed again."""
        i = self._index.get(member)
        if i is None or member not in self.failed:
            return
        self.failed.discard(member)
        self._retell.pop(member, None)
        self.grace_from[i] = self._ms(now + self.suspect_timeout())

    def live_predecessors(self) -> int:
        """Ring form: how many of the members we watch (the K before us) are
        not failed; 0 when all of them are (we are the first of our side of a
        partition)."""
        return sum(1 for i in self._watched.tolist() if int(self.ids[i]) not in self.failed)

    def suspect_timeout(self) -> float:
        return self.params.suspect_timeout(len(self.ids))

    def heard_from(self, member: int) -> float:
        """When ``member`` was last heard from, on the caller's clock (ms resolution)."""
        return self._epoch + int(self.heard_at[self._index[member]]) / 1000

    def _ms(self, when: float) -> int:
        """``when`` as ms since the epoch, to the nearest ms (rounded down,
        0.301 s would read 300 ms: a product of floats lands just below it)."""
        return round((when - self._epoch) * 1000)

    def _rebase_if_due(self, now: float) -> None:
        """Move the epoch forward before int32 milliseconds run out."""
        shift = self._ms(now) - REBASE_MS // 2
        if shift <= REBASE_MS // 2:
            return
        self._epoch += shift / 1000
        for times in (self.heard_at, self.grace_from):
            np.maximum(times.astype(np.int64) - shift, OLDEST_MS, out=times, casting="unsafe")

    # ------------------------------------------------------------------ inputs

    def heard(self, member: int, now: float) -> list[FdOut]:
        """Direct evidence: an authenticated datagram from ``member``."""
        i = self._index.get(member)
        if i is None:
            return []
        self.heard_at[i] = self._ms(now)
        if member in self.suspects:
            del self.suspects[member]
            self._counts["refuted"] += 1
            return [FdEvent(Verdict.UNSUSPECT, member)]
        if member in self.failed:
            # A verdict no group acted on (only a coordinator acts), refuted:
            # kept, it would exclude a live member the day we coordinate, and
            # the group could never settle (adversarial machine, seed
            # 2952616851: three members each held live others failed for good).
            # A restart is not refuted this way: the node fails the old self.
            self.failed.discard(member)
            self._retell.pop(member, None)
            self.grace_from[i] = self._ms(now)
            self._counts["refuted"] += 1
            return [FdEvent(Verdict.UNSUSPECT, member)]
        return []

    def note_multicast(self, now: float) -> None:
        """We multicast: every receiver heard our heartbeat directly."""
        self._last_multicast = now

    def on_heartbeat(self, src: int, members: np.ndarray, counters: np.ndarray, now: float) -> list[FdOut]:
        """A table in the pairs form."""
        start = self._slice_start(members)
        if start is None:
            self._merge_scattered(members, counters, now)
        else:
            self._merge_slice(start, counters, now)
        return self._after_heartbeat(src, now)

    def on_roster_heartbeat(self, src: int, roster: int, start: int, counters: np.ndarray,
                            now: float) -> list[FdOut]:
        """A table in the roster form: merged by position when its member list is ours."""
        if roster == self._roster_tag and start + len(counters) <= len(self.ids):
            self._merge_slice(start, counters, now)
        else:
            self._counts["mismatched"] += 1
        return self._after_heartbeat(src, now)

    def _after_heartbeat(self, src: int, now: float) -> list[FdOut]:
        out = self.heard(src, now)
        for member in [m for m in self.suspects
                       if self.heard_at[self._index[m]] > self._ms(self.suspects[m].since)]:
            del self.suspects[member]
            self._counts["refuted"] += 1
            out.append(FdEvent(Verdict.UNSUSPECT, member))
        return out

    def _slice_start(self, members: np.ndarray) -> int | None:
        """Usually the sender watches what we watch, so its table (or a part
        of it) is a slice of ours: then merge by slices, not by a binary
        search and fancy indexing per entry (10,000 entries at scale)."""
        if not len(members):
            return None
        start = self._index.get(int(members[0]))
        # bytes of two int64 arrays: a fifth of np.array_equal's time on a ring's 15 entries
        if start is None or self.ids[start:start + len(members)].tobytes() != members.astype(np.int64).tobytes():
            return None
        return start

    def _merge_slice(self, start: int, counters: np.ndarray, now: float) -> None:
        end = start + len(counters)
        mine = self.counters[start:end]
        # 16-bit counters compared modulo 2**16: theirs is newer when the
        # wrapped difference is 1 .. 0x7FFF, a positive int16 (one pass over
        # the 10,000 entries of a large view, not three)
        theirs = counters.astype(np.uint16, copy=False)  # the pairs form decodes int64
        rose = (theirs - mine).view(np.int16) > 0
        me = self._index[self.me]
        if start <= me < end:
            rose[me - start] = False  # only we raise our own counter
        np.copyto(mine, theirs, where=rose)
        np.copyto(self.heard_at[start:end], self._ms(now), where=rose)

    def _merge_scattered(self, members: np.ndarray, counters: np.ndarray, now: float) -> None:
        pos = np.minimum(np.searchsorted(self.ids, members), len(self.ids) - 1)
        known = (self.ids[pos] == members) & (members != self.me)
        pos, incoming = pos[known], counters[known]
        diff = (incoming - self.counters[pos]) & 0xFFFF
        rose = (diff > 0) & (diff < 0x8000)
        pos = pos[rose]
        self.counters[pos] += diff[rose].astype(np.uint16)
        self.heard_at[pos] = self._ms(now)

    def on_probe(self, src: int, msg: Probe) -> list[FdOut]:
        """Answer a member that watches us; a node that left its groups stays
        silent, so a member that missed its leave finds it failed."""
        if src not in self._index:
            return []
        return [FdSend(src, MsgType.PROBE_ACK, encode(ProbeAck(msg.nonce)))]

    def on_ask(self, src: int, msg: Ask, now: float) -> list[FdOut]:
        i = self._index.get(msg.member)
        age = NEVER_MS if i is None else max(0, self._ms(now) - int(self.heard_at[i]))
        return [FdSend(src, MsgType.ASK_REPLY, encode(AskReply(msg.member, age)))]

    def on_ask_reply(self, src: int, msg: AskReply, now: float) -> list[FdOut]:
        """A neighbour heard from the suspect within the suspect timeout: busy.
        When every neighbour asked has said it did not, all three stages
        agree at once: failed, without waiting for ``ask_timeout``."""
        confirmation = self.suspects.get(msg.member)
        if confirmation is None:
            return []
        window = now - confirmation.since if confirmation.refused else self.suspect_timeout()
        if msg.age_ms / 1000 >= window:
            confirmation.awaiting.discard(src)
            if confirmation.stage == "ask" and not confirmation.awaiting:
                return self._declare_failed(msg.member, now)
            return []
        del self.suspects[msg.member]
        self.grace_from[self._index[msg.member]] = self._ms(now)
        self._counts["busy"] += 1
        return [FdEvent(Verdict.BUSY, msg.member)]

    def on_obituary(self, src: int, member: int, now: float) -> list[FdOut]:
        """``src`` tells us its verdict on ``member`` (ring form). Taken unless
        we heard from ``member`` itself within a suspect timeout: a member
        still heard is busy, not dead, whatever its neighbourhood concluded."""
        i = self._index.get(member)
        if i is None or src not in self._index or member == self.me or member in self.failed:
            return []
        if self._ms(now) - int(self.heard_at[i]) < math.ceil(self.suspect_timeout() * 1000):
            return []
        self.suspects.pop(member, None)
        self.failed.add(member)
        self._counts["told"] += 1
        return [FdEvent(Verdict.FAILED, member, told=True)]

    def pulling(self, member: int) -> bool:
        """``member`` is suspected and still in its pull stage (being probed)."""
        confirmation = self.suspects.get(member)
        return confirmation is not None and confirmation.stage == "pull"

    def on_unreachable(self, member: int, now: float) -> list[FdOut]:
        """The network says nobody listens at ``member``'s address: the pull
        stage has its answer, go straight to the neighbours. A member not
        suspected yet becomes a suspect in the ask stage at once (an ICMP
        refusal is news of a crash, not a late answer)."""
        if member == self.me or member not in self._index or member in self.failed:
            return []
        out: list[FdOut] = []
        confirmation = self.suspects.get(member)
        if confirmation is None:
            confirmation = self._suspect(member, now, out)
        if confirmation.stage == "pull":
            confirmation.since, confirmation.refused = now, True
            out += self._ask(member, confirmation, now)
        return out

    def on_timeout(self, now: float) -> list[FdOut]:
        out: list[FdOut] = []
        if now >= self._next_round:
            self._next_round = max(now, self._next_round + self.params.gossip_interval)
            out += self._gossip_round(now)
            self._find_suspects(now, out)
            if self._retell:
                self._retell_verdicts(now, out)
        for member, confirmation in list(self.suspects.items()):
            if confirmation.due <= now:
                out += self._advance(member, confirmation, now)
        return out

    @property
    def next_round(self) -> float:
        """When the next gossip round is due."""
        return self._next_round

    def next_deadline(self) -> float | None:
        if len(self.ids) < 2:
            return None
        if not self.suspects:
            return self._next_round  # the usual case; the driver asks after every event
        return min([self._next_round, *(c.due for c in self.suspects.values())])

    # ------------------------------------------------------------------ rounds

    def _gossip_round(self, now: float) -> list[FdOut]:
        me = self._index[self.me]
        self.counters[me] += np.uint16(1)
        self.heard_at[me] = self._ms(now)
        self._rebase_if_due(now)
        self._round += 1
        self._counts["rounds"] += 1
        n = len(self.ids)
        if n < 2:
            return []
        if self.params.ring_heartbeats:
            # never skipped for a multicast: the heartbeat also relays the neighbourhood's counters
            return [self._ring_heartbeat(me, n)]
        if now - self._last_multicast < self.params.gossip_interval:
            self._counts["skipped"] += 1
            return []
        dimensions = math.ceil(math.log2(n))
        # the dimension follows our own rounds: members share no clock, so
        # they are out of phase and a member may get several heartbeats in a
        # round and none in the next (docs/membership.md, "Clocks")
        r = (self._round - 1) % dimensions + 1
        target = int(self.ids[(me + (1 << (r - 1))) % n])
        self._counts["sent"] += 1
        if self.params.roster_heartbeats:
            step = MAX_ROSTER_HEARTBEAT_ENTRIES
            return [FdSend(target, MsgType.HEARTBEAT_ROSTER,
                           encode_roster_heartbeat(self._roster_tag, i, self.counters[i:i + step]))
                    for i in range(0, n, step)]
        return [FdSend(target, MsgType.HEARTBEAT, encode_heartbeat(self.ids[i:i + MAX_HEARTBEAT_ENTRIES],
                                                                   self.counters[i:i + MAX_HEARTBEAT_ENTRIES]))
                for i in range(0, n, MAX_HEARTBEAT_ENTRIES)]

    def _ring_heartbeat(self, me: int, n: int) -> FdSend:
        """Our neighbourhood's counters to the successor at the round's distance."""
        hops = ring_hops(ring_width(n))
        target = int(self.ids[(me + hops[(self._round - 1) % len(hops)]) % n])
        self._counts["sent"] += 1
        carried = self._neighbourhood
        return FdSend(target, MsgType.HEARTBEAT, encode_heartbeat(self.ids[carried], self.counters[carried]))

    def _find_suspects(self, now: float, out: list[FdOut]) -> None:
        deadline = self._ms(now) - math.ceil(self.suspect_timeout() * 1000)
        if self.params.ring_heartbeats:
            watched = self._watched
            quiet_since = np.maximum(self.heard_at[watched], self.grace_from[watched])
            stale = watched[quiet_since < deadline]
        else:
            stale = np.flatnonzero(np.maximum(self.heard_at, self.grace_from) < deadline)
        for i in stale.tolist():
            member = int(self.ids[i])
            if member != self.me and member not in self.suspects and member not in self.failed:
                self._suspect(member, now, out)

    def _suspect(self, member: int, now: float, out: list[FdOut]) -> _Confirmation:
        confirmation = self.suspects[member] = _Confirmation(now, self.rng.getrandbits(62))
        self._counts["suspicions"] += 1
        out.append(FdEvent(Verdict.SUSPECT, member))
        return confirmation

    def _advance(self, member: int, confirmation: _Confirmation, now: float) -> list[FdOut]:
        if confirmation.stage == "pull" and confirmation.probes < self.params.probe_count:
            confirmation.probes += 1
            confirmation.due = now + self.params.probe_interval
            return [FdSend(member, MsgType.PROBE, encode(Probe(confirmation.nonce)))]
        if confirmation.stage == "pull":
            return self._ask(member, confirmation, now)
        return self._declare_failed(member, now)

    def _ask(self, member: int, confirmation: _Confirmation, now: float) -> list[FdOut]:
        neighbours = self._neighbours(member)
        if not neighbours:
            return self._declare_failed(member, now)
        confirmation.stage = "ask"
        confirmation.due = now + self.params.ask_timeout
        confirmation.awaiting = set(neighbours)
        body = encode(Ask(member, confirmation.nonce))
        return [FdSend(n, MsgType.ASK, body) for n in neighbours]

    def _neighbours(self, member: int) -> list[int]:
        """The members ``member`` gossips to first, which hear from it directly
        (ring form: its watchers, nearest first)."""
        n, i = len(self.ids), self._index[member]
        found: list[int] = []
        if self.params.ring_heartbeats:
            distances = list(range(1, ring_width(n) + 1))
        else:
            distances = [1 << k for k in range(max(1, math.ceil(math.log2(n))))]
        for distance in distances:
            candidate = int(self.ids[(i + distance) % n])
            if candidate not in (self.me, member) and candidate not in self.failed and candidate not in found \
                    and candidate not in self.suspects:
                found.append(candidate)
            if len(found) == self.params.ask_count:
                break
        return found

    def _declare_failed(self, member: int, now: float) -> list[FdOut]:
        del self.suspects[member]
        self.failed.add(member)
        self._counts["failures"] += 1
        if self.params.ring_heartbeats:
            self._retell[member] = now + self.suspect_timeout()
        return [FdEvent(Verdict.FAILED, member)]

    def _retell_verdicts(self, now: float, out: list[FdOut]) -> None:
        """Ring form: our verdicts again, while their members are in a view
        (a lost obituary, or one told to a coordinator that has failed since)."""
        for member, due in list(self._retell.items()):
            if due <= now:
                self._retell[member] = now + self.suspect_timeout()
                out.append(FdEvent(Verdict.FAILED, member))

    def statistics(self) -> DetectorStatistics:
        c = self._counts
        return DetectorStatistics(c["rounds"], c["sent"], c["skipped"], c["suspicions"], c["refuted"], c["busy"],
                                  c["failures"], c["mismatched"], c["told"])


def ring_width(members: int) -> int:
    """K, the members that watch each one in the ring form: ceil(log2 N), at most N - 1."""
    return min(members - 1, max(1, math.ceil(math.log2(max(2, members)))))


def ring_hops(width: int) -> tuple[int, ...]:
    """The distances a ring heartbeat goes, one per round: 1, 2, 4, ... up to ``width``."""
    return tuple(1 << k for k in range(max(1, width.bit_length())) if 1 << k <= max(1, width))
