"""The trio driver's sockets: one unicast socket per node, one multicast receiver.

Theory of operation
-------------------
Every node owns one UDP socket bound to ``(Config.bind_host, Config.port)``.
It carries all outgoing traffic, multicast included, so that every datagram's
source address is the sender's unicast address: receivers learn where to reply
from ``recvfrom`` alone, and the sans-I/O node never needs an address book.

With ``Config.use_multicast`` a second socket receives the deployment's IP
multicast traffic. It is bound to ``(multicast_group, multicast_port)`` with
SO_REUSEADDR and SO_REUSEPORT, so that several processes (and several nodes in
one process) on a host share the port and the kernel hands each of them a copy
of every multicast datagram. Binding to the group address rather than to
0.0.0.0 keeps unicast traffic and other groups on the same port out of it. The
membership (IP_ADD_MEMBERSHIP) and the sending interface (IP_MULTICAST_IF) are
both ``bind_host``, so a multi-homed host picks its interface by configuration.

Without multicast, a ``Multicast`` action is sent once to each ``Config.peers``
entry instead; ``NodeSockets.fanout`` hides the difference from the driver.

Both sockets ask for large kernel buffers (``SOCKET_BUFFER``). With the
default (about 200 KiB, some 90 datagrams of 1 KB once the kernel's per-packet
overhead is counted) a receiver that loses the CPU for a few milliseconds
overflows, and every datagram lost there costs a NACK and a retransmission.
The kernel caps the request at ``net.core.rmem_max`` / ``wmem_max`` silently;
JGroups asks for 20-25 MB for the same reason.

On Linux the unicast socket also sets IP_RECVERR. Without it the kernel
swallows the ICMP "port unreachable" that a datagram to a closed port earns,
and that signal is the quickest evidence there is that a member crashed: its
process is gone and its port closed. With it, each refusal is queued on the
socket's error queue, which the driver reads (``read_refusals``) and hands to
the node. It also makes the socket report ECONNREFUSED on the next send or
receive, and the driver has to expect that (see the driver's docstring).
Elsewhere the option is skipped, and crashes are found by timeouts alone.

Sockets are created and bound with the blocking stdlib API, then handed to trio.
Setup therefore has no await point, and the in-process port registry below
(which turns a second node on the same port into a clear ``UsageError``) cannot
race with another task opening a node.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import struct
import sys
import threading
from dataclasses import dataclass

import trio

from ..config import Config
from ..errors import UsageError

Endpoint = tuple[str, int]
LOG = logging.getLogger("sgcs")
WILDCARD = "0.0.0.0"
SOCKET_BUFFER = 8 * 1024 * 1024
"""Bytes asked for SO_RCVBUF and SO_SNDBUF; the kernel grants at most its
net.core.rmem_max / wmem_max."""

IP_RECVERR: int | None = getattr(socket, "IP_RECVERR", 11 if sys.platform.startswith("linux") else None)
"""The Linux option that queues ICMP errors on an unconnected UDP socket
(Python's socket module does not export it)."""
_EXTENDED_ERR = struct.Struct("=IBBBBII")
"""``struct sock_extended_err``: ee_errno, ee_origin, ee_type, ee_code, ee_pad,
ee_info, ee_data; the offender's sockaddr follows it."""
ERROR_QUEUE_BATCH = 64
"""Error reports read at most per ``read_refusals`` call."""

# (host, port) of every unicast socket an sgcs node of this process holds. A
# lock, because separate trio.run() calls in separate threads share it.
_claimed: set[Endpoint] = set()
_claimed_lock = threading.Lock()


@dataclass(slots=True)
class NodeSockets:
    """The sockets of one node and where its multicasts go."""

    unicast: trio.socket.SocketType
    multicast: trio.socket.SocketType | None
    address: Endpoint
    """The unicast socket's bound address (the real port when Config.port is 0)."""
    fanout: tuple[Endpoint, ...]
    """Destinations of one Multicast action: the group address, or every peer."""
    raw_unicast: socket.socket
    """The stdlib socket under ``unicast`` (non-blocking): the driver's fast
    path sends and drains with plain calls, and awaits trio only to wait."""
    raw_multicast: socket.socket | None = None
    error_queue: bool = False
    """IP_RECVERR is set on ``raw_unicast``: refusals can be read from its error queue."""

    @property
    def receivers(self) -> tuple[trio.socket.SocketType, ...]:
        return (self.unicast,) if self.multicast is None else (self.unicast, self.multicast)

    @property
    def raw_receivers(self) -> tuple[socket.socket, ...]:
        """The stdlib sockets under ``receivers``, in the same order."""
        return (self.raw_unicast,) if self.raw_multicast is None else (self.raw_unicast, self.raw_multicast)

    def close(self) -> None:
        for sock in self.receivers:
            sock.close()
        _release(self.address)


async def open_sockets(config: Config) -> NodeSockets:
    """Bind the node's sockets, or raise UsageError saying what to change."""
    fanout = await _fanout(config)  # resolve peers first: it is the only await
    unicast = _open_unicast(config)
    address: Endpoint = unicast.getsockname()
    try:
        multicast = _open_multicast_receiver(config) if config.use_multicast else None
    except BaseException:
        unicast.close()
        _release(address)
        raise
    trio_multicast = None if multicast is None else trio.socket.from_stdlib_socket(multicast)
    fanout = tuple(peer for peer in fanout if peer != address)  # a shared peer list may name us
    _warn_if_unreachable(config, fanout)
    return NodeSockets(
        trio.socket.from_stdlib_socket(unicast), trio_multicast, address, fanout, unicast, multicast,
        error_queue=_enable_error_queue(unicast),
    )


def _warn_if_unreachable(config: Config, fanout: tuple[Endpoint, ...]) -> None:
    """A socket bound to loopback cannot reach another machine: say so once
    (the multi-host set-up that silently never meets)."""
    if config.use_multicast or not ipaddress.IPv4Address(config.bind_host).is_loopback:
        return
    remote = [f"{host}:{port}" for host, port in fanout if not ipaddress.IPv4Address(host).is_loopback]
    if remote:
        LOG.warning("sgcs: Config.bind_host %s is a loopback address, so peers %s on other machines are never "
                    "reached; bind to this machine's address on their network (docs/multi-host.md)",
                    config.bind_host, ", ".join(remote[:3]) + (" ..." if len(remote) > 3 else ""))


def _open_unicast(config: Config) -> socket.socket:
    host, port = config.bind_host, config.port
    if port:
        _claim((host, port))  # reserve before bind, so the message names the real culprit
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        _enlarge_buffers(sock)
        # No SO_REUSEADDR here: a second bind to this port must fail, not share it.
        sock.bind((host, port))
        if config.use_multicast:
            _set_multicast_sender_options(sock, config)
    except OSError as exc:
        sock.close()
        if port:
            _release((host, port))
        raise UsageError(_bind_error(exc, host, port)) from None
    if not port:
        _claim(sock.getsockname())
    return sock


def _enlarge_buffers(sock: socket.socket) -> None:
    """Ask for SOCKET_BUFFER bytes each way; a refusal only costs throughput."""
    for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
        except OSError:
            pass


def _enable_error_queue(sock: socket.socket) -> bool:
    """Ask for ICMP errors on ``sock``'s error queue (Linux); False where the
    platform has no such option, which only costs the quick crash signal."""
    if IP_RECVERR is None or not hasattr(socket, "MSG_ERRQUEUE"):
        return False
    try:
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
    except OSError:
        return False
    return True


def read_refusals(sock: socket.socket) -> tuple[list[Endpoint], int]:
    """Empty up to ERROR_QUEUE_BATCH reports from ``sock``'s error queue.

    Returns the destinations of the datagrams refused with ICMP "port
    unreachable" (ECONNREFUSED), in arrival order, and how many other reports
    (host unreachable, message too big...) were read and set aside: they are
    no evidence that a member's process is gone. Never raises: an empty queue,
    or a read error, ends the batch."""
    refused: list[Endpoint] = []
    others = 0
    for _ in range(ERROR_QUEUE_BATCH):
        try:
            # One byte of the refused datagram is enough: only the address matters.
            _, ancillary, _, destination = sock.recvmsg(1, 256, socket.MSG_ERRQUEUE)
        except OSError:  # BlockingIOError once empty
            break
        if _is_refusal(ancillary) and isinstance(destination, tuple):
            refused.append((str(destination[0]), int(destination[1])))
        else:
            others += 1
    return refused, others


def _is_refusal(ancillary: list[tuple[int, int, bytes]]) -> bool:
    for level, kind, data in ancillary:
        if level == socket.IPPROTO_IP and kind == IP_RECVERR and len(data) >= _EXTENDED_ERR.size:
            return _EXTENDED_ERR.unpack_from(data)[0] == errno.ECONNREFUSED
    return False


def _set_multicast_sender_options(sock: socket.socket, config: Config) -> None:
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(config.bind_host))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, config.multicast_ttl)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, int(config.multicast_loop))


