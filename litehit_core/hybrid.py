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
from numba import njit

from litehit_core.errors import InvalidRequestError
from litehit_core.kernels import (
    distinct_keys,
    fenwick_add,
    fenwick_prefix,
    fenwick_search,
    home_slot,
)
from litehit_core.model import MAX_OBJECT_BYTES, HitCurveStep, RequestFact
from litehit_core.state import STATE_FORMAT_VERSION, EngineState

__all__ = ["MAX_OBJECT_BYTES", "MODEL", "HybridLRU", "warm_up"]


MODEL = "hybrid"
"""The model name this engine's states carry."""
_EMPTY = -1
_FULL = 1
_LIN = 2
# meta slots
_T, _FLOOR, _FSIZE, _LSIZE = 0, 1, 2, 3
_FB, _LB, _STEP, _TTL, _LIMIT, _NOW = 4, 5, 6, 7, 8, 9
_EXP_F, _DROP_F, _EXP_L, _DROP_L, _LIVE_F, _LIVE_L, _TOTAL = 10, 11, 12, 13, 14, 15, 16
_HEAD, _NOSTATE = 17, 18  # touch head to tail; blocks only (no saved states)
_META = 19
_MIN_TABLE = 1 << 10
_MIN_SPACE = 1 << 12
_MAX_LOAD = 0.6


# --------------------------------------------------------------------------- numba core


@njit(cache=True, nogil=True, inline="always")
def _find(tk: np.ndarray, tv: np.ndarray, key: np.int64) -> np.int64:
    """The slot holding ``key``, or the empty slot where its probe sequence ends (linear
    probing). The one probe loop of :func:`_get`, :func:`_put`, :func:`_delete`, ``_touch``."""
    mask = tk.shape[0] - 1
    i = home_slot(key, mask)
    while tv[i] != _EMPTY and tk[i] != key:
        i = (i + 1) & mask
    return i


@njit(cache=True, nogil=True)
def _get(tk: np.ndarray, tv: np.ndarray, key: np.int64) -> np.int64:
    return tv[_find(tk, tv, key)]  # _EMPTY when absent


@njit(cache=True, nogil=True)
def _put(tk: np.ndarray, tv: np.ndarray, key: np.int64, value: np.int64) -> np.int64:
    """Set ``key`` -> ``value``; returns 1 when the key was new."""
    i = _find(tk, tv, key)
    new = 1 if tv[i] == _EMPTY else 0
    tk[i] = key
    tv[i] = value
    return new


@njit(cache=True, nogil=True)
def _delete(tk: np.ndarray, tv: np.ndarray, key: np.int64) -> np.int64:
    """Remove ``key`` (backward-shift deletion: no tombstones); returns 1 if it was there."""
    mask = tk.shape[0] - 1
    i = _find(tk, tv, key)
    if tv[i] == _EMPTY:
        return 0
    j = i
    while True:
        j = (j + 1) & mask
        if tv[j] == _EMPTY:
            break
        home = home_slot(tk[j], mask)
        # move j back to i unless its home lies cyclically in (i, j]
        if (i <= j and (home <= i or home > j)) or (i > j and home <= i and home > j):
            tk[i] = tk[j]
            tv[i] = tv[j]
            i = j
    tv[i] = _EMPTY
    return 1


@njit(cache=True, nogil=True)
def _evict(meta, ftk, ftv, ltk, ltv, pkey, pkind, q: np.int64, dropped: bool) -> None:
    """The live object at position ``q`` leaves (the floor passed it)."""
    kind = pkind[q]
    if kind == _FULL:
        _delete(ftk, ftv, pkey[q])
        meta[_FSIZE] -= 1
        meta[_LIVE_F] -= 1
        meta[_TOTAL] -= meta[_FB]
        meta[_DROP_F if dropped else _EXP_F] += 1
    elif kind == _LIN:
        _delete(ltk, ltv, pkey[q])
        meta[_LSIZE] -= 1
        meta[_LIVE_L] -= 1
        meta[_TOTAL] -= meta[_LB]
        meta[_DROP_L if dropped else _EXP_L] += 1
    pkind[q] = 0


