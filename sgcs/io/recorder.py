"""Trace schema 1 from real member processes (``open_node(config, trace=DIR)``).

Theory of operation
-------------------
The simulator writes a run's trace from one process; real members are
separate processes that share one run directory, and any of them may be
killed at any moment. So:

* **One time axis.** The first member to open the directory creates
  ``meta.json`` with an ``epoch`` (wall-clock seconds) atomically (written
  aside, then hard-linked into place, which fails if another member won the
  race); every member reads it back and stamps rows with seconds since that
  epoch. Members on one host share the wall clock; a member's own rows use
  the monotonic clock from its open, so they never go backwards.
* **Own files.** Each member names its part files ``part-<node id>-NNNNN``,
  so no two processes write one file and names sort by node, then in write
  order (row order within a node is event order, as the readers expect).
* **Killable.** Every ``FLUSH_EVERY`` seconds the buffered rows become a
  complete Parquet file. A process killed with SIGKILL loses at most its last
  interval of rows, and never leaves a half-written part file behind: part
  files are written under a hidden name and renamed when complete
  (``sgcs.trace``), and readers skip hidden files. The killer records the
  death itself with ``record_crash``, as the simulator records a crash.
* **meta.json** is shared: on close, each member adds itself under a file lock
  (``fcntl.flock``): its id to ``members``, its groups and orders to the
  scenario, and the end of its rows to ``duration``, so ``nodes`` and
  ``duration`` describe the whole run once every member has closed.

``net/`` holds the member's own traffic per one-second bucket by message
type (sent, and received as labelled by the datagram's unauthenticated type
byte: it counts what arrived, garbage included); ``lost_count`` is 0, since a
real member cannot see the network's losses. ``stats/`` samples each group's
occupancy at every bucket boundary, as the simulator does.

A fresh directory per run: a second run into the same directory would append
its rows to the first's, on the first's time axis.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from .._version import __version__
from ..actions import TraceEvent
from ..config import Config
from ..errors import UsageError
from ..trace import SCHEMA_VERSION, EventsWriter, NetCounters, StatsWriter
from ..wire import MsgType

FLUSH_EVERY = 0.5
"""Seconds between two flushes of a member's rows to a new part file."""
NET_BUCKET = 1.0
"""Seconds per ``net`` and ``stats`` bucket (the simulator's default)."""
SOURCE = "real"
"""``meta.json``'s ``scenario.source`` for traces of real processes."""
_LABELS = {t.value: t.label for t in MsgType}


def prefix_of(node: int) -> str:
    return f"{node:019d}-"


class TraceRecorder:
    """One member's writer into a shared run directory; see the module doc."""

    def __init__(self, directory: str | os.PathLike[str], node: int, config: Config) -> None:
        self.directory = Path(directory)
        self.node = node
        meta = open_run(self.directory, config)
        self.epoch = float(meta["epoch"])
        self._offset = time.time() - time.monotonic() - self.epoch  # monotonic -> seconds since the epoch
        prefix = prefix_of(node)
        self._events = EventsWriter(self.directory / "events", prefix, groups_per_part=1)
        self._net = NetCounters(self.directory / "net", 1, (node,), prefix, groups_per_part=1)
        self._stats = StatsWriter(self.directory / "stats", prefix, groups_per_part=1)
        self._bucket = NET_BUCKET * int(self.now() / NET_BUCKET)
        self._orders: dict[str, str] = {}
        self._last = 0.0
        self.closed = False

    def now(self) -> float:
        """Seconds since the run's epoch."""
        return time.monotonic() + self._offset

    def event(self, event: TraceEvent) -> None:
        self._last = t = self.now()
        self._events.add(t, self.node, event)
        if event.order is not None and event.group is not None:
            self._orders.setdefault(event.group, event.order)

    def sent(self, msg_type: MsgType, size: int) -> None:
        self._net.sent(0, msg_type.label, size)

    def received(self, data: bytes) -> None:
        label = _LABELS.get(data[4], "invalid") if len(data) > 4 else "invalid"
        self._net.received(0, label, len(data))

    def flush(self, occupancy: dict[str, tuple[int, int]]) -> None:
        """Write what is buffered; close the net bucket if its time is up, and
        sample ``occupancy`` (group -> (buffered, window)) at its boundary."""
        now = self.now()
        if now >= self._bucket + NET_BUCKET:
            self._net.roll(self._bucket)
            self._bucket = NET_BUCKET * int(now / NET_BUCKET)
            for group, (buffered, window) in occupancy.items():
                self._stats.add(self._bucket, self.node, group, buffered, window)
        self._events.flush()
        self._net.flush()
        self._stats.flush()

    def close(self) -> None:
        """Write the rest and add this member to ``meta.json``. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._events.close()
        self._net.close(self._bucket)
        self._stats.close()
        add_member(self.directory, self.node, max(self._last, self.now()), self._orders)


def open_run(directory: Path, config: Config) -> dict[str, Any]:
    """The run's meta.json, created (with the epoch) if this member is first."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"trace {directory}: exists and is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"trace {directory}: cannot create the directory: {exc.strerror}") from None
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        strangers = any(not p.name.startswith(".") for p in directory.iterdir())  # hidden: other members' work files
        if strangers and not meta_path.exists():  # looked again: another member may have made it meanwhile
            raise UsageError(f"trace {directory}: not empty and not a trace of real members; give a fresh directory")
    if not meta_path.exists():
        aside = directory / f".meta.{os.getpid()}.{os.urandom(6).hex()}.json"  # nodes of one process too
        aside.write_text(json.dumps(_new_meta(config), indent=2) + "\n")
        try:
            os.link(aside, meta_path)  # atomic: exactly one member creates it
        except FileExistsError:
            pass
        finally:
            aside.unlink()
    meta = _read_meta(directory)
    if meta.get("scenario", {}).get("source") != SOURCE or "epoch" not in meta:
        raise UsageError(f"trace {directory}: holds a simulated trace; give a fresh directory for real members")
    return meta


