"""The ADS paper's three-stage survival signals (``sgcs.services.handles.survival``)
and the maintenance state, on the sans-I/O monitor (a clock the test moves) and
on real modules over loopback.

The monitor is driven tick by tick: ``tick(now)`` is the check every interval
T, ``heard`` an arrival, ``on_answer`` a neighbour's answer. The rows of
``TRANSITIONS`` are each walked by at least one test here."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import trio

import sgcs
from _net import private_multicast
from sgcs.errors import DecodeError, UsageError
from sgcs.services.handles import Data, NodeEvent, NodeInMaintenance, SurvivalParams, attach
from sgcs.services.handles import tcd as codes
from sgcs.services.handles.survival import TRANSITIONS, Send, State, SurvivalMonitor, Verdict

T = 1.0
PARAMS = SurvivalParams(interval=T, misses=4, probes=3, ask_count=3, ask_timeout=1.5)
ME, X = 1, 5


def monitor(members: tuple[int, ...] = (1, 3, 5, 7, 9), params: SurvivalParams = PARAMS) -> SurvivalMonitor:
    m = SurvivalMonitor(ME, params)
    m.on_view(members, (), (), 0.0)
    return m


def ticks(m: SurvivalMonitor, start: float, count: int, *, heard: tuple[int, ...] = ()) -> tuple[float, list[Any]]:
    """``count`` checks one interval apart from ``start``; before each, every node in ``heard`` is heard."""
    out: list[Any] = []
    now = start
    for _ in range(count):
        for node in heard:
            out += m.heard(node, now - T / 2)
        out += m.tick(now)
        now += T
    return now, out


def others_but(m: SurvivalMonitor, *silent: int) -> tuple[int, ...]:
    return tuple(n for n in m.watched if n not in silent)


def to_asking(m: SurvivalMonitor, suspect: int = X) -> tuple[float, list[Send]]:
    """Run stages 1 and 2 on ``suspect`` (the others keep signalling); returns the asks sent."""
    now, out = ticks(m, 1.0, PARAMS.misses + PARAMS.probes + 1, heard=others_but(m, suspect))
    assert m.state(suspect) is State.ASKING
    return now, [o for o in out if isinstance(o, Send) and o.kind == "ask"]


# ---------------------------------------------------------------- stage 1

def test_suspected_at_exactly_the_nth_missed_check() -> None:
    m = monitor()
    now, out = ticks(m, 1.0, 1)  # the first check: the view's grace covers it
    now, out = ticks(m, now, PARAMS.misses - 1, heard=(3, 7, 9))
    assert m.state(X) is State.ALIVE and Verdict("suspected", X) not in out
    now, out = ticks(m, now, 1, heard=(3, 7, 9))
    assert m.state(X) is State.SUSPECT
    assert out == [Verdict("suspected", X), Send("probe", X)]


def test_a_signal_inside_the_window_resets_the_count() -> None:
    m = monitor()
    now, _ = ticks(m, 1.0, PARAMS.misses, heard=(3, 7, 9))   # grace + 3 misses
    m.heard(X, now - 0.1)
    now, out = ticks(m, now, PARAMS.misses - 1, heard=(3, 7, 9))
    assert m.state(X) is State.ALIVE and not out


@pytest.mark.parametrize("misses", [1, 2, 7])
def test_n_is_configurable(misses: int) -> None:
    m = monitor(params=SurvivalParams(interval=T, misses=misses))
    now, _ = ticks(m, 1.0, misses, heard=(3, 7, 9))
    assert m.state(X) is State.ALIVE
    ticks(m, now, 1, heard=(3, 7, 9))
    assert m.state(X) is State.SUSPECT


# ---------------------------------------------------------------- stage 2

def test_pull_sends_m_probes_one_per_interval_and_an_answer_clears_it() -> None:
    m = monitor()
    now, out = ticks(m, 1.0, PARAMS.misses + PARAMS.probes, heard=(3, 7, 9))
    assert [o for o in out if isinstance(o, Send)] == [Send("probe", X)] * PARAMS.probes
    assert m.state(X) is State.SUSPECT
    assert m.heard(X, now) == [Verdict("alive", X)]
    assert m.state(X) is State.ALIVE


# ---------------------------------------------------------------- stage 3

def test_the_suspects_successors_that_we_hear_are_asked() -> None:
    m = monitor()
    _, asks = to_asking(m)
    assert sorted(a.to for a in asks) == [3, 7, 9] and {a.about for a in asks} == {X}
    m2 = monitor(params=SurvivalParams(interval=T, ask_count=2))
    now, out = ticks(m2, 1.0, 8, heard=(3, 7, 9))
    assert [o.to for o in out if isinstance(o, Send) and o.kind == "ask"] == [7, 9]  # after 5: 7, 9 (then 3)


def test_a_neighbour_that_still_hears_the_suspect_makes_it_busy_not_dead() -> None:
    """ADS stage 3: "if even one node reports a survival signal in stage 1 or 2: busy"."""
    m = monitor()
    now, asks = to_asking(m)
    nonce = asks[0].nonce
    assert m.on_answer(3, X, nonce, 0.2, now) == [Verdict("busy", X)]
    assert m.state(X) is State.BUSY
    # the other answers come late: nothing changes, and the suspect was never dead
    assert m.on_answer(7, X, nonce, math.inf, now) == [] and m.on_answer(9, X, nonce, math.inf, now) == []
    now, out = ticks(m, now, 3, heard=(3, 7, 9))
    assert m.state(X) is State.BUSY and Verdict("dead", X) not in out


def test_news_from_the_same_round_as_ours_is_not_evidence() -> None:
    """The suspect sends each round's signal to everyone at once: a neighbour
    that heard the same round we last heard has nothing newer."""
    m = monitor()
    now, asks = to_asking(m)
    ours = now - m.watched[X].last_heard
    out = [v for to in (3, 7, 9) for v in m.on_answer(to, X, asks[0].nonce, ours - 0.2 * T, now)]
    assert out == [Verdict("dead", X)]


def test_dead_only_when_every_neighbour_asked_confirms() -> None:
    m = monitor()
    now, asks = to_asking(m)
    nonce = asks[0].nonce
    assert m.on_answer(3, X, nonce, math.inf, now) == []
    assert m.on_answer(7, X, nonce, 30.0, now) == []
    assert m.state(X) is State.ASKING
    assert m.on_answer(9, X, nonce, math.inf, now) == [Verdict("dead", X)]
    assert m.state(X) is State.DEAD


def test_ask_timeout_without_confirmation_is_unreachable_not_dead() -> None:
    """The deviation sgcs's own detector makes (failed when the ask times out)
    is not made here: two confirmations out of three are not a death."""
    m = monitor()
    now, asks = to_asking(m)
    m.on_answer(3, X, asks[0].nonce, math.inf, now)
    m.on_answer(7, X, asks[0].nonce, math.inf, now)
    _, out = ticks(m, now + PARAMS.ask_timeout, 1, heard=(3, 7, 9))
    assert Verdict("unreachable", X) in out and Verdict("dead", X) not in out
    assert m.state(X) is State.UNREACHABLE


def test_unreachable_is_asked_about_again_and_dies_once_confirmed() -> None:
    m = monitor()
    now, _ = to_asking(m)
    now, out = ticks(m, now + PARAMS.ask_timeout, PARAMS.misses + PARAMS.probes + 1, heard=(3, 7, 9))
    assert m.state(X) is State.ASKING  # UNREACHABLE, then stages 2 and 3 again: no second "suspected"
    assert [v.kind for v in out if isinstance(v, Verdict)] == ["unreachable"]
    asks = [o for o in out if isinstance(o, Send) and o.kind == "ask"]
    answers = [v for a in asks for v in m.on_answer(a.to, X, a.nonce, math.inf, now)]
    assert answers == [Verdict("dead", X)]


def test_busy_asked_again_with_the_same_outcome_says_nothing_new_and_a_signal_ends_it() -> None:
    m = monitor()
    now, asks = to_asking(m)
    m.on_answer(3, X, asks[0].nonce, 0.1, now)
    now, out = ticks(m, now, PARAMS.misses + PARAMS.probes + 1, heard=(3, 7, 9))
    asks = [o for o in out if isinstance(o, Send) and o.kind == "ask"]
    assert asks and not [v for v in out if isinstance(v, Verdict)]
    assert m.on_answer(asks[0].to, X, asks[0].nonce, 0.1, now) == []  # busy again: not repeated
    assert m.heard(X, now) == [Verdict("alive", X)] and m.state(X) is State.ALIVE


def test_stale_and_foreign_answers_are_ignored_and_counted() -> None:
    m = monitor()
    now, asks = to_asking(m)
    assert m.on_answer(3, X, asks[0].nonce + 1, 0.0, now) == []   # another ask's nonce
    assert m.on_answer(8, X, asks[0].nonce, 0.0, now) == []       # not asked
    assert m.on_answer(3, 9, asks[0].nonce, 0.0, now) == []       # about a node not being asked about
    assert m.stale_answers == 3 and m.state(X) is State.ASKING


def test_a_group_of_two_skips_the_ask_stage() -> None:
    m = monitor(members=(1, 5))
    _, out = ticks(m, 1.0, PARAMS.misses + PARAMS.probes + 1)
    assert not [o for o in out if isinstance(o, Send) and o.kind == "ask"]
    assert [v for v in out if isinstance(v, Verdict)] == [Verdict("suspected", X), Verdict("dead", X),
                                                         Verdict("shutdown", ME)]


def test_when_every_other_node_falls_silent_at_once_nobody_is_declared_dead() -> None:
    """Our own link down looks like this: no one to confirm, so unreachable, and no shutdown."""
    m = monitor()
    _, out = ticks(m, 1.0, PARAMS.misses + PARAMS.probes + 1)
    verdicts = [v for v in out if isinstance(v, Verdict)]
    assert {v.kind for v in verdicts} == {"suspected", "unreachable"}
    assert all(m.state(n) is State.UNREACHABLE for n in (3, 5, 7, 9))


def test_an_excluded_node_stays_watched_until_its_verdict() -> None:
    m = monitor()
    m.on_view((1, 3, 7, 9), (), (), 0.5)   # sgcs excluded 5 (failed, not left)
    now, asks = to_asking(m)
    assert sorted(a.to for a in asks) == [3, 7, 9]
    out = [v for a in asks for v in m.on_answer(a.to, X, a.nonce, math.inf, now)]
    assert out == [Verdict("dead", X)]
    m.on_view((1, 7, 9), (), (3,), now)  # a planned leave ends the watch at once
    assert m.state(3) is None


def test_a_dead_node_heard_again_or_back_in_a_view_is_alive() -> None:
    m = monitor(members=(1, 5))
    ticks(m, 1.0, 8)
    assert m.state(X) is State.DEAD
    assert m.heard(X, 20.0) == [Verdict("alive", X)]
    ticks(m, 21.0, 8)
    assert m.state(X) is State.DEAD
    assert m.on_view((1, 5), (5,), (), 30.0) == [Verdict("alive", X)]
    assert m.state(X) is State.ALIVE


# ---------------------------------------------------------------- node shutdown

def test_the_last_survivor_sends_node_shutdown_once() -> None:
    m = monitor(members=(1, 3, 5))
    now, asks = to_asking(m, 5)            # 5 dies; 3 confirms it
    assert [v for a in asks for v in m.on_answer(a.to, 5, a.nonce, math.inf, now)] == [Verdict("dead", 5)]
    now, out = ticks(m, now, PARAMS.misses + PARAMS.probes + 2)  # then 3 dies: a network of two now
    assert [v for v in out if isinstance(v, Verdict)] == [Verdict("suspected", 3), Verdict("dead", 3),
                                                         Verdict("shutdown", ME)]
    _, out = ticks(m, now, 10)
    assert not out


def test_no_shutdown_while_a_node_is_unreachable() -> None:
    m = monitor(members=(1, 3, 5))
    now, asks = to_asking(m, 5)
    now, out = ticks(m, now + PARAMS.ask_timeout, 1, heard=(3,))  # 3 never answers: 5 unreachable
    assert Verdict("unreachable", 5) in out
    now, out = ticks(m, now, PARAMS.misses + PARAMS.probes + 2)
    verdicts = [v for v in out if isinstance(v, Verdict)]
    assert Verdict("shutdown", ME) not in verdicts and m.state(5) is not State.DEAD


# ---------------------------------------------------------------- the table, the settings, the wire

def test_every_transition_row_leads_to_a_state_with_an_event() -> None:
    targets = set(TRANSITIONS.values())
    assert targets == set(State)
    assert all(state is not State.DEAD or trigger == "heard" for (state, trigger) in TRANSITIONS)  # dead ends only by life


@pytest.mark.parametrize(("field", "value"), [("interval", 0), ("misses", 0), ("misses", 2.5), ("probes", -1),
                                              ("ask_count", 0), ("ask_timeout", "1")])
def test_bad_settings_are_one_line_usage_errors(field: str, value: object) -> None:
    with pytest.raises(UsageError, match=f"SurvivalParams.{field} must be") as error:
        SurvivalParams(**{field: value})  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_survival_frames_round_trip_and_garbage_is_a_decode_error() -> None:
    assert codes.decode_ask_untrusted(codes.encode_ask(7, 99)) == (7, 99)
    assert codes.decode_ask_reply_untrusted(codes.encode_ask_reply(7, 99, 1.234)) == (7, 99, 1.234)
    assert codes.decode_ask_reply_untrusted(codes.encode_ask_reply(7, 99, math.inf)) == (7, 99, math.inf)
    assert codes.decode_maintenance_untrusted(codes.encode_maintenance(True)) is True
    for decode, data in ((codes.decode_ask_untrusted, b"x"), (codes.decode_ask_reply_untrusted, b"\x00" * 5),
                         (codes.decode_maintenance_untrusted, b"\x02")):
        with pytest.raises(DecodeError):
            decode(data)


# ---------------------------------------------------------------- real modules on loopback

SECRET = b"handles survival test secret"
WAIT = 20.0
FAST = SurvivalParams(interval=0.1, misses=4, probes=3, ask_timeout=0.5)


async def until(predicate: Any, what: str) -> None:
    with trio.fail_after(WAIT):
        while not predicate():
            await trio.sleep(0.01)


async def next_event(handle: Any, kind: str, node: int) -> NodeEvent:
    with trio.fail_after(WAIT):
        while True:
            event = await handle.receive()
            if isinstance(event, NodeEvent) and (event.kind, event.node) == (kind, node):
                return event


async def test_maintenance_is_seen_within_a_second_restricts_access_and_lifts() -> None:
    net = private_multicast(beacon_interval=0.1)
    cfg = {"secret": SECRET, **net}
    async with sgcs.open_node(sgcs.Config(name="a", **cfg)) as na, attach(na, "field", survival=FAST) as a, \
            sgcs.open_node(sgcs.Config(name="b", **cfg)) as nb, attach(nb, "field", survival=FAST) as b:
        await until(lambda: len(a.members) == 2 and len(b.members) == 2, "one view")
        watch = b.watch()
        inbox = a.receive(10)
        started = trio.current_time()
        await a.restrict()
        event = await next_event(watch, "maintenance", a.me)
        assert trio.current_time() - started < 1.0
        assert b.maintenance == frozenset({a.me}) and a.maintenance == frozenset({a.me})
        with pytest.raises(NodeInMaintenance, match=f"node {a.me} is in maintenance") as refused:
            await b.p2p(a.me, 10).send(b"to a")
        assert "\n" not in str(refused.value) and isinstance(refused.value, UsageError)
        with pytest.raises(NodeInMaintenance):
            await b.multicast(10, node=a.me).send(b"targeted at a")
        await b.multicast(10).send(b"to the field")      # the field's multicasts still reach it
        with trio.fail_after(WAIT):
            got = await inbox.receive()
        assert isinstance(got, Data) and got.data == b"to the field"
        await a.lift()
        await next_event(watch, "resumed", a.me)
        assert b.maintenance == frozenset()
        await b.p2p(a.me, 10).send(b"p2p again")
        with trio.fail_after(WAIT):
            got = await inbox.receive()
        assert isinstance(got, Data) and got.data == b"p2p again"
        assert event.at > 0


async def test_a_frame_queued_before_the_maintenance_is_refused_at_its_turn() -> None:
    net = private_multicast(beacon_interval=0.1)
    cfg = {"secret": SECRET, **net}
    async with sgcs.open_node(sgcs.Config(name="a", **cfg)) as na, attach(na, "field", survival=FAST) as a, \
            sgcs.open_node(sgcs.Config(name="b", **cfg)) as nb, attach(nb, "field", survival=FAST) as b:
        await until(lambda: len(a.members) == 2 and len(b.members) == 2, "one view")
        await a.restrict()
        await until(lambda: a.me in b.maintenance, "b to learn of it")
        b._maintenance.discard(a.me)            # b has not learnt it yet when it queues the frame...
        handle = b.p2p(a.me, 10)
        b._maintenance.add(a.me)                # ...and has by the frame's turn
        b._heap.append((0, 0, codes.encode_frame(10, b"late", target=a.me), a.me, a.me))
        b._work.set()
        await until(lambda: b.statistics.refused_maintenance == 1, "the queued frame to be refused")
        with pytest.raises(NodeInMaintenance):
            await handle.send(b"now refused at once")


PEER = textwrap.dedent("""
    import sys, trio, sgcs
    from sgcs.services.handles import SurvivalParams, attach
    async def main():
        config = sgcs.Config(name="peer", secret=sys.argv[1].encode(), multicast_group=sys.argv[2],
                             multicast_port=int(sys.argv[3]), beacon_interval=0.1)
        async with sgcs.open_node(config) as node, attach(node, "field", survival=SurvivalParams(
                interval=0.1, misses=4, probes=3, ask_timeout=0.5)) as module:
            print(module.me, flush=True)
            await trio.sleep_forever()
    trio.run(main)
