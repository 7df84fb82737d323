"""Mooncake FAST'25 traces by columns: the fast path of the Mooncake reader.

:func:`mooncake_chunks` reads a Mooncake trace (JSONL, gzip'd or zstd'd JSONL) in chunks
of whole lines, about :data:`~litehit_service.traces.readers.columns.CHUNK_BYTES` of JSON
each, through pyarrow's JSON reader with an explicit schema (:func:`mooncake_schema`:
``timestamp`` float64, ``input_length`` int64, ``hash_ids`` list<int64>; other fields,
``output_length`` among them, ignored). :func:`mooncake_columns` turns a chunk's table into
the records the line parser
(:func:`~litehit_service.traces.readers.mooncake.parse_mooncake_line`) gives, checking
every one of its rules on whole columns, or None at the first doubt: a null or absent
field, a timestamp below 0 or too large to convert exactly (below), an ``input_length``
<= 0, a ``hash_ids`` count outside ``[input_length // block_size, ceil(input_length /
block_size)]``, a null id. What pyarrow itself refuses -- a value of another JSON type, an
integer written as a float, an id beyond int64, a duplicate field -- and a chunk with a
blank line or invalid UTF-8 gets no table at all (:func:`~litehit_service.traces.readers.
columns.json_chunks`). Either way the chunk's lines then go through the line parser, which
takes what the format allows (a partial last id of any JSON type, say) and names the first
bad line (``path:line: field: reason``).

Keys: the ids flattened, each row's partial last id (when it has one) masked out.
Timestamps: ms -> ns as the line parser converts them, ``round(ms * 1e6)`` for a float,
``ms * 10**6`` for an integer; both agree, and float64 holds either exactly, while ``ms *
1e6 <= 2**53`` (about 104 days), beyond which a chunk goes to the line parser. Cost:
O(bytes) in pyarrow and numpy passes over whole columns, no Python per row or key;
memory: one chunk (its bytes, lines and table) and its key arrays.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from litehit_service.traces.readers.columns import (
    REQUEST,
    ColumnSource,
    StandardColumns,
    TableChunk,
    json_chunks,
)
from litehit_service.traces.readers.records import LineParser

__all__ = ["EXACT_NS", "mooncake_chunks", "mooncake_columns", "mooncake_schema", "mooncake_source"]

EXACT_NS = float(2**53)
"""The largest timestamp in ns a chunk's columns convert: every integer up to it is a
float64, so an integer ms read as float64 and multiplied by 1e6 is exact (beyond it, the
line parser's ``ms * 10**6`` and ``round(ms * 1e6)`` part ways)."""


@functools.cache
def mooncake_schema() -> Any:
    """The fields the fast path reads (built on first use: pyarrow is imported only when a
    trace is read): ``timestamp`` float64 (an integer or a float in JSON), ``input_length``
    int64, ``hash_ids`` list<int64>."""
    import pyarrow as pa

    return pa.schema(
        [
            ("timestamp", pa.float64()),
            ("input_length", pa.int64()),
            ("hash_ids", pa.list_(pa.int64())),
        ]
    )


def mooncake_chunks(
    path: str, max_line_bytes: int, chunk_bytes: int | None = None
) -> tuple[str, int | None, Iterator[TableChunk]]:
    """``("bytes", total, chunks)`` of the Mooncake trace at ``path``
    (:func:`~litehit_service.traces.readers.columns.json_chunks` with
    :func:`mooncake_schema`; an explicit null needs no special care here: a null in a field
    read becomes a null in its column, which :func:`mooncake_columns` doubts, and one
    elsewhere is ignored by both paths). O(bytes)."""
    return json_chunks(path, max_line_bytes, mooncake_schema(), chunk_bytes, nulls=True)


def _column(table: Any, name: str) -> Any:
    return table.column(name).combine_chunks()


def mooncake_columns(table: Any, block_size: int, instance_id: str) -> StandardColumns | None:
    """The records of a chunk's table (one row per line) as the line parser gives them,
    every line a ``request`` of ``instance_id`` with the ids of its ``input_length //
    block_size`` complete blocks as keys; None at the first doubt (module docstring).
    ``block_size`` > 0 (the caller checks it). O(rows + ids) numpy passes."""
    import pyarrow as pa

    n = table.num_rows
    time_col = _column(table, "timestamp")
    input_col = _column(table, "input_length")
    ids_col = _column(table, "hash_ids")
    if time_col.null_count or input_col.null_count or ids_col.null_count:
        return None  # an absent field, or a null
    offsets = ids_col.offsets.to_numpy().astype(np.int64)
    values = ids_col.values.slice(offsets[0], offsets[-1] - offsets[0])
    if values.null_count:
        return None
    ms = time_col.to_numpy()
    scaled = ms * 1e6
    # NaN fails both comparisons; -0.0 passes, as it does the line parser's ``ts >= 0``
    if not ((ms >= 0) & (scaled <= EXACT_NS)).all():
        return None
    inputs = input_col.to_numpy()
    if (inputs <= 0).any():
        return None
    offsets -= offsets[0]
    lens = np.diff(offsets)
    full = inputs // block_size
    partial = lens - full  # 1: the row gives its partial last block's id too
    if ((partial < 0) | (partial > (inputs % block_size > 0))).any():
        return None
    ids = values.to_numpy()
    keep = np.ones(ids.size, dtype=bool)
    keep[offsets[1:][partial > 0] - 1] = False
    keys = ids[keep] if not keep.all() else ids
    key_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(full, out=key_offsets[1:])
    return StandardColumns(
        kinds=np.full(n, REQUEST, dtype=np.int8),
        times=np.rint(scaled).astype(np.int64),
        offsets=key_offsets,
        keys=keys.astype(np.int64, copy=False),
        inputs=inputs.astype(np.int64, copy=False),
        local=np.zeros(keys.size, dtype=np.uint8),
        ttl_us=np.zeros(n, dtype=np.int64),
        instances=pa.repeat(pa.scalar(instance_id, pa.string()), n),
    )


def mooncake_source(
    path: str,
    max_line_bytes: int,
    chunk_bytes: int | None,
    block_size: int,
    instance_id: str,
    parse: LineParser,
) -> ColumnSource:
    """The Mooncake trace at ``path`` by columns: :func:`mooncake_chunks`,
    :func:`mooncake_columns` with ``block_size`` and ``instance_id`` bound, and ``parse``
    (the line parser, the same options bound) for the chunks it doubts. The options are
    the caller's to check. O(1) until the chunks are read."""
    unit, total, chunks = mooncake_chunks(path, max_line_bytes, chunk_bytes)
    columns = functools.partial(mooncake_columns, block_size=block_size, instance_id=instance_id)
    return ColumnSource(unit, total, chunks, columns, parse)
