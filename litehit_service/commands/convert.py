"""``litehit convert``: turn a Mooncake, LMCache or standard trace into standard trace JSONL.

The output has one compact JSON object per event, keys in the order ``type, instance_id,
trace_id, timestamp_ns, keys, input_len`` (see
:func:`litehit_service.traces.format_standard_event`).
Every timestamp is shifted by ``--time-offset-ns`` (default 1,000,000 ns = 1 ms) because
the standard format needs ``timestamp_ns > 0`` while Mooncake traces start at 0 ms; pass
``--time-offset-ns 0`` to keep timestamps unchanged. Output timestamps must not go
backwards (a replay would reject the file).

All or nothing: the output (and the optional ``--emit-config`` file) is written to
``<path>.tmp`` and renamed only when the whole input converted; on any error nothing is
published, the message ``path:line: reason`` goes to stderr and the exit code is 2.
Cost: O(input size) time, O(longest line) memory (LMCache: O(events), as logs are sorted).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from litehit_service.outputs import atomic_outputs, progress, tmp_path
from litehit_service.traces import (
    INT64_MAX,
    TraceEvent,
    TraceFormatError,
    format_standard_event,
    read_lmcache,
    read_mooncake,
    read_standard,
)

FORMATS = ("mooncake", "lmcache", "standard")
DEFAULT_TIME_OFFSET_NS = 1_000_000
"""Added to every timestamp so a Mooncake trace (starting at 0 ms) becomes valid (> 0)."""
DEFAULT_MOONCAKE_BLOCK_SIZE = 512
"""Tokens per hash id in the Mooncake FAST'25 traces."""
DEFAULT_STANDARD_BLOCK_SIZE = 256
"""``block_size`` written by ``--emit-config`` for a standard input (the replay default)."""
PLACEHOLDER_BYTES_PER_TOKEN = 131_072
"""Placeholder KV bytes per token for ``--emit-config`` when the trace does not say
(Mooncake, standard): Llama-3.1-8B in bf16 = 2 (K, V) x 32 layers x 8 KV heads x 128 dims
x 2 bytes. The spec size written is this times ``block_size``."""
STARTER_CAPACITIES_GB = (16, 64, 256, 1024, 4096)
"""Capacities (GiB) of the starter config's "default" instance group."""


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


def _option_error(args: argparse.Namespace) -> str | None:
    """Why the options do not fit ``--from`` (or ``None``)."""
    fmt = args.source_format
    if args.instance_id is not None and fmt != "mooncake":
        return f"--instance-id applies to --from mooncake only, not --from {fmt}"
    if args.instance_id is not None and not args.instance_id:
        return "--instance-id must not be empty"
    if args.model is not None and fmt != "lmcache":
        return f"--model applies to --from lmcache only, not --from {fmt}"
    if args.block_size is not None and fmt == "lmcache":
        return "--block-size does not apply to --from lmcache (chunk_size comes from the logs)"
    if args.block_size is not None and fmt == "standard" and args.emit_config is None:
        return "--block-size with --from standard only sets block_size in --emit-config"
    if args.kv_bytes_per_chunk is not None and fmt != "lmcache" and args.emit_config is None:
        return f"--kv-bytes-per-chunk with --from {fmt} only sets the spec size in --emit-config"
    if args.emit_config is not None and _same_path(args.emit_config, args.output):
        return "--emit-config and --output must be different"
    return None


