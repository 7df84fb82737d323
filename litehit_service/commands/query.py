"""``litehit query``: project a facts ledger at a list of capacities (GiB), as JSON lines.

Output (one compact JSON object per line, shapes from :func:`litehit_core.query_facts`):
one row per request, one summary per instance (lexicographic ``instance_id``), one total
row; ``--summary-only`` keeps just the summaries and the total. Slots keep the caller's
order; duplicates and 0 are allowed; ``-1`` means infinite (any other negative value, NaN
or inf is a usage error, exit code 2).

All or nothing: the output goes to ``<OUT>.<pid>.tmp`` (or, for stdout, a spooled temporary
buffer) and is published only after the last row was read and projected, so a malformed
row anywhere fails the whole query with ``path:line: reason`` on stderr, exit code 2 and
no output. A one-line summary (requests, instances, elapsed, requests/s) ends on stderr;
a progress bar is shown there only when stderr is a terminal.
Cost: O(rows x slots) time, O(chunk + instances x slots) memory (plus the output for stdout).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from litehit_core import CAPACITY_SLOT_RULE, InvalidRequestError, capacity_slot_bytes
from litehit_service.commands import UsageError
from litehit_service.commands.options import (
    add_capacity_gib,
    add_max_line_bytes,
    add_output_file,
    required_options,
)


def register(subparsers: Any) -> None:
    """Add the ``query`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "query",
        help="hits of a facts file at given capacities (GiB) as JSON lines",
        description=(
            "Project every request of a facts ledger at each capacity (GiB; -1 = "
            "infinite) and print one JSON object per line: per-request rows, one summary per "
            "instance, one total. Output is all or nothing; errors exit 2."
        ),
    )
    p.add_argument("facts", metavar="FACTS.csv", help="facts ledger (litehit_facts.csv)")
    add_capacity_gib(
        required_options(p),
        "capacities in GiB (1 GiB = 1024^3 bytes), in output slot order; 0 (no hits) and "
        "duplicates allowed; -1 = infinite (the only negative value accepted)",
        aliases=("--capacity-gb",),
        nargs="+",
        required=True,
        type=capacity_arg,
    )
    add_output_file(p, "write the JSON lines to FILE, atomically (default: stdout)")
    p.add_argument(
        "--summary-only",
        action="store_true",
        help="only the per-instance summaries and the total (no per-request rows)",
    )
    add_max_line_bytes(p, "facts file")
    p.set_defaults(func=run)


def capacity_arg(text: str) -> int | float:
    """Parse one ``--capacity-gib`` value: an int (kept as int) or a float, checked by the
    core's one rule (:func:`litehit_core.capacity_slot_bytes`: -1 = infinite, else finite
    and in [0, MAX_CAPACITY_GB]); the value is echoed as given in the summaries'
    ``capacity_gb``. An ``ArgumentTypeError`` (exit code 2) names the text otherwise."""
    value: int | float | None
    try:
        value = int(text)
    except ValueError:
        value = _float_or_none(text)
    try:
        capacity_slot_bytes(value)
    except InvalidRequestError:
        raise argparse.ArgumentTypeError(f"must be {CAPACITY_SLOT_RULE}, got {text!r}") from None
    assert value is not None  # None is not a number: rejected above
    return value


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def run(args: argparse.Namespace) -> int:
    """Run the query; the summary line goes to stderr (errors raise; see cli)."""
    from litehit_service.litehit.query import run_query

    if args.output is not None and os.path.realpath(args.output) == os.path.realpath(args.facts):
        raise UsageError(f"-o {args.output!r} is the facts file")
    summary = run_query(
        args.facts,
        args.capacity_gib,
        args.output,
        summary_only=args.summary_only,
        max_line_bytes=args.max_line_bytes,
    )
    print(summary.line(), file=sys.stderr)
    return 0
