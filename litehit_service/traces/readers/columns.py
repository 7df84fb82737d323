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

Shared with the other columnar readers (:mod:`.mooncake_columns`): :func:`json_chunks`
(JSONL chunks read with any schema) and :class:`ColumnSource` (what a reader's
``column_source`` gives its consumers: chunks, a check by columns, the line parser).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from litehit_core.lines import read_lines
from litehit_service.traces.readers.compressed import container_of, container_or_none, open_bytes
from litehit_service.traces.readers.records import EVENT_KINDS, INT64_MAX, LineParser

__all__ = [
    "CHUNK_BYTES",
    "PARQUET_BATCH_ROWS",
    "ColumnSource",
    "StandardColumns",
    "TableChunk",
    "json_chunks",
    "json_schema",
    "memory_pool",
    "standard_chunks",
    "standard_columns",
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


def standard_chunks(
    path: str, max_line_bytes: int, chunk_bytes: int | None = None
) -> tuple[str, int | None, Iterator[TableChunk]]:
    """``(unit, total, chunks)`` of the standard trace at ``path`` (module docstring):
    progress ``unit`` ("bytes" or "rows"), the ``total`` of them when known (None for a
    compressed file) and the chunks in file order. LocatedError (line 0) for a file that
    cannot be opened or is not a Parquet trace; a line longer than ``max_line_bytes`` is
    the line reader's error at its line. ``chunk_bytes``: about how much JSON a chunk
    holds (default :data:`CHUNK_BYTES`; a Parquet chunk is :data:`PARQUET_BATCH_ROWS`
    rows, or proportionally fewer)."""
    size = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    if container_or_none(path) == "parquet":
        return _parquet_chunks(path, max(PARQUET_BATCH_ROWS * size // CHUNK_BYTES, 1))
    return json_chunks(path, max_line_bytes, json_schema(), chunk_bytes, nulls=False)


def json_chunks(
    path: str,
    max_line_bytes: int,
    schema: Any,
    chunk_bytes: int | None = None,
    *,
    nulls: bool = True,
) -> tuple[str, int | None, Iterator[TableChunk]]:
    """``("bytes", total, chunks)`` of the JSONL file at ``path`` (plain, gzip'd or
    zstd'd): chunks of whole lines, about ``chunk_bytes`` (default :data:`CHUNK_BYTES`) of
    JSON each, read by pyarrow with the explicit ``schema`` (other fields ignored); the
    ``total`` bytes when known (None for a compressed file). A chunk gets no table when a
    line is blank or holds more than one object, its bytes are not valid UTF-8, pyarrow
    refuses it, or (``nulls=False``) it holds a ``null`` anywhere (for a format where an
    explicit null and an absent field differ). The file is opened now (LocatedError at
    line 0 when it cannot be); a line over ``max_line_bytes`` is the line reader's error
    at its line. O(bytes) in pyarrow; memory: one chunk."""
    size = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    fh = open_bytes(path)
    total = None if container_of(path) is not None else os.path.getsize(path)
    return "bytes", total, _json_chunks(fh, path, max_line_bytes, size, schema, nulls)


def _json_chunks(
    fh: Any, path: str, max_line_bytes: int, size: int, schema: Any, nulls: bool
) -> Iterator[TableChunk]:
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    line_no = 1
    with fh:
        pending: list[bytes] = []
        held = 0
        for lines in read_lines(fh, path, max_line_bytes, skip_bom=True, chunk_bytes=size):
            pending += lines
            held += sum(map(len, lines))
            if held >= size:
                yield _json_chunk(pending, held, line_no, options, nulls)
                line_no += len(pending)
                pending, held = [], 0
        if pending:
            yield _json_chunk(pending, held, line_no, options, nulls)


def _json_chunk(lines: list[bytes], size: int, first: int, options: Any, nulls: bool) -> TableChunk:
    import pyarrow as pa
    import pyarrow.json as pj

    data = b"".join(lines)
    table = None
    # pyarrow reads an explicit null as an absent field; the standard line parser refuses
    # some (``"ttl_us": null``) and takes others: there a chunk with a null goes to it
    if (nulls or b"null" not in data) and (data.isascii() or _utf8(data)):
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


def _parquet_chunks(path: str, rows: int) -> tuple[str, int | None, Iterator[TableChunk]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from litehit_core import LocatedError
    from litehit_service.traces.readers.parquet import (
        COLUMNS,
        REQUIRED,
        batch_lines,
    )

    # pyarrow's Parquet reader takes no pool of its own: make the C library's the default
    # (freed pages go back to the system; this process reads traces, it serves nothing)
    pa.set_memory_pool(memory_pool())
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
    total = file.metadata.num_rows
    groups = file.metadata.num_row_groups
    file.close()

    def chunks() -> Iterator[TableChunk]:
        # one row group at a time, each through a freshly opened file, in batches: one
        # ParquetFile read to its end keeps ~2.7 MB per row group (RSS +100 MB over the 37
        # row groups of a 55 M-key trace); a fresh one per group stays flat (measured,
        # bench/README.md)
        row = 1
        for group in range(groups):
            try:
                with pq.ParquetFile(path) as part:
                    for batch in part.iter_batches(
                        batch_size=rows, row_groups=[group], columns=columns
                    ):
                        table = pa.Table.from_batches([batch])
                        yield TableChunk(row, table, lambda b=batch: batch_lines(b), batch.num_rows)
                        row += batch.num_rows
            except Exception as exc:  # noqa: BLE001 - a corrupt page
                raise LocatedError(path, 0, f"not a readable Parquet file: {exc}") from None

    return "rows", total, chunks()


class StandardColumns(NamedTuple):
    """A chunk's records by columns, every value checked by the standard format's rules:
    ``kinds`` (int8, the index in :data:`~.records.EVENT_KINDS`: get, request, write),
    ``times`` (int64 ns), ``offsets`` (int64, rows + 1, into ``keys``), ``keys`` (int64),
    ``inputs`` (int64 prompt tokens; a write's as given, 0 when absent), ``local`` (uint8
    per key, 1 where the row's ``block_mask`` marks it), ``ttl_us`` (int64, 0 when
    absent); and the table's ``instance_id`` column (pyarrow strings)."""

    kinds: np.ndarray
    times: np.ndarray
    offsets: np.ndarray
    keys: np.ndarray
    inputs: np.ndarray
    local: np.ndarray
    ttl_us: np.ndarray
    instances: Any


GET, REQUEST, WRITE = (EVENT_KINDS.index(k) for k in ("get", "request", "write"))


class ColumnSource(NamedTuple):
    """A trace read by columns, as a reader gives it
    (:meth:`~litehit_service.traces.readers.records.TraceReader.column_source`): the
    progress ``unit`` ("bytes" or "rows") and its ``total`` when known, the ``chunks`` in
    file order, ``columns(table)`` (a chunk's records as :class:`StandardColumns`, every
    rule of the format checked, or None at the first doubt) and ``parse`` (the format's
    line parser, its options bound: the slow path that names a doubtful chunk's bad
    line). A chunk's table may hold a ``trace_id`` column; without one, a record's
    trace id is its line number."""

    unit: str
    total: int | None
    chunks: Iterator[TableChunk]
    columns: Callable[[Any], StandardColumns | None]
    parse: LineParser


def _column(table: Any, name: str) -> Any:
    return table.column(name).combine_chunks() if name in table.column_names else None


def standard_columns(table: Any) -> StandardColumns | None:
    """The columns of a pyarrow table of standard records when every row keeps the
    standard format's rules (the line parser's: kinds, a non-empty instance, ``timestamp_ns``
    in [1, 2**63-1], int64 keys, ``input_len`` > 0 on a read and >= 0 on a write, a mask of
    one boolean per key on reads only, ``ttl_us`` 0 on a get and in [-1, 2**63-1 // 1000]
    elsewhere, a string ``trace_id``); None at the first doubt (the line parser decides).
    O(rows + keys) numpy passes, no Python object per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    kind_col = _column(table, "type")
    inst_col = _column(table, "instance_id")
    time_col = _column(table, "timestamp_ns")
    keys_col = _column(table, "keys")
    if any(c is None or c.null_count for c in (kind_col, inst_col, time_col, keys_col)):
        return None  # (a JSONL line with timestamp_us has a null timestamp_ns)
    if not pa.types.is_list(keys_col.type) or not pa.types.is_int64(keys_col.type.value_type):
        return None
    if keys_col.values.null_count or not pa.types.is_int64(time_col.type):
        return None
    us_col = _column(table, "timestamp_us")
    if us_col is not None and us_col.null_count < n:
        return None
    trace_col = _column(table, "trace_id")
    strings = (kind_col, inst_col) + ((trace_col,) if trace_col is not None else ())
    if not all(pa.types.is_string(c.type) for c in strings):
        return None
    if n and pc.any(pc.equal(pc.utf8_length(inst_col), 0)).as_py():
        return None
    kinds = np.full(n, -1, dtype=np.int8)
    for code, name in enumerate(EVENT_KINDS):
        kinds[pc.equal(kind_col, name).to_numpy(zero_copy_only=False)] = code
    times = time_col.to_numpy()
    if (kinds < 0).any() or (times <= 0).any():
        return None
    offsets = keys_col.offsets.to_numpy().astype(np.int64)
    keys = keys_col.values.to_numpy().astype(np.int64, copy=False)[offsets[0] : offsets[-1]]
    offsets = offsets - offsets[0]
    lens = np.diff(offsets)
    reads = kinds != WRITE
    inputs = np.zeros(n, dtype=np.int64)
    input_col = _column(table, "input_len")
    if input_col is not None:
        if not pa.types.is_int64(input_col.type):
            return None
        valid = input_col.is_valid().to_numpy(zero_copy_only=False)
        values = input_col.fill_null(0).to_numpy()
        if (reads & ~valid).any() or (reads & (values <= 0)).any():
            return None
        if (~reads & valid & (values < 0)).any():
            return None
        inputs = values
    elif reads.any():
        return None
    local = _local(table, n, reads, lens, offsets)
    if local is None:
        return None
    ttl_us = np.zeros(n, dtype=np.int64)
    ttl_col = _column(table, "ttl_us")
    if ttl_col is not None:
        if not pa.types.is_int64(ttl_col.type):
            return None
        ttl_us = ttl_col.fill_null(0).to_numpy()
        if ((kinds == GET) & (ttl_us != 0)).any():
            return None
        if ((ttl_us < -1) | (ttl_us > INT64_MAX // 1000)).any():
            return None
    return StandardColumns(kinds, times, offsets, keys, inputs, local, ttl_us, inst_col)


def _local(
    table: Any, n: int, reads: np.ndarray, lens: np.ndarray, offsets: np.ndarray
) -> np.ndarray | None:
    """Per key, 1 where the row's ``block_mask`` marks it local (None: a doubtful mask)."""
    import pyarrow as pa

    local = np.zeros(int(offsets[-1]), dtype=np.uint8)
    mask_col = _column(table, "block_mask")
    if mask_col is None or mask_col.null_count == n:
        return local
    if not pa.types.is_list(mask_col.type) or not pa.types.is_boolean(mask_col.type.value_type):
        return None
    has = mask_col.is_valid().to_numpy(zero_copy_only=False)
    if (has & ~reads).any():  # a mask on a write
        return None
    mask_lens = mask_col.value_lengths().fill_null(0).to_numpy()
    if (has & (mask_lens != lens)).any():
        return None
    flat_col = mask_col.flatten()  # null lists add nothing
    if flat_col.null_count:
        return None
    flat = flat_col.to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(has)
    counts = lens[rows]
    before = np.cumsum(counts) - counts  # where each row's mask starts in ``flat``
    local[np.repeat(offsets[:-1][rows] - before, counts) + np.arange(flat.size)] = flat
    return local
