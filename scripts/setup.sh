#!/usr/bin/env bash
# One-time, idempotent set-up on a fresh Debian machine with Python >= 3.11:
# a Java runtime for Spark (when `java` is missing), a virtual environment in
# .venv, and sgcs with every extra. Sourced by main.sh and test.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_install() {
    echo "setup: installing $* with apt" >&2
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "setup: Python >= 3.11 is required, found $("$PYTHON" --version 2>&1)" >&2; exit 1; }
command -v java >/dev/null 2>&1 || apt_install default-jre-headless
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
# A C compiler and the Python headers for the compiled hot path (mypyc); without
# them sgcs still runs, as pure Python.
command -v gcc >/dev/null 2>&1 || apt_install gcc || true
"$PYTHON" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))' \
    || apt_install python3-dev || true

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.sgcs-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    SGCS_NO_NATIVE=1 .venv/bin/python -m pip install -q -e '.[analysis,dev,metrics]'  # build_native.py compiles in place
    touch "$stamp"
fi
# The hot modules compiled with mypyc (sgcs/_compiled.py), rebuilt when a source
# is newer than its extension: about 40 s. On failure sgcs runs as pure Python.
.venv/bin/python scripts/build_native.py \
    || echo "setup: the compiled hot path could not be built; sgcs runs as pure Python (slower)" >&2
# Byte-compile the package: an editable install leaves sgcs uncompiled, and
# where PYTHONDONTWRITEBYTECODE is set every process would compile it again
# from source at start-up (about 80 ms of CPU each; 8 members starting
# together on 2 cores lost 0.3 s to it). Quick when nothing changed.
.venv/bin/python -m compileall -q -j 0 sgcs simulations spark_analysis >/dev/null
# A class-data-sharing archive of the classes Spark loads (spark_analysis/class_archive.py):
# the JVM of `sgcs analyze` starts in half the time. Built once per Java and pyspark, about 30 s.
.venv/bin/python -m sgcs.analysis.build_class_archive \
    || echo "setup: no Spark class archive; sgcs analyze starts its JVM without it (slower)" >&2
