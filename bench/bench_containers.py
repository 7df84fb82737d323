"""The same trace as JSONL, gzip'd JSONL, zstd'd JSONL and Parquet, as commands read it.

Usage: python bench/bench_containers.py [TRACE] [--repeat 3]

Converts the Mooncake conversation trace (default ``../shared/traces/mooncake/``) to the
standard format in each container (timing ``litehit convert`` to each), then times
``litehit optimize`` (``docs/policy.json``'s configuration) and ``litehit replay`` (the
converted trace's ``--emit-config``) from each, as processes, interleaved, best of
``--repeat``; sizes on disk beside. Prints CPUs and load. (Issue 34: Parquet and
compressed inputs; today's Parquet path reads rows through the standard line checks, so
it is not expected to beat JSONL yet.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _trace import DEFAULT_TRACE

ROOT = Path(__file__).resolve().parents[1]
CONTAINERS = {"jsonl": "t.jsonl", "jsonl.gz": "t.jsonl.gz", "jsonl.zst": "t.jsonl.zst",
              "parquet": "t.parquet"}  # fmt: skip


def run(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "litehit_service", *argv], check=True,
                   capture_output=True)  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    work = Path(tempfile.mkdtemp(prefix="bench_containers_"))
    base = work / CONTAINERS["jsonl"]
    run(["convert", str(args.trace), "-o", str(base), "--emit-config", str(work / "c.json")])
    times: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.repeat):
        for name, file in CONTAINERS.items():
            path = work / file
            row = times.setdefault(name, {"convert": [], "optimize": [], "replay": []})
            row["convert"].append(run(["convert", str(base), "-o", str(path)]))
            config = json.loads((ROOT / "docs/policy.json").read_text())
            config.update(trace_file_path=str(path), output_result_path=str(work / "o"))
            (work / "p.json").write_text(json.dumps(config))
            row["optimize"].append(
                run(["optimize", str(work / "p.json"), "--max-workers", "1", "--instance", "conv"])
            )
            replay = json.loads((work / "c.json").read_text())
            replay.update(trace_file_path=str(path), output_result_path=str(work / "r"))
            (work / "r.json").write_text(json.dumps(replay))
            row["replay"].append(run(["replay", str(work / "r.json"), "--quiet"]))
    print(f"\nbest of {args.repeat}, seconds as commands (size on disk)")
    for name, row in times.items():
        size = (work / CONTAINERS[name]).stat().st_size / 2**20
        cells = ", ".join(f"{k} {min(v):.2f}" for k, v in row.items())
        print(f"  {name:10} {size:6.1f} MiB: {cells}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
