#!/usr/bin/env bash
# README command 2: set up, then run the test suite.
#
#   bash scripts/test.sh [--fast] [pytest arguments...]
#
# Without --fast: every test (both tiers), on the compiled hot path (when
# set-up could build it), then again on the pure-Python sources.
# With --fast: only the fast tier (-m "not integration": sans-I/O, simulator,
# property tests; no real processes, sockets, Spark, atheris, mypy or network
# namespaces), once, on the compiled hot path when it is built, else on the
# pure-Python sources. The tier list is in tests/conftest.py.
# Any other argument goes to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fast=0
args=()
for arg in "$@"; do
    if [[ "$arg" == "--fast" ]]; then fast=1; else args+=("$arg"); fi
done
bash scripts/setup.sh
native=0
if .venv/bin/python -c 'import sys, sgcs._compiled as c; sys.exit(c.MODE != "native")'; then native=1; fi
if (( fast )); then
    if (( native )); then
        echo "tests: fast tier, compiled hot path (mypyc)" >&2
        SGCS_EXPECT_NATIVE=1 exec .venv/bin/python -m pytest -m "not integration" ${args[@]+"${args[@]}"}
    fi
    echo "tests: fast tier, pure-Python sources" >&2
    SGCS_PURE_PYTHON=1 exec .venv/bin/python -m pytest -m "not integration" ${args[@]+"${args[@]}"}
fi
if (( native )); then
    echo "tests: compiled hot path (mypyc)" >&2
    SGCS_EXPECT_NATIVE=1 .venv/bin/python -m pytest ${args[@]+"${args[@]}"}
    echo "tests: again on the pure-Python sources (SGCS_PURE_PYTHON=1)" >&2
fi
SGCS_PURE_PYTHON=1 exec .venv/bin/python -m pytest ${args[@]+"${args[@]}"}
