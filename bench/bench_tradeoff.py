"""``litehit tradeoff`` on a real trace: a 30-point trade-off curve, 1 worker against N.

Usage: python bench/bench_tradeoff.py [TRACE.jsonl] [--policy leaf_aware_lru]
       [--workers 1 2] [--repeat 5] [--num-points 30] [--no-cli]

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl (512-token blocks);
one instance, eviction mode 3, batch 100, no delay, ``bytes_per_token`` 163,840 (a
70B-class GQA model in FP8: 80 layers x 8 KV heads x 128 x 2 (K and V) x 1 byte), so a
block is 80 MiB. The targets are for a policy that needs one replay per capacity
(``random_lru``, ``leaf_aware_lru``); ``lru`` here is exact from one pass (spec §7b): it
replays only the warm-up and reads every point from LiteHit's head-first curve.

Two measurements, wall-clock (the work is in child processes), sides taking turns:

- **sweep**: :func:`run_tradeoff` in this process -- warm-up, up to 30 capacities with the
  99 % stop, the 95 %/99 % bisection, LiteHit's two reference passes, the worker
  processes' fork and start-up included -- over a trace decoded once, outside the timing,
  with the kernels already loaded (start-up excluded, as in ``bench_policy_replay.py``);
- **cli**: ``litehit tradeoff`` end to end in a fresh process (interpreter and imports,
  trace decode, the sweep, the CSVs and both pictures).

Targets (issue: tradeoff): 30 points <= 3 s wall, and >= 1.7x faster with 2 workers than
with 1, on a 2-core machine. Prints the host's load: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from litehit_service.offline.kernels import single_threaded_refcounts  # noqa: E402

single_threaded_refcounts()  # as the commands run (one thread of kernels), before numba starts
from _trace import DEFAULT_TRACE, interleaved_walls  # noqa: E402

from litehit_core.policy_replay import warm_up  # noqa: E402
from litehit_service.optimizer.optimize.config import load_optimize_config  # noqa: E402
from litehit_service.optimizer.optimize.trace import load_trace  # noqa: E402
from litehit_service.optimizer.tradeoff.sweep import TradeoffOptions, run_tradeoff  # noqa: E402

BYTES_PER_TOKEN = 163_840


def write_config(folder: Path, trace: Path, policy: str) -> Path:
    """The bench's configuration (module docstring) in ``folder``."""
    config = {
        "trace_file_path": str(trace),
        "output_result_path": str(folder / "out"),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 100},
        "trace_replay": {"write_delay_ns": 0},
        "instance_groups": [
            {
                "group_name": "g",
                "quota_capacity": -1,
                "instances": [
                    {
                        "instance_id": "mooncake",
                        "block_size": 512,
                        "bytes_per_token": BYTES_PER_TOKEN,
                        "eviction_policy_type": policy,
                    }
                ],
            }
        ],
    }
    path = folder / "tradeoff.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def show(times: list[float]) -> str:
    """``best X s  median Y s``."""
    return f"best {min(times):6.3f} s  median {statistics.median(times):6.3f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--policy", default="leaf_aware_lru")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--num-points", type=int, default=30)
    ap.add_argument("--no-cli", action="store_true", help="measure the sweep only")
    args = ap.parse_args(argv)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; {args.trace}; {args.policy}"
    )
    with tempfile.TemporaryDirectory(prefix="bench_tradeoff_") as tmp:
        path = write_config(Path(tmp), args.trace, args.policy)
        config = load_optimize_config(path)
        t0 = time.perf_counter()
        trace = load_trace(config, max_line_bytes=1 << 26)
        print(
            f"trace decoded once: {len(trace.records.kinds):,} records, "
            f"{len(trace.records.keys):,} keys, {time.perf_counter() - t0:.3f} s; kernels "
            f"loaded in {warm_up():.3f} s"
        )
        results = {}

        def sweep(workers: int) -> None:
            options = TradeoffOptions(num_points=args.num_points, workers=workers)
            results[workers] = run_tradeoff(config, trace, options)

        sides: dict[str, Callable[[], object]] = {
            f"sweep, {w} worker{'s' if w > 1 else ''}": (lambda w=w: sweep(w)) for w in args.workers
        }
        if not args.no_cli:
            for w in args.workers:
                argv_cli = [sys.executable, "-m", "litehit_service", "tradeoff", str(path),
                            "--num-points", str(args.num_points), "--max-workers", str(w),
                            "-o", str(Path(tmp) / f"cli{w}")]  # fmt: skip
                sides[f"cli, {w} worker{'s' if w > 1 else ''}"] = lambda a=argv_cli: subprocess.run(
                    a, check=True, capture_output=True
                )
        times = interleaved_walls(sides, args.repeat)
        one = results[args.workers[0]]
        (curve,) = one.curves
        how = "replayed" if curve.method == "replay" else "read from LiteHit's exact curve"
        print(
            f"{len(curve.planned)} capacities planned, {len(curve.points)} {how} up to the "
            f"99% stop, {len(curve.refine)} bisection replays, {one.replays} replays in all"
        )
        for mark in curve.marks:
            print(
                f"  {mark.percent}%: {mark.capacity_bytes / 2**30:,.1f} GiB, measured "
                f"{mark.hit_tokens / curve.warmup.input_tokens * 100:.2f}% ({mark.method})"
            )
        for name, t in times.items():
            print(f"  {name:20s} {show(t)}")
        for kind in ("sweep", "cli"):
            base = [t for n, t in times.items() if n.startswith(f"{kind}, {args.workers[0]} ")]
            for w in args.workers[1:]:
                other = [t for n, t in times.items() if n.startswith(f"{kind}, {w} ")]
                if base and other:
                    print(f"  {kind}: {w} workers {min(base[0]) / min(other[0]):.2f}x faster")
        print(f"load after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
