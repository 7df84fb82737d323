"""``litehit export-tree`` and ``litehit lifecycle`` as commands, process start to exit.

Usage: python bench/bench_analyses.py [TRACE.jsonl] [--blocks N] [--repeat N]
       [--policy lru|random_lru|leaf_aware_lru|ttl]

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl (512-token blocks,
read as ``--trace-format mooncake``); one instance, eviction mode 3, batch 100, a quota of
``--blocks`` blocks (default 10000: about 22% hit rate, against 37% at infinite quota).
Each command runs ``--repeat`` times (default 5), the two taking turns, as a subprocess
of this interpreter writing into a fresh folder each time (``export-tree`` with
``--show-hot-paths``); wall time from start to exit, best and median, with the load
average before and after; and the tree JSON's size with its key lists and with
``--counts-only``. Target: each <= 2 s on the 2-core machine. Numba's disk cache
is warmed by one untimed run of each first (as after an install's warm-up).
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def write_config(folder: Path, trace: Path, blocks: int, policy: str) -> Path:
    """A one-instance configuration of ``blocks`` 1-MiB blocks of 512 tokens."""
    config = {
        "trace_file_path": str(trace),
        "output_result_path": str(folder / "out"),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 100},
        "instance_groups": [
            {
                "group_name": "g",
                "quota_capacity": blocks / 1024,
                "instances": [
                    {
                        "instance_id": "conv",
                        "block_size": 512,
                        "bytes_per_token": 2048,
                        "eviction_policy_type": policy,
                    }
                ],
            }
        ],
    }
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def timed(argv: list[str]) -> float:
    """Wall seconds of one run of ``argv`` (it must succeed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    parser.add_argument("--blocks", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--policy", default="lru")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = write_config(folder, Path(args.trace), args.blocks, args.policy)
        base = [sys.executable, "-m", "litehit_service"]
        commands = {
            "export-tree": [*base, "export-tree", str(config), "--trace-format", "mooncake",
                            "--show-hot-paths"],
            "lifecycle": [*base, "lifecycle", str(config), "--trace-format", "mooncake"],
            "optimize": [*base, "optimize", str(config), "--trace-format", "mooncake"],
        }  # fmt: skip
        summary = subprocess.run(
            [*commands["optimize"], "--json", "-o", str(folder / "warm")],
            capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        rate = json.loads(summary.stdout)["instances"][0]["hit_rate"]
        print(f"trace {args.trace}, {args.blocks} blocks ({args.policy}): hit rate {rate:.2%}")
        for name, argv in commands.items():  # warm numba's disk cache, untimed
            timed([*argv, "-o", str(folder / f"warm-{name}")])
        timed([*commands["export-tree"], "--counts-only", "-o", str(folder / "counts")])
        for label, out in (("key lists", "warm-export-tree"), ("--counts-only", "counts")):
            sizes = [p.stat().st_size for p in (folder / out).rglob("*_radix_tree.json")]
            print(f"tree JSON with {label}: {sum(sizes) / 1e6:.1f} MB")
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {name: [] for name in commands}
        for i in range(args.repeat):
            for name, argv in commands.items():
                times[name].append(timed([*argv, "-o", str(folder / f"{name}-{i}")]))
        load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"({os.cpu_count()} cores)")  # fmt: skip
    for name, values in times.items():
        print(f"{name:<12} best {min(values):.3f} s, median {statistics.median(values):.3f} s "
              f"over {len(values)} runs")  # fmt: skip


if __name__ == "__main__":
    main()
