"""The nemesis harness (``tests/_nemesis.py``, whose command line is
``benchmarks/nemesis.py``): the fault schedule, the tc command lines and the
programs they load (fast), and one short nemesis run on network namespaces
that must leave a clean trace (integration, marked here: the module mixes
both tiers).

The fast tests check the pure parts: a seed gives one schedule, which keeps
to the overlap and minority rules; each fault's ``tc`` command lines; and
the classic-BPF programs those lines load, run by a small interpreter on
hand-made frames (so a wrong jump offset fails here, not as a partition that
leaks). The integration run (60 s, 5 members, every fault kind) draws a fresh
seed and one of the four orders, and prints the replay command.
"""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

import _nemesis as nemesis
import netns
from _nemesis import Fault, Link

HOSTS = netns.Hosts(names=("h-a", "h-b", "h-c"), addresses=("10.213.0.1", "10.213.0.2", "10.213.0.3"), switch="h-br")
"""Namespaces as ``netns.hosts(3)`` names them; nothing is created (the command lines are only built)."""

# ---------------------------------------------------------------------- the schedule


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_a_seed_gives_one_schedule(seed: int) -> None:
    assert nemesis.schedule(seed, 5, 60.0) == nemesis.schedule(seed, 5, 60.0)
    assert nemesis.schedule(seed, 5, 60.0) != nemesis.schedule(seed + 1, 5, 60.0)


@pytest.mark.parametrize("members, overlap", [(3, 1), (5, 2), (5, 3), (7, 4)])
def test_schedules_keep_to_the_overlap_and_minority_rules(members: int, overlap: int) -> None:
    for seed in range(200):
        faults = nemesis.schedule(seed, members, 60.0, overlap=overlap)
        assert faults and [f.index for f in faults] == list(range(len(faults)))
        assert [f.start for f in faults] == sorted(f.start for f in faults)
        for fault in faults:
            assert 0.0 < fault.start < fault.end <= 60.0 and fault.end - fault.start >= nemesis.MIN_FAULT - 1e-6
            active = nemesis.overlap_at(faults, fault.start)
            assert len(active) <= overlap, (seed, fault)
            down = [m for f in active if f.kind in nemesis.PROCESS_KINDS for m in f.members]
            assert len(down) == len(set(down)) <= nemesis.minority(members), (seed, fault)  # nobody twice
            if fault.sides:
                a, b = fault.sides
                assert a and b and sorted(a + b) == list(range(1, members + 1)), (seed, fault)
            else:
                assert fault.members and set(fault.members) <= set(range(1, members + 1))


def test_an_outage_is_one_more_kill_and_nothing_else_takes_its_member_then() -> None:
    for seed in range(100):
        faults = nemesis.schedule(seed, 5, 600.0, overlap=3, outage=(5, 40.0, 560.0))
        last = faults[-1]
        assert (last.kind, last.members, last.start, last.end, last.index) == ("kill", (5,), 40.0, 560.0,
                                                                               len(faults) - 1)
        for fault in faults[:-1]:
            if fault.kind in nemesis.PROCESS_KINDS and fault.end >= 40.0 and fault.start <= 560.0:
                assert fault.members != (5,), (seed, fault)
                others = [f for f in faults[:-1] if f.kind in nemesis.PROCESS_KINDS
                          and f.start <= fault.start < f.end]
                assert len(others) + 1 <= nemesis.minority(5), (seed, fault)  # with the outage: still a minority


def test_only_the_kinds_asked_for_and_no_process_faults_for_two_members() -> None:
    for seed in range(50):
        assert {f.kind for f in nemesis.schedule(seed, 5, 60.0, ["loss", "kill"])} <= {"loss", "kill"}
        assert not nemesis.schedule(seed, 2, 60.0, ["kill", "pause"])  # a minority of 2 is nobody
    assert nemesis.minority(5) == 2 and nemesis.minority(4) == 1 and nemesis.minority(3) == 1


def test_the_replay_command_names_everything_the_schedule_depends_on() -> None:
    args = nemesis.parse(["--members", "4", "--seconds", "30", "--order", "safe", "--seed", "9",
                          "--faults", "loss,kill", "--overlap", "3"])
    again = nemesis.parse(nemesis.replay_command(args).split()[2:])
    assert vars(again) == vars(args)
    assert nemesis.parse([]).seed is not None  # a fresh seed, to print


# ---------------------------------------------------------------------- the tc command lines


