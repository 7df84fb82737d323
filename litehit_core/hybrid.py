"""The hybrid linear-attention / Mamba engine: exact prefix hits for every byte capacity.

Objects are ``Full(key)`` charged ``full_bytes`` (F) and ``Linear(key)`` (a saved recurrent
state) charged ``linear_bytes`` (L). Both kinds share one recency order and one byte
budget per capacity C. With a strict evict-until-fits LRU an object is resident at C
exactly when its own charge plus the bytes of every more recent object is <= C; call that
its *byte depth* S. A request of n blocks (keys head first) hits, on the state before it,
the longest prefix ending at p with Linear(key_p) resident and Full(key_0..p) resident, so
its hits at C are ``max{p + 1 : T_p <= C}`` with ``T_p = max(S(Linear_p), max_i<=p
S(Full_i))`` (infinite when an object is missing). The capacity-independent fact is the
staircase of those thresholds: :class:`~litehit_core.model.HitCurveStep` corners
``(threshold bytes, hit blocks)``, thresholds and hits strictly increasing. Then the
request is committed tail to head: at a write position (``(p + 1) % step == 0`` or the
last block) Linear(key_p) then Full(key_p) are touched, elsewhere Full(key_p) only.

How: every touch takes the next *position*; a Fenwick tree over positions holds each live
marker's charge, so ``S(x) = total - prefix(pos(x))`` in O(log U). Two open-addressing hash
tables map keys to the live position of their Full and Linear object. All of it is numpy
arrays driven by numba-compiled functions (``nogil``: other threads run meanwhile).

TTL (``ttl_ns``): positions carry their access time; an object whose age is >= ttl is
gone. Times grow with positions, so expiry is a lower boundary (the *floor*) that moves
forward; the same floor drops the least recent objects when the tracked bytes exceed
``max_tracked_bytes`` (then the theoretical answer is exactly a byte LRU of that size).
Objects below the floor are removed from the tables at once. When the position space is
used up, live markers are renumbered in order (compaction) and the arrays grow as needed.

Costs per request of n blocks: O(n log U) to read (two hash lookups and two Fenwick sums
per block) and O(n log U) to commit; the floor moves O(1) amortised per position;
compaction is O(U) once per at least U/2 positions. Memory: 21 bytes per position of
space (two Fenwick trees, key, kind; +8 with TTL) and about 32 bytes per tracked object in the
tables; :meth:`HybridLRU.memory_usage_bytes` is their exact sum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from litehit_core import hybrid_kernels as hk
from litehit_core.errors import InvalidRequestError
from litehit_core.kernels import (
    distinct_keys,
    fenwick_prefix,
)
from litehit_core.model import MAX_OBJECT_BYTES, HitCurveStep, RequestFact
from litehit_core.state import STATE_FORMAT_VERSION, EngineState

__all__ = ["MAX_OBJECT_BYTES", "MODEL", "HybridLRU", "warm_up"]


MODEL = "hybrid"
"""The model name this engine's states carry."""
# --------------------------------------------------------------------------- the engine

_NONE = np.zeros(0, np.int64)


def _table(capacity: int) -> tuple[np.ndarray, np.ndarray]:
    size = hk.MIN_TABLE
    while size * hk.MAX_LOAD < capacity:
        size <<= 1
    return np.zeros(size, np.int64), np.full(size, hk.EMPTY, np.int64)


