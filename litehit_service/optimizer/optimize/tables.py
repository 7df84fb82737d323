"""The per-read tables of ``litehit optimize``, written batch by batch: CSV or Parquet.

:class:`CsvTable` writes ``{instance_id}_hit_rates.csv`` byte-identical to the whole file
:func:`~.rows.format_csv` writes; :class:`ParquetTable` the same columns as
``{instance_id}_hit_rates.parquet`` (int64, the rates float64, unrounded), one row group
per batch. Both continue the ``Acc*`` sums across batches (:class:`~.rows.Running`).
``--output-format`` picks one (:data:`TABLES`). :func:`arrow_table` is the Parquet file's
table in memory (the Python API returns it). Cost: O(reads) per batch, one compiled call
(CSV) or one pyarrow write (Parquet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from litehit_service.optimizer.optimize.rows import (
    InstanceRows,
    Running,
    column_names,
    csv_header,
    csv_lines,
    no_rows,
    row_columns,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["TABLES", "CsvTable", "ParquetTable", "arrow_schema", "arrow_table"]


def arrow_schema(tier_names: tuple[str, ...]) -> pa.Schema:
    """The per-read table's schema: the CSV's columns by the same names, int64, the rates
    float64. O(columns)."""
    import pyarrow as pa

    _, decimals = row_columns(no_rows(1, len(tier_names)), tier_names, Running())
    return pa.schema([
        (name, pa.float64() if d else pa.int64())
        for name, d in zip(column_names(tier_names), decimals, strict=True)
    ])  # fmt: skip


def arrow_table(
    rows: InstanceRows,
    tier_names: tuple[str, ...],
    running: Running | None = None,
    schema: pa.Schema | None = None,
) -> pa.Table:
    """``rows`` as a pyarrow Table of :func:`arrow_schema` (the ``Acc*`` columns continue
    ``running``, which is advanced; default: from zero). O(reads)."""
    import pyarrow as pa

    columns, _ = row_columns(rows, tier_names, Running() if running is None else running)
    return pa.table(columns, schema=schema or arrow_schema(tier_names))


class CsvTable:
    """An instance's ``{id}_hit_rates.csv`` written batch by batch (byte-identical to the
    whole file :func:`~.rows.format_csv` writes)."""

    def __init__(self, path: str, tier_names: tuple[str, ...]) -> None:
        self.tier_names = tier_names
        self.file: TextIO = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115
        self.file.write(csv_header(tier_names))

    def write(self, rows: InstanceRows, running: Running) -> None:
        self.file.write(csv_lines(rows, self.tier_names, running))

    def close(self) -> None:
        self.file.close()


class ParquetTable:
    """An instance's ``{id}_hit_rates.parquet``: the CSV's columns by the same names,
    int64, the rates float64 (not rounded), one row group per batch."""

    def __init__(self, path: str, tier_names: tuple[str, ...]) -> None:
        import pyarrow.parquet as pq

        self.tier_names = tier_names
        self.schema = arrow_schema(tier_names)
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")

    def write(self, rows: InstanceRows, running: Running) -> None:
        self.writer.write_table(arrow_table(rows, self.tier_names, running, self.schema))

    def close(self) -> None:
        self.writer.close()


TABLES = {"csv": CsvTable, "parquet": ParquetTable}
"""``--output-format``: how the per-read tables are written."""
