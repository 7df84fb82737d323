"""``litehit query``: project a facts ledger at a list of capacities (GiB), as JSON lines.

Output (one compact JSON object per line, shapes from :func:`litehit_core.query_facts`):
one row per request, one summary per instance (lexicographic ``instance_id``), one total
row; ``--summary-only`` keeps just the summaries and the total. Slots keep the caller's
order; duplicates and 0 are allowed; a negative capacity (e.g. ``-1``) means infinite.

All or nothing: the output goes to ``<OUT>.<pid>.tmp`` (or, for stdout, a spooled temporary
buffer) and is published only after the last row was read and projected, so a malformed
row anywhere fails the whole query with ``path:line: reason`` on stderr, exit code 2 and
no output. A one-line summary (requests, instances, elapsed, requests/s) ends on stderr;
a progress bar is shown there only when stderr is a terminal.
Cost: O(rows x slots) time, O(chunk + instances x slots) memory (plus the output for stdout).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from litehit_core import MAX_CAPACITY_GB
from litehit_service.commands import UsageError, add_max_line_bytes


def register(subparsers: Any) -> None:
    """Add the ``query`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "query",
        help="hits of a facts file at given capacities (GiB) as JSON lines",
        description=(
            "Project every request of a facts ledger at each capacity (GiB; negative = "
            "infinite) and print one JSON object per line: per-request rows, one summary per "
            "instance, one total. Output is all or nothing; errors exit 2."
        ),
    )
    p.add_argument("facts", metavar="FACTS.csv", help="facts ledger (litehit_facts.csv)")
    p.add_argument(
        "--capacity-gb",
        dest="capacity_gb",
        nargs="+",
        required=True,
        type=capacity_arg,
        metavar="G",
        help="capacities in GiB, in output slot order; 0 and duplicates allowed; "
        "negative (e.g. -1) = infinite",
    )
    p.add_argument(
        "-o", "--output", metavar="OUT.jsonl", help="write here (atomically) instead of stdout"
    )
    p.add_argument(
        "--summary-only",
        action="store_true",
        help="only the per-instance summaries and the total (no per-request rows)",
    )
    add_max_line_bytes(p, "facts file")
    p.set_defaults(func=run)


def capacity_arg(text: str) -> int | float:
    """Parse one ``--capacity-gb`` value: an int (kept as int) or a finite float.

    Negative means infinite; the value is echoed as given in the summaries' ``capacity_gb``.
    """
    value: int | float | None
    try:
        value = int(text)
    except ValueError:
        value = _float_or_none(text)
    if value is None:
        raise argparse.ArgumentTypeError(
            f"must be a number of GiB (negative = infinite), got {text!r}"
        )
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"must be finite (use a negative value such as -1 for infinite), got {text!r}"
        )
    if value > MAX_CAPACITY_GB:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_CAPACITY_GB} GiB (bytes must fit in int64), got {text!r}"
        )
    return value


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def run(args: argparse.Namespace) -> int:
    """Run the query; the summary line goes to stderr (errors raise; see cli)."""
    from litehit_service.offline.query import run_query

    if args.output is not None and os.path.realpath(args.output) == os.path.realpath(args.facts):
        raise UsageError(f"-o {args.output!r} is the facts file")
    summary = run_query(
        args.facts,
        args.capacity_gb,
        args.output,
        summary_only=args.summary_only,
        max_line_bytes=args.max_line_bytes,
    )
    print(summary.line(), file=sys.stderr)
    return 0
