#!/usr/bin/env bash
# README command 1: set up, then run the main job on embedded defaults: a
# simulation of the default scenario, then `sgcs analyze` on its trace with
# local Spark, which prints the headline figures (latency p50/p99 per order,
# mean reliability, invariant violations, load per member) and where the
# report is (RUN/report/: report.md, metrics.json, PNG plots).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
out=${1:-runs/default}
rm -rf "$out"
.venv/bin/sgcs simulate --out "$out"
echo
.venv/bin/sgcs analyze "$out" --master "local[*]"
