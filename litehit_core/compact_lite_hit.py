"""The compiled, compact twin of :class:`~litehit_core.lite_hit.LiteHit` (model ``"lru"``).

:class:`CompactLiteHit` answers exactly what :class:`~litehit_core.lite_hit.LiteHit` answers
(the same :class:`~litehit_core.model.RequestFact` for every request, the same
:class:`~litehit_core.state.EngineState`, so snapshots move between the two) with the same
method (LRU stack inclusion on ever-increasing *positions*, depths read on the snapshot,
requests submitted tail first), but in flat numpy arrays driven by numba kernels
(``nogil``, ``cache=True``: no compiler at install time). It exists for scale: tens of
millions of tracked blocks at a cost per request that hardly grows and about 30 bytes per
tracked block, where the interpreter's dict of int objects costs ~95 bytes and loses cache
locality as it grows.

Layout (U = position space, L = tracked blocks, S = table slots):

- ``kbp`` int64[U]: the key touched at each position (8 bytes a position). A block's live
  marker is its latest position; older positions are *dead*.
- ``dead`` uint64[U / 64]: one bit per dead position; ``fen``: a Fenwick tree of the dead
  counts per 64-position word, so ``depth(p) = (t - p) - dead_in[p, t)`` is one
  O(log(U / 64)) prefix sum plus one popcount (depth 1 = most recent).
- ``tv`` uint32[S]: an open-addressing table (linear probing, power-of-two size, load
  0.35-0.7) holding ``position + 1`` of each tracked key (0 = empty). The key itself is not
  stored: a probe compares ``kbp[tv[i] - 1]`` with the key, so a slot costs 4 bytes.

A lower boundary (``pexp``) expires blocks (TTL: access times grow with positions, kept per
request as epochs) and drops the least recent beyond ``max_tracked_blocks``; keys below it
stay in the table until the next rebuild and read as absent. When the position space is
used up the live markers are renumbered 0..L-1 in place (compaction, O(U)) and the table
entries are rewritten to the new positions in one sequential pass (or, when keys below the
boundary linger in it, the table is rebuilt from the live positions, its old array freed
first), then the space is resized to twice what is needed (``ndarray.resize``: realloc, no
second copy). So U <= 2(L + n) + slack and peak memory is ~16 (kbp) + 6-12 (table) + 0.2
(bits, tree) bytes per tracked block.

Costs per request of n blocks: O(n) probes, O(runs * log U) for the depths (a rank only at
a break of consecutive positions, as in LiteHit), O(n log U) Fenwick updates for the blocks
it re-touches; amortised O(1) per position for compaction and table rebuilds. One call from
the interpreter per request (:meth:`CompactLiteHit.process_request`) or one per batch of
requests (:meth:`CompactLiteHit.process_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from litehit_core import compact_kernels as ck
from litehit_core.errors import InvalidRequestError
from litehit_core.lite_hit_state import MODEL
from litehit_core.model import HitCurveSegment, RequestFact, check_lru_parameters
from litehit_core.state import EngineState, validated_arrays

__all__ = ["BatchFacts", "CompactLiteHit", "warm_up"]

# ------------------------------------------------------------------------------ Python


class BatchFacts(NamedTuple):
    """Facts of a batch of requests as arrays: request r has ``totals[r]`` distinct blocks
    and the segments ``(seg_start[i], seg_len[i])`` for ``i`` in
    ``seg_offsets[r]:seg_offsets[r + 1]`` (the :class:`HitCurveSegment` of its fact);
    ``uniques[r]`` blocks are tracked after it. Entries of ``seg_start``/``seg_len`` past
    ``seg_offsets[-1]`` are unused."""

    totals: np.ndarray
    uniques: np.ndarray
    seg_offsets: np.ndarray
    seg_start: np.ndarray
    seg_len: np.ndarray

    def facts(self) -> list[RequestFact]:
        """The :class:`RequestFact` of every request. O(requests + segments)."""
        starts = self.seg_start.tolist()
        lens = self.seg_len.tolist()
        off = self.seg_offsets.tolist()
        return [
            RequestFact(_curve(starts[a:b], lens[a:b]), n)
            for n, a, b in zip(self.totals.tolist(), off[:-1], off[1:], strict=True)
        ]


def _curve(starts: list[int], lens: list[int]) -> tuple[HitCurveSegment, ...]:
    """A fact's hit curve from its segments' starts and lengths. O(segments)."""
    new = tuple.__new__
    return tuple([new(HitCurveSegment, s) for s in zip(starts, lens, strict=True)])


RESERVE_MAX = 1 << 22
"""A batch sizes the position space and the table for up to this many of its blocks at
once, ahead of its loop (instead of growing by doublings inside it)."""


def _written_zeros(n: int, dtype: type) -> np.ndarray:
    """A zeroed array whose pages are written now. ``np.zeros`` of a large array leaves
    its pages mapped to the kernel's shared zero page until first written; the kernels
    read the table before writing it, so each page's first write is then a copy-on-write
    fault, which flushes that page from the TLB of every core running the process: on a
    server replaying several instances at once, one interrupt per page to every other
    worker. Writing the zeros here (compiled, without the GIL) takes ordinary faults
    instead. O(n)."""
    out = np.empty(n, dtype)
    ck.zero(out)
    return out


class CompactLiteHit:
    """Exact prefix-hit engine for an LRU of every capacity, in compact compiled arrays.

    The same parameters, facts, states, counters and errors as
    :class:`~litehit_core.lite_hit.LiteHit` (``ttl_ns`` block lifetime in ns, 0 = none;
    ``max_tracked_blocks`` most tracked blocks, 0 = unlimited); see the module docstring
    for the layout and costs. Up to 2**31 tracked blocks.
    """

    __slots__ = ("_meta", "_tv", "_kbp", "_dead", "_fen", "_ep_pos", "_ep_time", "_olds",
                 "_slots", "_table", "_seg_start", "_seg_len")  # fmt: skip

    def __init__(self, ttl_ns: int = 0, max_tracked_blocks: int = 0) -> None:
        check_lru_parameters(ttl_ns, max_tracked_blocks)
        self._meta = np.zeros(ck.META, np.int64)
        self._meta[ck.TTL] = ttl_ns
        self._meta[ck.LIMIT] = max_tracked_blocks
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget every block and counter (a cold cache). O(1) plus the fresh arrays."""
        meta = self._meta
        ttl, limit = int(meta[ck.TTL]), int(meta[ck.LIMIT])
        meta[:] = 0
        meta[ck.TTL] = ttl
        meta[ck.LIMIT] = limit
        meta[ck.NOW] = ck.INT64_MIN
        self._kbp = np.empty(ck.SLACK, np.int64)
        self._positions(ck.SLACK)
        self._tv = _written_zeros(ck.MIN_TABLE, np.uint32)
        self._ep_pos = np.zeros(16 if ttl else 1, np.int64)
        self._ep_time = np.zeros(16 if ttl else 1, np.int64)
        self._scratch(64)

    def _positions(self, size: int) -> None:
        """Resize the position space to ``size`` (a multiple of 64) with cleared dead bits."""
        if self._kbp.shape[0] != size:
            self._kbp.resize(size, refcheck=False)  # realloc: no second copy held
        self._meta[ck.CAP] = size
        self._dead = _written_zeros(size >> 6, np.uint64)
        self._fen = _written_zeros(size >> 6, np.int64)

    def _scratch(self, n: int) -> None:
        self._olds = np.empty(n, np.int64)
        self._slots = np.empty(n, np.int64)
        size = 4
        while size < 2 * n:
            size *= 2
        self._table = np.empty(size, np.int64)  # dedupe's set: twice n, a power of two
        self._seg_start = np.empty(n, np.int64)
        self._seg_len = np.empty(n, np.int64)

    @property
    def expired_blocks(self) -> int:
        """Cumulative count of blocks whose TTL lapsed while they were tracked."""
        return int(self._meta[ck.EXP])

    @property
    def dropped_blocks(self) -> int:
        """Cumulative count of blocks dropped (least recent first) by ``max_tracked_blocks``."""
        return int(self._meta[ck.DROP])

    def current_unique_blocks(self) -> int:
        """Distinct blocks tracked now (TTL-expired and dropped excluded). O(1)."""
        return int(self._meta[ck.LIVE])

    def resident_blocks(self, capacities: Sequence[int]) -> tuple[int, ...]:
        """Blocks resident now in an LRU of each capacity (blocks): ``min(unique, C)``."""
        unique = self.current_unique_blocks()
        return tuple([c if c < unique else unique for c in capacities])

    def tracked_bytes(self, block_bytes: int) -> int:
        """Bytes of every tracked block, blocks of ``block_bytes``. O(1)."""
        return self.current_unique_blocks() * block_bytes

    def memory_usage_bytes(self) -> int:
        """Bytes of every array this engine holds (allocated sizes; the position space's
        pages are only resident once written). O(1)."""
        return sum(getattr(self, name).nbytes for name in self.__slots__)

    # --------------------------------------------------------------- the work
    def process_request(self, block_keys: Sequence[int], now_ns: int = 0) -> RequestFact:
        """Replay one request (keys head -> tail); the same fact as ``LiteHit``'s.

        Cost: one compiled call, O(n) probes plus O(runs log U) ranks (see the module
        docstring); amortised room-making. InvalidRequestError for a key outside int64
        (the engine is unchanged).
        """
        if not isinstance(block_keys, (list, tuple, np.ndarray)):
            block_keys = list(block_keys)
        try:
            keys = np.array(block_keys, np.int64)
        except (OverflowError, TypeError, ValueError):
            raise InvalidRequestError(
                "block_keys must be int64 integers, got one outside [-2**63, 2**63)"
            ) from None
        n = keys.shape[0]
        if keys.ndim != 1 or (n and keys.dtype != np.int64):
            raise InvalidRequestError("block_keys must be a sequence of int64 integers")
        self._room(n)
        nseg = ck.request(self._meta, self._tv, self._kbp, self._dead, self._fen, self._ep_pos,
                        self._ep_time, keys, now_ns, self._olds, self._slots, self._table,
                        self._seg_start, self._seg_len)  # fmt: skip
        if not nseg:
            return RequestFact((), int(self._meta[ck.N]))
        return RequestFact(
            _curve(self._seg_start[:nseg].tolist(), self._seg_len[:nseg].tolist()),
            int(self._meta[ck.N]),
        )

    def process_batch(self, keys: np.ndarray, offsets: np.ndarray, times: np.ndarray) -> BatchFacts:
        """Replay requests in order: request r is ``keys[offsets[r]:offsets[r + 1]]`` at
        ``times[r]`` (int64 arrays). The same facts as one :meth:`process_request` each,
        in one compiled loop (leaving it only to make room). ``keys`` is not changed."""
        keys = np.array(keys, np.int64)  # a copy: requests are deduplicated in place
        offsets = np.asarray(offsets, np.int64)
        times = np.asarray(times, np.int64)
        requests = offsets.shape[0] - 1
        if requests < 0 or times.shape[0] != requests:
            raise InvalidRequestError(
                f"times must hold one timestamp per request: offsets (length "
                f"{offsets.shape[0]}) describe {max(requests, 0)} requests, got "
                f"{times.shape[0]} times"
            )
        if requests and (
            offsets[0] != 0 or offsets[-1] != keys.shape[0] or np.any(np.diff(offsets) < 0)
        ):
            raise InvalidRequestError("offsets must start at 0, not decrease and end at len(keys)")
        totals = np.zeros(requests, np.int64)
        uniques = np.zeros(requests, np.int64)
        seg_offsets = np.zeros(requests + 1, np.int64)
        seg_start = np.empty(keys.shape[0], np.int64)
        seg_len = np.empty(keys.shape[0], np.int64)
        if requests:
            self._reserve(keys)
        r = 0
        while r >= 0 and r < requests:
            self._room(int(offsets[r + 1] - offsets[r]))
            r = ck.batch(self._meta, self._tv, self._kbp, self._dead, self._fen, self._ep_pos,
                       self._ep_time, keys, offsets, times, r, self._olds, self._slots,
                       self._table, totals, uniques, seg_offsets, seg_start, seg_len)  # fmt: skip
        return BatchFacts(totals, uniques, seg_offsets, seg_start, seg_len)

    def _room(self, n: int) -> None:
        """Make room for a request of ``n`` blocks: positions, table entries, an epoch and
        scratch. Amortised O(1) per position (see the module docstring)."""
        meta = self._meta
        if n > self._olds.shape[0]:
            self._scratch(max(n, 2 * self._olds.shape[0]))
        if meta[ck.T] + n > meta[ck.CAP]:
            self._compact(n)
        elif (meta[ck.ENTRIES] + n) * ck.MAX_LOAD_DEN > self._tv.shape[0] * ck.MAX_LOAD_NUM:
            self._rebuild(int(meta[ck.LIVE]) + n)
        nep = int(meta[ck.NEP])
        if nep >= self._ep_pos.shape[0]:
            self._ep_pos = np.concatenate((self._ep_pos, np.zeros(nep, np.int64)))
            self._ep_time = np.concatenate((self._ep_time, np.zeros(nep, np.int64)))

    def _reserve(self, keys: np.ndarray) -> None:
        """Before a batch of ``keys`` (up to :data:`RESERVE_MAX` of them): a table for the
        distinct ones (linear counting) and positions for all of them, up to twice the
        distinct ones, so a batch on an engine growing from empty neither rebuilds its
        table nor (unless keys repeat a lot) compacts inside the loop. What it reserves
        stays within the bounds the engine grows to anyway. O(len(keys)) plus one resize."""
        n = min(keys.shape[0], RESERVE_MAX)
        bits = np.zeros(max(n, 64) // 8 + 8, np.uint64)
        distinct = int(ck.distinct_estimate(keys[:n], bits))
        room = min(n, 2 * distinct)
        meta = self._meta
        entries = int(meta[ck.LIVE]) + distinct
        if meta[ck.T] + room > meta[ck.CAP]:
            # a small engine takes exactly the batch's room; a larger one grows as usual
            spare = 1 if meta[ck.LIVE] < room else 2
            self._compact(room, spare=spare, entries=entries)
        elif (meta[ck.ENTRIES] + distinct) * ck.MAX_LOAD_DEN > self._tv.shape[0] * ck.MAX_LOAD_NUM:
            self._rebuild(entries)

    def _compact(self, n: int, spare: int = 2, entries: int | None = None) -> None:
        """Renumber live markers to 0..L-1 and size the space to ``spare`` (L + n) + slack
        (2: room to grow; 1: a batch that reserved what it needs). The
        table is remapped in place when it holds exactly the live keys (no TTL or limit has
        moved the boundary: every unbounded engine), else rebuilt, and rebuilt larger when
        ``n`` more keys (``entries`` keys in all, when given) would pass its load.
        O(U + S)."""
        meta = self._meta
        remapped = meta[ck.PEXP] == 0 and meta[ck.ENTRIES] == meta[ck.LIVE]
        if remapped:
            ck.remap(meta, self._tv, self._dead)
        ck.compact(meta, self._kbp, self._dead, self._ep_pos, self._ep_time)
        need = int(meta[ck.T]) + n
        if need > ck.MAX_POSITIONS // 2:
            raise InvalidRequestError(
                f"a CompactLiteHit tracks at most {ck.MAX_POSITIONS // 2} blocks, needs {need}"
            )
        size = ((spare * need + ck.SLACK) | 63) + 1
        if spare * need > meta[ck.CAP] or 4 * need + ck.SLACK < meta[ck.CAP]:
            self._positions(size)
        else:
            self._dead.fill(0)
            self._fen.fill(0)
        keys = need if entries is None else entries
        if not remapped or keys * ck.MAX_LOAD_DEN > self._tv.shape[0] * ck.MAX_LOAD_NUM:
            self._rebuild(keys)

    def _rebuild(self, entries: int) -> None:
        """A fresh table for ``entries`` keys (load <= 0.5) filled from the live positions;
        the old table is freed first. O(U + S)."""
        size = ck.MIN_TABLE
        while size < 2 * entries:
            size <<= 1
        self._tv = None  # type: ignore[assignment]
        self._tv = _written_zeros(size, np.uint32)
        ck.fill(self._meta, self._tv, self._kbp, self._dead)

    # ------------------------------------------------------------- snapshots
    def export_state(self) -> EngineState:
        """The same :class:`EngineState` as ``LiteHit.export_state``: tracked keys least
        recent first, access times as epochs, clock and counters. O(U) numpy work."""
        meta = self._meta
        pexp, t = int(meta[ck.PEXP]), int(meta[ck.T])
        bits = np.unpackbits(self._dead.view(np.uint8), bitorder="little")[pexp:t]
        present = bits == 0
        keys = self._kbp[pexp:t][present]
        times = None
        if meta[ck.TTL] and len(keys):
            ordered = np.flatnonzero(present) + pexp
            nep = int(meta[ck.NEP])
            epoch = np.searchsorted(self._ep_pos[:nep], ordered, "right") - 1
            times = self._ep_time[:nep][epoch]
        return EngineState.exported(
            MODEL, keys, times, int(meta[ck.NOW]), self.expired_blocks, self.dropped_blocks
        )

    @classmethod
    def from_state(cls, state: EngineState, ttl_ns: int, max_tracked_blocks: int) -> CompactLiteHit:
        """An engine that continues exactly where the exporting engine (either
        implementation) stopped; the same validation and errors as
        ``LiteHit.from_state``. O(n) for n keys."""
        engine = cls(ttl_ns=ttl_ns, max_tracked_blocks=max_tracked_blocks)
        keys, starts, times = validated_arrays(state, MODEL, ttl_ns)
        n = len(keys)
        meta = engine._meta
        engine._positions(((2 * n + ck.SLACK) | 63) + 1)
        engine._kbp[:n] = keys
        meta[ck.T] = n
        size = ck.MIN_TABLE
        while size < 2 * n:
            size <<= 1
        engine._tv = _written_zeros(size, np.uint32)
        dups = ck.fill(meta, engine._tv, engine._kbp, engine._dead)
        if dups:
            raise InvalidRequestError(
                f"state.keys must be distinct, got {dups} duplicate(s) in {n} keys"
            )
        meta[ck.LIVE] = n
        if ttl_ns:
            epochs = len(starts)
            engine._ep_pos = np.concatenate((starts, np.zeros(epochs + 16, np.int64)))
            engine._ep_time = np.concatenate((times, np.zeros(epochs + 16, np.int64)))
            meta[ck.NEP] = epochs
        meta[ck.NOW] = int(state.now_ns)
        meta[ck.EXP] = int(state.expired_blocks)
        meta[ck.DROP] = int(state.dropped_blocks)
        if max_tracked_blocks and n > max_tracked_blocks:
            ck.drop(meta, engine._dead, engine._fen, n - max_tracked_blocks)
        return engine

    # ------------------------------------------------------------- invariants
    def _check(self) -> None:
        """Verify every internal invariant from scratch (tests call this). O(U + S)."""
        meta = self._meta
        t, cap, pexp = int(meta[ck.T]), int(meta[ck.CAP]), int(meta[ck.PEXP])
        assert 0 <= pexp <= t <= cap == self._kbp.shape[0] == 64 * self._dead.shape[0]
        bits = np.unpackbits(self._dead.view(np.uint8), bitorder="little")
        assert not bits[t:].any(), "a dead bit at or beyond next"
        assert int(bits.sum()) == meta[ck.DEAD], "dead count wrong"
        fen = np.zeros_like(self._fen)
        ck.build_fenwick(self._dead, fen)
        assert np.array_equal(fen, self._fen), "Fenwick tree wrong"
        live = np.flatnonzero(bits[pexp:t] == 0) + pexp
        assert len(live) == meta[ck.LIVE], (len(live), meta[ck.LIVE])
        limit = int(meta[ck.LIMIT])
        assert not limit or len(live) <= limit, "more tracked than the limit"
        keys = self._kbp[live]
        assert len(np.unique(keys)) == len(keys), "a key has two live markers"
        tv = self._tv
        size = tv.shape[0]
        assert size & (size - 1) == 0 and size >= ck.MIN_TABLE
        occupied = tv[tv != 0].astype(np.int64) - 1
        assert len(occupied) == meta[ck.ENTRIES], "table entry count wrong"
        assert meta[ck.ENTRIES] * ck.MAX_LOAD_DEN <= size * ck.MAX_LOAD_NUM, "table over its load"
        assert np.all(occupied < t), "a table entry beyond next"
        assert set(live.tolist()) <= set(occupied.tolist()), "a live marker not in the table"
        above = occupied[occupied >= pexp]
        assert not bits[above].any(), "the table points at a dead marker"
        nep = int(meta[ck.NEP])
        ep_pos, ep_time = self._ep_pos[:nep], self._ep_time[:nep]
        assert np.all(np.diff(ep_pos) > 0) and np.all(np.diff(ep_time) > 0)
        if meta[ck.TTL] and len(live):
            assert nep and ep_pos[0] <= live[0] and ep_time[-1] <= meta[ck.NOW]


def warm_up() -> float:
    """Compile (or load from numba's disk cache) every kernel of :class:`CompactLiteHit`
    by running a small engine with TTL and a limit through growth, compaction, a batch and
    a state round trip; returns the seconds it took (a few seconds the first time after an
    install, ~0.1 s once cached). ``litehit serve`` calls it before it listens."""
    import time

    start = time.monotonic()
    engine = CompactLiteHit(ttl_ns=50, max_tracked_blocks=3000)
    for i in range(2200):  # past the first position space: a compaction and a rebuild
        engine.process_request([i % 97] + list(range(8 * i, 8 * i + 7)), now_ns=i)
    keys = np.arange(40, dtype=np.int64)
    engine.process_batch(keys, np.array([0, 20, 40]), np.array([800, 801]))
    CompactLiteHit.from_state(engine.export_state(), 50, 3000)
    return time.monotonic() - start
