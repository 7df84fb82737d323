"""``litehit curve``: the exact token hit rate at EVERY capacity, per instance, from facts.

Reads a facts ledger once, builds one exact curve per instance with the core's
accumulator (no capacity sweep; see :mod:`litehit_service.curve`), then writes

- a PNG (``-o``): one line per instance, capacity in GiB on a log axis (``--linear`` for
  a linear one), the theoretical maximum dashed, the 90/95/99%-of-max points labelled;
- the full breakpoint list as CSV (``--csv``): ``instance_id, capacity_blocks,
  capacity_gb, hit_tokens, hit_rate``;
- a text table on stdout: ~30 log-spaced capacities plus the marked points.

All or nothing: files are written to ``<path>.tmp`` and renamed only when everything
succeeded. Errors print ``path:line: reason`` (malformed facts) or ``litehit curve: error:
...`` on stderr and exit 2. Cost: O(facts size) to read plus O(B log B) per instance for B
breakpoints; the PNG dominates when drawn (``--no-png`` skips it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any


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
    """Build the curves of ``args.facts`` and write the outputs; returns the exit code."""
    from litehit_core import FactsFormatError, InvalidRequestError, read_facts
    from litehit_service import curve as curves_mod
    from litehit_service.outputs import atomic_outputs, progress

    problem = _option_error(args)
    if problem is not None:
        print(f"litehit curve: error: {problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    outputs = [p for p in (args.output, args.csv) if p is not None]
    counter = [0]
    try:
        with atomic_outputs(outputs):
            rows = progress(_counted(read_facts(args.facts), counter), "req")
            curves = curves_mod.build_curves(rows, args.instance)
            if args.csv is not None:
                curves_mod.write_breakpoints_csv(curves, args.csv)
            if args.output is not None:
                curves_mod.plot_curves(
                    curves,
                    args.output,
                    linear=args.linear,
                    title=f"Exact LRU prefix-cache hit rate: {os.path.basename(args.facts)}",
                )
    except BaseException as exc:
        if isinstance(exc, FactsFormatError):
            print(exc, file=sys.stderr)
            return 2
        if isinstance(exc, InvalidRequestError):
            print(f"litehit curve: error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, OSError) and exc.filename is not None:
            print(f"{exc.filename}: {exc.strerror}", file=sys.stderr)
            return 2
        raise
    elapsed = time.perf_counter() - started
    sys.stdout.write(curves_mod.format_table(curves))
    sys.stdout.flush()
    count = counter[0]
    rate = count / elapsed if elapsed > 0 else 0.0
    dest = ", ".join(outputs) if outputs else "table only"
    print(
        f"curve: {count} requests, {len(curves)} instances, {elapsed:.3f} s, "
        f"{rate:,.0f} requests/s -> {dest}",
        file=sys.stderr,
    )
    return 0


def _counted(rows: Iterable[Any], counter: list[int]) -> Iterator[Any]:
    n = 0
    for n, row in enumerate(rows, 1):  # noqa: B007 - n is read after the loop
        yield row
    counter[0] = n
