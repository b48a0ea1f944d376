"""The outputs of ``sgcs sweep``: report.md, metrics.json, the summary line and the PNG plots.

Theory of operation
-------------------
sweep.py runs the points and analyses them; what it hands here is one
JSON-ready dict, ``metrics`` (``sweep``, ``runs``, ``load``, ``detection``,
``fits``), already reduced by Spark to small tables. Nothing here reads a
trace or starts Spark: each writer turns ``metrics`` into one output in
``DIR``. ``write_plots`` draws load vs N, load by msg_type vs N and
detection vs N (matplotlib, Agg backend chosen before pyplot is imported;
a plot without data is not drawn, so the report lists only the PNGs that
exist); ``write_json`` writes ``metrics.json`` with numpy scalars made plain
and NaN as null; ``write_report`` writes ``report.md`` (points, fit tables,
plots, and notes on what each figure means); ``headline`` is the few lines
printed on stdout. Plots and report share the axis labels in
``_PLOT_LABELS``, so a measure has one name everywhere.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .sweep_analysis import LOAD_METRICS, plain


# ------------------------------------------------------------------ plots

_PLOT_LABELS = {
    "msgs_per_member_per_s": "messages sent / member / s",
    "bytes_per_member_per_s": "bytes sent / member / s",
    "recv_msgs_per_member_per_s": "messages received / member / s",
    "recv_bytes_per_member_per_s": "bytes received / member / s",
    "first_suspicion_s": "first suspicion of the crashed node (s)",
    "exclusion_median_s": "median survivor excludes it (s)",
    "exclusion_max_s": "last survivor excludes it (s)",
}


def write_plots(out: Path, metrics: dict[str, Any]) -> list[str]:
    """The PNGs (matplotlib, Agg): load vs N, load by msg_type vs N, detection vs N."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    load, detection = pd.DataFrame(metrics["load"]), pd.DataFrame(metrics["detection"])
    fits = metrics["fits"]
    written = []
    if not load.empty:
        total = load[load["msg_type"] == "total"]
        total_fits = [f for f in fits["load"] if f["msg_type"] == "total"]
        written.append(_plot_measures(out / "load_vs_n.png", total, total_fits, LOAD_METRICS,
                                      "per-member load against N (all message types)"))
        written.append(_plot_types(out / "load_by_type_vs_n.png", load))
    if not detection.empty:
        written.append(_plot_measures(out / "detection_vs_n.png", detection, fits["detection"],
                                      ("first_suspicion_s", "exclusion_max_s"), "failure detection against N"))
    return written