@njit(cache=True, nogil=True)
def _expire(meta, ftk, ftv, ltk, ltv, pkey, pkind, ptime, now: np.int64) -> None:
    """Move the floor past every position whose age is >= ttl at ``now``."""
    ttl = meta[_TTL]
    if ttl <= 0:
        return
    if now < meta[_NOW]:
        now = meta[_NOW]
    meta[_NOW] = now
    floor = meta[_FLOOR]
    t = meta[_T]
    while floor < t and now - ptime[floor] >= ttl:
        if pkind[floor] != 0:
            _evict(meta, ftk, ftv, ltk, ltv, pkey, pkind, floor, False)
        floor += 1
    meta[_FLOOR] = floor


@njit(cache=True, nogil=True)
def _touch(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, key, kind, now) -> None:
    """Make Full/Linear(``key``) the most recent object (a new live marker at T)."""
    if kind == _FULL:
        tk, tv, charge = ftk, ftv, meta[_FB]
    else:
        tk, tv, charge = ltk, ltv, meta[_LB]
    t = meta[_T]
    slot = _find(tk, tv, key)  # one probe for the read and the write
    old = tv[slot]
    tk[slot] = key
    tv[slot] = t
    if old != _EMPTY:  # tables hold live objects only (at or above the floor)
        fenwick_add(fen, old, -charge)
        if kind == _FULL:
            fenwick_add(fcnt, old, -1)
        pkind[old] = 0
    else:
        if kind == _FULL:
            meta[_FSIZE] += 1
            meta[_LIVE_F] += 1
        else:
            meta[_LSIZE] += 1
            meta[_LIVE_L] += 1
        meta[_TOTAL] += charge
    fenwick_add(fen, t, charge)
    if kind == _FULL:
        fenwick_add(fcnt, t, 1)
    pkey[t] = key
    pkind[t] = kind
    if ptime.shape[0]:
        ptime[t] = now
    meta[_T] = t + 1


@njit(cache=True, nogil=True)
def _process(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys, now, thr, hits,
             depths, touches):  # fmt: skip
    """Read then commit one request (distinct keys, head first). Returns the number of
    staircase corners written to ``thr``/``hits`` (ascending), or -1 when the position
    space or a table must grow first (nothing was changed).

    Blocks-only engines (``meta[_NOSTATE]``) have no Linear objects: every cached prefix
    is a candidate. With ``depths``/``touches`` of length >= n (else empty), also writes
    the snapshot depth of each cached prefix block (charge units, ``depths[:prefix]``) and,
    in touch order, each Full touch's depth just before it (-1 for a block not tracked):
    the stack distances of the touch sequence."""
    n = keys.shape[0]
    step = meta[_STEP]
    nostate = meta[_NOSTATE] != 0
    writes = 0 if nostate else n // step + 1
    if meta[_T] + n + writes > fen.shape[0]:
        return -1
    if (meta[_FSIZE] + n) > _MAX_LOAD * ftk.shape[0] or (
        meta[_LSIZE] + writes
    ) > _MAX_LOAD * ltk.shape[0]:
        return -1
    _expire(meta, ftk, ftv, ltk, ltv, pkey, pkind, ptime, now)
    now = meta[_NOW] if meta[_TTL] > 0 else now
    # read on the snapshot: thresholds T_p for every p with Linear(key_p) tracked
    t = meta[_T]
    total = fenwick_prefix(fen, t)
    depth_max = np.int64(0)
    m = 0  # candidates, stored in thr/hits by increasing p
    record = depths.shape[0] >= n
    for p in range(n):
        fpos = _get(ftk, ftv, keys[p])
        if fpos == _EMPTY:
            break
        s = total - fenwick_prefix(fen, fpos)
        if record:
            depths[p] = s
        if s > depth_max:
            depth_max = s
        if nostate:
            thr[m] = depth_max
            hits[m] = p + 1
            m += 1
            continue
        lpos = _get(ltk, ltv, keys[p])
        if lpos != _EMPTY:
            s = total - fenwick_prefix(fen, lpos)
            thr[m] = depth_max if depth_max > s else s
            hits[m] = p + 1
            m += 1
    # the staircase: keep a candidate whose threshold is below every later one's; written
    # from the end of the candidates (never over one not yet read), ascending, then moved
    corners = 0
    lowest = np.int64(np.iinfo(np.int64).max)
    for j in range(m - 1, -1, -1):
        if thr[j] < lowest:
            lowest = thr[j]
            k = m - 1 - corners
            thr[k] = thr[j]
            hits[k] = hits[j]
            corners += 1
    first = m - corners
    for j in range(corners):
        thr[j] = thr[first + j]
        hits[j] = hits[first + j]
    # commit: tail to head (the head ends most recent), or head to tail
    head = meta[_HEAD] != 0
    track = touches.shape[0] >= n
    for i in range(n):
        p = i if head else n - 1 - i
        if not nostate and ((p + 1) % step == 0 or p == n - 1):
            _touch(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys[p], _LIN, now)
        if track:
            fpos = _get(ftk, ftv, keys[p])
            touches[i] = (
                -1 if fpos == _EMPTY else fenwick_prefix(fen, meta[_T]) - fenwick_prefix(fen, fpos)
            )
        _touch(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys[p], _FULL, now)
    # a byte bound: drop the least recent objects until the tracked bytes fit
    limit = meta[_LIMIT]
    if limit > 0:
        floor = meta[_FLOOR]
        while meta[_TOTAL] > limit:
            if pkind[floor] != 0:
                _evict(meta, ftk, ftv, ltk, ltv, pkey, pkind, floor, True)
            floor += 1
        meta[_FLOOR] = floor
    return corners


