"""A replicated counter: state-machine replication over total order.

Each replica holds an integer and applies operations to it: ``add K``,
``double``, ``negate`` and ``set V``. These do not commute ("double" then
"add 1" is not "add 1" then "double"), so replicas end equal only if they
apply the same operations in the same order. Each replica multicasts its
operations to a group with total order. It applies every delivered
operation, its own included, when it is delivered and never when it is
sent. Total order makes the delivery sequence the same at every replica, so
the final values and the hashes of the operation logs agree. The script
checks both and prints them. For contrast it also prints the value that the
same operations give when applied sender by sender, which FIFO order alone
would allow. That value usually differs.

How it runs: the script is the parent. It picks a multicast group and port
of this run's own and a random secret, then starts N copies of itself as
separate OS processes (``--replica I``), one after the other: each joins the
group the ones before it formed, and says so on stdout. Each replica waits
until its view has held all N replicas for ``SETTLE`` seconds, then
multicasts K operations with short random pauses (so that the senders
interleave), then a ``done`` marker. The wait is there because a forming
group can change view again at once (a member excluded on a stale discovery
beacon, then merged back): what is sent in a view that then splits reaches
one side only, and this example has no state transfer to reconcile replicas
that diverged. Once it has delivered
every replica's marker, it prints its result as one JSON line. It then keeps
serving the group (retransmissions, ordering promises) until the parent
closes its stdin. A replica that left as soon as it was done could still owe
the others a message.

    python examples/replicated_counter.py [--replicas N] [--ops K]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import secrets
import socket
import subprocess
import sys
from functools import partial

import trio

import sgcs
from sgcs.apps.chat import LineReader

SECRET_ENV = "COUNTER_SECRET"
TIMEOUT = 30.0
SETTLE = 0.5
"""Seconds the view must hold all replicas, unchanged, before a replica sends."""
"""Seconds for the whole run; a default run takes about 2 s."""
DONE = "done"
OPERATIONS = {
    "add": lambda value, k: value + k,
    "double": lambda value, _: 2 * value,
    "negate": lambda value, _: -value,
    "set": lambda value, v: v,
}


def apply(value: int, operation: str) -> int:
    name, _, argument = operation.partition(" ")
    return OPERATIONS[name](value, int(argument or 0))


def random_operation(rng: random.Random) -> str:
    name = rng.choice(("add", "add", "add", "double", "double", "negate", "set"))
    return f"{name} {rng.randrange(1, 10)}" if name in ("add", "set") else name


# ---------------------------------------------------------------- one replica


class Counter:
    """One replica's state: the value, and the log of the operations applied to it."""

    def __init__(self) -> None:
        self.value, self.log, self.applied, self.done = 0, hashlib.sha256(), list[tuple[int, str]](), set[int]()

    def deliver(self, sender: int, operation: str) -> None:
        if operation == DONE:
            self.done.add(sender)
            return
        self.value = apply(self.value, operation)
        self.log.update(f"{sender} {operation}\n".encode())
        self.applied.append((sender, operation))

    def sender_by_sender(self) -> int:
        """The value of the same operations applied one sender after the other."""
        value = 0
        for _, operation in sorted(self.applied, key=lambda pair: pair[0]):  # stable: each sender's order kept
            value = apply(value, operation)
        return value

    def result(self, index: int) -> dict[str, object]:
        return {"replica": index, "value": self.value, "operations": len(self.applied),
                "log_sha256": self.log.hexdigest(), "sender_by_sender": self.sender_by_sender()}


