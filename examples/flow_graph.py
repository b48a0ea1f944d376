"""An information flow graph: two exchanges, a max/current state, an alarm,
and a subscriber that leaves and catches up (``sgcs.services.flows``).

The graph (declared in TOML below)::

    nyse --(select: volume >= 100)--------\\
                                           quotes --(collapse: max/current)--> prices
    lse  --(transform: pence to dollars)--/      \\--(select: price < 90)-----> alarm

``nyse`` and ``lse`` are the roots that publishers publish into. NYSE quotes
reach ``quotes`` only in round lots (a select). LSE quotes are in pence and
are converted to dollars on the way (a transform). ``quotes`` merges both
(fan-in), so a dual-listed issue (BP, SHEL) gets one maximum over both
exchanges. ``prices`` holds, per issue, the highest price and the current
one (the paper's rules). ``alarm`` holds the quotes below 90 (every issue
opens at 100 in this toy market). A drop against each issue's own maximum
cannot be a select arc: the only arc out of a state is an expand, whose
events carry a quote's fields, not the maximum. So the live subscriber
subscribes to ``prices`` with ``curPrice < 0.9 * maxPrice`` instead, a
filter on the state's values.

Five sgcs nodes run in this one trio process on a multicast group and port
of this run's own: a keeper (holds every state in full and answers state
transfers and catch-ups), a publisher per exchange, a live subscriber
(``desk``) and a durable one (``london``, SQLite in a temporary directory).
``london`` watches the dual-listed issues, leaves, misses a backlog of
quotes, comes back under the same name with the same file, and catches up
with a few expanded events instead of the backlog. The script prints both
figures and checks that its state equals the live subscriber's.

    python examples/flow_graph.py
"""

from __future__ import annotations

import random
import secrets
import socket
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

import sgcs
from sgcs.services.flows import FlowGraph, open_flows, wire
from sgcs.services.flows.service import FlowService, FlowSubscription

GRAPH = """
name = "exchanges"
[spaces.nyse]
fields = "issue: str, price: float, volume: int"
[spaces.lse]
fields = "epic: str, pence: float, shares: int"
[spaces.quotes]
fields = "issue: str, price: float, volume: int"
[spaces.prices]
key = "issue: str"
values = "maxPrice: float, curPrice: float"
[spaces.alarm]
fields = "issue: str, price: float, volume: int"

[[arcs]]                      # NYSE: round lots only
from = "nyse"
to = "quotes"
select = "volume >= 100"
[[arcs]]                      # LSE: pence to dollars, at $1.25 a pound
from = "lse"
to = "quotes"
transform = "[epic: e, pence: p, shares: s] -> [issue: e, price: p / 80, volume: s]"
[[arcs]]                      # the paper's max/current collapse
from = "quotes"
to = "prices"
collapse = ["[n,p,v] -> <n: p, p>",
            "[n,p,v], <n: maxP, curP>, p > maxP -> <n: p, p>",
            "[n,p,v], <n: maxP, curP>, p <= maxP -> <n: maxP, p>"]
[[arcs]]
from = "quotes"
to = "alarm"
select = "price < 90"
"""
NYSE = ("IBM", "XOM", "KO", "BP", "SHEL")
LSE = ("BP", "SHEL", "VOD", "HSBC")
LONDON = 'issue = "BP" | issue = "SHEL"'
"""What the durable subscriber watches: the dual-listed issues."""
SECRET = b"examples/flow_graph.py secret"
TIMEOUT = 30.0
"""Seconds for each wait; the whole run takes a few seconds."""


def private_network() -> dict[str, Any]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # a free port and a random 239.255.x.y,
        probe.bind(("127.0.0.1", 0))  # so that concurrent runs never hear each other
        x, y = secrets.randbelow(254) + 1, secrets.randbelow(254) + 1
        return {"multicast_group": f"239.255.{x}.{y}", "multicast_port": probe.getsockname()[1]}