def test_loss_is_a_random_drop_filter_on_each_targets_uplink() -> None:
    loss = Fault(3, "loss", 1.0, 2.0, members=(2, 3), params=(("loss", 0.25),))
    apply, remove = nemesis.filter_commands(loss, HOSTS)
    code = nemesis.bytecode(nemesis.drop_randomly(0.25))
    assert code == "4,32 0 0 4294963256,53 1 0 1073741824,6 0 0 2,6 0 0 4294967295"
    assert apply == [["tc", "-n", host, "filter", "add", "dev", "eth0", "egress", "pref", "103", "protocol", "all",
                      "bpf", "bytecode", code, "da"] for host in ("h-b", "h-c")]
    assert remove == [["tc", "-n", host, "filter", "del", "dev", "eth0", "egress", "pref", "103"]
                      for host in ("h-b", "h-c")]


def test_partitions_filter_each_switch_port_by_the_other_sides_sources() -> None:
    apply, remove = nemesis.filter_commands(Fault(0, "partition", 1.0, 2.0, sides=((1,), (2, 3))), HOSTS)
    placed = [(c[2], c[6], c[7], c[-2]) for c in apply]
    assert placed == [
        ("h-br", "p1", "egress", nemesis.bytecode(nemesis.drop_sources(["10.213.0.1"]))),
        ("h-br", "p2", "egress", nemesis.bytecode(nemesis.drop_sources(["10.213.0.1"]))),
        ("h-br", "p0", "egress", nemesis.bytecode(nemesis.drop_sources(["10.213.0.2", "10.213.0.3"]))),
    ]
    assert [c[:9] for c in remove] == [["tc", "-n", "h-br", "filter", "del", "dev", p, "egress", "pref"]
                                       for p in ("p1", "p2", "p0")]
    oneway, _ = nemesis.filter_commands(Fault(1, "oneway", 1.0, 2.0, sides=((1, 2), (3,))), HOSTS)
    both = nemesis.bytecode(nemesis.drop_sources(["10.213.0.1", "10.213.0.2"]))
    assert [(c[6], c[-2]) for c in oneway] == [("p2", both)]  # toward side 2 only


def test_rate_limit_divert_setup_and_heal_command_lines() -> None:
    assert nemesis.rate_command(HOSTS, 2, 64) == ["tc", "-n", "h-b", "qdisc", "replace", "dev", "eth0", "root", "tbf",
                                                  "rate", "64kbit", "burst", "4kb", "latency", "300ms"]
    assert nemesis.rate_command(HOSTS, 2, None) == ["tc", "-n", "h-b", "qdisc", "del", "dev", "eth0", "root"]
    apply, remove = nemesis.divert_commands(HOSTS, 3)
    assert [c[:10] for c in apply] == [
        ["tc", "-n", "h-br", "filter", "add", "dev", "p2", "egress", "pref", "11"],
        ["tc", "-n", "h-br", "filter", "add", "dev", "p2", "ingress", "pref", "10"]]
    assert apply[0][-2] == nemesis.bytecode(nemesis.drop_sources(["10.213.0.3"]))
    assert apply[1][-2] == nemesis.bytecode(nemesis.drop_ipv4())
    assert [c[6:10] for c in remove] == [["p2", "ingress", "pref", "10"], ["p2", "egress", "pref", "11"]]
    assert nemesis.setup_commands(HOSTS)[0] == ["tc", "-n", "h-a", "qdisc", "add", "dev", "eth0", "clsact"]
    assert nemesis.setup_commands(HOSTS)[-1] == ["tc", "-n", "h-br", "qdisc", "add", "dev", "p2", "clsact"]
    healed = nemesis.heal_commands(HOSTS)
    assert ["tc", "-n", "h-c", "qdisc", "del", "dev", "eth0", "root"] in healed
    assert ["tc", "-n", "h-br", "qdisc", "del", "dev", "p1", "clsact"] in healed and len(healed) == 9
    with pytest.raises(ValueError):
        nemesis.filter_commands(Fault(0, "kill", 1.0, 2.0, members=(1,)), HOSTS)


# ---------------------------------------------------------------------- the programs those lines load


