"""Offline workflow benchmark: replay -> query (30 capacities) -> curve, beside the naive LRU.

Usage: python bench/bench_offline.py [TRACE.jsonl] [--repeat N] [--capacities K]

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl (Mooncake FAST'25:
https://github.com/kvcache-ai/Mooncake, folder FAST25-release/traces/; 512-token blocks).
Times, in one run, on one core (process CPU time; best and median of N repeats):

1. replay: ``run_replay`` end to end from the JSONL (trace_format "mooncake", block_size
   512, one instance of block_size 512, 8 capacities + theoretical), CSV ledger included;
   plus its breakdown (parsing alone, ``record_query`` alone, LiteHit alone);
2. query: ``litehit query`` over the ledger at K log-spaced capacities, JSONL written;
3. curve: ``litehit curve``'s computation over the ledger (every capacity exactly), the
   ~30-row table and the 90/95/99% points (no PNG);
4. the naive OrderedDict LRU replayed once per capacity at the same K capacities (one run),
   checked against the ledger's projections.

Targets (issue 4): replay >= 60,000 requests/s; query and curve each <= 20% of the replay.
Exit code 1 if the naive LRU disagrees with the ledger.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, log_capacities  # noqa: E402
from bench_core import naive_hits  # noqa: E402

from litehit_core import (  # noqa: E402
    LiteHit,
    project_curve,
    read_facts,
)
from litehit_service.cli import main as litehit_main  # noqa: E402
from litehit_service.litehit.config import replay_config_from_dict  # noqa: E402
from litehit_service.litehit.curve import build_curves, format_table  # noqa: E402
from litehit_service.litehit.replay import run_replay  # noqa: E402
from litehit_service.manager import OnlineOptimizerManager  # noqa: E402
from litehit_service.policy import QueryPolicy  # noqa: E402
from litehit_service.traces.readers import parse_lines  # noqa: E402

BLOCK_TOKENS = 512
BLOCK_BYTES = 1 << 20  # 1 MiB per block: capacity_gb * 1024 = blocks
REPLAY_CAPACITIES_GB = (1, 2, 4, 8, 16, 32, 64, 128)


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """(best, median) process CPU seconds of ``repeat`` calls, and the last result."""
    times = []
    result = None
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        result = fn()
        times.append(time.process_time() - t0)
    return min(times), statistics.median(times), result


def replay_config(trace: Path, out: Path) -> Any:
    return replay_config_from_dict(
        {
            "trace_file_path": str(trace),
            "output_result_path": str(out),
            "block_size": BLOCK_TOKENS,
            "trace_format": "mooncake",
            "instance_groups": [
                {
                    "name": "bench",
                    "capacity_gb": list(REPLAY_CAPACITIES_GB),
                    "enable_theoretical_max_cache": True,
                }
            ],
            "instances": [
                {
                    "instance_id": "mooncake",
                    "instance_group": "bench",
                    "block_size": BLOCK_TOKENS,
                    "location_spec_infos": [{"name": "kv", "size": BLOCK_BYTES}],
                    "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}],
                }
            ],
        }
    )


def curve_stage(facts: Path) -> list[Any]:
    """What ``litehit curve --no-png`` computes: every instance's exact curve, the table
    and the 90/95/99% points (the command's own functions)."""
    curves = build_curves(read_facts(facts))
    format_table(curves)
    return curves


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--capacities", type=int, default=30)
    args = ap.parse_args()
    if not args.trace.exists():
        print(
            f"trace not found: {args.trace}\n"
            "get it from https://github.com/kvcache-ai/Mooncake (FAST25-release/traces/"
            "conversation_trace.jsonl) and put it there, or pass its path",
            file=sys.stderr,
        )
        return 2
    trace = args.trace
    with tempfile.TemporaryDirectory(prefix="litehit-bench-") as tmp:
        work = Path(tmp)
        config = replay_config(trace, work)
        facts = work / "litehit_facts.csv"

        # 1. replay, end to end
        r_best, r_med, summary = timed(lambda: run_replay(config, progress=False), args.repeat)
        n = summary.requests
        # ... and its parts
        with open(trace, "rb") as fh:  # the replay parses bytes as read
            lines = fh.readlines()
        p_best, _, (events, _) = timed(
            lambda: parse_lines(lines, 1, str(trace), "mooncake", BLOCK_TOKENS, "mooncake"),
            args.repeat,
        )

        def queries() -> None:
            m = OnlineOptimizerManager(policy=QueryPolicy.offline(BLOCK_TOKENS))
            for g in config.instance_groups:
                m.create_group(g)
            m.register_instance(config.instances[0])
            record = m.record_query
            for e in events:
                record("mooncake", e[5], e[6], e[4])

        def lite() -> None:
            process = LiteHit().process_request
            for e in events:
                process(e[5], e[4])

        q_only, _, _ = timed(queries, args.repeat)
        l_only, _, _ = timed(lite, args.repeat)

        # 2. query at K capacities (GiB), JSONL written
        unique = summary.instance_summaries[0].debug_info.unique_keys
        caps_blocks = log_capacities(unique, args.capacities, lowest=64)
        caps_gb = [f"{c * BLOCK_BYTES / 1024**3!r}" for c in caps_blocks]
        out_jsonl = work / "hits.jsonl"
        argv = ["query", str(facts), "--capacity-gib", *caps_gb, "-o", str(out_jsonl)]

        def query() -> int:
            with contextlib.redirect_stderr(io.StringIO()):
                return litehit_main(argv)

        q_best, q_med, rc = timed(query, args.repeat)
        if rc != 0:
            print(f"litehit query failed with exit code {rc}", file=sys.stderr)
            return 1

        # 3. curve (no PNG)
        c_best, c_med, built = timed(lambda: curve_stage(facts), args.repeat)

        # 4. naive LRU at the same K capacities, once; checked against the ledger
        keys = [e[5] for e in events]
        t0 = time.process_time()
        naive = [naive_hits(keys, c) for c in caps_blocks]
        naive_s = time.process_time() - t0
        curves = [row.hit_curve for row in read_facts(facts)]
        exact = sum(
            h == sum(project_curve(cv, c) for cv in curves)
            for c, h in zip(caps_blocks, naive, strict=True)
        )

    met = "met" if n / r_best >= 60_000 else "NOT met"
    print(f"trace: {trace.name}: {n} requests, {unique} unique blocks")
    print(
        f"1. replay (parse + 1 instance x {len(REPLAY_CAPACITIES_GB)} capacities + theoretical"
        f" + CSV): best {r_best * 1e3:.1f} ms, median {r_med * 1e3:.1f} ms -> "
        f"{n / r_best:,.0f} requests/s (median {n / r_med:,.0f}); target >= 60,000: {met}"
    )
    print(
        f"   parts: parse {p_best * 1e3:.1f} ms, record_query {q_only * 1e3:.1f} ms (of which "
        f"LiteHit {l_only * 1e3:.1f} ms), rest (routing, rows, CSV, setup, summary) "
        f"{(r_best - p_best - q_only) * 1e3:.1f} ms"
    )
    for name, best, med in (("query", q_best, q_med), ("curve", c_best, c_med)):
        what = (
            f"litehit query at {len(caps_blocks)} capacities, JSONL"
            if name == "query"
            else f"build_curves, {len(built[0].breakpoints())} breakpoints, table + marks"
        )
        share = best / r_best
        print(
            f"{'2' if name == 'query' else '3'}. {name} ({what}): best {best * 1e3:.1f} ms, "
            f"median {med * 1e3:.1f} ms = {share:.0%} of the replay; target <= 20%: "
            f"{'met' if share <= 0.20 else 'NOT met'}"
        )
    print(
        f"4. naive OrderedDict LRU at {len(caps_blocks)} capacities: {naive_s:.2f} s = "
        f"{naive_s / r_best:.1f}x the replay; exact: {exact}/{len(caps_blocks)} capacities equal"
    )
    return 0 if exact == len(caps_blocks) else 1


if __name__ == "__main__":
    sys.exit(main())
