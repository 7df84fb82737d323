"""Run one policy replay: records in, one row per read and per-instance totals out.

:func:`replay` drives the compiled loop (:mod:`~litehit_core.policy_replay.loop`) over the
records in chunks; between chunks it grows the arrays for what the next chunk can add
(:func:`~litehit_core.policy_replay.state.reserve`) and reports progress. Cost: O(keys)
plus the policies' eviction costs; memory O(cached blocks + their uncached ancestors +
reads), the records themselves aside.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from litehit_core.policy_replay.check import check_arrays
from litehit_core.policy_replay.index import rebuild_table
from litehit_core.policy_replay.loop import ROW_FIELDS, WRITE, flush, replay_chunk
from litehit_core.policy_replay.setup import InstanceSetup, TierSetup
from litehit_core.policy_replay.state import (
    ALIVE,
    LIFE_FIELDS,
    LIVES,
    MIN_NODES,
    NONE,
    PENDING,
    STRIDE,
    USERS,
    ReplayArrays,
    ReplayStalled,
    allocate,
    grow_ttl,
    memory_bytes,
    reserve,
)

__all__ = [
    "Replayer",
    "ReplayRecords",
    "ReplayResult",
    "ReplaySetup",
    "replay",
    "warm_up",
]

CHUNK_RECORDS = 1 << 14
"""Records per compiled call between progress reports."""


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
    mode (1-3), the batch size per instance and the write delay of requests in ns;
    ``tiers[g]``: group g's tiers (None or absent: untiered, its quota is ``quotas[g]``);
    ``analyse``: keep every node and record lives and read hits per key (analyses)."""

    instances: tuple[InstanceSetup, ...]
    quotas: tuple[int, ...]
    members: tuple[tuple[int, ...], ...]
    ttl_values: tuple[int, ...]
    eviction_mode: int
    batch: int
    delay_ns: int
    tiers: tuple[TierSetup | None, ...] = ()
    analyse: bool = False


class ReplayResult(NamedTuple):
    """``rows``: int64 (reads x :data:`~litehit_core.policy_replay.loop.ROW_FIELDS`, plus
    two columns per tier when tiered), in replay order; per instance at the end, summed
    over its tiers: ``cached``, ``peak`` (most cached after a write), ``evicted``,
    ``expired``, ``written`` (keys); ``tier_cached``/``tier_evicted``: (instances x
    tiers); ``memory_bytes``: the arrays' bytes at the end; ``arrays``: the final arrays
    (analyses read the nodes, ``lives`` and ``key_node``)."""

    rows: np.ndarray
    cached: np.ndarray
    peak: np.ndarray
    evicted: np.ndarray
    expired: np.ndarray
    written: np.ndarray
    memory_bytes: int
    tier_cached: np.ndarray
    tier_evicted: np.ndarray
    arrays: ReplayArrays


def replay(
    setup: ReplaySetup,
    records: ReplayRecords,
    *,
    progress: Callable[[int], object] | None = None,
    check: bool = False,
) -> ReplayResult:
    """Replay ``records`` under ``setup``. ``progress(n)`` hears every n records done;
    ``check`` verifies every invariant after each chunk (tests). O(keys) + evictions."""
    replayer = Replayer(
        setup,
        check=check,
        analyse_keys=len(records.keys) if setup.analyse else -1,
    )
    rows = replayer.feed(records, progress=progress)
    return replayer.finish(rows)


