"""LiteHit's standard trace as Parquet: the same records, one column per field.

The schema (:data:`SCHEMA`; other tools may write it; the optional columns may be left
out of a file, and columns beyond these are ignored, as unknown fields of a JSONL line are):

=============  ===============  ==========================================================
column         type             meaning (as the standard JSONL field of the same name)
=============  ===============  ==========================================================
type           string           ``get`` | ``request`` | ``write``
instance_id    string           the instance
timestamp_ns   int64            nanoseconds, > 0, rows in time order
keys           list<int64>      one key per complete block
input_len      int64, null      prompt tokens; null for a write
block_mask     list<bool>, null one entry per key (an integer mask n of JSONL becomes n
                                leading trues, then falses); null: none
ttl_us         int64, null      this write's TTL (0 or null: the group's; -1: never)
trace_id       string, null     the request's id; null: the row number
=============  ===============  ==========================================================

Reading (:class:`ParquetLines`): the file is read one record batch at a time and each row
becomes the standard JSON line it stands for, which the standard reader then parses, so a
Parquet trace gives every command exactly what the JSONL it came from gives, and a bad
value the same located error, at ``path:N`` where N is the row (1-based). Memory: one
record batch. (The policy replay loads a Parquet trace by columns instead:
:mod:`litehit_service.optimizer.optimize.columns`.) Writing (:func:`write_parquet`):
standard JSONL transcoded in batches of :data:`ROW_GROUP_ROWS` rows, one row group each
(the size streaming readers want).
pyarrow is imported only here, when a Parquet file is read or written.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from litehit_core import LocatedError

__all__ = [
    "COLUMNS",
    "REQUIRED",
    "ROW_GROUP_ROWS",
    "WRITE_OPTIONS",
    "ParquetLines",
    "batch_lines",
    "schema",
    "write_parquet",
]

COLUMNS = (
    "type",
    "instance_id",
    "trace_id",
    "timestamp_ns",
    "keys",
    "input_len",
    "block_mask",
    "ttl_us",
)
"""The standard format's fields, in the order a JSONL line writes them."""
REQUIRED = ("type", "instance_id", "timestamp_ns", "keys")
"""Columns every Parquet trace has."""
ROW_GROUP_ROWS = 65_536
"""Rows per row group (and per batch read)."""
WRITE_OPTIONS = {"compression": "zstd", "use_dictionary": ["type", "instance_id"]}
"""How trace files are written: zstd; dictionaries for the few kinds and instances only
(keys and trace ids are nearly all distinct: a dictionary costs time and bytes there)."""


def schema() -> Any:
    """The pyarrow schema of a Parquet trace (module docstring)."""
    import pyarrow as pa

    return pa.schema([
        ("type", pa.string()),
        ("instance_id", pa.string()),
        ("trace_id", pa.string()),
        ("timestamp_ns", pa.int64()),
        ("keys", pa.list_(pa.int64())),
        ("input_len", pa.int64()),
        ("block_mask", pa.list_(pa.bool_())),
        ("ttl_us", pa.int64()),
    ])  # fmt: skip


class ParquetLines:
    """A Parquet trace read as the standard JSONL bytes its rows stand for (``read(n)``,
    as :func:`~litehit_service.traces.readers.jsonl.trace_lines` reads a file). A file that
    is not a readable Parquet trace (a required column missing) is a LocatedError at row 0.
    """

    def __init__(self, path: str) -> None:
        import pyarrow.parquet as pq

        self._path = path
        try:
            self._file = pq.ParquetFile(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises its own error types
            raise LocatedError(path, 0, f"not a readable Parquet file: {exc}") from None
        names = self._file.schema_arrow.names
        missing = [c for c in REQUIRED if c not in names]
        if missing:
            raise LocatedError(
                path, 0, f"a Parquet trace needs the columns {list(REQUIRED)}; {missing} missing"
            )
        self._columns = [c for c in COLUMNS if c in names]
        self._batches = self._file.iter_batches(batch_size=ROW_GROUP_ROWS, columns=self._columns)
        self._buffer = bytearray()

    def _next_batch(self) -> bool:
        try:
            batch = next(self._batches)
        except StopIteration:
            return False
        except Exception as exc:  # noqa: BLE001 - a corrupt page: pyarrow's error types
            raise LocatedError(self._path, 0, f"not a readable Parquet file: {exc}") from None
        for line in batch_lines(batch):
            self._buffer += line
        return True

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self._buffer) < size) and self._next_batch():
            pass
        n = len(self._buffer) if size < 0 else min(size, len(self._buffer))
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ParquetLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def batch_lines(batch: Any) -> list[bytes]:
    """The standard JSONL lines (each ending with ``\\n``) a Parquet record batch's rows
    stand for: a row's null columns left out, as a JSONL line leaves the field out.
    O(rows) Python objects: the slow path (every row checked by the line parser)."""
    names = batch.schema.names
    columns = [batch.column(name).to_pylist() for name in names]
    dumps = orjson.dumps
    return [
        dumps({n: v for n, v in zip(names, row, strict=True) if v is not None}) + b"\n"
        for row in zip(*columns, strict=True)
    ]


def _row(obj: dict[str, Any]) -> tuple[Any, ...]:
    """One standard record (a parsed JSONL line of the converter's output) as a row."""
    mask = obj.get("block_mask")
    if type(mask) is int:
        n = len(obj["keys"])
        mask = [True] * mask + [False] * (n - mask)
    return (
        obj["type"],
        obj["instance_id"],
        obj.get("trace_id"),
        obj["timestamp_ns"],
        obj["keys"],
        obj.get("input_len") if obj["type"] != "write" else None,
        mask,
        obj.get("ttl_us"),
    )


def write_parquet(jsonl_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> int:
    """Transcode the standard JSONL at ``jsonl_path`` (a converter's output: valid, in time
    order) to a Parquet trace at ``out_path``, one row group per :data:`ROW_GROUP_ROWS`
    rows; returns the rows written. Memory: one row group. O(bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = schema()
    rows = 0
    pending: list[tuple[Any, ...]] = []

    def flush(writer: Any) -> None:
        columns = list(zip(*pending, strict=True))
        arrays = [
            pa.array(col, type=field.type) for col, field in zip(columns, target, strict=True)
        ]
        writer.write_table(pa.Table.from_arrays(arrays, schema=target))
        pending.clear()

    with pq.ParquetWriter(str(out_path), target, **WRITE_OPTIONS) as writer:
        with open(jsonl_path, "rb") as fh:
            for line in fh:
                if not line.strip():
                    continue
                pending.append(_row(orjson.loads(line)))
                rows += 1
                if len(pending) == ROW_GROUP_ROWS:
                    flush(writer)
        if pending:
            flush(writer)
    return rows
