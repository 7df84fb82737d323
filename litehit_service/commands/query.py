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
from typing import IO, TYPE_CHECKING, Any

import orjson

from litehit_core import MAX_CAPACITY_GB
from litehit_service.outputs import atomic_outputs, progress

if TYPE_CHECKING:
    from litehit_core import FactsQuery, QueryChunk

_NUMPY = orjson.OPT_SERIALIZE_NUMPY

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


def _chunk_lines(chunk: QueryChunk) -> bytes:
    """A chunk's per-request rows as JSON lines, the same JSON as :func:`json_lines` of
    ``query_facts`` rows. The two matrices are serialised in bulk (orjson, C) and split
    into rows; per row only ids and two ints are formatted. O(rows x slots)."""
    dumps = orjson.dumps
    hits = dumps(chunk.hit_blocks, option=_NUMPY)[2:-2].split(b"],[")
    rates = dumps(chunk.hit_rates, option=_NUMPY)[2:-2].split(b"],[")
    ids: dict[str, bytes] = {}
    lines = []
    append = lines.append
    for row, h, r in zip(chunk.rows, hits, rates):
        iid = ids.get(row.instance_id)
        if iid is None:
            iid = ids[row.instance_id] = dumps(row.instance_id)
        append(
            b'{"trace_id":%b,"instance_id":%b,"timestamp_ns":%d,"input_token_len":%d,'
            b'"hit_blocks":[%b],"hit_rates":[%b]}\n'
            % (dumps(row.trace_id), iid, row.timestamp_ns, row.input_token_len, h, r)
        )
    return b"".join(lines)


def _write_query(
    query: FactsQuery, rows: Iterable[Any], out: IO[bytes], summary_only: bool
) -> tuple[int, int]:
    """Write every line of ``query`` over ``rows`` to ``out``; returns (requests, instances)."""
    for chunk in query.chunks(rows):
        if not summary_only:
            out.write(_chunk_lines(chunk))
    summaries = query.summaries()
    out.write(b"".join(orjson.dumps(row) + b"\n" for row in summaries))
    return summaries[-1]["requests"], len(summaries) - 1


def run(args: argparse.Namespace) -> int:
    """Run the query; returns the exit code (0, or 2 on any error)."""
    from litehit_core import FactsFormatError, FactsQuery, InvalidRequestError, read_facts

    out_path = args.output
    if out_path is not None and os.path.realpath(out_path) == os.path.realpath(args.facts):
        print(f"litehit query: error: -o {out_path!r} is the facts file", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        query = FactsQuery(args.capacity_gb)
        rows = progress(read_facts(args.facts), "req")
        if out_path is not None:
            with atomic_outputs([out_path]) as (tmp,), open(tmp, "wb") as fh:
                n, instances = _write_query(query, rows, fh, args.summary_only)
        else:
            with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, mode="w+b") as spool:
                n, instances = _write_query(query, rows, spool, args.summary_only)
                spool.seek(0)
                sys.stdout.flush()
                shutil.copyfileobj(spool, sys.stdout.buffer)
                sys.stdout.buffer.flush()
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
    rate = n / elapsed if elapsed > 0 else 0.0
    print(
        f"query: {n} requests, {instances} instances, {elapsed:.3f} s, "
        f"{rate:,.0f} requests/s -> {out_path or 'stdout'}",
        file=sys.stderr,
    )
    return 0


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at devnull so the interpreter's flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
