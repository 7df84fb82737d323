"""``litehit convert``: turn a Mooncake, LMCache or standard trace, a KVCacheManager
event-publisher log, Qwen Bailian usage traces or raw prompts (``--from text``, tokenized
with a given tokenizer) into standard trace JSONL.

The output has one compact JSON object per event, keys in the order ``type, instance_id,
trace_id, timestamp_ns, keys, input_len`` (see
:func:`litehit_service.traces.readers.standard.format_standard_event`).
Every timestamp is shifted by ``--time-offset-ns``: by default 1,000,000 ns = 1 ms for
Mooncake and Bailian traces, whose clock starts at 0 (the standard format needs
``timestamp_ns > 0``), and 0 for every other source, whose values stay as they are.
Output timestamps must not go backwards (a replay would reject the file). The log converters
(:mod:`litehit_service.traces.logs`) take several inputs, merged in time order, and
print what they read, wrote and skipped before the summary.

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

from litehit_service.commands import UsageError, say_plan
from litehit_service.commands.options import (
    add_instance,
    add_max_line_bytes,
    add_max_workers,
    add_option,
    add_output_file,
    required_options,
)
from litehit_service.traces.convert.pipeline import (
    DEFAULT_MOONCAKE_BLOCK_SIZE,
    DEFAULT_STANDARD_BLOCK_SIZE,
    DEFAULT_TIME_OFFSET_NS,
    FORMATS,
    get_source,
)
from litehit_service.traces.convert.writer import OUTPUT_CONTAINERS
from litehit_service.traces.logs import Converter
from litehit_service.traces.logs.bailian import BLOCK_TOKENS as BAILIAN_BLOCK_TOKENS
from litehit_service.traces.logs.bailian import EMIT_MODES
from litehit_service.traces.logs.prompts import parse_block_sizes
from litehit_service.traces.logs.text import (
    BLOCK_TOKENS as TEXT_BLOCK_TOKENS,
)
from litehit_service.traces.logs.text import (
    CONTENT_FIELD,
    DEFAULT_INSTANCE,
    INSTANCE_FIELD,
    TIME_FIELD,
)
from litehit_service.traces.readers import TraceReader


def register(subparsers: Any) -> None:
    """Add the ``convert`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "convert",
        help=(
            "convert a Mooncake / LMCache / standard trace, a KVCacheManager publisher log, "
            "Qwen Bailian traces or raw prompts to standard trace JSONL"
        ),
        description=(
            "Convert a trace or log to LiteHit's standard JSONL (one compact object per "
            "event). The output is published atomically; on error nothing is written, "
            "'path:line: reason' goes to stderr and the exit code is 2."
        ),
    )
    add_option(
        p,
        "--from",
        aliases=("-f",),
        dest="source_format",
        default=None,
        type=_format_name,
        choices=FORMATS,
        help="the input's format (default: a trace format detected from the first input's "
        "first line; publisher-log, qwen-bailian and text logs are never detected; the "
        "reference's publisher_log and qwen_bailian spellings are accepted)",
    )
    p.add_argument(
        "input",
        metavar="INPUT",
        nargs="*",
        help=(
            "input trace file (lmcache: a JSONL file or a directory of "
            "lookup_hashes_*.jsonl); publisher-log, qwen-bailian and text: one or more files "
            "or directories, merged in time order"
        ),
    )
    add_option(p, "--input-file", aliases=("-i",), dest="input_options", action="append",
               default=[], metavar="INPUT",
               help="an input given as an option, as the reference's converter takes it "
               "(the same as a positional INPUT; may repeat; default: none)")  # fmt: skip
    p.add_argument(
        "--mode",
        choices=("optimizer",),
        default="optimizer",
        help="what the output is for, as the reference's converter asks: 'optimizer' (the "
        "standard trace every litehit command reads; the only mode, default)",
    )
    add_output_file(
        required_options(p),
        "the standard trace to write: JSONL, gzip'd or zstd'd JSONL (.gz, .zst) or Parquet "
        "(.parquet), as its extension (or --to) says",
        required=True,
    )
    p.add_argument(
        "--to",
        choices=OUTPUT_CONTAINERS,
        default=None,
        help="the output's container (default: its extension's; anything else: jsonl)",
    )
    p.add_argument(
        "--block-size",
        type=_positive_int,
        metavar="TOKENS",
        help=(
            f"mooncake: tokens per hash id (default {DEFAULT_MOONCAKE_BLOCK_SIZE}); "
            f"publisher-log: tokens per key (required; input_len = keys x TOKENS); "
            f"qwen-bailian: tokens per hash id (default {BAILIAN_BLOCK_TOKENS}); "
            f"text: tokens per key (default {TEXT_BLOCK_TOKENS}; --instance-block-sizes "
            "per instance); "
            f"standard: the trace granularity written by --emit-config "
            f"(default {DEFAULT_STANDARD_BLOCK_SIZE}); not for lmcache (chunk_size is in the logs)"
        ),
    )
    add_instance(
        p,
        "mooncake: the instance of every event (default 'default'); qwen-bailian: the "
        "instance of every record (required); text: the instance of a line without an "
        f"{INSTANCE_FIELD} field (default {DEFAULT_INSTANCE!r}); lmcache: keep only this "
        "model_name (default: every model, each its own instance)",
        aliases=("--instance-id", "--model"),
    )
    p.add_argument(
        "--instance-map",
        metavar="FILE",
        help=(
            'publisher-log only: a JSON object renaming sources: "src": "instance", '
            '"src": {"instance_id": ..., "block_size": N} or "src": null (drop); '
            "unlisted sources keep their name"
        ),
    )
    p.add_argument(
        "--emit",
        choices=EMIT_MODES,
        default=None,
        help="qwen-bailian only: one request per line (default) or a get and a write",
    )
    p.add_argument(
        "--reorder-window-ms",
        type=_non_negative_int,
        default=None,
        metavar="MS",
        help=(
            "publisher-log, qwen-bailian and text: how far out of time order a file's lines may be "
            "(default 1000 ms; 0: sorted); a line later than that is an error"
        ),
    )
    p.add_argument(
        "--kv-bytes-per-chunk",
        type=_positive_int,
        metavar="BYTES",
        help=(
            "KV bytes of one block/chunk. lmcache: overrides the size computed from "
            "dtypes/shapes (needed for unknown dtypes); mooncake/standard: the location spec "
            "size written by --emit-config instead of a placeholder"
        ),
    )
    p.add_argument(
        "--time-offset-ns",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help=(
            f"added to every timestamp (default: {DEFAULT_TIME_OFFSET_NS} ns = 1 ms for "
            "mooncake and qwen-bailian, whose clock starts at 0, so that timestamp_ns > 0; 0 "
            "for the others, whose values stay as they are)"
        ),
    )
    p.add_argument(
        "--emit-config",
        metavar="FILE",
        help="also write a starter litehit replay configuration for the converted trace "
        "to FILE (default: none)",
    )
    _add_text_options(p)
    add_max_line_bytes(p, "input")
    p.set_defaults(func=run)


def _add_text_options(p: Any) -> None:
    """The options of ``--from text``, spelled as the reference's converter spells them."""
    p.add_argument(
        "--tokenizer-path",
        metavar="PATH",
        help="text only: the tokenizer, a Hugging Face tokenizer.json or the directory holding "
        "it (local files, read with the tokenizers library: pip install 'litehit[text]'); "
        "required unless --model-name finds one (default: none)",
    )
    p.add_argument(
        "--model-name",
        metavar="NAME",
        help="text only: read the tokenizer from ./model/NAME when that directory exists, "
        "instead of --tokenizer-path, as the reference does (default: none)",
    )
    p.add_argument(
        "--time-field",
        metavar="NAME",
        help=f"text only: the field holding each line's time (default {TIME_FIELD!r}): "
        "'YYYY-MM-DD HH:MM:SS.ffffff' in UTC (or with a Z / +HH:MM offset) or seconds since "
        "the epoch",
    )
    p.add_argument(
        "--content-field",
        metavar="NAME",
        help=f"text only: the field holding each prompt (default {CONTENT_FIELD!r}): a string "
        "or a list of chat messages, rendered as 'role: content' lines",
    )
    p.add_argument(
        "--instance-block-sizes",
        metavar="ID:TOKENS,...",
        type=_block_sizes,
        help="text only: tokens per key of some instances, e.g. a:16,b:32 (default: none; "
        "the others take --block-size)",
    )
    add_max_workers(
        p,
        "text only: accepted (also in the reference's spelling) and not acted on: the "
        "tokenizers library encodes each batch of prompts on its own threads (cap them with "
        "RAYON_NUM_THREADS) (default: none)",
        aliases=("--num-workers",),
        type=_positive_int,
        default=None,
    )


def _block_sizes(text: str) -> dict[str, int]:
    try:
        return parse_block_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    """The formats whose reader or converter takes ``option``, as ``--from`` values."""
    return " / ".join(name for name in FORMATS if option in get_source(name).options)


CONVERTER_OPTIONS = {
    "instance_map": "--instance-map",
    "emit": "--emit",
    "reorder_window_ms": "--reorder-window-ms",
    "tokenizer_path": "--tokenizer-path",
    "model_name": "--model-name",
    "time_field": "--time-field",
    "content_field": "--content-field",
    "instance_block_sizes": "--instance-block-sizes",
    "max_workers": "--max-workers",
}
"""Options only some converters take: destination -> flag."""
REQUIRED_FLAGS = {
    "block_size": "--block-size TOKENS",
    "instance_id": "--instance ID",
    "tokenizer_path": "--tokenizer-path PATH (or --model-name NAME with ./model/NAME)",
}
"""How a missing required option is named in the error."""


def _option_error(args: argparse.Namespace) -> str | None:
    """Why the options do not fit ``--from`` (or ``None``): each is a question to the
    format's reader or converter (the options it takes and requires, how many inputs,
    whether its trace states its key sizes)."""
    fmt = args.source_format
    source = get_source(fmt)
    if not isinstance(source, Converter) and len(args.input) > 1:
        return f"--from {fmt} takes one INPUT, got {len(args.input)}"
    if isinstance(source, Converter):
        for option in source.required:
            if _given(args, source).get(option) is None:
                return f"--from {fmt} needs {REQUIRED_FLAGS[option]}"
    for dest, flag in CONVERTER_OPTIONS.items():
        if getattr(args, dest) is not None and dest not in source.options:
            return f"{flag} applies to --from {_taking(dest)} only, not --from {fmt}"
    if args.instance is not None and _instance_option(source) is None:
        takes = " / ".join(n for n in FORMATS if _instance_option(get_source(n)) is not None)
        return f"--instance applies to --from {takes} only, not --from {fmt}"
    if args.instance is not None and not args.instance:
        return "--instance must not be empty"
    if args.block_size is not None and source.sizes_in_trace:
        return f"--block-size does not apply to --from {fmt} (chunk_size comes from the logs)"
    no_block_option = "block_size" not in source.options
    if args.block_size is not None and no_block_option and args.emit_config is None:
        return f"--block-size with --from {fmt} only sets block_size in --emit-config"
    no_kv_option = "kv_bytes_per_chunk" not in source.options
    if args.kv_bytes_per_chunk is not None and no_kv_option and args.emit_config is None:
        return f"--kv-bytes-per-chunk with --from {fmt} only sets the spec size in --emit-config"
    if args.emit_config is not None and _same_path(args.emit_config, args.output):
        return "--emit-config and --output must be different"
    return None


def _instance_option(source: TraceReader | Converter) -> str | None:
    """What ``--instance`` sets for ``source``: the instance of every record
    (``instance_id``), the one model to keep (``model``: LMCache logs), or None."""
    return next((o for o in ("instance_id", "model") if o in source.options), None)


def _given(args: argparse.Namespace, source: TraceReader | Converter) -> dict[str, Any]:
    """The options given, by the name ``source`` takes them under."""
    given = {
        "block_size": args.block_size,
        "tokenizer_path": args.tokenizer_path or args.model_name,
    }
    option = _instance_option(source)
    if option is not None:
        given[option] = args.instance
    return given


def _same_path(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def _detected(args: argparse.Namespace) -> str:
    """The trace format of the first input, from its first line (``--from`` not given)."""
    from litehit_core import LocatedError
    from litehit_service.traces.readers import detect_format

    try:
        return detect_format(args.input[0], max_line_bytes=args.max_line_bytes).name
    except LocatedError as exc:
        raise LocatedError(
            exc.path,
            exc.line_no,
            f"{exc.reason}; give --from (publisher-log, qwen-bailian and text logs are never "
            "detected)",
            exc.field,
        ) from None


PLAN_MB_PER_S = 60.0
"""What ``convert`` reads on a 2-core machine, in MB/s of JSONL (bench/README.md: standard
or Mooncake to Parquet ~100, Mooncake or logs to standard JSONL ~30)."""


def _format_name(text: str) -> str:
    """A format name as given, with the reference's underscores read as hyphens."""
    return text.replace("_", "-")


def run(args: argparse.Namespace) -> int:
    """Convert ``args.input`` to ``args.output`` (errors raise; see cli)."""
    from litehit_service.traces.convert.pipeline import convert_trace

    args.input = [*args.input, *args.input_options]
    if not args.input:
        raise UsageError("give the input: INPUT (or -i INPUT)")

    if args.source_format is None:
        args.source_format = _detected(args)
    problem = _option_error(args)
    if problem is not None:
        raise UsageError(problem)
    source = get_source(args.source_format)
    instance_option = _instance_option(source)
    converter_options = {
        dest: getattr(args, dest)
        for dest in CONVERTER_OPTIONS
        if dest in get_source(args.source_format).options
    }
    if len(args.input) == 1:
        say_plan("convert", args.input[0], PLAN_MB_PER_S, args.output)
    summary = convert_trace(
        args.source_format,
        args.input,
        args.output,
        block_size=args.block_size,
        instance_id=args.instance if instance_option == "instance_id" else None,
        model=args.instance if instance_option == "model" else None,
        kv_bytes_per_chunk=args.kv_bytes_per_chunk,
        time_offset_ns=args.time_offset_ns,
        emit_config=args.emit_config,
        max_line_bytes=args.max_line_bytes,
        to=args.to,
        **converter_options,
    )
    for line in summary.details:
        print(line, file=sys.stderr)
    if summary.note:
        print(summary.note, file=sys.stderr)
    print(summary.line(), file=sys.stderr)
    return 0
