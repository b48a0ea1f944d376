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

With ``multicast_loop`` the kernel also hands a node its own multicasts,
which the node can only drop, after checking their MAC: a third of the
datagrams a member of three received, and a wake-up each. On Linux the
receiver therefore carries a classic BPF filter (SO_ATTACH_FILTER) that drops
datagrams whose source is this node's own unicast address in the kernel
(``_drop_own_multicasts``); elsewhere, or if the kernel refuses it, the node
drops them as before.

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

Every node also listens on TCP at its unicast address and port number (TCP
and UDP ports are separate spaces), for the other members' host checks: when
one of them suspects this node, it tries a TCP handshake there
(``check_host``). The kernel completes a handshake for a listening socket
even while its process is stopped (SIGSTOP), so a completed one says "the
host is up and the process exists", a refusal (RST) "nobody listens any
more" and silence "the host is gone, or cut off". The driver accepts each
connection and closes it at once: it never reads from it, so nothing that
arrives there is parsed. When that TCP port is taken the node runs without
the listener (one warning); with ``Config.port`` 0 a few UDP ports are tried
first, so that the twin TCP port is free too.

Sockets are created and bound with the blocking stdlib API, then handed to trio.
Setup therefore has no await point, and the in-process port registry below
(which turns a second node on the same port into a clear ``UsageError``) cannot
race with another task opening a node.
"""

from __future__ import annotations

import enum
import errno
import ipaddress
import logging
import select
import socket
import struct
import sys
import threading
from collections.abc import Awaitable, Callable
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
LISTEN_BACKLOG = 128
"""Completed handshakes the kernel queues for the host-check listener. While
the process is stopped nothing accepts them, and one more queued past this
is a SYN dropped, which the checker takes for a vanished host: it must hold
one connection per member checking at once. Every member of a roster view
checks a paused member, so this covers views of up to about 128 (in the
ring form only ceil(log2 N) members check each one)."""
LISTEN_TRIES = 8
"""UDP ports tried when ``Config.port`` is 0 until one's TCP twin is free too."""
HOST_CHECK_ATTEMPTS = 4
"""Handshakes one host check starts, ``HOST_CHECK_SPACING`` apart; the first
that completes answers it. The kernel sends a lost SYN again only after a
second, so a fresh handshake is the way past one lost packet; a live host
that none of them reaches is taken for a vanished one. Measured between two
namespaces on a bridge, each dropping a fraction of its frames at random
(the nemesis's cBPF filter), 300 checks of a live listener each, the share
that found it silent with 1 / 3 / 4 handshakes: 18 % / 0.3 % / 0 at 10 %
loss each way, 36 % / 5 % / 0.7 % at 20 %, 56 % / 15 % / 8 % at 30 %."""
HOST_CHECK_SPACING = 0.1
"""Seconds between two handshakes of one host check: a gossip round, and
hundreds of round trips on a LAN, so one handshake is over before the next."""
HOST_CHECK_LIMIT = 0.35
"""Seconds one host check waits for a handshake in all, from its first: the
last one (started at 0.3 s) still has 50 ms, some fifty times a LAN's round
trip. It adds to the time a vanished host takes to be excluded: suspicion
(0.3 s), this, the neighbours' answers and the view change came to medians
of 0.64 and 0.68 s (max 0.82 s) in two runs of ``benchmarks/silent_host.py``,
against 1.23 s with the whole pull stage (0.9 s) in its place. A path whose round trip exceeds
it always looks silent: there, ``Config.host_check`` should be off."""

_NO_ROUTE = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT, errno.EHOSTDOWN})
"""Handshake errors that are news about the network path (an ICMP error, a
failed ARP): the host did not answer."""


class HostAnswer(enum.Enum):
    """What a host check found."""

    ANSWERED = "answered"  # a handshake completed: the host and the process are there
    REFUSED = "refused"  # RST: the host is there, nobody listens on the port
    SILENT = "silent"  # no handshake completed in time: the host is gone, or cut off
    FAILED = "failed"  # our own error (no file descriptor, no port): no news about it

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
    listener: socket.socket | None = None
    """Non-blocking TCP socket listening on ``address``, for the other members'
    host checks; None when that TCP port was taken."""

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
        if self.listener is not None:
            self.listener.close()
        _release(self.address)