def _plot_measures(path: Path, rows: Any, fits: list[dict[str, Any]], metrics: tuple[str, ...], title: str) -> str:
    """One panel per measure: every run as a dot, the log2 fit solid, the linear fit dashed."""
    import matplotlib.pyplot as plt

    columns = min(2, len(metrics))
    fig, axes = plt.subplots(math.ceil(len(metrics) / columns), columns, figsize=(6.5 * columns, 4.5 * math.ceil(
        len(metrics) / columns)), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for index, (series, runs) in enumerate(rows.groupby("series", sort=True)):
            fit = next((f for f in fits if f["series"] == series and f["metric"] == metric), None)
            _plot_series(ax, runs["nodes"], runs[metric], fit, series, f"C{index % 10}")
        if metric == "first_suspicion_s" and "suspect_timeout_s" in rows:
            bound = rows.groupby("nodes")["suspect_timeout_s"].mean()
            ax.plot(bound.index, bound.values, color="grey", linestyle=":", label="suspect_timeout")
        _log2_axis(ax, sorted(set(rows["nodes"])), _PLOT_LABELS.get(metric, metric))
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return _save(fig, path)


def _plot_series(ax: Any, nodes: Any, values: Any, fit: dict[str, Any] | None, series: str, color: str) -> None:
    import numpy as np

    ax.scatter(nodes, values, color=color, s=18, label=series)
    if fit is None:
        return
    ns = np.geomspace(min(fit["nodes"]), max(fit["nodes"]), 64)
    log_fit, lin = fit["log2"], fit["linear"]
    ax.plot(ns, log_fit["a"] + log_fit["b"] * np.log2(ns), color=color,
            label=f"a+b·log2 N: b={log_fit['b']:.3g}, R²={_r2(log_fit['r2'])} ({fit['verdict']})")
    ax.plot(ns, lin["a"] + lin["b"] * ns, color=color, linestyle="--", linewidth=0.8,
            label=f"a+b·N: b={lin['b']:.3g}, R²={_r2(lin['r2'])}")


def _plot_types(path: Path, load: Any) -> str:
    """Per series (rows): messages and bytes sent per member per second by msg_type, log y."""
    import matplotlib.pyplot as plt

    metrics = ("msgs_per_member_per_s", "bytes_per_member_per_s")
    types = sorted(set(load["msg_type"]) - {"total"})
    colors = {t: plt.get_cmap("tab20")(i % 20) for i, t in enumerate(types)} | {"other": "grey", "total": "black"}
    groups = list(load.groupby("series", sort=True))
    fig, axes = plt.subplots(len(groups), 2, figsize=(13, 4.2 * len(groups)), squeeze=False)
    for row, (series, rows) in zip(axes, groups):
        tables = [rows.groupby(["nodes", "msg_type"])[m].mean().unstack(fill_value=0.0) for m in metrics]
        keep = sorted(set().union(*(_main_types(table) for table in tables)))
        for ax, metric, table in zip(row, metrics, tables):
            rest = [c for c in table.columns if c not in keep and c != "total"]
            lines = {**{t: table[t] for t in keep}, "other": table[rest].sum(axis=1), "total": table["total"]}
            for msg_type, line in lines.items():
                ax.plot(line.index, line.values, marker="o", markersize=3, label=msg_type, color=colors[msg_type],
                        linewidth=2.2 if msg_type == "total" else 1.0)
            ax.set_yscale("log")
            _log2_axis(ax, list(table.index), _PLOT_LABELS[metric])
            ax.set_title(series, fontsize=9)
        row[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle("per-member load by message type against N (mean over seeds; small types summed as other)")
    return _save(fig, path)


def _main_types(table: Any, share: float = 0.01) -> set[str]:
    """The message types that reach ``share`` of the total at some N."""
    return {c for c in table.columns if c != "total" and (table[c] >= share * table["total"]).any()}


def _log2_axis(ax: Any, nodes: list[int], ylabel: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(nodes, [str(n) for n in nodes])
    ax.minorticks_off()
    ax.set_xlabel("N (nodes)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _r2(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# ------------------------------------------------------------------ report


def write_report(out: Path, metrics: dict[str, Any], plots: list[str]) -> Path:
    """report.md: the points, the fits in tables, the plots, and what the numbers mean."""
    sweep = metrics["sweep"]
    lines = [f"# sgcs sweep: {sweep['file']}", "",
             f"`{sweep['command']}`: {sweep['points']} points ({len(sweep['failed'])} failed) on "
             f"`{sweep['master']}` in {sweep['wall_seconds']:.1f} s wall "
             f"(simulations {sweep['simulate_seconds']:.1f} s, analysis {sweep['analysis_seconds']:.1f} s).", ""]
    lines += _points_section(metrics["runs"])
    lines += _load_section(metrics["fits"]["load"])
    lines += _detection_section(metrics["detection"], metrics["fits"]["detection"])
    lines += [f"![{name}]({name})" for name in plots] + [""]
    lines += _NOTES
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _points_section(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["## Points", "", "| run | N | series | seed | status | wall s | simulated events | reliability |",
             "|---|---:|---|---:|---|---:|---:|---:|"]
    for run in sorted(runs, key=lambda r: (r["series"], r["nodes"], r["seed"])):
        summary = run["summary"] or {}
        status = "ok" if run["ok"] else f"failed: {run['error']}"
        lines.append(f"| {run['name']} | {run['nodes']} | {run['series']} | {run['seed']} | {status} | "
                     f"{run['wall_seconds']:.1f} | {summary.get('sim_events', '')} | "
                     f"{_num(summary.get('reliability'))} |")
    return lines + [""]


def _load_section(fits: list[dict[str, Any]]) -> list[str]:
    header = ["| series | measure | msg_type | N | values | b per doubling | R² log2 | b per node | R² linear "
              "| exponent k | verdict |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    total = [f for f in fits if f["msg_type"] == "total"]
    by_type = [f for f in fits if f["msg_type"] != "total" and f["metric"] == "msgs_per_member_per_s"]
    lines = ["## Per-member load against N", "",
             "Fits of the mean over seeds at each N: y = a + b·log2 N (b: change per doubling of N) "
             "and y = a + b·N. Verdicts as explained in the notes.", "", "### All message types", ""]
    lines += header + [_fit_row(f, _PLOT_LABELS[f["metric"]], f["msg_type"]) for f in total]
    lines += ["", "### Messages sent per member per second, by message type", ""]
    lines += header + [_fit_row(f, "msgs sent", f["msg_type"]) for f in by_type]
    return lines + ["", "Bytes and received figures for every message type are in `metrics.json`.", ""]


def _detection_section(detection: list[dict[str, Any]], fits: list[dict[str, Any]]) -> list[str]:
    lines = ["## Failure detection against N", "",
             "| run | N | crashed | at s | first suspicion s | suspect_timeout s | exclusion median s "
             "| exclusion max s | survivors | never excluded |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in detection:
        lines.append(f"| {row['run']} | {row['nodes']} | {row['victim']} | {_num(row['at'])} | "
                     f"{_num(row['first_suspicion_s'])} | {_num(row['suspect_timeout_s'])} | "
                     f"{_num(row['exclusion_median_s'])} | {_num(row['exclusion_max_s'])} | "
                     f"{_num(row['survivors'])} | {_num(row['never_excluded'])} |")
    if not detection:
        lines.append("| (no crash in these runs) | | | | | | | | | |")
    lines += ["", "| series | measure | msg_type | N | values | b per doubling | R² log2 | b per node | R² linear "
              "| exponent k | verdict |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    lines += [_fit_row(f, f["metric"], "") for f in fits]
    return lines + [""]


def _fit_row(fit: dict[str, Any], measure: str, msg_type: str) -> str:
    values = ", ".join(_num(v) for v in fit["values"])
    nodes = f"{min(fit['nodes'])}..{max(fit['nodes'])} ({fit['n_points']})"
    return (f"| {fit['series']} | {measure} | {msg_type} | {nodes} | {values} | {_num(fit['log2']['b'])} | "
            f"{_r2(fit['log2']['r2'])} | {_num(fit['linear']['b'])} | {_r2(fit['linear']['r2'])} | "
            f"{_num(fit['exponent'])} | {fit['verdict']} |")


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


_NOTES = [
    "## Notes", "",
    "- Load per member = the run's net-table totals / live node-seconds (`sgcs.analysis.load`), per "
    "`msg_type` and in total (`total`); sent and received are counted separately (a multicast is one "
    "send and up to N−1 receives). `max_msgs_per_member_per_s` in `metrics.json` is the busiest member.",
    "- First suspicion: from the crash to the first `suspect` row targeting the crashed node, at any node. "
    "Exclusion: per survivor (a live node whose view held the crashed one), until it has installed a view "
    "without it; median and max over the survivors (`sgcs.analysis.detection`).",
    "- `suspect_timeout` = suspect_factor · ⌈log2 N⌉ · gossip_interval, the detector's bound for a first suspicion.",
    "- Verdict (`sgcs.analysis.fit`): *inconclusive* with fewer than 3 values of N; *flat* when the log2 fit "
    "changes by less than 10% of the mean over the N range; *decreasing* when it falls; *noisy* when neither "
    "model reaches R² 0.8; otherwise the model with the higher R². "
    "The exponent k is the slope of log y against log N (0: flat, 1: linear).",
]


# ------------------------------------------------------------------ metrics.json and the summary line


def write_json(path: Path, value: Any) -> None:
    import json

    def clean(item: Any) -> Any:
        if isinstance(item, dict):
            return {str(k): clean(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [clean(v) for v in item]
        return plain(item)

    path.write_text(json.dumps(clean(value), indent=2) + "\n")


def headline(metrics: dict[str, Any], report: Path) -> str:
    sweep = metrics["sweep"]
    lines = [f"swept {sweep['points'] - len(sweep['failed'])}/{sweep['points']} points in "
             f"{sweep['wall_seconds']:.1f} s wall; report: {report}"]
    for fit in metrics["fits"]["load"]:
        if fit["msg_type"] == "total" and fit["metric"] == "msgs_per_member_per_s":
            lines.append(f"  load [{fit['series']}]: msgs sent/member/s = {fit['log2']['a']:.3g} + "
                         f"{fit['log2']['b']:.3g}·log2 N (R² {_r2(fit['log2']['r2'])}; linear R² "
                         f"{_r2(fit['linear']['r2'])}): {fit['verdict']}")
    for fit in metrics["fits"]["detection"]:
        if fit["metric"] == "first_suspicion_s":
            lines.append(f"  detection [{fit['series']}]: first suspicion = {fit['log2']['a']:.3g} + "
                         f"{fit['log2']['b']:.3g}·log2 N s (R² {_r2(fit['log2']['r2'])}): {fit['verdict']}")
    return "\n".join(lines)
