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
from numba import njit

from litehit_core.errors import InvalidRequestError
from litehit_core.kernels import fenwick_add, fenwick_prefix, home_slot, popcount
from litehit_core.lite_hit import MODEL
from litehit_core.model import HitCurveSegment, RequestFact, check_lru_parameters
from litehit_core.state import EngineState, validated_arrays

__all__ = ["BatchFacts", "CompactLiteHit", "warm_up"]

# meta slots
_T, _CAP, _PEXP, _LIVE, _DEAD, _NOW, _TTL, _LIMIT = 0, 1, 2, 3, 4, 5, 6, 7
_EXP, _DROP, _NEP, _ENTRIES, _N = 8, 9, 10, 11, 12
_META = 13
_INT64_MIN = np.iinfo(np.int64).min
_SLACK = 1 << 14  # positions of slack at each resize
_MIN_TABLE = 1 << 10
_MAX_LOAD_NUM, _MAX_LOAD_DEN = 7, 10  # rebuild the table past a load of 0.7
_MAX_POSITIONS = (1 << 32) - 2  # table values are uint32 position + 1


# --------------------------------------------------------------------------- numba core


@njit(cache=True, nogil=True, inline="always")
def _find(tv: np.ndarray, kbp: np.ndarray, key: np.int64) -> np.int64:
    """The slot holding ``key`` or the empty slot ending its probe sequence. O(1) expected."""
    mask = tv.shape[0] - 1
    i = home_slot(key, mask)
    while True:
        v = tv[i]
        if v == 0 or kbp[np.int64(v) - 1] == key:
            return i
        i = (i + 1) & mask


@njit(cache=True, nogil=True, inline="always")
def _dead_before(meta, dead, fen, p: np.int64) -> np.int64:
    """Dead markers at positions < p. O(log(U / 64))."""
    if p >= meta[_T]:
        return meta[_DEAD]
    w = p >> 6
    low = (np.uint64(1) << np.uint64(p & 63)) - np.uint64(1)
    return fenwick_prefix(fen, w) + popcount(dead[w] & low)


@njit(cache=True, nogil=True)
def _advance(meta, dead, fen, new: np.int64, dropped: bool) -> None:
    """Move the boundary up to ``new``; the live markers it passes expire (or drop)."""
    old = meta[_PEXP]
    if new <= old:
        return
    gone = (new - old) - (_dead_before(meta, dead, fen, new) - _dead_before(meta, dead, fen, old))
    meta[_LIVE] -= gone
    meta[_DROP if dropped else _EXP] += gone
    meta[_PEXP] = new


@njit(cache=True, nogil=True)
def _expire(meta, dead, fen, ep_pos, ep_time, now: np.int64) -> None:
    """Clamp the clock to be monotone and expire every epoch whose age is >= ttl."""
    if now < meta[_NOW]:
        now = meta[_NOW]
    meta[_NOW] = now
    nep = meta[_NEP]
    i = np.searchsorted(ep_time[:nep], now - meta[_TTL], side="right")
    _advance(meta, dead, fen, ep_pos[i] if i < nep else meta[_T], False)


@njit(cache=True, nogil=True)
def _drop(meta, dead, fen, excess: np.int64) -> None:
    """Move the boundary past the ``excess`` least recent live markers (0 < excess <=
    live). Whole words by popcount, then bit by bit in the last: O(1 + passed / 64)."""
    p = meta[_PEXP]
    t = meta[_T]
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
    meta[_PEXP] = p
    meta[_LIVE] -= excess
    meta[_DROP] += excess


@njit(cache=True, nogil=True)
def _dedupe(keys, order) -> np.int64:
    """Keep the first occurrence of each key, in order, in place; returns the count. The
    sorted copy costs O(n log n) and is skipped for n < 2."""
    n = keys.shape[0]
    if n < 2:
        return n
    srt = np.sort(keys)
    for j in range(1, n):
        if srt[j] == srt[j - 1]:
            break
    else:
        return n
    idx = np.argsort(keys, kind="mergesort")  # stable: the first occurrence leads
    keep = order[:n]
    keep[:] = 1
    for j in range(1, n):
        if keys[idx[j]] == keys[idx[j - 1]]:
            keep[idx[j]] = 0
    w = 0
    for j in range(n):
        if keep[j]:
            keys[w] = keys[j]
            w += 1
    return w