async def open_sockets(config: Config) -> NodeSockets:
    """Bind the node's sockets, or raise UsageError saying what to change."""
    fanout = await _fanout(config)  # resolve peers first: it is the only await
    unicast, listener = _open_unicast_and_listener(config)
    address: Endpoint = unicast.getsockname()
    try:
        multicast = _open_multicast_receiver(config) if config.use_multicast else None
    except BaseException:
        unicast.close()
        if listener is not None:
            listener.close()
        _release(address)
        raise
    if multicast is not None and config.multicast_loop:
        _drop_own_multicasts(multicast, address)
    trio_multicast = None if multicast is None else trio.socket.from_stdlib_socket(multicast)
    fanout = tuple(peer for peer in fanout if peer != address)  # a shared peer list may name us
    _warn_if_unreachable(config, fanout)
    return NodeSockets(
        trio.socket.from_stdlib_socket(unicast), trio_multicast, address, fanout, unicast, multicast,
        error_queue=_enable_error_queue(unicast), listener=listener,
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


def _open_unicast_and_listener(config: Config) -> tuple[socket.socket, socket.socket | None]:
    """The unicast socket, and the host-check listener on its port number
    when that TCP port is free (else None, said once in the log)."""
    tries = 1 if config.port else LISTEN_TRIES
    for attempt in range(tries):
        unicast = _open_unicast(config)
        address: Endpoint = unicast.getsockname()
        listener = _open_listener(config.bind_host, address[1])
        if listener is not None or attempt == tries - 1:
            break
        unicast.close()  # a port of our choosing: try another whose TCP twin is free
        _release(address)
    if listener is None:
        LOG.warning("sgcs: TCP port %d on %s is taken, so this node does not answer the other members' host "
                    "checks: a pause of this process may then be taken for a vanished host "
                    "(Config.host_check, docs/membership.md)", address[1], config.bind_host)
    return unicast, listener


def _open_listener(host: str, port: int) -> socket.socket | None:
    """A non-blocking TCP socket listening on (host, port), or None if it is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if sys.platform != "win32":
            # Closed host-check connections linger in TIME_WAIT on this port: a
            # restarted member must still get it back. (On Windows the option
            # would let two programs share a port; on Linux two listeners cannot.)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        return None
    return sock


def accept_and_close(listener: socket.socket) -> tuple[int, bool]:
    """Accept every connection ``listener`` holds and close each unread.
    Returns how many were accepted, and whether the last accept failed
    otherwise than by an empty queue (no file descriptor left, say), after
    which the caller should pause rather than spin."""
    accepted = 0
    while True:
        try:
            connection, _ = listener.accept()
        except BlockingIOError:
            return accepted, False
        except ConnectionAbortedError:
            continue  # the checker gave up before we came to it
        except OSError:
            return accepted, True
        connection.close()
        accepted += 1


Handshake = Callable[[Endpoint, float], Awaitable[HostAnswer]]
"""One TCP handshake with an address, given until when (``trio.current_time``) to wait."""


async def check_host(address: Endpoint, handshake: Handshake | None = None, *, attempts: int = HOST_CHECK_ATTEMPTS,
                     spacing: float = HOST_CHECK_SPACING, limit: float = HOST_CHECK_LIMIT) -> HostAnswer:
    """Whether a host answers at ``address``: ``attempts`` handshakes,
    ``spacing`` s apart, all ending ``limit`` s after the first started.
    The first completed one answers it (ANSWERED), or the first refusal
    (REFUSED); else SILENT, or FAILED when every handshake failed on our
    side. ``handshake`` is ``tcp_handshake`` but for tests."""
    connect = tcp_handshake if handshake is None else handshake
    until = trio.current_time() + limit
    found: list[HostAnswer] = []

    async def attempt(delay: float, nursery: trio.Nursery) -> None:
        await trio.sleep(delay)
        if trio.current_time() >= until:
            return  # a loaded machine ran us late: the check is over
        answer = await connect(address, until)
        found.append(answer)
        if answer in (HostAnswer.ANSWERED, HostAnswer.REFUSED):
            nursery.cancel_scope.cancel()  # decided: the others need not wait

    # No deadline on the nursery: each handshake looks once more, at ``until``,
    # whether it completed meanwhile, which a cancellation from here would prevent.
    async with trio.open_nursery() as nursery:
        for i in range(attempts):
            nursery.start_soon(attempt, i * spacing, nursery)
    return _verdict(found)


def _verdict(found: list[HostAnswer]) -> HostAnswer:
    for decisive in (HostAnswer.ANSWERED, HostAnswer.REFUSED):
        if decisive in found:
            return decisive
    if found and all(answer is HostAnswer.FAILED for answer in found):
        return HostAnswer.FAILED
    return HostAnswer.SILENT


async def tcp_handshake(address: Endpoint, until: float) -> HostAnswer:
    """Start a TCP connection to ``address`` and wait for the handshake
    until ``until``; close it at once either way (nothing is ever sent)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        code = sock.connect_ex(address)
        if code in (errno.EINPROGRESS, errno.EWOULDBLOCK):
            with trio.move_on_at(until):
                await trio.lowlevel.wait_writable(sock)
            if not _finished(sock):
                return HostAnswer.SILENT
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        return _answer_of(code)
    except OSError as exc:  # the socket itself: no file descriptor, no port
        return _answer_of(exc.errno or -1)
    finally:
        sock.close()


def _finished(sock: socket.socket) -> bool:
    """The handshake ended (completed or failed), looked at without waiting:
    a loaded machine may run us after the deadline although the answer came
    in time, and that answer must count."""
    if hasattr(select, "poll"):  # select() fails above descriptor 1023
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        return bool(poller.poll(0))
    _, writable, _ = select.select([], [sock], [], 0)
    return bool(writable)


def _answer_of(code: int) -> HostAnswer:
    if code in (0, errno.EISCONN, errno.ECONNRESET):
        return HostAnswer.ANSWERED  # reset after it completed: someone was there
    if code == errno.ECONNREFUSED:
        return HostAnswer.REFUSED
    return HostAnswer.SILENT if code in _NO_ROUTE else HostAnswer.FAILED


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


SO_ATTACH_FILTER = 26
"""Linux's socket option for a classic BPF filter (``socket`` does not name it)."""
_BPF = struct.Struct("HBBI")  # struct sock_filter: code, jump if true, jump if false, k
_BPF_PROGRAM = struct.Struct("HxxxxxxQ")  # struct sock_fprog on 64-bit Linux: length, then a pointer


def _drop_own_multicasts(sock: socket.socket, own: Endpoint) -> bool:
    """Attach a filter that drops datagrams sent from ``own`` (host, port) in
    the kernel. A UDP socket's filter sees the UDP header at offset 0 and the
    IP header at SKF_NET_OFF. Returns False where that is not possible."""
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return False
    import ctypes  # only here: the one place a pointer is handed to the kernel

    host = struct.unpack("!I", socket.inet_aton(own[0]))[0]
    program = [
        (0x28, 0, 0, 0),  # ldh [0]: the UDP source port
        (0x15, 0, 3, own[1]),  # jeq our port: go on; else accept
        (0x20, 0, 0, 0xFFF00000 + 12),  # ld [SKF_NET_OFF + 12]: the IPv4 source address
        (0x15, 0, 1, host),  # jeq our address: drop; else accept
        (0x06, 0, 0, 0),  # ret 0: drop
        (0x06, 0, 0, 0xFFFFFFFF),  # ret all: accept
    ]
    code = ctypes.create_string_buffer(b"".join(_BPF.pack(*insn) for insn in program))
    try:  # the kernel copies the program: the buffer need not outlive the call
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, _BPF_PROGRAM.pack(len(program), ctypes.addressof(code)))
    except OSError:
        return False
    return True


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
