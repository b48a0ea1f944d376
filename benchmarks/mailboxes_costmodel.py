"""The mailbox paper's cost model (section 4.2) against the real post offices.

Over a grid of rho1, rho2, q: the mean time and traffic of ``costmodel.simulate``
(the real post offices on a timed network) against equation (1) and the
corrected equation (2), and against the variant with local forwards (the
simulation forwards a mail to a migrating receiver in the sender's domain
too; the paper's rho1 term has no q). Then the migration cost of one move
against equation (3), C_mgt = (D_fri + 2) C_ctl, and the paper's figure 5
experiment (100 migrations, eta in {0.05, 0.1, 0.2}, xi varied) against
C = N_inter-mgt C_mgt. Prints tables and the largest relative errors, and
plots (default docs/mailboxes_cost.png).

    PYTHONPATH=. python benchmarks/mailboxes_costmodel.py [--trials 3000] [--plot PATH]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sgcs.services.mailboxes.costmodel import (  # noqa: E402
    expected_time,
    expected_time_with_local_forwards,
    expected_total_migration_cost,
    expected_traffic,
    expected_traffic_with_local_forwards,
    migration_cost,
    simulate,
    simulate_figure5,
    simulate_migration,
)

ETAS = (0.05, 0.1, 0.2)
XIS = (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.2)


def communication_grid(trials: int, seed: int) -> list[dict[str, float]]:
    """Simulated and modelled T and D at every grid point; prints the table."""
    grid = [(r1, r2, q) for r1 in (0.1, 0.3, 0.5, 0.7) for r2 in (0.1, 0.2, 0.3) for q in (0.0, 0.1, 0.3, 0.5)
            if r1 + r2 <= 1.0]
    rows = []
    print(f"{'rho1':>4} {'rho2':>4} {'q':>3} | {'T sim':>6} {'T (1)':>6} {'err':>6} {'T var':>6} {'err':>6} | "
          f"{'D sim':>6} {'D (2)':>6} {'err':>6} {'D var':>6} {'err':>6} | acks KB")
    for r1, r2, q in grid:
        m = simulate(r1, r2, q, trials, seed)
        row = {"rho1": r1, "rho2": r2, "q": q, "t_sim": m.time, "d_sim": m.traffic,
               "t_paper": expected_time(r1, r2, q), "d_paper": expected_traffic(r1, r2, q),
               "t_var": expected_time_with_local_forwards(r1, r2, q),
               "d_var": expected_traffic_with_local_forwards(r1, r2, q)}
        for key in ("t_paper", "d_paper", "t_var", "d_var"):
            row["e_" + key] = (row[key[0] + "_sim"] - row[key]) / row[key]
        rows.append(row)
        print(f"{r1:4.1f} {r2:4.1f} {q:3.1f} | {m.time:6.3f} {row['t_paper']:6.3f} {row['e_t_paper']:+6.1%} "
              f"{row['t_var']:6.3f} {row['e_t_var']:+6.1%} | {m.traffic:6.3f} {row['d_paper']:6.3f} "
              f"{row['e_d_paper']:+6.1%} {row['d_var']:6.3f} {row['e_d_var']:+6.1%} | {m.ack_traffic:.2f}")
    return rows


def worst(rows: list[dict[str, float]], keys: tuple[str, ...]) -> float:
    return max((abs(r["e_" + k]) for r in rows for k in keys), default=0.0)


def figure5(communications: int, seeds: int) -> list[tuple[float, float, float, float]]:
    """(eta, xi, mean simulated KB over ``seeds`` runs, model KB) per point; prints
    them with the standard error of the mean (the spread of the eta draws: every
    inter-domain move itself costs exactly D_fri + 2 control messages)."""
    print(f"\nfigure 5: 100 migrations, {communications} communications (D_fri = round(xi * {communications})), "
          f"mean of {seeds} seeds; messages = KB (C_ctl = 1 KB)")
    print(f"{'eta':>5} {'xi':>5} {'D_fri':>5} | {'sim KB':>7} {'(s.e.)':>6} {'C model':>7} {'err':>6}")
    points = []
    for eta in ETAS:
        for xi in XIS:
            runs = [simulate_figure5(eta, xi, communications, 100, seed) for seed in range(seeds)]
            sim = sum(r.cost_kb for r in runs) / seeds
            se = (sum((r.cost_kb - sim) ** 2 for r in runs) / max(seeds - 1, 1) / seeds) ** 0.5
            model = expected_total_migration_cost(100, eta, xi, communications)
            points.append((eta, xi, sim, model))
            print(f"{eta:5.2f} {xi:5.2f} {runs[0].friend_domains:5d} | {sim:7.2f} {se:6.2f} {model:7.2f} "
                  f"{(sim - model) / model:+6.1%}")
    return points


def plot(path: str, rows: list[dict[str, float]], points: list[tuple[float, float, float, float]],
         trials: int) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    for r1, r2, color in ((0.1, 0.1, "C0"), (0.3, 0.3, "C1"), (0.7, 0.2, "C2")):
        sel = [r for r in rows if r["rho1"] == r1 and r["rho2"] == r2]
        qs = [r["q"] for r in sel]
        for ax, key, name in ((axes[0], "t", "(1)"), (axes[1], "d", "(2)")):
            ax.plot(qs, [r[key + "_paper"] for r in sel], "-", color=color, label=f"eq. {name}, ρ1={r1}, ρ2={r2}")
            ax.plot(qs, [r[key + "_var"] for r in sel], ":", color=color)
            ax.plot(qs, [r[key + "_sim"] for r in sel], "o", color=color)
    axes[0].set(xlabel="q (probability the receiver is migrating)", ylabel="time per communication (KB/δ_inter)")
    axes[1].set(xlabel="q", ylabel="traffic per communication (KB)")
    for eta, color in zip(ETAS, ("C0", "C1", "C2")):
        at_eta = [p for p in points if p[0] == eta]
        axes[2].plot([p[1] for p in at_eta], [p[3] for p in at_eta], "-", color=color,
                     label=f"C = N_inter C_mgt, η={eta}")
        axes[2].plot([p[1] for p in at_eta], [p[2] for p in at_eta], "o", color=color)
    axes[2].set(xlabel="ξ (domains involved / communications)", ylabel="migration cost of 100 migrations (KB)")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"Mailbox cost model: solid = the paper's equations, dotted = with local forwards, "
                 f"dots = real post offices ({trials} mails per point)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=3000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--communications", type=int, default=50, help="communications per MI in figure 5")
    p.add_argument("--seeds", type=int, default=1000, help="runs per point of figure 5")
    p.add_argument("--plot", default="docs/mailboxes_cost.png")
    args = p.parse_args()
    rows = communication_grid(args.trials, args.seed)
    at_zero = [r for r in rows if r["q"] == 0.0]
    print(f"{len(rows)} points x {args.trials} communications; largest relative error of the simulation against")
    print(f"  the paper's (1), corrected (2), q = 0 ({len(at_zero)} points): "
          f"{worst(at_zero, ('t_paper', 'd_paper')):.2%}")
    print(f"  the paper's (1), corrected (2), all points: {worst(rows, ('t_paper', 'd_paper')):.2%} "
          f"(T {worst(rows, ('t_paper',)):.2%}, D {worst(rows, ('d_paper',)):.2%})")
    print(f"  the variant with local forwards, all points: {worst(rows, ('t_var', 'd_var')):.2%}")
    for friends in range(6):
        r = simulate_migration(friends)
        print(f"migration with D_fri={friends}: control {r['control_kb']:.0f} KB, (D_fri+2)C_ctl = "
              f"{migration_cost(friends):.0f} KB; acks {r['ack_kb']:.0f} KB")
    points = figure5(args.communications, args.seeds)
    print(f"figure 5: largest relative error of the mean over {args.seeds} seeds: "
          f"{max(abs(s - m) / m for _, _, s, m in points):.2%}")
    plot(args.plot, rows, points, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
