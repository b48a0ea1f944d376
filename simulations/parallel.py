"""A run split over worker processes: conservative parallel simulation.

Theory of operation
-------------------
A 10,000-node run is millions of events, each a call into one node's protocol
objects; one process runs them one after another on one core. Here ``W``
worker processes (forked, one per core) each own the nodes whose id is
congruent to their number modulo ``W`` (``Simulator.owns``: interleaved, so
every worker gets a fair share of senders and of every view's positions).

Nodes affect each other only through datagrams, and no datagram arrives
sooner than the network's shortest delay ``L`` (``latency_ms.min``). So once
every worker knows ``g``, the earliest event pending anywhere, the events in
``[g, g + L)`` cannot depend on anything another worker does in that window:
each worker runs its own, then all swap what they sent to each other's nodes
(with its arrival time, at least ``g + L``) and the time of their next event,
and the next window starts at the minimum of those times. This is the
synchronous-window form of conservative parallel discrete-event simulation
(Lubachevsky's bounded lag; Nicol, "The cost of conservative synchronization
in parallel discrete event simulations", JACM 1993). Windows that hold no
event are skipped, since ``g`` is the next event, not the next multiple of ``L``.

Everything the scenario decides (lifecycles, faults, partitions, the
application's send times and senders, bucket boundaries) is replicated:
every worker runs those events on the same seeds (``simulator`` "Workers").
A node's network draws come from generators of its own (``network``), used
in the order of its own sends, so a parallel run draws what one process
draws: the trace holds the same rows as a run with ``workers = 1``, except
for the order of rows of different nodes at one instant (a test holds it to
that). One exception is possible: two datagrams that reach one node at the
very same instant, from nodes of different workers, are taken in the order of
the swap rather than of their sends (the heap breaks ties by scheduling
order). With continuous random delays that takes two sends at one instant
whose delays were both raised to the minimum: at the start, when every node
acts at t = 0, it can happen.

Pairs of workers swap over a pipe each, in a fixed order (the lower number
sends first), which cannot deadlock however large a window's datagrams. A
fork of this process is each worker; the parent only waits: for progress
reports from worker 0, and for each worker's totals. A worker that fails
writes its error next to the trace and exits; its peers see its pipes close
and stop too, and the parent raises the first real error as a
``SimulationBug``; a worker that left no report (killed from outside) is
named with its signal. Workers leave with ``os._exit``: a finished worker's
gigabytes go back to the system at once, with no object freed one by one.

At the end the parent merges the workers' ``events`` part files into one
file set in time order, so readers see the same trace format as from one
process: first the rows of the start (all at t = 0), each worker's files
renamed in worker order, then the rest sorted by time (ties: worker, then
row order, a stable sort) and written again; ``net`` rows of one
node, bucket and type written by two workers (a sender counts the copies to
another worker's nodes that the network lost) are summed; ``stats`` rows
stay in each worker's own part files (one writer per node).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from heapq import heappush
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from sgcs.errors import UsageError
from sgcs.trace import NET_COLUMNS, ROW_BUDGET, _PartWriter, events_schema, net_schema, pyarrow_modules

from .engine import ARRIVE
from .scenario import Scenario
from .simulator import RunTotals, SimulationBug, Simulator

MAX_WORKERS = 64
STOP_GRACE = 2.0
"""Seconds the workers get to end on their own (after a run, or once one failed) before they are killed."""
PROGRESS_WINDOWS = 1 << 10
"""Windows between two progress reports of worker 0."""
SPIN_SECONDS = 0.005
"""How long a worker polls for its peer's window before it sleeps in ``recv``.
Waking from a blocking read cost about 50 us a window on this 2-core machine,
and a 10,000-node run has 240,000 windows (10,000 nodes, 8 s: 57.3 s against
53.1 s polling, two runs each). Only while every worker has a core of its
own: a polling worker would otherwise take a peer's core."""

_DONE, _PROGRESS = "d", "p"


