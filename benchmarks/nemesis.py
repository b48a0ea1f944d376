"""A Jepsen-style nemesis: real member processes on network namespaces, faults
injected from a seed, the shared trace checked at the end.

    python benchmarks/nemesis.py --members 5 --seconds 60 --order total --seed S
        [--faults loss,delay,reorder,duplicate,partition,oneway,kill,pause,ratelimit]
        [--overlap 2] [--rate 5] [--workload group|queue] [--outage MEMBER:START:END]
        [--keep DIR] [--json OUT]

This is the command line. The harness (the fault schedule, the ``tc`` and
classic-BPF programs that make each fault, the user-space link, the member
processes, the merged trace and its checks) is ``tests/_nemesis.py``, whose
docstring says how each fault is made; ``tests/test_nemesis.py`` runs the
same code. ``--help`` lists every option; ``docs/nemesis.md`` says more.
Exit 0 only with 0 violations, every message of a live sender with an
outcome, and a settled group; 2 when namespaces cannot be made here.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Sequence

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]  # the harness: tests/_nemesis.py

from _nemesis import netns, parse, replay_command, run, summary  # noqa: E402


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    reason = netns.unavailable(tc=True)
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    print(f"replay: {replay_command(args)}", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # tear down as on Ctrl-C
    workdir = args.keep if args.keep is not None else Path(tempfile.mkdtemp(prefix="sgcs-nemesis-"))
    workdir.mkdir(parents=True, exist_ok=True)
    outcome = run(args, workdir, say=lambda text: print(text, flush=True))
    print(summary(outcome, args), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({**outcome.__dict__, "ok": outcome.ok(), "replay": replay_command(args)},
                                        indent=2) + "\n")
    if args.keep is None:
        if outcome.ok():
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept the run directory: {workdir}")
    return 0 if outcome.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