@njit(cache=True, nogil=True)
def _request(meta, tv, kbp, dead, fen, ep_pos, ep_time, keys, now, olds, slots, seg_start,
             seg_len) -> np.int64:  # fmt: skip
    """Replay one request (``keys`` head first, deduplicated in place; its length is left
    in ``meta[_N]``): read depths on the snapshot, write the hit curve's segments to
    ``seg_start``/``seg_len`` (returns how many), then touch the blocks tail first.
    The caller made room: ``n`` free positions, table entries and one epoch."""
    if meta[_TTL] > 0:
        _expire(meta, dead, fen, ep_pos, ep_time, now)
        now = meta[_NOW]
    n = _dedupe(keys, olds)
    meta[_N] = n
    pexp = meta[_PEXP]
    t = meta[_T]
    # read: the cached prefix is keys[:m] (up to the first untracked block)
    m = n
    for j in range(n):
        s = _find(tv, kbp, keys[j])
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
    total_dead = meta[_DEAD]
    for j in range(m):
        p = olds[j]
        if j and p == olds[j - 1] - 1:
            d += 1  # consecutive positions: one deeper, no rank needed
        else:
            d = (t - p) - (total_dead - _dead_before(meta, dead, fen, p))
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
            meta[_DEAD] += 1
        else:
            fresh += 1
    # tail first: key j gets t + n - 1 - j, so the head ends most recent
    for j in range(n):
        q = t + n - 1 - j
        k = keys[j]
        kbp[q] = k
        if olds[j] == -1:
            slots[j] = _find(tv, kbp, k)  # earlier inserts may have taken the old slot
            meta[_ENTRIES] += 1
        tv[slots[j]] = np.uint32(q + 1)
    meta[_T] = t + n
    meta[_LIVE] += fresh
    if meta[_TTL] > 0 and n:
        nep = meta[_NEP]
        if nep == 0 or ep_time[nep - 1] != now:
            ep_pos[nep] = t
            ep_time[nep] = now
            meta[_NEP] = nep + 1
    limit = meta[_LIMIT]
    if limit > 0 and meta[_LIVE] > limit:
        _drop(meta, dead, fen, meta[_LIVE] - limit)
    return nseg


@njit(cache=True, nogil=True)
def _batch(meta, tv, kbp, dead, fen, ep_pos, ep_time, keys, offsets, times, first, olds, slots,
           totals, uniques, seg_offsets, seg_start, seg_len) -> np.int64:  # fmt: skip
    """:func:`_request` for requests ``first, first + 1, ...`` (request r is
    ``keys[offsets[r]:offsets[r + 1]]`` at ``times[r]``): its deduplicated length goes to
    ``totals[r]``, the blocks tracked after it to ``uniques[r]``, its segments to
    ``seg_start``/``seg_len`` from ``seg_offsets[r]`` on (``seg_offsets[r + 1]`` is set).
    Returns -1 when done, else the first request that needs room (positions, table, an
    epoch or scratch) first; nothing of it was changed."""
    cap = kbp.shape[0]
    load = tv.shape[0] * _MAX_LOAD_NUM // _MAX_LOAD_DEN
    for r in range(first, offsets.shape[0] - 1):
        a = offsets[r]
        b = offsets[r + 1]
        n = b - a
        if (
            meta[_T] + n > cap
            or meta[_ENTRIES] + n > load
            or meta[_NEP] >= ep_pos.shape[0]
            or n > olds.shape[0]
        ):
            return r
        at = seg_offsets[r]
        nseg = _request(meta, tv, kbp, dead, fen, ep_pos, ep_time, keys[a:b], times[r], olds,
                        slots, seg_start[at:], seg_len[at:])  # fmt: skip
        totals[r] = meta[_N]
        uniques[r] = meta[_LIVE]
        seg_offsets[r + 1] = at + nseg
    return -1


