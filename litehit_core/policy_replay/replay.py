"""Run one policy replay: records in, one row per read and per-instance totals out.

:func:`replay` drives the compiled loop (:mod:`~litehit_core.policy_replay.loop`) over the
records in chunks; between chunks it grows the arrays for what the next chunk can add
(:func:`~litehit_core.policy_replay.state.reserve`) and reports progress. Cost: O(keys)
plus the policies' eviction costs; memory O(cached blocks + their uncached ancestors +
reads), the records themselves aside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from litehit_core.policy_replay.check import check_arrays
from litehit_core.policy_replay.index import rebuild_table
from litehit_core.policy_replay.loop import GET, ROW_FIELDS, flush, replay_chunk
from litehit_core.policy_replay.state import (
    InstanceSetup,
    ReplayArrays,
    allocate,
    memory_bytes,
    reserve,
)

__all__ = ["ReplayRecords", "ReplayResult", "ReplaySetup", "replay"]

CHUNK_KEYS = 1 << 20
"""Most keys written per compiled chunk (bounds what a chunk reserves)."""


class ReplayRecords(NamedTuple):
    """A trace as arrays, sorted by time (see :mod:`~litehit_core.policy_replay.loop`):
    ``kinds`` int8, ``insts`` int32, ``times`` int64 ns, ``key_off`` int64 (one more than
    records), ``keys`` int64, ``local`` uint8 (one per key), ``buckets`` int32."""

    kinds: np.ndarray
    insts: np.ndarray
    times: np.ndarray
    key_off: np.ndarray
    keys: np.ndarray
    local: np.ndarray
    buckets: np.ndarray


class ReplaySetup(NamedTuple):
    """What is replayed: the ``instances`` in configuration order, each group's quota in
    bytes (``quotas``, -1 = infinite) and ``members`` (instance indices in configuration
    order), the distinct TTLs in ns that ``buckets`` index (``ttl_values``), the eviction
    mode (1-3), the batch size per instance and the write delay of requests in ns."""

    instances: tuple[InstanceSetup, ...]
    quotas: tuple[int, ...]
    members: tuple[tuple[int, ...], ...]
    ttl_values: tuple[int, ...]
    eviction_mode: int
    batch: int
    delay_ns: int


class ReplayResult(NamedTuple):
    """``rows``: int64 (reads x :data:`~litehit_core.policy_replay.loop.ROW_FIELDS`), in
    replay order; per instance at the end: ``cached``, ``peak`` (most cached after a
    write), ``evicted``, ``expired``, ``written`` (keys); ``memory_bytes``: the arrays'
    bytes at the end."""

    rows: np.ndarray
    cached: np.ndarray
    peak: np.ndarray
    evicted: np.ndarray
    expired: np.ndarray
    written: np.ndarray
    memory_bytes: int


def replay(
    setup: ReplaySetup,
    records: ReplayRecords,
    *,
    progress: Callable[[int], object] | None = None,
    check: bool = False,
) -> ReplayResult:
    """Replay ``records`` under ``setup``. ``progress(n)`` hears every n records done;
    ``check`` verifies every invariant after each chunk (tests). O(keys) + evictions."""
    arrays = allocate(
        setup.instances,
        setup.quotas,
        setup.members,
        setup.ttl_values,
        eviction_mode=setup.eviction_mode,
        batch=setup.batch,
        with_ttl=any(s.kind == _ttl_kind() for s in setup.instances),
    )
    n_records = len(records.kinds)
    lens = np.diff(records.key_off)
    writes = np.where(records.kinds != GET, lens, 0)
    n_reads = int(np.count_nonzero(records.kinds != 1))
    rows = np.zeros((n_reads, len(ROW_FIELDS)), dtype=np.int64)
    dense = [s.dense for s in setup.instances]
    delay = np.int64(setup.delay_ns)
    wp = np.int64(0)
    row = np.int64(0)
    for start, stop in _chunks(writes):
        arrays = _reserve(arrays, records, writes, dense, int(wp), stop)
        wp, row = replay_chunk(
            arrays,
            records.kinds,
            records.insts,
            records.times,
            records.key_off,
            records.keys,
            records.local,
            records.buckets,
            delay,
            np.int64(start),
            np.int64(stop),
            wp,
            rows,
            row,
        )
        if check:
            check_arrays(arrays)
        if progress is not None:
            progress(stop - start)
    arrays = _reserve(arrays, records, writes, dense, int(wp), n_records)
    flush(
        arrays,
        records.kinds,
        records.insts,
        records.times,
        records.key_off,
        records.keys,
        records.buckets,
        delay,
        wp,
        np.int64(n_records),
    )
    if check:
        check_arrays(arrays)
    return ReplayResult(
        rows=rows[:row],
        cached=arrays.cached.copy(),
        peak=arrays.peak.copy(),
        evicted=arrays.evicted.copy(),
        expired=arrays.expired.copy(),
        written=arrays.acc_write.copy(),
        memory_bytes=memory_bytes(arrays),
    )


def _ttl_kind() -> int:
    from litehit_core.policy_replay import ttl

    return ttl.KIND


def _chunks(writes: np.ndarray) -> list[tuple[int, int]]:
    """Record ranges writing at most :data:`CHUNK_KEYS` keys each (at least one record)."""
    n = len(writes)
    if n == 0:
        return []
    total = np.cumsum(writes)
    bounds = [0]
    while bounds[-1] < n:
        start = bounds[-1]
        base = int(total[start - 1]) if start else 0
        stop = int(np.searchsorted(total, base + CHUNK_KEYS, side="right"))
        bounds.append(max(stop, start + 1))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _reserve(
    arrays: ReplayArrays,
    records: ReplayRecords,
    writes: np.ndarray,
    dense: Sequence[bool],
    wp: int,
    stop: int,
) -> ReplayArrays:
    """Room for every write applied while replaying up to ``stop`` (pending ones from
    ``wp`` on included)."""
    new_nodes = int(writes[wp:stop].sum())
    needs = [-1] * len(dense)
    if any(dense):
        per = np.bincount(records.insts[wp:stop], weights=writes[wp:stop], minlength=len(dense))
        needs = [int(per[i]) if d else -1 for i, d in enumerate(dense)]
    return reserve(arrays, new_nodes, needs, rebuild_table)
