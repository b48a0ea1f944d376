#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
