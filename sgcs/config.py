"""Node configuration: every field has a unit, a default and an allowed range.

A ``Config`` is immutable. Invalid values raise ``UsageError`` naming the field
and its allowed range, so that a typo in a TOML file or a keyword argument is
reported in one line.

``Config`` is the one place where a parameter of the protocol is declared,
with its unit and default: every timing and tuning knob of the layers is a
field here. The layers do not read ``Config`` itself. The node builds one
``sgcs.transport.params.Params`` from it (``Params.of``, in ``Node.__init__``)
and hands that object to the detector, each group's view agreement, view
change, reliable stream and unicast streams. ``Params`` repeats the protocol
fields under the same names, with these defaults, and adds the values derived
from them, each computed in one place (``Params.__post_init__``):

* ``fragment_size``: payload bytes per record, what fits one ``max_datagram``
  with ``fifo_acks`` ACK entries;
* ``takeover_timeout`` and ``cut_timeout``, both ``2 * view_timeout``;
  ``view_repeat_interval = view_timeout / view_repeats``;
  ``reconsider_interval = view_timeout / 20``; ``verdict_wait = view_timeout / 4``
  (see ``view_timeout``);
* ``promise_retry = 3 * ack_interval`` (see ``ack_interval``);
* ``suspect_timeout(N) = suspect_factor * max(suspect_min_rounds,
  ceil(log2 N)) * gossip_interval`` (see ``suspect_factor``).

What stays a constant in the code, and why: caps that bound memory or work
against any peer, or limits of the wire format, which no deployment should
tune and some of which the decoders must agree on (``MAX_PEERS``,
``MAX_GROUPS``, ``MAX_LEFT`` in ``sgcs.node``; ``MAX_REJECTED``, ``MAX_EPOCH``
in ``sgcs.group``; ``SENDER_BUFFER_FACTOR``, ``AGGREGATE_MAX``,
``ACK_MATRIX_MAX`` (the N x N ACK table, 64 x 64 at most), ``MISSING_SCAN``
and ``ORDERED_ACKS`` (no cap: an ordered message lists its causal past) in
``transport.reliable``; ``PROMISES_MAX`` in ``ordering.total``;
``MAX_ATTEMPT`` in ``membership.agreement``; ``ROSTER_CACHE``; the detector's
millisecond clock representation; every ``MAX_*`` of ``sgcs.wire`` and the
replay window of ``sgcs.security``); the record sizes of the wire layout
(``transport.framing``); and the stability gossip's own round counts (a lost
promise clock is sent again every fourth round; a member whose own message
stays unstable asks its predecessors after two cycles of levels; what is known
stable of a retired stream is kept four cycles), which are counted in gossip
rounds and so scale with ``gossip_interval`` already; and the jitter of a
first timer (a NACK, the first gossip round, a beacon: uniform in 0.5 to 1.5
times its interval), a spread, not a duration.
"""

from __future__ import annotations

import os

import dataclasses
import enum
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError


class Order(str, enum.Enum):
    """Delivery order of a group, chosen at join time."""

    FIFO = "fifo"
    CAUSAL = "causal"
    TOTAL = "total"
    SAFE = "safe"

    @classmethod
    def parse(cls, value: "Order | str") -> "Order":
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(o.value for o in cls)
            raise UsageError(f"order {value!r} is not one of: {allowed}") from None


HEARTBEAT_FORMS = ("roster", "pairs", "ring")
PROMISE_MODES = ("auto", "direct", "gossip")
KEY_DERIVATIONS = ("hkdf", "hmac-v1")
SECRET_MIN = 16
"""Bytes of a secret at least: a captured datagram lets anyone test guesses
of the secret offline, at the speed of HMAC."""
MAX_UDP_PAYLOAD = 65_507
MIN_DATAGRAM = 512
MTU_SAFE_DATAGRAM = 1_400
"""Fits a 1,500-byte Ethernet MTU with room for IP, UDP and a tunnel header."""