def run_cbpf(program: nemesis.Program, frame: bytes, random_word: int = 0) -> int:
    """The few classic-BPF instructions the nemesis uses, run on ``frame``."""
    a, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x06:
            return k
        if code == 0x28:
            a = struct.unpack("!H", frame[k:k + 2])[0]
        elif code == 0x20:
            a = random_word if k == 0xFFFFF000 + 56 else struct.unpack("!I", frame[k:k + 4])[0]
        elif code in (0x15, 0x35):
            taken = a == k if code == 0x15 else a >= k
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1


def frame(source: str, ethertype: int = 0x0800, protocol: int = 17, fragment: int = 0) -> bytes:
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 36, 0, fragment, 1, protocol, 0, socket.inet_aton(source),
                     socket.inet_aton("239.255.1.1"))
    udp = struct.pack("!HHHH", 47100, 47017, 16, 0xBEEF)
    return b"\xff" * 12 + struct.pack("!H", ethertype) + ip + udp + b"datagram"


def test_the_programs_drop_what_they_say() -> None:
    partition = nemesis.drop_sources(["10.213.0.1", "10.213.0.4"])
    assert run_cbpf(partition, frame("10.213.0.1")) == nemesis.SHOT
    assert run_cbpf(partition, frame("10.213.0.4")) == nemesis.SHOT
    assert run_cbpf(partition, frame("10.213.0.2")) == nemesis.UNSPEC  # the next filter decides
    assert run_cbpf(partition, frame("10.213.0.1", ethertype=0x0806)) == nemesis.UNSPEC  # ARP passes
    loss = nemesis.drop_randomly(0.25)
    assert run_cbpf(loss, frame("10.213.0.1"), random_word=2**30 - 1) == nemesis.SHOT
    assert run_cbpf(loss, frame("10.213.0.1"), random_word=2**30) == nemesis.UNSPEC
    divert = nemesis.drop_ipv4()
    assert run_cbpf(divert, frame("10.213.0.1")) == nemesis.SHOT
    assert run_cbpf(divert, frame("10.213.0.1", ethertype=0x86DD)) == nemesis.UNSPEC


def test_the_link_delays_reorders_duplicates_and_clears_udp_checksums() -> None:
    rng = random.Random(1)
    assert Link(delay_ms=100).delays(rng) == [0.1]
    assert all(0.05 <= d <= 0.15 for _ in range(100) for d in Link(delay_ms=100, jitter_ms=50).delays(rng))
    assert Link(delay_ms=40, reorder=1.0).delays(rng) == [0.0]
    assert Link(duplicate=1.0).delays(rng) == [0.0, 0.0]
    faults = [Fault(0, "delay", 0, 1, (1,), params=(("delay_ms", 50), ("jitter_ms", 10))),
              Fault(1, "reorder", 0, 1, (1,), params=(("delay_ms", 20), ("reorder", 0.5)))]
    assert Link.merge(faults) == Link(delay_ms=50, jitter_ms=10, reorder=0.5)
    cleared = nemesis._clear_udp_checksum(frame("10.213.0.1"))
    original = frame("10.213.0.1")
    assert cleared[40:42] == b"\0\0" and cleared[:40] == original[:40] and cleared[42:] == original[42:]
    later_fragment = frame("10.213.0.1", fragment=185)
    assert nemesis._clear_udp_checksum(later_fragment) == later_fragment  # no UDP header there
    assert nemesis._clear_udp_checksum(frame("10.213.0.1", protocol=1)) == frame("10.213.0.1", protocol=1)


# ---------------------------------------------------------------------- a real run


@pytest.mark.integration
def test_a_short_nemesis_run_leaves_a_clean_trace(tmp_path: Path, record_property: Any) -> None:
    reason = netns.unavailable(tc=True)
    if reason is not None:
        pytest.skip(f"cannot run the nemesis here: {reason}")
    order = random.SystemRandom().choice(["fifo", "causal", "total", "safe"])  # each CI run tries one
    args = nemesis.parse(["--members", "5", "--seconds", "60", "--order", order])
    replay = nemesis.replay_command(args)
    print(f"nemesis seed {args.seed}; replay: {replay}")
    record_property("replay", replay)
    lines: list[str] = []
    outcome = nemesis.run(args, tmp_path, say=lines.append)
    report = "\n".join(lines) + "\n" + nemesis.summary(outcome, args)
    print(report)
    assert netns.leftovers() == [], "namespaces of this test were left behind"
    assert outcome.error is None and not outcome.unexpected_exits and not outcome.leftovers, report
    assert outcome.settle_final is not None, report
    assert outcome.violations and not any(outcome.violations.values()), report
    assert outcome.without_outcome == 0 and outcome.sent > 0, report


