"""Hand-made trace directories (schema 1) for the Spark analysis tests.

A ``Trace`` collects event rows in the order they are added (row order is
event order, as the simulator writes it) and ``write`` produces a run
directory: meta.json, events/ and net/ Parquet part files, and stats/ when
stats rows were given. Times passed to the helpers must not go backwards,
like a real trace's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sgcs.trace import events_schema, net_schema

STATS_SCHEMA = pa.schema([("t", pa.float64()), ("node", pa.int64()), ("group", pa.string()),
                          ("buffered", pa.int64()), ("window", pa.int64())])


@dataclass
class Trace:
    nodes: int = 3
    duration: float = 10.0
    order: str = "total"
    group: str = "g"
    faults: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    net: list[dict[str, Any]] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)

    def add(self, t: float, node: int, kind: str, **fields: Any) -> "Trace":
        if self.rows:
            assert t >= self.rows[-1]["t"], "rows are in event order: t must not go backwards"
        self.rows.append({"t": t, "node": node, "kind": kind, **fields})
        return self

    def view(self, t: float, nodes: list[int], view_id: str, members: list[int], optimistic: bool = False,
             group: str | None = None) -> "Trace":
        for n in nodes:
            self.add(t, n, "view", group=group or self.group, view_id=view_id, members=sorted(members),
                     optimistic=optimistic)
        return self

    def send(self, t: float, sender: int, seq: int, view_id: str = "v1", optimistic: bool = False,
             group: str | None = None, order: str | None = None) -> "Trace":
        return self.add(t, sender, "send", group=group or self.group, sender=sender, seq=seq,
                        order=order or self.order, view_id=view_id, optimistic=optimistic, size=8)

    def deliver(self, t: float, node: int, sender: int, seq: int, view_id: str = "v1", optimistic: bool = False,
                group: str | None = None, order: str | None = None) -> "Trace":
        return self.add(t, node, "deliver", group=group or self.group, sender=sender, seq=seq,
                        order=order or self.order, view_id=view_id, optimistic=optimistic, size=8)

    def multicast(self, t: float, sender: int, seq: int, to: list[int], step: float = 0.001,
                  view_id: str = "v1", **kw: Any) -> "Trace":
        """A send, then deliveries at ``to`` in that order, ``step`` seconds apart."""
        self.send(t, sender, seq, view_id=view_id, **kw)
        for i, n in enumerate(to):
            self.deliver(t + (i + 1) * step, n, sender, seq, view_id=view_id, **kw)
        return self

    def end(self, t: float | None = None) -> "Trace":
        """A harmless last row (a drop) so that the trace lasts ``duration``."""
        return self.add(self.duration if t is None else t, 0, "drop", reason="test")

    def meta(self) -> dict[str, Any]:
        scenario = {"seed": 1, "nodes": self.nodes, "duration": self.duration,
                    "network": {"loss": 0.0}, "protocol": {},
                    "groups": [{"name": self.group, "order": self.order, "members": "all"}],
                    "faults": self.faults}
        return {"schema": 1, "seed": 1, "nodes": self.nodes, "duration": self.duration, "scenario": scenario,
                "sgcs_version": "test", "net_bucket": 1.0}

    def write(self, run: Path) -> str:
        run.mkdir(parents=True, exist_ok=True)
        (run / "meta.json").write_text(json.dumps(self.meta()))
        _write(run / "events", self.rows, events_schema())
        _write(run / "net", self.net, net_schema())
        if self.stats:
            _write(run / "stats", self.stats, STATS_SCHEMA)
        return str(run)


def _write(directory: Path, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    columns = {name: [row.get(name) for row in rows] for name in schema.names}
    pq.write_table(pa.table(columns, schema=schema), directory / "part-00000.parquet")


# ------------------------------------------------------------------ the invariant traces


def clean(order: str = "total") -> Trace:
    """Three members in view v1; four multicasts delivered everywhere in one order."""
    trace = Trace(order=order).view(0.0, [0, 1, 2], "v1", [0, 1, 2])
    for i, (sender, seq) in enumerate([(0, 1), (1, 1), (2, 1), (0, 2)]):
        trace.multicast(0.1 * (i + 1), sender, seq, [0, 1, 2])
    return trace.end()


def duplicate() -> Trace:
    """Invariant 1: node 1 delivers (0, 1) twice."""
    trace = Trace().view(0.0, [0, 1, 2], "v1", [0, 1, 2]).multicast(0.1, 0, 1, [0, 1, 2])
    return trace.deliver(0.2, 1, 0, 1).end()


def fifo() -> Trace:
    """Invariant 2: node 2 delivers (0, 2) before (0, 1)."""
    trace = Trace().view(0.0, [0, 1, 2], "v1", [0, 1, 2])
    trace.send(0.1, 0, 1).deliver(0.101, 0, 0, 1).deliver(0.102, 1, 0, 1)
    trace.send(0.2, 0, 2).deliver(0.201, 0, 0, 2).deliver(0.202, 1, 0, 2).deliver(0.203, 2, 0, 2)
    return trace.deliver(0.3, 2, 0, 1).end()


def total() -> Trace:
    """Invariant 3: (0, 1) and (2, 1) are concurrent; node 1 delivers them in the other order."""
    trace = Trace().view(0.0, [0, 1, 2], "v1", [0, 1, 2])
    trace.send(0.1, 0, 1).send(0.1, 2, 1)
    trace.deliver(0.11, 0, 0, 1).deliver(0.12, 0, 2, 1)
    trace.deliver(0.13, 2, 0, 1).deliver(0.14, 2, 2, 1)
    trace.deliver(0.15, 1, 2, 1).deliver(0.16, 1, 0, 1)
    return trace.end()


def causal() -> Trace:
    """Invariant 4: node 1 delivers (0, 1) then sends (1, 1); node 2 delivers (1, 1) first."""
    trace = Trace(order="causal").view(0.0, [0, 1, 2], "v1", [0, 1, 2])
    trace.send(0.1, 0, 1).deliver(0.101, 0, 0, 1).deliver(0.102, 1, 0, 1)
    trace.send(0.2, 1, 1).deliver(0.201, 1, 1, 1).deliver(0.202, 0, 1, 1).deliver(0.203, 2, 1, 1)
    return trace.deliver(0.3, 2, 0, 1).end()


def virtual_synchrony() -> Trace:
    """Invariant 5: all three install v1 then v2, but node 2 missed (2, 1) in v1."""
    trace = Trace().view(0.0, [0, 1, 2], "v1", [0, 1, 2])
    trace.multicast(0.1, 0, 1, [0, 1, 2]).multicast(0.2, 2, 1, [2, 0, 1])
    trace.rows = [r for r in trace.rows if not (r["kind"] == "deliver" and r["node"] == 2 and r["sender"] == 2)]
    trace.view(1.0, [0, 1, 2], "v2", [0, 1, 2])
    return trace.multicast(1.1, 1, 1, [0, 1, 2], view_id="v2").end()


def loss() -> Trace:
    """Invariant 6: node 2 never delivers (0, 2), although everyone stays up in v1.

    Not a violation: in group h, nodes 1 and 2 never deliver (0, 1) of h1 and
    their next view h2 holds 0, but their transitional view of h1 names only
    1 and 2 (0 came back from a view of its own)."""
    trace = Trace().view(0.0, [0, 1, 2], "v1", [0, 1, 2]).view(0.0, [0, 1, 2], "h1", [0, 1, 2], group="h")
    trace.multicast(0.1, 0, 1, [0, 1, 2]).multicast(0.2, 0, 2, [0, 1])
    trace.send(0.3, 0, 1, view_id="h1", group="h").deliver(0.3, 0, 0, 1, view_id="h1", group="h")
    trace.view(0.4, [0], "h0", [0], group="h")
    for n in (1, 2):
        trace.add(0.5, n, "transitional", group="h", view_id="h1", members=[1, 2])
    trace.view(0.6, [0, 1, 2], "h2", [0, 1, 2], group="h")
    # Not a violation either: in group w, (1, 1) is sent under a first proposal named w2, which
    # its sender withdraws; the same coordinator proposes again with the same members (the same
    # name w2), and that one is installed: nobody owes (1, 1); (1, 2), sent under the second, arrives.
    trace.view(0.7, [0, 1, 2], "w1", [0, 1, 2], group="w")
    trace.view(0.71, [1], "w2", [0, 1, 2], optimistic=True, group="w").send(0.72, 1, 1, "w2", True, "w")
    trace.add(0.73, 1, "not_delivered", group="w", sender=1, seq=1, view_id="w1", reason="withdrawn")
    trace.view(0.74, [1], "w2", [0, 1, 2], optimistic=True, group="w").send(0.75, 1, 2, "w2", True, "w")
    trace.view(0.8, [0, 1, 2], "w2", [0, 1, 2], group="w")
    for n in (0, 1, 2):
        trace.deliver(0.81, n, 1, 2, view_id="w2", optimistic=True, group="w")
    return trace.end()


def rolled_back() -> Trace:
    """Invariant 7: optimistic (0, 1) is rolled back, yet node 1 delivers it; in group w,
    (2, 1) is withdrawn by its sender, yet node 0 delivers it in w3, which 2 installs afterwards."""
    trace = Trace().view(0.0, [0, 1, 2], "v1", [0, 1, 2]).view(0.5, [0, 1, 2], "v2", [0, 1, 2], optimistic=True)
    trace.send(0.6, 0, 1, view_id="v2", optimistic=True).deliver(0.61, 1, 0, 1, view_id="v2", optimistic=True)
    trace.add(0.7, 0, "rollback", group="g", sender=0, seq=1, view_id="v2")
    trace.view(0.8, [0, 1, 2], "w1", [0, 1, 2], group="w").send(0.81, 2, 1, "w2", True, "w")
    trace.add(0.82, 2, "not_delivered", group="w", sender=2, seq=1, view_id="w1", reason="withdrawn")
    trace.view(0.9, [0, 1, 2], "w3", [0, 1, 2], group="w").deliver(0.91, 0, 2, 1, "w3", True, "w")
    return trace.end()


def outside_optimistic() -> Trace:
    """Invariant 7: a message sent under optimistic view o1 = {0, 1, 2, 3} is delivered in
    installed view v2 = {0, 1, 2}, which lacks member 3."""
    trace = Trace(nodes=4).view(0.0, [0, 1, 2], "v1", [0, 1, 2])
    trace.view(0.5, [0, 1, 2], "o1", [0, 1, 2, 3], optimistic=True)
    trace.send(0.6, 0, 1, view_id="o1", optimistic=True)
    trace.view(0.8, [0, 1, 2], "v2", [0, 1, 2])
    for i, n in enumerate([0, 1, 2]):
        trace.deliver(0.9 + 0.01 * i, n, 0, 1, view_id="v2", optimistic=True)
    return trace.end()


def without_outcome() -> Trace:
    """Invariant 8: (0, 2) reaches 1 and 2 but gets no outcome at its live sender 0
    (no delivery, rollback or not_delivered row there); (0, 3) has a not_delivered row."""
    trace = Trace().view(0.0, [0, 1, 2], "v1", [0, 1, 2])
    trace.multicast(0.1, 0, 1, [0, 1, 2]).multicast(0.2, 0, 2, [1, 2]).send(0.3, 0, 3)
    trace.add(0.4, 0, "not_delivered", group="g", sender=0, seq=3, view_id="v1", reason="left_out")
    return trace.end()


VIOLATIONS = {
    "1_duplicate": (duplicate, 1),
    "2_fifo": (fifo, 1),
    "3_total": (total, 1),
    "4_causal": (causal, 1),
    "5_virtual_synchrony": (virtual_synchrony, 1),
    "6_loss_among_survivors": (loss, 1),
    "7_rolled_back_delivered": (rolled_back, 2),
    "7_outside_optimistic_view": (outside_optimistic, 3),
    "8_without_outcome": (without_outcome, 1),
}
"""Invariant key -> (trace that violates it, violations expected under that key)."""


# ------------------------------------------------------------------ traces with known measurements


def measured() -> Trace:
    """Known latency, reliability, load, detection and occupancy figures (see the test)."""
    trace = Trace(nodes=4, order="fifo", faults=[{"at": 7.0, "pause": [1], "for": 1.0}])
    trace.view(0.0, [0, 1, 2, 3], "v1", [0, 1, 2, 3])
    trace.send(1.0, 0, 1).deliver(1.0, 0, 0, 1).deliver(1.01, 1, 0, 1).deliver(1.03, 2, 0, 1).deliver(1.04, 3, 0, 1)
    trace.send(2.0, 1, 1, group="h", order="total")
    trace.deliver(2.1, 0, 1, 1, group="h", order="total").deliver(2.2, 2, 1, 1, group="h", order="total")
    trace.send(2.5, 0, 2).deliver(2.5, 0, 0, 2).deliver(2.51, 1, 0, 2)   # reaches 2 of 4: 0.5
    trace.add(3.0, 1, "suspect", target=0)                                # false: 0 is up
    trace.add(5.0, 3, "crash").add(5.5, 0, "suspect", target=3)           # true: 3 crashed
    trace.send(5.6, 0, 3).deliver(5.6, 0, 0, 3).deliver(5.61, 1, 0, 3).deliver(5.62, 2, 0, 3)  # 3 of 3 live
    trace.view(6.0, [0], "v2", [0, 1, 2]).view(6.5, [1, 2], "v2", [0, 1, 2])
    trace.add(7.5, 0, "suspect", target=1)                                # paused: not false
    trace.end()
    trace.net = [
        {"t": 0.0, "node": 0, "msg_type": "data", "sent_count": 10, "sent_bytes": 1000, "recv_count": 0,
         "recv_bytes": 0, "lost_count": 0},
        {"t": 1.0, "node": 0, "msg_type": "data", "sent_count": 10, "sent_bytes": 1000, "recv_count": 0,
         "recv_bytes": 0, "lost_count": 0},
        {"t": 0.0, "node": 1, "msg_type": "heartbeat", "sent_count": 2, "sent_bytes": 100, "recv_count": 0,
         "recv_bytes": 0, "lost_count": 0},
        {"t": 0.0, "node": 1, "msg_type": "data", "sent_count": 0, "sent_bytes": 0, "recv_count": 10,
         "recv_bytes": 1000, "lost_count": 0},
    ]
    trace.stats = [{"t": float(t), "node": n, "group": "g", "buffered": 10 * t + n, "window": t}
                   for t in range(5) for n in range(2)]
    return trace