class Replayer:
    """A replay fed in batches of records, in time order (what ``litehit optimize``
    streams): :meth:`feed` replays a batch and returns its reads' rows, :meth:`finish`
    applies the writes still pending and gives the totals. Between batches it keeps the
    cache's arrays and the records from the first request whose write is still pending
    (the records within ``setup.delay_ns`` of the last one, at least the last one): memory
    follows the cache, not the trace. ``setup.ttl_values`` may grow between batches
    (``feed(..., ttl_values=)``: new TTLs are appended, the known keep their bucket).
    ``analyse_keys`` >= 0: an analysis replay (nodes kept, lives recorded): after each
    :meth:`feed`, :attr:`key_hits` holds per key of the records fed the base slot a read
    hit (-1 none), and :meth:`drain_lives` takes the lives that ended out of ``lives``, so
    an analysis streams too. Replaying a trace in any split into batches gives exactly
    the rows and totals of one :func:`replay`."""

    def __init__(self, setup: ReplaySetup, *, check: bool = False, analyse_keys: int = -1) -> None:
        self.setup = setup
        self.check = check
        self.arrays = allocate(
            setup.instances,
            setup.quotas,
            setup.members,
            setup.ttl_values,
            eviction_mode=setup.eviction_mode,
            batch=setup.batch,
            with_ttl=any(s.kind == _ttl_kind() for s in setup.instances),
            tiers=setup.tiers,
            analyse_keys=analyse_keys,
        )
        stride = int(self.arrays.scalars[STRIDE])
        tiered = any(t is not None for t in setup.tiers)  # one storage is a tier too
        self.width = len(ROW_FIELDS) + (2 * stride if tiered else 0)
        self.delay = np.int64(setup.delay_ns)
        self.carry = _slice(_EMPTY, 0, 0)
        self.ttl_values = tuple(setup.ttl_values)
        self.analyse = analyse_keys >= 0
        self.key_hits = np.zeros(0, dtype=np.int32)
        """Analyses: per key of the records of the last :meth:`feed` (``key_hits[i]`` is
        ``records.keys[records.key_off[0] + i]``'s), the base slot a read hit (-1: none,
        or not a read)."""

    def feed(
        self,
        records: ReplayRecords,
        *,
        ttl_values: tuple[int, ...] | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> np.ndarray:
        """Replay ``records`` (after every record fed before, none earlier in time); the
        rows of their reads (int64, one per read: :class:`ReplayResult`'s ``rows``, whose
        record column indexes ``records``). ``ttl_values``: the TTLs the buckets index now
        (a prefix of them was known before). ``progress(n)`` hears records done.
        O(keys) + evictions."""
        if ttl_values is not None and ttl_values != self.ttl_values:
            self.arrays = grow_ttl(self.arrays, ttl_values)
            self.ttl_values = tuple(ttl_values)
        longest = int(np.diff(records.key_off).max()) if len(records.kinds) else 0
        if longest > len(self.arrays.path):
            self.arrays = self.arrays._replace(path=np.zeros(longest, dtype=np.int32))
        carried = len(self.carry.kinds)
        both = _join(self.carry, records) if carried else records
        n_records = len(both.kinds)
        if self.analyse:  # one hit slot per key of the records replayed now
            self.arrays = self.arrays._replace(
                key_node=np.full(len(both.keys), NONE, dtype=np.int32)
            )
        n_reads = int(np.count_nonzero(records.kinds != WRITE))
        rows = np.zeros((n_reads, self.width), dtype=np.int64)
        arrays, wp, row = self.arrays, np.int64(0), np.int64(0)
        for start, stop in _chunks(carried, n_records):
            pos = np.int64(start)
            stalled = -1
            while pos < stop:
                with _named(arrays, start - carried, stop - carried):
                    pos, wp, row, need = replay_chunk(
                        arrays, both.kinds, both.insts, both.times, both.key_off, both.keys,
                        both.local, both.buckets, self.delay, pos, np.int64(stop), wp, rows,
                        row,
                    )  # fmt: skip
                if pos < stop:
                    if pos == stalled:  # reserve() must make room for what the loop asked
                        raise RuntimeError(f"no room made for {int(need)} nodes at record {pos}")
                    stalled = pos
                    arrays = reserve(arrays, int(need), rebuild_table)
            if self.check:
                check_arrays(arrays)
            if progress is not None:
                progress(stop - start)
        self.arrays = arrays
        self.carry = _slice(both, int(wp), n_records)
        if self.analyse:
            self.key_hits = arrays.key_node[int(both.key_off[carried]) :]
        rows[:, 0] -= carried
        return rows

    def drain_lives(self, before_ns: int | None = None) -> np.ndarray:
        """Analyses: the rows of ``lives`` (:data:`~.state.LIFE_FIELDS`) that ended since
        the last drain (``before_ns``: only those that ended before it), in birth order;
        the others stay (moved to the front, their blocks' ``life`` renumbered). The
        replay's time never goes back, so lives drained before the current time
        (``scalars[NOW]``) are every life that will ever end before it. O(lives held)."""
        a = self.arrays
        n = int(a.scalars[LIVES])
        rows = a.lives[:n]
        ended = rows[:, _CAUSE] != ALIVE
        if before_ns is not None:
            ended &= rows[:, _DEATH] < before_ns
        out = rows[ended]
        kept = rows[~ended]
        alive = kept[:, _CAUSE] == ALIVE  # only a cached block points at its life
        if len(a.lives) > 4 * max(len(kept), MIN_NODES):  # give back what a peak took
            lives = np.empty((2 * max(len(kept), MIN_NODES), len(LIFE_FIELDS)), dtype=np.int64)
            self.arrays = a = a._replace(lives=lives)
        a.lives[: len(kept)] = kept
        a.life[kept[alive, _NODE]] = np.flatnonzero(alive)
        a.scalars[LIVES] = len(kept)
        return out

    def finish(self, rows: np.ndarray | None = None) -> ReplayResult:
        """Apply every write still pending (they produce no rows) and give the totals;
        ``rows``: the result's rows (default none). The replayer is spent after it."""
        arrays = reserve(self.arrays, int(self.arrays.scalars[PENDING]), rebuild_table)
        c = self.carry
        with _named(arrays):
            flush(arrays, c.kinds, c.insts, c.times, c.key_off, c.keys, c.buckets, self.delay,
                  np.int64(0), np.int64(len(c.kinds)))  # fmt: skip
        if self.check:
            check_arrays(arrays)
        self.arrays = arrays
        stride = int(arrays.scalars[STRIDE])
        users = int(arrays.scalars[USERS])

        def per_tier(values: np.ndarray) -> np.ndarray:
            return values.reshape(stride, users).T.copy()

        return ReplayResult(
            rows=rows if rows is not None else np.zeros((0, self.width), dtype=np.int64),
            cached=per_tier(arrays.cached).sum(axis=1),
            peak=arrays.peak[:users].copy(),
            evicted=per_tier(arrays.evicted).sum(axis=1),
            expired=per_tier(arrays.expired).sum(axis=1),
            written=arrays.acc_write[:users].copy(),
            memory_bytes=memory_bytes(arrays),
            tier_cached=per_tier(arrays.cached),
            tier_evicted=per_tier(arrays.evicted),
            arrays=arrays._replace(lives=arrays.lives[: int(arrays.scalars[LIVES])]),
        )


@contextmanager
def _named(arrays: ReplayArrays, lo: int = -1, hi: int = -1) -> Iterator[None]:
    """Re-raise a kernel's :class:`~.state.ReplayStalled` ``(what, internal instance,
    ns)`` as one naming the configured instance, its tier, the time and the records
    ``lo..hi-1`` of the batch being replayed (-1: the writes pending at the end)."""
    try:
        yield
    except ReplayStalled as exc:
        what, inst, now = (exc.args + (NONE, NONE, NONE))[:3]
        users = int(arrays.scalars[USERS])
        who = (f"instance {int(inst) % users} (configuration order), tier {int(inst) // users}"
               if int(inst) >= 0 else "an unknown instance")  # fmt: skip
        records = f"records {lo}..{hi - 1} of the batch" if lo >= 0 else "the pending writes"
        raise ReplayStalled(
            f"internal error: the policy replay made no progress ({what}) at {who}, time "
            f"{int(now)} ns, {records}; please report it with the configuration and trace"
        ) from None


_CAUSE = LIFE_FIELDS.index("cause")
_DEATH = LIFE_FIELDS.index("death")
_NODE = LIFE_FIELDS.index("node")

_EMPTY = ReplayRecords(
    kinds=np.zeros(0, dtype=np.int8),
    insts=np.zeros(0, dtype=np.int32),
    times=np.zeros(0, dtype=np.int64),
    key_off=np.zeros(1, dtype=np.int64),
    keys=np.zeros(0, dtype=np.int64),
    local=np.zeros(0, dtype=np.uint8),
    buckets=np.zeros(0, dtype=np.int32),
)


def _slice(records: ReplayRecords, lo: int, hi: int) -> ReplayRecords:
    """Records ``lo..hi-1`` as their own (copied) arrays."""
    k0, k1 = int(records.key_off[lo]), int(records.key_off[hi])
    return ReplayRecords(
        kinds=records.kinds[lo:hi].copy(),
        insts=records.insts[lo:hi].copy(),
        times=records.times[lo:hi].copy(),
        key_off=records.key_off[lo : hi + 1] - k0,
        keys=records.keys[k0:k1].copy(),
        local=records.local[k0:k1].copy(),
        buckets=records.buckets[lo:hi].copy(),
    )


def _join(first: ReplayRecords, second: ReplayRecords) -> ReplayRecords:
    """``first`` then ``second`` as one set of records."""
    k0 = int(second.key_off[0])
    return ReplayRecords(
        kinds=np.concatenate((first.kinds, second.kinds)),
        insts=np.concatenate((first.insts, second.insts)),
        times=np.concatenate((first.times, second.times)),
        key_off=np.concatenate((first.key_off[:-1], second.key_off - k0 + first.key_off[-1])),
        keys=np.concatenate((first.keys, second.keys[k0 : int(second.key_off[-1])])),
        local=np.concatenate((first.local, second.local[k0 : int(second.key_off[-1])])),
        buckets=np.concatenate((first.buckets, second.buckets)),
    )


def _ttl_kind() -> int:
    from litehit_core.policy_replay import ttl

    return ttl.KIND


def _chunks(first: int, n_records: int) -> list[tuple[int, int]]:
    """Record ranges of :data:`CHUNK_RECORDS` from ``first`` (progress is reported between
    them)."""
    starts = range(first, n_records, CHUNK_RECORDS)
    return [(start, min(start + CHUNK_RECORDS, n_records)) for start in starts]


def warm_up() -> float:
    """Compile (or load from numba's disk cache) every kernel of the replay by replaying a
    two-record trace; seconds it took. The Docker image calls it at build time; the first
    ``litehit optimize`` after an install otherwise spends ~10 s compiling."""
    import time

    from litehit_core.policy_replay.loop import REQUEST

    start = time.perf_counter()
    instances = tuple(
        InstanceSetup(kind=kind, group=0, bytes_per_block=1, sample=2, fallback=True,
                      refresh=True, dense=kind == 1)
        for kind in range(4)
    )  # fmt: skip
    records = ReplayRecords(
        kinds=np.full(2, REQUEST, dtype=np.int8),
        insts=np.array([0, 3], dtype=np.int32),
        times=np.array([1, 2], dtype=np.int64),
        key_off=np.array([0, 2, 4], dtype=np.int64),
        keys=np.array([1, 2, 1, 3], dtype=np.int64),
        local=np.zeros(4, dtype=np.uint8),
        buckets=np.array([-1, 0], dtype=np.int32),
    )
    replay(ReplaySetup(instances, (2,), ((0, 1, 2, 3),), (5,), 3, 1, 0), records)
    return time.perf_counter() - start
