"""``litehit optimize`` with its groups in parallel: one replay against ``--max-workers N``.

Usage: python bench/bench_optimize_parallel.py [TRACE.jsonl] [--groups 2 4]
       [--policies lru random_lru leaf_aware_lru] [--workers 2] [--repeat 5] [--copies K]
       [--no-cli]

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl (512-token blocks,
read with the project's Mooncake reader: prefix-chained keys). The configuration has G
groups of one instance each; every group gets a copy of every request (same time, same
keys: the records interleave r0g0, r0g1, ...; ``--copies K``: the trace K times one after
the other, fresh keys per copy), so each group replays the whole trace and
the groups are equally heavy. Group k's policy is ``--policies[k % len]``; each group's
quota is a tenth of the trace's unique blocks (1 block = 1 MiB), eviction mode 3, batch
100, write delay 0.

Two measurements, wall-clock (the work is in child processes), sides taking turns, best
and median of ``--repeat``:

- **replay**: :func:`run_optimize` against :func:`run_parallel` in this process over a
  trace decoded once (outside the timing), kernels loaded; the workers' fork, the
  sub-traces, the merge and :func:`gather` included;
- **cli**: ``litehit optimize`` end to end in a fresh process (imports, decode, replay,
  CSVs), the files of both runs compared byte for byte.

Prints the host's CPUs and load: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, interleaved_walls  # noqa: E402

from litehit_core.policy_replay import warm_up  # noqa: E402
from litehit_service.optimizer.optimize.config import load_optimize_config  # noqa: E402
from litehit_service.optimizer.optimize.parallel import run_parallel  # noqa: E402
from litehit_service.optimizer.optimize.run import run_optimize  # noqa: E402
from litehit_service.optimizer.optimize.trace import load_trace  # noqa: E402
from litehit_service.traces.readers import read_mooncake  # noqa: E402

BLOCK = 512
BYTES_PER_TOKEN = (1 << 20) // BLOCK  # 1 MiB a block


def write_case(
    folder: Path, trace: Path, groups: int, policies: list[str], copies: int = 1
) -> Path:
    """The standard trace (G copies of every request; the Mooncake trace ``copies`` times
    one after the other, fresh keys per copy) and the configuration; its path."""
    one = list(read_mooncake(trace, BLOCK))
    step = max(e.timestamp_ns for e in one) + 1
    mask = (1 << 63) - 1
    events = [
        (e.timestamp_ns + c * step, [(k ^ (c * 0x9E3779B97F4A7C15)) & mask for k in e.keys],
         e.input_len)
        for c in range(copies)
        for e in one
    ]  # fmt: skip
    unique = len({k for e in events for k in e[1]})
    with (folder / "trace.jsonl").open("w") as fh:
        for t, keys, input_len in events:
            for g in range(groups):
                fh.write(json.dumps({"type": "request", "instance_id": f"i{g}",
                                     "timestamp_ns": t + 1, "keys": keys,
                                     "input_len": input_len}) + "\n")  # fmt: skip
    config = {
        "trace_file_path": str(folder / "trace.jsonl"),
        "output_result_path": str(folder / "out"),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 100},
        "trace_replay": {"write_delay_ns": 0},
        "instance_groups": [
            {
                "group_name": f"g{g}",
                "quota_capacity": unique / 10 / 1024,
                "used_percentage": 1.0,
                "instances": [
                    {
                        "instance_id": f"i{g}",
                        "block_size": BLOCK,
                        "bytes_per_token": BYTES_PER_TOKEN,
                        "eviction_policy_type": policies[g % len(policies)],
                        "eviction_policy_params": {"sample_rate": 0.1},
                    }
                ],
            }
            for g in range(groups)
        ],
    }
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=1))
    names = [policies[g % len(policies)] for g in range(groups)]
    print(f"  {len(events):,} requests x {groups} groups, {unique:,} unique blocks, quota "
          f"{unique // 10:,} blocks a group, policies {names}")  # fmt: skip
    return path


def replay_sides(config: object, trace: object, workers: list[int]) -> dict[str, Callable]:
    """The in-process sides: one replay, then each worker count."""
    sides: dict[str, Callable] = {"replay, 1 (sequential)": lambda: run_optimize(config, trace)}
    for w in workers:
        sides[f"replay, --max-workers {w}"] = lambda w=w: run_parallel(config, trace, workers=w)
    return sides


def show(name: str, t: list[float], base: list[float] | None) -> str:
    speed = f"  {min(base) / min(t):.2f}x" if base is not None else ""
    return (f"  {name:24s} best {min(t):7.3f} s  median {statistics.median(t):7.3f} s"
            f"{speed}")  # fmt: skip


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.csv"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--groups", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--policies", nargs="+", default=["lru", "random_lru", "leaf_aware_lru"])
    ap.add_argument("--workers", type=int, nargs="+", default=[2])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--copies", type=int, default=1, help="the trace this many times")
    ap.add_argument("--no-cli", action="store_true")
    args = ap.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}; {args.trace}")  # fmt: skip
    warm_up()
    for groups in args.groups:
        with tempfile.TemporaryDirectory(prefix="bench_optimize_parallel_") as tmp:
            print(f"{groups} groups:")
            path = write_case(Path(tmp), args.trace, groups, args.policies, args.copies)
            config = load_optimize_config(path)
            trace = load_trace(config, max_line_bytes=1 << 26)
            sides = replay_sides(config, trace, args.workers)
            times = interleaved_walls(sides, args.repeat)
            base = times["replay, 1 (sequential)"]
            for name, t in times.items():
                print(show(name, t, None if t is base else base))
            if args.no_cli:
                continue
            cli: dict[str, Callable[[], object]] = {}
            for w in [1, *args.workers]:
                out = Path(tmp) / f"out{w}"
                argv_w = [sys.executable, "-m", "litehit_service", "optimize", str(path), "-o",
                          str(out), "--max-workers", str(w)]  # fmt: skip
                cli[f"cli, --max-workers {w}"] = lambda argv_w=argv_w: subprocess.run(
                    argv_w, check=True, capture_output=True
                )
            times = interleaved_walls(cli, max(3, args.repeat // 2))
            base = times["cli, --max-workers 1"]
            for name, t in times.items():
                print(show(name, t, None if t is base else base))
            same = all(files(Path(tmp) / f"out{w}") == files(Path(tmp) / "out1")
                       for w in args.workers)  # fmt: skip
            print(f"  CSVs byte-identical to the sequential run: {same}")
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
