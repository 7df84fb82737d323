"""The Mooncake FAST'25 trace (``kvcache-ai/Mooncake``, ``FAST25-release/traces/``).

One JSON object per line: ``timestamp`` (milliseconds, relative, >= 0), ``input_length``
(tokens), ``hash_ids`` (one id per ``block_size`` tokens *including* the partial last
block), ``output_length`` (ignored). Every line becomes a ``request`` event of one instance
(``instance_id``, default ``"default"``): ms -> ns, the ids of the complete blocks as keys,
the line number as ``trace_id``. Cost: O(bytes); per key a slice plus a C-level type and
range check; ~12k lines parse in tens of ms. The policy replay (``optimize``,
``tradeoff``, ``export-tree``, ``lifecycle``) and ``convert`` to Parquet read it by columns
(:mod:`.mooncake_columns`, pyarrow), this line parser being the slow path that takes a
doubtful chunk and names its bad line; ``replay``, whose every record becomes Python
objects, reads it line by line (``events_by_columns``: faster so, measured).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

from litehit_core import LocatedError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes
from litehit_service.traces.readers.jsonl import (
    bad_field,
    check_int64_array,
    decode_object,
    iter_events,
    positive_int,
)
from litehit_service.traces.readers.records import INT64_MAX, LineParser, TraceEvent, TraceReader

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_INSTANCE_ID",
    "READER",
    "MooncakeReader",
    "check_block_size",
    "parse_mooncake_line",
    "read_mooncake",
]

DEFAULT_BLOCK_SIZE = 512
"""Tokens per hash id of the published Mooncake traces."""
DEFAULT_INSTANCE_ID = "default"


def parse_mooncake_line(
    text: bytes | str,
    line_no: int,
    path: str,
    block_size: int = DEFAULT_BLOCK_SIZE,
    instance_id: str = DEFAULT_INSTANCE_ID,
) -> TraceEvent | None:
    """Parse one Mooncake FAST'25 line (UTF-8 bytes or text) into a ``request`` event;
    ``None`` for a blank line.

    Fields: ``timestamp`` (milliseconds, relative, >= 0; integer, or a finite number rounded
    to the nearest ns), ``input_length`` (tokens, integer > 0), ``hash_ids`` (int64 ids, one
    per ``block_size`` tokens *including* the partial last block). Keeps the first
    ``input_length // block_size`` ids. ``hash_ids`` must have between that many and
    ``ceil(input_length / block_size)`` entries (more means a wrong ``block_size``).
    ``output_length`` and unknown fields are ignored. ``trace_id`` is the line number.
    ``block_size`` must be > 0 (the caller's job; :func:`read_mooncake` checks it).
    O(len(text)); per key only a slice plus a C-level type/range check.
    """
    try:
        return _mooncake_event(text, line_no, path, block_size, instance_id, False)
    except LocatedError:
        return _mooncake_event(text, line_no, path, block_size, instance_id, True)


def _mooncake_event(
    text: bytes | str, line_no: int, path: str, block_size: int, instance_id: str, exact: bool
) -> TraceEvent | None:
    obj = decode_object(text, line_no, path, exact)
    if obj is None:
        return None
    try:
        ts = obj["timestamp"]
        input_len = obj["input_length"]
        hash_ids = obj["hash_ids"]
    except KeyError as exc:
        raise LocatedError(path, line_no, f"missing required field {exc.args[0]!r}") from None

    if type(ts) is int and ts >= 0:
        ts_ns = ts * 1_000_000
    elif type(ts) is float and math.isfinite(ts) and ts >= 0:
        ts_ns = round(ts * 1_000_000)
    else:
        raise bad_field(path, line_no, "timestamp", "a number of milliseconds >= 0", ts)
    if ts_ns > INT64_MAX:
        raise bad_field(path, line_no, "timestamp", "at most (2**63-1) ns in milliseconds", ts)
    if not positive_int(input_len):
        raise bad_field(path, line_no, "input_length", "an integer > 0", input_len)
    if type(hash_ids) is not list:
        raise bad_field(path, line_no, "hash_ids", "an array of int64 integers", hash_ids)

    n_full = input_len // block_size
    n_ids = len(hash_ids)
    if n_ids < n_full or n_ids > n_full + (input_len % block_size > 0):
        n_max = n_full + (input_len % block_size > 0)
        raise LocatedError(
            path,
            line_no,
            f"field 'hash_ids' has {n_ids} entries but input_length {input_len} with "
            f"block_size {block_size} needs {n_full} complete blocks (at most {n_max} ids "
            f"including the partial last block); is the block size right?",
        )
    keys = hash_ids[:n_full]
    if keys:
        check_int64_array(keys, "hash_ids", line_no, path, text)
    return TraceEvent(
        line_no=line_no,
        kind="request",
        instance_id=instance_id,
        trace_id=str(line_no),
        timestamp_ns=ts_ns,
        keys=keys,
        input_len=input_len,
    )


def _bound_parser(block_size: int, instance_id: str) -> LineParser:
    """:func:`parse_mooncake_line` with ``block_size`` and ``instance_id`` bound, as cheap
    per line as calling it directly (one call into :func:`_mooncake_event`)."""
    event = _mooncake_event

    def parse(text: bytes | str, line_no: int, path: str) -> TraceEvent | None:
        try:
            return event(text, line_no, path, block_size, instance_id, False)
        except LocatedError:
            return event(text, line_no, path, block_size, instance_id, True)

    return parse


def check_block_size(block_size: int) -> None:
    """``ValueError`` unless ``block_size`` is an integer > 0."""
    if type(block_size) is not int or block_size <= 0:
        raise ValueError(f"block_size must be an integer > 0, got {block_size!r}")


def read_mooncake(
    path: str | os.PathLike[str],
    block_size: int = DEFAULT_BLOCK_SIZE,
    instance_id: str = DEFAULT_INSTANCE_ID,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[TraceEvent]:
    """Iterate a Mooncake FAST'25 trace as ``request`` events (see :func:`parse_mooncake_line`).

    Blank lines are skipped; timestamps are converted ms -> ns (0 is kept: the standard
    format's ``timestamp_ns > 0`` is the converter's job). Arguments are checked at call time
    (``ValueError``); lines lazily, fail-fast (a line longer than ``max_line_bytes`` bytes
    is an error at its line). O(file size); ~12k lines parse in tens of ms.
    """
    _check_options(block_size, instance_id, max_line_bytes)
    return iter_events(os.fspath(path), _bound_parser(block_size, instance_id), max_line_bytes)


def _check_options(block_size: int, instance_id: str, max_line_bytes: int) -> None:
    check_block_size(block_size)
    if type(instance_id) is not str or not instance_id:
        raise ValueError(f"instance_id must be a non-empty string, got {instance_id!r}")
    check_max_line_bytes(max_line_bytes)


class MooncakeReader(TraceReader):
    """The Mooncake FAST'25 trace: ms timestamps, ``input_length`` tokens, ``hash_ids`` per
    ``block_size`` tokens (partial last block included, dropped on reading); every line a
    ``request`` of instance ``instance_id``. Options ``block_size`` (default 512) and
    ``instance_id`` (default ``"default"``); read lazily in file order, line by line
    (:meth:`read`) or by columns (:meth:`column_source`). O(bytes)."""

    name = "mooncake"
    options = ("block_size", "instance_id")
    default_block_size = DEFAULT_BLOCK_SIZE
    default_time_offset_ns = 1_000_000  # its clock starts at 0
    # replay's events come faster from the line parser (orjson on a short line) than from
    # pyarrow plus the conversion to Python lists (bench/README.md, 2026-12-05)
    events_by_columns = False
    names_instances = False
    example = (
        b'{"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]}\n'
        b'{"timestamp": 27, "input_length": 512, "output_length": 3, "hash_ids": [1]}\n'
        b"\n"
        b'{"timestamp": 30.5, "input_length": 100, "output_length": 1, "hash_ids": [9]}\n'
    )

    def read(
        self,
        path: str | os.PathLike[str],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        block_size: int = DEFAULT_BLOCK_SIZE,
        instance_id: str = DEFAULT_INSTANCE_ID,
    ) -> Iterator[TraceEvent]:
        """:func:`read_mooncake`."""
        return read_mooncake(path, block_size, instance_id, max_line_bytes=max_line_bytes)

    def sniff(self, obj: Mapping[str, Any]) -> bool:
        """A ``hash_ids`` and an ``input_length`` field."""
        return "hash_ids" in obj and "input_length" in obj

    def line_parser(
        self,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        instance_id: str = DEFAULT_INSTANCE_ID,
        **ignored: Any,
    ) -> LineParser:
        """:func:`parse_mooncake_line` with ``block_size`` and ``instance_id`` bound."""
        return _bound_parser(block_size, instance_id)

    def column_source(
        self,
        path: str,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        chunk_bytes: int | None = None,
        block_size: int = DEFAULT_BLOCK_SIZE,
        instance_id: str = DEFAULT_INSTANCE_ID,
        **ignored: Any,
    ) -> Any:
        """JSONL (plain or compressed) by columns
        (:func:`~litehit_service.traces.readers.mooncake_columns.mooncake_source`), the
        records :meth:`read` gives; the options checked as :func:`read_mooncake` does."""
        from litehit_service.traces.readers.mooncake_columns import mooncake_source

        _check_options(block_size, instance_id, max_line_bytes)
        parse = _bound_parser(block_size, instance_id)
        return mooncake_source(
            os.fspath(path), max_line_bytes, chunk_bytes, block_size, instance_id, parse
        )


READER = MooncakeReader()