def test_queue_figures_find_lost_and_twice_consumed_messages_and_unequal_states() -> None:
    import types

    def incarnation(member: int, *events: dict[str, Any]) -> Any:
        return types.SimpleNamespace(member=member, events=list(events))

    def final(digest: str, remaining: list[str]) -> dict[str, Any]:
        return {"event": "queue_state", "applied": 5, "digest": digest, "remaining": remaining}

    one = incarnation(1, {"event": "acked", "msg": "a"}, {"event": "acked", "msg": "b"},
                      {"event": "acked", "msg": "c"}, {"event": "consumed", "msgs": ["a"]}, final("x", ["c"]))
    two = incarnation(2, {"event": "received", "msgs": ["a", "b"]}, {"event": "consumed", "msgs": ["a"]},
                      final("x", ["c"]))
    # 3 received e and f; its ack of them never returned (NotPrimary, then it was killed): received once
    three = incarnation(3, {"event": "acked", "msg": "e"}, {"event": "acked", "msg": "f"},
                        {"event": "received", "msgs": ["e"]}, {"event": "received", "msgs": ["f"]})
    members = types.SimpleNamespace(all=[one, two, three], current={1: one, 2: two}, ids=[1, 2])
    found = nemesis.queue_figures(members)  # type: ignore[arg-type]
    assert (found["acked"], found["lost"], found["consumed_twice"], found["states_equal"]) == (5, ["b"], ["a"], True)
    assert found["ack_uncertain"] == 2, "b's ack returned without it: lost, not uncertain"
    two.events[-1] = final("y", ["c"])
    assert nemesis.queue_figures(members)["states_equal"] is False  # type: ignore[arg-type]
    # g was acknowledged, then every replica restarted (a fresh start): lost with them, counted apart
    fresh = {"event": "rq_settle", "t": 20.0, "view": "v9", "hellos": {"1": [0, 0, "0", []], "2": [0, 0, "0", []]}}
    one.events[1]["t"] = 25.0  # b: acknowledged after the fresh start, so still a loss
    one.events[1:1] = [{"event": "acked", "msg": "g", "t": 10.0}, fresh]
    found = nemesis.queue_figures(members)  # type: ignore[arg-type]
    assert (found["lost"], found["lost_with_every_replica"], found["fresh_starts"]) == (["b"], 1, 1)


def test_unsafe_deliveries_find_a_safe_message_a_member_that_moved_on_never_delivered() -> None:
    import pandas as pd

    from sgcs.sim import checks

    def row(t: float, node: int, kind: str, **fields: Any) -> dict[str, Any]:
        return {"t": t, "node": node, "kind": kind, "group": "g", "sender": None, "seq": None, "order": None,
                "view_id": None, "members": None, "optimistic": False, "dest": None, **fields}

    rows = [row(0.0, n, "view", view_id="v1", members=[1, 2, 3]) for n in (1, 2, 3)]
    rows += [row(1.0, 3, "deliver", sender=3, seq=7, order="safe", view_id="v1"),  # safe, regular part
             row(2.0, 1, "transitional", view_id="v1", members=[1, 2]),
             row(2.0, 2, "transitional", view_id="v1", members=[1, 2]),
             row(2.0, 3, "transitional", view_id="v1", members=[3]),  # left out alone: exempt
             row(2.1, 2, "deliver", sender=3, seq=7, order="safe", view_id="v1")]  # 2 delivers it, 1 does not
    rows += [row(0.0, 4, "view", view_id="v1", members=[1, 2, 3]),  # a change it gave up: alone, exempt
             row(3.0, 4, "view", view_id="v4", members=[4])]
    rows += [row(3.0, n, "view", view_id="v2", members=[1, 2]) for n in (1, 2)]
    rows += [row(3.0, 3, "view", view_id="v3", members=[3])]
    events = pd.DataFrame(rows).astype({"sender": "Int64", "seq": "Int64", "dest": "Int64"})
    found = checks.unsafe_deliveries(events)
    assert [(r.node, r.view_id, r.sender, r.seq) for r in found.itertuples()] == [(1, "v1", 3, 7)]
    # a trace with no transitional row and no safe delivery (a FIFO run) has nothing to report
    fifo = events[events["kind"] != "transitional"].assign(order=None)
    assert checks.unsafe_deliveries(fifo).empty
