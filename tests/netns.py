"""Hosts on one bridge, made of Linux network namespaces, for real-process tests.

``hosts(count)`` creates, for the test that enters it, ``count`` host
namespaces named ``sgcs-<pid>-a``, ``-b``, ``-c``, ... (three by default, at
most 26) and ``sgcs-<pid>-br`` (the switch): a bridge ``br0`` in the switch
namespace, and per host ``i`` a veth pair with its host end ``eth0`` (address
``10.213.0.<i+1>``/24, a route for 224.0.0.0/4) and its switch end ``p<i>``
on the bridge (``Hosts.port(i)``: where ``benchmarks/nemesis.py`` filters
what reaches host ``i``). Everything lives in namespaces the test created:
the machine's own interfaces, routes and
addresses are untouched, and nothing can leave the bridge (the project's
network rule). Leaving the context kills whatever still runs in the
namespaces (only processes the test started can be there) and deletes them,
which also deletes the bridge and the veth pairs, whether the test passed or
failed.

The bridge floods multicast to every port (IGMP snooping off, so no querier
is needed); ``Hosts.block_multicast()`` stops it from forwarding multicast
at all (unicast, ARP and broadcast still pass), for the peer-list fallback.

Needs root and iproute2 (``ip``, ``bridge``); ``unavailable()`` says why a
test cannot run (``unavailable(tc=True)``: also why the traffic control the
nemesis needs, ``tc`` with clsact, cBPF filters and tbf, cannot be used).
"""

from __future__ import annotations

import os
import shutil
import signal
import string
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

SUBNET = "10.213.0"
"""The hosts' /24: a private range, and private to the bridge anyway."""
HOSTS = string.ascii_lowercase
"""The hosts' name suffixes, one letter each: at most 26 hosts."""
COMMAND_TIMEOUT = 10.0
"""Seconds any one ``ip`` command may take (a failure guard)."""


