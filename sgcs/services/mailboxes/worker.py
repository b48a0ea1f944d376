"""One domain's process for the real-process runs (benchmark and CI test).

Runs the domain's post office (``open_post_office``) and hosts the MIs that
are in the domain: each tick every MI here pulls its mail, sends a few mails
to random other MIs until it has sent its quota (its send counters travel with
it, so the quota survives moves and kill -9), and moves to a random other
domain when its stay (uniform in [move_min, move_max] seconds) is over.
The file ``<dir>/stop_moving`` ends the moves (the drain phase). Every
delivery is logged durably by the post office itself (``log_deliveries``) in
the pull's transaction, so the checker reads exactly what was delivered.

Run: ``python -m sgcs.services.mailboxes.worker --domain 0 --domains 4 --dir RUN ...``
"""

from __future__ import annotations

import argparse
import os
import random
import sys

import trio

import sgcs

from .messages import make_name
from .postoffice import Settings
from .service import Faults, open_post_office


def mi_names(domains: int, per_domain: int) -> list[str]:
    return [make_name("wf", d, "h", f"mi{k}") for d in range(domains) for k in range(per_domain)]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--domain", type=int, required=True)
    p.add_argument("--domains", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--secret", default="mailboxes-worker-secret")
    p.add_argument("--multicast-group", required=True)
    p.add_argument("--multicast-port", type=int, required=True)
    p.add_argument("--per-domain", type=int, default=5)
    p.add_argument("--quota", type=int, default=5000, help="mails each MI sends")
    p.add_argument("--burst", type=int, default=20, help="mails an MI sends per tick")
    p.add_argument("--tick", type=float, default=0.02)
    p.add_argument("--move-min", type=float, default=0.5)
    p.add_argument("--move-max", type=float, default=2.0)
    p.add_argument("--duplicate", type=float, default=0.0)
    p.add_argument("--reorder", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    config = sgcs.Config(name=f"po{args.domain}", secret=args.secret.encode(), beacon_interval=0.1,
                         multicast_group=args.multicast_group, multicast_port=args.multicast_port)
    rng = random.Random(args.seed * 1000 + args.domain + os.getpid())
    everyone = mi_names(args.domains, args.per_domain)
    settings = Settings(log_deliveries=True, retry_initial=0.3, retry_max=2.0, outbox_max=5_000)
    faults = Faults(duplicate=args.duplicate, reorder=args.reorder, seed=rng.randrange(2**32))
    path = os.path.join(args.dir, f"po{args.domain}.db")
    async with open_post_office(args.domain, config, path, settings=settings, faults=faults) as po:
        for k in range(args.per_domain):  # a kill may come before the creations commit
            name = make_name("wf", args.domain, "h", f"mi{k}")
            if not po.has_home_record(name):
                await po.create_mi(name)
        stay_until: dict[str, float] = {}
        stop_file = os.path.join(args.dir, "stop_moving")
        while True:
            await trio.sleep(args.tick)
            now = trio.current_time()
            moving = not os.path.exists(stop_file)
            for name in po.running():
                await po.pull(name)
                state = po.mi_state(name)  # the MI's own counters: how much it has sent
                if state is None:
                    continue
                left = args.quota - sum(state.next_seq.values())
                if left > 0:
                    burst = [(rng.choice([n for n in everyone if n != name]), f"{name}:{rng.random()}".encode())
                             for _ in range(min(left, args.burst))]
                    await po.send_many(name, burst)
                due = stay_until.setdefault(name, now + rng.uniform(args.move_min, args.move_max))
                if moving and now >= due and name in po.running():
                    del stay_until[name]
                    await po.move(name, rng.choice([d for d in range(args.domains) if d != args.domain]))


def main() -> int:
    args = parse(sys.argv[1:])
    trio.run(run, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
