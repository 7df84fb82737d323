"""The replay loop: records in time order -> one row per read, compiled (spec §2-§6).

Records are flat arrays (:class:`~litehit_core.policy_replay.replay.ReplayRecords`):
``kinds`` (:data:`GET`, :data:`WRITE`, :data:`REQUEST`), ``insts``, ``times`` (ns),
``key_off`` (record r's keys are ``keys[key_off[r]:key_off[r + 1]]``), ``local`` (per key,
1 = the block mask marks it local) and ``buckets`` (per record, the TTL of its write as an
index into ``ttl_values``; -1 = never expires). A request's write is pending until the
first record at or after its due time ``t + delay`` (or the end): pending writes are
exactly the requests between the pointer ``wp`` and the current record whose due time has
not come, applied in order (a constant delay keeps them in time order), so no queue is
stored; without a delay a request's write is applied right after its read (nothing else
is due in between), starting from the nodes the read found. Before a record at ``T`` every
pending write due at or before ``T`` is applied; a
TTL instance expires its blocks before each of its reads and writes; a write is followed by
its group's capacity eviction. Each read fills one row of ``rows`` (:data:`ROW_FIELDS`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay.blocks import read, write
from litehit_core.policy_replay.quota import evict, evict_tiers
from litehit_core.policy_replay.state import (
    CACHED_ALL,
    NOW,
    PENDING,
    STRIDE,
    TIERS,
    USERS,
    ReplayArrays,
    as_struct,
    room_needed,
)
from litehit_core.policy_replay.tiers import expire_tiers, read_tiered, write_tiered

__all__ = ["GET", "REQUEST", "ROW_FIELDS", "TICK", "WRITE", "flush", "replay_chunk"]

GET, WRITE, REQUEST, TICK = 0, 1, 2, 3
"""Record kinds in ``kinds``. A :data:`TICK` stands for another replay's read (a group
replayed apart, :mod:`litehit_service.optimizer.optimize.parallel`): pending writes due by
its time are applied and it gets a row (no hits) with the cached blocks at that moment."""
ROW_FIELDS = ("record", "local_hits", "remote_hits", "cached", "cached_all", "acc_write")
"""Columns of ``rows`` (int64, one row per read): the record's index, its local and remote
hit blocks, the instance's (every tier's) and every instance's cached blocks right after
the read, and the keys the instance had written so far. A tiered replay adds, per tier,
the hits it served, then per tier the instance's cached blocks in it."""


@njit(cache=True, nogil=True)
def _apply_write(
    a: ReplayArrays,
    inst: np.int64,
    keys: np.ndarray,
    lo: np.int64,
    hi: np.int64,
    now: np.int64,
    bucket: np.int64,
    known: np.int64,
) -> None:
    a.scalars[NOW] = now
    expire_tiers(a, inst, now)  # every tier (one untiered)
    if a.tiering[inst, TIERS] > 1:
        write_tiered(a, inst, keys, lo, hi, now, bucket)
        evict_tiers(a, inst)
    else:
        write(a, inst, keys, lo, hi, now, bucket, known)
        evict(a, inst)
    cached = _cached(a, inst)
    if cached > a.peak[inst]:
        a.peak[inst] = cached


@njit(cache=True, nogil=True)
def _cached(a: ReplayArrays, inst: np.int64) -> np.int64:
    """Blocks configured instance ``inst`` holds, summed over its tiers."""
    users = a.scalars[USERS]
    total = np.int64(0)
    for tier in range(a.tiering[inst, TIERS]):
        total += a.cached[inst + tier * users]
    return total


@njit(cache=True, nogil=True)
def _read(
    a: ReplayArrays,
    inst: np.int64,
    keys: np.ndarray,
    local: np.ndarray,
    lo: np.int64,
    hi: np.int64,
    now: np.int64,
) -> tuple[np.int64, np.int64, np.int64]:
    """A read by any instance (tiered or not): (local hits, remote hits, known nodes in
    ``a.path`` -- 0 when tiered: a promotion may evict)."""
    a.scalars[NOW] = now
    expire_tiers(a, inst, now)  # every tier (one untiered)
    if a.tiering[inst, TIERS] > 1:
        local_hits, remote_hits, promoted = read_tiered(a, inst, keys, local, lo, hi, now)
        if promoted:
            evict_tiers(a, inst)
        return local_hits, remote_hits, np.int64(0)
    return read(a, inst, keys, local, lo, hi, now)


