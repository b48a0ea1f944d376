"""Single-TCD exclusivity across a merge, two real processes on loopback (docs/handles.md).

Each run starts two processes of the docs/handles.md example (``attach`` to
the data field ``atc``, ``receive_exclusive(100, liveness=True)``, one urgent
frame, then read the handle), the second 0-3 s after the first (uniform,
``--max-delay``). The second often starts alone (a singleton view, before
discovery finds the first) and wins code 100 there; when the views merge the
claim tables are exchanged and the earlier grant keeps the code. Once both
processes share a view, and each has reconciled it (``Module.reconciled``),
the harness asks each whether it still holds the code and whom its table
names. A run counts as **two holders** if both still hold code 100 then.

Both processes use ``sgcs.Config`` defaults (as the example does: 1 s
beacons) except their own multicast group and port per run, with
``bind_host`` 127.0.0.1: everything stays on the loopback interface.

    python benchmarks/handles_merge.py --runs 50
    python benchmarks/handles_merge.py --runs 20 --sgcs-root /tmp/before   # another checkout's sgcs

The summary (stdout, JSON): runs, runs with two holders, runs where both
processes had won the code (the conflict arose and the merge rule settled
it), runs where the two tables named different holders, runs with no holder
left, and runs that did not complete (no shared view within ``--run-timeout``).
A checkout whose ``Module`` has no ``reconciled`` (from before the merge fix)
is asked ``--grace`` seconds after the shared view instead.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"handles merge benchmark secret"
CODE = 100
FIELD = "atc"
LOOPBACK = "127.0.0.1"


# ------------------------------------------------------------ one process: the docs example, reporting


async def child_main(args: argparse.Namespace) -> None:
    import trio

    import sgcs
    from sgcs.services import handles

    def emit(**fields: Any) -> None:
        print(json.dumps({"t": time.time(), **fields}), flush=True)

    config = sgcs.Config(name=f"radar-{args.index}", secret=SECRET, bind_host=LOOPBACK,
                         multicast_group=args.multicast_group, multicast_port=args.multicast_port)
    async with sgcs.open_node(config) as node, handles.attach(node, FIELD) as module:
        emit(event="attached", me=module.me, members=len(module.members))
        tracks: Any = None
        lost: list[str] = []
        try:
            tracks = await module.receive_exclusive(CODE, liveness=True)  # code 100: ours alone in "atc"
            emit(event="granted", members=len(module.members))
            await module.multicast(CODE).send(b"track 42", priority=9)
        except handles.ExclusiveRefused as refused:
            emit(event="refused", reason=str(refused))

        async def read_tracks() -> None:
            try:
                async for _ in tracks:  # Data or NodeEvent; ExclusiveLost ends it
                    pass
            except handles.ExclusiveRefused as error:  # ExclusiveLost is one
                lost.append(str(error))
                emit(event="lost", reason=str(error), holder=getattr(error, "holder", None))

        async def report_views() -> None:
            emit(event="view", members=len(module.members))
            async for _ in module.watch():  # a survival signal follows each view change
                emit(event="view", members=len(module.members))

        async def commands(nursery: trio.Nursery) -> None:
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                if line.strip() == "status":
                    reconciled = getattr(module, "reconciled", None)
                    if reconciled is not None:
                        await reconciled()
                    else:
                        await trio.sleep(args.grace)  # a build without the exchange: nothing to wait for
                    holder = module.holder(CODE) if hasattr(module, "holder") else None
                    # the handle's own state: the reader task may still have frames to read before the loss
                    taken = tracks is not None and (getattr(tracks, "lost", None) is not None or bool(lost))
                    emit(event="status", members=len(module.members), holding=tracks is not None and not taken,
                         holder=holder, lost=taken)
                else:  # "quit" or end of input: detach (leave the block)
                    nursery.cancel_scope.cancel()
                    return

        async with trio.open_nursery() as nursery:
            if tracks is not None:
                nursery.start_soon(read_tracks)
            nursery.start_soon(report_views)
            nursery.start_soon(commands, nursery)


# ------------------------------------------------------------ the harness


class Child:
    def __init__(self, args: argparse.Namespace, index: int, group: str, port: int) -> None:
        cmd = [sys.executable, "-P", __file__, "--child", "--index", str(index), "--multicast-group", group,
               "--multicast-port", str(port), "--grace", str(args.grace)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, PYTHONPATH=str(args.sgcs_root)))
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                pass  # not ours (a warning on stdout)

    def drain(self) -> None:
        while True:
            try:
                self.seen.append(self.events.get_nowait())
            except queue.Empty:
                return

    def last(self, kind: str) -> dict[str, Any] | None:
        self.drain()
        return next((e for e in reversed(self.seen) if e["event"] == kind), None)

    def members(self) -> int:
        view = self.last("view")
        return int(view["members"]) if view else 0

    def tell(self, command: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass

    def stop(self) -> None:
        self.tell("quit")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def error_tail(self) -> str:
        assert self.proc.stderr is not None
        if self.proc.poll() is None:
            return ""
        return self.proc.stderr.read()[-400:]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Any, deadline: float) -> bool:
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def one_run(args: argparse.Namespace, delay: float, rng: random.Random) -> dict[str, Any]:
    group = f"239.255.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}"
    port = free_port()
    deadline = time.monotonic() + args.run_timeout
    first = Child(args, 1, group, port)
    children = [first]
    try:
        time.sleep(delay)  # the scenario itself: the second process starts `delay` s after the first
        children.append(Child(args, 2, group, port))
        if not wait_until(lambda: all(c.members() == 2 for c in children), deadline):
            return {"delay_s": delay, "completed": False, "why": "no shared view of 2 members",
                    "stderr": [c.error_tail() for c in children]}
        for c in children:
            c.tell("status")
        if not wait_until(lambda: all(c.last("status") for c in children), deadline):
            return {"delay_s": delay, "completed": False, "why": "no status",
                    "stderr": [c.error_tail() for c in children]}
        status = [c.last("status") for c in children]
        granted = [c.last("granted") is not None for c in children]
        assert all(status)
        return {
            "delay_s": delay,
            "completed": True,
            "granted": granted,
            "holding": [s["holding"] for s in status],  # type: ignore[index]
            "holders_named": [s["holder"] for s in status],  # type: ignore[index]
            "lost": [s["lost"] for s in status],  # type: ignore[index]
            "shared_view_members": [s["members"] for s in status],  # type: ignore[index]
        }
    finally:
        for c in children:
            c.stop()


def harness(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    print(f"{args.runs} runs, second process 0-{args.max_delay} s after the first, seed {seed}, "
          f"sgcs from {args.sgcs_root}", file=sys.stderr, flush=True)
    results = []
    for run in range(args.runs):
        result = one_run(args, rng.uniform(0.0, args.max_delay), rng)
        results.append(result)
        if result["completed"]:
            line = (f"granted {result['granted']}, holding {result['holding']}, "
                    f"tables name {result['holders_named']}")
        else:
            line = f"incomplete: {result['why']}"
        print(f"  run {run + 1:3d}: delay {result['delay_s']:.2f} s: {line}", file=sys.stderr, flush=True)
    done = [r for r in results if r["completed"]]
    summary = {
        "runs": args.runs,
        "completed": len(done),
        "two_holders": sum(all(r["holding"]) for r in done),
        "no_holder": sum(not any(r["holding"]) for r in done),
        "both_granted": sum(all(r["granted"]) for r in done),
        "settled_by_merge_rule": sum(all(r["granted"]) and sum(r["holding"]) == 1 for r in done),
        "tables_disagree": sum(len(set(r["holders_named"])) > 1 for r in done),
        "incomplete": len(results) - len(done),
        "max_delay_s": args.max_delay,
        "seed": seed,
        "sgcs_root": str(args.sgcs_root),
    }
    print(json.dumps(summary))
    return 0 if summary["two_holders"] == 0 and summary["incomplete"] == 0 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50, help="runs (default 50)")
    parser.add_argument("--max-delay", type=float, default=3.0, help="the second process starts 0 to this many s later")
    parser.add_argument("--run-timeout", type=float, default=40.0, help="seconds a run may take to share a view")
    parser.add_argument("--grace", type=float, default=2.0,
                        help="for a build without Module.reconciled: seconds to wait after the shared view")
    parser.add_argument("--seed", type=int, help="seed of the delays and multicast groups (default: random, printed)")
    parser.add_argument("--sgcs-root", type=Path, default=ROOT, help="checkout whose sgcs the processes import")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--multicast-group", help=argparse.SUPPRESS)
    parser.add_argument("--multicast-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import trio

        signal.signal(signal.SIGINT, signal.SIG_DFL)
        trio.run(child_main, args)
        return 0
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if not 0.0 <= args.max_delay <= 60.0:
        parser.error(f"--max-delay must be from 0 to 60 seconds, got {args.max_delay}")
    if args.run_timeout <= 0 or args.grace < 0:
        parser.error("--run-timeout must be positive and --grace not negative")
    if not (args.sgcs_root / "sgcs" / "__init__.py").is_file():
        parser.error(f"--sgcs-root {args.sgcs_root} holds no sgcs package")
    args.sgcs_root = args.sgcs_root.resolve()
    return harness(args)


if __name__ == "__main__":
    sys.exit(main())
