"""``litehit convert`` of a trace read by columns (a standard trace, JSONL or Parquet; a
Mooncake trace) to Parquet.

:func:`convert_columns` reads the input in chunks as pyarrow tables (a reader's
:class:`~litehit_service.traces.readers.columns.ColumnSource`: the standard format's
:func:`~..readers.columns.standard_chunks`, Mooncake's
:func:`~..readers.mooncake_columns.mooncake_chunks`), checks each by the format's rules on
whole columns (the source's ``columns``; at the first doubt the chunk's lines go through
the format's line parser, which names the bad line), shifts the timestamps by the time
offset, checks they never go backwards and writes the rows into row groups of
:data:`~..readers.parquet.ROW_GROUP_ROWS`, with the writer settings of
:func:`~..readers.parquet.write_parquet` (the line path's transcode): the same file.

A standard chunk's values stay as they are (``as_given``): a ``trace_id`` left out is
written as the id every reader gives it (its line number), a write's ``input_len`` and a
``ttl_us`` of 0 (the group's TTL) are null (the schema's way), ``block_mask`` as given. A
Mooncake chunk's rows are built from its checked columns
(:class:`~..readers.columns.StandardColumns`): ``type`` "request", the ``instance_id``
option, the line number as ``trace_id``, the complete blocks' ids as ``keys``, no mask or
TTL -- what the line parser's events become. Cost: O(bytes) in pyarrow and numpy (~150
MB/s of standard JSONL, ~120 MB/s of Mooncake JSONL on two cores); memory: a chunk and a
row group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from litehit_core import LocatedError
from litehit_service.traces.readers.columns import ColumnSource, StandardColumns
from litehit_service.traces.readers.parquet import ROW_GROUP_ROWS, WRITE_OPTIONS, schema
from litehit_service.traces.readers.records import EVENT_KINDS, INT64_MAX, TraceEvent

__all__ = ["convert_columns"]


def convert_columns(
    source: ColumnSource,
    path: str,
    out_path: str,
    offset_ns: int,
    advance: Callable[[int], object],
    *,
    as_given: bool = True,
) -> tuple[int, list[str]]:
    """Write the trace at ``path``, read by columns from ``source`` (its reader's
    ``column_source``), as a Parquet trace at ``out_path`` (module docstring), timestamps
    + ``offset_ns``; (rows, instance ids in first-seen order). ``as_given``: the chunks'
    tables hold the standard fields, written as they are (a standard trace); else each
    row is built from the checked columns (Mooncake). LocatedError naming the line for a
    bad record (the source's line parser's), a timestamp out of int64 after the offset or
    going backwards. ``advance(n)`` hears the units of each chunk read."""
    import pyarrow.parquet as pq

    from litehit_service.traces.readers.jsonl import parse_numbered

    target = schema()
    seen: dict[str, None] = {}
    pending: list[Any] = []
    rows = 0
    prev = (0, 0)  # the last timestamp written and its line
    with pq.ParquetWriter(out_path, target, **WRITE_OPTIONS) as writer:
        for chunk in source.chunks:
            cols = source.columns(chunk.table) if chunk.table is not None else None
            if cols is not None and not as_given and cols.local.any():
                cols = None  # a mask the rows built from columns could not carry
            error = None
            if cols is None:
                events, error = parse_numbered(chunk.lines(), chunk.first_line, path,
                                               source.parse)  # fmt: skip
                part, lines = _from_events(events, target, offset_ns, path)
            else:
                lines = np.arange(chunk.first_line, chunk.first_line + chunk.table.num_rows)
                build = _from_table if as_given else _from_columns
                part = build(chunk.table, cols, target, offset_ns, path, lines)
            prev = _in_order(part.column("timestamp_ns").to_numpy(), lines, prev, offset_ns, path)
            if error is not None:  # the good lines before it were checked first
                raise error
            for name in part.column("instance_id").unique().to_pylist():
                seen.setdefault(name, None)
            pending.append(part)
            rows += part.num_rows
            if sum(p.num_rows for p in pending) >= ROW_GROUP_ROWS:
                _flush(writer, pending, final=False)
            advance(chunk.done)
        _flush(writer, pending, final=True)
    return rows, list(seen)


def _flush(writer: Any, pending: list[Any], *, final: bool) -> None:
    """Write the full row groups of ``pending`` (and, ``final``, the rest); what is left
    stays in ``pending``."""
    import pyarrow as pa

    whole = pa.concat_tables(pending)
    pending.clear()
    start = 0
    while whole.num_rows - start >= ROW_GROUP_ROWS:
        writer.write_table(whole.slice(start, ROW_GROUP_ROWS), row_group_size=ROW_GROUP_ROWS)
        start += ROW_GROUP_ROWS
    rest = whole.slice(start)
    if final and rest.num_rows:
        writer.write_table(rest, row_group_size=ROW_GROUP_ROWS)
    elif rest.num_rows:
        pending.append(rest)


def _shift(times: np.ndarray, lines: np.ndarray, offset_ns: int, path: str) -> np.ndarray:
    """``times + offset_ns``; LocatedError at the first line leaving [1, 2**63-1]."""
    shifted = times + offset_ns
    if offset_ns > 0:
        bad = times > INT64_MAX - offset_ns
    else:
        bad = times <= -offset_ns
    if bad.any():
        i = int(np.argmax(bad))
        raise LocatedError(
            path,
            int(lines[i]),
            f"timestamp_ns {int(times[i])} + --time-offset-ns {offset_ns} = "
            f"{int(times[i]) + offset_ns} is outside [1, 2**63-1]",
        )
    return shifted


def _in_order(
    times: np.ndarray, lines: np.ndarray, prev: tuple[int, int], offset_ns: int, path: str
) -> tuple[int, int]:
    """The last (time, line) after checking ``times`` never go backwards from ``prev``."""
    if not len(times):
        return prev
    before = np.maximum.accumulate(np.r_[prev[0], times[:-1]])
    back = times < before
    if back.any():
        i = int(np.argmax(back))
        where = int(lines[i - 1]) if i else prev[1]
        raise LocatedError(
            path,
            int(lines[i]),
            f"timestamp goes backwards: {int(times[i]) - offset_ns} ns is before the previous "
            f"event's {int(before[i]) - offset_ns} ns (line {where}); sort the trace by "
            "timestamp_ns first (litehit optimize takes it as it is within "
            "--reorder-window-ms)",
        )
    return int(times[-1]), int(lines[-1])


def _from_table(
    table: Any, cols: Any, target: Any, offset_ns: int, path: str, lines: np.ndarray
) -> Any:
    """The output rows of a checked chunk (module docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    writes = pa.array(cols.kinds == 2)  # EVENT_KINDS: get, request, write
    times = _shift(cols.times, lines, offset_ns, path)
    trace = table.column("trace_id") if "trace_id" in table.column_names else None
    if trace is None or trace.null_count:
        filled = pa.array([str(x) for x in lines.tolist()], type=pa.string())
        trace = filled if trace is None else pc.coalesce(trace, filled)
    inputs = pa.array(cols.inputs, type=pa.int64())
    columns = {
        "type": table.column("type"),
        "instance_id": table.column("instance_id"),
        "trace_id": trace,
        "timestamp_ns": pa.array(times, type=pa.int64()),
        "keys": table.column("keys"),
        "input_len": pc.if_else(writes, pa.scalar(None, pa.int64()), inputs),
        "block_mask": _optional(table, "block_mask", n, target),
        "ttl_us": _ttl(table, n, target),
    }
    return pa.table([pa.chunked_array(_chunks(columns[f.name]), type=f.type) for f in target],
                    schema=target)  # fmt: skip


def _from_columns(
    table: Any, cols: StandardColumns, target: Any, offset_ns: int, path: str, lines: np.ndarray
) -> Any:
    """The output rows of a checked chunk of a format whose table is not the standard
    fields (Mooncake), from its columns alone: as the line parser's events are written
    (no mask: the caller sends a chunk with one to the line parser; a ``ttl_us`` of 0 as
    null; the line number as ``trace_id`` unless the table has one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    null = pa.scalar(None, pa.int64())
    writes = pa.array(cols.kinds == EVENT_KINDS.index("write"))
    trace = table.column("trace_id") if "trace_id" in table.column_names else None
    if trace is None or trace.null_count:
        filled = pc.cast(pa.array(lines, type=pa.int64()), pa.string())
        trace = filled if trace is None else pc.coalesce(trace, filled)
    ttl = pa.array(cols.ttl_us, type=pa.int64())
    columns = {
        "type": pa.array(EVENT_KINDS, type=pa.string()).take(pa.array(cols.kinds)),
        "instance_id": cols.instances,
        "trace_id": trace,
        "timestamp_ns": pa.array(_shift(cols.times, lines, offset_ns, path), type=pa.int64()),
        # a chunk (a few MB of JSON) holds far fewer than 2**31 keys: int32 offsets
        "keys": pa.ListArray.from_arrays(
            pa.array(cols.offsets.astype(np.int32)), pa.array(cols.keys, type=pa.int64())
        ),
        "input_len": pc.if_else(writes, null, pa.array(cols.inputs, type=pa.int64())),
        "block_mask": pa.nulls(table.num_rows, type=target.field("block_mask").type),
        "ttl_us": pc.if_else(pc.equal(ttl, 0), null, ttl),
    }
    return pa.table([pa.chunked_array(_chunks(columns[f.name]), type=f.type) for f in target],
                    schema=target)  # fmt: skip


def _chunks(column: Any) -> list[Any]:
    return list(column.chunks) if hasattr(column, "chunks") else [column]


def _ttl(table: Any, n: int, target: Any) -> Any:
    """``ttl_us`` with 0 (the group's TTL) written as null, as the line path writes it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ttl = _optional(table, "ttl_us", n, target)
    return pc.if_else(pc.equal(ttl, 0), pa.scalar(None, pa.int64()), ttl)


def _optional(table: Any, name: str, n: int, target: Any) -> Any:
    import pyarrow as pa

    if name in table.column_names:
        return table.column(name)
    return pa.nulls(n, type=target.field(name).type)


def _from_events(
    events: list[TraceEvent], target: Any, offset_ns: int, path: str
) -> tuple[Any, np.ndarray]:
    """The output rows of events the line parser read (the slow path), and their lines."""
    import pyarrow as pa

    lines = np.array([e.line_no for e in events], dtype=np.int64)
    times = _shift(np.array([e.timestamp_ns for e in events], dtype=np.int64), lines,
                   offset_ns, path)  # fmt: skip
    columns = {
        "type": [e.kind for e in events],
        "instance_id": [e.instance_id for e in events],
        "trace_id": [e.trace_id for e in events],
        "timestamp_ns": times,
        "keys": [e.keys for e in events],
        "input_len": [None if e.kind == "write" else e.input_len for e in events],
        "block_mask": [_mask(e) for e in events],
        "ttl_us": [e.ttl_us or None for e in events],
    }
    arrays = [pa.array(columns[f.name], type=f.type) for f in target]
    return pa.table(arrays, schema=target), lines


def _mask(event: TraceEvent) -> list[bool] | None:
    mask = event.block_mask
    if isinstance(mask, int):
        return [True] * mask + [False] * (len(event.keys) - mask)
    return None if mask is None else list(mask)
