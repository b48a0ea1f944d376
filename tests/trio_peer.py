"""A second sgcs process for tests/test_trio_driver.py.

Joins a group by discovery, waits until the test's node is in its view,
multicasts ``--count`` messages, then waits for ``--expect`` messages from
that node and prints one JSON line: {"id": ..., "view": [...], "received": [...]}.
Exits 1 (with the reason on stderr) if that takes longer than ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import sys

import trio

import sgcs


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--group", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--peer-id", type=int, required=True)
    parser.add_argument("--multicast-group", required=True)
    parser.add_argument("--multicast-port", type=int, required=True)
    parser.add_argument("--count", type=int, default=3)
    parser.add_argument("--expect", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=20.0)
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> dict[str, object]:
    config = sgcs.Config(
        name="trio-peer", secret=args.secret.encode(), node_id=args.node_id, beacon_interval=0.1,
        multicast_group=args.multicast_group, multicast_port=args.multicast_port,
    )
    received: list[str] = []
    async with sgcs.open_node(config) as node, node.join(args.group) as group:
        async for event in group:
            if isinstance(event, sgcs.ViewChange) and args.peer_id in event.members:
                break
        view = list(group.view.members)
        for i in range(args.count):
            await group.send(f"child {i}".encode())
        async for event in group:
            if isinstance(event, sgcs.Delivery) and event.sender == args.peer_id:
                received.append(event.payload.decode())
                if len(received) == args.expect:
                    break
    return {"id": node.id, "view": view, "received": received}


def main() -> int:
    args = parse(sys.argv[1:])
    try:
        result = trio.run(_with_timeout, args)
    except trio.TooSlowError:
        print(f"trio_peer: no exchange within {args.timeout} s", file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


async def _with_timeout(args: argparse.Namespace) -> dict[str, object]:
    with trio.fail_after(args.timeout):
        return await run(args)


if __name__ == "__main__":
    sys.exit(main())
