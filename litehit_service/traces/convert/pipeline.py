"""``litehit convert``'s work: a Mooncake, LMCache or standard trace (a trace reader) or a
publisher log or Bailian trace (a log converter, :mod:`~litehit_service.traces.convert.logs`)
as standard trace JSONL.

The output has one compact JSON object per event, keys in the order ``type, instance_id,
trace_id, timestamp_ns, keys, input_len`` (see
:func:`litehit_service.traces.readers.format_standard_event`). Every timestamp is shifted
by ``time_offset_ns`` (default: the source's, 1 ms for traces starting at 0) because the
standard format needs ``timestamp_ns > 0`` while Mooncake traces start at 0 ms. Output
timestamps must not go backwards (a replay would reject the file).

A Parquet output of a trace its reader reads by columns (standard, Mooncake) is written by
columns (:mod:`~litehit_service.traces.convert.columnar`: the same values, ~3x faster for
Mooncake); everything else is written as JSONL, then put into its container.

All or nothing: the output (and the optional starter config) is written to ``<path>.<pid>.tmp``
and renamed only when the whole input converted. When stderr is a terminal a progress bar
shows there: the input's bytes (percent, rate, ETA) for Mooncake and standard traces, the
events written for LMCache (read and sorted first). Cost: O(input size) time, O(longest line)
memory (LMCache: O(events), as logs are sorted).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from litehit_core import LocatedError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes
from litehit_service.offline.outputs import (
    atomic_outputs,
    byte_progress,
    progress,
    run_line,
    tmp_path,
)
from litehit_service.traces.convert.logs import convert_logs
from litehit_service.traces.convert.writer import output_container, transcode, write_events
from litehit_service.traces.logs import CONVERTERS, Converter
from litehit_service.traces.readers import (
    READERS,
    TraceEvent,
    TraceReader,
    formats_of_line,
    get_reader,
    open_trace,
    parse_lines,
    trace_lines,
)
from litehit_service.traces.readers.compressed import plain_size
from litehit_service.traces.readers.mooncake import DEFAULT_BLOCK_SIZE as MOONCAKE_BLOCK_SIZE
from litehit_service.traces.readers.mooncake import DEFAULT_INSTANCE_ID as MOONCAKE_INSTANCE_ID
from litehit_service.traces.readers.standard import DEFAULT_BLOCK_SIZE as STANDARD_BLOCK_SIZE
from litehit_service.traces.readers.standard import READER as OUTPUT_READER

FORMATS = (
    tuple(name for name, reader in READERS.items() if reader is not OUTPUT_READER)
    + tuple(CONVERTERS)
    + (OUTPUT_READER.name,)
)
"""``--from`` choices: the registered trace formats in registration order, then the log
converters, the one convert writes (standard, :data:`OUTPUT_READER`) last."""
DEFAULT_TIME_OFFSET_NS = 1_000_000
"""Added to every timestamp so a Mooncake trace (starting at 0 ms) becomes valid (> 0)."""
DEFAULT_MOONCAKE_BLOCK_SIZE = MOONCAKE_BLOCK_SIZE
"""Tokens per hash id in the Mooncake FAST'25 traces (the Mooncake reader's default)."""
DEFAULT_STANDARD_BLOCK_SIZE = STANDARD_BLOCK_SIZE
"""``block_size`` written by ``--emit-config`` for a standard input (the replay default)."""
PLACEHOLDER_BYTES_PER_TOKEN = 131_072
"""Placeholder KV bytes per token for ``--emit-config`` when the trace does not say
(Mooncake, standard): Llama-3.1-8B in bf16 = 2 (K, V) x 32 layers x 8 KV heads x 128 dims
x 2 bytes. The spec size written is this times ``block_size``."""
STARTER_CAPACITIES_GB = (16, 64, 256, 1024, 4096)
"""Capacities (GiB) of the starter config's "default" instance group."""


@dataclass(frozen=True, slots=True)
class ConvertSummary:
    """What one conversion did; ``note`` is a warning for stderr (or empty); ``details``
    a converter's report (what it read, wrote and skipped), a line each."""

    events: int
    instances: int
    elapsed_s: float
    output: str
    note: str = ""
    details: tuple[str, ...] = ()

    def line(self) -> str:
        """The one-line summary printed on stderr."""
        parts = f"{self.instances} instances"
        return run_line("convert", self.events, "events", parts, self.elapsed_s, self.output)


