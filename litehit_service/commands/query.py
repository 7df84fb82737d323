"""``litehit query``: project a facts ledger at a list of capacities (GiB), as JSON lines.

Output (one compact JSON object per line, shapes from :func:`litehit_core.query_facts`):
one row per request, one summary per instance (lexicographic ``instance_id``), one total
row; ``--summary-only`` keeps just the summaries and the total. Slots keep the caller's
order; duplicates and 0 are allowed; a negative capacity (e.g. ``-1``) means infinite.

All or nothing: the output goes to ``<OUT>.tmp`` (or, for stdout, a spooled temporary
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
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

import orjson

from litehit_core import MAX_CAPACITY_GB
from litehit_service.outputs import atomic_outputs, progress

WRITE_BATCH = 2048
"""Lines joined per write call."""
SPOOL_BYTES = 64 * 1024 * 1024
"""Stdout output is buffered in memory up to this size, then in a temporary file."""


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


def json_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Compact JSON text of each row plus ``\\n`` (orjson: shortest round-trip floats).

    Parses back to exactly the rows (``json.loads``). NaN and infinities cannot occur in
    ``query_facts`` output and would raise. O(total values), C-speed.
    """
    dumps = orjson.dumps
    for row in rows:
        yield dumps(row).decode() + "\n"


def _write_batched(lines: Iterable[str], out: IO[str]) -> None:
    batch: list[str] = []
    append = batch.append
    for line in lines:
        append(line)
        if len(batch) >= WRITE_BATCH:
            out.write("".join(batch))
            batch.clear()
    if batch:
        out.write("".join(batch))


def run(args: argparse.Namespace) -> int:
    """Run the query; returns the exit code (0, or 2 on any error)."""
    from litehit_core import FactsFormatError, InvalidRequestError, query_facts, read_facts

    out_path = args.output
    if out_path is not None and os.path.realpath(out_path) == os.path.realpath(args.facts):
        print(f"litehit query: error: -o {out_path!r} is the facts file", file=sys.stderr)
        return 2
    started = time.perf_counter()
    stats = {"requests": 0, "instances": 0}
    try:
        rows = progress(read_facts(args.facts), "req")
        results = _tally(query_facts(rows, args.capacity_gb), stats, args.summary_only)
        if out_path is not None:
            with atomic_outputs([out_path]) as (tmp,):
                with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
                    _write_batched(json_lines(results), fh)
        else:
            with tempfile.SpooledTemporaryFile(
                max_size=SPOOL_BYTES, mode="w+", encoding="utf-8", newline="\n"
            ) as spool:
                _write_batched(json_lines(results), spool)
                spool.seek(0)
                shutil.copyfileobj(spool, sys.stdout)
                sys.stdout.flush()
    except BaseException as exc:
        if isinstance(exc, FactsFormatError):
            print(exc, file=sys.stderr)
            return 2
        if isinstance(exc, InvalidRequestError):
            print(f"litehit query: error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, BrokenPipeError):
            _silence_stdout()
            return 1
        if isinstance(exc, OSError) and exc.filename is not None:
            print(f"{exc.filename}: {exc.strerror}", file=sys.stderr)
            return 2
        raise
    elapsed = time.perf_counter() - started
    n = stats["requests"]
    rate = n / elapsed if elapsed > 0 else 0.0
    print(
        f"query: {n} requests, {stats['instances']} instances, {elapsed:.3f} s, "
        f"{rate:,.0f} requests/s -> {out_path or 'stdout'}",
        file=sys.stderr,
    )
    return 0


def _tally(
    results: Iterable[dict[str, Any]], stats: dict[str, int], summary_only: bool
) -> Iterator[dict[str, Any]]:
    """Pass rows through (dropping per-request rows if ``summary_only``), counting into
    ``stats``: requests from the total row, instances from the per-instance summaries."""
    for row in results:
        if "summary" in row:
            if "instance_id" in row:
                stats["instances"] += 1
            else:
                stats["requests"] = row["requests"]
        elif summary_only:
            continue
        yield row


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at devnull so the interpreter's flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
