"""The 5-member total-order run with a kill, on three hosts instead of loopback.

Integration test (real processes, root): ``tests/netns.py`` makes three
network namespaces (hosts a, b, c at 10.213.0.1-3) on one bridge in a
fourth, and the members of ``tests/test_real_traces.py``'s acceptance run
start there with ``ip netns exec``: members 1 and 2 on a, 3 and 4 on b, 5 on
c, each bound to its host's address. The run and its assertions are that
test's (``five_members_with_a_kill``): member 3 is killed with SIGKILL
partway through, the survivors must install a view without it and deliver
everything, and the members' shared trace must show 0 violations of
invariants 1 to 7. It runs twice:

- ``multicast``: the members find each other and multicast by IP multicast
  across the bridge (no peer list: discovery works only if multicast crosses).
- ``peers``: the bridge forwards no multicast at all, and the members run
  with ``use_multicast=False`` and the five ``host:port`` in ``peers``: the
  unicast fallback.

A probe datagram checks, before each run, that multicast does (or does not)
cross the bridge. The namespaces, the bridge and the veth pairs are deleted
after the run, also when it fails. Skipped, with the reason, only where
namespaces cannot be made (not Linux, not root, no iproute2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

import netns
from _net import private_group, free_udp_port
from test_real_traces import MEMBERS, VICTIM, five_members_with_a_kill

HOST_OF = {1: 0, 2: 0, 3: 1, 4: 1, 5: 2}
"""Member id -> host index: 2 + 2 + 1."""
PORT = 47100
"""Member i's unicast port is PORT + i: the namespaces are fresh, so every port is free there."""


@pytest.fixture
def hosts() -> Iterator[netns.Hosts]:
    reason = netns.unavailable()
    if reason is not None:
        pytest.skip(f"cannot create network namespaces here: {reason}")
    with netns.hosts(3) as made:
        yield made
    assert netns.leftovers() == [], "namespaces of this test were left behind"


@pytest.mark.parametrize("transport", ["multicast", "peers"])
def test_five_members_on_three_hosts_total_order_with_a_kill_leave_a_clean_trace(
        hosts: netns.Hosts, transport: str, tmp_path: Path, record_property: Any) -> None:
    assert sorted(HOST_OF) == list(range(1, MEMBERS + 1)) and HOST_OF[VICTIM] != HOST_OF[MEMBERS]
    address = {i: hosts.addresses[host] for i, host in HOST_OF.items()}
    ports = [PORT + i for i in sorted(HOST_OF)]
    settings = {i: [f"bind_host={address[i]}"] for i in HOST_OF}
    if transport == "peers":
        hosts.block_multicast()
        peers = json.dumps([f"{address[i]}:{PORT + i}" for i in sorted(HOST_OF)])
        for i in HOST_OF:
            settings[i] += ["use_multicast=false", f"peers={peers}"]
    group, port = private_group(), free_udp_port()
    crossing = {(a, b): hosts.multicast_reaches(a, b, group, port) for a, b in ((0, 1), (1, 2), (2, 0))}
    assert set(crossing.values()) == {transport == "multicast"}, f"multicast between hosts: {crossing}"

    cluster, events = five_members_with_a_kill(
        tmp_path, record_property, ports=ports, prefix={i: hosts.prefix(HOST_OF[i]) for i in HOST_OF},
        member_settings=settings)

    for node_id, peer in cluster.peers.items():  # each member ran on its host, and the harness signalled it there
        ready = [e for e in peer.events if e.get("event") == "ready"]
        assert ready and ready[0]["address"] == [address[node_id], PORT + node_id], ready
        assert ready[0]["pid"] == peer.process.pid, "ip netns exec did not exec the member"
    views = events[(events["kind"] == "view") & (events["optimistic"] != True)]  # noqa: E712
    installed = [(rows["t"].min(), tuple(sorted(int(m) for m in rows["members"].iloc[0])),
                  tuple(sorted(int(n) for n in set(rows["node"]))))
                 for _, rows in views.groupby("view_id")]
    crash = float(events.loc[events["kind"] == "crash", "t"].iloc[0])
    placed = {hosts.names[h]: [i for i in HOST_OF if HOST_OF[i] == h] for h in range(3)}
    lines = [f"{transport}: members on hosts {placed}; member {VICTIM} killed at {crash:.3f} s; "
             "views (first install s, members, installed by):"]
    lines += [f"  {t:7.3f}  {list(members)}  by {list(nodes)}" for t, members, nodes in sorted(installed)]
    print("\n".join(lines))
    record_property("views", "\n".join(lines))
    everyone = tuple(sorted(HOST_OF))
    survivors = tuple(i for i in everyone if i != VICTIM)
    full = [t for t, members, nodes in installed if members == nodes == everyone]
    assert full, "\n".join(lines)  # the group formed across the three hosts
    after = [t for t, members, nodes in installed if members == nodes == survivors and t > max(full)]
    assert after, "\n".join(lines)  # and then excluded the killed member (not a start-up view of four)


@pytest.mark.parametrize("transport", ["multicast", "peers"])
def test_two_hosts_meet_by_following_the_multi_host_doc(hosts: netns.Hosts, transport: str) -> None:
    """docs/multi-host.md's commands, run as written on two hosts: ``sgcs
    chat room --bind ADDR`` (and, where multicast does not cross, a fixed
    ``--port`` with ``--peers``); each member prints a view of both."""
    secret = subprocess.run([sys.executable, "-m", "sgcs", "keygen"], capture_output=True, text=True,
                            check=True).stdout.strip()
    doc = (Path(__file__).resolve().parent.parent / "docs" / "multi-host.md").read_text()
    assert "sgcs chat room --bind 10.0.0.1 --name ann" in doc and "--port 47100 --peers 10.0.0.2:47100" in doc
    if transport == "peers":
        hosts.block_multicast()
    members = []
    for me, other, name in ((0, 1, "ann"), (1, 0, "bob")):
        command = [sys.executable, "-m", "sgcs", "chat", "room", "--bind", hosts.addresses[me], "--name", name]
        if transport == "peers":
            command += ["--port", "47100", "--peers", f"{hosts.addresses[other]}:47100"]
        members.append(subprocess.Popen([*hosts.prefix(me), *command], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env={**os.environ, "SGCS_SECRET": secret}))
    try:
        seen = [_read_until(member, "view v", "2 members", timeout=20.0) for member in members]
        assert all(any("2 members" in line for line in lines) for lines in seen), seen
    finally:
        for member in members:
            member.kill()
            member.wait()


def _read_until(process: subprocess.Popen[str], *wanted: str, timeout: float) -> list[str]:
    """Lines ``process`` printed until one holds every string of ``wanted`` (or ``timeout``)."""
    seen: list[str] = []
    watchdog = threading.Timer(timeout, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            seen.append(line)
            if all(w in line for w in wanted):
                break
    finally:
        watchdog.cancel()
    return seen
