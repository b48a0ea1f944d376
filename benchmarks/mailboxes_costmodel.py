"""The mailbox paper's cost model (section 4.2) against the real post offices (docs/mailboxes.md).

Three parts, each with a table and a plot under docs/:

* ``figure4``: equations (1) and (2) (corrected) against ``costmodel.simulate``
  in its paper mode at 48 points: rho1 in {0.1, 0.3, 0.5, 0.8} (0.1 is the
  paper's figure 4 remark, 0.8 the largest share of local receivers, where a
  local forward would show most) x rho2 in {0, 0.1, 0.2} (no address book, and
  up to rho1 + rho2 = 1, no unknown receiver) x q in {0, 0.1, 0.3, 0.5}. Every
  point: the error and how many standard errors of the simulated mean it is.
  The same points in the local-forwards mode, against the paper's equations
  and against that variant's. Plot: time and traffic against q, as figure 4.
* ``figure5``: the figure 5 experiment, 100 migrations, eta in {0.05, 0.1, 0.2},
  xi varied, on the real post offices, against C = N_inter-mgt C_mgt.
* ``baseline``: the paper's scheme against the home-relay baseline on the same
  drawn communications (home a third domain, or uniform among 4 domains),
  their migration costs, and one MI's task (communications + migrations).

    PYTHONPATH=. python benchmarks/mailboxes_costmodel.py [--part all|figure4|figure5|baseline] [--trials 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sgcs.services.mailboxes.costmodel import (  # noqa: E402
    Measured,
    compare_home_relay,
    expected_time,
    expected_time_home_relay,
    expected_time_with_local_forwards,
    expected_total_migration_cost,
    expected_traffic,
    expected_traffic_home_relay,
    expected_traffic_with_local_forwards,
    friend_domains_from_dispersion,
    migration_cost,
    migration_cost_home_relay,
    simulate,
    simulate_figure5,
    simulate_migration,
)

RHO1S = (0.1, 0.3, 0.5, 0.8)
RHO2S = (0.0, 0.1, 0.2)
QS = (0.0, 0.1, 0.3, 0.5)
GRID = [(r1, r2, q) for r1 in RHO1S for r2 in RHO2S for q in QS]
"""48 points; rho1 + rho2 <= 1 everywhere (at most 0.8 + 0.2)."""
ETAS = (0.05, 0.1, 0.2)
XIS = (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.2)
BASELINE_WORKLOADS = ((0.1, 0.1), (0.3, 0.4))
"""(rho1, rho2): the paper's figure 4 remark (most mail addressed through the home), and a domain-local one."""

Row = dict[str, float]


def _plt() -> Any:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return None
    return plt


def _err(measured: float, model: float) -> float:
    return (measured - model) / model


def _z(m: Measured, measured: float, model: float, sd: float) -> float:
    """The error in standard errors of the simulated mean (0 when every trial costs the same)."""
    se = sd / m.trials ** 0.5
    return (measured - model) / se if se > 0 else 0.0


def grid_row(r1: float, r2: float, q: float, trials: int, variant_trials: int, seed: int) -> Row:
    m = simulate(r1, r2, q, trials, seed, mode="paper")
    v = simulate(r1, r2, q, variant_trials, seed, mode="local_forwards")
    t1, d2 = expected_time(r1, r2, q), expected_traffic(r1, r2, q)
    tv, dv = expected_time_with_local_forwards(r1, r2, q), expected_traffic_with_local_forwards(r1, r2, q)
    return {"rho1": r1, "rho2": r2, "q": q, "t_sim": m.time, "t_eq": t1, "e_t": _err(m.time, t1),
            "z_t": _z(m, m.time, t1, m.time_sd), "d_sim": m.traffic, "d_eq": d2, "e_d": _err(m.traffic, d2),
            "z_d": _z(m, m.traffic, d2, m.traffic_sd), "acks": m.ack_traffic,
            "t_lf": v.time, "d_lf": v.traffic, "t_var": tv, "d_var": dv,
            "e_lf_paper": max(abs(_err(v.time, t1)), abs(_err(v.traffic, d2))),
            "e_lf_var": max(abs(_err(v.time, tv)), abs(_err(v.traffic, dv)))}


