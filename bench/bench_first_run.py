"""The first run of each policy-replay command after an install, as a user meets it.

Usage: python bench/bench_first_run.py [TRACE] [--repeat 2]

For ``litehit optimize``, ``export-tree``, ``lifecycle`` and ``tradeoff`` (one policy,
10 points) on the Mooncake conversation trace (default ``../shared/traces/mooncake/``),
each with ``docs/policy.json``'s configuration: the wall clock from process start to the
command's first output line (stdout or stderr) and to its end, in three states of numba's
cache (``NUMBA_CACHE_DIR`` a new temporary directory each run):

- ``cold``: empty, as after ``pip install .``: the command compiles and says so first;
- ``after warm-up``: ``litehit warm-up`` ran once after the install (the README's install
  line), also timed;
- ``warm``: the command's own second run.

Targets (issue 33): every command speaks within 5 s of starting; after the install line
(``pip install . && litehit warm-up``) each answers within 5 s. Prints CPUs and load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _trace import DEFAULT_TRACE

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "optimize": ["optimize"],
    "export-tree": ["export-tree"],
    "lifecycle": ["lifecycle"],
    "tradeoff": ["tradeoff", "--num-points", "10"],
}


def timed(argv: list[str], cache: str) -> tuple[float, float, str]:
    """(seconds to the first output line, seconds to the end, that first line)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "litehit_service", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    first: list[tuple[float, str]] = []
    lock = threading.Lock()

    def watch(stream) -> None:
        for line in stream:
            with lock:
                if not first:
                    first.append((time.perf_counter() - start, line.rstrip()))

    readers = [threading.Thread(target=watch, args=(s,)) for s in (proc.stdout, proc.stderr)]
    for r in readers:
        r.start()
    code = proc.wait(timeout=600)
    end = time.perf_counter() - start
    for r in readers:
        r.join()
    if code != 0:
        raise SystemExit(f"{argv} exited {code}")
    return first[0][0], end, first[0][1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    work = Path(tempfile.mkdtemp(prefix="bench_first_run_"))
    config = json.loads((ROOT / "docs/policy.json").read_text())
    config.update(trace_file_path=str(args.trace.resolve()), output_result_path=str(work / "o"))
    (work / "policy.json").write_text(json.dumps(config))
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    warm_ups: list[float] = []
    try:
        for _ in range(args.repeat):
            for name, words in COMMANDS.items():
                argv = [*words, str(work / "policy.json")]
                cold = tempfile.mkdtemp(prefix="bench_numba_cold_")
                first, end, line = timed(argv, cold)
                results.setdefault((name, "cold"), []).append((first, end))
                print(f"{name:12} cold: first output {first:5.2f} s, end {end:5.2f} s: {line[:70]}")
                first, end, _ = timed(argv, cold)
                results.setdefault((name, "warm"), []).append((first, end))
                shutil.rmtree(cold, ignore_errors=True)
                fresh = tempfile.mkdtemp(prefix="bench_numba_warmup_")
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "litehit_service", "warm-up"],
                               env={**os.environ, "NUMBA_CACHE_DIR": fresh}, check=True,
                               capture_output=True)  # fmt: skip
                warm_ups.append(time.perf_counter() - start)
                first, end, _ = timed(argv, fresh)
                results.setdefault((name, "after warm-up"), []).append((first, end))
                shutil.rmtree(fresh, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nbest of", args.repeat, "(first output / end, seconds)")
    for (name, state), runs in results.items():
        first = min(f for f, _ in runs)
        end = min(e for _, e in runs)
        print(f"  {name:12} {state:14} {first:5.2f} / {end:5.2f}")
    print(f"  litehit warm-up from an empty cache: {min(warm_ups):.1f} s (best of {len(warm_ups)})")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
