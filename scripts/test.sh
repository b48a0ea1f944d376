#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite: on the compiled hot
# path (when set-up could build it), then again on the pure-Python sources.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
if .venv/bin/python -c 'import sys, sgcs._compiled as c; sys.exit(c.MODE != "native")'; then
    echo "tests: compiled hot path (mypyc)" >&2
    SGCS_EXPECT_NATIVE=1 .venv/bin/python -m pytest "$@"
    echo "tests: again on the pure-Python sources (SGCS_PURE_PYTHON=1)" >&2
fi
SGCS_PURE_PYTHON=1 exec .venv/bin/python -m pytest "$@"
