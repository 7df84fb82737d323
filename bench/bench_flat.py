"""Flat cost to 50 million unique blocks: cost per request and memory per tracked block.

Usage: python bench/bench_flat.py [--blocks 50000000] [--engine compact|python]
                                  [--path batch|request] [--chunk 4096] [--seed 1]

Replays the seeded synthetic trace of ``bench/synthetic.py`` (one instance: shared system
prompts, Zipf session popularity, lognormal lengths; ~35 keys and ~6 new blocks a request)
until it has produced ``--blocks`` unique blocks, ``--chunk`` requests at a time, through
one engine with neither TTL nor limit (every block stays tracked, so tracked = unique):

- ``compact`` (:class:`~litehit_core.compact_lite_hit.CompactLiteHit`) with ``--path
  batch``: one ``process_batch`` call a chunk (the engine's own cost); ``--path request``:
  one ``process_request`` a request, as the manager calls it;
- ``python`` (:class:`~litehit_core.lite_hit.LiteHit`): one ``process_request`` a request.

Printed at checkpoints (the first chunk past 170k, 1M, 5M, 10M, 25M and 50M blocks): the
median cost per request and per key over the last seven chunks (a typical request), the
mean since the previous checkpoint (amortised: compactions and table growth included; from
the second chunk on for the first checkpoint), the process's resident
memory growth since just before the engine was built (``/proc/self/statm``) and its peak
(``ru_maxrss``), both per tracked block, and the engine's own count
(``memory_usage_bytes``). At small counts the fixed costs (the generator's chunk arrays,
allocator arenas) dominate the per-block figures; the target is read at the end.
Targets (issue 14): cost per request at the end <= 1.5x the cost
at 170k blocks; peak memory <= 48 bytes per tracked block.

The request mix drifts a little as sessions age (keys a request: printed), so the cost per
key is shown beside the cost per request.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import SyntheticTrace  # noqa: E402

from litehit_core.lite_hit import LiteHit  # noqa: E402

CHECKPOINTS = (170_000, 1_000_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000)
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * _PAGE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=50_000_000)
    ap.add_argument("--engine", choices=("compact", "python"), default="compact")
    ap.add_argument("--path", choices=("batch", "request"), default="batch")
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; engine {args.engine} "
          f"({args.path if args.engine == 'compact' else 'request'}), seed {args.seed}, "
          f"to {args.blocks:,} blocks")  # fmt: skip
    if args.engine == "compact":
        from litehit_core.compact_lite_hit import CompactLiteHit

        warm = CompactLiteHit()  # load the cached kernels before the baseline
        k, o, t = SyntheticTrace(seed=99).chunk(64)
        warm.process_batch(k, o, t)
        warm.process_request(k[: o[1]].tolist())
        del warm
        engine = CompactLiteHit()
        batch = args.path == "batch"
    else:
        engine = LiteHit()
        batch = False
    trace = SyntheticTrace(seed=args.seed)
    trace.chunk(1)  # compile the generator before the baseline
    trace = SyntheticTrace(seed=args.seed)
    base = rss_bytes()
    base_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    per_request: list[float] = []
    per_key: list[float] = []
    since = 1  # the first chunk of the amortised window (the very first is skipped)
    marks = list(CHECKPOINTS)
    marks = [m for m in marks if m < args.blocks] + [args.blocks]
    results = []
    hits = 0
    while marks:
        keys, offsets, times = trace.chunk(args.chunk)
        started = time.perf_counter()
        if batch:
            facts = engine.process_batch(keys, offsets, times)
            hits += int(facts.seg_len[: facts.seg_offsets[-1]].sum())
        else:
            bounds = offsets.tolist()
            flat = keys.tolist()
            process = engine.process_request
            for a, b in pairwise(bounds):
                fact = process(flat[a:b])
                hits += sum(s[1] for s in fact.hit_curve)
        elapsed = time.perf_counter() - started
        per_request.append(elapsed / args.chunk)
        per_key.append(elapsed / len(keys))
        tracked = engine.current_unique_blocks()
        assert tracked == trace.unique_blocks, (tracked, trace.unique_blocks)
        if tracked >= marks[0]:
            while marks and tracked >= marks[0]:
                marks.pop(0)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            growth = rss_bytes() - base
            # the process's peak is the engine's once it passes the peak before the baseline
            peak_growth = max(peak - base, growth) if peak > base_peak else growth
            amortised = statistics.fmean(per_request[since:] or per_request)
            since = len(per_request)
            row = (tracked, trace.requests, statistics.median(per_request[-7:]),
                   statistics.median(per_key[-7:]), growth / tracked, peak_growth / tracked,
                   engine.memory_usage_bytes() / tracked, len(keys) / args.chunk,
                   amortised)  # fmt: skip
            results.append(row)
            print(f"{row[0]:>12,} blocks {row[1]:>11,} requests: {row[2] * 1e6:7.2f} us/request "
                  f"{row[3] * 1e9:6.1f} ns/key ({row[7]:.1f} keys/request), amortised "
                  f"{row[8] * 1e6:.2f} us/request; RSS growth "
                  f"{row[4]:5.1f} B/block, peak {row[5]:5.1f} B/block, engine count "
                  f"{row[6]:5.1f} B/block", flush=True)  # fmt: skip
    first, last = results[0], results[-1]
    print(f"cost per request at {last[0]:,} blocks / at {first[0]:,}: {last[2] / first[2]:.2f} "
          f"(target <= 1.5); per key {last[3] / first[3]:.2f}; amortised "
          f"{last[8] / first[8]:.2f}; peak memory at the end "
          f"{last[5]:.1f} B per tracked block (target <= 48); "
          f"{hits:,} hit blocks at infinite capacity")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
