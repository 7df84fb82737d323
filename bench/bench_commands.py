"""``litehit sweep`` and ``litehit simulate`` as commands (process start to exit), per
staircase engine.

Usage: PYTHONPATH=. python bench/bench_commands.py [TRACE.jsonl] [--copies 1,2,4,8]
                                                  [--repeat 5] [--touch-order ORDER]

Writes the Mooncake conversation as an LMCache lookup-hash log ``--copies`` times over
(copy c with fresh keys, key + c x 2**40, after the previous copy in time), then runs
``python -m litehit_service sweep -i LOG --json --no-plot --engine E`` and ``simulate -i
LOG --capacity-gib 64 --json --no-plot --engine E`` for E in python, compact and
auto, interleaved, best wall time of ``--repeat`` (``--touch-order``, default tail-first;
the three engines print the same JSON, checked). Beside them, the floors every such command
pays: the interpreter alone, ``import numpy`` and ``import numpy, numba``.

Target (issue 25): ``litehit sweep`` on the Mooncake conversation <= 0.5 s. The module
bytecode is compiled first (``compileall``), as an installed package's is: this sandbox
sets PYTHONDONTWRITEBYTECODE, which would otherwise recompile every module on each run.
The crossover of python and compact sets ``AUTO_STAIRCASE_KEYS`` in litehit_core.engine.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, mooncake_requests, write_lmcache_log  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("python", "compact", "auto")
COMMANDS = {
    "sweep": ["sweep"],
    "simulate": ["simulate", "--capacity-gib", "64"],
}


def write_copies(trace: Path, copies: int, out: Path) -> int:
    """``copies`` copies of ``trace`` as one LMCache log at ``out``; returns its keys."""
    reqs = mooncake_requests(trace)
    span = reqs[-1][0] - reqs[0][0] + 1.0
    rows = [
        (t + c * span, [k + (c << 40) for k in keys], n)
        for c in range(copies)
        for t, keys, n in reqs
    ]
    write_lmcache_log(out, rows)
    return sum(n // 512 for _, _, n in rows)


def wall(argv: list[str]) -> tuple[float, str]:
    """Wall seconds of one command and its stdout (it must succeed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return elapsed, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--copies", default="1,2,4,8")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--touch-order", choices=("tail-first", "head-first"), default="tail-first")
    args = ap.parse_args()
    compileall.compile_dir(ROOT / "litehit_core", quiet=1)
    compileall.compile_dir(ROOT / "litehit_service", quiet=1)
    py = sys.executable
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}; best of {args.repeat}, interleaved; "
          f"{args.touch_order}")  # fmt: skip
    floors = {
        "python -c pass": [py, "-c", "pass"],
        "import numpy": [py, "-c", "import numpy"],
        "import numpy, numba": [py, "-c", "import numpy, numba"],
    }
    best = {name: min(wall(argv)[0] for _ in range(args.repeat)) for name, argv in floors.items()}
    for name, seconds in best.items():
        print(f"  floor {name:<22} {seconds:.3f} s")
    with tempfile.TemporaryDirectory() as tmp:
        for copies in (int(c) for c in args.copies.split(",")):
            log = Path(tmp) / f"lookup_hashes_{copies}.jsonl"
            keys = write_copies(args.trace, copies, log)
            times: dict[tuple[str, str], list[float]] = {}
            outputs: dict[str, set[str]] = {c: set() for c in COMMANDS}
            for _ in range(args.repeat):
                for command, words in COMMANDS.items():
                    for engine in ENGINES:
                        argv = [py, "-m", "litehit_service", *words, "-i", str(log), "--json",
                                "--no-plot", "--engine", engine,
                                "--touch-order", args.touch_order]  # fmt: skip
                        seconds, out = wall(argv)
                        times.setdefault((command, engine), []).append(seconds)
                        data = json.loads(out)
                        data.get("input", {}).pop("sources", None)
                        outputs[command].add(json.dumps(data, sort_keys=True))
            print(f"{copies}x ({keys:,} keys, {log.stat().st_size / 2**20:.0f} MiB):")
            for command in COMMANDS:
                best = {e: min(times[command, e]) for e in ENGINES}
                row = ", ".join(f"{e} {best[e]:.3f} s" for e in ENGINES)
                same = len(outputs[command]) == 1
                ratio = best["compact"] / best["python"]
                print(f"  {command:<8} {row}; compact/python {ratio:.2f}; same output: {same}")
                if not same:
                    return 1
    print("target: litehit sweep (auto) on the 1x log <= 0.5 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
