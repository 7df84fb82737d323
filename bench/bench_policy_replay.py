"""The policy replay beside libCacheSim: one replay per policy at ONE capacity vs one tuned
libCacheSim LRU pass over the same block accesses at the same capacity, interleaved.

Usage: python bench/bench_policy_replay.py [TRACE.jsonl] [--copies 1 8] [--repeat N]

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl (512-token blocks).
Each line is a ``request`` of one instance (eviction mode 3, batch 100, no delay); the
capacity is a tenth of the trace's unique blocks. ``--copies K`` replays K copies of the
trace one after another, each with fresh keys (K x the unique blocks, the capacity scaled
with them). The records are decoded once, outside the timing (start-up excluded). Sides:
``lru``, ``random_lru`` (sample_rate 0.1: 1,000 draws a call, the reference's default),
``leaf_aware_lru``, and libCacheSim 0.3.5's LRU (``pip install libcachesim``; C,
``process_trace`` over an oracleGeneral binary file -- its fastest reader -- holding the
same accesses: every key of every request head first, which is what the replay's ``lru``
touches; hash power fitted to the unique keys: ``ceil(log2(unique)) + 1``). Process CPU
time, best and median of N, sides taking turns. Targets (issue 22): lru <= 1.5x
libCacheSim, random_lru and leaf_aware_lru <= 2x; per-request cost of 40 copies within
1.25x of one copy (``--copies 1 40``); memory <= 64 B per cached block.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from litehit_service.offline.kernels import single_threaded_refcounts  # noqa: E402

single_threaded_refcounts()  # as the commands run (one thread of kernels), before numba starts
from _trace import DEFAULT_TRACE, interleaved, show  # noqa: E402
from bench_peers import write_oracle_general  # noqa: E402

from litehit_core.engine import POLICIES  # noqa: E402
from litehit_core.policy_replay import InstanceSetup, ReplayRecords, ReplaySetup, replay  # noqa: E402
from litehit_core.policy_replay.loop import REQUEST  # noqa: E402


def load(path: Path, copies: int) -> tuple[ReplayRecords, int]:
    """``copies`` copies of the Mooncake trace as request records (fresh keys per copy),
    and the unique blocks of the result."""
    key_lists, times = [], []
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        key_lists.append(obj["hash_ids"][: obj["input_length"] // 512])
        times.append(int(obj["timestamp"]) * 1_000_000)
    one = np.concatenate([np.asarray(k, np.int64) for k in key_lists])
    span = int(one.max()) + 1
    lens = np.array([len(k) for k in key_lists], np.int64)
    t = np.array(times, np.int64)
    keys = np.concatenate([one + c * span for c in range(copies)])
    all_lens = np.tile(lens, copies)
    off = np.zeros(len(all_lens) + 1, np.int64)
    np.cumsum(all_lens, out=off[1:])
    step = int(t.max()) + 1
    all_t = np.concatenate([t + c * step for c in range(copies)])
    n = len(all_lens)
    records = ReplayRecords(
        np.full(n, REQUEST, np.int8),
        np.zeros(n, np.int32),
        all_t,
        off,
        keys,
        np.zeros(len(keys), np.uint8),
        np.full(n, -1, np.int32),
    )
    return records, len(np.unique(keys))


def setup_for(policy: str, capacity: int, batch: int = 100) -> ReplaySetup:
    p = POLICIES[policy]
    sample = math.floor(batch / 0.1) if p.dense else 0
    inst = InstanceSetup(p.kind, 0, 1, sample, True, True, p.dense)
    return ReplaySetup((inst,), (capacity,), ((0,),), (), 3, batch, 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--copies", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    import libcachesim as lcs

    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.2f}; {args.trace}"
    )
    per_request: dict[int, float] = {}
    for copies in args.copies:
        records, unique = load(args.trace, copies)
        capacity = unique // 10
        replay(setup_for("lru", capacity), records)  # load the compiled kernels
        sides = {
            policy: (
                lambda policy=policy, capacity=capacity, records=records: replay(
                    setup_for(policy, capacity), records
                )
            )
            for policy in ("lru", "random_lru", "leaf_aware_lru")
        }
        with tempfile.TemporaryDirectory(prefix="bench_policy_") as tmp:
            trace_file = Path(tmp) / "trace.oracleGeneral"
            write_oracle_general(records.keys, trace_file)
            power = math.ceil(math.log2(unique)) + 1

            def lcs_pass(
                trace_file: Path = trace_file, capacity: int = capacity, power: int = power
            ) -> None:
                reader = lcs.TraceReader(str(trace_file), lcs.TraceType.ORACLE_GENERAL_TRACE)
                lcs.LRU(capacity, hashpower=power).process_trace(reader)

            sides["libCacheSim LRU"] = lcs_pass
            times = interleaved(sides, args.repeat)
        n = len(records.kinds)
        print(
            f"{copies} cop{'y' if copies == 1 else 'ies'}: {n:,} requests, "
            f"{len(records.keys):,} block accesses, {unique:,} unique blocks, capacity "
            f"{capacity:,} blocks, hash power {power}"
        )
        base = min(times["libCacheSim LRU"])
        for name, t in times.items():
            ratio = "" if name.startswith("libCacheSim") else f"  {min(t) / base:.2f}x libCacheSim"
            print(f"  {name:18s} {show(t)}{ratio}")
        result = replay(setup_for("lru", capacity), records)
        print(
            f"  lru memory: {result.memory_bytes / capacity:.1f} B per cached block "
            f"({result.memory_bytes:,} B, {int(result.cached[0]):,} cached)"
        )
        per_request[copies] = min(times["lru"]) / n
    if len(per_request) > 1:
        first = min(per_request)
        for copies, cost in per_request.items():
            print(f"per request, {copies} copies / {first}: {cost / per_request[first]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
