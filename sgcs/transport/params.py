"""The protocol's parameters as every layer reads them: one object per node.

Theory of operation
-------------------
``sgcs.Config`` declares every parameter once, with its unit, default and
allowed range, and validates it. The layers read a ``Params`` instead: the
node builds one from its ``Config`` (``Params.of``, in ``Node.__init__``, the
only place outside white-box tests and benchmarks) and hands the same object
to the failure detector and to each group's view agreement, view change,
reliable stream and unicast streams.

A ``Params`` holds the protocol fields of ``Config`` under the same names and
units, with ``Config``'s defaults (read from ``Config``, not written twice),
and the values derived from them, each computed here and nowhere else
(``__post_init__``). Every value is a plain slot, precomputed, since the
transport reads some of them once per record; nothing is a property.

It lives in the transport package because the record size is derived from
the wire layout (``framing``), which is the transport's; the membership
layers import it from here, as they import the transport's records.

White-box tests and benchmarks build one directly with keyword arguments,
which are not validated (a window of 8 records exercises flow control in a
few steps), and may set ``fragment_size`` small to exercise fragmentation.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from .framing import fragment_size as _fragment_size

_DEFAULT: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Config)}
"""``Config``'s defaults by field name: the one place they are written is ``Config``."""


@dataclass(frozen=True, slots=True)
class Params:
    """The protocol fields of ``Config`` (see there for each one's unit and
    meaning) and the values derived from them."""

    # -- transport (sgcs.transport)
    gossip_interval: float = _DEFAULT["gossip_interval"]
    nack_delay: float = _DEFAULT["nack_delay"]
    nack_backoff_max: float = _DEFAULT["nack_backoff_max"]
    nack_max_ranges: int = _DEFAULT["nack_max_ranges"]
    push_budget: int = _DEFAULT["push_budget"]
    ack_interval: float = _DEFAULT["ack_interval"]
    promise_spacing: float = _DEFAULT["promise_spacing"]
    promises: str = _DEFAULT["promises"]
    stability_extra_levels: int = _DEFAULT["stability_extra_levels"]
    fifo_acks: int = _DEFAULT["fifo_acks"]
    window_max: int = _DEFAULT["window_max"]
    send_delay_min: float = _DEFAULT["send_delay_min"]
    send_delay_scale: float = _DEFAULT["send_delay_scale"]
    max_message: int = _DEFAULT["max_message"]
    reassembly_timeout: float = _DEFAULT["reassembly_timeout"]
    flush_delay: float = _DEFAULT["flush_delay"]
    nack_enabled: bool = _DEFAULT["nack_enabled"]
    gossip_enabled: bool = _DEFAULT["gossip_enabled"]
    max_datagram: int = _DEFAULT["max_datagram"]
    bundle_size: int = _DEFAULT["bundle_size"]
    rto_min: float = _DEFAULT["rto_min"]
    rto_max: float = _DEFAULT["rto_max"]
    # -- membership (sgcs.membership) and the node
    beacon_interval: float = _DEFAULT["beacon_interval"]
    suspect_factor: float = _DEFAULT["suspect_factor"]
    suspect_min_rounds: int = _DEFAULT["suspect_min_rounds"]
    probe_count: int = _DEFAULT["probe_count"]
    probe_interval: float = _DEFAULT["probe_interval"]
    ask_count: int = _DEFAULT["ask_count"]
    ask_timeout: float = _DEFAULT["ask_timeout"]
    host_check: bool = _DEFAULT["host_check"]
    heartbeat: str = _DEFAULT["heartbeat"]
    view_timeout: float = _DEFAULT["view_timeout"]
    view_repeats: int = _DEFAULT["view_repeats"]
    repeat_unicast_max: int = _DEFAULT["repeat_unicast_max"]
    optimistic: bool = _DEFAULT["optimistic"]
    max_members: int = _DEFAULT["max_members"]
    leave_copies: int = _DEFAULT["leave_copies"]

    # -- derived (computed in __post_init__ only)
    fragment_size: int = 0
    """Payload bytes per record: what fits one ``max_datagram`` datagram alone
    with ``fifo_acks`` ACK entries (``framing.fragment_size``; 1,231 at the
    defaults). 0, the default, derives it; tests may set it."""
    roster_heartbeats: bool = field(init=False, default=True)
    """Heartbeats carry the table in the roster form (``heartbeat == "roster"``)."""
    ring_heartbeats: bool = field(init=False, default=False)
    """Each member watches only its ring neighbourhood and verdicts are told
    (``heartbeat == "ring"``, ``sgcs.membership.detector``)."""
    view_repeat_interval: float = field(init=False, default=0.0)
    """Seconds between two repetitions of a PROPOSE or COMMIT: ``view_timeout / view_repeats``."""
    takeover_timeout: float = field(init=False, default=0.0)
    """Seconds a member that flushed waits for the commit before the lowest
    live member of the proposal takes over: ``2 * view_timeout``."""
    cut_timeout: float = field(init=False, default=0.0)
    """Seconds a member may take to complete a commit's cut before it gives up
    and starts again alone: ``2 * view_timeout``."""
    reconsider_interval: float = field(init=False, default=0.0)
    """Seconds between two looks of a coordinator that defers a change (while
    suspects are confirmed, or a committed view is installed): ``view_timeout / 20``."""
    verdict_wait: float = field(init=False, default=0.0)
    """Seconds a coordinator defers a change while members of it are still
    suspected, so that one change excludes them all: ``view_timeout / 4``."""
    promise_retry: float = field(init=False, default=0.0)
    """Seconds a message of an ordered group waits for one member's promise
    before that member is asked for a fresh one: ``3 * ack_interval``."""

    def __post_init__(self) -> None:
        # object.__setattr__: the dataclass is frozen. One call per field, by a
        # literal name: compiled (mypyc), a loop over a dict of the values
        # raised TypeError (a bool slot was handed a float).
        set_ = object.__setattr__
        set_(self, "roster_heartbeats", self.heartbeat == "roster")
        set_(self, "ring_heartbeats", self.heartbeat == "ring")
        set_(self, "view_repeat_interval", self.view_timeout / self.view_repeats)
        set_(self, "takeover_timeout", 2 * self.view_timeout)
        set_(self, "cut_timeout", 2 * self.view_timeout)
        set_(self, "reconsider_interval", self.view_timeout / 20)
        set_(self, "verdict_wait", self.view_timeout / 4)
        set_(self, "promise_retry", 3 * self.ack_interval)
        if not self.fragment_size:
            set_(self, "fragment_size", _fragment_size(self.max_datagram, self.fifo_acks))

    @classmethod
    def of(cls, config: Config) -> "Params":
        """The parameters of a node configured by ``config``."""
        return cls(**{name: getattr(config, name) for name in _FROM_CONFIG})

    def suspect_rounds(self, members: int) -> int:
        """Heartbeat rounds without news before a member of a group of
        ``members`` is suspected, before ``suspect_factor``."""
        return max(self.suspect_min_rounds, math.ceil(math.log2(max(2, members))))

    def suspect_timeout(self, members: int) -> float:
        """Seconds without news before a member of a group of ``members`` is
        suspected: ``suspect_factor * max(suspect_min_rounds, ceil(log2 N)) * gossip_interval``."""
        return self.suspect_factor * self.suspect_rounds(members) * self.gossip_interval


_FROM_CONFIG: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Params) if f.init and f.name in _DEFAULT)
"""The fields ``Params.of`` copies from ``Config``: all but the derived ones."""