def check_workers(scenario: Scenario, workers: int) -> None:
    """A clear one-line error when ``scenario`` cannot run on ``workers`` processes."""
    if not 1 <= workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be between 1 and {MAX_WORKERS}, got {workers}")
    if workers == 1:
        return
    if scenario.mailboxes is not None:
        raise UsageError("--workers > 1 does not run mailbox scenarios (their post offices share state); use 1")
    if scenario.network.latency_min_ms <= 0.0:
        raise UsageError("--workers > 1 needs a shortest network delay: set network.latency_ms.min "
                         "(milliseconds, > 0) in the scenario")
    if workers > scenario.nodes:
        raise UsageError(f"--workers {workers} is more than the scenario's {scenario.nodes} nodes")


def run_parallel(scenario: Scenario, out: Path, net_bucket: float, workers: int,
                 progress: Callable[[float], None] | None) -> RunTotals:
    """Run ``scenario`` on ``workers`` forked processes; merge their trace; their totals."""
    for stale in out.glob(".worker-*.error"):  # an earlier failed run's: not this one's
        stale.unlink()
    context = multiprocessing.get_context("fork")
    links: dict[int, dict[int, Connection]] = {w: {} for w in range(workers)}
    for a in range(workers):
        for b in range(a + 1, workers):
            links[a][b], links[b][a] = context.Pipe()
    reports = [context.Pipe(duplex=False) for _ in range(workers)]  # (parent's end, worker's end)
    every_end = [conn for pair in reports for conn in pair] + [c for ends in links.values() for c in ends.values()]
    processes = [
        context.Process(target=_worker_main, name=f"sgcs-sim-worker-{w}", daemon=True,
                        args=(scenario, out, net_bucket, w, workers, links[w], reports[w][1], every_end))
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    for w in range(workers):  # the parent keeps only its reading ends: a worker's death closes them
        reports[w][1].close()
        for conn in links[w].values():
            conn.close()
    failure: SimulationBug | None = None
    try:
        outcome = _collect(scenario, out, [reading for reading, _ in reports], progress)
    except SimulationBug as bug:
        failure = bug
    finally:
        exits = _stop(processes, STOP_GRACE)
        for report in out.glob(".worker-*.error"):  # read by _first_error, or left by an interrupted run
            report.unlink()
    if failure is not None:
        killed = [(w, -code) for w, code in enumerate(exits) if code is not None and code < 0]
        if killed and failure.reported_by_peer:
            worker, signal = killed[0]
            raise SimulationBug(f"simulation stopped (seed {scenario.seed}): worker {worker} was killed by "
                                f"signal {signal}", scenario.seed, failure.t, failure.replay)
        raise failure
    totals, start_parts = outcome
    totals.rows = merge_events(out / "events", start_parts)
    totals.net_rows = merge_net(out / "net", workers)
    return totals


def _stop(processes: Sequence[BaseProcess], grace: float) -> list[int | None]:
    """Wait up to ``grace`` seconds for the workers to end, kill the rest;
    their exit codes (None for those we killed: not how they ended)."""
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    exits: list[int | None] = []
    for process in processes:
        ours = process.is_alive()
        if ours:
            process.kill()
        process.join()
        exits.append(None if ours else process.exitcode)
    return exits


def _collect(scenario: Scenario, out: Path, reports: list[Connection],
             progress: Callable[[float], None] | None) -> tuple[RunTotals, list[int]]:
    """The workers' totals, summed, and how many event files each wrote at the start."""
    results: dict[int, tuple[RunTotals, int]] = {}
    open_reports = dict(enumerate(reports))
    while open_reports:
        for ready in wait(list(open_reports.values())):
            worker = next(w for w, c in open_reports.items() if c is ready)
            conn = open_reports[worker]
            try:
                kind, value = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                del open_reports[worker]
                if worker not in results:
                    raise _first_error(scenario, out, len(reports)) from None
                continue
            if kind == _PROGRESS and progress is not None:
                progress(value)
            elif kind == _DONE:
                results[worker] = value
    totals = results[0][0]
    for worker in range(1, len(reports)):
        totals = totals.plus(results[worker][0])
    return totals, [results[w][1] for w in range(len(reports))]


def _error_path(out: Path, worker: int) -> Path:
    return out / f".worker-{worker}.error"


def _first_error(scenario: Scenario, out: Path, workers: int) -> SimulationBug:
    """The error of the worker that failed first (the others stopped because a peer did)."""
    found = []
    for worker in range(workers):
        path = _error_path(out, worker)
        if path.is_file():
            found.append(json.loads(path.read_text()))
            path.unlink()
    real = [e for e in found if not e["peer"]]
    if not real:  # only peers that saw one stop: it was killed (the parent looks at how)
        bug = SimulationBug(f"simulation bug (seed {scenario.seed}): a worker process died without a report",
                            scenario.seed, min((e["t"] for e in found), default=math.nan), scenario.replay_command())
        bug.reported_by_peer = True
        return bug
    first = min(real, key=lambda e: e["t"])
    return SimulationBug(first["message"], scenario.seed, first["t"], scenario.replay_command())


class _PeerGone(Exception):
    """A peer's pipe closed: it failed (and reported why) or was killed."""


def _worker_main(scenario: Scenario, out: Path, net_bucket: float, worker: int, workers: int,
                 links: dict[int, Connection], report: Connection, every_end: list[Connection]) -> None:
    code = 0
    simulator: Simulator | None = None
    mine = {id(report), *(id(conn) for conn in links.values())}
    for conn in every_end:  # a fork inherits every pipe: keep only our own, so a closed one means its owner is gone
        if id(conn) not in mine:
            conn.close()
    try:
        simulator = Simulator(scenario, out, net_bucket, worker, workers)
        start_parts = _run_windows(simulator, links, report if worker == 0 else None)
        report.send_bytes(pickle.dumps((_DONE, (simulator.totals(), start_parts))))
    except BaseException as exc:  # noqa: BLE001 (reported to the parent, which raises it)
        code = 1
        t = simulator.engine.now if simulator is not None else 0.0
        message = str(exc) if isinstance(exc, SimulationBug) else \
            f"simulation bug in worker {worker}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        _error_path(out, worker).write_text(json.dumps({"message": message, "t": t,
                                                         "peer": _PeerGone in (type(exc), type(exc.__cause__))}))
    finally:
        os._exit(code)  # nothing freed object by object, no parent's exit handlers run twice