@njit(cache=True, nogil=True)
def _process_batch(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys, offsets,
                   times, thr, hits, counts, depths, touches, first):  # fmt: skip
    """:func:`_process` for requests ``first, first + 1, ...``: request r is
    ``keys[offsets[r]:offsets[r + 1]]`` at ``times[r]``; its corners go to the same span
    of ``thr``/``hits`` (``counts[r]`` of them), its depths and touch depths to the same
    span of ``depths``/``touches``. Returns -1 when done, else the request that needs the
    tables or the position space to grow first (nothing of it was changed)."""
    for r in range(first, offsets.shape[0] - 1):
        a = offsets[r]
        b = offsets[r + 1]
        c = _process(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys[a:b],
                     times[r], thr[a:b], hits[a:b], depths[a:b], touches[a:b])  # fmt: skip
        if c < 0:
            return r
        counts[r] = c
    return -1


@njit(cache=True, nogil=True)
def _compact(meta, ftk, ftv, ltk, ltv, pkey, pkind, ptime) -> np.int64:
    """Renumber the live markers at and above the floor to 0..L-1, in order, in place, and
    update the tables; returns L (the Fenwick tree must be rebuilt). O(U)."""
    t = meta[_T]
    j = 0
    timed = ptime.shape[0] > 0
    for q in range(meta[_FLOOR], t):
        kind = pkind[q]
        if kind == 0:
            continue
        key = pkey[q]
        pkey[j] = key
        pkind[j] = kind
        if timed:
            ptime[j] = ptime[q]
        if kind == _FULL:
            _put(ftk, ftv, key, j)
        else:
            _put(ltk, ltv, key, j)
        j += 1
    for q in range(j, t):
        pkind[q] = 0
    meta[_T] = j
    meta[_FLOOR] = 0
    return j


