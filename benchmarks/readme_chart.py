"""The README's performance chart, drawn from ``benchmarks/history.csv``.

    .venv/bin/python benchmarks/readme_chart.py [OUT.png]     (default docs/performance-history.png)

Each row of the history is one ``benchmarks/compare.py`` run: sgcs against
JGroups 2.12 in the same run, alternated, medians of three rounds. The chart
plots the two ratios (FIFO against ``udp.xml``, total order against
``sequencer.xml``) run by run, with the line 1.0 where sgcs equals JGroups.
Rows without a date (figures carried over, not measured) are left out.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORY = ROOT / "benchmarks" / "history.csv"
OUT = ROOT / "docs" / "performance-history.png"


def rows(path: Path = HISTORY) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["date"]]


def draw(history: list[dict[str, str]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    x = list(range(len(history)))
    for column, name, marker in (("fifo_ratio", "FIFO / JGroups udp.xml", "o"),
                                 ("total_ratio", "total order / JGroups sequencer.xml", "s")):
        points = [(i, float(r[column])) for i, r in zip(x, history) if r[column]]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=marker, label=name)
    ax.axhline(1.0, color="grey", linewidth=1, linestyle="--")
    ax.set_xticks(x, [r["date"][5:10] + " " + r["commit"][:7] for r in history], rotation=60, ha="right",
                  fontsize="x-small")
    ax.set_ylabel("sgcs / JGroups (msg/s)")
    ax.set_title("Throughput against JGroups 2.12, 4 members, 1 KB, same run (benchmarks/compare.py)",
                 fontsize="small")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    draw(rows(), out)
    print(f"readme_chart: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