@dataclass(frozen=True, slots=True)
class Config:
    """Everything a node needs; units are in the field names or comments.

    The protocol fields (``gossip_interval``...) are shared by the real driver
    and the simulator; the network fields only matter to the trio driver.
    """

    name: str = "node"
    """Human-readable name of this node, used in logs and the demo."""
    secret: bytes = field(default=b"", repr=False)
    """Group secret (never shown in a repr); datagrams are authenticated with a key derived from it.
    At least 16 bytes (``SECRET_MIN``); ``sgcs keygen`` prints a random one."""
    key_derivation: str = "hkdf"
    """How keys are derived from the secret: ``hkdf`` (HKDF-SHA256 with a salt
    and a label per key), or ``hmac-v1``, the scheme of sgcs before 0.2, only
    to talk to members that still use it (secrets of 8 bytes allowed). Every
    member of a group must choose the same."""
    encrypt: bool = False
    """Encrypt datagram bodies with AES-256-GCM under keys derived from the
    secret. Every member of a group must choose the same."""
    node_id: int | None = None
    """This node's member id (0 <= id < 2**63). None: drawn at random on open."""

    # -- network (trio driver only) --
    bind_host: str = "127.0.0.1"
    """Interface address for the unicast socket and multicast membership."""
    port: int = 0
    """Unicast UDP port; 0 picks a free one."""
    multicast_group: str = "239.255.71.17"
    """IPv4 multicast address shared by all nodes of a deployment."""
    multicast_port: int = 47017
    multicast_ttl: int = 1
    """Hops a multicast datagram may cross; 1 keeps it on the local link."""
    multicast_loop: bool = True
    """Deliver our multicasts to other processes on this host (needed on loopback)."""
    use_multicast: bool = True
    """False: emulate multicast by unicasting to ``peers`` (networks without it)."""
    peers: tuple[str, ...] = ()
    """``host:port`` of other nodes, for networks without IP multicast."""
    max_datagram: int = 1_400
    """Bytes of a datagram that carries one record or a control message (header,
    body and MAC). Application messages are cut into records that fit it alone,
    and held buffers are counted in such records, so it also sets memory bounds."""
    bundle_size: int = 65_000
    """Bytes of a datagram that bundles several records (batching, as JGroups'
    bundler). The default suits a LAN or loopback, where IP fragments a large
    datagram and the cost per datagram dominates. On a network where
    fragmentation hurts (loss, middleboxes), use the MTU-safe profile
    ``Config.mtu_safe(...)``, which sets it to ``max_datagram``."""
    app_queue: int = 1_024
    """Events buffered per group for the application before the receive loop waits."""

    # -- protocol (both drivers) --
    beacon_interval: float = 1.0
    """Seconds between discovery beacons while a group's members are not given."""
    gossip_interval: float = 0.1
    """Seconds between PSRM digests (with stability gossip) to one hypercube partner."""
    nack_delay: float = 0.01
    """Seconds from detecting a loss to the first NACK (jittered x0.5..1.5), then doubling."""
    nack_backoff_max: float = 1.0
    """Longest wait between two NACKs for the same gap, seconds."""
    ack_interval: float = 0.1
    """In ordered groups, the longest an idle member waits before it multicasts its new ACKs (its promise).
    A message that has waited ``3 * ack_interval`` for one member's promise asks that
    member for a fresh one (``promise_retry``), and again after as long."""
    promise_spacing: float = 0.00025
    """In a view of N members an idle member of an ordered group promises after
    ``min(ack_interval, N * promise_spacing)`` seconds (1 ms at 4 members): each
    member then receives at most about ``1 / promise_spacing`` promises per
    second, whatever N, and a total-order message waits about that long for
    its last promise when members send less often than that."""
    stability_extra_levels: int = 64
    """Stability gossip: levels of the all-reduce whose values changed that a
    member sends each round besides the round's own, lowest first. All (the
    default): a message is stable everywhere after about ceil(log2 N) rounds,
    for up to ceil(log2 N) digests per member per round under load; 1: about
    1.5 ceil(log2 N) rounds for about 2 digests; 0: one digest a round and
    several cycles of ceil(log2 N) rounds (members' rounds are out of step)."""
    promises: str = "auto"
    """How members of a total- or safe-order group promise: ``"direct"``, each
    idle member multicasts a null after it received (latency about
    ``ack_interval`` or less, but O(N) nulls per message, each received by N
    members); ``"gossip"``, the promise clocks ride on the stability
    all-reduce (no datagram of their own; latency about 2 ceil(log2 N)
    ``gossip_interval``); ``"auto"``: direct up to 64 members, gossip above."""
    window_max: int = 4_096
    """Unstable messages (all senders) at which application sends wait."""
    send_delay_min: float = 0.0
    """Seconds between two sends at an empty window."""
    send_delay_scale: float = 0.0
    """Send delay = send_delay_min + send_delay_scale * W / (window_max - W), seconds."""
    max_message: int = 16 * 1024 * 1024
    """Largest application message in bytes; larger ones are fragmented up to this."""
    flush_delay: float = 0.0
    """Seconds a multicast may wait to share a datagram with the next ones (batching)."""
    nack_enabled: bool = True
    """False: repair by gossip only (to measure plain PSRM)."""
    gossip_enabled: bool = True
    """False: repair by NACK only."""
    fifo_acks: int = 4
    """ACK entries a record of a FIFO group carries, at most; the others ride on
    the sender's next records. There they only reveal losses and holders
    (stability is gossiped), and every receiver decodes every one: 10,000
    receivers at scale. Each entry takes up to 20 bytes of the record's
    budget, so a record holds ``max_datagram - 89 - 20 * fifo_acks`` payload
    bytes (1,231 at the defaults). Ordered groups carry all (their causal past)."""
    push_budget: int = 64
    """Records sent at most in answer to one NACK, or pushed to a partner after one
    gossip digest; also the unicast records one retransmission timer resends."""
    nack_max_ranges: int = 16
    """Missing ranges of one sender that one NACK (or gossip pull) asks for (at
    most 64, the decoder's cap); the rest are asked for once these arrive."""
    rto_min: float = 0.05
    """Seconds from sending a unicast to its first retransmission, the
    retransmission timeout; it doubles on each retransmission, and an ACK
    resets it here."""
    rto_max: float = 1.0
    """Longest unicast retransmission timeout, seconds; at least ``rto_min``."""
    reassembly_timeout: float = 60.0
    """Seconds a partially received message (some of its fragments) may wait for
    the rest before it is dropped and counted (``reassembly_timeout``)."""

    # -- membership (both drivers) --
    suspect_factor: float = 1.0
    """c in suspect_timeout = c * max(suspect_min_rounds, ceil(log2 N)) * gossip_interval,
    seconds: how long a member's heartbeat may stand still before it is suspected. At least 1."""
    suspect_min_rounds: int = 3
    """Heartbeat rounds (``gossip_interval`` each) in ``suspect_timeout`` at least.
    ceil(log2 N) rounds is the paper's minimum, the age of the freshest news
    with nothing lost; in small groups that is one or two rounds, which any
    scheduling jitter overruns (a group of two suspected its live peer about
    once a second with no floor)."""
    probe_count: int = 3
    """Direct probes (pull stage) sent to a suspect before its neighbours are asked."""
    probe_interval: float = 0.3
    """Seconds between two probes; the pull stage lasts probe_count * probe_interval."""
    ask_count: int = 3
    """Neighbours asked (ask stage) whether they heard from a suspect; 0 in a group of two."""
    ask_timeout: float = 0.5
    """Seconds the ask stage waits for neighbours before the suspect is declared failed."""
    host_check: bool = True
    """When a member becomes suspect, the trio driver tries a TCP handshake
    with its address (the port number of its UDP port). A host that completes
    it runs the member's process, perhaps paused: the pull stage goes on. A
    refusal (nobody listens) or no answer within 0.35 s ends the pull stage
    at once, as an ICMP "port unreachable" does, so a host that vanished is
    excluded in about 0.65 s instead of 1.2 s. Every trio-driven node listens
    on that TCP port, whatever this says, and closes each connection unread.
    False: this node checks nobody (the simulator never checks); choose it
    where that TCP port is blocked, round trips exceed about 0.3 s, or some
    members run an sgcs without host checks (they do not listen)."""
    heartbeat: str = "roster"
    """How members watch each other. ``"roster"`` and ``"pairs"``: everyone
    watches everyone, and a heartbeat carries the whole table, in ``"roster"``
    form 2 bytes a member in the order of the sorted member list (merged by
    members that watch the same list), in ``"pairs"`` form 10 bytes a member as
    (id, counter), merged whatever the receiver watches. ``"ring"``: each member
    is watched by the ceil(log2 N) members after it in the sorted list, a
    heartbeat carries only the sender's neighbourhood (O(log N) bytes), and a
    watcher that declares a member failed tells the view's lowest members, who
    coordinate (``sgcs.membership.detector``). For views of thousands."""
    view_timeout: float = 1.0
    """Seconds each phase of a view change (flush replies, commit) may take before
    the coordinator retries without the members that did not answer. Derived
    from it: a member that flushed waits ``2 * view_timeout`` for the commit
    before the lowest live member of the proposal takes over
    (``takeover_timeout``); a member gives up completing a commit's cut after
    ``2 * view_timeout`` and starts again alone (``cut_timeout``); a
    coordinator defers a change up to ``view_timeout / 4`` while suspects are
    still being confirmed (``verdict_wait``), and looks again every
    ``view_timeout / 20`` while it defers or installs (``reconsider_interval``)."""
    view_repeats: int = 5
    """Times per ``view_timeout`` the coordinator repeats its PROPOSE or COMMIT to
    the members that have not answered (every ``view_timeout / view_repeats``
    seconds)."""
    repeat_unicast_max: int = 16
    """Members that have not answered a PROPOSE or COMMIT get a repetition each by
    unicast while they are at most this many; more share one multicast."""
    leave_copies: int = 2
    """Times a graceful leave is multicast (no answer is awaited). If every copy
    is lost, the others find the leaver silent to their probes and exclude it
    as failed."""
    optimistic: bool = True
    """Senders keep sending during a view change (optimistic virtual synchrony).
    False: sends wait (WouldBlock) from the flush until the new view is installed."""
    max_members: int = 4_096
    """Members of one group's view; further joiners are refused and counted
    (``members_full``) until a member leaves. A view's member list travels in
    one PROPOSE datagram (at most 65,507 bytes): random 63-bit node ids cost
    about 8 bytes each there, so above about 8,000 members use dense node ids
    (as the simulator does, about 2 bytes each)."""

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def mtu_safe(cls, **fields: Any) -> "Config":
        """The MTU-safe profile: no datagram larger than ``max_datagram`` (1,400
        bytes by default), so IP never fragments one on an Ethernet path."""
        max_datagram = fields.get("max_datagram", MTU_SAFE_DATAGRAM)
        return cls(**{"max_datagram": max_datagram, "bundle_size": max_datagram, **fields})

    @classmethod
    def from_toml(cls, path: str | Path, **overrides: Any) -> "Config":
        """Load fields from a TOML file; keyword arguments override it."""
        try:
            import tomllib  # only here: importing sgcs should not pay for the TOML parser

            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"cannot read config {path}: {exc}") from None
        return cls.from_mapping({**data, **overrides})

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> "Config":
        """Build a Config from plain values (TOML or CLI), with type coercion."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise UsageError(f"unknown config field {key!r}; known: {', '.join(sorted(known))}")
            kwargs[key] = _coerce(key, value, cls.__annotations__[key])
        return cls(**kwargs)


SECRET_ENV = "SGCS_SECRET"
"""The environment variable that holds a group secret (``sgcs keygen`` prints one)."""


def secret_from_env(variable: str = SECRET_ENV) -> bytes:
    """The group secret in ``$SGCS_SECRET`` (its text, as bytes), so that a
    secret never sits in a program's source: ``export SGCS_SECRET=$(sgcs keygen)``
    once, with the same value for every member. A missing or short one is a
    ``UsageError`` that says how to make one."""
    value = os.environ.get(variable, "")
    if len(value.encode()) < SECRET_MIN:
        what = "is not set" if not value else f"has {len(value.encode())} bytes, fewer than {SECRET_MIN}"
        raise UsageError(f"${variable} {what}; run: export {variable}=$(sgcs keygen), "
                         "with the same value for every member")
    return value.encode()


def _coerce(key: str, value: Any, annotation: str) -> Any:
    """Turn TOML-friendly values into the field's type, or explain the mismatch."""
    if annotation == "bytes" and isinstance(value, str):
        return value.encode()
    if annotation.startswith("tuple") and isinstance(value, list):
        return tuple(value)
    if annotation == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# (field, type, minimum, maximum); None means unbounded on that side.