@njit(cache=True, nogil=True)
def _build_fenwick(meta, fen, fcnt, pkind) -> None:
    """The Fenwick trees of the charges and of the Full markers among the live markers
    below T, in O(size): every node adds itself to its parent."""
    size = fen.shape[0]
    t = meta[_T]
    fb, lb = meta[_FB], meta[_LB]
    for q in range(size):
        kind = pkind[q] if q < t else 0
        fen[q] = fb if kind == _FULL else (lb if kind == _LIN else 0)
        fcnt[q] = 1 if kind == _FULL else 0
    for q in range(1, size + 1):
        parent = q + (q & -q)
        if parent <= size:
            fen[parent - 1] += fen[q - 1]
            fcnt[parent - 1] += fcnt[q - 1]


@njit(cache=True, nogil=True)
def _resident(meta, fen, fcnt, capacities, out) -> None:
    """Full objects resident now in a cache of each capacity (bytes): those whose byte
    depth is <= it, i.e. at positions from the smallest q with ``prefix(q) >= total - C``
    (and the floor) on. O(log U) per capacity."""
    t = meta[_T]
    total = fenwick_prefix(fen, t)
    full = fenwick_prefix(fcnt, t)
    for i in range(capacities.shape[0]):
        target = total - capacities[i]
        q = np.int64(0)
        if target > 0:  # the largest index with prefix < target, plus one
            q = fenwick_search(fen, target) + 1
        if q < meta[_FLOOR]:
            q = meta[_FLOOR]
        out[i] = full - fenwick_prefix(fcnt, q) if q < t else 0


@njit(cache=True, nogil=True)
def _rehash(tk, tv, new_tk, new_tv) -> None:
    for i in range(tk.shape[0]):
        if tv[i] != _EMPTY:
            _put(new_tk, new_tv, tk[i], tv[i])


@njit(cache=True, nogil=True)
def _live(meta, pkey, pkind, ptime, keys, kinds, times) -> np.int64:
    """Copy the live markers (floor..T) in order; returns how many."""
    j = 0
    timed = ptime.shape[0] > 0
    for q in range(meta[_FLOOR], meta[_T]):
        if pkind[q] != 0:
            keys[j] = pkey[q]
            kinds[j] = pkind[q]
            times[j] = ptime[q] if timed else 0
            j += 1
    return j


# --------------------------------------------------------------------------- the engine

_NONE = np.zeros(0, np.int64)