class Replica:
    """One replica process: feeds the counter in delivery order, sends once the view has settled."""

    def __init__(self, index: int, replicas: int, ops: int, group: sgcs.GroupHandle) -> None:
        self.index, self.replicas, self.ops, self.group = index, replicas, ops, group
        self.counter = Counter()
        self.announced = self.sending = False
        self.settling = trio.CancelScope()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            async for event in self.group:
                if isinstance(event, sgcs.ViewChange):
                    await self.on_view(len(event.members), nursery)
                elif isinstance(event, sgcs.Delivery):
                    self.counter.deliver(event.sender, event.payload.decode())
                    if len(self.counter.done) == self.replicas:
                        return

    async def on_view(self, size: int, nursery: trio.Nursery) -> None:
        if size > self.index and not self.announced:
            self.announced = True  # we are in: the parent may start the next replica
            print(json.dumps({"members": size}), flush=True)
        self.settling.cancel()  # the membership moved: wait until it settles again
        if size == self.replicas and not self.sending:
            self.settling = await nursery.start(self.send_operations)

    async def send_operations(self, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as settling:
            task_status.started(settling)
            await trio.sleep(SETTLE)
            self.sending = True
        if not self.sending:
            return
        rng = random.Random()
        for _ in range(self.ops):
            await self.group.send(random_operation(rng).encode())
            await trio.sleep(rng.uniform(0, 0.02))  # let the senders interleave
        await self.group.send(DONE.encode())


async def replica(index: int, replicas: int, ops: int, network: dict[str, object], secret: bytes) -> None:
    config = sgcs.Config(name=f"replica-{index}", secret=secret, beacon_interval=0.1, **network)
    async with sgcs.open_node(config) as node, node.join("counter", order=sgcs.Order.TOTAL) as group:
        member = Replica(index, replicas, ops, group)
        await member.run()
        print(json.dumps(member.counter.result(index)), flush=True)
        async with trio.lowlevel.FdStream(os.dup(0)) as stdin:  # serve the others until the parent says stop
            while await stdin.receive_some():
                pass


# ----------------------------------------------------------------- the parent


def private_network() -> dict[str, object]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # a free port and a random 239.255.x.y,
        probe.bind(("127.0.0.1", 0))  # so that concurrent runs never hear each other
        x, y = secrets.randbelow(254) + 1, secrets.randbelow(254) + 1
        return {"multicast_group": f"239.255.{x}.{y}", "multicast_port": probe.getsockname()[1]}


async def run_replicas(replicas: int, ops: int) -> list[dict[str, object]]:
    network = json.dumps(private_network())
    env = {**os.environ, SECRET_ENV: secrets.token_hex(16)}
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            processes, outputs = [], []
            for index in range(replicas):
                command = [sys.executable, __file__, "--replica", str(index), "--replicas", str(replicas),
                           "--ops", str(ops), "--network", network]
                run = partial(trio.run_process, command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
                processes.append(await nursery.start(run))
                outputs.append(LineReader(processes[-1].stdout))
                await next_report(outputs[-1], index)  # it is in the group
            results = [await next_report(output, index) for index, output in enumerate(outputs)]
            for process in processes:
                await process.stdin.aclose()  # every replica is done: let them leave
    return results


async def next_report(output: LineReader, index: int) -> dict[str, object]:
    line = await output.next()
    if line is None:
        raise RuntimeError(f"replica {index} exited before reporting")
    return json.loads(line)


def report(results: list[dict[str, object]]) -> int:
    for result in results:
        print(f"replica {result['replica']}: value {result['value']} after {result['operations']} operations, "
              f"log sha256 {str(result['log_sha256'])[:16]}")
    if len({(r["value"], r["operations"], r["log_sha256"]) for r in results}) != 1:
        return fail("the replicas disagree")
    first = results[0]
    print(f"all {len(results)} replicas agree: value {first['value']}, log sha256 {str(first['log_sha256'])[:16]}")
    print(f"(the same operations applied sender by sender, as FIFO order alone allows: {first['sender_by_sender']})")
    return 0


def fail(message: str) -> int:
    print(f"examples/replicated_counter.py: error: {message}", file=sys.stderr)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=3, help="replica processes (default 3)")
    parser.add_argument("--ops", type=int, default=10, help="operations each replica multicasts (default 10)")
    parser.add_argument("--replica", type=int, help=argparse.SUPPRESS)  # set by the parent for its children
    parser.add_argument("--network", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replicas < 1 or args.ops < 0:
        parser.error("--replicas must be at least 1 and --ops at least 0")
    try:
        if args.replica is not None:
            secret = bytes.fromhex(os.environ[SECRET_ENV])
            trio.run(replica, args.replica, args.replicas, args.ops, json.loads(args.network), secret)
            return 0
        return report(trio.run(run_replicas, args.replicas, args.ops))
    except trio.TooSlowError:
        return fail(f"the replicas did not finish within {TIMEOUT:g} s")
    except Exception as exc:  # one line, not a traceback
        while isinstance(exc, ExceptionGroup):
            exc = exc.exceptions[0]
        return fail(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
