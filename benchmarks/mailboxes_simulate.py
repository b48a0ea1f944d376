"""The mailbox cost model against `sgcs simulate` runs (docs/mailboxes.md, "Simulating a workload").

Each point of a grid of workloads is a mailbox scenario run by the simulator's
own path (``sgcs.sim.run.simulate``, as ``sgcs simulate`` does): post
offices on simulated sgcs nodes, no loss and no crashes (the model assumes a
reliable network), receivers aimed at a share ``local`` in the sender's
domain and ``unknown`` to the sender's post office (the rest known), and MIs
moving every ``move_interval`` seconds. The run's measured rho1, rho2 and q
(the share of mails forwarded from an old post office) go into equations (1)
and (2); the table sets them beside the traffic and time counted in the run,
in the model's units, and the migration control per move beside
(D_fri + 2) C_ctl ("-home": less the share of moves back to the home
domain, which need no HOME_UPDATE). "hops" is forward hops per forwarded
mail: the model forwards a mail once, a mail whose receiver moves again
before the mail catches up is forwarded again.

The run's own q counts every forwarded mail, a local one too (its receiver
left the sender's domain before it pulled: the real post office must
forward it). The paper's q is the share of mails to a receiver outside the
sender's domain that met an old post office (section 4.2: rho1's term has no
q), so the second table reads the run's mail table: q_rem (forwarded among
the non-local mails) into equation (2), then the two terms the paper does not
model, local forwards (rho1 q_loc C_mail, q_loc the forwarded share of local
mails) and repeated hops (C_mail per hop beyond the first), against the
traffic counted.

    PYTHONPATH=. SGCS_PURE_PYTHON=1 python benchmarks/mailboxes_simulate.py [--mails 3000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow.parquet as pq  # noqa: E402

from sgcs.services.mailboxes.costmodel import Costs, expected_traffic  # noqa: E402
from sgcs.sim.run import simulate  # noqa: E402
from sgcs.sim.scenario import parse_scenario  # noqa: E402

TEMPLATE = """
seed = {seed}
nodes = 4
duration = {duration}
[network]
loss = 0.0
[mailboxes]
domains = 4
mis_per_domain = 50
mails = {mails}
mail_rate = 500.0
local = {local}
unknown = {unknown}
{moves}
[mailboxes.settings]
book_max = 20
"""
GRID = [(local, unknown, moves) for local in (0.1, 0.3, 0.5) for unknown in (0.1, 0.4)
        for moves in (None, (2.0, 4.0), (0.2, 0.5))]


def run_point(local: float, unknown: float, moves: tuple[float, float] | None, mails: int, seed: int,
              directory: str) -> dict[str, Any]:
    text = TEMPLATE.format(seed=seed, duration=mails / 500.0 + 10.0, mails=mails, local=local, unknown=unknown,
                           moves=f"move_interval = [{moves[0]}, {moves[1]}]" if moves else "")
    summary = simulate(parse_scenario(text, source="<benchmark>"), directory, progress=False)
    assert summary.mailboxes is not None
    return {**summary.mailboxes, "paper_terms": paper_terms(directory, summary.mailboxes)}


def paper_terms(directory: str, summary: dict[str, Any]) -> dict[str, float]:
    """The run's traffic split into equation (2) at the paper's q and the two
    terms the paper does not model (see the module docstring)."""
    rows = pq.read_table(os.path.join(directory, "mail"), columns=["path", "forwarded"]).to_pandas()
    local = rows["path"] == "local"
    n, costs = len(rows), Costs()
    rho1, rho2 = float(local.mean()), float((rows["path"] == "known").mean())
    q_remote = float(rows.loc[~local, "forwarded"].mean()) if (~local).any() else 0.0
    q_local = float(rows.loc[local, "forwarded"].mean()) if local.any() else 0.0
    mails = summary["mails"]
    repeat_hops = (mails["forward_hops"] - mails["forwarded"]) / n
    eq2 = expected_traffic(rho1, rho2, q_remote, costs)
    local_forwards = rho1 * q_local * costs.c_mail
    return {"q_remote": q_remote, "q_local": q_local, "eq2": eq2, "local_forwards": local_forwards,
            "repeat_hops": repeat_hops * costs.c_mail, "modelled": eq2 + local_forwards + repeat_hops * costs.c_mail,
            "measured": summary["cost_model"]["traffic_per_mail"]["measured"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mails", type=int, default=3000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    print(f"{'local':>5} {'unkn':>4} {'moves':>9} | {'rho1':>5} {'rho2':>5} {'q':>5} | {'D run':>6} {'D eq2':>6} "
          f"{'err':>6} | {'T run':>6} {'T eq1':>6} {'err':>6} | {'acks':>5} | {'hops':>5} | {'mig':>5} {'model':>5} {'-home':>5} | "
          f"{'msg/mail':>8} {'B/mail':>6} {'msg/move':>8} | ok")
    worst = 0.0
    started = time.perf_counter()
    split: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, (local, unknown, moves) in enumerate(GRID):
            s = run_point(local, unknown, moves, args.mails, args.seed, os.path.join(tmp, f"p{n}"))
            cm, inter, mails = s["cost_model"], s["inter_domain"], s["mails"]
            d, t = cm["traffic_per_mail"], cm["time_per_mail"]
            ed = (d["measured"] - d["eq2"]) / d["eq2"]
            et = (t["from_counts"] - t["eq1"]) / t["eq1"]
            worst = max(worst, abs(ed), abs(et))
            mig = cm["migration_control_per_move"]
            ok = mails["lost"] == mails["duplicated"] == mails["out_of_order"] == 0 and mails["delivered"] == mails["sent"]
            label = "none" if moves is None else f"{moves[0]:g}-{moves[1]:g}s"
            # forward hops per forwarded mail: above 1 when the MI moved again before its mail caught up
            hops = mails["forward_hops"] / mails["forwarded"] if mails["forwarded"] else 0.0
            moves_made = s["moves"]
            home_share = mig["moves_to_home"] / moves_made if moves_made else 0.0
            migration = (f"{mig['measured']:5.2f} {mig['model']:5.2f} {mig['model'] - home_share:5.2f}" if moves_made
                         else f"{'-':>5} {'-':>5} {'-':>5}")
            print(f"{local:5.1f} {unknown:4.1f} {label:>9} | {cm['rho1']:5.3f} {cm['rho2']:5.3f} {cm['q']:5.3f} | "
                  f"{d['measured']:6.3f} {d['eq2']:6.3f} {ed:+6.2%} | {t['from_counts']:6.3f} {t['eq1']:6.3f} "
                  f"{et:+6.2%} | {cm['acks_per_mail_kb']:5.2f} | {hops:5.2f} | {migration} | "
                  f"{inter['messages_per_mail']:8.3f} {inter['bytes_per_mail']:6.0f} {inter['messages_per_move']:8.2f} | "
                  f"{'yes' if ok else 'NO'}")
            split.append((f"{local:5.1f} {unknown:4.1f} {label:>9}", s["paper_terms"]))
    print(f"largest relative error over {len(GRID)} points x {args.mails} mails: {worst:.2%} "
          f"({time.perf_counter() - started:.0f} s)")
    print(f"\nthe paper's q (forwarded share of mails to a receiver outside the sender's domain) and the terms the "
          f"paper does not model (KB per mail)")
    print(f"{'local':>5} {'unkn':>4} {'moves':>9} | {'q_rem':>5} {'q_loc':>5} | {'eq2':>6} {'+local':>6} {'+hops':>6} "
          f"{'= sum':>6} {'D run':>6} {'err':>6} | {'eq2 err':>7}")
    worst_split = 0.0
    for label, t in split:
        err = (t["measured"] - t["modelled"]) / t["modelled"]
        worst_split = max(worst_split, abs(err))
        print(f"{label} | {t['q_remote']:5.3f} {t['q_local']:5.3f} | {t['eq2']:6.3f} {t['local_forwards']:6.3f} "
              f"{t['repeat_hops']:6.3f} {t['modelled']:6.3f} {t['measured']:6.3f} {err:+6.2%} | "
              f"{(t['measured'] - t['eq2']) / t['eq2']:+7.2%}")
    print(f"largest relative error of eq. (2) at the paper's q plus the two terms: {worst_split:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
