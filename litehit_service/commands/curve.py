"""``litehit curve``: the exact token hit rate at EVERY capacity, per instance, from facts
or, with ``--server HOST:PORT --instance ID``, of a running instance (GetHitRateCurve; see
:mod:`litehit_service.live`), rendered the same way.

Reads a facts ledger once, builds one exact curve per instance with the core's
accumulator (no capacity sweep; see :mod:`litehit_service.curve`), then writes

- a plot (``-o``; PNG, SVG or PDF as its extension says, any other extension a usage
  error before any work): one line per instance, capacity in GiB on a log axis
  (``--linear`` for a linear one) from just below where the curves start to rise, with
  the capacity in blocks on top when all instances share one block size in bytes, the
  theoretical maximum dashed, the 90/95/99%-of-max points labelled, a title naming the
  trace (the ledger's folder) and the instances; ``--block-bytes-unknown`` draws the
  capacity in blocks only (for a ledger whose bytes per block are a placeholder, such as
  ``litehit convert --emit-config``'s);
- the full breakpoint list as CSV (``--csv``): ``instance_id, capacity_blocks,
  capacity_bytes, capacity_gb, hit_tokens, hit_rate`` (a live curve of more than 100,000
  corners: its exact samples);
- a text table on stdout: ~30 log-spaced capacities plus the marked points.

All or nothing: files are written to ``<path>.<pid>.tmp`` and renamed only when everything
succeeded. Errors print ``path:line: reason`` (malformed facts) or ``litehit curve: error:
...`` on stderr and exit 2. Cost: O(facts size) to read plus O(B log B) per instance for B
breakpoints; the plot dominates when drawn (``--no-png`` skips it).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from litehit_service.commands import UsageError
from litehit_service.commands.options import add_instance, add_max_line_bytes, add_output_file


def register(subparsers: Any) -> None:
    """Add the ``curve`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "curve",
        help="exact hit-rate curve over every capacity (PNG, CSV, table) from a facts file",
        description=(
            "Plot and tabulate the exact cumulative token hit rate of an LRU of every "
            "capacity, per instance, from a facts ledger written by 'litehit replay'. "
            "Files are published atomically; on error nothing is written and the exit code is 2."
        ),
    )
    p.add_argument("facts", metavar="FACTS.csv", nargs="?", help="facts ledger (litehit_facts.csv)")
    p.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="draw the live curve of --instance on this server (GetHitRateCurve) instead of "
        "a ledger's",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=30.0,
        help="--server: seconds per call (default 30)",
    )
    p.add_argument(
        "--tls-ca",
        metavar="FILE",
        default=None,
        help="--server: PEM CA certificate; enables TLS (default: plaintext)",
    )
    add_output_file(
        p,
        "the plot to write, in the format its extension names: .png, .svg or .pdf "
        "(required unless --no-png)",
    )
    p.add_argument("--csv", metavar="FILE", help="also write every exact breakpoint as CSV")
    add_instance(p, "only this instance (default: every instance of the ledger)")
    p.add_argument("--linear", action="store_true", help="linear capacity axis (default: log)")
    p.add_argument(
        "--no-png", action="store_true", help="skip the plot (table and --csv only; no -o)"
    )
    p.add_argument(
        "--block-bytes-unknown",
        action="store_true",
        help="the bytes per block are a placeholder (e.g. from convert --emit-config): draw "
        "the capacity in blocks, labelled 'bytes per block unknown', instead of GiB",
    )
    add_max_line_bytes(p, "facts file")
    p.set_defaults(func=run)


def _option_error(args: argparse.Namespace) -> str | None:
    if args.server is not None and args.facts is not None:
        return "give FACTS.csv or --server, not both"
    if args.server is None and args.facts is None:
        return "FACTS.csv is required (or --server HOST:PORT --instance ID for a live curve)"
    if args.server is not None and not args.instance:
        return "--server needs --instance ID (the live curve of one instance)"
    if args.server is None and (args.tls_ca is not None or args.timeout != 30.0):
        return "--timeout and --tls-ca only apply with --server"
    if args.no_png and args.output is not None:
        return "-o/--output and --no-png contradict each other; drop one"
    if not args.no_png and args.output is None:
        return "-o/--output CURVE.png is required (or pass --no-png)"
    if args.no_png and args.linear:
        return "--linear only affects the PNG, which --no-png skips"
    if args.no_png and args.block_bytes_unknown:
        return "--block-bytes-unknown only affects the plot, which --no-png skips"
    outputs = [p for p in (args.output, args.csv) if p is not None]
    real = [os.path.realpath(p) for p in outputs]
    if args.facts is not None and os.path.realpath(args.facts) in real:
        return f"an output file is the facts file {args.facts!r}"
    if len(set(real)) != len(real):
        return "-o and --csv must be different files"
    if args.instance is not None and not args.instance:
        return "--instance must not be empty"
    if args.output is not None:
        from litehit_service.litehit.plot import plot_format_error

        problem = plot_format_error(args.output)
        if problem is not None:
            return f"-o/--output {problem}"
    return None


def run(args: argparse.Namespace) -> int:
    """Build the curves of ``args.facts``, write the outputs, print the table."""
    from litehit_service.litehit.curve import run_curve

    problem = _option_error(args)
    if problem is not None:
        raise UsageError(problem)
    if args.server is not None:
        return _run_live(args)
    result = run_curve(
        args.facts,
        args.output,
        args.csv,
        instance_id=args.instance,
        linear=args.linear,
        max_line_bytes=args.max_line_bytes,
        block_bytes_unknown=args.block_bytes_unknown,
    )
    sys.stdout.write(result.table)
    sys.stdout.flush()
    print(result.summary_line(), file=sys.stderr)
    return 0


def _run_live(args: argparse.Namespace) -> int:
    """``--server``: fetch the live curve of ``args.instance`` and render it like a ledger's
    (a transport failure is exit 1, an unknown instance exit 2, decided by the CLI)."""
    import time

    import grpc

    from litehit_service.client import OptimizerClient
    from litehit_service.commands import CommandFailed, rpc_detail
    from litehit_service.litehit.curve import format_table, render_curves
    from litehit_service.live import fetch_live_curve
    from litehit_service.offline.outputs import run_line

    started = time.perf_counter()
    fetched = []

    def build() -> list:
        try:
            with OptimizerClient(args.server, timeout=args.timeout, tls_ca=args.tls_ca) as c:
                fetched.append(fetch_live_curve(c, args.instance))
        except grpc.RpcError as exc:
            raise CommandFailed(f"{args.server} unreachable: {rpc_detail(exc)}") from None
        return [fetched[0].curve]

    title = f"Exact LRU prefix-cache hit rate, live: {args.instance} on {args.server}"
    curves, outputs = render_curves(
        build,
        args.output,
        args.csv,
        linear=args.linear,
        title=title,
        block_bytes_unknown=args.block_bytes_unknown,
    )
    sys.stdout.write(format_table(curves))
    live = fetched[0]
    if not live.exact_everywhere:
        sys.stdout.write(
            f"(the curve has {live.answer.corners} corners: drawn through "
            f"{len(live.answer.points)} exact samples; every number above is exact)\n"
        )
    sys.stdout.flush()
    dest = ", ".join(outputs) if outputs else "table only"
    requests = live.answer.total_queries
    elapsed = time.perf_counter() - started
    print(run_line("curve", requests, "requests", "1 instances", elapsed, dest), file=sys.stderr)
    return 0
