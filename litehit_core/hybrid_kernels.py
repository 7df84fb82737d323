"""The compiled kernels of :class:`~litehit_core.hybrid.HybridLRU` (and of
:class:`~litehit_core.block_lru.BlockLRU`, which runs it blocks-only): the open-addressing
tables of Full blocks and Linear states, the position space in recency order with its
Fenwick tree of live Full blocks, and the per-request replay, eviction, expiry,
compaction and resident-count loops. ``meta`` is an int64 array of the engine's scalars at
the slots named here. Numba, ``cache=True, nogil=True``; costs are in each kernel's
docstring or in the engine's.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.kernels import (
    fenwick_add,
    fenwick_prefix,
    fenwick_search,
    home_slot,
)

EMPTY = -1
FULL = 1
LIN = 2
# meta slots
T, FLOOR, FSIZE, LSIZE = 0, 1, 2, 3
FB, LB, STEP, TTL, LIMIT, NOW = 4, 5, 6, 7, 8, 9
EXP_F, DROP_F, EXP_L, DROP_L, LIVE_F, LIVE_L, TOTAL = 10, 11, 12, 13, 14, 15, 16
HEAD, NOSTATE = 17, 18  # touch head to tail; blocks only (no saved states)
META = 19
MIN_TABLE = 1 << 10
MIN_SPACE = 1 << 12
MAX_LOAD = 0.6


# --------------------------------------------------------------------------- numba core


@njit(cache=True, nogil=True, inline="always")
def find(tk: np.ndarray, tv: np.ndarray, key: np.int64) -> np.int64:
    """The slot holding ``key``, or the empty slot where its probe sequence ends (linear
    probing). The one probe loop of :func:`get`, :func:`put`, :func:`delete`, ``touch``."""
    mask = tk.shape[0] - 1
    i = home_slot(key, mask)
    while tv[i] != EMPTY and tk[i] != key:
        i = (i + 1) & mask
    return i


@njit(cache=True, nogil=True)
def get(tk: np.ndarray, tv: np.ndarray, key: np.int64) -> np.int64:
    return tv[find(tk, tv, key)]  # EMPTY when absent


@njit(cache=True, nogil=True)
def put(tk: np.ndarray, tv: np.ndarray, key: np.int64, value: np.int64) -> np.int64:
    """Set ``key`` -> ``value``; returns 1 when the key was new."""
    i = find(tk, tv, key)
    new = 1 if tv[i] == EMPTY else 0
    tk[i] = key
    tv[i] = value
    return new


@njit(cache=True, nogil=True)
def delete(tk: np.ndarray, tv: np.ndarray, key: np.int64) -> np.int64:
    """Remove ``key`` (backward-shift deletion: no tombstones); returns 1 if it was there."""
    mask = tk.shape[0] - 1
    i = find(tk, tv, key)
    if tv[i] == EMPTY:
        return 0
    j = i
    while True:
        j = (j + 1) & mask
        if tv[j] == EMPTY:
            break
        home = home_slot(tk[j], mask)
        # move j back to i unless its home lies cyclically in (i, j]
        if (i <= j and (home <= i or home > j)) or (i > j and home <= i and home > j):
            tk[i] = tk[j]
            tv[i] = tv[j]
            i = j
    tv[i] = EMPTY
    return 1


@njit(cache=True, nogil=True)
def evict(meta, ftk, ftv, ltk, ltv, pkey, pkind, q: np.int64, dropped: bool) -> None:
    """The live object at position ``q`` leaves (the floor passed it)."""
    kind = pkind[q]
    if kind == FULL:
        delete(ftk, ftv, pkey[q])
        meta[FSIZE] -= 1
        meta[LIVE_F] -= 1
        meta[TOTAL] -= meta[FB]
        meta[DROP_F if dropped else EXP_F] += 1
    elif kind == LIN:
        delete(ltk, ltv, pkey[q])
        meta[LSIZE] -= 1
        meta[LIVE_L] -= 1
        meta[TOTAL] -= meta[LB]
        meta[DROP_L if dropped else EXP_L] += 1
    pkind[q] = 0


@njit(cache=True, nogil=True)
def expire(meta, ftk, ftv, ltk, ltv, pkey, pkind, ptime, now: np.int64) -> None:
    """Move the floor past every position whose age is >= ttl at ``now``."""
    ttl = meta[TTL]
    if ttl <= 0:
        return
    if now < meta[NOW]:
        now = meta[NOW]
    meta[NOW] = now
    floor = meta[FLOOR]
    t = meta[T]
    while floor < t and now - ptime[floor] >= ttl:
        if pkind[floor] != 0:
            evict(meta, ftk, ftv, ltk, ltv, pkey, pkind, floor, False)
        floor += 1
    meta[FLOOR] = floor


@njit(cache=True, nogil=True)
def touch(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, key, kind, now) -> None:
    """Make Full/Linear(``key``) the most recent object (a new live marker at T)."""
    if kind == FULL:
        tk, tv, charge = ftk, ftv, meta[FB]
    else:
        tk, tv, charge = ltk, ltv, meta[LB]
    t = meta[T]
    slot = find(tk, tv, key)  # one probe for the read and the write
    old = tv[slot]
    tk[slot] = key
    tv[slot] = t
    if old != EMPTY:  # tables hold live objects only (at or above the floor)
        fenwick_add(fen, old, -charge)
        if kind == FULL:
            fenwick_add(fcnt, old, -1)
        pkind[old] = 0
    else:
        if kind == FULL:
            meta[FSIZE] += 1
            meta[LIVE_F] += 1
        else:
            meta[LSIZE] += 1
            meta[LIVE_L] += 1
        meta[TOTAL] += charge
    fenwick_add(fen, t, charge)
    if kind == FULL:
        fenwick_add(fcnt, t, 1)
    pkey[t] = key
    pkind[t] = kind
    if ptime.shape[0]:
        ptime[t] = now
    meta[T] = t + 1


@njit(cache=True, nogil=True)
def process(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys, now, thr, hits,
             depths, touches):  # fmt: skip
    """Read then commit one request (distinct keys, head first). Returns the number of
    staircase corners written to ``thr``/``hits`` (ascending), or -1 when the position
    space or a table must grow first (nothing was changed).

    Blocks-only engines (``meta[NOSTATE]``) have no Linear objects: every cached prefix
    is a candidate. With ``depths``/``touches`` of length >= n (else empty), also writes
    the snapshot depth of each cached prefix block (charge units, ``depths[:prefix]``) and,
    in touch order, each Full touch's depth just before it (-1 for a block not tracked):
    the stack distances of the touch sequence."""
    n = keys.shape[0]
    step = meta[STEP]
    nostate = meta[NOSTATE] != 0
    writes = 0 if nostate else n // step + 1
    if meta[T] + n + writes > fen.shape[0]:
        return -1
    if (meta[FSIZE] + n) > MAX_LOAD * ftk.shape[0] or (meta[LSIZE] + writes) > MAX_LOAD * ltk.shape[
        0
    ]:
        return -1
    expire(meta, ftk, ftv, ltk, ltv, pkey, pkind, ptime, now)
    now = meta[NOW] if meta[TTL] > 0 else now
    # read on the snapshot: thresholds T_p for every p with Linear(key_p) tracked
    t = meta[T]
    total = fenwick_prefix(fen, t)
    depth_max = np.int64(0)
    m = 0  # candidates, stored in thr/hits by increasing p
    record = depths.shape[0] >= n
    for p in range(n):
        fpos = get(ftk, ftv, keys[p])
        if fpos == EMPTY:
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
        lpos = get(ltk, ltv, keys[p])
        if lpos != EMPTY:
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
    head = meta[HEAD] != 0
    track = touches.shape[0] >= n
    for i in range(n):
        p = i if head else n - 1 - i
        if not nostate and ((p + 1) % step == 0 or p == n - 1):
            touch(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys[p], LIN, now)
        if track:
            fpos = get(ftk, ftv, keys[p])
            touches[i] = (
                -1 if fpos == EMPTY else fenwick_prefix(fen, meta[T]) - fenwick_prefix(fen, fpos)
            )
        touch(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys[p], FULL, now)
    # a byte bound: drop the least recent objects until the tracked bytes fit
    limit = meta[LIMIT]
    if limit > 0:
        floor = meta[FLOOR]
        while meta[TOTAL] > limit:
            if pkind[floor] != 0:
                evict(meta, ftk, ftv, ltk, ltv, pkey, pkind, floor, True)
            floor += 1
        meta[FLOOR] = floor
    return corners


@njit(cache=True, nogil=True)
def process_batch(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys, offsets,
                   times, thr, hits, counts, depths, touches, first):  # fmt: skip
    """:func:`process` for requests ``first, first + 1, ...``: request r is
    ``keys[offsets[r]:offsets[r + 1]]`` at ``times[r]``; its corners go to the same span
    of ``thr``/``hits`` (``counts[r]`` of them), its depths and touch depths to the same
    span of ``depths``/``touches``. Returns -1 when done, else the request that needs the
    tables or the position space to grow first (nothing of it was changed)."""
    for r in range(first, offsets.shape[0] - 1):
        a = offsets[r]
        b = offsets[r + 1]
        c = process(meta, ftk, ftv, ltk, ltv, fen, fcnt, pkey, pkind, ptime, keys[a:b],
                     times[r], thr[a:b], hits[a:b], depths[a:b], touches[a:b])  # fmt: skip
        if c < 0:
            return r
        counts[r] = c
    return -1


@njit(cache=True, nogil=True)
def compact(meta, ftk, ftv, ltk, ltv, pkey, pkind, ptime) -> np.int64:
    """Renumber the live markers at and above the floor to 0..L-1, in order, in place, and
    update the tables; returns L (the Fenwick tree must be rebuilt). O(U)."""
    t = meta[T]
    j = 0
    timed = ptime.shape[0] > 0
    for q in range(meta[FLOOR], t):
        kind = pkind[q]
        if kind == 0:
            continue
        key = pkey[q]
        pkey[j] = key
        pkind[j] = kind
        if timed:
            ptime[j] = ptime[q]
        if kind == FULL:
            put(ftk, ftv, key, j)
        else:
            put(ltk, ltv, key, j)
        j += 1
    for q in range(j, t):
        pkind[q] = 0
    meta[T] = j
    meta[FLOOR] = 0
    return j


@njit(cache=True, nogil=True)
def build_fenwick(meta, fen, fcnt, pkind) -> None:
    """The Fenwick trees of the charges and of the Full markers among the live markers
    below T, in O(size): every node adds itself to its parent."""
    size = fen.shape[0]
    t = meta[T]
    fb, lb = meta[FB], meta[LB]
    for q in range(size):
        kind = pkind[q] if q < t else 0
        fen[q] = fb if kind == FULL else (lb if kind == LIN else 0)
        fcnt[q] = 1 if kind == FULL else 0
    for q in range(1, size + 1):
        parent = q + (q & -q)
        if parent <= size:
            fen[parent - 1] += fen[q - 1]
            fcnt[parent - 1] += fcnt[q - 1]


@njit(cache=True, nogil=True)
def resident(meta, fen, fcnt, capacities, out) -> None:
    """Full objects resident now in a cache of each capacity (bytes): those whose byte
    depth is <= it, i.e. at positions from the smallest q with ``prefix(q) >= total - C``
    (and the floor) on. O(log U) per capacity."""
    t = meta[T]
    total = fenwick_prefix(fen, t)
    full = fenwick_prefix(fcnt, t)
    for i in range(capacities.shape[0]):
        target = total - capacities[i]
        q = np.int64(0)
        if target > 0:  # the largest index with prefix < target, plus one
            q = fenwick_search(fen, target) + 1
        if q < meta[FLOOR]:
            q = meta[FLOOR]
        out[i] = full - fenwick_prefix(fcnt, q) if q < t else 0


@njit(cache=True, nogil=True)
def rehash(tk, tv, new_tk, new_tv) -> None:
    for i in range(tk.shape[0]):
        if tv[i] != EMPTY:
            put(new_tk, new_tv, tk[i], tv[i])


@njit(cache=True, nogil=True)
def live(meta, pkey, pkind, ptime, keys, kinds, times) -> np.int64:
    """Copy the live markers (floor..T) in order; returns how many."""
    j = 0
    timed = ptime.shape[0] > 0
    for q in range(meta[FLOOR], meta[T]):
        if pkind[q] != 0:
            keys[j] = pkey[q]
            kinds[j] = pkind[q]
            times[j] = ptime[q] if timed else 0
            j += 1
    return j
