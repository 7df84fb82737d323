"""``litehit convert``: turn a Mooncake, LMCache or standard trace into standard trace JSONL.

The output has one compact JSON object per event, keys in the order ``type, instance_id,
trace_id, timestamp_ns, keys, input_len`` (see
:func:`litehit_service.offline.traces.standard.format_standard_event`).
Every timestamp is shifted by ``--time-offset-ns`` (default 1,000,000 ns = 1 ms) because
the standard format needs ``timestamp_ns > 0`` while Mooncake traces start at 0 ms; pass
``--time-offset-ns 0`` to keep timestamps unchanged. Output timestamps must not go
backwards (a replay would reject the file).

All or nothing: the output (and the optional ``--emit-config`` file) is written to
``<path>.<pid>.tmp`` and renamed only when the whole input converted; on any error nothing is
published, the message ``path:line: reason`` goes to stderr and the exit code is 2.
A progress bar (the input's bytes; LMCache: events) is drawn on stderr only when it is a
terminal; the run ends with a one-line summary there.
Cost: O(input size) time, O(longest line) memory (LMCache: O(events), as logs are sorted).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from litehit_service.commands import UsageError, add_max_line_bytes
from litehit_service.offline.convert import (
    DEFAULT_MOONCAKE_BLOCK_SIZE,
    DEFAULT_STANDARD_BLOCK_SIZE,
    DEFAULT_TIME_OFFSET_NS,
    FORMATS,
)
from litehit_service.offline.traces import READERS, get_reader


def register(subparsers: Any) -> None:
    """Add the ``convert`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "convert",
        help="convert a Mooncake / LMCache / standard trace to standard trace JSONL",
        description=(
            "Convert a trace to LiteHit's standard JSONL (one compact object per event). "
            "The output is published atomically; on error nothing is written, "
            "'path:line: reason' goes to stderr and the exit code is 2."
        ),
    )
    p.add_argument(
        "--from",
        dest="source_format",
        required=True,
        choices=FORMATS,
        help="input format",
    )
    p.add_argument(
        "input",
        metavar="INPUT",
        help="input trace file (lmcache: a JSONL file or a directory of lookup_hashes_*.jsonl)",
    )
    p.add_argument("-o", "--output", required=True, metavar="OUTPUT.jsonl", help="output file")
    p.add_argument(
        "--block-size",
        type=_positive_int,
        metavar="N",
        help=(
            f"mooncake: tokens per hash id (default {DEFAULT_MOONCAKE_BLOCK_SIZE}); "
            f"standard: the trace granularity written by --emit-config "
            f"(default {DEFAULT_STANDARD_BLOCK_SIZE}); not for lmcache (chunk_size is in the logs)"
        ),
    )
    p.add_argument(
        "--instance-id",
        metavar="ID",
        help="mooncake only: instance id of every event (default 'default')",
    )
    p.add_argument(
        "--model",
        metavar="M",
        help="lmcache only: keep only this model_name (instance id = model_name)",
    )
    p.add_argument(
        "--kv-bytes-per-chunk",
        type=_positive_int,
        metavar="N",
        help=(
            "KV bytes of one block/chunk. lmcache: overrides the size computed from "
            "dtypes/shapes (needed for unknown dtypes); mooncake/standard: the location spec "
            "size written by --emit-config instead of a placeholder"
        ),
    )
    p.add_argument(
        "--time-offset-ns",
        type=_non_negative_int,
        default=DEFAULT_TIME_OFFSET_NS,
        metavar="N",
        help=(
            "added to every timestamp (default %(default)s ns = 1 ms, so Mooncake's 0 ms "
            "start becomes a valid timestamp_ns > 0; 0 keeps timestamps unchanged)"
        ),
    )
    p.add_argument(
        "--emit-config",
        metavar="CONFIG.json",
        help="also write a starter 'litehit replay' config for the converted trace",
    )
    add_max_line_bytes(p, "input")
    p.set_defaults(func=run)


def _positive_int(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be an integer > 0, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def _taking(option: str) -> str:
    """The formats whose reader takes ``option``, as ``--from`` values (``mooncake``)."""
    return " / ".join(name for name, reader in READERS.items() if option in reader.options)


def _option_error(args: argparse.Namespace) -> str | None:
    """Why the options do not fit ``--from`` (or ``None``): each is a question to the
    format's reader (the options it takes, whether its trace states its key sizes)."""
    fmt = args.source_format
    reader = get_reader(fmt)
    if args.instance_id is not None and "instance_id" not in reader.options:
        return f"--instance-id applies to --from {_taking('instance_id')} only, not --from {fmt}"
    if args.instance_id is not None and not args.instance_id:
        return "--instance-id must not be empty"
    if args.model is not None and "model" not in reader.options:
        return f"--model applies to --from {_taking('model')} only, not --from {fmt}"
    if args.block_size is not None and reader.sizes_in_trace:
        return f"--block-size does not apply to --from {fmt} (chunk_size comes from the logs)"
    no_block_option = "block_size" not in reader.options
    if args.block_size is not None and no_block_option and args.emit_config is None:
        return f"--block-size with --from {fmt} only sets block_size in --emit-config"
    no_kv_option = "kv_bytes_per_chunk" not in reader.options
    if args.kv_bytes_per_chunk is not None and no_kv_option and args.emit_config is None:
        return f"--kv-bytes-per-chunk with --from {fmt} only sets the spec size in --emit-config"
    if args.emit_config is not None and _same_path(args.emit_config, args.output):
        return "--emit-config and --output must be different"
    return None


def _same_path(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def run(args: argparse.Namespace) -> int:
    """Convert ``args.input`` to ``args.output`` (errors raise; see cli)."""
    from litehit_service.offline.convert import convert_trace

    problem = _option_error(args)
    if problem is not None:
        raise UsageError(problem)
    summary = convert_trace(
        args.source_format,
        args.input,
        args.output,
        block_size=args.block_size,
        instance_id=args.instance_id,
        model=args.model,
        kv_bytes_per_chunk=args.kv_bytes_per_chunk,
        time_offset_ns=args.time_offset_ns,
        emit_config=args.emit_config,
        max_line_bytes=args.max_line_bytes,
    )
    if summary.note:
        print(summary.note, file=sys.stderr)
    print(summary.line(), file=sys.stderr)
    return 0
