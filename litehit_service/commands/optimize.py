"""``litehit optimize``: replay a trace under the KVCacheManager optimizer's policies.

Reads a configuration in the reference's format (:mod:`litehit_service.optimizer.optimize`),
validates it, then replays the trace once with the compiled policy replay, streamed
(:mod:`~litehit_service.optimizer.optimize.stream`: the trace read and checked batch by
batch, memory following the cache; records at most ``--reorder-window-ms`` out of time
order), and writes ``{instance_id}_hit_rates.csv`` (or ``.parquet``) per instance (and with
``--draw-chart`` ``timeseries/multi_instance_cache_analysis.png``; with
``--aggregate-window-s W`` ``aggregate_hit_rates.csv`` and ``.png``: every instance summed
per W seconds of trace time) into the configuration's ``output_result_path`` or ``-o DIR``,
all or nothing (errors: ``file:line: field: reason``, exit code 2, nothing written). The
groups of a configuration are replayed in ``--max-workers`` parts in parallel (default: one
per CPU; processes, or Ray tasks with ``--executor ray``) over the trace decoded whole, and
merged (:mod:`litehit_service.optimizer.optimize.parallel`): the same files byte for byte
as one replay (``--max-workers 1``); so is ``--compare-exact``. Prints a summary table
(``--json``: one JSON object) on stdout; a plan line first on a big trace, a progress bar
on a terminal, one run line on stderr. Bad flags exit 2 naming the value.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from typing import Any

from litehit_service.commands import UsageError, say_plan, say_warnings
from litehit_service.commands.options import (
    add_config,
    add_max_workers,
    add_output_dir,
    add_sample_options,
    add_trace_options,
    config_path,
    positive_int,
    reorder_window_ns,
)


def register(subparsers: Any) -> None:
    """Add the ``optimize`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "optimize",
        help="replay a trace under eviction policies and group quotas (the optimizer's "
        "policy replay)",
        description=(
            "Replay the trace of CONFIG.json (the KVCacheManager optimizer's configuration "
            "format) with each instance's eviction policy (lru, random_lru, leaf_aware_lru, "
            "ttl) and its group's quota, and write {instance_id}_hit_rates.csv per instance. "
            "Errors exit 2 and write nothing."
        ),
    )
    add_config(p, "optimizer")
    add_output_dir(p)
    p.add_argument(
        "--draw-chart",
        action="store_true",
        help="also write timeseries/multi_instance_cache_analysis.png, and with several "
        "instances global_duplicate_blocks.csv/.png (block copies cached by more than one "
        "instance over time; one more replay, in analysis mode)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--compare-exact",
        action="store_true",
        help="also print LiteHit's exact tail-first and head-first LRU hit rates "
        "at each instance's group quota",
    )
    add_trace_options(p)
    add_max_workers(
        p,
        "replay the configuration's groups in N parts at once, balanced by records, over "
        "the trace decoded whole (default: the CPUs this process may use, or 1 for a trace "
        "of 256 MB of JSONL or more; 1: one streamed replay of every group in this process, "
        "memory following the cache; the files are the same for any N)",
        type=positive_int,
        default=None,
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="replay the parts in local processes (default) or as Ray tasks (needs pip "
        "install '.[ray]'; the same files)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --executor ray: the Ray cluster, e.g. ray://head:10001 or auto (default: "
        "start a local Ray for this run)",
    )
    p.add_argument(
        "--aggregate-window-s",
        type=_window_seconds,
        default=None,
        metavar="W",
        help="also write aggregate_hit_rates.csv and .png: every instance's reads summed "
        "per W seconds of trace time from the first read (W > 0; windows without reads "
        "are left out; default: no aggregate)",
    )
    p.add_argument(
        "--output-format",
        choices=("csv", "parquet"),
        default="csv",
        help="write the per-read tables as {instance_id}_hit_rates.csv (default) or as "
        ".parquet (the same columns, int64 and float64 rates, for pandas, polars or "
        "DuckDB)",
    )
    p.add_argument(
        "--fast-chart",
        action="store_true",
        help="with --draw-chart (implied), draw each line through at most 2,000 evenly "
        "spaced reads per instance and leave out the dot per read: the same rates, drawn "
        "in a moment for millions of reads",
    )
    p.add_argument(
        "--export-lifecycle",
        action="store_true",
        help="also write every block life as the reference does, "
        "{instance_id}_lifecycle.csv beside the hit-rate CSVs (litehit lifecycle's rows, "
        "with the end of the replay as an alive life's DeathTimeUs and the birth as a "
        "never-hit life's LastAccessTimeUs; one more replay, in analysis mode; --json adds "
        "their statistics)",
    )
    add_sample_options(p)
    p.set_defaults(func=run)


PLAN_MB_PER_S = 45.0
"""What ``optimize`` streams on a 2-core machine, in MB/s of JSONL (bench/README.md:
Mooncake x 40, one lru instance)."""


def _window_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0 that is at least 1 ns; a usage
    error naming the value otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    if round(value * 1e9) < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 ns (1e-9), got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    """Run the command (module docstring). Raises on failure (exit code by the CLI)."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.offline.outputs import PLAN_BYTES, progress_bar, run_line
    from litehit_service.offline.pool import default_workers
    from litehit_service.optimizer.optimize.config import load_optimize_config
    from litehit_service.optimizer.optimize.outputs import summary_json, summary_text, write_outputs
    from litehit_service.optimizer.optimize.parallel import run_parallel, runs_in_parallel
    from litehit_service.optimizer.optimize.stream import stream_optimize
    from litehit_service.optimizer.optimize.trace import load_trace, open_trace_batches
    from litehit_service.traces.readers.compressed import text_bytes

    start = time.perf_counter()
    if args.ray_address is not None and args.executor != "ray":
        raise UsageError("--ray-address needs --executor ray")
    if args.executor == "ray" and importlib.util.find_spec("ray") is None:
        from litehit_service.offline.pool import RAY_MISSING

        raise UsageError(RAY_MISSING)
    config = load_optimize_config(config_path(args))
    say_warnings(config.warnings)
    args.draw_chart = args.draw_chart or args.fast_chart
    out_dir = args.output_dir or config.output_result_path
    window_ns = None if args.aggregate_window_s is None else round(args.aggregate_window_s * 1e9)
    workers = args.max_workers or (
        1 if text_bytes(config.trace_file_path) >= PLAN_BYTES else default_workers()
    )
    say_plan("optimize", config.trace_file_path, PLAN_MB_PER_S, out_dir)
    if args.sample_rate is not None:
        # the sample is small: the seeds run on every CPU whatever the trace's size
        return _run_sampled(args, config, out_dir, args.max_workers or default_workers(), start)
    if args.sample_seeds != 1:
        raise UsageError(f"--sample-seeds {args.sample_seeds} needs --sample-rate")
    trace = None
    if args.compare_exact or runs_in_parallel(config, workers, args.executor):
        trace = load_trace(
            config,
            trace_format=args.trace_format,
            instance=args.instance,
            max_line_bytes=args.max_line_bytes,
        )
        load_kernels("policy-replay")  # before any fork: the workers inherit them
        with progress_bar(len(trace.records.kinds), "records", "optimize") as advance:
            result = run_parallel(
                config,
                trace,
                workers=workers,
                executor=args.executor,
                ray_address=args.ray_address,
                progress=advance,
            )
        write_outputs(result, out_dir, draw_chart=args.draw_chart, aggregate_window_ns=window_ns,
                      fast_chart=args.fast_chart,
                      output_format=args.output_format)  # fmt: skip
    else:  # one replay: streamed, memory following the cache
        routing, batches, _ = open_trace_batches(
            config,
            trace_format=args.trace_format,
            instance=args.instance,
            max_line_bytes=args.max_line_bytes,
        )
        load_kernels("policy-replay")
        load_kernels("text")
        with progress_bar(batches.total, batches.unit, "optimize") as advance:
            result = stream_optimize(
                config,
                routing,
                batches,
                out_dir,
                window_ns=reorder_window_ns(args),
                draw_chart=args.draw_chart,
                fast_chart=args.fast_chart,
                aggregate_window_ns=window_ns,
                progress=advance,
                output_format=args.output_format,
            )
    extra: dict[str, object] = {}
    from litehit_service.optimizer.analysis.lifecycle_files import optimize_analysis

    files = optimize_analysis(config, export_lifecycle=args.export_lifecycle,
                              draw_chart=args.draw_chart)  # fmt: skip
    if files is not None:  # one more replay, in analysis mode
        from litehit_service.commands.lifecycle import write_lifecycle
        from litehit_service.optimizer.analysis.lifecycle import lifecycle_stats

        _, every, folder = write_lifecycle(args, config, out_dir, "optimize", **files._asdict())
        if args.export_lifecycle:  # the reference's flag: the lives beside the hit-rate CSVs
            extra["lifecycle"] = [lifecycle_stats(lives) for lives in every]
            print(f"optimize: lifecycle: {sum(len(lives.cause) for lives in every)} lives -> "
                  f"{folder}", file=sys.stderr)  # fmt: skip
    if args.compare_exact:
        from litehit_service.optimizer.optimize.exact import exact_rates

        assert trace is not None
        rates = exact_rates(config, trace, result)
        extra["compare_exact"] = [
            {
                "instance_id": r.instance_id,
                "capacity_blocks": r.capacity_blocks,
                "replay_hit_rate": r.replay,
                "litehit_tail_first_hit_rate": r.by_touch_order["tail-first"],
                "litehit_head_first_hit_rate": r.by_touch_order["head-first"],
                "replay_is_head_first_exactly": r.exact,
            }
            for r in rates
        ]
    if args.json:
        print(summary_json(result, extra))
    else:
        print(summary_text(result))
        for row in extra.get("compare_exact", []):  # type: ignore[union-attr]
            print(_exact_line(row))
        if "lifecycle" in extra:
            from litehit_service.optimizer.analysis.lifecycle import stats_text

            for stats in extra["lifecycle"]:  # type: ignore[attr-defined]
                print(stats_text(stats))
    reads = sum(r.rows.reads for r in result.instances)
    print(
        run_line(
            "optimize",
            reads,
            "reads",
            f"{len(result.instances)} instances",
            time.perf_counter() - start,
            out_dir,
        ),
        file=sys.stderr,
    )
    return 0


SAMPLED_EXCLUSIVE = (
    "draw_chart", "aggregate_window_s", "export_lifecycle", "compare_exact",
)  # fmt: skip
"""Options a sampled run refuses in this slice (issue 37): each reads every row or the
whole trace."""


def _run_sampled(
    args: argparse.Namespace, config: Any, out_dir: str, workers: int, start: float
) -> int:
    """``--sample-rate``: read the trace once, sample it for every seed, replay the seeds
    in parallel, write each seed's tables into its own folder, print the estimates
    (:mod:`litehit_service.optimizer.sampling.optimize`)."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.offline.outputs import run_line
    from litehit_service.optimizer.sampling.optimize import (
        run_sampled,
        sampled_json,
        sampled_text,
        write_sampled,
    )
    from litehit_service.optimizer.sampling.trace import SampleOptions, load_sampled

    for name in SAMPLED_EXCLUSIVE:
        if getattr(args, name) not in (None, False):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} reads every row of the exact replay: not with --sample-rate")
    if args.executor != "local":
        raise UsageError("--sample-rate runs its seeds in local processes: not with --executor ray")
    options = SampleOptions(args.sample_rate, args.sample_seeds)
    sampled = load_sampled(
        config, options, trace_format=args.trace_format, instance=args.instance,
        max_line_bytes=args.max_line_bytes,
    )  # fmt: skip
    load_kernels("policy-replay")  # before any fork: the workers inherit them
    result = run_sampled(config, sampled, workers=workers)
    write_sampled(result, out_dir, args.output_format)
    print(sampled_json(result) if args.json else sampled_text(result))
    reads = int(sampled.reads.sum())
    print(
        run_line("optimize", reads, "reads",
                 f"{len(config.instances)} instances, sampled R = {options.rate:g} x "
                 f"{options.seeds} seed(s)", time.perf_counter() - start, out_dir),
        file=sys.stderr,
    )  # fmt: skip
    return 0


def _exact_line(row: dict[str, Any]) -> str:
    cap = "inf" if row["capacity_blocks"] is None else f"{row['capacity_blocks']} blocks"
    tag = (
        "= head-first exactly (spec 7b)"
        if row["replay_is_head_first_exactly"]
        else ("(references: this configuration is not LiteHit's model)")
    )
    return (
        f"{row['instance_id']}: at {cap}: replay {row['replay_hit_rate'] * 100:.2f}%, "
        f"LiteHit head-first {row['litehit_head_first_hit_rate'] * 100:.2f}%, "
        f"tail-first {row['litehit_tail_first_hit_rate'] * 100:.2f}% {tag}"
    )