def get_source(name: str) -> TraceReader | Converter:
    """The trace reader or log converter named ``name`` (a ``--from`` value); ``ValueError``
    naming the value and every known name otherwise. O(1)."""
    converter = CONVERTERS.get(name) if type(name) is str else None
    if converter is not None:
        return converter
    try:
        return get_reader(name)
    except ValueError:
        known = ", ".join(map(repr, FORMATS))
        raise ValueError(f"unknown input format {name!r}; known formats: {known}") from None


def convert_trace(
    source_format: str,
    inputs: str | Sequence[str],
    output: str,
    *,
    block_size: int | None = None,
    instance_id: str | None = None,
    model: str | None = None,
    kv_bytes_per_chunk: int | None = None,
    time_offset_ns: int | None = None,
    emit_config: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    to: str | None = None,
    **converter_options: Any,
) -> ConvertSummary:
    """Convert ``inputs`` (``source_format``: a trace reader's or a log converter's name;
    a reader takes one input, a converter several files or directories) into a standard
    trace at ``output`` and, with ``emit_config``, a starter replay config; both published
    atomically. ``time_offset_ns`` defaults to the source's (1 ms for traces whose clock
    starts at 0, Mooncake and Qwen Bailian; 0 for the others, whose values stay as they
    are); ``converter_options`` go to the converter
    (``instance_map``, ``emit``, ``reorder_window_ms``; text's ``tokenizer_path`` ...). The
    output's container (JSONL,
    gzip'd or zstd'd JSONL, Parquet) is ``to`` or its extension's
    (:func:`~litehit_service.traces.convert.writer.output_container`). Raises LocatedError
    naming the input line (also for a line longer than ``max_line_bytes`` bytes).
    O(input size)."""
    started = time.perf_counter()
    source = get_source(source_format)
    paths = [inputs] if isinstance(inputs, str) else list(inputs)
    if not isinstance(source, Converter) and len(paths) != 1:
        raise ValueError(f"--from {source_format} takes one input, got {len(paths)}")
    if time_offset_ns is None:
        time_offset_ns = source.default_time_offset_ns
    container = output_container(output, to)
    # a trace its reader reads by columns (standard, Mooncake) goes to Parquet so, unless
    # its reader has no column source (_convert then writes JSONL); logs are written as JSONL
    columns = not isinstance(source, Converter) and container == "parquet"
    published = [output] + ([emit_config] if emit_config else [])
    tmp_paths = [tmp_path(path) for path in published]
    details: list[str] = []
    try:
        with atomic_outputs(published):
            if isinstance(source, Converter):
                count, instances, details, sizes = convert_logs(
                    source, paths, tmp_paths[0], block_size=block_size,
                    instance_id=instance_id, time_offset_ns=time_offset_ns,
                    max_line_bytes=max_line_bytes, **converter_options,
                )  # fmt: skip
                size = block_size or source.default_block_size or 0
                if emit_config and set(sizes.values()) - {size}:
                    listing = ", ".join(f"{name}={n}" for name, n in sorted(sizes.items()))
                    raise LocatedError(
                        paths[0], 0,
                        f"--emit-config needs one block size but the instances have {listing} "
                        f"(--block-size {size}); convert them separately",
                    )  # fmt: skip
                note = _emit_config(emit_config, tmp_paths, output, instances, size, {},
                                    kv_bytes_per_chunk)  # fmt: skip
            else:
                count, instances, note, columns = _convert(
                    source_format, paths[0], output, block_size, instance_id, model,
                    kv_bytes_per_chunk, time_offset_ns, emit_config, tmp_paths, max_line_bytes,
                    columns,
                )  # fmt: skip
            if container != "jsonl" and not columns:
                # written as JSONL first; now into its container
                plain = tmp_paths[0] + ".jsonl"
                os.replace(tmp_paths[0], plain)
                try:
                    transcode(plain, tmp_paths[0], container)
                finally:
                    os.remove(plain)
    except LocatedError as exc:
        hinted = with_format_hint(exc, source_format, max_line_bytes)
        if hinted is exc:
            raise
        raise hinted from None
    except OSError as exc:
        if exc.filename is not None and os.fspath(exc.filename) in tmp_paths:
            exc.filename = published[tmp_paths.index(os.fspath(exc.filename))]
        raise
    elapsed = time.perf_counter() - started
    return ConvertSummary(count, len(instances), elapsed, output, note, tuple(details))


