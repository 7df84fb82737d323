"""Standard traces by columns: JSONL chunks and Parquet row groups as pyarrow tables.

:func:`standard_chunks` reads a standard trace (JSONL, gzip'd or zstd'd JSONL, or
Parquet) in chunks of about :data:`CHUNK_BYTES` of JSON (or one Parquet row group) and
gives each as a :class:`TableChunk`: the chunk's rows as a pyarrow table when pyarrow read
every line as exactly one record, and always a way back to the chunk's lines, numbered as
the line reader numbers them. A caller checks the table's values by columns and, at the
first doubt, hands the chunk's lines to the line parser, which names the bad line
(``path:line: field: reason``) exactly as it does when it reads the whole file.

The JSON fast path takes a chunk only when every line holds one object (a blank line, two
objects on a line or a line pyarrow refuses -- a mask given as an integer, a key beyond
int64, a duplicate field -- sends the chunk to the line parser), its bytes are valid UTF-8
and hold no ``null`` (pyarrow cannot tell an explicit null from an absent field).
pyarrow (multi-threaded, C++) parses ~250 MB/s on two cores where the line loop parses
20-60 MB/s. Memory: one chunk (its bytes, its lines and its table).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from litehit_core.lines import read_lines
from litehit_service.traces.readers.compressed import container_of, open_bytes

__all__ = [
    "CHUNK_BYTES",
    "PARQUET_BATCH_ROWS",
    "TableChunk",
    "json_schema",
    "memory_pool",
    "standard_chunks",
]

CHUNK_BYTES = 4 << 20
"""About how many bytes of JSONL one chunk holds (whole lines)."""
PARQUET_BATCH_ROWS = 16_384
"""Rows per chunk of a Parquet trace (about the records of a JSONL chunk; a row group of
the files ``convert`` writes holds four)."""


@functools.cache
def json_schema() -> Any:
    """The schema the JSON fast path reads with: the Parquet schema plus ``timestamp_us``
    (built on first use: pyarrow is imported only when a trace is read)."""
    import pyarrow as pa

    from litehit_service.traces.readers.parquet import schema

    return pa.schema([*schema(), ("timestamp_us", pa.int64())])


@functools.cache
def memory_pool() -> Any:
    """The allocator trace chunks are decoded into: the C library's, which gives freed
    chunks back to the system (pyarrow's default, mimalloc, keeps them cached: ~50 MB more
    peak RSS on a streamed replay, no faster)."""
    import pyarrow as pa

    return pa.system_memory_pool()


class TableChunk(NamedTuple):
    """A chunk of a trace: ``first_line`` (1-based line or row of its first record),
    ``table`` (its records as a pyarrow table, one row per line, or None when pyarrow could
    not read them so), ``lines()`` (the chunk's lines as bytes, for the line parser) and
    ``done`` (progress units consumed by this chunk: bytes of JSONL, or rows of Parquet)."""

    first_line: int
    table: Any | None
    lines: Callable[[], list[bytes]]
    done: int


def standard_chunks(path: str, max_line_bytes: int) -> tuple[str, int | None, Iterator[TableChunk]]:
    """``(unit, total, chunks)`` of the standard trace at ``path`` (module docstring):
    progress ``unit`` ("bytes" or "rows"), the ``total`` of them when known (None for a
    compressed file) and the chunks in file order. LocatedError (line 0) for a file that
    cannot be opened or is not a Parquet trace; a line longer than ``max_line_bytes`` is
    the line reader's error at its line."""
    if container_of(path) == "parquet":
        return _parquet_chunks(path)
    fh = open_bytes(path)
    total = None if container_of(path) is not None else os.path.getsize(path)
    return "bytes", total, _json_chunks(fh, path, max_line_bytes)


def _json_chunks(fh: Any, path: str, max_line_bytes: int) -> Iterator[TableChunk]:
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=json_schema(), unexpected_field_behavior="ignore")
    line_no = 1
    with fh:
        pending: list[bytes] = []
        size = 0
        for lines in read_lines(fh, path, max_line_bytes, skip_bom=True, chunk_bytes=CHUNK_BYTES):
            pending += lines
            size += sum(map(len, lines))
            if size >= CHUNK_BYTES:
                yield _json_chunk(pending, size, line_no, options)
                line_no += len(pending)
                pending, size = [], 0
        if pending:
            yield _json_chunk(pending, size, line_no, options)


def _json_chunk(lines: list[bytes], size: int, first: int, options: Any) -> TableChunk:
    import pyarrow as pa
    import pyarrow.json as pj

    data = b"".join(lines)
    table = None
    # pyarrow reads an explicit null as an absent field; the line parser refuses some
    # (``"ttl_us": null``) and takes others: a chunk with a null goes to the line parser
    if b"null" not in data and (data.isascii() or _utf8(data)):
        try:
            table = pj.read_json(
                pa.BufferReader(data), parse_options=options, memory_pool=memory_pool()
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = None
        if table is not None and table.num_rows != len(lines):
            table = None  # a blank line, or a line with more than one object
    return TableChunk(first, table, lambda: lines, size)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _parquet_chunks(path: str) -> tuple[str, int | None, Iterator[TableChunk]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from litehit_core import LocatedError
    from litehit_service.traces.readers.parquet import (
        COLUMNS,
        REQUIRED,
        batch_lines,
    )

    try:
        file = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises its own error types
        raise LocatedError(path, 0, f"not a readable Parquet file: {exc}") from None
    names = file.schema_arrow.names
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        file.close()
        raise LocatedError(
            path, 0, f"a Parquet trace needs the columns {list(REQUIRED)}; {missing} missing"
        )
    columns = [c for c in COLUMNS if c in names]

    def chunks() -> Iterator[TableChunk]:
        row = 1
        with file:
            batches = file.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns)
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except Exception as exc:  # noqa: BLE001 - a corrupt page
                    raise LocatedError(path, 0, f"not a readable Parquet file: {exc}") from None
                table = pa.Table.from_batches([batch])
                yield TableChunk(row, table, lambda b=batch: batch_lines(b), batch.num_rows)
                row += batch.num_rows

    return "rows", file.metadata.num_rows, chunks()
