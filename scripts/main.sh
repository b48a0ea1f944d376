#!/usr/bin/env bash
# README command 1: set up, then run the main job on embedded defaults: a
# simulation of the default scenario, with a printed summary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
out=${1:-runs/default}
rm -rf "$out"
.venv/bin/sgcs simulate --out "$out"