class HybridLRU:
    """Exact prefix hits of a hybrid full + linear (Mamba) cache at every byte capacity.

    ``full_bytes`` (F) and ``linear_bytes`` (L): charges of a block and of a saved state,
    bytes, each in 1..:data:`MAX_OBJECT_BYTES`; ``step_blocks``: a state is written every
    this many blocks (>= 1); ``ttl_ns``: object lifetime (0 = none); ``max_tracked_bytes``:
    most bytes tracked (0 = unlimited). :meth:`process_request` returns a
    :class:`~litehit_core.model.RequestFact` whose ``hit_curve`` holds
    :class:`~litehit_core.model.HitCurveStep` corners in bytes.
    """

    __slots__ = ("_meta", "_ftk", "_ftv", "_ltk", "_ltv", "_fen", "_fcnt", "_pkey", "_pkind",
                 "_ptime", "_thr", "_hits", "model")  # fmt: skip

    def __init__(
        self,
        full_bytes: int,
        linear_bytes: int,
        step_blocks: int,
        ttl_ns: int = 0,
        max_tracked_bytes: int = 0,
    ) -> None:
        for name, value in (("full_bytes", full_bytes), ("linear_bytes", linear_bytes)):
            if not 0 < value <= MAX_OBJECT_BYTES:
                raise InvalidRequestError(
                    f"{name} must be in 1..{MAX_OBJECT_BYTES} (bytes), got {value}"
                )
        if step_blocks < 1:
            raise InvalidRequestError(f"step_blocks must be >= 1, got {step_blocks}")
        if ttl_ns < 0:
            raise InvalidRequestError(f"ttl_ns must not be negative, got {ttl_ns}")
        if max_tracked_bytes < 0:
            raise InvalidRequestError(
                f"max_tracked_bytes must not be negative, got {max_tracked_bytes}"
            )
        meta = np.zeros(hk.META, np.int64)
        meta[hk.FB], meta[hk.LB], meta[hk.STEP] = full_bytes, linear_bytes, step_blocks
        meta[hk.TTL], meta[hk.LIMIT] = ttl_ns, max_tracked_bytes
        meta[hk.NOW] = np.iinfo(np.int64).min
        self._meta = meta
        self.model = MODEL
        """The model name this engine's states carry."""
        self._thr = np.zeros(64, np.int64)
        self._hits = np.zeros(64, np.int64)
        self.reset()

    # ------------------------------------------------------------------ state

    def reset(self) -> None:
        """Forget every object and counter (a cold cache). O(1) + allocation."""
        meta = self._meta
        meta[[hk.T, hk.FLOOR, hk.FSIZE, hk.LSIZE, hk.EXP_F, hk.DROP_F, hk.EXP_L, hk.DROP_L,
              hk.LIVE_F, hk.LIVE_L, hk.TOTAL]] = 0  # fmt: skip
        meta[hk.NOW] = np.iinfo(np.int64).min
        self._ftk, self._ftv = _table(0)
        self._ltk, self._ltv = _table(0)
        self._space(hk.MIN_SPACE)

    def _space(self, size: int) -> None:
        self._fen = np.zeros(size, np.int64)
        self._fcnt = np.zeros(size, np.int32)
        self._pkey = np.zeros(size, np.int64)
        self._pkind = np.zeros(size, np.int8)
        self._ptime = np.zeros(size if self._meta[hk.TTL] > 0 else 0, np.int64)

    @property
    def expired_blocks(self) -> int:
        """Full blocks whose TTL lapsed while tracked (cumulative)."""
        return int(self._meta[hk.EXP_F])

    @property
    def dropped_blocks(self) -> int:
        """Full blocks dropped past ``max_tracked_bytes`` (cumulative)."""
        return int(self._meta[hk.DROP_F])

    def current_unique_blocks(self) -> int:
        """Full blocks tracked now (what an unbounded cache holds). O(1)."""
        return int(self._meta[hk.LIVE_F])

    def current_states(self) -> int:
        """Linear states tracked now. O(1)."""
        return int(self._meta[hk.LIVE_L])

    def tracked_bytes(self, block_bytes: int = 0) -> int:
        """Bytes of every tracked object (F per block, L per state; ``block_bytes`` is not
        needed: the engine knows F). O(1)."""
        return int(self._meta[hk.TOTAL])

    def resident_blocks(self, capacities: Sequence[int]) -> tuple[int, ...]:
        """Full blocks resident now in a cache of each capacity (bytes). O(log U) each."""
        caps = np.asarray(capacities, np.int64)
        out = np.zeros(caps.shape[0], np.int64)
        hk.resident(self._meta, self._fen, self._fcnt, caps, out)
        return tuple(out.tolist())

    def memory_usage_bytes(self) -> int:
        """Bytes of the engine's arrays (exact: tables, Fenwick, keys, kinds, times). O(1)."""
        arrays = (self._ftk, self._ftv, self._ltk, self._ltv, self._fen, self._fcnt, self._pkey,
                  self._pkind, self._ptime, self._meta, self._thr, self._hits)  # fmt: skip
        return sum(a.nbytes for a in arrays)

    # --------------------------------------------------------------- the work

    def process_request(self, block_keys: Sequence[int], now_ns: int = 0) -> RequestFact:
        """Replay one request (keys head first, duplicates kept at their first occurrence)
        at ``now_ns``; its fact, hits in blocks at byte thresholds. O(n log U) amortised."""
        return self._run(distinct_keys(block_keys), now_ns, _NONE, _NONE)

    def _run(
        self, array: np.ndarray, now_ns: int, depths: np.ndarray, touches: np.ndarray
    ) -> RequestFact:
        """:func:`hk.process` on distinct int64 keys, growing the arrays when needed."""
        n = array.shape[0]
        if self._thr.shape[0] < n:
            self._thr = np.zeros(2 * n, np.int64)
            self._hits = np.zeros(2 * n, np.int64)
        while True:
            corners = hk.process(self._meta, self._ftk, self._ftv, self._ltk, self._ltv, self._fen,
                               self._fcnt, self._pkey, self._pkind, self._ptime, array, now_ns,
                               self._thr, self._hits, depths, touches)  # fmt: skip
            if corners >= 0:
                break
            self._make_room(n)
        thr, hits = self._thr, self._hits
        curve = tuple(HitCurveStep(int(thr[i]), int(hits[i])) for i in range(corners))
        return RequestFact(curve, n)

    def _make_room(self, n: int) -> None:
        """Grow the tables and compact or grow the position space for a request of n."""
        meta = self._meta
        writes = 0 if meta[hk.NOSTATE] else n // int(meta[hk.STEP]) + 1
        for which, need in (("f", int(meta[hk.FSIZE]) + n), ("l", int(meta[hk.LSIZE]) + writes)):
            tk = self._ftk if which == "f" else self._ltk
            if need > hk.MAX_LOAD * tk.shape[0]:
                new_tk, new_tv = _table(2 * need)
                old_tv = self._ftv if which == "f" else self._ltv
                hk.rehash(tk, old_tv, new_tk, new_tv)
                if which == "f":
                    self._ftk, self._ftv = new_tk, new_tv
                else:
                    self._ltk, self._ltv = new_tk, new_tv
        need = n + writes
        if meta[hk.T] + need <= self._fen.shape[0]:
            return
        live = hk.compact(meta, self._ftk, self._ftv, self._ltk, self._ltv, self._pkey,
                        self._pkind, self._ptime)  # fmt: skip
        if 2 * (live + need) > self._fen.shape[0]:  # keep at least half the space free
            old_key, old_kind, old_time = self._pkey, self._pkind, self._ptime
            self._space(max(hk.MIN_SPACE, 4 * (live + need)))
            self._pkey[:live] = old_key[:live]
            self._pkind[:live] = old_kind[:live]
            if old_time.shape[0]:
                self._ptime[:live] = old_time[:live]
        hk.build_fenwick(meta, self._fen, self._fcnt, self._pkind)

    # ------------------------------------- the blocks-only configuration (BlockLRU)

    def _blocks_only(self, head_first: bool) -> None:
        """Charge blocks only (no saved states: every cached prefix is a candidate) and
        touch a request head to tail when ``head_first``, else tail to head: what
        :class:`~litehit_core.block_lru.BlockLRU` is. For a fresh engine. O(1)."""
        self._meta[hk.HEAD] = head_first
        self._meta[hk.NOSTATE] = 1

    def _head_first(self) -> bool:
        """Whether requests are touched head to tail (see :meth:`_blocks_only`). O(1)."""
        return bool(self._meta[hk.HEAD])

    def _run_batch(
        self,
        keys: np.ndarray,
        offsets: np.ndarray,
        times: np.ndarray,
        thr: np.ndarray,
        hits: np.ndarray,
        counts: np.ndarray,
        depths: np.ndarray,
        touches: np.ndarray,
    ) -> None:
        """:func:`hk.process_batch` over every request of ``offsets`` (the arrays as
        ``BlockLRU.process_batch`` allocates them), growing the tables or the position
        space whenever a request needs it. O(K log U) for K keys."""
        first = 0
        while True:
            first = hk.process_batch(self._meta, self._ftk, self._ftv, self._ltk, self._ltv,
                                   self._fen, self._fcnt, self._pkey, self._pkind, self._ptime,
                                   keys, offsets, times, thr, hits, counts, depths, touches,
                                   first)  # fmt: skip
            if first < 0:
                return
            self._make_room(int(offsets[first + 1] - offsets[first]))

    # ---------------------------------------------------------------- durable state

    def export_state(self) -> EngineState:
        """Tracked objects in recency order (keys, kinds 1 = Full / 2 = Linear, TTL epochs),
        clock and counters. O(U)."""
        meta = self._meta
        size = int(meta[hk.LIVE_F] + meta[hk.LIVE_L])
        keys = np.empty(size, np.int64)
        kinds = np.empty(size, np.int64)
        times = np.empty(size, np.int64)
        hk.live(meta, self._pkey, self._pkind, self._ptime, keys, kinds, times)
        return EngineState.exported(
            self.model,
            keys,
            times if meta[hk.TTL] > 0 else None,
            int(meta[hk.NOW]),
            int(meta[hk.EXP_F]),
            int(meta[hk.DROP_F]),
            None if meta[hk.NOSTATE] else kinds,
        )

    @classmethod
    def from_state(
        cls,
        state: EngineState,
        full_bytes: int,
        linear_bytes: int,
        step_blocks: int,
        ttl_ns: int = 0,
        max_tracked_bytes: int = 0,
    ) -> HybridLRU:
        """An engine continuing exactly where ``state``'s exporter stopped (validated:
        InvalidRequestError naming the field). O(objects)."""
        engine = cls(full_bytes, linear_bytes, step_blocks, ttl_ns, max_tracked_bytes)
        engine._load(state)
        return engine

    def _load(self, state: EngineState) -> None:
        """Replace this (fresh) engine's objects by ``state``'s (validated). O(objects)."""
        if state.model != self.model or state.format_version != STATE_FORMAT_VERSION:
            raise InvalidRequestError(
                f"state must be model {self.model!r} version {STATE_FORMAT_VERSION}, got "
                f"{state.model!r} version {state.format_version}"
            )
        meta = self._meta
        keys = np.asarray(state.keys, np.int64)
        n = keys.shape[0]
        if meta[hk.NOSTATE] and state.kinds is None:
            kinds = np.full(n, hk.FULL, np.int64)
        else:
            kinds = np.asarray(state.kinds if state.kinds is not None else (), np.int64)
        allowed = (hk.FULL,) if meta[hk.NOSTATE] else (hk.FULL, hk.LIN)
        if kinds.shape != (n,) or (n and not np.isin(kinds, allowed).all()):
            raise InvalidRequestError(
                "state.kinds must give 1 (Full) or 2 (Linear) per key"
                + (" (blocks only: 1)" if meta[hk.NOSTATE] else "")
            )
        for kind, name in ((hk.FULL, "Full"), (hk.LIN, "Linear")):
            chosen = keys[kinds == kind]
            if np.unique(chosen).shape[0] != chosen.shape[0]:
                raise InvalidRequestError(f"state.keys repeat a {name} object")
        ttl_ns = int(meta[hk.TTL])
        times = np.zeros(n, np.int64)
        if ttl_ns > 0 and n:
            starts = np.asarray(state.epoch_starts, np.int64)
            epoch_times = np.asarray(state.epoch_times, np.int64)
            if (
                starts.shape != epoch_times.shape
                or not starts.shape[0]
                or starts[0] != 0
                or (np.diff(starts) <= 0).any()
                or starts[-1] >= n
                or (np.diff(epoch_times) <= 0).any()
            ):
                raise InvalidRequestError("state.epoch_starts/epoch_times are inconsistent")
            times = np.repeat(epoch_times, np.diff(np.append(starts, n)))
        size = max(hk.MIN_SPACE, 4 * n + 64)
        self._space(size)
        self._pkey[:n] = keys
        self._pkind[:n] = kinds
        if self._ptime.shape[0]:
            self._ptime[:n] = times
        n_full = int((kinds == hk.FULL).sum())
        self._ftk, self._ftv = _table(2 * n_full)
        self._ltk, self._ltv = _table(2 * (n - n_full))
        meta[hk.T] = n
        meta[hk.FSIZE] = meta[hk.LIVE_F] = n_full
        meta[hk.LSIZE] = meta[hk.LIVE_L] = n - n_full
        meta[hk.TOTAL] = n_full * meta[hk.FB] + (n - n_full) * meta[hk.LB]
        meta[hk.NOW] = state.now_ns
        meta[hk.EXP_F] = state.expired_blocks
        meta[hk.DROP_F] = state.dropped_blocks
        hk.compact(meta, self._ftk, self._ftv, self._ltk, self._ltv, self._pkey,
                 self._pkind, self._ptime)  # fmt: skip
        hk.build_fenwick(meta, self._fen, self._fcnt, self._pkind)

    # ------------------------------------------------------------- invariants

    def _check(self) -> None:
        """Verify every invariant from scratch (tests call this). O(U + table size)."""
        meta = self._meta
        t, floor = int(meta[hk.T]), int(meta[hk.FLOOR])
        assert 0 <= floor <= t <= self._fen.shape[0]
        kinds = self._pkind
        live = [q for q in range(floor, t) if kinds[q]]
        assert not kinds[:floor].any() and not kinds[t:].any(), "live marker outside [floor, T)"
        full = {int(self._pkey[q]): q for q in live if kinds[q] == hk.FULL}
        lin = {int(self._pkey[q]): q for q in live if kinds[q] == hk.LIN}
        assert len(full) == meta[hk.LIVE_F] == meta[hk.FSIZE]
        assert len(lin) == meta[hk.LIVE_L] == meta[hk.LSIZE]
        for tk, tv, want in ((self._ftk, self._ftv, full), (self._ltk, self._ltv, lin)):
            got = {int(k): int(v) for k, v in zip(tk, tv, strict=True) if v != hk.EMPTY}
            assert got == want, "table disagrees with the position space"
        charge = {hk.FULL: int(meta[hk.FB]), hk.LIN: int(meta[hk.LB])}
        weights = np.zeros(self._fen.shape[0], np.int64)
        for q in live:
            weights[q] = charge[int(kinds[q])]
        for q in range(floor, t + 1, max(1, (t - floor) // 64)):
            assert fenwick_prefix(self._fen, q) - fenwick_prefix(self._fen, floor) == int(
                weights[floor:q].sum()
            ), f"Fenwick sum wrong at {q}"
        assert meta[hk.TOTAL] == weights.sum()
        assert fenwick_prefix(self._fen, t) - fenwick_prefix(self._fen, floor) == weights.sum()
        assert fenwick_prefix(self._fcnt, t) - fenwick_prefix(self._fcnt, floor) == len(full)
        assert not meta[hk.LIMIT] or meta[hk.TOTAL] <= meta[hk.LIMIT]
        if self._ptime.shape[0] and live:
            times = self._ptime[live]
            assert (np.diff(times) >= 0).all(), "access times must grow with positions"


def warm_up() -> float:
    """Compile (or load from numba's disk cache) every kernel of :class:`HybridLRU` by
    running a small engine through growth, TTL expiry, the byte limit, compaction, resident
    counts and a state round trip; returns the seconds it took. About 2-3 s the first time
    after an install, ~0.1 s once cached. ``litehit serve`` calls it before it listens so no
    query pays the compilation."""
    import time

    start = time.monotonic()
    engine = HybridLRU(2, 3, 2, ttl_ns=50, max_tracked_bytes=3000)
    for i in range(1000):  # enough positions to grow the tables and to compact
        engine.process_request([i % 97, 1000 + i, 2000 + i], now_ns=i)
    engine.resident_blocks((10, 1000))
    HybridLRU.from_state(engine.export_state(), 2, 3, 2, ttl_ns=50, max_tracked_bytes=3000)
    return time.monotonic() - start
