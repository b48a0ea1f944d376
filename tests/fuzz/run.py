"""Long fuzz runs over the targets of ``targets.py`` (issue 8, part 4).

    .venv/bin/python tests/fuzz/run.py --target node --inputs 1000000
    .venv/bin/python tests/fuzz/run.py --target all --inputs 100000 --out fuzz-out
    .venv/bin/python tests/fuzz/run.py --replay fuzz-out/findings/node-<id>.bin

Engines: ``atheris`` (default when importable; coverage-guided libFuzzer, one
child process per target, since libFuzzer owns its process until it exits)
and ``random`` (seed corpus plus blind byte mutations; no coverage figure).
An exception out of a target does not stop the run: it is counted, and the
input is saved as ``OUT/findings/TARGET-ID.bin`` with its traceback in
``.txt``, so one run reports every distinct bug. Exit status 1 if any.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # ``fuzz.targets``, also when run as a script


class Recorder:
    """Runs a target on each input, keeping count and saving what raises."""

    def __init__(self, name: str, target: Callable[[bytes], None], out: Path) -> None:
        self.name, self.target, self.out = name, target, out
        self.inputs = self.exceptions = 0
        self.signatures: dict[str, str] = {}  # where it raised -> saved input
        self.started = time.perf_counter()

    def __call__(self, data: bytes) -> None:
        self.inputs += 1
        try:
            self.target(data)
        except Exception as exc:  # every exception out of a target is a finding
            self.exceptions += 1
            self._save(data, exc)

    def _save(self, data: bytes, exc: Exception) -> None:
        frames = traceback.extract_tb(exc.__traceback__)
        last = frames[-1] if frames else None
        signature = f"{type(exc).__name__} at {last.filename}:{last.lineno}" if last else type(exc).__name__
        if signature in self.signatures:
            return  # one reproducer per place is enough
        from fuzz.targets import input_id

        path = self.out / "findings" / f"{self.name}-{input_id(data)}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.with_suffix(".txt").write_text("".join(traceback.format_exception(exc)))
        self.signatures[signature] = str(path)
        print(f"FINDING {signature} -> {path}", file=sys.stderr, flush=True)

    def summary(self) -> dict[str, object]:
        wall = time.perf_counter() - self.started
        return {"target": self.name, "inputs": self.inputs, "wall_s": round(wall, 1),
                "execs_per_s": round(self.inputs / wall) if wall else 0, "exceptions": self.exceptions,
                "distinct": len(self.signatures), "findings": self.signatures}


def run_random(name: str, inputs: int, out: Path, seed: int, max_len: int) -> dict[str, object]:
    """Blind mutation of the seed corpus: the fallback without atheris."""
    from fuzz.targets import SEEDS, TARGETS

    rng, corpus = random.Random(seed), SEEDS[name] or [b""]
    recorder = Recorder(name, TARGETS[name], out)
    for _ in range(inputs):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 8)):
            pos = rng.randint(0, len(data))
            edit = rng.randrange(4)
            if edit == 0 and pos < len(data):
                data[pos] ^= 1 << rng.randrange(8)
            elif edit == 1:
                data[pos:pos] = rng.randbytes(rng.randint(1, 8))
            elif edit == 2:
                del data[pos : pos + rng.randint(1, 8)]
            else:
                data[pos:pos] = rng.choice(corpus)[: rng.randint(0, 32)]
        recorder(bytes(data[:max_len]))
    return recorder.summary()


def atheris_child(name: str, inputs: int, out: Path, seed: int, max_len: int) -> None:
    """In its own process: libFuzzer calls the target until ``inputs`` ran,
    then the summary is written and the process ends (libFuzzer runs no
    atexit handlers, so this is the one place that knows the count)."""
    import atheris

    with atheris.instrument_imports(include=["sgcs", "fuzz"]):
        from fuzz.targets import SEEDS, TARGETS
    corpus = out / "corpus" / name
    corpus.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(SEEDS[name]):
        (corpus / f"seed-{i}").write_bytes(data)
    recorder = Recorder(name, TARGETS[name], out)

    def one_input(data: bytes) -> None:
        recorder(data)
        if recorder.inputs >= inputs:
            (out / f"summary-{name}.json").write_text(json.dumps(recorder.summary()))
            sys.stderr.flush()
            os._exit(0)

    atheris.Setup([sys.argv[0], str(corpus), f"-seed={seed}", f"-max_len={max_len}", "-timeout=30",
                   f"-artifact_prefix={out}/", "-print_pcs=0"], one_input)
    atheris.Fuzz()


def run_atheris(name: str, inputs: int, out: Path, seed: int, max_len: int) -> dict[str, object]:
    summary_path = out / f"summary-{name}.json"
    summary_path.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--child", "--target", name, "--inputs", str(inputs), "--out", str(out),
               "--seed", str(seed), "--max-len", str(max_len)]
    log = out / f"{name}.log"  # libFuzzer's progress lines and our findings, to follow a long run
    with log.open("w") as stderr:
        proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=stderr)
    lines = log.read_text(errors="replace").splitlines()
    if not summary_path.exists():  # libFuzzer stopped it: a crash, a timeout or running out of memory
        tail = "\n".join(lines[-30:])
        return {"target": name, "inputs": None, "exceptions": None, "error": f"exit {proc.returncode}\n{tail}"}
    summary = json.loads(summary_path.read_text())
    status = [line for line in lines if " cov: " in line]
    found = re.search(r"cov: (\d+) ft: (\d+) corp: (\d+)", status[-1]) if status else None
    if found:  # libFuzzer's edge and feature counts: a coverage-ish figure
        summary.update(cov=int(found[1]), ft=int(found[2]), corpus=int(found[3]))
    return summary


def replay(paths: list[str]) -> int:
    from fuzz.targets import TARGETS

    for path in paths:
        name = Path(path).name.rsplit("-", 1)[0]
        print(f"replaying {path} on {name}")
        TARGETS[name](Path(path).read_bytes())  # raises with the full traceback if still broken
    print("no exception")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="all", help="node, a decode_*_untrusted name, or all")
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per target")
    parser.add_argument("--engine", choices=("atheris", "random"), default=None)
    parser.add_argument("--out", type=Path, default=Path("fuzz-out"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=4096)
    parser.add_argument("--replay", nargs="+", metavar="FILE")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        atheris_child(args.target, args.inputs, args.out, args.seed, args.max_len)
        return 0
    from fuzz.targets import TARGETS

    names = list(TARGETS) if args.target == "all" else [args.target]
    if unknown := [n for n in names if n not in TARGETS]:
        parser.error(f"unknown target {unknown[0]}; choose from: all, {', '.join(TARGETS)}")
    engine = args.engine or ("atheris" if _has_atheris() else "random")
    run = run_atheris if engine == "atheris" else run_random
    failed = False
    for name in names:
        started = time.perf_counter()
        summary = run(name, args.inputs, args.out, args.seed, args.max_len)
        summary["engine"], summary["wall_s"] = engine, round(time.perf_counter() - started, 1)
        print(json.dumps(summary), flush=True)
        failed |= summary.get("exceptions") != 0
    return 1 if failed else 0


def _has_atheris() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
