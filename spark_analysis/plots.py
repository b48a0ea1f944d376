"""The PNG plots of ``sgcs analyze`` (matplotlib, Agg backend).

Theory of operation
-------------------
Spark reduces every trace to small per-run tables (quantiles, histogram
bins, per-type rates, per-bucket occupancy, per-change durations); report.py
turns them into pandas frames and hands them here. Each function draws one
figure into ``out`` and returns the file name, or None when there is nothing
to draw (a trace without sends, crashes or stats), so the report can say
"no data" instead of showing an empty axis. Runs are told apart by the last
part of their path; the Agg backend is chosen before pyplot is imported, so
plotting works without a display.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (the backend must be chosen first)

DPI = 110


def label(run: str) -> str:
    return Path(run).name or run


def _save(fig: Any, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    return name


def latency_cdf(cdf: Any, out: Path) -> str | None:
    """One CDF line per (run, order); x in milliseconds, log scale when it spans decades."""
    if cdf.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    multi = cdf["run"].nunique() > 1
    for _, row in cdf.iterrows():
        ms = [v * 1000.0 for v in row["latency"]]
        name = f"{label(row['run'])} {row['order']}" if multi else row["order"]
        ax.plot(ms, row["quantile"], label=name)
    positive = [v for lat in cdf["latency"] for v in lat if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_xscale("log")
    ax.set_xlabel("delivery latency (ms)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_title("Delivery latency CDF per order")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, out, "latency_cdf.png")


def reliability_histogram(hist: Any, bins: int, out: Path) -> str | None:
    """Share of messages per reliability bin (1.0 is its own bar); nothing
    when every message is in that bar (the report says so in words)."""
    if hist.empty or hist.loc[hist["share"] > 0, "low"].min() >= 1.0:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    runs = list(dict.fromkeys(hist["run"]))
    width = 1.0 / bins / max(len(runs), 1)
    for i, run in enumerate(runs):
        mine = hist[hist["run"] == run]
        ax.bar(mine["low"] + i * width, mine["share"], width=width, align="edge", label=label(run))
    ax.set_xlabel("fraction of live view members that delivered the message")
    ax.set_ylabel("share of messages")
    ax.set_yscale("log")
    ax.set_title("Reliability per message")
    ax.grid(True, alpha=0.3)
    if len(runs) > 1:
        ax.legend()
    return _save(fig, out, "reliability.png")


def load_by_type(load: Any, out: Path) -> str | None:
    """Sent messages and bytes per member per second, by msg_type (bars per run)."""
    if load.empty:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, column, title in ((axes[0], "msgs_per_member_per_s", "messages / member / s"),
                              (axes[1], "bytes_per_member_per_s", "bytes / member / s")):
        table = load.pivot_table(index="msg_type", columns="run", values=column, aggfunc="sum").fillna(0.0)
        table.columns = [label(c) for c in table.columns]
        table.plot.barh(ax=ax, legend=len(table.columns) > 1)
        ax.set_xlabel(title)
        ax.set_ylabel("")
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle("Load per member by message type (sent)")
    return _save(fig, out, "load_by_type.png")


def occupancy(series: Any, out: Path) -> str | None:
    """Buffered records and window occupancy over time: mean and max over nodes."""
    if series is None or series.empty:
        return None
    # The flow window counts the unstable records that are buffered: the two
    # series are often equal, and then one panel says it.
    same = all((series[f"buffered_{k}"] == series[f"window_{k}"]).all() for k in ("max", "mean"))
    metrics = ("buffered",) if same else ("buffered", "window")
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics) + (1 if same else 0), 4.5),
                             sharex=True, squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for (run, group), rows in series.groupby(["run", "group"], sort=False):
            name = f"{label(run)} {group}"
            ax.plot(rows["t"], rows[f"{metric}_max"], label=f"{name} max")
            ax.plot(rows["t"], rows[f"{metric}_mean"], linestyle="--", label=f"{name} mean")
        ax.set_xlabel("t (s)")
        ax.set_ylabel("buffered = flow window in use" if same else metric)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("Buffer and flow-window occupancy")
    return _save(fig, out, "occupancy.png")


def view_changes(changes: Any, blocked: Any, out: Path) -> str | None:
    """Each view change's duration at its start time, and the blocked spans per node."""
    if changes.empty and blocked.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run, rows in changes.groupby("run", sort=False):
        ax.scatter(rows["start"], rows["to_all_s"] * 1000.0, marker="o", label=f"{label(run)} change (to all)")
    for run, rows in blocked.groupby("run", sort=False):
        done = rows.dropna(subset=["span"])
        ax.scatter(done["started"], done["span"] * 1000.0, marker=".", alpha=0.4, label=f"{label(run)} blocked span")
    ax.set_xlabel("t (s)")
    ax.set_ylabel("duration (ms)")
    ax.set_title("View changes: duration to every installation, and optimistic (blocked) spans")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, out, "view_changes.png")