@njit(cache=True, nogil=True)
def _compact(meta, kbp, dead, ep_pos, ep_time) -> None:
    """Renumber the live markers at or above the boundary to 0..L-1 in order (keys moved
    down in place, epochs renumbered in place); the caller clears ``dead``/``fen`` and
    rebuilds the table. O(U + E)."""
    t = meta[_T]
    nep = meta[_NEP]
    timed = meta[_TTL] > 0
    w = 0
    e = 0  # the epoch of position p: the last with ep_pos <= p
    out = 0
    last_time = np.int64(0)
    for p in range(meta[_PEXP], t):
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
    meta[_T] = w
    meta[_PEXP] = 0
    meta[_DEAD] = 0
    meta[_NEP] = out
    meta[_LIVE] = w


@njit(cache=True, nogil=True)
def _remap(meta, tv, dead) -> None:
    """Rewrite every table entry to the position :func:`_compact` will give it (``p -
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
def _fill(meta, tv, kbp, dead) -> np.int64:
    """Insert every live position at or above the boundary into the empty table ``tv``;
    returns how many keys were already there (duplicates, left out). O(U)."""
    dups = 0
    entries = 0
    for p in range(meta[_PEXP], meta[_T]):
        if (dead[p >> 6] >> np.uint64(p & 63)) & np.uint64(1):
            continue
        s = _find(tv, kbp, kbp[p])
        if tv[s]:
            dups += 1
            continue
        tv[s] = np.uint32(p + 1)
        entries += 1
    meta[_ENTRIES] = entries
    return dups


@njit(cache=True, nogil=True)
def _build_fenwick(dead, fen) -> None:
    """Fenwick tree of the per-word dead counts, in O(U / 64)."""
    m = fen.shape[0]
    for w in range(m):
        fen[w] = popcount(dead[w])
    for i in range(1, m + 1):
        j = i + (i & -i)
        if j <= m:
            fen[j - 1] += fen[i - 1]


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
            for n, a, b in zip(self.totals.tolist(), off, off[1:])
        ]


def _curve(starts: list[int], lens: list[int]) -> tuple[HitCurveSegment, ...]:
    """A fact's hit curve from its segments' starts and lengths. O(segments)."""
    new = tuple.__new__
    return tuple([new(HitCurveSegment, s) for s in zip(starts, lens)])


class CompactLiteHit:
    """Exact prefix-hit engine for an LRU of every capacity, in compact compiled arrays.

    The same parameters, facts, states, counters and errors as
    :class:`~litehit_core.lite_hit.LiteHit` (``ttl_ns`` block lifetime in ns, 0 = none;
    ``max_tracked_blocks`` most tracked blocks, 0 = unlimited); see the module docstring
    for the layout and costs. Up to 2**31 tracked blocks.
    """

    __slots__ = ("_meta", "_tv", "_kbp", "_dead", "_fen", "_ep_pos", "_ep_time", "_olds",
                 "_slots", "_seg_start", "_seg_len")  # fmt: skip

    def __init__(self, ttl_ns: int = 0, max_tracked_blocks: int = 0) -> None:
        check_lru_parameters(ttl_ns, max_tracked_blocks)
        self._meta = np.zeros(_META, np.int64)
        self._meta[_TTL] = ttl_ns
        self._meta[_LIMIT] = max_tracked_blocks
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget every block and counter (a cold cache). O(1) plus the fresh arrays."""
        meta = self._meta
        ttl, limit = int(meta[_TTL]), int(meta[_LIMIT])
        meta[:] = 0
        meta[_TTL] = ttl
        meta[_LIMIT] = limit
        meta[_NOW] = _INT64_MIN
        self._kbp = np.empty(_SLACK, np.int64)
        self._positions(_SLACK)
        self._tv = np.zeros(_MIN_TABLE, np.uint32)
        self._ep_pos = np.zeros(16 if ttl else 1, np.int64)
        self._ep_time = np.zeros(16 if ttl else 1, np.int64)
        self._scratch(64)

    def _positions(self, size: int) -> None:
        """Resize the position space to ``size`` (a multiple of 64) with cleared dead bits."""
        if self._kbp.shape[0] != size:
            self._kbp.resize(size, refcheck=False)  # realloc: no second copy held
        self._meta[_CAP] = size
        self._dead = np.zeros(size >> 6, np.uint64)
        self._fen = np.zeros(size >> 6, np.int64)

    def _scratch(self, n: int) -> None:
        self._olds = np.empty(n, np.int64)
        self._slots = np.empty(n, np.int64)
        self._seg_start = np.empty(n, np.int64)
        self._seg_len = np.empty(n, np.int64)

    @property
    def expired_blocks(self) -> int:
        """Cumulative count of blocks whose TTL lapsed while they were tracked."""
        return int(self._meta[_EXP])

    @property
    def dropped_blocks(self) -> int:
        """Cumulative count of blocks dropped (least recent first) by ``max_tracked_blocks``."""
        return int(self._meta[_DROP])

    def current_unique_blocks(self) -> int:
        """Distinct blocks tracked now (TTL-expired and dropped excluded). O(1)."""
        return int(self._meta[_LIVE])

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
        nseg = _request(self._meta, self._tv, self._kbp, self._dead, self._fen, self._ep_pos,
                        self._ep_time, keys, now_ns, self._olds, self._slots, self._seg_start,
                        self._seg_len)  # fmt: skip
        if not nseg:
            return RequestFact((), int(self._meta[_N]))
        return RequestFact(
            _curve(self._seg_start[:nseg].tolist(), self._seg_len[:nseg].tolist()),
            int(self._meta[_N]),
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
        r = 0
        while r >= 0 and r < requests:
            self._room(int(offsets[r + 1] - offsets[r]))
            r = _batch(self._meta, self._tv, self._kbp, self._dead, self._fen, self._ep_pos,
                       self._ep_time, keys, offsets, times, r, self._olds, self._slots, totals,
                       uniques, seg_offsets, seg_start, seg_len)  # fmt: skip
        return BatchFacts(totals, uniques, seg_offsets, seg_start, seg_len)

    def _room(self, n: int) -> None:
        """Make room for a request of ``n`` blocks: positions, table entries, an epoch and
        scratch. Amortised O(1) per position (see the module docstring)."""
        meta = self._meta
        if n > self._olds.shape[0]:
            self._scratch(max(n, 2 * self._olds.shape[0]))
        if meta[_T] + n > meta[_CAP]:
            self._compact(n)
        elif (meta[_ENTRIES] + n) * _MAX_LOAD_DEN > self._tv.shape[0] * _MAX_LOAD_NUM:
            self._rebuild(int(meta[_LIVE]) + n)
        nep = int(meta[_NEP])
        if nep >= self._ep_pos.shape[0]:
            self._ep_pos = np.concatenate((self._ep_pos, np.zeros(nep, np.int64)))
            self._ep_time = np.concatenate((self._ep_time, np.zeros(nep, np.int64)))

    def _compact(self, n: int) -> None:
        """Renumber live markers to 0..L-1 and size the space to 2(L + n) + slack. The
        table is remapped in place when it holds exactly the live keys (no TTL or limit has
        moved the boundary: every unbounded engine), else rebuilt, and rebuilt larger when
        ``n`` more keys would pass its load. O(U + S)."""
        meta = self._meta
        remapped = meta[_PEXP] == 0 and meta[_ENTRIES] == meta[_LIVE]
        if remapped:
            _remap(meta, self._tv, self._dead)
        _compact(meta, self._kbp, self._dead, self._ep_pos, self._ep_time)
        need = int(meta[_T]) + n
        if need > _MAX_POSITIONS // 2:
            raise InvalidRequestError(
                f"a CompactLiteHit tracks at most {_MAX_POSITIONS // 2} blocks, needs {need}"
            )
        size = ((2 * need + _SLACK) | 63) + 1
        if 2 * need > meta[_CAP] or 4 * need + _SLACK < meta[_CAP]:
            self._positions(size)
        else:
            self._dead.fill(0)
            self._fen.fill(0)
        if not remapped or need * _MAX_LOAD_DEN > self._tv.shape[0] * _MAX_LOAD_NUM:
            self._rebuild(need)

    def _rebuild(self, entries: int) -> None:
        """A fresh table for ``entries`` keys (load <= 0.5) filled from the live positions;
        the old table is freed first. O(U + S)."""
        size = _MIN_TABLE
        while size < 2 * entries:
            size <<= 1
        self._tv = None  # type: ignore[assignment]
        self._tv = np.zeros(size, np.uint32)
        _fill(self._meta, self._tv, self._kbp, self._dead)

    # ------------------------------------------------------------- snapshots
    def export_state(self) -> EngineState:
        """The same :class:`EngineState` as ``LiteHit.export_state``: tracked keys least
        recent first, access times as epochs, clock and counters. O(U) numpy work."""
        meta = self._meta
        pexp, t = int(meta[_PEXP]), int(meta[_T])
        bits = np.unpackbits(self._dead.view(np.uint8), bitorder="little")[pexp:t]
        present = bits == 0
        keys = self._kbp[pexp:t][present]
        times = None
        if meta[_TTL] and len(keys):
            ordered = np.flatnonzero(present) + pexp
            nep = int(meta[_NEP])
            epoch = np.searchsorted(self._ep_pos[:nep], ordered, "right") - 1
            times = self._ep_time[:nep][epoch]
        return EngineState.exported(
            MODEL, keys, times, int(meta[_NOW]), self.expired_blocks, self.dropped_blocks
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
        engine._positions(((2 * n + _SLACK) | 63) + 1)
        engine._kbp[:n] = keys
        meta[_T] = n
        size = _MIN_TABLE
        while size < 2 * n:
            size <<= 1
        engine._tv = np.zeros(size, np.uint32)
        dups = _fill(meta, engine._tv, engine._kbp, engine._dead)
        if dups:
            raise InvalidRequestError(
                f"state.keys must be distinct, got {dups} duplicate(s) in {n} keys"
            )
        meta[_LIVE] = n
        if ttl_ns:
            epochs = len(starts)
            engine._ep_pos = np.concatenate((starts, np.zeros(epochs + 16, np.int64)))
            engine._ep_time = np.concatenate((times, np.zeros(epochs + 16, np.int64)))
            meta[_NEP] = epochs
        meta[_NOW] = int(state.now_ns)
        meta[_EXP] = int(state.expired_blocks)
        meta[_DROP] = int(state.dropped_blocks)
        if max_tracked_blocks and n > max_tracked_blocks:
            _drop(meta, engine._dead, engine._fen, n - max_tracked_blocks)
        return engine

    # ------------------------------------------------------------- invariants
    def _check(self) -> None:
        """Verify every internal invariant from scratch (tests call this). O(U + S)."""
        meta = self._meta
        t, cap, pexp = int(meta[_T]), int(meta[_CAP]), int(meta[_PEXP])
        assert 0 <= pexp <= t <= cap == self._kbp.shape[0] == 64 * self._dead.shape[0]
        bits = np.unpackbits(self._dead.view(np.uint8), bitorder="little")
        assert not bits[t:].any(), "a dead bit at or beyond next"
        assert int(bits.sum()) == meta[_DEAD], "dead count wrong"
        fen = np.zeros_like(self._fen)
        _build_fenwick(self._dead, fen)
        assert np.array_equal(fen, self._fen), "Fenwick tree wrong"
        live = np.flatnonzero(bits[pexp:t] == 0) + pexp
        assert len(live) == meta[_LIVE], (len(live), meta[_LIVE])
        limit = int(meta[_LIMIT])
        assert not limit or len(live) <= limit, "more tracked than the limit"
        keys = self._kbp[live]
        assert len(np.unique(keys)) == len(keys), "a key has two live markers"
        tv = self._tv
        size = tv.shape[0]
        assert size & (size - 1) == 0 and size >= _MIN_TABLE
        occupied = tv[tv != 0].astype(np.int64) - 1
        assert len(occupied) == meta[_ENTRIES], "table entry count wrong"
        assert meta[_ENTRIES] * _MAX_LOAD_DEN <= size * _MAX_LOAD_NUM, "table over its load"
        assert np.all(occupied < t), "a table entry beyond next"
        assert set(live.tolist()) <= set(occupied.tolist()), "a live marker not in the table"
        above = occupied[occupied >= pexp]
        assert not bits[above].any(), "the table points at a dead marker"
        nep = int(meta[_NEP])
        ep_pos, ep_time = self._ep_pos[:nep], self._ep_time[:nep]
        assert np.all(np.diff(ep_pos) > 0) and np.all(np.diff(ep_time) > 0)
        if meta[_TTL] and len(live):
            assert nep and ep_pos[0] <= live[0] and ep_time[-1] <= meta[_NOW]


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