@dataclass(frozen=True)
class Hosts:
    """The namespaces of one test: ``names[i]`` has address ``addresses[i]`` on its ``eth0``."""

    names: tuple[str, ...]
    addresses: tuple[str, ...]
    switch: str
    """The namespace that holds the bridge."""

    def prefix(self, host: int) -> list[str]:
        """The command prefix that runs a program on host ``host`` (``ip`` execs
        the program itself, so its pid is the program's)."""
        return ["ip", "netns", "exec", self.names[host]]

    def port(self, host: int) -> str:
        """The bridge port (in namespace ``switch``) that leads to host ``host``:
        its egress queue holds every frame the host is about to receive."""
        return f"p{host}"

    def block_multicast(self) -> None:
        """Stop the bridge from forwarding multicast frames between the hosts:
        with snooping off, a port without ``mcast_flood`` receives no multicast."""
        for port in range(len(self.names)):
            _ip("bridge", "-n", self.switch, "link", "set", "dev", f"p{port}", "mcast_flood", "off")

    def multicast_reaches(self, source: int, target: int, group: str, port: int) -> bool:
        """Whether datagrams multicast from host ``source`` to ``group:port``
        reach a receiver on host ``target`` (joined on its ``eth0`` address, as
        an sgcs node joins). The receiver looks only once the sender has sent
        and exited, so the answer does not depend on how fast processes start."""
        receiver = subprocess.Popen(
            [*self.prefix(target), sys.executable, "-c", _RECEIVE, group, str(port), self.addresses[target]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert receiver.stdin is not None and receiver.stdout is not None
            joined = receiver.stdout.readline().strip()
            if joined != "joined":
                raise RuntimeError(f"the multicast probe's receiver on {self.names[target]} said {joined!r}")
            subprocess.run([*self.prefix(source), sys.executable, "-c", _SEND, group, str(port),
                            self.addresses[source]], check=True, timeout=COMMAND_TIMEOUT)
            receiver.stdin.write("look\n")
            receiver.stdin.flush()
            return receiver.stdout.readline().strip() == "received"
        finally:
            receiver.kill()
            receiver.wait()


_RECEIVE = """
import socket, sys
group, port, address = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((group, port))
sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(address))
print("joined", flush=True)
sys.stdin.readline()  # the sender is done: what crossed the bridge is queued by now
sock.settimeout(0.5)
try:
    sock.recv(100)
    print("received", flush=True)
except socket.timeout:
    print("nothing", flush=True)
"""

_SEND = """
import socket, sys, time
group, port, address = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(address))
sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
for _ in range(3):
    sock.sendto(b"probe", (group, port))
    time.sleep(0.05)
"""


def unavailable(tc: bool = False) -> str | None:
    """Why namespaces cannot be made here, or None if they can; with ``tc``,
    also why the traffic control ``benchmarks/nemesis.py`` uses (a clsact
    qdisc, a classic-BPF filter in direct-action mode, a tbf qdisc) cannot be
    set up in one."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    for tool in ("ip", "bridge", *(("tc",) if tc else ())):
        if shutil.which(tool) is None:
            return f"iproute2's `{tool}` is not installed"
    name = f"sgcs-{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        for command in _TC_PROBES if tc else ():
            done = subprocess.run(["tc", "-n", name, *command], capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT)
            if done.returncode != 0:
                return f"`tc {' '.join(command)}` failed: {done.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT)
    return None


_TC_PROBES = (
    ("qdisc", "add", "dev", "lo", "clsact"),
    ("filter", "add", "dev", "lo", "egress", "pref", "1", "protocol", "all", "bpf", "bytecode", "1,6 0 0 4294967295",
     "da"),
    ("qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit", "burst", "4kb", "latency", "100ms"),
)
"""What ``unavailable(tc=True)`` tries on the loopback of a probe namespace."""


@contextmanager
def hosts(count: int = 3) -> Iterator[Hosts]:
    """Create ``count`` (at most 26) hosts on one bridge; delete them on exit."""
    if not 1 <= count <= len(HOSTS):
        raise ValueError(f"hosts: count must be 1 to {len(HOSTS)}, got {count}")
    tag = f"sgcs-{os.getpid()}"
    names = tuple(f"{tag}-{HOSTS[i]}" for i in range(count))
    switch = f"{tag}-br"
    made: list[str] = []
    try:
        for name in (switch, *names):
            _ip("ip", "netns", "add", name)
            made.append(name)
            _ip("ip", "-n", name, "link", "set", "lo", "up")
        _ip("ip", "-n", switch, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", "stp_state", "0")
        _ip("ip", "-n", switch, "link", "set", "br0", "up")
        addresses = []
        for index, name in enumerate(names):
            address = f"{SUBNET}.{index + 1}"
            addresses.append(address)
            _ip("ip", "-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{index}", "netns", switch)
            _ip("ip", "-n", switch, "link", "set", f"p{index}", "master", "br0")
            _ip("ip", "-n", switch, "link", "set", f"p{index}", "up")
            _ip("ip", "-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("ip", "-n", name, "link", "set", "eth0", "up")
            _ip("ip", "-n", name, "route", "add", "224.0.0.0/4", "dev", "eth0")
        yield Hosts(names, tuple(addresses), switch)
    finally:
        for name in reversed(made):
            _kill_inside(name)
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=COMMAND_TIMEOUT)


def leftovers() -> list[str]:
    """Namespaces of this process still present (a test asserts there are none)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT).stdout
    tag = f"sgcs-{os.getpid()}-"
    return [line.split()[0] for line in listed.splitlines() if line.startswith(tag)]


def _kill_inside(name: str) -> None:
    """SIGKILL what still runs in namespace ``name``: only the test's own
    members can be there, and a namespace with a process in it outlives its name."""
    listed = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    for pid in listed.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _ip(*command: str) -> None:
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed ({done.returncode}): {done.stderr.strip()}")

