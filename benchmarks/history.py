"""The headline throughput figure over time: one row in ``benchmarks/history.csv`` per run.

Usage::

    .venv/bin/python benchmarks/history.py [--total] [--runs 3] [--messages 20000] [--note TEXT]
                                           [--csv PATH] [--json OUT] [--jgroups-isolated] [--dry-run]

Runs the headline pair, ``sgcs bench --members 4 --messages 20000 --size 1000 --order fifo``
against JGroups 2.12 ``udp.xml`` (``/work/shared/bench/jgroups/run.sh 4 20000 1000 udp.xml``),
and with ``--total`` also ``--order total`` against ``sequencer.xml``. The systems
alternate (sgcs first in odd rounds, JGroups first in even ones), ``--runs`` rounds
(default 3), and the medians go into one new row appended to the CSV (created
with its header when missing). ``--dry-run`` prints the row and appends nothing.

Columns: ``date`` (UTC, ISO 8601, the run's start), ``commit`` (short sha of the
checkout's HEAD, ``+dirty`` when tracked files differ from it; history.csv itself
is not counted), ``cores`` (``os.cpu_count()``), ``sgcs_fifo_msgs`` and
``jgroups_udp_msgs`` (median msg/s received per member), ``fifo_ratio`` (sgcs /
JGroups), ``sgcs_total_msgs``, ``jgroups_seq_msgs``, ``total_ratio`` (empty without
``--total``), ``p50_ms`` and ``p99_ms`` (sgcs's delivery latency during the FIFO
runs, median over runs of the bench's own medians over members), ``runs``
(rounds that produced both figures of the FIFO pair, e.g. ``3``, or ``2/3``),
``note`` (``--note``, plus the message count when it is not 20,000 and failures).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

if __name__ == "__main__":  # run as a script: the repository goes on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.compare import (  # noqa: E402
    SGCS, Bout, Run, _exit_on_sigterm, alternate, git_commit, hot_path_problem, jgroups, log, median, sgcs_bench,
)

HERE = Path(__file__).resolve().parent
CSV_PATH = HERE / "history.csv"
COLUMNS = ("date", "commit", "cores", "sgcs_fifo_msgs", "jgroups_udp_msgs", "fifo_ratio", "sgcs_total_msgs",
           "jgroups_seq_msgs", "total_ratio", "p50_ms", "p99_ms", "runs", "note")
HEADLINE_MESSAGES = 20_000


def values(runs: list[Run], label: str, key: str) -> list[float | None]:
    out: list[float | None] = []
    for run in runs:
        if run.label == label:
            value = None if run.error else run.data.get(key)
            out.append(float(value) if isinstance(value, (int, float)) else None)
    return out


def number(value: float | None, digits: int = 0) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def quotient(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None or b == 0 else f"{a / b:.3f}"


def complete_rounds(runs: list[Run], labels: tuple[str, str]) -> int:
    """Rounds in which every job of the pair produced a figure."""
    ok: dict[int, int] = {}
    for run in runs:
        if run.label in labels and not run.error:
            ok[run.round] = ok.get(run.round, 0) + 1
    return sum(1 for count in ok.values() if count == len(labels))


def make_row(runs: list[Run], args: argparse.Namespace, started: float) -> dict[str, str]:
    m = args.messages
    sg_fifo, jg_udp = f"sgcs fifo 4x{m}x1000", f"jgroups udp.xml 4x{m}x1000"
    sg_total, jg_seq = f"sgcs total 4x{m}x1000", f"jgroups sequencer.xml 4x{m}x1000"
    fifo, udp = median(values(runs, sg_fifo, "rate_median")), median(values(runs, jg_udp, "rate_median"))
    total = median(values(runs, sg_total, "rate_median")) if args.total else None
    seq = median(values(runs, jg_seq, "rate_median")) if args.total else None
    complete = complete_rounds(runs, (sg_fifo, jg_udp))
    notes = [args.note] if args.note else []
    if m != HEADLINE_MESSAGES:
        notes.append(f"{m} messages per member")
    failed = [r for r in runs if r.error]
    if failed:
        notes.append(f"{len(failed)} of {len(runs)} runs failed: " + "; ".join(sorted({r.label for r in failed})))
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "commit": git_commit(),
        "cores": str(os.cpu_count() or ""),
        "sgcs_fifo_msgs": number(fifo), "jgroups_udp_msgs": number(udp), "fifo_ratio": quotient(fifo, udp),
        "sgcs_total_msgs": number(total), "jgroups_seq_msgs": number(seq), "total_ratio": quotient(total, seq),
        "p50_ms": number(median(values(runs, sg_fifo, "latency_p50_ms")), 2),
        "p99_ms": number(median(values(runs, sg_fifo, "latency_p99_ms")), 2),
        "runs": str(args.runs) if complete == args.runs else f"{complete}/{args.runs}",
        "note": " | ".join(notes),
    }


def append_row(path: Path, row: dict[str, str]) -> None:
    """Append ``row``; writes the header first when the file is missing or empty."""
    new = not path.exists() or path.stat().st_size == 0
    if not new and not path.read_text().endswith("\n"):
        with path.open("a") as handle:
            handle.write("\n")
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerow(row)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total", action="store_true", help="also total order against JGroups sequencer.xml")
    parser.add_argument("--runs", type=int, default=3, help="rounds (each system once per round; default 3)")
    parser.add_argument("--messages", type=int, default=HEADLINE_MESSAGES,
                        help="per member (default 20000, the headline; other values are noted in the row)")
    parser.add_argument("--note", default="", help="free text for the note column")
    parser.add_argument("--csv", type=Path, default=CSV_PATH, help=f"default {CSV_PATH}")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the raw runs here")
    parser.add_argument("--jgroups-isolated", action="store_true",
                        help="run JPerf on a private multicast port instead of run.sh's fixed 45588 (shared hosts)")
    parser.add_argument("--dry-run", action="store_true", help="print the row, append nothing")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.messages < 1:
        parser.error("--runs and --messages must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that the command under way is stopped too
    if not SGCS.exists():
        print(f"history: no {SGCS}: run scripts/setup.sh first", file=sys.stderr)
        return 2
    problem = hot_path_problem()
    if problem:  # a row of the pure-Python fallback would read as a regression of the code
        print(f"history: sgcs would run as pure Python ({problem}): run scripts/setup.sh first", file=sys.stderr)
        return 2
    m, iso = args.messages, args.jgroups_isolated
    bouts = [Bout([sgcs_bench(4, m, 1000, "fifo")], [jgroups(4, m, 1000, "udp.xml", iso)])]
    if args.total:
        bouts.append(Bout([sgcs_bench(4, m, 1000, "total")], [jgroups(4, m, 1000, "sequencer.xml", iso)]))
    started = time.time()
    log(f"history: sgcs {git_commit()}, {args.runs} rounds of {'fifo+total' if args.total else 'fifo'} x {m}")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="sgcs-history-cwd-") as cwd:
        alternate("history", bouts, args.runs, Path(cwd), runs)
    row = make_row(runs, args, started)
    print(",".join(COLUMNS))
    print(",".join(f'"{v}"' if "," in v else v for v in row.values()))
    if args.json:
        args.json.write_text(json.dumps({"row": row, "runs": [asdict(r) for r in runs]}, indent=1))
    if not row["sgcs_fifo_msgs"] or not row["jgroups_udp_msgs"]:
        log("history: no figure for one side of the FIFO pair; nothing appended")
        return 1
    if args.dry_run:
        log("history: --dry-run, nothing appended")
    else:
        append_row(args.csv, row)
        log(f"history: appended to {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
