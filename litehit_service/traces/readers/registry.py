"""The trace formats by name: the one table that maps a format name to its reader.

:data:`READERS` maps each name (``standard``, ``mooncake``, ``lmcache``) to the
:class:`~litehit_service.traces.readers.records.TraceReader` of its module; adding a format
is one module (a ``TraceReader`` subclass and its ``READER``) plus one entry in
:data:`_ENTRIES`. :func:`get_reader` looks a name up (an unknown name is a ``ValueError``
naming it and the known names), :func:`detect_format` tells a file's format from its first
line, and :func:`parse_lines` is the batch line loop of ``litehit replay`` (also in worker
processes) and ``litehit convert`` for the formats whose lines are independent. Lookups are
O(1); nothing is read at import.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from litehit_core import InvalidRequestError, LocatedError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes
from litehit_service.traces.readers.jsonl import (
    decode_object,
    numbered_lines,
    open_trace,
    parse_numbered,
)
from litehit_service.traces.readers.lmcache import READER as LMCACHE
from litehit_service.traces.readers.mooncake import READER as MOONCAKE
from litehit_service.traces.readers.records import TraceReader
from litehit_service.traces.readers.standard import READER as STANDARD

__all__ = [
    "READERS",
    "detect_format",
    "format_names",
    "formats_of_line",
    "get_reader",
    "parse_lines",
    "reader_of_inputs",
    "reader_of_container",
]

_ENTRIES: tuple[TraceReader, ...] = (STANDARD, MOONCAKE, LMCACHE)

READERS = MappingProxyType({reader.name: reader for reader in _ENTRIES})
"""Format name -> reader, in registration order (read-only)."""


def format_names() -> tuple[str, ...]:
    """The registered format names, in registration order."""
    return tuple(READERS)


def get_reader(name: str) -> TraceReader:
    """The reader of format ``name``; ``ValueError`` naming the value and the known names
    for any other value. O(1)."""
    reader = READERS.get(name) if type(name) is str else None
    if reader is None:
        known = ", ".join(map(repr, READERS))
        raise ValueError(f"unknown trace format {name!r}; known formats: {known}")
    return reader


def detect_format(
    path: str | os.PathLike[str], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> TraceReader:
    """The reader whose :meth:`~TraceReader.sniff` accepts the first non-blank line of the
    file at ``path`` (a directory: its first ``*.jsonl`` file in name order).

    :class:`LocatedError` at that line when it is not a JSON object or when no reader, or
    more than one, accepts it; at line 0 for a file without a non-blank line. O(first line)."""
    check_max_line_bytes(max_line_bytes)
    p = os.fspath(path)
    if os.path.isdir(p):
        files = sorted(e.path for e in os.scandir(p) if e.name.endswith(".jsonl"))
        if not files:
            raise LocatedError(p, 0, "directory holds no *.jsonl files")
        p = files[0]
    with open_trace(p) as fh:
        for line_no, text in numbered_lines(fh, p, max_line_bytes):
            obj = decode_object(text, line_no, p)
            if obj is None:
                continue
            found = [reader for reader in READERS.values() if reader.sniff(obj)]
            if len(found) == 1:
                return found[0]
            known = ", ".join(map(repr, READERS))
            which = " and ".join(repr(r.name) for r in found) if found else "no format"
            raise LocatedError(
                p, line_no, f"cannot tell the trace format: {which} matches (known: {known})"
            )
    raise LocatedError(p, 0, "cannot tell the trace format of an empty file")


def formats_of_line(
    path: str | os.PathLike[str],
    line_no: int,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    candidates: Sequence[Any] | None = None,
) -> tuple[Any, ...]:
    """The readers (or ``candidates``: any objects with a ``sniff(obj)``) whose sniff accepts
    line ``line_no`` (1-based) of the file at ``path``, in order; ``()`` when that line
    cannot be read or is not a JSON object (never raises for the file's content: meant for
    explaining another error). O(bytes up to that line)."""
    sniffers = tuple(READERS.values()) if candidates is None else tuple(candidates)
    p = os.fspath(path)
    if line_no < 1 or not os.path.isfile(p):
        return ()
    try:
        with open_trace(p) as fh:
            for n, text in numbered_lines(fh, p, max_line_bytes):
                if n == line_no:
                    obj = decode_object(text, n, p)
                    if obj is None:
                        return ()
                    return tuple(r for r in sniffers if r.sniff(obj))
    except (LocatedError, OSError, ValueError):
        return ()
    return ()


def parse_lines(
    lines: Sequence[bytes] | Sequence[str],
    first_line_no: int,
    path: str,
    trace_format: str,
    block_size: int,
    instance_id: str,
    plain: bool = False,
) -> tuple[list[Any], LocatedError | None]:
    """Parse consecutive trace lines (``first_line_no`` is the first one's 1-based number).

    Returns the events before the first bad line and that line's error (or None); blank
    lines are skipped; lines are UTF-8 bytes as read (or text), with or without endings.
    ``trace_format`` is a registered format whose lines are independent ("standard",
    "mooncake"; ``ValueError`` otherwise); ``block_size`` and ``instance_id`` are given to
    its :meth:`~TraceReader.line_parser` (only Mooncake takes them). ``plain`` returns plain
    tuples (cheaper to send between processes) instead of TraceEvents. The one line loop of
    the readers that work in batches (``litehit replay``, also in worker processes, and
    ``litehit convert``): :func:`~litehit_service.traces.readers.jsonl.parse_numbered`.
    O(total length).
    """
    reader = get_reader(trace_format)
    parse = reader.line_parser(block_size=block_size, instance_id=instance_id)
    if parse is None:
        raise ValueError(f"trace format {trace_format!r} cannot be parsed line by line")
    return parse_numbered(lines, first_line_no, path, parse, plain)


def reader_of_inputs(
    inputs: Sequence[str | os.PathLike[str]],
    fmt: str | None,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> TraceReader:
    """The reader of format ``fmt`` or, when it is None, the one every input is detected
    as (:func:`detect_format`: each input's first line). InvalidRequestError (a usage
    error) naming the value for an unknown ``fmt``, and naming each input's format when
    they differ; LocatedError when one cannot be told. O(first line of each input)."""
    if fmt is not None:
        try:
            return get_reader(fmt)
        except ValueError as exc:
            raise InvalidRequestError(f"--trace-format: {exc}") from None
    found = [(os.fspath(p), detect_format(p, max_line_bytes=max_line_bytes)) for p in inputs]
    if len({reader.name for _, reader in found}) > 1:
        listed = ", ".join(f"{path} ({reader.name})" for path, reader in found)
        raise InvalidRequestError(
            f"the inputs are of different formats: {listed}; give --trace-format"
        )
    return found[0][1]


def reader_of_container(container: str | None) -> TraceReader | None:
    """The format a container holds by definition (a Parquet trace holds the standard
    format: :mod:`~litehit_service.traces.readers.parquet`), None for plain or compressed
    files, whose first line tells. O(1)."""
    return STANDARD if container == "parquet" else None