def figure4(trials: int, variant_trials: int, seed: int, path: str) -> list[Row]:
    print(f"figure 4: equations (1) and (2) corrected against the simulator, paper mode ({trials} communications "
          f"per point, point n seeded {seed} + n, so that the points' errors are independent); local-forwards mode "
          f"({variant_trials} per point, same seeds) against (1), (2) and its own form")
    print(f"{'rho1':>4} {'rho2':>4} {'q':>3} {'seed':>4} | {'T sim':>6} {'T (1)':>6} {'err':>7} {'z':>5} | {'D sim':>6} "
          f"{'D (2)':>6} {'err':>7} {'z':>5} | {'acks':>4} | {'T lf':>6} {'D lf':>6} {'vs (1),(2)':>10} {'vs own':>7}")
    rows = []
    for n, (r1, r2, q) in enumerate(GRID):
        r = grid_row(r1, r2, q, trials, variant_trials, seed + n)
        rows.append(r)
        print(f"{r1:4.1f} {r2:4.1f} {q:3.1f} {seed + n:4d} | {r['t_sim']:6.3f} {r['t_eq']:6.3f} {r['e_t']:+7.2%} {r['z_t']:+5.1f} | "
              f"{r['d_sim']:6.3f} {r['d_eq']:6.3f} {r['e_d']:+7.2%} {r['z_d']:+5.1f} | {r['acks']:4.2f} | "
              f"{r['t_lf']:6.3f} {r['d_lf']:6.3f} {r['e_lf_paper']:10.1%} {r['e_lf_var']:7.2%}")
    worst = max(rows, key=lambda r: max(abs(r["e_t"]), abs(r["e_d"])))
    print(f"paper mode, {len(rows)} points: largest |error| {max(abs(worst['e_t']), abs(worst['e_d'])):.2%} "
          f"(rho1={worst['rho1']}, rho2={worst['rho2']}, q={worst['q']}); time {max(abs(r['e_t']) for r in rows):.2%}, "
          f"traffic {max(abs(r['e_d']) for r in rows):.2%}; largest |z| "
          f"{max(max(abs(r['z_t']), abs(r['z_d'])) for r in rows):.2f}; "
          f"points beyond 5%: {sum(max(abs(r['e_t']), abs(r['e_d'])) > 0.05 for r in rows)}")
    print(f"local-forwards mode: against (1), (2) up to {max(r['e_lf_paper'] for r in rows):.1%}; against its own "
          f"form up to {max(r['e_lf_var'] for r in rows):.2%}")
    plot_figure4(path, rows, trials, variant_trials)
    return rows


def plot_figure4(path: str, rows: list[Row], trials: int, variant_trials: int) -> None:
    plt = _plt()
    if plt is None:
        return
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5), sharex=True)
    for col, r2 in enumerate(RHO2S):
        for r1, color in zip(RHO1S, ("C0", "C1", "C2", "C3")):
            sel = [r for r in rows if r["rho1"] == r1 and r["rho2"] == r2]
            qs = [r["q"] for r in sel]
            for row, key in ((0, "t"), (1, "d")):
                ax = axes[row][col]
                ax.plot(qs, [r[key + "_eq"] for r in sel], "-", color=color, label=f"ρ1={r1}: eq. ({row + 1})")
                ax.plot(qs, [r[key + "_sim"] for r in sel], "o", color=color)
                ax.plot(qs, [r[key + "_var"] for r in sel], ":", color=color, lw=1)
                ax.plot(qs, [r[key + "_lf"] for r in sel], "o", mfc="none", color=color, ms=7)
        axes[0][col].set_title(f"ρ2 = {r2}")
        axes[0][col].set_ylabel("time per communication (KB / δ_inter)")
        axes[1][col].set_ylabel("traffic per communication (KB)")
        axes[1][col].set_xlabel("q (probability the receiver is migrating between domains)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Mailbox paper, figure 4: lines = equations (1) and (2) corrected, dots = real post offices "
                 f"({trials} communications per point);\ndotted lines and hollow dots = a local receiver leaving the "
                 f"domain too (not the paper's model; {variant_trials} per point). C_ctl = 1 KB, C_mail = 4 KB, "
                 f"δ_intra = 10 δ_inter")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def figure5(communications: int, seeds: int, path: str) -> list[tuple[float, float, float, float, float]]:
    """(eta, xi, mean KB over ``seeds`` runs, its standard error, model KB) per point."""
    print(f"\nfigure 5: 100 migrations, {communications} communications (D_fri = round(xi * {communications})), "
          f"mean of {seeds} seeds (0 .. {seeds - 1}); messages = KB (C_ctl = 1 KB)")
    print(f"{'eta':>5} {'xi':>5} {'D_fri':>5} | {'N_inter':>7} {'sim KB':>7} {'(s.e.)':>6} {'C model':>7} {'err':>6}")
    points = []
    for eta in ETAS:
        for xi in XIS:
            runs = [simulate_figure5(eta, xi, communications, 100, seed) for seed in range(seeds)]
            sim = sum(r.cost_kb for r in runs) / seeds
            se = (sum((r.cost_kb - sim) ** 2 for r in runs) / max(seeds - 1, 1) / seeds) ** 0.5
            model = expected_total_migration_cost(100, eta, xi, communications)
            inter = sum(r.inter_domain for r in runs) / seeds
            points.append((eta, xi, sim, se, model))
            print(f"{eta:5.2f} {xi:5.2f} {runs[0].friend_domains:5d} | {inter:7.2f} {sim:7.2f} {se:6.2f} {model:7.2f} "
                  f"{_err(sim, model):+6.1%}")
    print(f"figure 5: largest relative error of the mean: {max(abs(_err(s, m)) for _, _, s, _, m in points):.2%}, "
          f"largest in standard errors: {max(abs(s - m) / se for _, _, s, se, m in points if se > 0):.2f}")
    plot_figure5(path, points, communications, seeds)
    return points