""")


@pytest.mark.integration
async def test_a_killed_peer_is_dead_and_the_survivor_sends_node_shutdown() -> None:
    """ADS-4 and ADS-5: a network of two, the peer killed with SIGKILL: dead
    after stages 1 and 2 (stage 3 skipped), then "node shutdown" about ourselves."""
    net = private_multicast(beacon_interval=0.1)
    root = Path(__file__).resolve().parents[2]
    peer = subprocess.Popen([sys.executable, "-c", PEER, SECRET.decode(), net["multicast_group"],
                             str(net["multicast_port"])], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(root)))
    try:
        async with sgcs.open_node(sgcs.Config(name="survivor", secret=SECRET, **net)) as node, \
                attach(node, "field", survival=FAST) as module:
            watch = module.watch()
            assert peer.stdout is not None
            peer_id = int(await trio.to_thread.run_sync(peer.stdout.readline))
            await until(lambda: peer_id in module.members, "the peer to join")
            os.kill(peer.pid, signal.SIGKILL)
            killed = trio.current_time()
            seen: list[str] = []
            with trio.fail_after(WAIT):
                while "shutdown" not in seen:
                    event = await watch.receive()
                    if isinstance(event, NodeEvent) and event.node in (peer_id, module.me):
                        seen.append(event.kind)
            assert "dead" in seen and seen.index("dead") < seen.index("shutdown")
            assert "busy" not in seen and "unreachable" not in seen
            assert trio.current_time() - killed < FAST.detection_bound + 1.0
            assert module.survival_state(peer_id) == "dead"
    finally:
        peer.kill()
        peer.wait()


# ---------------------------------------------------------------- real processes on network namespaces

def _namespaces_unavailable() -> str | None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import netns
    return netns.unavailable(tc=True)


@pytest.mark.integration
def test_a_link_cut_between_two_nodes_only_makes_the_peer_busy_never_dead() -> None:
    """ADS-2: the link between the first and the last of four hosts is cut
    (tc on the bridge), the rest of the network works. Each end misses the
    other's signals and probes, asks its neighbours, hears that they still
    hear it: busy. Neither end reports it dead; before the survival signals,
    the handles reported nothing at all here (sgcs's own gossip still carries
    the peer's heartbeat round the cut)."""
    problem = _namespaces_unavailable()
    if problem:
        pytest.skip(problem)
    import argparse

    import handles_table2 as bench
    args = argparse.Namespace(interval=0.2, ask_timeout=0.6, beacon=0.2)
    with bench.netns.hosts(4) as hosts:
        field = bench.Field(hosts, args)
        try:
            for host in range(4):
                field.start(host)
            field.agreed(4)
            first, last = field.procs[0], field.procs[3]
            cut = time.time()
            bench.cut_link(hosts, 0, 3)
            bound = SurvivalParams(interval=0.2, ask_timeout=0.6).detection_bound
            bench.wait_for(lambda: first.first(("busy",), last.me, cut) is not None
                           and last.first(("busy",), first.me, cut) is not None, 4 * bound + 10, "busy at both ends")
            time.sleep(2 * bound)  # and it stays so: asked again, busy again, never dead
            for end, other in ((first, last), (last, first)):
                assert end.first(("busy",), other.me, cut) - cut < 2 * bound + 2  # type: ignore[operator]
                assert end.first(("dead", "unreachable"), other.me, cut) is None
            for middle in (field.procs[1], field.procs[2]):
                assert middle.first(("suspected", "dead"), first.me, cut) is None
                assert middle.first(("suspected", "dead"), last.me, cut) is None
        finally:
            field.close()
