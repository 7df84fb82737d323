"""Trace readers: one module per format behind a registry of readers by format name.

Every reader turns a file into :class:`TraceEvent` records and fails fast: the first bad
line raises :class:`~litehit_core.LocatedError` whose text is exactly
``"{path}:{line_no}: {reason}"`` (the reason names the field and the offending value).

- :mod:`.records`: :class:`TraceEvent`, the int64 bounds, the :class:`TraceReader` interface;
- :mod:`.jsonl`: the shared line loop (UTF-8, BOM, ``max_line_bytes``) and error reporting;
- :mod:`.standard`: LiteHit's standard JSONL (get / request / write), read and written;
- :mod:`.mooncake`: Mooncake FAST'25 traces, with :mod:`.mooncake_columns` (by columns:
  pyarrow chunks, the line parser as the slow path);
- :mod:`.columns`: a standard trace (JSONL or Parquet) by columns, and the pieces every
  columnar reader shares (JSONL chunks, :class:`~.columns.ColumnSource`);
- :mod:`.lmcache`: LMCache lookup-hash logs, whole (files, directory, sort), with
  :mod:`.lmcache_fields` (one line: the reference parser, units) and :mod:`.lmcache_columns`
  (the column-wise fast path);
- :mod:`.registry`: format name -> reader (:data:`READERS`, :func:`get_reader`),
  :func:`detect_format`, and :func:`parse_lines`, the batch loop of replay and convert.

Adding a format: one module with a ``TraceReader`` subclass (its capabilities set:
``whole_input``, ``sizes_in_trace``, ``default_block_size``, ``names_instances``) and its
``READER``, and one entry in :mod:`.registry`. Code outside this package asks a reader
these questions and never tests a format's name (``tests/test_trace_readers.py``). This
package re-exports the names callers use, so ``from litehit_service.traces.readers import
read_mooncake`` keeps working.
"""

from litehit_service.traces.readers.jsonl import open_trace, trace_lines
from litehit_service.traces.readers.lmcache import LMCacheTrace, read_lmcache
from litehit_service.traces.readers.lmcache_fields import ModelInfo, dtype_size
from litehit_service.traces.readers.mooncake import parse_mooncake_line, read_mooncake
from litehit_service.traces.readers.records import (
    EVENT_KINDS,
    INT64_MAX,
    INT64_MIN,
    TraceEvent,
    TraceReader,
)
from litehit_service.traces.readers.registry import (
    READERS,
    detect_format,
    format_names,
    formats_of_line,
    get_reader,
    parse_lines,
    reader_of_inputs,
)
from litehit_service.traces.readers.standard import (
    format_standard_event,
    parse_standard_line,
    read_standard,
)

__all__ = [
    "parse_lines",
    "EVENT_KINDS",
    "INT64_MAX",
    "INT64_MIN",
    "LMCacheTrace",
    "ModelInfo",
    "READERS",
    "TraceEvent",
    "TraceReader",
    "detect_format",
    "dtype_size",
    "format_names",
    "format_standard_event",
    "formats_of_line",
    "get_reader",
    "open_trace",
    "parse_mooncake_line",
    "parse_standard_line",
    "read_lmcache",
    "read_mooncake",
    "read_standard",
    "reader_of_inputs",
    "trace_lines",
]