def plot_figure5(path: str, points: list[tuple[float, float, float, float, float]], communications: int,
                 seeds: int) -> None:
    plt = _plt()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for eta, color in zip(ETAS, ("C0", "C1", "C2")):
        at_eta = [p for p in points if p[0] == eta]
        ax.plot([p[1] for p in at_eta], [p[4] for p in at_eta], "-", color=color, label=f"η={eta}: C = N_inter C_mgt")
        ax.errorbar([p[1] for p in at_eta], [p[2] for p in at_eta], yerr=[2 * p[3] for p in at_eta], fmt="o",
                    color=color, capsize=3)
    ax.set(xlabel=f"ξ (domains involved / communications; D_fri = ξ × {communications})",
           ylabel="migration cost of 100 migrations (KB = messages)",
           title=f"Mailbox paper, figure 5: dots = real post offices (mean of {seeds} runs, ±2 s.e.)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def baseline(trials: int, seed: int, path: str) -> list[Row]:
    print(f"\nbaseline: the paper's scheme against home relay (every remote mail via the receiver's home), same "
          f"draws, {trials} communications per point, seed {seed}; 'apart' = home a third domain, '4 dom' = home "
          f"uniform among 4 domains")
    print(f"{'rho1':>4} {'rho2':>4} {'q':>3} {'home':>6} | {'T mbox':>6} {'T (1)':>6} {'T home':>6} {'T eq':>6} "
          f"{'saved':>6} | {'D mbox':>6} {'D (2)':>6} {'D home':>6} {'D eq':>6} {'saved':>6}")
    rows = []
    for r1, r2 in BASELINE_WORKLOADS:
        for q in QS:
            for domains in (None, 4):
                paper, relay = compare_home_relay(r1, r2, q, trials, seed, domains)
                exact = domains is None  # the equations suppose the home a third domain
                row = {"rho1": r1, "rho2": r2, "q": q, "domains": float(domains or 0), "t_mbox": paper.time,
                       "t_home": relay.time, "d_mbox": paper.traffic, "d_home": relay.traffic,
                       "t_eq": expected_time(r1, r2, q), "t_home_eq": expected_time_home_relay(r1, q),
                       "d_eq": expected_traffic(r1, r2, q), "d_home_eq": expected_traffic_home_relay(r1, q)}
                rows.append(row)
                eq = (lambda v: f"{v:6.2f}") if exact else (lambda v: f"{'-':>6}")
                print(f"{r1:4.1f} {r2:4.1f} {q:3.1f} {'apart' if exact else '4 dom':>6} | {paper.time:6.2f} "
                      f"{eq(row['t_eq'])} {relay.time:6.2f} {eq(row['t_home_eq'])} "
                      f"{1 - paper.time / relay.time:6.1%} | {paper.traffic:6.2f} {eq(row['d_eq'])} "
                      f"{relay.traffic:6.2f} {eq(row['d_home_eq'])} {1 - paper.traffic / relay.traffic:6.1%}")
    print("migration control per inter-domain move (KB, real post offices): D_fri | mailboxes (eq. 3) | home relay")
    for friends in (0, 1, 3, 5, 10):
        ours, theirs = simulate_migration(friends), simulate_migration(friends, scheme="home_relay")
        print(f"  {friends:5d} | {ours['control_kb']:5.0f} ({migration_cost(friends):.0f}) | "
              f"{theirs['control_kb']:5.0f} ({migration_cost_home_relay():.0f})")
    task(rows)
    plot_baseline(path, rows, trials)
    return rows


def task(rows: list[Row]) -> None:
    """One MI's task: 50 communications and 100 migrations at eta = 0.1 and
    xi = 0.1 (figure 5's middle), home apart: communication + migration KB."""
    communications, migrations, eta, xi = 50, 100, 0.1, 0.1
    friends = friend_domains_from_dispersion(xi, communications)
    print(f"one MI's task: {communications} communications, {migrations} migrations, eta={eta}, xi={xi} "
          f"(D_fri={friends}), home apart; KB = communications x D + eta x migrations x C_mgt")
    for row in rows:
        if row["domains"] or row["q"] not in (0.0, 0.3):
            continue
        ours = communications * row["d_mbox"] + eta * migrations * migration_cost(friends)
        theirs = communications * row["d_home"] + eta * migrations * migration_cost_home_relay()
        print(f"  rho1={row['rho1']} rho2={row['rho2']} q={row['q']}: mailboxes {ours:6.0f} KB, "
              f"home relay {theirs:6.0f} KB ({1 - ours / theirs:+.1%} saved)")


def plot_baseline(path: str, rows: list[Row], trials: int) -> None:
    plt = _plt()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.5))
    for (r1, r2), style in zip(BASELINE_WORKLOADS, ("-", "--")):
        apart = [r for r in rows if r["rho1"] == r1 and r["rho2"] == r2 and not r["domains"]]
        four = [r for r in rows if r["rho1"] == r1 and r["rho2"] == r2 and r["domains"]]
        qs = [r["q"] for r in apart]
        for ax, key in ((axes[0], "t"), (axes[1], "d")):
            for scheme, color, name in (("mbox", "C0", "mailboxes"), ("home", "C3", "home relay")):
                model = key + ("_eq" if scheme == "mbox" else "_home_eq")
                ax.plot(qs, [r[model] for r in apart], style, color=color, label=f"{name}, ρ1={r1}, ρ2={r2}")
                ax.plot(qs, [r[f"{key}_{scheme}"] for r in apart], "o", color=color)
                ax.plot(qs, [r[f"{key}_{scheme}"] for r in four], "x" if style == "-" else "+", color=color, ms=9,
                        label=f"{name}, ρ1={r1}, ρ2={r2}, home among 4 domains")
    axes[0].set(xlabel="q", ylabel="time per communication (KB / δ_inter)")
    axes[1].set(xlabel="q", ylabel="traffic per communication (KB)")
    for ax in axes:
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8)  # below: the data fill both panels
    fig.suptitle(f"The paper's mailboxes against a home-relay baseline on the same draws ({trials} communications per "
                 f"point):\nlines = equations (home a third domain), dots = real post offices (same), crosses = real "
                 f"post offices, home uniform among 4 domains")
    fig.tight_layout(rect=(0.0, 0.17, 1.0, 1.0))
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("all", "figure4", "figure5", "baseline"), default="all")
    p.add_argument("--trials", type=int, default=20000, help="communications per point, paper mode")
    p.add_argument("--variant-trials", type=int, default=3000, help="communications per point, local-forwards mode")
    p.add_argument("--baseline-trials", type=int, default=5000, help="communications per point of the baseline")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--communications", type=int, default=50, help="communications per MI in figure 5")
    p.add_argument("--seeds", type=int, default=1000, help="runs per point of figure 5")
    p.add_argument("--docs", default="docs", help="directory of the plots")
    args = p.parse_args()
    started = time.perf_counter()
    if args.part in ("all", "figure4"):
        figure4(args.trials, args.variant_trials, args.seed, os.path.join(args.docs, "mailboxes_figure4.png"))
    if args.part in ("all", "figure5"):
        figure5(args.communications, args.seeds, os.path.join(args.docs, "mailboxes_figure5.png"))
    if args.part in ("all", "baseline"):
        baseline(args.baseline_trials, args.seed, os.path.join(args.docs, "mailboxes_baseline.png"))
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