@njit(cache=True, nogil=True)
def _fill_row(
    a: ReplayArrays, rows: np.ndarray, row: np.int64, r: np.int64, inst: np.int64,
    local_hits: np.int64, remote_hits: np.int64,
) -> None:  # fmt: skip
    rows[row, 0] = r
    rows[row, 1] = local_hits
    rows[row, 2] = remote_hits
    rows[row, 3] = _cached(a, inst) if inst >= 0 else 0
    rows[row, 4] = a.scalars[CACHED_ALL]
    rows[row, 5] = a.acc_write[inst] if inst >= 0 else 0
    if rows.shape[1] > 6:  # a tiered replay: hits and cached blocks per tier
        stride = a.scalars[STRIDE]
        users = a.scalars[USERS]
        tiers = a.tiering[inst, TIERS] if inst >= 0 else 0
        for tier in range(stride):
            hits = np.int64(0)
            held = np.int64(0)
            if tier < tiers:
                hits = a.tier_hits[tier] if tiers > 1 else local_hits + remote_hits
                held = a.cached[inst + tier * users]
            rows[row, 6 + tier] = hits
            rows[row, 6 + stride + tier] = held


@njit(cache=True, nogil=True)
def _pending(
    a: ReplayArrays,
    kinds: np.ndarray,
    insts: np.ndarray,
    times: np.ndarray,
    key_off: np.ndarray,
    keys: np.ndarray,
    buckets: np.ndarray,
    delay: np.int64,
    wp: np.int64,
    upto: np.int64,
    until: np.int64,
) -> np.int64:
    """Apply the pending writes of requests before record ``upto`` due at or before
    ``until``; the new ``wp``."""
    while wp < upto:
        if kinds[wp] != REQUEST:
            wp += 1
            continue
        due = times[wp] + delay
        if due > until:
            break
        _apply_write(
            a,
            np.int64(insts[wp]),
            keys,
            key_off[wp],
            key_off[wp + 1],
            due,
            np.int64(buckets[wp]),
            np.int64(0),
        )
        a.scalars[PENDING] -= key_off[wp + 1] - key_off[wp]
        wp += 1
    return wp


@njit(cache=True, nogil=True)
def replay_chunk(
    arrays: ReplayArrays,
    kinds: np.ndarray,
    insts: np.ndarray,
    times: np.ndarray,
    key_off: np.ndarray,
    keys: np.ndarray,
    local: np.ndarray,
    buckets: np.ndarray,
    delay: np.int64,
    start: np.int64,
    stop: np.int64,
    wp: np.int64,
    rows: np.ndarray,
    row: np.int64,
) -> tuple[np.int64, np.int64, np.int64, np.int64]:
    """Replay records ``start..stop-1`` (``wp``: the first request whose write may still be
    pending; ``row``: the next row of ``rows`` to fill). Returns ``(r, wp, row, need)``: ``r``
    the first record not replayed -- ``stop``, or earlier when the arrays lack room for the
    ``need`` nodes record ``r`` may add (its own keys when it writes now, and every pending
    write: ``a.scalars[PENDING]``); the caller grows them
    (:func:`~litehit_core.policy_replay.state.reserve`) and calls again from ``r``.
    O(keys) plus the policies' eviction costs."""
    a = as_struct(arrays)
    for r in range(start, stop):
        extra = a.scalars[PENDING]
        if kinds[r] == WRITE or (kinds[r] == REQUEST and delay == 0) or a.scalars[STRIDE] > 1:
            extra += key_off[r + 1] - key_off[r]  # a tiered read may promote its keys
        if room_needed(a, extra):
            return np.int64(r), wp, row, extra
        now = times[r]
        wp = _pending(a, kinds, insts, times, key_off, keys, buckets, delay, wp, r, now)
        inst = np.int64(insts[r])
        lo = key_off[r]
        hi = key_off[r + 1]
        if kinds[r] == WRITE:
            _apply_write(a, inst, keys, lo, hi, now, np.int64(buckets[r]), np.int64(0))
            continue
        if kinds[r] == TICK:
            _fill_row(a, rows, row, np.int64(r), np.int64(-1), np.int64(0), np.int64(0))
            row += 1
            continue
        local_hits, remote_hits, known = _read(a, inst, keys, local, lo, hi, now)
        fused = kinds[r] == REQUEST and delay == 0
        if kinds[r] == REQUEST and not fused:
            a.scalars[PENDING] += hi - lo
        _fill_row(a, rows, row, np.int64(r), inst, local_hits, remote_hits)
        row += 1
        if fused:  # due now, and nothing else is: the same as applying it before r + 1
            _apply_write(a, inst, keys, lo, hi, now, np.int64(buckets[r]), known)
            wp = np.int64(r + 1)
    return np.int64(stop), wp, row, np.int64(0)


@njit(cache=True, nogil=True)
def flush(
    arrays: ReplayArrays,
    kinds: np.ndarray,
    insts: np.ndarray,
    times: np.ndarray,
    key_off: np.ndarray,
    keys: np.ndarray,
    buckets: np.ndarray,
    delay: np.int64,
    wp: np.int64,
    stop: np.int64,
) -> np.int64:
    """Apply every write still pending among records before ``stop`` (the end of the
    trace: they produce no rows). Returns the new ``wp``."""
    return _pending(
        as_struct(arrays),
        kinds,
        insts,
        times,
        key_off,
        keys,
        buckets,
        delay,
        wp,
        stop,
        np.int64(np.iinfo(np.int64).max),
    )