def _open_multicast_receiver(config: Config) -> socket.socket:
    group, port = config.multicast_group, config.multicast_port
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        _enlarge_buffers(sock)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((group, port))
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
            sock.bind(("", port))  # platforms that cannot bind a group address (Windows)
        membership = socket.inet_aton(group) + socket.inet_aton(config.bind_host)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
    except OSError as exc:
        sock.close()
        raise UsageError(_multicast_error(exc, config)) from None
    return sock


async def _fanout(config: Config) -> tuple[Endpoint, ...]:
    if config.use_multicast:
        return ((config.multicast_group, config.multicast_port),)
    return tuple([await _resolve_peer(peer) for peer in config.peers])


async def _resolve_peer(peer: str) -> Endpoint:
    host, _, port = peer.rpartition(":")
    try:
        infos = await trio.socket.getaddrinfo(host, int(port), family=socket.AF_INET, type=socket.SOCK_DGRAM)
    except OSError as exc:
        raise UsageError(f"cannot resolve peer {peer!r} in Config.peers: {exc}") from None
    ip, resolved_port = infos[0][4][:2]
    return (str(ip), int(resolved_port))


def _claim(address: Endpoint) -> None:
    host, port = address
    with _claimed_lock:
        if any(_collide(address, other) for other in _claimed):
            raise UsageError(
                f"port {port} on {host} is already used by another sgcs node in this process; "
                "give each node its own Config.port, or 0 for any free port"
            )
        _claimed.add(address)


def _collide(a: Endpoint, b: Endpoint) -> bool:
    """Two UDP bindings collide when their ports match and so do their hosts,
    or either host is the wildcard (which takes the port on every interface)."""
    return a[1] == b[1] and (a[0] == b[0] or WILDCARD in (a[0], b[0]))


def _release(address: Endpoint) -> None:
    with _claimed_lock:
        _claimed.discard(address)


def _bind_error(exc: OSError, host: str, port: int) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is in use by another program; "
            "choose another Config.port, or 0 for any free port"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"Config.bind_host {host} is not an address of this machine; use one of its interface addresses"
    if exc.errno == errno.EACCES:
        return f"no permission to bind port {port} on {host}; ports below 1024 need privileges"
    return f"cannot bind UDP {host}:{port}: {exc.strerror or exc}"


def _multicast_error(exc: OSError, config: Config) -> str:
    where = f"{config.multicast_group}:{config.multicast_port} on interface {config.bind_host}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"multicast port {config.multicast_port} is held by a program that does not share it; "
            "choose another Config.multicast_port"
        )
    return (
        f"cannot receive IP multicast {where}: {exc.strerror or exc}; check Config.bind_host, "
        "or set use_multicast=False and list the other nodes in Config.peers"
    )
