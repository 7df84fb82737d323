"""``litehit curve``: the exact token hit rate at EVERY capacity, per instance, from facts.

Reads a facts ledger once, builds one exact curve per instance with the core's
accumulator (no capacity sweep; see :mod:`litehit_service.curve`), then writes

- a PNG (``-o``): one line per instance, capacity in GiB on a log axis (``--linear`` for
  a linear one), the theoretical maximum dashed, the 90/95/99%-of-max points labelled;
- the full breakpoint list as CSV (``--csv``): ``instance_id, capacity_blocks,
  capacity_gb, hit_tokens, hit_rate``;
- a text table on stdout: ~30 log-spaced capacities plus the marked points.

All or nothing: files are written to ``<path>.<pid>.tmp`` and renamed only when everything
succeeded. Errors print ``path:line: reason`` (malformed facts) or ``litehit curve: error:
...`` on stderr and exit 2. Cost: O(facts size) to read plus O(B log B) per instance for B
breakpoints; the PNG dominates when drawn (``--no-png`` skips it).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from litehit_service.commands import UsageError, add_max_line_bytes


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
    p.add_argument("facts", metavar="FACTS.csv", help="facts ledger (litehit_facts.csv)")
    p.add_argument(
        "-o",
        "--output",
        metavar="CURVE.png",
        help="PNG to write (required unless --no-png)",
    )
    p.add_argument("--csv", metavar="CURVE.csv", help="also write every exact breakpoint as CSV")
    p.add_argument("--instance", metavar="ID", help="only this instance_id")
    p.add_argument("--linear", action="store_true", help="linear capacity axis (default: log)")
    p.add_argument(
        "--no-png", action="store_true", help="skip the plot (table and --csv only; no -o)"
    )
    add_max_line_bytes(p, "facts file")
    p.set_defaults(func=run)


def _option_error(args: argparse.Namespace) -> str | None:
    if args.no_png and args.output is not None:
        return "-o/--output and --no-png contradict each other; drop one"
    if not args.no_png and args.output is None:
        return "-o/--output CURVE.png is required (or pass --no-png)"
    if args.no_png and args.linear:
        return "--linear only affects the PNG, which --no-png skips"
    outputs = [p for p in (args.output, args.csv) if p is not None]
    real = [os.path.realpath(p) for p in outputs]
    if os.path.realpath(args.facts) in real:
        return f"an output file is the facts file {args.facts!r}"
    if len(set(real)) != len(real):
        return "-o and --csv must be different files"
    if args.instance is not None and not args.instance:
        return "--instance must not be empty"
    return None


def run(args: argparse.Namespace) -> int:
    """Build the curves of ``args.facts``, write the outputs, print the table."""
    from litehit_service.offline.curve import run_curve

    problem = _option_error(args)
    if problem is not None:
        raise UsageError(problem)
    result = run_curve(
        args.facts,
        args.output,
        args.csv,
        instance_id=args.instance,
        linear=args.linear,
        max_line_bytes=args.max_line_bytes,
    )
    sys.stdout.write(result.table)
    sys.stdout.flush()
    print(result.summary_line(), file=sys.stderr)
    return 0