def with_format_hint(
    exc: LocatedError, source_format: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> LocatedError:
    """``exc`` about a line of the input with ``(this line looks like a F trace: use --from
    F)`` added when that line is not ``source_format``'s but another known format's
    (:func:`~litehit_service.traces.readers.formats_of_line`); else ``exc`` itself.
    O(bytes up to the line), on the error path only."""
    if not exc.path or exc.line_no < 1:
        return exc
    found = formats_of_line(
        exc.path,
        exc.line_no,
        max_line_bytes=max_line_bytes,
        candidates=[*READERS.values(), *CONVERTERS.values()],
    )
    names = [source.name for source in found]
    if not names or source_format in names:
        return exc
    kind = " or ".join(names)
    use = " or ".join(f"--from {name}" for name in names)
    reason = f"{exc.reason} (this line looks like a {kind} trace: use {use})"
    return LocatedError(exc.path, exc.line_no, reason, exc.field)


def _convert(
    fmt: str,
    input_path: str,
    output: str,
    block_size_arg: int | None,
    instance_id: str | None,
    model: str | None,
    kv_bytes_per_chunk: int | None,
    time_offset_ns: int,
    emit_config: str | None,
    tmp_paths: list[str],
    max_line_bytes: int,
    columns: bool = False,
) -> tuple[int, list[str], str, bool]:
    """Write the output (and config) tmp files; returns (events, instance ids, stderr note,
    whether it went by columns). ``columns``: a Parquet output, written by columns
    (:mod:`.columnar`) when the reader has a column source (standard, Mooncake); else the
    tmp file is standard JSONL, for the caller to transcode."""
    reader = get_reader(fmt)
    sizes: dict[str, int] = {}
    events: Iterable[TraceEvent] | None = None
    total: int | None = None
    if reader.sizes_in_trace:  # LMCache: block and KV bytes per key from the trace
        events, models = reader.read_sized(
            input_path, max_line_bytes=max_line_bytes, model=model,
            kv_bytes_per_chunk=kv_bytes_per_chunk,
        )  # fmt: skip
        total = len(events)
        sizes = {name: kv_bytes for name, (_, kv_bytes) in models.items()}
        chunk_sizes = sorted({chunk for chunk, _ in models.values()})
        block_size = chunk_sizes[0] if chunk_sizes else 0
        if emit_config and len(chunk_sizes) > 1:
            listing = ", ".join(f"{name}={chunk}" for name, (chunk, _) in sorted(models.items()))
            raise LocatedError(
                input_path,
                0,
                f"--emit-config needs one chunk_size but the models differ ({listing}); "
                "pick one with --model",
            )
    else:
        block_size = block_size_arg or reader.default_block_size or 0

    source = None
    if columns and events is None:
        source = reader.column_source(
            input_path, max_line_bytes=max_line_bytes, block_size=block_size,
            instance_id=instance_id or MOONCAKE_INSTANCE_ID,
        )  # fmt: skip
    if source is not None:
        from litehit_service.traces.convert.columnar import convert_columns

        with byte_progress(plain_size(input_path), "convert") as advance:
            count, instances = convert_columns(
                source, input_path, tmp_paths[0], time_offset_ns, advance,
                as_given=reader.columnar,
            )  # fmt: skip
    else:
        count, instances = _write_jsonl(
            fmt, input_path, tmp_paths[0], events, total, block_size, instance_id,
            time_offset_ns, max_line_bytes,
        )  # fmt: skip
    if count == 0:
        raise LocatedError(input_path, 0, "no events to convert")

    note = _emit_config(emit_config, tmp_paths, output, instances, block_size, sizes,
                        kv_bytes_per_chunk)  # fmt: skip
    return count, instances, note, source is not None


def _write_jsonl(
    fmt: str,
    input_path: str,
    out_path: str,
    events: Iterable[TraceEvent] | None,
    total: int | None,
    block_size: int,
    instance_id: str | None,
    time_offset_ns: int,
    max_line_bytes: int,
) -> tuple[int, list[str]]:
    """The events (read already, or the input's lines parsed as they come) as standard
    JSONL at ``out_path``; (events written, instance ids)."""
    with open(out_path, "w", encoding="utf-8", newline="\n") as out:
        if events is not None:  # read (LMCache: and sorted) already; a bar of events
            count, instances = write_events(
                progress(events, "ev", total), out, time_offset_ns, input_path
            )
        else:  # a bar of the input's bytes
            with byte_progress(plain_size(input_path), "convert") as advance:
                lines = trace_events(
                    fmt, input_path, block_size, instance_id or "default", max_line_bytes, advance
                )
                count, instances = write_events(lines, out, time_offset_ns, input_path)
    return count, instances


def _emit_config(
    emit_config: str | None,
    tmp_paths: list[str],
    output: str,
    instances: list[str],
    block_size: int,
    sizes: dict[str, int],
    kv_bytes_per_chunk: int | None,
) -> str:
    """Write the starter config (when asked) to ``tmp_paths[1]``; returns the stderr note
    about a placeholder KV size (or ``""``)."""
    note = ""
    if not emit_config:
        return note
    if not sizes:
        size = kv_bytes_per_chunk or PLACEHOLDER_BYTES_PER_TOKEN * block_size
        sizes = dict.fromkeys(instances, size)
        if kv_bytes_per_chunk is None:
            note = (
                f"note: {emit_config}: location spec size {size} bytes per block is a "
                f"placeholder ({PLACEHOLDER_BYTES_PER_TOKEN} bytes per token x block_size "
                f"{block_size}, Llama-3.1-8B bf16); set your model's KV bytes per block "
                "(or pass --kv-bytes-per-chunk); until then, 'litehit curve "
                "--block-bytes-unknown' draws capacities in blocks"
            )
    config = starter_config(
        output, block_size, sizes, os.path.dirname(os.path.abspath(emit_config))
    )
    with open(tmp_paths[1], "w", encoding="utf-8", newline="\n") as fh:
        json.dump(config, fh, indent=2)
        fh.write("\n")
    return note


def trace_events(
    fmt: str,
    path: str,
    block_size: int,
    instance_id: str,
    max_line_bytes: int,
    advance: Callable[[int], object],
) -> Iterator[TraceEvent]:
    """The events of a Mooncake or standard trace (``fmt``), in file order, as
    :func:`~litehit_service.traces.readers.read_mooncake` / ``read_standard`` yield them
    (the same line parsers, blank lines skipped, fail-fast at the first bad line or one
    longer than ``max_line_bytes``), calling ``advance(bytes)`` after each chunk of lines
    read: the progress bar's feed. ``block_size`` and ``instance_id`` apply to Mooncake.
    ``ValueError`` at call time for a ``block_size`` or ``max_line_bytes`` that is not an
    integer > 0. O(file size); memory O(one chunk of lines)."""
    check_max_line_bytes(max_line_bytes)
    if type(block_size) is not int or block_size <= 0:
        raise ValueError(f"block_size must be an integer > 0, got {block_size!r}")
    return _trace_events(fmt, path, block_size, instance_id, max_line_bytes, advance)


def _trace_events(
    fmt: str,
    path: str,
    block_size: int,
    instance_id: str,
    max_line_bytes: int,
    advance: Callable[[int], object],
) -> Iterator[TraceEvent]:
    line_no = 1
    with open_trace(path) as fh:
        for lines in trace_lines(fh, path, max_line_bytes):
            events, error = parse_lines(lines, line_no, path, fmt, block_size, instance_id)
            yield from events
            if error is not None:
                raise error
            line_no += len(lines)
            advance(sum(map(len, lines)))


def starter_config(
    trace_path: str, block_size: int, sizes: dict[str, int], config_dir: str = "."
) -> dict[str, Any]:
    """A starter ``litehit replay`` config for the standard trace at ``trace_path``, to be
    written into the folder ``config_dir``.

    One instance group "default" (LRU, capacities 1..64 GiB, theoretical maximum on) and one
    instance per entry of ``sizes`` (instance id -> bytes per block, sorted by id), each with
    a single location spec "kv" forming the full group "full". ``block_size`` (tokens) is
    both the trace granularity and every instance's block size. Paths are relative to
    ``config_dir`` (a replay config reads them from its own folder), so the config and the
    trace move together; results go to ``<trace dir>/<trace stem>_results``. O(instances).
    """
    trace_abs = os.path.abspath(trace_path)
    stem = os.path.splitext(os.path.basename(trace_abs))[0]
    results = os.path.join(os.path.dirname(trace_abs), f"{stem}_results")
    here = os.path.abspath(config_dir)
    return {
        "trace_file_path": os.path.relpath(trace_abs, here),
        "output_result_path": os.path.relpath(results, here),
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
