"""The mailbox cost model over a grid of rho1, rho2, q: equations (1) and (2)
(with q restored) against a timed simulation of the real post offices, and
the migration cost against (D_fri + 2) C_ctl. Prints a table, the largest
relative error, and writes docs/mailboxes_cost.png.

    PYTHONPATH=. python benchmarks/mailboxes_costmodel.py [--trials 3000]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sgcs.services.mailboxes.costmodel import (  # noqa: E402
    expected_time,
    expected_traffic,
    migration_cost,
    simulate,
    simulate_migration,
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=3000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--plot", default="docs/mailboxes_cost.png")
    args = p.parse_args()
    grid = [(r1, r2, q) for r1 in (0.1, 0.3, 0.5, 0.7) for r2 in (0.1, 0.2, 0.3) for q in (0.0, 0.1, 0.3, 0.5)
            if r1 + r2 <= 1.0]
    worst = 0.0
    rows = []
    print(f"{'rho1':>5} {'rho2':>5} {'q':>4} | {'T sim':>7} {'T eq1':>7} {'err':>6} | {'D sim':>7} {'D eq2':>7} {'err':>6} | acks KB")
    for r1, r2, q in grid:
        m = simulate(r1, r2, q, args.trials, args.seed)
        t, d = expected_time(r1, r2, q), expected_traffic(r1, r2, q)
        et, ed = (m.time - t) / t, (m.traffic - d) / d
        worst = max(worst, abs(et), abs(ed))
        rows.append((r1, r2, q, m.time, t, m.traffic, d))
        print(f"{r1:5.1f} {r2:5.1f} {q:4.1f} | {m.time:7.3f} {t:7.3f} {et:+6.1%} | {m.traffic:7.3f} {d:7.3f} {ed:+6.1%} | {m.ack_traffic:.2f}")
    print(f"largest relative error over {len(grid)} points x {args.trials} communications: {worst:.2%}")
    for friends in range(6):
        r = simulate_migration(friends)
        print(f"migration with D_fri={friends}: control {r['control_kb']:.0f} KB, (D_fri+2)C_ctl = "
              f"{migration_cost(friends):.0f} KB; acks {r['ack_kb']:.0f} KB")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return 0
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for r1, r2, color in ((0.1, 0.1, "C0"), (0.3, 0.3, "C1"), (0.7, 0.2, "C2")):
        sel = [r for r in rows if r[0] == r1 and r[1] == r2]
        qs = [r[2] for r in sel]
        axes[0].plot(qs, [r[4] for r in sel], "-", color=color, label=f"eq. (1), ρ1={r1}, ρ2={r2}")
        axes[0].plot(qs, [r[3] for r in sel], "o", color=color)
        axes[1].plot(qs, [r[6] for r in sel], "-", color=color, label=f"eq. (2) with q, ρ1={r1}, ρ2={r2}")
        axes[1].plot(qs, [r[5] for r in sel], "o", color=color)
    axes[0].set(xlabel="q (probability the receiver is migrating)", ylabel="time per communication (KB/δ_inter)")
    axes[1].set(xlabel="q", ylabel="traffic per communication (KB)")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"Mailbox cost model: lines = equations, dots = simulated post offices ({args.trials} mails each)")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
