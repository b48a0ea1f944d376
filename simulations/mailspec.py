"""The [mailboxes] table of a scenario: a mailbox workload on simulated post offices.

Theory of operation
-------------------
A scenario with a ``[mailboxes]`` table runs the mailbox service
(``sgcs.services.mailboxes``) on the simulator: the post office (PO) of
domain ``d`` runs on node ``d``, so ``nodes >= domains``; the POs form one
sgcs group, ``mailboxes:<system>``, and the scenario's ``[network]`` and
``[[faults]]`` act on them as on any node. The table says::

    [mailboxes]
    domains = 4                     # post offices, on nodes 0..domains-1 (required)
    mis_per_domain = 5              # MIs created at each PO (their home)
    mails = 2000                    # mails sent in all (required); then moves and crashes stop
    mail_rate = 200.0               # mails per second, all MIs together (Poisson)
    size = 64                       # content bytes per mail
    move_interval = [0.5, 2.0]      # seconds between two moves of one MI (uniform); absent: no moves
    local = 0.1                     # optional: share of mails to an MI running in the sender's domain
    unknown = 0.1                   # optional: share to an MI the sender's PO has no address for
    pull_every = 0.05               # seconds between two pulls of each running MI
    crash_every = 5.0               # optional: a random PO crashes every so many seconds ...
    down_for = 0.5                  # ... and restarts this much later (from its durable records)
    payload_duplicate = 0.2         # optional: a PO payload is unicast twice (below the mail layer,
    payload_reorder = 0.2           #   above sgcs) / held back up to payload_delay_max seconds so
    payload_delay_max = 0.05        #   that later ones overtake it (as service.Faults does)
    system = "wf"                   # the first field of every MI name
    [mailboxes.settings]            # any sgcs.services.mailboxes.Settings field

Without ``local``/``unknown`` each mail's sender and receiver are drawn
uniformly from the running MIs and all MIs; with them, the receiver is drawn
from the class the fractions name (the rest: MIs the sender's PO has an
address for), which is how a run aims at a point (rho1, rho2) of the cost
model (``rho1 = local``, ``rho2 = 1 - local - unknown``).

As everywhere in the scenario format, a bad value raises ``UsageError`` with
one line that starts with the field's path (``mailboxes.domains``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from sgcs.services.mailboxes.messages import MAX_CONTENT
from sgcs.services.mailboxes.postoffice import Settings

from .faultspec import Fault
from .validate import check_keys, fail, integer, number, show

_KEYS = ("domains", "mis_per_domain", "mails", "mail_rate", "size", "move_interval", "local", "unknown",
         "pull_every", "crash_every", "down_for", "payload_duplicate", "payload_reorder", "payload_delay_max",
         "system", "settings")
_SETTINGS_BOUNDS: dict[str, tuple[float, float]] = {
    "retry_initial": (1e-3, 3600.0), "retry_max": (1e-3, 3600.0), "tombstone_lifetime": (0.0, 1e6),
    "outbox_max": (1, 10_000_000), "mailbox_max": (1, 10_000_000), "book_max": (1, 10_000_000),
    "batch_max": (1, 20_000),
}
"""Settings a scenario may set, with their bounds (ints stay ints)."""
MAX_DOMAINS = 1_000
MAX_MIS = 100_000
MAX_MAILS = 10_000_000


@dataclass(frozen=True, slots=True)
class MailboxSpec:
    """A validated [mailboxes] table."""

    domains: int
    mails: int
    mis_per_domain: int = 5
    mail_rate: float = 200.0
    size: int = 64
    move_interval: tuple[float, float] | None = None
    local: float | None = None
    unknown: float | None = None
    pull_every: float = 0.05
    crash_every: float = 0.0
    down_for: float = 0.5
    payload_duplicate: float = 0.0
    payload_reorder: float = 0.0
    payload_delay_max: float = 0.05
    system: str = "wf"
    settings: Settings = field(default_factory=Settings)
    settings_given: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        """The sgcs group of the post offices (as ``service.py`` names it)."""
        return f"mailboxes:{self.system}"

    def to_json(self) -> dict[str, Any]:
        given = asdict(self.settings)
        return {
            "domains": self.domains, "mis_per_domain": self.mis_per_domain, "mails": self.mails,
            "mail_rate": self.mail_rate, "size": self.size,
            **({"move_interval": list(self.move_interval)} if self.move_interval else {}),
            **({"local": self.local} if self.local is not None else {}),
            **({"unknown": self.unknown} if self.unknown is not None else {}),
            "pull_every": self.pull_every, "crash_every": self.crash_every, "down_for": self.down_for,
            "payload_duplicate": self.payload_duplicate, "payload_reorder": self.payload_reorder,
            "payload_delay_max": self.payload_delay_max,
            "system": self.system, "settings": {k: given[k] for k in self.settings_given},
        }


def parse_mailboxes(table: Any, nodes: int, group_names: tuple[str, ...], faults: tuple[Fault, ...]) -> MailboxSpec:
    """Validate the [mailboxes] table against the rest of the scenario."""
    path = "mailboxes"
    check_keys(path, table, _KEYS, required=("domains", "mails"))
    domains = integer(f"{path}.domains", table["domains"], 2, MAX_DOMAINS)
    if domains > nodes:
        fail(f"{path}.domains", f"{domains} post offices run on nodes 0..{domains - 1}, but nodes = {nodes}")
    per_domain = integer(f"{path}.mis_per_domain", table.get("mis_per_domain", 5), 1, MAX_MIS // domains)
    mails = integer(f"{path}.mails", table["mails"], 1, MAX_MAILS)
    rate = number(f"{path}.mail_rate", table.get("mail_rate", 200.0), 0.0, 1e6, low_open=True)
    size = integer(f"{path}.size", table.get("size", 64), 0, MAX_CONTENT)
    moves = _interval(f"{path}.move_interval", table["move_interval"]) if "move_interval" in table else None
    local = number(f"{path}.local", table["local"], 0.0, 1.0) if "local" in table else None
    unknown = number(f"{path}.unknown", table["unknown"], 0.0, 1.0) if "unknown" in table else None
    if (local or 0.0) + (unknown or 0.0) > 1.0:
        fail(f"{path}.unknown", f"local + unknown must be at most 1, got {local} + {unknown}")
    pull_every = number(f"{path}.pull_every", table.get("pull_every", 0.05), 0.0, 60.0, low_open=True)
    crash_every = number(f"{path}.crash_every", table.get("crash_every", 0.0), 0.0, 1e6)
    down_for = number(f"{path}.down_for", table.get("down_for", 0.5), 0.0, 1e6, low_open=True)
    if crash_every and down_for >= crash_every:
        fail(f"{path}.down_for", f"{down_for:g} s must be shorter than crash_every ({crash_every:g} s)")
    duplicate = number(f"{path}.payload_duplicate", table.get("payload_duplicate", 0.0), 0.0, 1.0)
    reorder = number(f"{path}.payload_reorder", table.get("payload_reorder", 0.0), 0.0, 1.0)
    delay_max = number(f"{path}.payload_delay_max", table.get("payload_delay_max", 0.05), 0.0, 60.0)
    system = table.get("system", "wf")
    if not isinstance(system, str) or not system or "|" in system or len(system) > 40:
        fail(f"{path}.system", f"must be a non-empty string of at most 40 characters without '|', got {show(system)}")
    settings, given = _settings(table.get("settings", {}))
    spec = MailboxSpec(domains, mails, per_domain, rate, size, moves, local, unknown, pull_every, crash_every,
                       down_for, duplicate, reorder, delay_max, system, settings, given)
    if spec.group in group_names:
        fail(f"{path}.system", f"the post offices' group {spec.group!r} is also a [[groups]] name; rename one")
    _check_po_faults(faults, domains, bool(crash_every))
    return spec


def _interval(path: str, value: Any) -> tuple[float, float]:
    if not isinstance(value, list) or len(value) != 2:
        fail(path, f"must be [min, max] in seconds, e.g. [0.5, 2.0], got {show(value)}")
    low = number(f"{path}[0]", value[0], 0.0, 1e6, low_open=True)
    high = number(f"{path}[1]", value[1], 0.0, 1e6, low_open=True)
    if high < low:
        fail(path, f"max {high:g} is below min {low:g}")
    return low, high


def _settings(table: Any) -> tuple[Settings, tuple[str, ...]]:
    path = "mailboxes.settings"
    check_keys(path, table, tuple(_SETTINGS_BOUNDS))
    values: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(Settings)}
    for key, value in table.items():
        low, high = _SETTINGS_BOUNDS[key]
        if types[key] in ("int", int):
            values[key] = integer(f"{path}.{key}", value, int(low), int(high))
        else:
            values[key] = number(f"{path}.{key}", value, low, high)
    settings = Settings(**values)
    if settings.retry_max < settings.retry_initial:
        fail(f"{path}.retry_max", f"{settings.retry_max:g} is below retry_initial ({settings.retry_initial:g})")
    return settings, tuple(sorted(values))


def _check_po_faults(faults: tuple[Fault, ...], domains: int, generated: bool) -> None:
    """A post office is up from t=0 (its MIs are created there) and stays in
    its group: join and leave do not apply to it. With crash_every, the
    generator owns the post offices' lives: a hand-written crash could find
    one already crashed, or recover it under the generator's feet."""
    for fault in faults:
        clash = [n for n in fault.nodes if n < domains]
        if not clash:
            continue
        if fault.action in ("join", "leave"):
            fail(f"faults[{fault.index}].{fault.action}",
                 f"node {clash[0]} is a post office, which runs from t=0 and never leaves its group")
        if generated:
            fail(f"faults[{fault.index}].{fault.action}",
                 f"node {clash[0]} is a post office and mailboxes.crash_every crashes post offices; "
                 "use one or the other")