def _table(capacity: int) -> tuple[np.ndarray, np.ndarray]:
    size = _MIN_TABLE
    while size * _MAX_LOAD < capacity:
        size <<= 1
    return np.zeros(size, np.int64), np.full(size, _EMPTY, np.int64)


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
        meta = np.zeros(_META, np.int64)
        meta[_FB], meta[_LB], meta[_STEP] = full_bytes, linear_bytes, step_blocks
        meta[_TTL], meta[_LIMIT] = ttl_ns, max_tracked_bytes
        meta[_NOW] = np.iinfo(np.int64).min
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
        meta[[_T, _FLOOR, _FSIZE, _LSIZE, _EXP_F, _DROP_F, _EXP_L, _DROP_L, _LIVE_F, _LIVE_L,
              _TOTAL]] = 0  # fmt: skip
        meta[_NOW] = np.iinfo(np.int64).min
        self._ftk, self._ftv = _table(0)
        self._ltk, self._ltv = _table(0)
        self._space(_MIN_SPACE)

    def _space(self, size: int) -> None:
        self._fen = np.zeros(size, np.int64)
        self._fcnt = np.zeros(size, np.int32)
        self._pkey = np.zeros(size, np.int64)
        self._pkind = np.zeros(size, np.int8)
        self._ptime = np.zeros(size if self._meta[_TTL] > 0 else 0, np.int64)

    @property
    def expired_blocks(self) -> int:
        """Full blocks whose TTL lapsed while tracked (cumulative)."""
        return int(self._meta[_EXP_F])

    @property
    def dropped_blocks(self) -> int:
        """Full blocks dropped past ``max_tracked_bytes`` (cumulative)."""
        return int(self._meta[_DROP_F])

    def current_unique_blocks(self) -> int:
        """Full blocks tracked now (what an unbounded cache holds). O(1)."""
        return int(self._meta[_LIVE_F])

    def current_states(self) -> int:
        """Linear states tracked now. O(1)."""
        return int(self._meta[_LIVE_L])

    def tracked_bytes(self, block_bytes: int = 0) -> int:
        """Bytes of every tracked object (F per block, L per state; ``block_bytes`` is not
        needed: the engine knows F). O(1)."""
        return int(self._meta[_TOTAL])

    def resident_blocks(self, capacities: Sequence[int]) -> tuple[int, ...]:
        """Full blocks resident now in a cache of each capacity (bytes). O(log U) each."""
        caps = np.asarray(capacities, np.int64)
        out = np.zeros(caps.shape[0], np.int64)
        _resident(self._meta, self._fen, self._fcnt, caps, out)
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
        """:func:`_process` on distinct int64 keys, growing the arrays when needed."""
        n = array.shape[0]
        if self._thr.shape[0] < n:
            self._thr = np.zeros(2 * n, np.int64)
            self._hits = np.zeros(2 * n, np.int64)
        while True:
            corners = _process(self._meta, self._ftk, self._ftv, self._ltk, self._ltv, self._fen,
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
        writes = 0 if meta[_NOSTATE] else n // int(meta[_STEP]) + 1
        for which, need in (("f", int(meta[_FSIZE]) + n), ("l", int(meta[_LSIZE]) + writes)):
            tk = self._ftk if which == "f" else self._ltk
            if need > _MAX_LOAD * tk.shape[0]:
                new_tk, new_tv = _table(2 * need)
                old_tv = self._ftv if which == "f" else self._ltv
                _rehash(tk, old_tv, new_tk, new_tv)
                if which == "f":
                    self._ftk, self._ftv = new_tk, new_tv
                else:
                    self._ltk, self._ltv = new_tk, new_tv
        need = n + writes
        if meta[_T] + need <= self._fen.shape[0]:
            return
        live = _compact(meta, self._ftk, self._ftv, self._ltk, self._ltv, self._pkey,
                        self._pkind, self._ptime)  # fmt: skip
        if 2 * (live + need) > self._fen.shape[0]:  # keep at least half the space free
            old_key, old_kind, old_time = self._pkey, self._pkind, self._ptime
            self._space(max(_MIN_SPACE, 4 * (live + need)))
            self._pkey[:live] = old_key[:live]
            self._pkind[:live] = old_kind[:live]
            if old_time.shape[0]:
                self._ptime[:live] = old_time[:live]
        _build_fenwick(meta, self._fen, self._fcnt, self._pkind)

    # ------------------------------------- the blocks-only configuration (BlockLRU)

    def _blocks_only(self, head_first: bool) -> None:
        """Charge blocks only (no saved states: every cached prefix is a candidate) and
        touch a request head to tail when ``head_first``, else tail to head: what
        :class:`~litehit_core.block_lru.BlockLRU` is. For a fresh engine. O(1)."""
        self._meta[_HEAD] = head_first
        self._meta[_NOSTATE] = 1

    def _head_first(self) -> bool:
        """Whether requests are touched head to tail (see :meth:`_blocks_only`). O(1)."""
        return bool(self._meta[_HEAD])

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
        """:func:`_process_batch` over every request of ``offsets`` (the arrays as
        ``BlockLRU.process_batch`` allocates them), growing the tables or the position
        space whenever a request needs it. O(K log U) for K keys."""
        first = 0
        while True:
            first = _process_batch(self._meta, self._ftk, self._ftv, self._ltk, self._ltv,
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
        size = int(meta[_LIVE_F] + meta[_LIVE_L])
        keys = np.empty(size, np.int64)
        kinds = np.empty(size, np.int64)
        times = np.empty(size, np.int64)
        _live(meta, self._pkey, self._pkind, self._ptime, keys, kinds, times)
        return EngineState.exported(
            self.model,
            keys,
            times if meta[_TTL] > 0 else None,
            int(meta[_NOW]),
            int(meta[_EXP_F]),
            int(meta[_DROP_F]),
            None if meta[_NOSTATE] else kinds,
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
        if meta[_NOSTATE] and state.kinds is None:
            kinds = np.full(n, _FULL, np.int64)
        else:
            kinds = np.asarray(state.kinds if state.kinds is not None else (), np.int64)
        allowed = (_FULL,) if meta[_NOSTATE] else (_FULL, _LIN)
        if kinds.shape != (n,) or (n and not np.isin(kinds, allowed).all()):
            raise InvalidRequestError(
                "state.kinds must give 1 (Full) or 2 (Linear) per key"
                + (" (blocks only: 1)" if meta[_NOSTATE] else "")
            )
        for kind, name in ((_FULL, "Full"), (_LIN, "Linear")):
            chosen = keys[kinds == kind]
            if np.unique(chosen).shape[0] != chosen.shape[0]:
                raise InvalidRequestError(f"state.keys repeat a {name} object")
        ttl_ns = int(meta[_TTL])
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
        size = max(_MIN_SPACE, 4 * n + 64)
        self._space(size)
        self._pkey[:n] = keys
        self._pkind[:n] = kinds
        if self._ptime.shape[0]:
            self._ptime[:n] = times
        n_full = int((kinds == _FULL).sum())
        self._ftk, self._ftv = _table(2 * n_full)
        self._ltk, self._ltv = _table(2 * (n - n_full))
        meta[_T] = n
        meta[_FSIZE] = meta[_LIVE_F] = n_full
        meta[_LSIZE] = meta[_LIVE_L] = n - n_full
        meta[_TOTAL] = n_full * meta[_FB] + (n - n_full) * meta[_LB]
        meta[_NOW] = state.now_ns
        meta[_EXP_F] = state.expired_blocks
        meta[_DROP_F] = state.dropped_blocks
        _compact(meta, self._ftk, self._ftv, self._ltk, self._ltv, self._pkey,
                 self._pkind, self._ptime)  # fmt: skip
        _build_fenwick(meta, self._fen, self._fcnt, self._pkind)

    # ------------------------------------------------------------- invariants

    def _check(self) -> None:
        """Verify every invariant from scratch (tests call this). O(U + table size)."""
        meta = self._meta
        t, floor = int(meta[_T]), int(meta[_FLOOR])
        assert 0 <= floor <= t <= self._fen.shape[0]
        kinds = self._pkind
        live = [q for q in range(floor, t) if kinds[q]]
        assert not kinds[:floor].any() and not kinds[t:].any(), "live marker outside [floor, T)"
        full = {int(self._pkey[q]): q for q in live if kinds[q] == _FULL}
        lin = {int(self._pkey[q]): q for q in live if kinds[q] == _LIN}
        assert len(full) == meta[_LIVE_F] == meta[_FSIZE]
        assert len(lin) == meta[_LIVE_L] == meta[_LSIZE]
        for tk, tv, want in ((self._ftk, self._ftv, full), (self._ltk, self._ltv, lin)):
            got = {int(k): int(v) for k, v in zip(tk, tv) if v != _EMPTY}
            assert got == want, "table disagrees with the position space"
        charge = {_FULL: int(meta[_FB]), _LIN: int(meta[_LB])}
        weights = np.zeros(self._fen.shape[0], np.int64)
        for q in live:
            weights[q] = charge[int(kinds[q])]
        for q in range(floor, t + 1, max(1, (t - floor) // 64)):
            assert fenwick_prefix(self._fen, q) - fenwick_prefix(self._fen, floor) == int(
                weights[floor:q].sum()
            ), f"Fenwick sum wrong at {q}"
        assert meta[_TOTAL] == weights.sum()
        assert fenwick_prefix(self._fen, t) - fenwick_prefix(self._fen, floor) == weights.sum()
        assert fenwick_prefix(self._fcnt, t) - fenwick_prefix(self._fcnt, floor) == len(full)
        assert not meta[_LIMIT] or meta[_TOTAL] <= meta[_LIMIT]
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
