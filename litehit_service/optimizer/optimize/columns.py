"""A Parquet trace straight into the policy replay's arrays: columns, not rows.

:func:`parquet_arrays` reads a standard Parquet trace
(:mod:`litehit_service.traces.readers.parquet`) with pyarrow and builds the arrays
:func:`~litehit_service.optimizer.optimize.trace.load_trace` builds from records, with
every check of the row path done on whole columns (numpy). It answers only when every row
passes: at the first doubt (a null where a value is required, a value out of range, a key
count past its prompt, a mask of the wrong length, a TTL on a get, an unconfigured
instance) it returns None and the row path reads the file again, which names the first
bad row exactly as it does for JSONL. So the results are the row path's, by construction
where the rows are good and by delegation where one is not.

Cost: the file's columns in memory once (what the replay holds anyway: ~17 bytes per key,
~30 per record), O(rows + keys) numpy passes, no Python object per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from litehit_core.policy_replay.loop import GET, REQUEST, WRITE
from litehit_service.traces.readers.records import INT64_MAX

__all__ = ["Arrays", "parquet_arrays"]

Arrays = tuple[np.ndarray, ...]
"""(kinds int8, insts int32, times int64, key counts int64, input lens int64, keys int64,
local uint8, buckets int32, TTL values ns in bucket order)."""


def _column(table: Any, name: str, default: Any = None) -> Any:
    return table.column(name).combine_chunks() if name in table.column_names else default


def parquet_arrays(
    path: str,
    index: dict[str, int],
    route: str | None,
    block_sizes: Sequence[int],
    expires: Sequence[bool],
    default_ttl: Sequence[int],
) -> tuple[Arrays, tuple[int, ...]] | None:
    """The replay arrays of the Parquet trace at ``path`` in file order (the caller sorts
    them by time), and the distinct TTLs (ns) in first-seen order, or None when a row
    needs the row path's judgement (module docstring). ``index``: instance id -> index;
    ``route``: the instance of every record, or None; per instance its tokens per key,
    whether its policy expires, its group's default TTL in ns."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    n = table.num_rows
    kind_col = _column(table, "type")
    inst_col = _column(table, "instance_id")
    time_col = _column(table, "timestamp_ns")
    keys_col = _column(table, "keys")
    if any(c is None or c.null_count for c in (kind_col, inst_col, time_col, keys_col)):
        return None
    if not pa.types.is_list(keys_col.type) or not pa.types.is_int64(keys_col.type.value_type):
        return None
    if not pa.types.is_int64(time_col.type):
        return None
    trace_col = _column(table, "trace_id")
    strings = (kind_col, inst_col) + ((trace_col,) if trace_col is not None else ())
    if not all(pa.types.is_string(c.type) for c in strings):
        return None
    if pc.any(pc.equal(pc.utf8_length(inst_col), 0)).as_py():  # checked even when routed
        return None
    kinds = np.full(n, -1, dtype=np.int8)
    for name, code in (("get", GET), ("request", REQUEST), ("write", WRITE)):
        kinds[pc.equal(kind_col, name).to_numpy(zero_copy_only=False)] = code
    times = time_col.to_numpy()
    if (kinds < 0).any() or (times <= 0).any():
        return None
    if route is not None:
        insts = np.full(n, index[route], dtype=np.int32)
    else:
        names = list(index)
        found = pc.index_in(inst_col, value_set=pa.array(names, type=pa.string()))
        if found.null_count:  # an unconfigured (or empty) instance id
            return None
        insts = found.to_numpy().astype(np.int32)
    offsets = keys_col.offsets.to_numpy().astype(np.int64)
    keys = keys_col.values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    lens = np.diff(offsets - offsets[0])
    keys = keys[offsets[0] : offsets[-1]]
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
        inputs = np.where(reads, values, 0)
    elif reads.any():
        return None
    room = inputs // np.asarray(block_sizes, dtype=np.int64)[insts]
    if (reads & (lens > room)).any():
        return None
    local = np.zeros(len(keys), dtype=np.uint8)
    mask_col = _column(table, "block_mask")
    if mask_col is not None and mask_col.null_count < n:
        if not pa.types.is_list(mask_col.type) or not pa.types.is_boolean(mask_col.type.value_type):
            return None
        has = mask_col.is_valid().to_numpy(zero_copy_only=False)
        if (has & ~reads).any():  # a mask on a write
            return None
        mask_lens = mask_col.value_lengths().fill_null(0).to_numpy()
        if (has & (mask_lens != lens)).any():
            return None
        flat = mask_col.flatten().to_numpy(zero_copy_only=False)  # null lists add nothing
        rows = np.flatnonzero(has)
        counts = lens[rows]
        starts = (offsets[:-1] - offsets[0])[rows]
        before = np.cumsum(counts) - counts  # where each row's mask starts in ``flat``
        local[np.repeat(starts - before, counts) + np.arange(flat.size)] = flat
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
    ttl = np.where(ttl_us > 0, ttl_us * 1000, np.where(ttl_us < 0, 0, np.asarray(
        default_ttl, dtype=np.int64)[insts]))  # fmt: skip
    bucketed = (kinds != GET) & np.asarray(expires, dtype=bool)[insts] & (ttl > 0)
    buckets = np.full(n, -1, dtype=np.int32)
    values: tuple[int, ...] = ()
    if bucketed.any():
        distinct, first = np.unique(ttl[bucketed], return_index=True)
        seen_order = np.argsort(first, kind="stable")  # first-seen order, as the row path
        rank = np.empty(len(distinct), dtype=np.int32)
        rank[seen_order] = np.arange(len(distinct), dtype=np.int32)
        buckets[bucketed] = rank[np.searchsorted(distinct, ttl[bucketed])]
        values = tuple(int(v) for v in distinct[seen_order])
    return (kinds, insts, times, lens, inputs, keys, local, buckets), values
