"""Offline end to end as a user runs it, at 1x and at K x the trace.

Usage: python bench/bench_scale.py [TRACE.jsonl] [--copies 1,4,40] [--repeat N]
                                   [--engines python,compact]

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl (Mooncake FAST'25,
512-token blocks). For each K in ``--copies`` the trace is written K times one after the
other into a temporary Mooncake file, each copy with fresh keys (``hash_ids + (copy + 1) x
2**40``: every copy, the first included, has keys of the same width, so the JSON text and
int conversions cost the same per request at every K) and its timestamps shifted past the
previous copy's, so the tracked blocks grow K
times (Mooncake conversation: 182,790 unique hash ids per copy, 170,899 of them complete
blocks). Then ``litehit replay
CONFIG`` runs as a fresh process (one instance of 512-token blocks at 64 MiB per block, 30
log-spaced capacities from one block to the copy's unique blocks, plus the theoretical
maximum): trace -> facts ledger -> the 30-capacity table on stdout.

Printed per K: the command's wall time (best and median of N; interpreter start and
imports included) and the replay's own time per request as the command reports it
(``replay: ... X s``). Targets (issue 14): the 1x command <= 0.5 s; the K=40 per-request
cost within 1.25x of the 1x one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE  # noqa: E402

BLOCK_BYTES = 64 << 20
GIB = 1 << 30
_RUN_LINE = re.compile(r"^replay: (\d+) requests, .*?, ([0-9.]+) s, ", re.M)


def write_copies(trace: Path, copies: int, out: Path) -> tuple[int, int]:
    """``copies`` copies of the Mooncake ``trace`` into ``out`` with fresh keys; returns
    (requests, unique blocks of one copy)."""
    rows = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    span = max(r["timestamp"] for r in rows) + 1
    unique = len({h for r in rows for h in r["hash_ids"]})
    with out.open("w") as fh:
        for c in range(copies):
            for r in rows:
                offset = (c + 1) << 40
                shifted = dict(r, timestamp=r["timestamp"] + c * span,
                               hash_ids=[h + offset for h in r["hash_ids"]])  # fmt: skip
                fh.write(json.dumps(shifted) + "\n")
    return len(rows) * copies, unique


def write_config(trace: Path, unique_blocks: int, folder: Path) -> Path:
    top = unique_blocks * BLOCK_BYTES / GIB
    low = BLOCK_BYTES / GIB
    caps = [round(10 ** (math.log10(low) + i * (math.log10(top) - math.log10(low)) / 29), 6)
            for i in range(30)]  # fmt: skip
    config = folder / "config.json"
    config.write_text(json.dumps({
        "trace_file_path": str(trace), "trace_format": "mooncake", "block_size": 512,
        "output_result_path": str(folder / "out"),
        "instance_groups": [{"name": "g", "capacity_gb": caps,
                             "enable_theoretical_max_cache": True}],
        "instances": [{"instance_id": "mooncake", "instance_group": "g", "block_size": 512,
                       "location_spec_infos": [{"name": "kv", "size": BLOCK_BYTES}],
                       "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}]}],
    }))  # fmt: skip
    return config


def run(config: Path, repeat: int, engine: str) -> tuple[list[float], list[float], int]:
    """Wall seconds of ``litehit replay CONFIG --engine ENGINE`` and the replay's own
    seconds, N runs."""
    walls, own = [], []
    requests = 0
    command = [sys.executable, "-m", "litehit_service.cli", "replay", str(config)]
    command += ["--engine", engine]
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - t0)
        match = _RUN_LINE.search(proc.stdout + proc.stderr)
        if match is None:
            raise SystemExit(f"no summary line in:\n{proc.stdout}\n{proc.stderr}")
        requests, seconds = int(match.group(1)), float(match.group(2))
        own.append(seconds)
    return walls, own, requests


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--copies", default="1,4,40")
    ap.add_argument("--repeat", type=int, default=5, help="runs per K (the largest K: 2)")
    ap.add_argument("--engines", default="python,compact,auto",
                    help="litehit replay --engine values to run at every K")  # fmt: skip
    args = ap.parse_args(argv)
    copies = [int(c) for c in args.copies.split(",")]
    engines = args.engines.split(",")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; trace {args.trace}")
    per_request: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        for k in copies:
            folder = Path(tmp) / f"x{k}"
            folder.mkdir()
            trace = folder / "trace.jsonl"
            requests, unique = write_copies(args.trace, k, trace)
            config = write_config(trace, unique * k, folder)
            repeat = args.repeat if k < 10 else min(args.repeat, 2)
            for engine in engines:
                walls, own, n = run(config, repeat, engine)
                assert n == requests
                cost = per_request[engine, k] = min(own) / n
                print(f"{k:>3}x {engine:>7}: {n:,} requests, {unique * k:,} unique hash ids; "
                      f"command wall best {min(walls):.3f} s median "
                      f"{statistics.median(walls):.3f} s; replay {min(own):.3f} s = "
                      f"{cost * 1e6:.2f} us/request ({n / min(own):,.0f} requests/s)")  # fmt: skip
    for (engine, k), cost in per_request.items():
        if k > 1 and (engine, 1) in per_request:
            ratio = cost / per_request[engine, 1]
            print(f"  {engine} {k}x per-request cost / 1x: {ratio:.2f} (target <= 1.25)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