_RANGES: tuple[tuple[str, type | tuple[type, ...], float | None, float | None], ...] = (
    ("port", int, 0, 65_535),
    ("multicast_port", int, 1, 65_535),
    ("multicast_ttl", int, 0, 255),
    ("max_datagram", int, MIN_DATAGRAM, MAX_UDP_PAYLOAD),
    ("bundle_size", int, MIN_DATAGRAM, MAX_UDP_PAYLOAD),
    ("app_queue", int, 1, 1_000_000),
    ("beacon_interval", (int, float), 0.01, 3_600.0),
    ("gossip_interval", (int, float), 0.001, 60.0),
    ("nack_delay", (int, float), 0.0001, 10.0),
    ("nack_backoff_max", (int, float), 0.001, 60.0),
    ("ack_interval", (int, float), 0.001, 60.0),
    ("promise_spacing", (int, float), 0.00001, 60.0),
    ("window_max", int, 16, 1_000_000),
    ("send_delay_min", (int, float), 0.0, 10.0),
    ("send_delay_scale", (int, float), 0.0, 10.0),
    ("max_message", int, 1, 1 << 30),
    ("flush_delay", (int, float), 0.0, 1.0),
    ("suspect_factor", (int, float), 1.0, 1_000.0),
    ("probe_count", int, 1, 100),
    ("probe_interval", (int, float), 0.001, 60.0),
    ("ask_count", int, 0, 64),
    ("ask_timeout", (int, float), 0.001, 60.0),
    ("view_timeout", (int, float), 0.01, 600.0),
    ("reassembly_timeout", (int, float), 0.1, 86_400.0),
    ("max_members", int, 2, 32_000),
    ("stability_extra_levels", int, 0, 64),
    ("fifo_acks", int, 1, 16),
    ("push_budget", int, 1, 4_096),
    ("nack_max_ranges", int, 1, 64),
    ("rto_min", (int, float), 0.001, 60.0),
    ("rto_max", (int, float), 0.001, 600.0),
    ("suspect_min_rounds", int, 1, 64),
    ("view_repeats", int, 1, 100),
    ("repeat_unicast_max", int, 0, 4_096),
    ("leave_copies", int, 1, 16),
)


