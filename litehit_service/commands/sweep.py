"""``litehit sweep``: LMCache's capacity sweep (hit rate at log-spaced capacities) from ONE
replay, with the exact curve drawn through the sweep's points.

LMCache's options (``--min-capacity-gib``, ``--max-capacity-gib``, ``--points``,
``--linear``, ``-o``, and the input options of ``simulate``) plus ``--touch-order``,
``--json`` and ``--no-plot``. The capacities are spaced exactly as LMCache spaces them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from litehit_service.commands import UsageError
from litehit_service.commands.options import add_output_file
from litehit_service.commands.simulate import add_input_options, load, plot_format, write_figure


def register(subparsers: Any) -> None:
    """Add the ``sweep`` subcommand."""
    p = subparsers.add_parser(
        "sweep",
        help="LMCache's capacity sweep from one replay, with the exact curve",
        description=(
            "Hit rate at --points log-spaced capacities from --min-capacity-gib to "
            "--max-capacity-gib (as LMCache's sweep spaces them), all from one replay, and a "
            "PNG of the exact curve with the sweep's points marked."
        ),
    )
    add_input_options(p)
    p.add_argument("--min-capacity-gib", type=float, default=0.5, metavar="GiB",
                   help="smallest capacity (default 0.5)")  # fmt: skip
    p.add_argument("--max-capacity-gib", type=float, default=500.0, metavar="GiB",
                   help="largest capacity (default 500)")  # fmt: skip
    p.add_argument("--points", type=int, default=30, metavar="N",
                   help="log-spaced capacities (default 30)")  # fmt: skip
    p.add_argument("--linear", action="store_true", help="linear capacity axis (default: log)")
    add_output_file(p, "the figure (png, svg or pdf; default hit_rate_vs_capacity.png)",
                    default="hit_rate_vs_capacity.png")  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Replay once, print the sweep table (text or JSON), draw the figure."""
    from litehit_service.lmcache.simulator.simulate import (
        SimulateError,
        format_sweep,
        sweep,
        sweep_capacities,
    )
    from litehit_service.offline.outputs import run_line

    started = time.perf_counter()
    try:
        capacities = sweep_capacities(args.min_capacity_gib, args.max_capacity_gib, args.points)
    except SimulateError as exc:
        raise UsageError(str(exc)) from None
    if args.no_plot and args.linear:
        raise UsageError("--linear only affects the figure, which --no-plot skips")
    fmt = None if args.no_plot else plot_format(args.output)
    replay = load(args, depths=False)
    data = sweep(replay, capacities)
    if args.json:
        print(json.dumps(data))
    else:
        w = replay.workload
        sys.stdout.write(
            f"Sweeping {len(capacities)} capacities ({args.min_capacity_gib:.2f} – "
            f"{args.max_capacity_gib:.2f} GiB), chunk_size = {w.first_chunk_size} tokens, "
            f"model = {w.model or 'all models'}, {replay.touch_order}, one replay\n\n"
            + format_sweep(data)
        )
    sys.stdout.flush()
    if fmt is not None:
        from litehit_service.lmcache.simulator.plot import sweep_figure

        write_figure(args.output, fmt, lambda: sweep_figure(replay, data, args.linear))
    dest = "stdout" if fmt is None else f"stdout, {args.output}"
    n = replay.workload.requests
    print(run_line("sweep", n, "requests", f"{len(capacities)} capacities",
                   time.perf_counter() - started, dest), file=sys.stderr)  # fmt: skip
    return 0