def _run_windows(simulator: Simulator, links: dict[int, Connection], report: Connection | None) -> int:
    """Run windows of length L until the scenario's end (see the module
    docstring); returns the event files the start filled."""
    simulator.start()
    start_parts = simulator.events.cut()
    duration, lookahead = simulator.scenario.duration, simulator.network.least
    spin = SPIN_SECONDS if simulator.workers <= len(os.sched_getaffinity(0)) else 0.0
    windows = 0
    with simulator.running() as advance:
        while True:
            start = _swap(simulator, links, spin)
            if start > duration:
                break
            advance(min(math.nextafter(start + lookahead, -math.inf), duration))
            windows += 1
            if report is not None and windows % PROGRESS_WINDOWS == 0:
                report.send_bytes(pickle.dumps((_PROGRESS, simulator.engine.now)))
        advance(duration)  # nothing left at or before it: the clock moves to the end
    simulator.finish()
    return start_parts


def _swap(simulator: Simulator, links: dict[int, Connection], spin: float = 0.0) -> float:
    """Send each peer what is in flight to its nodes and our next event time;
    take theirs (polling for up to ``spin`` seconds before sleeping); return
    the earliest event time of all workers."""
    heap, me = simulator.engine.heap, simulator.worker
    ours = heap[0][0] if heap else math.inf
    for peer in links:
        box = simulator.outbox[peer]
        if box:
            ours = min(ours, min(item[0] for item in box))
    earliest = ours
    for peer in sorted(links):
        conn = links[peer]
        if peer < me:
            earliest = min(earliest, _take(simulator, conn, spin))
            _give(simulator, conn, peer, ours)
        else:
            _give(simulator, conn, peer, ours)
            earliest = min(earliest, _take(simulator, conn, spin))
    return earliest


def _give(simulator: Simulator, conn: Connection, peer: int, ours: float) -> None:
    box = simulator.outbox[peer]
    try:
        conn.send_bytes(pickle.dumps((ours, box), protocol=pickle.HIGHEST_PROTOCOL))
    except OSError:
        raise _PeerGone(f"worker {peer} stopped") from None
    box.clear()


