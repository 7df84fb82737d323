"""The first ``litehit serve`` after an install: process start to the ``litehit serving`` line.

Usage: python bench/bench_first_serve.py [--repeat 3]

Each run starts ``litehit serve`` (port 0, a fresh data directory) with an EMPTY numba cache
(``NUMBA_CACHE_DIR`` a new temporary directory: what a fresh install has) and times the
wall clock from process start to the line it prints once it accepts queries; then the same
with the cache the first run filled (every later start). The log's kernel lines are shown:
the full-attention kernels load before serving, the hybrid (linear/Mamba) ones on a thread
afterwards. Target (issue 25): <= 5 s to serving, progress logged. Prints CPUs and load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time


def start(cache: str) -> tuple[float, list[str]]:
    """Seconds to the serving line and the log's kernel lines (the server then stopped)."""
    data = tempfile.mkdtemp(prefix="bench_first_serve_")
    log_path = os.path.join(data, "serve.log")
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    argv = [sys.executable, "-m", "litehit_service", "serve", "--listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0", "--data-dir", os.path.join(data, "d")]  # fmt: skip
    with open(log_path, "w") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        line = proc.stdout.readline() if proc.stdout else ""
        ready = time.perf_counter() - started
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with open(log_path) as fh:
                if "in the background" in fh.read():
                    break  # the background compile finished: stop the server
            time.sleep(0.2)
        proc.terminate()
        proc.communicate(timeout=60)
    with open(log_path) as fh:
        text = fh.read()
    shutil.rmtree(data, ignore_errors=True)
    if not line.startswith("litehit serving"):
        raise SystemExit(f"no serving line: {line!r}\n{text}")
    return ready, [entry for entry in text.splitlines() if "kernels" in entry]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    cold, warm = [], []
    for _ in range(args.repeat):
        cache = tempfile.mkdtemp(prefix="bench_numba_cache_")
        try:
            seconds, lines = start(cache)
            cold.append(seconds)
            print(f"empty cache: serving after {seconds:.2f} s")
            for line in lines:
                print("   ", line.split(": ", 1)[-1])
            warm.append(start(cache)[0])
            print(f"filled cache: serving after {warm[-1]:.2f} s")
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    print(f"first start after an install: best {min(cold):.2f} s, worst {max(cold):.2f} s "
          f"(target <= 5 s); later starts: best {min(warm):.2f} s")  # fmt: skip
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
