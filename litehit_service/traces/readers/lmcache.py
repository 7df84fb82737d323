"""LMCache lookup-hash logs, whole: files or a directory merged and sorted by time.

:func:`read_lmcache` reads one JSONL file, or every ``lookup_hashes_*.jsonl`` of a
directory, into ``request`` events of instance ``model_name`` stably sorted by timestamp,
with each model's chunk size and KV bytes per chunk (:class:`LMCacheTrace`).
:class:`LMCacheLoader` holds one call's state and sends each ~1 MiB chunk of lines either
column-wise (:mod:`~litehit_service.traces.readers.lmcache_columns`) or, line by line,
through the reference parser (:mod:`~litehit_service.traces.readers.lmcache_fields`, which
documents the fields and units). :class:`LMCacheReader` is the format's registry entry.
Cost: O(total bytes + n log n); memory: the events (they are sorted).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from operator import itemgetter
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from litehit_core import LocatedError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes
from litehit_service.traces.readers.jsonl import check_utf8, open_trace, trace_lines
from litehit_service.traces.readers.lmcache_columns import layout_runs, take_columns
from litehit_service.traces.readers.lmcache_fields import ModelInfo, parse_lmcache_line
from litehit_service.traces.readers.records import TraceEvent, TraceReader

__all__ = [
    "MIN_COLUMNS",
    "READER",
    "LMCacheLoader",
    "LMCacheReader",
    "LMCacheTrace",
    "lmcache_files",
    "read_lmcache",
]

MIN_COLUMNS = 32
"""A chunk the column-wise path refuses is halved down to this many lines."""


class LMCacheTrace(NamedTuple):
    """Result of :func:`read_lmcache`.

    ``events``: every kept event sorted by timestamp (stable: ties keep file, then line,
    order); ``models``: model name -> :class:`ModelInfo` of the kept models; ``files``: the
    files read, in reading order.
    """

    events: list[TraceEvent]
    models: dict[str, ModelInfo]
    files: list[str]


def lmcache_files(path: str) -> list[str]:
    """``[path]`` for a file; a directory's ``lookup_hashes_*.jsonl`` files in name order
    (none is an error at line 0). O(directory entries)."""
    if os.path.isdir(path):
        files = sorted(str(p) for p in Path(path).glob("lookup_hashes_*.jsonl"))
        if not files:
            raise LocatedError(path, 0, "directory holds no lookup_hashes_*.jsonl files")
        return files
    return [path]


class LMCacheLoader:
    """The state of one :func:`read_lmcache` call: events and models so far.

    Lines come in chunks (:func:`trace_lines`, ~1 MiB). A chunk is first read column-wise
    (:func:`~litehit_service.traces.readers.lmcache_columns.take_columns`): every step is a
    C-level ``map`` over its lines or one numpy/bytes pass, with no Python bytecode per
    line. It applies when every line is laid out as LMCache writes it --
    ``"chunk_hashes": [...]}`` last, the hashes strings of one width -- and passes every
    check; then orjson parses each line without its hash array and the chunk's hashes are
    decoded at once. Otherwise nothing is changed and the chunk is split in halves, down to
    :data:`MIN_COLUMNS` lines, below which each line goes through the reference parser
    :func:`parse_lmcache_line` (:meth:`line`). The column-wise path gives exactly the
    reference parser's events (``tests/test_lmcache_reader.py`` compares them); errors
    always come from the reference path, so the first bad line of a file is the one
    reported, with the reference message.
    """

    def __init__(self, model: str | None, kv_bytes_per_chunk: int | None) -> None:
        self.model = model
        self.kv_bytes_per_chunk = kv_bytes_per_chunk
        self.events: list[TraceEvent] = []
        self.models: dict[str, ModelInfo] = {}
        self.first_seen: dict[str, str] = {}
        self.all_models: set[str] = set()
        self.column_lines = 0  # lines taken column-wise (the rest: the reference parser)

    def read(self, fh: BinaryIO, path: str, max_line_bytes: int) -> None:
        """Read one file into the events. O(bytes)."""
        line_no = 1
        for lines in trace_lines(fh, path, max_line_bytes):
            self._chunk(lines, line_no, path)
            line_no += len(lines)

    def _chunk(self, lines: list[bytes], first: int, path: str) -> None:
        """Lines ``first``, ``first + 1``, ... of ``path``: column-wise when possible; else
        the runs of lines laid out alike column-wise and the other lines one by one; else
        (the layout holds but a value does not) in halves, one by one below
        ``2 * MIN_COLUMNS`` lines."""
        if not lines or self._columns(lines, first, path):
            return
        runs = layout_runs(lines)
        if len(runs) == 1 and runs[0][2]:
            if len(lines) >= 2 * MIN_COLUMNS:
                half = len(lines) // 2
                self._chunk(lines[:half], first, path)
                self._chunk(lines[half:], first + half, path)
                return
            runs = [(0, len(lines), False)]
        for start, stop, alike in runs:
            if alike:
                self._chunk(lines[start:stop], first + start, path)
            else:
                for line_no in range(first + start, first + stop):
                    self.line(lines[line_no - first], line_no, path)

    def line(self, text: bytes, line_no: int, path: str) -> None:
        """One line through the reference parser; errors are raised here. O(line)."""
        if not text.isascii():
            check_utf8(text, line_no, path)
        parsed = parse_lmcache_line(text, line_no, path, self.model, self.kv_bytes_per_chunk)
        if parsed is None:
            return
        event, info = parsed
        name = event.instance_id
        self.all_models.add(name)
        if info is None:
            return
        known = self.models.get(name)
        if known is None:
            self.models[name] = info
            self.first_seen[name] = f"{path}:{line_no}"
        elif known != info:
            field, now, then = (
                ("chunk_size", info.chunk_size, known.chunk_size)
                if known.chunk_size != info.chunk_size
                else ("bytes per chunk", info.bytes_per_chunk, known.bytes_per_chunk)
            )
            raise LocatedError(
                path,
                line_no,
                f"model {name!r}: {field} {now} differs from {then} "
                f"first seen at {self.first_seen[name]}",
            )
        self.events.append(event)

    def _columns(self, lines: list[bytes], first: int, path: str) -> bool:
        """Take the chunk column-wise (:func:`take_columns`), or return ``False`` having
        changed nothing. Never raises for bad input. O(chunk bytes), C-level."""
        chunk = take_columns(lines, first, path, self.model, self.kv_bytes_per_chunk, self.models)
        if chunk is None:
            return False
        self.all_models.update(chunk.names)
        for name, (info, where) in chunk.new_models.items():
            self.models[name] = info
            self.first_seen[name] = where
        self.events += chunk.events
        self.column_lines += len(lines)
        return True


def read_lmcache(
    path_or_dir: str | os.PathLike[str],
    model: str | None = None,
    kv_bytes_per_chunk: int | None = None,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> LMCacheTrace:
    """Read LMCache lookup-hash logs: one JSONL file, or every ``lookup_hashes_*.jsonl`` of a
    directory (in file-name order), merged and stably sorted by timestamp.

    Fields per line: ``timestamp`` (seconds, >= 0 -> ns rounded to nearest), ``request_id``
    (-> trace_id; optional, default ``"<file name>:<line>"``), ``model_name`` (-> instance_id),
    ``chunk_size`` (tokens, > 0), ``seq_len`` (-> input_len, > 0), ``chunk_hashes`` (hex
    strings of the ``seq_len // chunk_size`` complete chunks, optional ``0x``; each becomes
    the low 64 bits as a signed int64; when ``seq_len`` ends with a partial chunk, one more
    hash -- the partial tail chunk's -- is accepted, checked and ignored: tail tokens are
    always a miss; any other count is an error naming both counts), ``dtypes`` and
    ``shapes`` (per tensor; bytes per chunk = sum of prod(shape) x dtype size; unknown
    dtypes are an error unless ``kv_bytes_per_chunk`` is given, in which case dtypes/shapes
    are not read).

    ``model`` keeps only that model's events (an error when it matches none). A model
    whose chunk_size or bytes per chunk changes between lines is an error. Events are kind
    ``"request"``; ``line_no`` is the line within its own file. A line longer than
    ``max_line_bytes`` bytes is an error at its line.

    Cost: O(total size + n log n). Lines laid out as LMCache writes them (``chunk_hashes``
    last, fixed-width ``"0x..."`` strings) take a fast path: orjson parses the line without
    its hashes and the hashes of many lines are decoded together in C
    (:class:`LMCacheLoader`, :mod:`~litehit_service.traces.readers.lmcache_columns`); ~5 us
    per line plus ~40 ns per hash on the benchmark host,
    less than LMCache's own loader (``bench/bench_lmcache.py``). Memory: the events, plus a
    batch of at most 65,536 hashes.
    """
    check_max_line_bytes(max_line_bytes)
    if kv_bytes_per_chunk is not None and (
        type(kv_bytes_per_chunk) is not int or kv_bytes_per_chunk <= 0
    ):
        raise ValueError(f"kv_bytes_per_chunk must be an integer > 0, got {kv_bytes_per_chunk!r}")
    root = os.fspath(path_or_dir)
    files = lmcache_files(root)
    reader = LMCacheLoader(model, kv_bytes_per_chunk)
    collecting = gc.isenabled()
    gc.disable()  # see the docstring: nothing to collect, only objects to scan
    try:
        for path in files:
            with open_trace(path) as fh:
                reader.read(fh, path, max_line_bytes)
    finally:
        if collecting:
            gc.enable()
    events = reader.events
    if model is not None and not events:
        present = ", ".join(repr(m) for m in sorted(reader.all_models)) or "none"
        raise LocatedError(root, 0, f"no events of model {model!r}; models present: {present}")
    events.sort(key=itemgetter(4))  # timestamp_ns; list.sort is stable
    return LMCacheTrace(events, reader.models, files)


class LMCacheReader(TraceReader):
    """LMCache lookup-hash logs (LMCache's ``LookupHashLoggingSubscriber``): one JSONL file
    or a directory of ``lookup_hashes_*.jsonl``; seconds -> ns, hex chunk hashes -> int64
    keys, ``model_name`` -> instance, ``seq_len`` -> input length; every line a ``request``.
    Options ``model`` (keep one model's lines) and ``kv_bytes_per_chunk``. The events come
    sorted by timestamp, so the whole input is read first: O(total bytes + n log n), memory
    the events (:func:`read_lmcache`; :meth:`read` gives its events only)."""

    name = "lmcache"
    options = ("model", "kv_bytes_per_chunk")
    whole_input = True
    sizes_in_trace = True
    example = (
        b'{"timestamp": 2.5, "request_id": "r2", "model_name": "m", "chunk_size": 256, '
        b'"seq_len": 600, "dtypes": ["bfloat16"], "shapes": [[2, 256, 8]], '
        b'"chunk_hashes": ["0x00000000000000ff", "0xffffffffffffffff", "0x0000000000000007"]}\n'
        b'{"timestamp": 1.25, "request_id": "r1", "model_name": "m", "chunk_size": 256, '
        b'"seq_len": 256, "dtypes": ["bfloat16"], "shapes": [[2, 256, 8]], '
        b'"chunk_hashes": ["0x00000000000000ff"]}\n'
    )

    def read(
        self,
        path: str | os.PathLike[str],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        model: str | None = None,
        kv_bytes_per_chunk: int | None = None,
    ) -> list[TraceEvent]:
        """The events of :func:`read_lmcache`."""
        return read_lmcache(path, model, kv_bytes_per_chunk, max_line_bytes=max_line_bytes).events

    def read_sized(
        self,
        path: str | os.PathLike[str],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        model: str | None = None,
        kv_bytes_per_chunk: int | None = None,
    ) -> tuple[list[TraceEvent], Mapping[str, ModelInfo]]:
        """The events and models of :func:`read_lmcache`: model -> (chunk_size, KV bytes
        per chunk; ``kv_bytes_per_chunk`` when given)."""
        trace = read_lmcache(path, model, kv_bytes_per_chunk, max_line_bytes=max_line_bytes)
        return trace.events, trace.models

    def sniff(self, obj: Mapping[str, Any]) -> bool:
        """A ``chunk_hashes`` and a ``model_name`` field."""
        return "chunk_hashes" in obj and "model_name" in obj


READER = LMCacheReader()
