"""report.md: the metrics of report.py as Markdown tables, with the plots.

Theory of operation
-------------------
``render`` takes the JSON-ready metrics dict (the content of metrics.json)
and returns the Markdown text. Each section is one small function over all
runs, so that several runs line up in one table. Numbers are formatted for
reading (ms for latencies, 4 decimals for fractions); metrics.json keeps
the full precision. A plot that could not be drawn (no data) is named as
such instead of linked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Runs = dict[str, dict[str, Any]]


def _name(run: str) -> str:
    return Path(run).name or run


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out + [""]


def _plot(plots: dict[str, Any], key: str, title: str) -> list[str]:
    name = plots.get(key)
    return [f"![{title}]({name})", ""] if name else [f"*{title}: no data to plot.*", ""]


def _runs(runs: Runs) -> list[str]:
    rows = [[_name(r), m["meta"].get("nodes"), _f(m["meta"].get("duration"), 1), m["meta"].get("seed"),
             _f(m["meta"].get("loss"), 3), m["rows"]["events"], m["rows"]["net"], m["rows"]["stats"] or "-"]
            for r, m in runs.items()]
    return ["## Runs", ""] + _table(["run", "nodes", "duration (s)", "seed", "loss", "event rows", "net rows",
                                     "stats rows"], rows)


def _latency(runs: Runs, plots: dict[str, Any]) -> list[str]:
    rows = [[_name(r), order, v["count"], _ms(v["p50"]), _ms(v["p90"]), _ms(v["p99"]), _ms(v["max"])]
            for r, m in runs.items() for order, v in m["latency"].items()]
    text = ["## Delivery latency", "", "Send to first delivery at each member other than the sender, "
            "per order (ms).", ""]
    return text + _table(["run", "order", "deliveries", "p50", "p90", "p99", "max"], rows) + \
        _plot(plots, "latency_cdf", "latency CDF")


def _reliability(runs: Runs, plots: dict[str, Any]) -> list[str]:
    rows = [[_name(r), m["reliability"].get("messages", 0), _f(m["reliability"].get("mean"), 4),
             _f(m["reliability"].get("min"), 4), _f(m["reliability"].get("full_fraction"), 4)]
            for r, m in runs.items()]
    text = ["## Reliability", "", "Per multicast, the fraction of the live members of its send view that "
            "delivered it (the last 2 s of sends and rolled-back messages excluded).", ""]
    everyone = bool(runs) and all(m["reliability"].get("full_fraction") == 1.0 for m in runs.values())
    tail = ["Every counted message reached every live member of its send view: there is no spread to "
            "draw.", ""] if everyone else _plot(plots, "reliability", "reliability histogram")
    return text + _table(["run", "messages", "mean", "min", "share at 100%"], rows) + tail


def _invariants(runs: Runs) -> list[str]:
    keys = list(next(iter(runs.values()))["invariants"])
    rows = [[k] + [m["invariants"][k]["count"] for m in runs.values()] for k in keys]
    text = ["## Invariants", "", "Violations of invariants 1 to 7 (docs/guarantees.md); 3 is checked on total "
            "and safe groups, 4 on causal, total and safe ones.", ""]
    text += _table(["invariant"] + [_name(r) for r in runs], rows)
    for run, m in runs.items():
        for key, v in m["invariants"].items():
            for example in v["examples"]:
                text.append(f"- {_name(run)} {key}: `{json.dumps(example, default=str)}`")
    return text + [""]


def _detection(runs: Runs) -> list[str]:
    crashes = [[_name(r), c["node"], _f(c["t"], 2), _f(c["first_suspicion_s"]), _f(c.get("first_suspicion_rounds"), 1),
                _f(c["exclusion_median_s"]), _f(c["exclusion_max_s"]), f"{c['never_excluded']}/{c['survivors']}"]
               for r, m in runs.items() for c in m["detection"]["crashes"]]
    false = [[_name(r), f.get("suspects"), f.get("false_suspects"), _f(f.get("false_per_node_per_s"), 5)]
             for r, m in runs.items() for f in [m["detection"]["false_suspicions"]]]
    text = ["## Failure detection", ""]
    text += _table(["run", "crashed", "t", "first suspect (s)", "(rounds)", "exclusion median (s)",
                    "exclusion max (s)", "never excluded"], crashes) if crashes else ["No crashes.", ""]
    return text + _table(["run", "suspects", "false suspects", "false / node / s"], false)


def _load(runs: Runs, plots: dict[str, Any]) -> list[str]:
    rows = [[_name(r), m["meta"].get("nodes"), _f(t.get("msgs_per_member_per_s"), 2),
             _f(t.get("bytes_per_member_per_s"), 0), _f(t.get("recv_msgs_per_member_per_s"), 2),
             _f(t.get("recv_bytes_per_member_per_s"), 0)]
            for r, m in runs.items() for t in [m["load"]["total"]]]
    text = ["## Load per member", "", "Per live member per second, all message types (by type in the plot "
            "and in metrics.json).", ""]
    return text + _table(["run", "N", "msgs sent", "bytes sent", "msgs received", "bytes received"], rows) + \
        _plot(plots, "load_by_type", "load by message type")


def _views(runs: Runs, plots: dict[str, Any]) -> list[str]:
    rows = [[_name(r), v["counts"].get("installed"), v["counts"].get("distinct_ids"), v["counts"].get("optimistic"),
             v["changes"].get("changes"), _f(v["changes"].get("to_all_median_s")), _f(v["changes"].get("to_all_max_s")),
             v["blocked"].get("changes"), _f(v["blocked"].get("total_s")), _f(v["blocked"].get("median_s")),
             _f(v["blocked"].get("max_s")), v["blocked"].get("unresolved", 0)]
            for r, m in runs.items() for v in [m["views"]]]
    header = ["run", "installed rows", "view ids", "optimistic rows", "changes", "change median (s)",
              "change max (s)", "blocked spans", "blocked total (s)", "blocked median (s)", "blocked max (s)",
              "unresolved"]
    return ["## View changes", ""] + _table(header, rows) + _plot(plots, "view_changes", "view changes")


def _occupancy(runs: Runs, plots: dict[str, Any]) -> list[str]:
    rows = [[_name(r), group] + [v[f"{m}_{s}"] for m in ("buffered", "window") for s in ("p50", "p99", "max")]
            for r, run_metrics in runs.items() if isinstance(run_metrics["occupancy"], dict)
            for group, v in run_metrics["occupancy"].items()]
    text = ["## Buffer and window occupancy", ""]
    missing = [_name(r) for r, m in runs.items() if not isinstance(m["occupancy"], dict)]
    if missing:
        text += [f"Not recorded (no stats/ dataset): {', '.join(missing)}.", ""]
    if rows:
        text += _table(["run", "group", "buffered p50", "p99", "max", "window p50", "p99", "max"], rows)
        text += _plot(plots, "occupancy", "occupancy over time")
    return text


def render(metrics: dict[str, Any]) -> str:
    runs, plots = metrics["runs"], metrics.get("plots", {})
    lines = ["# sgcs analysis report", "",
             f"Spark master `{metrics.get('spark_master')}`, {metrics.get('wall_seconds')} s.", ""]
    lines += _runs(runs) + _latency(runs, plots) + _reliability(runs, plots) + _invariants(runs)
    lines += _detection(runs) + _load(runs, plots) + _views(runs, plots) + _occupancy(runs, plots)
    return "\n".join(lines)
