"""PySpark analysis of sgcs traces (trace schema 1, docs/traces.md).

Every job takes DataFrames with a ``run`` column and returns small ones, so one
plan covers one run or hundreds:

session.py      the SparkSession (local[*] by default, quiet, sized to the input)
readers.py      run directories -> events (with ``pos``, trace order), net, stats, runs_meta
latency.py      delivery latency per order
reliability.py  per message, the fraction of live view members that delivered it
invariants.py   invariants 1 to 7 at scale (the counts of simulations/checks.py)
detection.py    failure detection time and false suspicions (benchmarks/membership.py)
load.py         load per live member by message type
views.py        view-change duration and blocked time
occupancy.py    buffer and flow-window occupancy (stats/)
report.py       ``sgcs analyze``: every job, report.md, metrics.json, plots.py's PNGs
sweep.py        ``sgcs sweep``: a grid of simulations as Spark tasks, then load and
                detection time against N; the sweep file (sweep_spec.py), the
                analysis and fits (sweep_analysis.py), the report (sweep_report.py)
"""
