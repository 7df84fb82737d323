"""``litehit replay CONFIG.json``: replay a trace offline into a facts ledger.

Drives the same manager as ``litehit serve`` in process and writes
``<output_result_path>/litehit_facts.csv`` (see :mod:`litehit_service.litehit.replay`; the
config fields: :mod:`litehit_service.litehit.config`). A progress bar goes to stderr only
when it is a terminal; the run ends with one line per instance (token hit rate per capacity)
and a one-line summary (requests, instances, rows, elapsed, requests/s, facts path) on
stdout, or, with ``--json``, the same as one JSON object on stdout
(:meth:`~litehit_service.litehit.replay.ReplaySummary.to_json`). Errors go to stderr.

With ``--sample-rate R`` (< 1) and ``--sample-seeds K`` the ledgers are sampled ones, one
per seed in ``sample-rR-seedK/`` of the output folder, and the instance lines (or the JSON)
are estimates with their band (see docs/offline.md, "Sampled replays").

Exit codes: 0 success; 2 bad config or trace (``path:line: reason`` on stderr, nothing
published); 1 unexpected internal error (also nothing published); 130 / 143 stopped by
SIGINT / SIGTERM (the ledger's temporary removed, a previous ledger untouched).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from typing import Any

from litehit_service.commands import UsageError, say_plan
from litehit_service.commands.options import (
    add_config,
    add_max_line_bytes,
    add_max_workers,
    add_output_dir,
    add_touch_order,
    config_path,
    positive_int,
    sample_rate,
    sample_seeds,
)


def register(subparsers: Any) -> None:
    """Add the ``replay`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "replay",
        help="replay a trace offline into a facts ledger (litehit_facts.csv)",
        description=(
            "Replay the trace named by CONFIG.json through the in-process optimizer and write "
            "one facts row per request and instance to litehit_facts.csv in the "
            "configuration's output_result_path (or -o DIR). "
            "All or nothing: on the first bad line the replay stops with 'path:line: reason' "
            "on stderr, exit code 2, and no facts file."
        ),
    )
    add_config(p, "replay")
    add_output_dir(p)
    add_max_workers(
        p,
        "parse the trace in N processes (default: the configuration's pipeline_worker_count; "
        "the ledger is identical for every N)",
        aliases=("--workers",),
        type=positive_int,
    )
    add_touch_order(p)
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where instance lanes replay: this process (default) or one Ray task per "
        "instance (needs pip install '.[ray]'; the ledger is identical)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --executor ray: the Ray cluster to use (e.g. ray://head:10001 or auto); "
        "default: start a local Ray for this run",
    )
    p.add_argument(
        "--engine",
        choices=("auto", "python", "compact"),
        default="auto",
        help="full-attention engine: python (no numba start-up), compact (compiled arrays: "
        "~30 bytes per block, flat cost to tens of millions of blocks) or auto (the default: "
        "compact for traces of 16 MiB of JSONL and more; a compressed or Parquet file counts "
        "8 times its size); the ledger is identical",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar and no text summary (errors are still printed; --json still "
        "prints its object)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object on stdout: totals, elapsed seconds, the "
        "facts path and per instance its hit tokens and hit rate at every capacity",
    )
    p.add_argument(
        "--sample-rate",
        type=sample_rate,
        default=1.0,
        metavar="R",
        help="replay a spatial sample instead of the whole trace, so the engines hold ~R of "
        "the blocks (0 < R <= 1): a block is kept by a hash of its prefix-chained key when "
        "every instance is tail-first LRU, else whole requests by their first block below "
        "the instance's shared trunk; one ledger per seed in sample-rR-seedK/ of the output "
        "folder, whose curves and hit rates are estimates, marked as such (default: 1, the "
        "exact replay and ledger)",
    )
    p.add_argument(
        "--sample-seeds",
        type=sample_seeds,
        default=1,
        metavar="K",
        help="with --sample-rate below 1, replay K independent samples (hash salts 0..K-1) "
        "in one read of the trace; the estimate pools them and the band is a 90%% "
        "interval from their spread (1 to 64; default 1)",
    )
    add_max_line_bytes(p, "trace")
    p.set_defaults(func=run)


PLAN_MB_PER_S = 37.0
"""What ``replay`` reads on a 2-core machine, in MB/s of JSONL (bench/README.md: Mooncake
x 40, one instance, 30 capacities)."""


def run(args: argparse.Namespace) -> int:
    """Run the replay; the per-instance lines and the summary (or ``--json``: one JSON
    object) go to stdout, the progress bar to stderr (errors raise)."""
    from litehit_service.litehit.config import load_config
    from litehit_service.litehit.replay import (
        run_replay,
        with_output_dir,
        with_touch_order,
        with_workers,
    )

    if args.sample_seeds != 1 and args.sample_rate >= 1:
        raise UsageError(f"--sample-seeds {args.sample_seeds} needs --sample-rate below 1")
    if args.sample_rate < 1 and args.executor != "local":
        raise UsageError("--sample-rate replays its seeds in this process: not with --executor ray")
    if args.ray_address is not None and args.executor != "ray":
        raise UsageError("--ray-address needs --executor ray")
    if args.executor == "ray" and importlib.util.find_spec("ray") is None:
        from litehit_service.litehit.lanes import RAY_MISSING

        raise UsageError(RAY_MISSING)
    config = load_config(config_path(args))
    if args.output_dir is not None:
        config = with_output_dir(config, args.output_dir)
    if args.max_workers is not None:
        config = with_workers(config, args.max_workers)
    if args.touch_order is not None:
        config = with_touch_order(config, args.touch_order)
    if not args.quiet:
        say_plan("replay", config.trace_file_path, PLAN_MB_PER_S, config.output_result_path)
    summary = run_replay(
        config,
        progress=not args.quiet and sys.stderr.isatty(),
        max_line_bytes=args.max_line_bytes,
        executor=args.executor,
        ray_address=args.ray_address,
        engine=args.engine,
        sample_rate=args.sample_rate,
        sample_seeds=args.sample_seeds,
    )
    if args.json:
        print(json.dumps(summary.to_json(), separators=(",", ":")))
    elif not args.quiet:
        for line in summary.instance_lines():
            print(line)
        print(summary.summary_line())
    return 0
