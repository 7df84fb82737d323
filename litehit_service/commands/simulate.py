"""``litehit simulate``: LMCache's cache-simulator report at one capacity, and the exact hit
rate at every capacity, from one replay (:mod:`litehit_service.lmcache.simulator.simulate`).

The options are LMCache's (``-i/--input``, ``-o/--output``, ``-n/--max-samples``,
``--kv-bytes-per-chunk``; its ``--cache-capacity-gib`` and ``--model`` are spelled
``--capacity-gib`` and ``--instance`` here, the old spellings accepted) plus
``--trace-format`` (every trace format LiteHit reads, detected by default),
``--touch-order`` (``head-first`` gives LMCache's numbers),
``--json`` (the report as one JSON object) and ``--no-plot``. The report goes to stdout,
the run's summary line to stderr; the PNG is published atomically (its format follows the
extension: png, svg or pdf).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from litehit_core.engine import AUTO_STAIRCASE_KEYS, STAIRCASE_ENGINES
from litehit_service.commands import UsageError
from litehit_service.commands.options import (
    add_capacity_gib,
    add_instance,
    add_max_line_bytes,
    add_output_file,
    add_touch_order,
    add_trace_format,
    required_options,
)


def add_input_options(p: argparse.ArgumentParser) -> None:
    """The input options ``simulate`` and ``sweep`` share (LMCache's, plus --trace-format)."""
    required_options(p).add_argument(
        "-i", "--input", nargs="+", required=True, metavar="PATH",
        help="trace files, or LMCache directories of lookup_hashes_*.jsonl")  # fmt: skip
    add_trace_format(p, "input", aliases=("--format",))
    p.add_argument("-n", "--max-samples", type=int, default=None, metavar="N",
                   help="keep the first N requests in time order (default all)")  # fmt: skip
    add_instance(p, "keep one instance's requests: an LMCache model_name, a standard trace's "
                 "instance_id (default: all)", aliases=("--model",))  # fmt: skip
    p.add_argument("--kv-bytes-per-chunk", type=int, default=None, metavar="BYTES",
                   help="KV bytes of one chunk (LMCache: from the first event's shapes and "
                   "dtypes when omitted; required for mooncake and standard)")  # fmt: skip
    p.add_argument("--block-size", type=int, default=None, metavar="TOKENS",
                   help="mooncake/standard: tokens per key (default 512 / 256)")  # fmt: skip
    add_touch_order(p)
    p.add_argument("--engine", choices=STAIRCASE_ENGINES, default="auto",
                   help="python (no numba start-up; hashes that name their prefix only), "
                   "compact (compiled, any hashes) or auto (the default: python for inputs "
                   f"of fewer than {AUTO_STAIRCASE_KEYS:,} chunks whose hashes name their "
                   "prefix); the numbers are identical")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    add_max_line_bytes(p, "input")


def register(subparsers: Any) -> None:
    """Add the ``simulate`` subcommand."""
    p = subparsers.add_parser(
        "simulate",
        help="LMCache's cache-simulator report at one capacity, plus every capacity exactly",
        description=(
            "Replay LMCache lookup-hash logs (or a Mooncake / standard trace) once and print "
            "LMCache's simulator report at --capacity-gib (use --touch-order head-first "
            "for LMCache's numbers) followed by the exact hit rate at every capacity."
        ),
    )
    add_input_options(p)
    add_capacity_gib(required_options(p), "cache capacity in GiB (1 GiB = 1024^3 bytes; -1 = "
                     "unlimited)", aliases=("--cache-capacity-gib",), type=float,
                     required=True)  # fmt: skip
    add_output_file(p, "the statistics figure (png, svg or pdf; default cache_stats.png)",
                    default="cache_stats.png")  # fmt: skip
    p.set_defaults(func=run)


def capacity_bytes(gib: float, flag: str) -> int:
    """A capacity option in bytes by the one capacity rule
    (:func:`~litehit_core.projector.capacity_slot_bytes`: -1 = unlimited, else finite GiB in
    [0, max]); a UsageError naming ``flag`` and the value otherwise. O(1)."""
    from litehit_core.errors import InvalidRequestError
    from litehit_core.projector import capacity_slot_bytes

    try:
        return capacity_slot_bytes(gib, flag)
    except InvalidRequestError as exc:
        raise UsageError(str(exc)) from None


def plot_format(path: str, flag: str = "-o/--output") -> str:
    """The figure format of ``path`` from its extension (the rule of
    :func:`~litehit_service.litehit.plot.plot_format`); a UsageError naming ``flag``."""
    from litehit_service.litehit.plot import plot_format, plot_format_error

    problem = plot_format_error(path)
    if problem is not None:
        raise UsageError(f"{flag} {problem}")
    return plot_format(path)


def load(args: argparse.Namespace, *, depths: bool = True) -> Any:
    """The workload and its one replay, from the shared input options (``depths`` as
    :func:`~litehit_service.lmcache.simulator.simulate.replay_workload` takes it; the parser's
    choices already bound ``--engine`` and ``--touch-order``)."""
    from litehit_service.lmcache.simulator.simulate import load_workload, replay_workload

    if args.max_samples is not None and args.max_samples < 0:
        raise UsageError(f"-n/--max-samples must be >= 0, got {args.max_samples}")
    workload = load_workload(
        args.input,
        fmt=args.trace_format,
        model=args.instance,
        max_samples=args.max_samples,
        kv_bytes_per_chunk=args.kv_bytes_per_chunk,
        block_size=args.block_size,
        max_line_bytes=args.max_line_bytes,
    )
    return replay_workload(
        workload, args.touch_order or "tail-first", depths=depths, engine=args.engine
    )


def write_figure(path: str, fmt: str, draw: Any) -> None:
    """Draw and publish one figure atomically (``<path>.<pid>.tmp`` renamed at the end)."""
    from litehit_service.lmcache.simulator.plot import save
    from litehit_service.offline.outputs import atomic_outputs, tmp_path

    with atomic_outputs([path]):
        save(draw(), tmp_path(path), fmt)


def run(args: argparse.Namespace) -> int:
    """Replay once, print the report (text or JSON), draw the figure."""
    from litehit_service.lmcache.simulator.simulate import format_report, report
    from litehit_service.offline.outputs import run_line

    started = time.perf_counter()
    nbytes = capacity_bytes(args.capacity_gib, "--capacity-gib")
    fmt = None if args.no_plot else plot_format(args.output)
    replay = load(args)
    data = report(replay, nbytes)
    if args.json:
        print(json.dumps(data))
    else:
        sys.stdout.write(_header(replay) + format_report(data))
    sys.stdout.flush()
    if fmt is not None:
        from litehit_service.lmcache.simulator.plot import report_figure

        write_figure(args.output, fmt, lambda: report_figure(replay, data))
    dest = "stdout" if fmt is None else f"stdout, {args.output}"
    n = replay.workload.requests
    print(run_line("simulate", n, "requests", "1 cache", time.perf_counter() - started, dest),
          file=sys.stderr)  # fmt: skip
    return 0


def _header(replay: Any) -> str:
    """The lines before the report: what was read and simulated."""
    w = replay.workload
    kv = f"{w.kv_bytes_per_chunk:,} bytes" + (" (from the first event)" if w.detected else "")
    lines = [
        f"Loaded {w.requests:,} request(s) from {', '.join(w.sources)} ({w.fmt})",
        f"  KV bytes/chunk     : {kv}",
        f"  Chunk size         : {w.first_chunk_size} tokens",
        f"  Touch order        : {replay.touch_order}",
    ]
    if w.model:
        lines.append(f"  Model filter       : {w.model}")
    return "\n".join(lines) + "\n\n"