def _same_path(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def run(args: argparse.Namespace) -> int:
    """Convert ``args.input`` to ``args.output``; returns the exit code (0, or 2 on error)."""
    problem = _option_error(args)
    if problem is not None:
        print(f"litehit convert: error: {problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    published = [args.output] + ([args.emit_config] if args.emit_config else [])
    tmp_paths = [tmp_path(path) for path in published]
    try:
        with atomic_outputs(published):
            count, instances, note = _convert(args, tmp_paths)
    except BaseException as exc:
        if isinstance(exc, TraceFormatError):
            print(exc, file=sys.stderr)
            return 2
        if isinstance(exc, OSError) and exc.filename is not None:
            name = os.fspath(exc.filename)
            if name in tmp_paths:  # report the path the user gave, not our temporary
                name = published[tmp_paths.index(name)]
            print(f"{name}: {exc.strerror}", file=sys.stderr)
            return 2
        raise
    elapsed = time.perf_counter() - started
    if note:
        print(note, file=sys.stderr)
    rate = count / elapsed if elapsed > 0 else 0.0
    print(
        f"convert: {count} events, {len(instances)} instances, {elapsed:.3f} s, "
        f"{rate:,.0f} events/s -> {args.output}",
        file=sys.stderr,
    )
    return 0


def _convert(args: argparse.Namespace, tmp_paths: list[str]) -> tuple[int, list[str], str]:
    """Write the output (and config) tmp files; returns (events, instance ids, stderr note)."""
    fmt = args.source_format
    sizes: dict[str, int] = {}
    events: Iterable[TraceEvent]
    total: int | None = None
    if fmt == "mooncake":
        block_size = args.block_size or DEFAULT_MOONCAKE_BLOCK_SIZE
        events = read_mooncake(args.input, block_size, args.instance_id or "default")
    elif fmt == "lmcache":
        trace = read_lmcache(args.input, args.model, args.kv_bytes_per_chunk)
        events, total = trace.events, len(trace.events)
        sizes = {name: info.bytes_per_chunk for name, info in trace.models.items()}
        chunk_sizes = sorted({info.chunk_size for info in trace.models.values()})
        block_size = chunk_sizes[0] if chunk_sizes else 0
        if args.emit_config and len(chunk_sizes) > 1:
            listing = ", ".join(
                f"{name}={info.chunk_size}" for name, info in sorted(trace.models.items())
            )
            raise TraceFormatError(
                args.input,
                0,
                f"--emit-config needs one chunk_size but the models differ ({listing}); "
                "pick one with --model",
            )
    else:
        block_size = args.block_size or DEFAULT_STANDARD_BLOCK_SIZE
        events = read_standard(args.input)

    with open(tmp_paths[0], "w", encoding="utf-8", newline="\n") as out:
        count, instances = _write_events(
            progress(events, "ev", total), out, args.time_offset_ns, args.input
        )
    if count == 0:
        raise TraceFormatError(args.input, 0, "no events to convert")

    note = ""
    if args.emit_config:
        if not sizes:
            size = args.kv_bytes_per_chunk or PLACEHOLDER_BYTES_PER_TOKEN * block_size
            sizes = dict.fromkeys(instances, size)
            if args.kv_bytes_per_chunk is None:
                note = (
                    f"note: {args.emit_config}: location spec size {size} bytes per block is a "
                    f"placeholder ({PLACEHOLDER_BYTES_PER_TOKEN} bytes per token x block_size "
                    f"{block_size}, Llama-3.1-8B bf16); set your model's KV bytes per block "
                    "(or pass --kv-bytes-per-chunk)"
                )
        config = starter_config(args.output, block_size, sizes)
        with open(tmp_paths[1], "w", encoding="utf-8", newline="\n") as fh:
            json.dump(config, fh, indent=2)
            fh.write("\n")
    return count, instances, note


def _write_events(
    events: Iterable[TraceEvent], out: TextIO, offset_ns: int, source: str
) -> tuple[int, list[str]]:
    """Write ``events`` as standard lines shifted by ``offset_ns``; returns (count, instance
    ids in first-seen order). Rejects timestamps that end up <= 0, overflow int64 or go
    backwards, naming the source line. O(total keys)."""
    seen: dict[str, None] = {}
    write = out.write
    fmt = format_standard_event
    count = 0
    prev_ts = 0
    prev_line = 0
    for ev in events:
        ts = ev.timestamp_ns + offset_ns
        if ts < prev_ts:
            raise TraceFormatError(
                source,
                ev.line_no,
                f"timestamp goes backwards: {ev.timestamp_ns} ns is before the previous "
                f"event's {prev_ts - offset_ns} ns (line {prev_line})",
            )
        if ts <= 0 or ts > INT64_MAX:
            raise TraceFormatError(
                source,
                ev.line_no,
                f"timestamp_ns {ev.timestamp_ns} + --time-offset-ns {offset_ns} = {ts} is "
                "outside [1, 2**63-1]",
            )
        prev_ts, prev_line = ts, ev.line_no
        if ev.instance_id not in seen:
            seen[ev.instance_id] = None
        write(fmt(ev, ts))
        count += 1
    return count, list(seen)


def starter_config(trace_path: str, block_size: int, sizes: dict[str, int]) -> dict[str, Any]:
    """A starter ``litehit replay`` config for the standard trace at ``trace_path``.

    One instance group "default" (LRU, capacities 1..64 GiB, theoretical maximum on) and one
    instance per entry of ``sizes`` (instance id -> bytes per block, sorted by id), each with
    a single location spec "kv" forming the full group "full". ``block_size`` (tokens) is
    both the trace granularity and every instance's block size. Paths are absolute;
    results go to ``<trace dir>/<trace stem>_results``. O(instances).
    """
    trace_abs = os.path.abspath(trace_path)
    stem = os.path.splitext(os.path.basename(trace_abs))[0]
    return {
        "trace_file_path": trace_abs,
        "output_result_path": os.path.join(os.path.dirname(trace_abs), f"{stem}_results"),
        "block_size": block_size,
        "instance_groups": [
            {
                "name": "default",
                "eviction_policy": "lru",
                "capacity_gb": list(STARTER_CAPACITIES_GB),
                "ttl_seconds": 0,
                "enable_prefix_hash": False,
                "enable_theoretical_max_cache": True,
            }
        ],
        "instances": [
            {
                "instance_id": instance_id,
                "instance_group": "default",
                "block_size": block_size,
                "location_spec_infos": [{"name": "kv", "size": size}],
                "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}],
                "optimizer_state_info": {"full_location_spec_group_name": "full"},
                "linear_step": 0,
            }
            for instance_id, size in sorted(sizes.items())
        ],
    }
