"""Core benchmark: one LiteHit replay (every capacity) vs the naive per-capacity LRU.

Usage: python bench/bench_core.py [TRACE.jsonl] [--repeat N] [--capacities K]

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl (Mooncake FAST'25,
kvcache-ai/Mooncake, FAST25-release/traces/; 512-token blocks). Prints requests/s,
blocks/s, bytes per unique block, and the speed-up over the naive oracle run at K
log-spaced capacities. The timed replay consumes each fact (like ``litehit replay`` or the
service); keeping all 12k facts alive in a list adds ~10% of cyclic-GC time. Times are
process CPU time (best and median of N repeats;
the host's speed drifts, so the best run is the least disturbed one).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, load_mooncake, log_capacities  # noqa: E402

from litehit_core import LiteHit, project_blocks  # noqa: E402


def naive_hits(trace: list[list[int]], capacity: int) -> int:
    """One OrderedDict LRU at one capacity: snapshot hits, tail-first touch."""
    cache: OrderedDict[int, None] = OrderedDict()
    move = cache.move_to_end
    popitem = cache.popitem
    total = 0
    for keys in trace:
        h = 0
        for k in keys:
            if k not in cache:
                break
            h += 1
        total += h
        for k in reversed(keys):
            if k in cache:
                move(k)
            else:
                cache[k] = None
                if len(cache) > capacity:
                    popitem(last=False)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--naive-repeat", type=int, default=2)
    ap.add_argument("--capacities", type=int, default=30)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (see bench/README.md)", file=sys.stderr)
        return 2
    reqs = load_mooncake(args.trace)
    trace = [k for k, _ in reqs]
    n_req = len(trace)
    n_blocks = sum(map(len, trace))

    times = []
    for _ in range(args.repeat):
        lh = LiteHit()
        process = lh.process_request
        t0 = time.process_time()
        for keys in trace:  # each fact is consumed, as a replay or the service does
            process(keys)
        times.append(time.process_time() - t0)
    facts = list(map(LiteHit().process_request, trace))  # untimed: kept for the check
    unique = lh.current_unique_blocks()
    best, median = min(times), statistics.median(times)
    print(f"trace: {args.trace.name}: {n_req} requests, {n_blocks} blocks, {unique} unique")
    print(
        f"(a) LiteHit, every capacity: best {best * 1e3:.1f} ms, median {median * 1e3:.1f} ms"
        f" -> {n_req / best:,.0f} requests/s (median {n_req / median:,.0f}),"
        f" {n_blocks / best:,.0f} blocks/s"
    )
    print(f"    memory: {lh.memory_usage_bytes() / unique:.1f} bytes per unique block")

    caps = log_capacities(unique, args.capacities)
    naive_times = []
    for _ in range(args.naive_repeat):
        t0 = time.process_time()
        naive = [naive_hits(trace, c) for c in caps]
        naive_times.append(time.process_time() - t0)
    naive_s = min(naive_times)
    print(
        f"(b) naive OrderedDict LRU at {len(caps)} capacities: "
        f"best {naive_s:.2f} s of {len(naive_times)} runs"
    )
    mismatches = [
        c for c, h in zip(caps, naive, strict=True) if h != sum(project_blocks(f, c) for f in facts)
    ]
    print(f"    exactness: {len(caps) - len(mismatches)}/{len(caps)} capacities equal")
    print(f"(a)/(b) speed-up: {naive_s / best:.1f}x (median {naive_s / median:.1f}x)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
