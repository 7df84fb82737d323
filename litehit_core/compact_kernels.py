"""The compiled kernels of :class:`~litehit_core.compact_lite_hit.CompactLiteHit`: the
open-addressing table of uint32 ``position + 1`` that compares keys through the
key-by-position array, the dead bits with a Fenwick tree per 64-position word, the
per-request and batch replay loops that emit ramp segments, expiry, dropping, compaction
and table rebuilds. ``meta`` is an int64 array of the engine's scalars at the slots named
here. Numba, ``cache=True, nogil=True``; costs are in each kernel's docstring or in the
engine's.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.kernels import fenwick_add, fenwick_prefix, home_slot, popcount

# meta slots
T, CAP, PEXP, LIVE, DEAD, NOW, TTL, LIMIT = 0, 1, 2, 3, 4, 5, 6, 7
EXP, DROP, NEP, ENTRIES, N = 8, 9, 10, 11, 12
META = 13
INT64_MIN = np.iinfo(np.int64).min
SLACK = 1 << 14  # positions of slack at each resize
MIN_TABLE = 1 << 10
MAX_LOAD_NUM, MAX_LOAD_DEN = 7, 10  # rebuild the table past a load of 0.7
MAX_POSITIONS = (1 << 32) - 2  # table values are uint32 position + 1


# --------------------------------------------------------------------------- numba core


@njit(cache=True, nogil=True, inline="always")
def find(tv: np.ndarray, kbp: np.ndarray, key: np.int64) -> np.int64:
    """The slot holding ``key`` or the empty slot ending its probe sequence. O(1) expected."""
    mask = tv.shape[0] - 1
    i = home_slot(key, mask)
    while True:
        v = tv[i]
        if v == 0 or kbp[np.int64(v) - 1] == key:
            return i
        i = (i + 1) & mask


@njit(cache=True, nogil=True, inline="always")
def dead_before(meta, dead, fen, p: np.int64) -> np.int64:
    """Dead markers at positions < p. O(log(U / 64))."""
    if p >= meta[T]:
        return meta[DEAD]
    w = p >> 6
    low = (np.uint64(1) << np.uint64(p & 63)) - np.uint64(1)
    return fenwick_prefix(fen, w) + popcount(dead[w] & low)


@njit(cache=True, nogil=True)
def advance(meta, dead, fen, new: np.int64, dropped: bool) -> None:
    """Move the boundary up to ``new``; the live markers it passes expire (or drop)."""
    old = meta[PEXP]
    if new <= old:
        return
    gone = (new - old) - (dead_before(meta, dead, fen, new) - dead_before(meta, dead, fen, old))
    meta[LIVE] -= gone
    meta[DROP if dropped else EXP] += gone
    meta[PEXP] = new


@njit(cache=True, nogil=True)
def expire(meta, dead, fen, ep_pos, ep_time, now: np.int64) -> None:
    """Clamp the clock to be monotone and expire every epoch whose age is >= ttl."""
    if now < meta[NOW]:
        now = meta[NOW]
    meta[NOW] = now
    nep = meta[NEP]
    i = first_after(ep_time, nep, now - meta[TTL])
    advance(meta, dead, fen, ep_pos[i] if i < nep else meta[T], False)


@njit(cache=True, nogil=True)
def drop(meta, dead, fen, excess: np.int64) -> None:
    """Move the boundary past the ``excess`` least recent live markers (0 < excess <=
    live). Whole words by popcount, then bit by bit in the last: O(1 + passed / 64)."""
    p = meta[PEXP]
    t = meta[T]
    left = excess
    while True:
        w = p >> 6
        end = min((w + 1) << 6, t)
        live = (end - p) - popcount(dead[w] >> np.uint64(p & 63))
        if live >= left:
            break
        left -= live
        p = end
    while left:
        if not (dead[p >> 6] >> np.uint64(p & 63)) & np.uint64(1):
            left -= 1
        p += 1
    meta[PEXP] = p
    meta[LIVE] -= excess
    meta[DROP] += excess


@njit(cache=True, nogil=True)
def zero(a) -> None:
    """Write 0 to every element of ``a`` (without the GIL, unlike ``ndarray.fill``). O(n)."""
    for i in range(a.shape[0]):
        a[i] = 0


@njit(cache=True, nogil=True)
def distinct_estimate(keys, bits) -> np.int64:
    """About how many distinct values ``keys`` holds (linear counting over the
    ``64 x len(bits)`` bits given, cleared; a power of two of at least 8 bits a key keeps
    the error near 1 %); never more than ``len(keys)``. O(n)."""
    n = keys.shape[0]
    words = 1
    while words * 2 <= bits.shape[0]:
        words *= 2
    m = words * 64
    for j in range(n):
        h = home_slot(keys[j], m - 1)
        bits[h >> 6] |= np.uint64(1) << np.uint64(h & 63)
    ones = np.int64(0)
    for w in range(words):
        ones += popcount(bits[w])
    zeros = m - ones
    if zeros == 0:
        return n
    estimate = np.int64(-m * np.log(zeros / m) * 1.02) + 64
    return min(n, estimate)


@njit(cache=True, nogil=True)
def dedupe(keys, table) -> np.int64:
    """Keep the first occurrence of each key, in order, in place; returns the count.
    ``table`` (at least twice ``len(keys)`` slots, rounded up to a power of two) is scratch
    for a small open-addressing set of the kept keys' new positions + 1. O(n) expected;
    no sorting (whose library code would cost seconds of compilation)."""
    n = keys.shape[0]
    if n < 2:
        return n
    size = 4
    while size < 2 * n:
        size *= 2
    mask = size - 1
    table[:size] = 0
    w = 0
    for j in range(n):
        key = keys[j]
        i = home_slot(key, mask)
        while True:
            v = table[i]
            if v == 0:
                keys[w] = key
                w += 1
                table[i] = w
                break
            if keys[v - 1] == key:
                break
            i = (i + 1) & mask
    return w


@njit(cache=True, nogil=True, inline="always")
def first_after(values, n: np.int64, x: np.int64) -> np.int64:
    """The first index i < n with ``values[i] > x`` (``n`` if none); ``values[:n]`` sorted.
    O(log n)."""
    lo = np.int64(0)
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def request(meta, tv, kbp, dead, fen, ep_pos, ep_time, keys, now, olds, slots, table,
            seg_start, seg_len) -> np.int64:  # fmt: skip
    """Replay one request (``keys`` head first, deduplicated in place; its length is left
    in ``meta[N]``): read depths on the snapshot, write the hit curve's segments to
    ``seg_start``/``seg_len`` (returns how many), then touch the blocks tail first.
    The caller made room: ``n`` free positions, table entries and one epoch."""
    if meta[TTL] > 0:
        expire(meta, dead, fen, ep_pos, ep_time, now)
        now = meta[NOW]
    n = dedupe(keys, table)
    meta[N] = n
    pexp = meta[PEXP]
    t = meta[T]
    # read: the cached prefix is keys[:m] (up to the first untracked block)
    m = n
    for j in range(n):
        s = find(tv, kbp, keys[j])
        slots[j] = s
        v = np.int64(tv[s])
        if v == 0:
            olds[j] = -1  # not in the table
        elif v - 1 < pexp:
            olds[j] = -2  # in the table but expired or dropped
        else:
            olds[j] = v - 1
        if olds[j] < 0 and m == n:
            m = j
    nseg = 0
    last = np.int64(0)  # the previous block's required capacity
    d = np.int64(0)
    total_dead = meta[DEAD]
    for j in range(m):
        p = olds[j]
        if j and p == olds[j - 1] - 1:
            d += 1  # consecutive positions: one deeper, no rank needed
        else:
            d = (t - p) - (total_dead - dead_before(meta, dead, fen, p))
        if nseg and (d <= last + 1):
            seg_len[nseg - 1] += 1  # never optimistic: at least one past the previous
            last += 1
        else:
            seg_start[nseg] = d
            seg_len[nseg] = 1
            nseg += 1
            last = d
    # commit: old markers die (only now: every depth was read on the snapshot)
    word = np.int64(-1)
    count = np.int64(0)
    for j in range(n):
        p = olds[j]
        if p < 0:
            continue
        w = p >> 6
        dead[w] |= np.uint64(1) << np.uint64(p & 63)
        if w != word:
            if count:
                fenwick_add(fen, word, count)
            word = w
            count = 0
        count += 1
    if count:
        fenwick_add(fen, word, count)
    fresh = 0
    for j in range(n):
        p = olds[j]
        if p >= 0:
            meta[DEAD] += 1
        else:
            fresh += 1
    # tail first: key j gets t + n - 1 - j, so the head ends most recent
    for j in range(n):
        q = t + n - 1 - j
        k = keys[j]
        kbp[q] = k
        if olds[j] == -1:
            if tv[slots[j]] != 0:  # an earlier insert took the empty slot the read found
                slots[j] = find(tv, kbp, k)
            meta[ENTRIES] += 1
        tv[slots[j]] = np.uint32(q + 1)
    meta[T] = t + n
    meta[LIVE] += fresh
    if meta[TTL] > 0 and n:
        nep = meta[NEP]
        if nep == 0 or ep_time[nep - 1] != now:
            ep_pos[nep] = t
            ep_time[nep] = now
            meta[NEP] = nep + 1
    limit = meta[LIMIT]
    if limit > 0 and meta[LIVE] > limit:
        drop(meta, dead, fen, meta[LIVE] - limit)
    return nseg


@njit(cache=True, nogil=True)
def batch(meta, tv, kbp, dead, fen, ep_pos, ep_time, keys, offsets, times, first, olds, slots,
          table, totals, uniques, seg_offsets, seg_start, seg_len) -> np.int64:  # fmt: skip
    """:func:`request` for requests ``first, first + 1, ...`` (request r is
    ``keys[offsets[r]:offsets[r + 1]]`` at ``times[r]``): its deduplicated length goes to
    ``totals[r]``, the blocks tracked after it to ``uniques[r]``, its segments to
    ``seg_start``/``seg_len`` from ``seg_offsets[r]`` on (``seg_offsets[r + 1]`` is set).
    Returns -1 when done, else the first request that needs room (positions, table, an
    epoch or scratch) first; nothing of it was changed."""
    cap = kbp.shape[0]
    load = tv.shape[0] * MAX_LOAD_NUM // MAX_LOAD_DEN
    for r in range(first, offsets.shape[0] - 1):
        a = offsets[r]
        b = offsets[r + 1]
        n = b - a
        if (
            meta[T] + n > cap
            or meta[ENTRIES] + n > load
            or meta[NEP] >= ep_pos.shape[0]
            or n > olds.shape[0]
        ):
            return r
        at = seg_offsets[r]
        nseg = request(meta, tv, kbp, dead, fen, ep_pos, ep_time, keys[a:b], times[r], olds,
                       slots, table, seg_start[at:], seg_len[at:])  # fmt: skip
        totals[r] = meta[N]
        uniques[r] = meta[LIVE]
        seg_offsets[r + 1] = at + nseg
    return -1


@njit(cache=True, nogil=True)
def compact(meta, kbp, dead, ep_pos, ep_time) -> None:
    """Renumber the live markers at or above the boundary to 0..L-1 in order (keys moved
    down in place, epochs renumbered in place); the caller clears ``dead``/``fen`` and
    rebuilds the table. O(U + E)."""
    t = meta[T]
    nep = meta[NEP]
    timed = meta[TTL] > 0
    w = 0
    e = 0  # the epoch of position p: the last with ep_pos <= p
    out = 0
    last_time = np.int64(0)
    for p in range(meta[PEXP], t):
        if (dead[p >> 6] >> np.uint64(p & 63)) & np.uint64(1):
            continue
        kbp[w] = kbp[p]
        if timed:
            while e + 1 < nep and ep_pos[e + 1] <= p:
                e += 1
            if out == 0 or ep_time[e] != last_time:
                last_time = ep_time[e]
                ep_pos[out] = w
                ep_time[out] = last_time
                out += 1
        w += 1
    meta[T] = w
    meta[PEXP] = 0
    meta[DEAD] = 0
    meta[NEP] = out
    meta[LIVE] = w


@njit(cache=True, nogil=True)
def remap(meta, tv, dead) -> None:
    """Rewrite every table entry to the position :func:`compact` will give it (``p -
    dead markers before p``), in place: the slots stay where they are. Only for a table
    that holds no key below the boundary (the boundary at 0, an entry per live key). One
    sequential pass over the table plus O(U / 64) for the dead counts per word; far
    cheaper than re-inserting every key at random slots."""
    words = dead.shape[0]
    before = np.empty(words, np.int64)  # dead markers before each word
    total = np.int64(0)
    for w in range(words):
        before[w] = total
        total += popcount(dead[w])
    for i in range(tv.shape[0]):
        v = np.int64(tv[i])
        if v:
            p = v - 1
            w = p >> 6
            low = (np.uint64(1) << np.uint64(p & 63)) - np.uint64(1)
            tv[i] = np.uint32(p - before[w] - popcount(dead[w] & low) + 1)


@njit(cache=True, nogil=True)
def fill(meta, tv, kbp, dead) -> np.int64:
    """Insert every live position at or above the boundary into the empty table ``tv``;
    returns how many keys were already there (duplicates, left out). O(U)."""
    dups = 0
    entries = 0
    for p in range(meta[PEXP], meta[T]):
        if (dead[p >> 6] >> np.uint64(p & 63)) & np.uint64(1):
            continue
        s = find(tv, kbp, kbp[p])
        if tv[s]:
            dups += 1
            continue
        tv[s] = np.uint32(p + 1)
        entries += 1
    meta[ENTRIES] = entries
    return dups


@njit(cache=True, nogil=True)
def build_fenwick(dead, fen) -> None:
    """Fenwick tree of the per-word dead counts, in O(U / 64)."""
    m = fen.shape[0]
    for w in range(m):
        fen[w] = popcount(dead[w])
    for i in range(1, m + 1):
        j = i + (i & -i)
        if j <= m:
            fen[j - 1] += fen[i - 1]