def _validate(config: Config) -> None:
    for name, kind, low, high in _RANGES:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(value, kind):
            raise UsageError(f"Config.{name} must be a number in [{low}, {high}], got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise UsageError(f"Config.{name} must be in [{low}, {high}], got {value!r}")
    for name in ("encrypt", "multicast_loop", "use_multicast", "nack_enabled", "gossip_enabled", "optimistic",
                 "host_check"):
        if not isinstance(getattr(config, name), bool):
            raise UsageError(f"Config.{name} must be true or false, got {getattr(config, name)!r}")
    if config.rto_max < config.rto_min:
        raise UsageError(f"Config.rto_max ({config.rto_max}) must be at least Config.rto_min ({config.rto_min})")
    if config.bundle_size < config.max_datagram:
        raise UsageError(f"Config.bundle_size ({config.bundle_size}) must be at least Config.max_datagram "
                         f"({config.max_datagram}); for no bundling beyond one datagram set both alike")
    if config.key_derivation not in KEY_DERIVATIONS:
        raise UsageError(f"Config.key_derivation must be one of {', '.join(KEY_DERIVATIONS)}, "
                         f"got {config.key_derivation!r}")
    least = SECRET_MIN if config.key_derivation == "hkdf" else 8
    if not isinstance(config.secret, bytes) or len(config.secret) < least:
        raise UsageError(f"Config.secret must be at least {least} bytes, shared by every member of the group "
                         "(sgcs keygen prints a random one)")
    if config.node_id is not None and not (
        isinstance(config.node_id, int) and 0 <= config.node_id < 2**63
    ):
        raise UsageError(f"Config.node_id must be an int in [0, 2**63), got {config.node_id!r}")
    if not isinstance(config.name, str) or not config.name:
        raise UsageError("Config.name must be a non-empty string")
    if config.promises not in PROMISE_MODES:
        raise UsageError(f"Config.promises must be one of {', '.join(PROMISE_MODES)}, got {config.promises!r}")
    if config.heartbeat not in HEARTBEAT_FORMS:
        raise UsageError(f"Config.heartbeat must be one of {', '.join(HEARTBEAT_FORMS)}, got {config.heartbeat!r}")
    _validate_addresses(config)


def _validate_addresses(config: Config) -> None:
    try:
        group = ipaddress.IPv4Address(config.multicast_group)
        ipaddress.IPv4Address(config.bind_host)
    except (ipaddress.AddressValueError, ValueError) as exc:
        raise UsageError(f"Config address is not an IPv4 address: {exc}") from None
    if not group.is_multicast:
        raise UsageError(f"Config.multicast_group must be in 224.0.0.0/4, got {config.multicast_group}")
    for peer in config.peers:
        host, _, port = str(peer).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65_536:
            raise UsageError(f"Config.peers entries must be 'host:port', got {peer!r}")

