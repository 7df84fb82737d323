"""Hybrid benchmark: one replay answers every byte capacity of a hybrid linear/Mamba cache.

Usage: python bench/bench_hybrid.py [TRACE.jsonl] [--repeat N] [--capacities K]
       [--step-blocks S] [--linear-ratio R]

The Mooncake conversation trace replayed as a hybrid instance (a saved state every S = 4
blocks, a state charged L = R x F bytes with R = 8; F = 1 MiB per 512-token block, the
ratio is what matters) three ways:

(a) :class:`litehit_core.HybridLRU`: one replay, a staircase fact per request, then the
    facts projected at K byte capacities (:func:`litehit_core.project_steps_matrix`);
(b) the full-attention :class:`litehit_core.LiteHit` replay of the same trace (what the
    hybrid engine costs over a full-only instance);
(c) one byte LRU of typed objects per capacity (an OrderedDict of (kind, key) objects,
    the reference's "one LRU per tier"), at the same K log-spaced capacities.

The script checks that (a) projected at the K capacities equals (c), capacity by
capacity. Times are process CPU time, best and median of N repeats; (a)'s first call
compiles the numba kernels, timed apart (cached on disk afterwards).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, load_mooncake, show  # noqa: E402

from litehit_core import HybridLRU, LiteHit, project_matrix, project_steps_matrix  # noqa: E402

MIB = 1 << 20


def naive_hybrid_hits(
    trace: list[list[int]], capacity: int, full: int, linear: int, step: int
) -> int:
    """One byte LRU of typed objects at one capacity (bytes): total hit blocks."""
    cache: OrderedDict[tuple[int, int], None] = OrderedDict()
    charge = (full, linear)  # kind 0 = Full, 1 = Linear
    used = 0
    total = 0
    move, popitem = cache.move_to_end, cache.popitem
    for keys in trace:
        hit = 0
        for p, k in enumerate(keys):
            if (0, k) not in cache:
                break
            if (1, k) in cache:
                hit = p + 1
        total += hit
        n = len(keys)
        for p in range(n - 1, -1, -1):
            objs = (
                ((1, keys[p]), (0, keys[p]))
                if (p + 1) % step == 0 or p == n - 1
                else ((0, keys[p]),)
            )
            for obj in objs:
                if obj in cache:
                    move(obj)
                else:
                    cache[obj] = None
                    used += charge[obj[0]]
                    while used > capacity:
                        old, _ = popitem(last=False)
                        used -= charge[old[0]]
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--naive-repeat", type=int, default=1)
    ap.add_argument("--capacities", type=int, default=30)
    ap.add_argument("--step-blocks", type=int, default=4)
    ap.add_argument("--linear-ratio", type=int, default=8)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (see bench/README.md)", file=sys.stderr)
        return 2
    reqs = load_mooncake(args.trace)
    trace = [k for k, _ in reqs]
    tokens = sum(n for _, n in reqs)
    n_req, n_blocks = len(trace), sum(map(len, trace))
    full, linear, step = MIB, args.linear_ratio * MIB, args.step_blocks
    print(
        f"trace: {args.trace.name}: {n_req} requests, {n_blocks} blocks; "
        f"F = 1 MiB, L = {args.linear_ratio} F, state every {step} blocks"
    )

    t0 = time.process_time()
    HybridLRU(full, linear, step).process_request([1, 2, 3])
    print(f"    numba kernels ready in {time.process_time() - t0:.2f} s (compile or disk cache)")

    hybrid_times = []
    for _ in range(args.repeat):
        engine = HybridLRU(full, linear, step)
        process = engine.process_request
        t0 = time.process_time()
        for keys in trace:  # each fact consumed, as a replay or the service does
            process(keys)
        hybrid_times.append(time.process_time() - t0)
    engine = HybridLRU(full, linear, step)
    curves = [engine.process_request(keys).hit_curve for keys in trace]
    corners = sum(map(len, curves))
    top = max((c for curve in curves for c, _ in curve), default=full)
    print(
        f"(a) HybridLRU, every byte capacity: {show(hybrid_times)} -> "
        f"{n_req / min(hybrid_times):,.0f} requests/s, {n_blocks / min(hybrid_times):,.0f} blocks/s"
    )
    objects = engine.current_unique_blocks() + engine.current_states()
    print(
        f"    {corners:,} staircase corners ({corners / n_req:.2f} per request), "
        f"saturation at {top / MIB:,.0f} MiB; {engine.current_unique_blocks():,} blocks and "
        f"{engine.current_states():,} states tracked, "
        f"memory {engine.memory_usage_bytes() / objects:.1f} B per tracked object"
    )
    ratio = top / full
    caps = sorted(
        {round(full * ratio ** (i / (args.capacities - 1))) for i in range(args.capacities)}
    )
    proj_times = []
    for _ in range(args.repeat):
        t0 = time.process_time()
        matrix = project_steps_matrix(curves, [1] * len(curves), caps)
        proj_times.append(time.process_time() - t0)
    totals = matrix.sum(axis=0).tolist()
    print(f"    projection at {len(caps)} capacities: {show(proj_times)}")

    full_times = []
    for _ in range(args.repeat):
        lh = LiteHit()
        process = lh.process_request
        t0 = time.process_time()
        for keys in trace:
            process(keys)
        full_times.append(time.process_time() - t0)
    print(f"(b) LiteHit full-only replay: {show(full_times)}")
    print(f"    (a)/(b) time: {min(hybrid_times) / min(full_times):.2f}x")

    naive_times = []
    for _ in range(args.naive_repeat):
        t0 = time.process_time()
        naive = [naive_hybrid_hits(trace, c, full, linear, step) for c in caps]
        naive_times.append(time.process_time() - t0)
    naive_s = min(naive_times)
    print(f"(c) byte LRU of typed objects at {len(caps)} capacities: {naive_s:.2f} s")
    equal = sum(1 for a, b in zip(totals, naive, strict=True) if a == b)
    print(f"    exactness: {equal}/{len(caps)} capacities equal")
    one = min(hybrid_times) + min(proj_times)
    print(f"(c)/(a + projection) speed-up: {naive_s / one:.1f}x")
    lh = LiteHit()
    full_facts = [lh.process_request(keys).hit_curve for keys in trace]
    full_totals = project_matrix(full_facts, [full] * len(full_facts), caps).sum(axis=0)
    print("    token hit rate, hybrid vs full-only at the same bytes:")
    for c, t, f in list(zip(caps, totals, full_totals.tolist(), strict=True))[::4]:
        print(f"      {c / MIB:>9,.0f} MiB  {t * 512 / tokens:.4f}  {f * 512 / tokens:.4f}")
    return 0 if equal == len(caps) else 1


if __name__ == "__main__":
    sys.exit(main())