def _take(simulator: Simulator, conn: Connection, spin: float = 0.0) -> float:
    try:
        if spin and not conn.poll(0):
            until = time.perf_counter() + spin
            while not conn.poll(0) and time.perf_counter() < until:
                pass
        theirs, arrivals = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        raise _PeerGone("a peer worker stopped") from None
    engine = simulator.engine
    heap, tie = engine.heap, engine.tie
    for t, dst, incarnation, packet in arrivals:
        tie += 1
        heappush(heap, (t, tie, ARRIVE, dst, incarnation, packet))
    engine.tie = tie
    return float(theirs)


# ---------------------------------------------------------------- trace merge

def _arrow() -> tuple[Any, Any]:
    """pyarrow and its parquet module, allocating from jemalloc (or the
    system): the default mimalloc pool spent more time in the kernel than
    in the merge itself (7.9 of 8.9 s merging a 10,000-node run's trace)."""
    pa, pq = pyarrow_modules()
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:
        pa.set_memory_pool(pa.system_memory_pool())
    return pa, pq


def merge_events(directory: Path, start_parts: list[int]) -> int:
    """Rewrite the workers' event files as one file set in time order; its rows.

    Each worker's first ``start_parts[w]`` files hold the rows of the start
    (every one at t = 0, and at 10,000 nodes a hundred million view members:
    decoding them was most of a merge): they are renamed, worker by worker,
    and come first. The rest are read, sorted by time (stable: ties keep
    worker order) and written again."""
    pa, pq = _arrow()
    import pyarrow.compute as pc

    workers = len(start_parts)
    parts = [sorted(directory.glob(f"part-w{w}-*.parquet")) for w in range(workers)]
    first = 0
    for w in range(workers):
        for path in parts[w][: start_parts[w]]:
            path.rename(directory / f"part-{first:05d}.parquet")
            first += 1
    rest = [path for w in range(workers) for path in parts[w][start_parts[w]:]]
    schema = events_schema()
    table = pa.concat_tables([pq.read_table(path, schema=schema) for path in rest]).combine_chunks()
    order = pc.sort_indices(table, sort_keys=[("t", "ascending")]).to_numpy()
    weights = 1 + pc.fill_null(pc.list_value_length(table.column("members")), 0).to_numpy()
    writer = _PartWriter(directory, schema, first_part=first)
    for chunk in _chunks(weights[order]):
        for batch in table.take(pa.array(order[chunk])).to_batches():
            writer.write(batch.columns)
    if first == 0 or table.num_rows:
        writer.close([pa.array([], field.type) for field in schema])
    for path in rest:
        path.unlink()
    start_rows = sum(pq.ParquetFile(directory / f"part-{i:05d}.parquet").metadata.num_rows for i in range(first))
    return start_rows + int(table.num_rows)


def _chunks(weights: Any) -> list[slice]:
    """Row groups as the events writer cuts them: a view row weighs 1 + its members."""
    import numpy as np

    bounds = np.searchsorted(np.cumsum(weights), np.arange(ROW_BUDGET, int(weights.sum()) + ROW_BUDGET, ROW_BUDGET),
                             side="left") + 1
    edges = sorted({0, *(min(int(b), len(weights)) for b in bounds)})
    return [slice(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def merge_net(directory: Path, workers: int) -> int:
    """Sum the workers' net rows per (bucket, node, type), in the order one process writes them."""
    pa, pq = _arrow()

    parts = [path for w in range(workers) for path in sorted(directory.glob(f"part-w{w}-*.parquet"))]
    schema = net_schema()
    table = pa.concat_tables([pq.read_table(path, schema=schema) for path in parts])
    keys = ["t", "node", "msg_type"]
    summed = table.group_by(keys).aggregate([(column, "sum") for column in NET_COLUMNS])
    summed = summed.rename_columns([c.removesuffix("_sum") for c in summed.column_names])
    summed = summed.select(schema.names).sort_by([("t", "ascending"), ("msg_type", "ascending"),
                                                  ("node", "ascending")]).cast(schema)
    writer = _PartWriter(directory, schema)
    for batch in summed.to_batches(max_chunksize=ROW_BUDGET):
        writer.write(batch.columns)
    writer.close([pa.array([], field.type) for field in schema])
    for path in parts:
        path.unlink()
    return int(summed.num_rows)
