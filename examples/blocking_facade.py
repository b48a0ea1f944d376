"""sgcs from a program that does not use trio: the blocking facade.

Three warehouses in one process share stock updates through group
"inventory". Each is a plain thread with its own node
(``sgcs.blocking.open_node``, which runs trio in a thread of its own): it
waits until the view holds all three and has stopped changing, multicasts a
few updates with ``group.send``, and reads events with
``group.receive(timeout=...)`` until it has every update. The group uses total order, so all three must see the same
updates in the same order; the script checks that and exits 0, or 1 with a
one-line error.

    python examples/blocking_facade.py
"""

from __future__ import annotations

import random
import socket
import sys
import threading
import time
from typing import Any

import sgcs
import sgcs.blocking

WAREHOUSES = ("north", "south", "east")
UPDATES = 3
"""Updates each warehouse sends."""
WAIT = 10.0
"""Seconds any single wait may take before the run fails."""
SETTLED = 0.5
"""Seconds without a view change after which the membership counts as settled."""
DEADLINE = 14.0
"""Seconds the whole run may take."""
Result = tuple[int, list[str], sgcs.View]
"""What a warehouse saw: its node id, the updates in delivery order, its final view."""


def own_network() -> dict[str, Any]:
    """A multicast group and port for this run only, so concurrent runs do not meet."""
    rng = random.SystemRandom()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return {"multicast_group": f"239.255.{rng.randrange(256)}.{rng.randrange(1, 255)}", "multicast_port": port}


def wait_for_everyone(group: sgcs.blocking.BlockingGroup, received: list[str]) -> None:
    """Return once the view holds every warehouse and has not changed for SETTLED s.

    Members that discover each other at the same moment may install a view
    and change it again at once; what is sent meanwhile reaches fewer members.
    Updates from warehouses that settled first may come in already: kept."""
    deadline = time.monotonic() + WAIT
    changed = time.monotonic()
    while len(group.view) < len(WAREHOUSES) or time.monotonic() - changed < SETTLED:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the view holds {len(group.view)} of {len(WAREHOUSES)} warehouses")
        try:
            event = group.receive(timeout=0.05)
        except TimeoutError:
            continue
        if isinstance(event, (sgcs.ViewChange, sgcs.OptimisticView)):
            changed = time.monotonic()
        elif isinstance(event, sgcs.Delivery):
            received.append(event.payload.decode())


def warehouse(name: str, network: dict[str, Any], done: threading.Barrier, results: dict[str, Result]) -> None:
    config = sgcs.Config(name=name, secret=b"inventory example secret", beacon_interval=0.1, **network)
    with sgcs.blocking.open_node(config) as node, node.join("inventory", order=sgcs.Order.TOTAL) as group:
        received: list[str] = []
        wait_for_everyone(group, received)  # discovery
        for number in range(UPDATES):
            group.send(f"{name}: widgets {random.randint(-5, 20):+d} (update {number + 1})".encode())
        while len(received) < UPDATES * len(WAREHOUSES):
            event = group.receive(timeout=WAIT)  # raises TimeoutError rather than hang
            if isinstance(event, sgcs.Delivery):
                received.append(event.payload.decode())
        results[name] = (node.id, received, group.view)
        done.wait(WAIT)  # stay until all have read: a leaver may still owe a retransmission
    # Leaving the blocks left the group and closed the node (its thread and sockets).


def main() -> int:
    network = own_network()
    results: dict[str, Result] = {}
    errors: list[str] = []
    everyone_done = threading.Barrier(len(WAREHOUSES))

    def run(name: str) -> None:
        try:
            warehouse(name, network, everyone_done, results)
        except Exception as exc:  # reported by the main thread
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            everyone_done.abort()

    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in WAREHOUSES]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + DEADLINE
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if errors or len(results) < len(WAREHOUSES):
        print(f"error: {errors[0] if errors else 'a warehouse did not finish in time'}", file=sys.stderr)
        return 1
    names = {node_id: name for name, (node_id, _, _) in results.items()}
    for name, (_, received, view) in results.items():
        print(f"{name} received:")
        for update in received:
            print(f"    {update}")
        print(f"  final view {view.view_id}: {', '.join(names[member] for member in view.members)}")
    transcripts = {tuple(received) for _, received, _ in results.values()}
    if len(transcripts) != 1:
        print("error: the warehouses saw different updates or orders", file=sys.stderr)
        return 1
    (transcript,) = transcripts
    print(f"all {len(WAREHOUSES)} warehouses saw the same {len(transcript)} updates in the same order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