def trading(rng: random.Random, count: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """``count`` quotes for each exchange: prices around 100 dollars (8,000 pence)."""
    nyse = [(rng.choice(NYSE), rng.randrange(8_500, 11_500) / 100, rng.choice((50, 100, 300))) for _ in range(count)]
    lse = [(rng.choice(LSE), float(rng.randrange(6_800, 9_200)), rng.choice((100, 500))) for _ in range(count)]
    return nyse, lse


def london_quotes(nyse: list[tuple[Any, ...]], lse: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The ``quotes`` events on BP and SHEL that these exchange quotes make, by the graph's arcs."""
    merged = [q for q in nyse if q[2] >= 100] + [(e, p / 80, s) for e, p, s in lse]
    return [q for q in merged if q[0] in ("BP", "SHEL")]


class Market:
    """The nodes of this run and the helpers that wait on them (every wait is bounded)."""

    def __init__(self, stack: AsyncExitStack, graph: FlowGraph, network: dict[str, Any]) -> None:
        self.stack, self.graph, self.network = stack, graph, network

    async def open(self, name: str, stack: AsyncExitStack | None = None, **flows: Any) -> FlowService:
        stack = stack or self.stack
        config = sgcs.Config(name=name, secret=SECRET, beacon_interval=0.1, **self.network)
        node = await stack.enter_async_context(sgcs.open_node(config))
        return await stack.enter_async_context(open_flows(node, self.graph, **flows))

    async def until_view(self, members: list[FlowService]) -> None:
        """Until each of ``members`` sees exactly them, and has their subscriptions."""
        (group,) = self.graph.root_groups()  # one group: nyse and lse meet in prices
        with trio.fail_after(TIMEOUT):
            for flows in members:
                while (len(flows.view(group)) != len(members)
                       or len(flows.engine.groups[group].peers) < len(members) - 1):
                    await trio.sleep(0.02)


async def until(condition: Any, what: str) -> None:
    with trio.move_on_after(TIMEOUT):
        while not condition():
            await trio.sleep(0.02)
        return
    raise RuntimeError(f"{what} did not happen within {TIMEOUT:g} s")


async def run(work: Path) -> int:
    graph, rng = FlowGraph.from_toml(GRAPH), random.Random(19)
    async with AsyncExitStack() as stack:
        market = Market(stack, graph, private_network())
        keeper = await market.open("keeper", keeper=True)
        with trio.fail_after(TIMEOUT):
            await keeper.kept("prices").ready()
        nyse, lse, desk = [await market.open(name) for name in ("nyse", "lse", "desk")]
        prices = await desk.subscribe("prices", LONDON)  # live: a state subscription with a predicate
        london_feed = await desk.subscribe("quotes", LONDON)  # the backlog a replay would send
        alarm = await desk.subscribe("alarm")  # a history: every quote below 90
        drops = await desk.subscribe("prices", "curPrice < 0.9 * maxPrice")  # a filter on a state's values
        feed: list[tuple[Any, ...]] = []  # what london_feed delivered so far

        # The durable subscriber: its rows live in its own SQLite file.
        async with AsyncExitStack() as away_stack:
            london = await market.open("london", away_stack, store=work / "london.db")
            durable = await london.subscribe("prices", LONDON, durable=True)
            with trio.fail_after(TIMEOUT):
                for state in (prices, drops, durable):
                    await state.ready()
            await market.until_view([keeper, nyse, lse, desk, london])
            opening = trading(rng, 100)
            await nyse.publish("nyse", opening[0])
            await lse.publish("lse", opening[1])
            expected = london_quotes(*opening)
            await until(lambda: len(drain(london_feed, feed)) >= len(expected), "the opening quotes")
            await until(lambda: durable.rows() == prices.rows(), "the durable subscriber's first state")
            before: dict[tuple[Any, ...], tuple[Any, ...]] = durable.rows()
        print(f"london left holding {len(before)} rows: {fmt(before)}")

        # It is away: a backlog of quotes flows without it.
        await market.until_view([keeper, nyse, lse, desk])
        seen = len(drain(london_feed, feed))
        backlog = trading(rng, 1_000)
        for start in range(0, 1_000, 100):
            await nyse.publish("nyse", backlog[0][start:start + 100])
            await lse.publish("lse", backlog[1][start:start + 100])
        missed = london_quotes(*backlog)
        await until(lambda: len(drain(london_feed, feed)) >= seen + len(missed), "the backlog at the desk")
        replay = feed[seen:]
        if sorted(replay) != sorted(missed):
            raise RuntimeError("the desk's quotes differ from what the select and transform arcs make")

        # Back under the same name with the same file: catch-up instead of the backlog.
        london = await market.open("london", store=work / "london.db")
        durable = await london.subscribe("prices", LONDON, durable=True)
        with trio.fail_after(TIMEOUT):
            await durable.ready()
        await until(lambda: durable.rows() == prices.rows(), "the catch-up")
        caught = durable.counters
        changed = [k for k, row in durable.rows().items() if before.get(k) != row]
        replay_bytes = wire.encoded_events_size("quotes", replay)
        print(f"while away it missed {len(replay)} quotes on BP and SHEL ({replay_bytes:,} bytes to replay)")
        factor = replay_bytes / max(1, caught["catchup_bytes"])
        print(f"catch-up: {caught['catchup_events']} events, {caught['catchup_bytes']:,} bytes"
              f" for {len(changed)} changed issues ({factor:.0f}x fewer bytes than the replay)")
        print(f"london now holds {fmt(durable.rows())}")
        print(f"the live desk holds {fmt(prices.rows())}")
        print(f"alarm: {len(alarm.receive_nowait())} quotes below 90; more than 10% below their maximum now:"
              f" {', '.join(sorted(str(k[0]) for k in drops.rows())) or 'none'}")
        if durable.rows() != prices.rows() or any(before[k][0] > durable.rows()[k][0] for k in before):
            raise RuntimeError("the returning subscriber's state differs from the live subscriber's")
        if not 0 < caught["catchup_events"] <= 2 * len(changed):  # max/current: at most 2 events per issue
            raise RuntimeError(f"a catch-up of {caught['catchup_events']} events for {len(changed)} changed issues")
        print("the durable subscriber caught up: its state equals the live subscriber's")
        return 0


def drain(subscription: FlowSubscription, into: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    into += subscription.receive_nowait()
    return into


def fmt(rows: dict[tuple[Any, ...], tuple[Any, ...]]) -> str:
    return ", ".join(f"{k[0]} max {v[0]:.2f} cur {v[1]:.2f}" for k, v in sorted(rows.items()))


def main() -> int:
    try:
        with tempfile.TemporaryDirectory(prefix="flow-graph-") as work:
            return trio.run(run, Path(work))
    except trio.TooSlowError:
        return fail(f"a wait took longer than {TIMEOUT:g} s")
    except Exception as exc:  # one line, not a traceback
        while isinstance(exc, ExceptionGroup):
            exc = exc.exceptions[0]
        return fail(f"{type(exc).__name__}: {exc}")


def fail(message: str) -> int:
    print(f"examples/flow_graph.py: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