def record_crash(directory: str | os.PathLike[str], node: int, t: float | None = None) -> float:
    """Add a ``crash`` row for ``node`` (killed, so it cannot write one itself);
    returns its time, by default now. The row goes in a part file that sorts
    after the node's own files."""
    directory = Path(directory)
    epoch = float(_read_meta(directory)["epoch"])
    when = time.time() - epoch if t is None else t
    writer = EventsWriter(directory / "events", f"{prefix_of(node)}crash-{time.time_ns()}-", groups_per_part=1)
    writer.add(when, node, TraceEvent("crash"))
    writer.close()
    add_member(directory, node, when, {})
    return when


def add_member(directory: Path, node: int, end: float, orders: dict[str, str]) -> None:
    """Count ``node`` in meta.json's ``members`` and ``nodes``, its groups in
    the scenario, and ``end`` (seconds since the epoch) in ``duration``."""
    with _meta_lock(directory):
        meta = _read_meta(directory)
        members = sorted(set(meta.get("members", [])) | {node})
        groups = {g["name"]: g["order"] for g in meta["scenario"].get("groups", [])}
        groups.update({name: order for name, order in orders.items() if name not in groups})
        meta.update(members=members, nodes=len(members),
                    duration=max(float(meta.get("duration") or 0.0), round(end, 6)))
        meta["scenario"]["groups"] = [{"name": n, "order": o} for n, o in sorted(groups.items())]
        _write_json_atomically(directory / "meta.json", meta)


def _new_meta(config: Config) -> dict[str, Any]:
    protocol = {name: getattr(config, name) for name in ("gossip_interval", "suspect_factor", "view_timeout",
                                                         "window_max", "max_datagram")}
    return {
        "schema": SCHEMA_VERSION, "seed": None, "nodes": None, "duration": None, "epoch": time.time(),
        "scenario": {"source": SOURCE, "protocol": protocol, "groups": []},
        "sgcs_version": __version__, "net_bucket": NET_BUCKET, "members": [],
    }


def _read_meta(directory: Path) -> dict[str, Any]:
    try:
        meta = json.loads((directory / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"trace {directory}: unreadable meta.json ({exc})") from None
    if not isinstance(meta, dict):
        raise UsageError(f"trace {directory}: meta.json is not an object")
    return meta


def _write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    aside = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}")
    aside.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(aside, path)


class _meta_lock:
    """An exclusive ``flock`` on ``DIR/.meta.lock`` for a read-modify-write of meta.json."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / ".meta.lock"
        self._fd = -1

    def __enter__(self) -> None:
        self._fd = os.open(self._path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


