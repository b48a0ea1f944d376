"""One member process of ``sgcs demo``; started by ``sgcs.apps.demo``, one per member.

Theory of operation
-------------------
The parent starts ``python -m sgcs.apps.demo_member SPEC`` once per member, SPEC
being a JSON object (``DemoSpec``) and the group secret in the environment
(``sgcs.apps.members``). The member uses nothing but the public trio API:

1. open a node on 127.0.0.1 with the run's own multicast group and port (and
   ``trace=DIR`` when the parent asks for a trace), with the member id the
   parent chose (small ids read well in a demo), and join the group "demo"
   by discovery (``members=None``): each member starts as a singleton view
   and the coordinators' beacons merge them;
2. multicast a short message every ``1 / rate`` seconds from the start (sends
   made while views merge are optimistic, as any application's are), and
   consume every event of the group;
3. report to the parent in JSON lines on stdout: ``joined`` (its id), every
   ``view`` (id, members, joined, left, failed), ``proposal`` (a view change
   began), ``suspect`` and ``busy`` (the failure detector's opinions), and
   every ``COUNTERS_EVERY`` seconds its ``counters`` (sent, delivered,
   delivered per second over the last interval, rolled back). Each line
   carries ``t``, this host's CLOCK_MONOTONIC in seconds, which every
   process of a Linux host shares: the parent measures the time from its
   kill to each survivor's new view with it;
4. when stdin closes (the parent is done, or gone) leave the group
   gracefully and exit.

The parent may SIGKILL a member at any moment: that is the point of the demo.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import trio

import sgcs
from sgcs.api import (Delivery, MemberBusy, MemberSuspected, NotDelivered, OptimisticView, Rollback, TransitionalView,
                      ViewChange)
from sgcs.apps.members import member_main, report, stdin_closed

GROUP = "demo"
COUNTERS_EVERY = 0.25
"""Seconds between two counter reports to the parent."""
BEACON_INTERVAL = 0.1
"""Config.beacon_interval: discovery within a few tenths of a second."""
SUSPECT_FACTOR = 5.0
"""Config.suspect_factor: a heartbeat may stand still 5 x ceil(log2 N) gossip
rounds (1 s with 4 members) before suspicion, so a member starved of CPU on a
busy machine is not excluded. A killed member is found much sooner anyway:
the first datagram sent to its port earns an ICMP port-unreachable (Linux),
which makes it a suspect at once and skips the probes."""


@dataclass(frozen=True, slots=True)
class DemoSpec:
    """What the parent tells every member."""

    index: int
    node_id: int
    order: str
    rate: float
    """Messages per second this member multicasts."""
    multicast_group: str
    multicast_port: int
    trace: str | None = None
    """Run directory shared by every member's trace; None: no trace."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "DemoSpec":
        return cls(**json.loads(text))


def demo_config(spec: DemoSpec, secret: bytes) -> sgcs.Config:
    """Loopback, fast discovery, patient suspicion (see ``SUSPECT_FACTOR``)."""
    return sgcs.Config(
        name=f"m{spec.node_id}", secret=secret, node_id=spec.node_id, bind_host="127.0.0.1",
        multicast_group=spec.multicast_group, multicast_port=spec.multicast_port,
        beacon_interval=BEACON_INTERVAL, suspect_factor=SUSPECT_FACTOR,
    )


def _now() -> float:
    return round(time.monotonic(), 4)


class Member:
    """Counts what one member sends and delivers, and reports its events."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.sent = 0
        self.delivered = 0
        self.rolled_back = 0
        self.not_delivered = 0
        self._handlers: dict[type, Callable[[Any], None]] = {
            Delivery: self._on_delivery, ViewChange: self._on_view, OptimisticView: self._on_proposal,
            Rollback: self._on_rollback, NotDelivered: self._on_not_delivered, TransitionalView: self._on_transitional,
            MemberSuspected: self._on_suspect, MemberBusy: self._on_busy,
        }

    async def receive(self, group: sgcs.GroupHandle) -> None:
        async for event in group:
            self._handlers[type(event)](event)

    def _on_delivery(self, event: Delivery) -> None:
        self.delivered += 1

    def _on_view(self, event: ViewChange) -> None:
        report("view", t=_now(), view_id=event.view_id, members=list(event.members), joined=list(event.joined),
               left=list(event.left), failed=list(event.failed))

    def _on_proposal(self, event: OptimisticView) -> None:
        report("proposal", t=_now(), view_id=event.view_id, members=list(event.members))

    def _on_rollback(self, event: Rollback) -> None:
        self.rolled_back += len(event.messages)

    def _on_not_delivered(self, event: NotDelivered) -> None:
        self.not_delivered += 1

    def _on_transitional(self, event: TransitionalView) -> None:
        report("transitional", t=_now(), view_id=event.view_id, members=list(event.members))

    def _on_suspect(self, event: MemberSuspected) -> None:
        report("suspect", t=_now(), member=event.member)

    def _on_busy(self, event: MemberBusy) -> None:
        report("busy", t=_now(), member=event.member)

    async def send(self, group: sgcs.GroupHandle) -> None:
        """Paced multicasts; after a stall (flow control, a view change) the
        pace resumes instead of bursting to catch up."""
        interval = 1.0 / self.rate
        next_at = trio.current_time()
        while True:
            await group.send(f"m{group.node_id} #{self.sent}".encode())
            self.sent += 1
            next_at = max(next_at + interval, trio.current_time() - interval)
            await trio.sleep_until(next_at)

    async def report_counters(self) -> None:
        last_t, last_delivered = time.monotonic(), 0
        while True:
            await trio.sleep(COUNTERS_EVERY)
            t = time.monotonic()
            rate = (self.delivered - last_delivered) / (t - last_t)
            report("counters", t=round(t, 4), sent=self.sent, delivered=self.delivered, rate=round(rate, 1),
                   rolled_back=self.rolled_back)
            last_t, last_delivered = t, self.delivered


async def run_member(spec: DemoSpec, secret: bytes) -> None:
    tracing = {} if spec.trace is None else {"trace": spec.trace}
    async with (
        sgcs.open_node(demo_config(spec, secret), **tracing) as node,
        node.join(GROUP, order=spec.order) as group,
    ):
        report("joined", t=_now(), id=node.id)
        member = Member(spec.rate)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(member.receive, group)
            nursery.start_soon(member.send, group)
            nursery.start_soon(member.report_counters)
            await stdin_closed()
            nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    return member_main(sys.argv[1:] if argv is None else argv, "demo", DemoSpec.from_json, run_member, ())


if __name__ == "__main__":
    sys.exit(main())
