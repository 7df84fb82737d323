"""The capacity-independent LRU hit engine.

One :class:`LiteHit` replays block keys once and, per request, returns a
:class:`~litehit_core.model.RequestFact` that answers "how many head blocks hit?" for an
LRU of *every* capacity at once. It never sees a capacity.

How it works (LRU stack inclusion). Every touch of a block gets a fresh *position* from
an ever-increasing counter; ``_pos[key]`` is the block's latest position (its *live
marker*); older positions of re-touched blocks are *dead*. A block whose marker is at
``p`` sits at depth ``d = #live markers >= p`` (1 = most recent) and is resident in an
LRU of capacity ``C`` exactly when ``d <= C``. Depths are read on the state *before* the
request (snapshot); the request is then submitted tail first so its head ends most recent.

Speed comes from runs: blocks of one chain are submitted together and so hold
consecutive positions. Inside such a run depths grow by exactly one per block, so a rank
query is needed only at a run break, and dead-marking is done per run. Ranks use
``depth(p) = (t - p) - dead_in[p, t)``: new markers are appended live at the end and
cost nothing; dead markers are kept as per-bucket bit masks (``W`` positions a bucket)
with dead counts per bucket and per super-bucket (``SW`` buckets), so ``dead_in[p, t)``
is one popcount plus two C-speed suffix sums: at most ``SW`` bucket counts and
``U / (W * SW)`` super-bucket counts (a few dozen for millions of live blocks). (A
Fenwick tree over buckets was measured slower: its log-depth loops run in the
interpreter.) A request costs O(n) C-speed dict and list work plus O(runs) Python
operations.

Compaction renumbers live markers 0..L-1 when stale positions exceed twice the live ones
plus a slack, so U stays O(live blocks). Without TTL or a limit no key is ever dropped: any
larger capacity may still hit it.

TTL (``ttl_ns > 0``): a block survives while ``now - last_access < ttl``. Access times are
non-decreasing along positions (``now`` is clamped monotone), so expiry is one boundary
position: markers below it are expired (a miss at every capacity, truncating the prefix
like a cold block) and never inflate the depth of survivors. One replay is exact for
"this TTL x every capacity". Expired keys are physically dropped at compaction.

A limit (``max_tracked_blocks = K > 0``) moves the same boundary: after each request the
least recent live markers beyond K are put below it, so exactly K blocks stay tracked —
the contents of an LRU of capacity K. Depths of the survivors do not change, so every
capacity <= K stays exact, and the infinite projection becomes "an LRU of K". The boundary
only moves forward: it skips whole buckets by their dead counts and finds its place in the
last bucket by popcounts, so a request pays O(1 + blocks dropped / W) amortised bucket
steps plus O(SHIFT) popcounts, independent of K. Dropped keys leave the dict at the next
compaction, which a limited engine triggers on tracked (not merely non-dead) blocks, so
the dict and the position space stay O(K + SLACK) under any flood of fresh keys.

Snapshots: :meth:`LiteHit.export_state` returns exactly what a compaction keeps (tracked
keys in recency order, their access times per run, the clock and the counters) and
:meth:`LiteHit.from_state` rebuilds a freshly compacted engine from it, which then answers
every request as the exporting engine would.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from itertools import compress, groupby, islice
from operator import add, eq

from litehit_core.lite_hit_state import (
    LOW,
    SHIFT,
    SLACK,
    SSHIFT,
    LiteHitSnapshots,
)
from litehit_core.model import (
    HitCurveSegment,
    InvalidRequestError,
    RequestFact,
    check_lru_parameters,
)

_SAMPLE = 128  # keys sampled (oldest and newest) to size the key ints
_EMPTY: tuple[HitCurveSegment, ...] = ()
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_new_segment = tuple.__new__


class LiteHit(LiteHitSnapshots):
    """Exact prefix-hit engine for an LRU of every capacity (capacity-independent).

    ``ttl_ns``: block lifetime in ns (0 disables expiry). ``max_tracked_blocks``: most
    distinct blocks tracked (0 = unlimited); beyond it the least recent are dropped, so
    facts stay exact at every capacity up to it and the infinite projection is an LRU of
    that capacity. Memory is O(tracked blocks) (plus dropped or expired keys not yet
    compacted, at most twice as many plus a constant slack); see :meth:`memory_usage_bytes`.
    Negative parameters raise :class:`InvalidRequestError`.
    """

    __slots__ = (
        "_ttl",
        "_limit",
        "_bounded",
        "_pos",
        "_next",
        "_cap",
        "_dead",
        "_mask",
        "_bcnt",
        "_scnt",
        "_nb",
        "_ep_pos",
        "_ep_time",
        "_pexp",
        "_dead_below",
        "_now",
        "expired_blocks",
        "dropped_blocks",
        "_by_pos",
    )

    def __init__(self, ttl_ns: int = 0, max_tracked_blocks: int = 0) -> None:
        check_lru_parameters(ttl_ns, max_tracked_blocks)
        self._ttl = int(ttl_ns)
        self._limit = int(max_tracked_blocks)
        self._bounded = bool(self._ttl or self._limit)
        self.expired_blocks = 0
        """Cumulative count of blocks whose TTL lapsed while they were tracked."""
        self.dropped_blocks = 0
        """Cumulative count of blocks dropped (least recent first) by ``max_tracked_blocks``."""
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget every block and counter (a cold cache). O(1) amortised."""
        self._pos: dict[int, int] = {}
        self._next = 0
        self._dead = 0
        self._pexp = 0
        self._dead_below = 0
        self._ep_pos: list[int] = []
        self._ep_time: list[int] = []
        self._now = _INT64_MIN
        self.expired_blocks = 0
        self.dropped_blocks = 0
        self._by_pos = array("q")
        self._alloc(SLACK)

    def _alloc(self, capacity: int, keep: bool = False) -> None:
        """Size the bucket arrays for ``capacity`` positions; ``keep`` extends in place."""
        nb = ((capacity >> (SHIFT + SSHIFT)) + 1) << SSHIFT
        if keep:
            extra = nb - self._nb
            self._mask.extend([0] * extra)
            self._bcnt.extend([0] * extra)
            self._scnt.extend([0] * (extra >> SSHIFT))
        else:
            self._mask = [0] * nb
            self._bcnt = [0] * nb
            self._scnt = [0] * (nb >> SSHIFT)
        self._nb = nb
        self._cap = nb << SHIFT

    def resident_blocks(self, capacities: Sequence[int]) -> tuple[int, ...]:
        """Blocks resident now in an LRU of each capacity (blocks): ``min(unique, C)``.
        O(1) when every capacity holds them all (``capacities`` ascending, as a group's
        slots are), else O(slots)."""
        unique = self.current_unique_blocks()
        if capacities and unique >= capacities[-1]:
            return tuple(capacities)  # every slot is full
        return tuple([c if c < unique else unique for c in capacities])

    def tracked_bytes(self, block_bytes: int) -> int:
        """Bytes of every tracked block, blocks of ``block_bytes``. O(1)."""
        return self.current_unique_blocks() * block_bytes

    def current_unique_blocks(self) -> int:
        """Distinct blocks tracked now: resident in an LRU of ``max_tracked_blocks`` (or an
        unbounded one), TTL-expired excluded. O(1)."""
        return self._next - self._pexp - (self._dead - self._dead_below)

    def memory_usage_bytes(self) -> int:
        """Estimated bytes of process memory this engine holds now (what RSS grew by).

        Objects are counted at their allocated size, not ``sys.getsizeof``: CPython's small
        object allocator hands out multiples of 16 bytes, so an int of 28 bytes (|v| < 2**30)
        or 32 bytes (< 2**60) takes 32, one of 36 bytes (a 64-bit hash) takes 48. Counted:

        - the key -> position dict's table (``sys.getsizeof``: index and entry arrays as
          allocated, over-allocation included; CPython writes all of it when it allocates);
        - one int object per key, sized from a sample of the oldest and newest keys
          (interpreter-cached small ints are counted too: at most 262 of them);
        - one int object per position (a fresh int per touch, kept by the dict);
        - dropped or expired keys not compacted yet (they are still in the dict);
        - the bucket lists with their nonzero dead-marker masks and counters, and the TTL
          epoch lists.

        Not counted: memory the allocators keep after a compaction freed it (freed dict
        tables below glibc's mmap threshold, partly used pymalloc arenas). A bounded
        engine (TTL or ``max_tracked_blocks``) under churn shrinks at each compaction, and
        for small engines (peak dict tables of a few MiB) the process keeps part of the
        freed memory until the engine regrows into it; ``bench/bench_memory.py`` measures
        this against RSS. Cost: O(_SAMPLE) plus C-speed O(U / W) over the bucket masks.
        """
        getsizeof = sys.getsizeof
        total = self._dict_bytes() + getsizeof(self) + getsizeof(self._by_pos)
        mask = self._mask
        total += getsizeof(mask) + getsizeof(self._bcnt) + getsizeof(self._scnt)
        nonzero = len(mask) - mask.count(0)
        if nonzero:
            # big masks go to malloc (16-byte header), small ones round up: ~16 bytes each;
            # each dirty bucket has a dead count (and at most one super-bucket count) int
            total += sum(map(getsizeof, filter(None, mask))) + nonzero * (16 + 32)
        ep_pos = self._ep_pos
        if ep_pos:
            total += getsizeof(ep_pos) + getsizeof(self._ep_time)
            total += len(ep_pos) * (32 + _allocated(self._ep_time[-1]))
        return total

    def _dict_bytes(self) -> int:
        """Allocated bytes of the dict: table + key ints + position ints. O(_SAMPLE)."""
        pos = self._pos
        n = len(pos)
        total = sys.getsizeof(pos)
        if n:
            half = _SAMPLE // 2
            sample = list(islice(pos, half))
            if n > half:
                sample += islice(reversed(pos), min(half, n - half))
            total += n * sum(map(_allocated, sample)) // len(sample)
            total += n * _allocated(max(self._next - 1, 1))
        return total

    # --------------------------------------------------------------- the work
    def process_request(self, block_keys: Sequence[int], now_ns: int = 0) -> RequestFact:
        """Replay one request (keys head -> tail) and return its capacity-independent fact.

        Depths are read on the state before the request; then every block is touched,
        tail first. Duplicate keys are dropped after their first occurrence. ``now_ns`` only
        matters with a TTL and is clamped to be non-decreasing.
        With ``max_tracked_blocks`` the least recent blocks beyond it are dropped afterwards.
        Cost: O(n) C-speed dict/list work plus O(runs) interpreter steps, each with C-speed
        sums over at most ``SW`` bucket counters and ``U / (W * SW)`` super-bucket counters
        (U = position space, O(live blocks) thanks to compaction); a limit adds amortised
        O(1 + n / W) bucket steps and O(SHIFT) popcounts (see :meth:`_drop`); compaction
        costs O(L log L) once per at least 2L + ``SLACK`` new positions (amortised).
        """
        keys = block_keys if type(block_keys) is list else list(block_keys)
        n = len(keys)
        if self._bounded:
            try:  # checked before any change: the engine keeps keys by position as int64
                tail_first = array("q", keys)
            except OverflowError:
                raise InvalidRequestError(
                    "block_keys must be int64 integers, got one outside [-2**63, 2**63)"
                ) from None
            tail_first.reverse()
        if self._ttl:
            if now_ns < self._now:
                now_ns = self._now
            self._now = now_ns
            self._advance_expiry(now_ns)
        if self._next + n > self._cap:
            self._grow(n)
        if not n:
            if self._bounded and self._next > 3 * self.current_unique_blocks() + SLACK:
                self._compact()  # expiry alone may have left mostly stale positions
            return RequestFact(_EMPTY, 0)

        pos = self._pos
        olds = list(map(pos.get, keys))
        t = self._next
        pexp = self._pexp

        # Cached prefix length m: up to the first cold (or expired) block.
        try:
            m = olds.index(None)
        except ValueError:
            m = n
        if pexp and m and min(olds[:m]) < pexp:
            m = list(map(pexp.__gt__, olds[:m])).index(True)  # (C speed, no closure)

        # Fast paths cover the shapes real traffic has: the cached prefix is one run, or a
        # shared head block (system prompt) then one run, and every later block is new.
        # Their distinct positions prove the prefix has no duplicate key; duplicates among
        # the new blocks are caught by the dict size below. Other shapes check explicitly.
        scattered = m < n and olds.count(None) != n - m
        runs: tuple[tuple[int, int], ...] | list[tuple[int, int]] = ()
        if m:
            first = olds[0]
            second = olds[1] if m > 1 else 0
            if olds[m - 1] == first - m + 1 and (
                m < 3 or olds[:m] == list(range(first, first - m, -1))
            ):
                runs = ((0, m),)
            elif (
                olds[m - 1] == second - m + 2
                and (first > second or first < second - m + 2)  # head outside the run
                and (m < 4 or olds[1:m] == list(range(second, second - m + 1, -1)))
            ):
                runs = ((0, 1), (1, m - 1))
            else:
                scattered = True
        if scattered and len(set(keys)) != n:
            return self.process_request(list(dict.fromkeys(keys)), now_ns)
        if m and not runs:
            runs = _split_runs(olds, m)

        mask = self._mask
        bcnt = self._bcnt
        scnt = self._scnt
        segments: list[HitCurveSegment] = []
        last_end = 0  # last encoded threshold
        for j0, length in runs:
            p = olds[j0]
            # depth(p) = (t - p) - dead_in[p, t), read on the snapshot
            b = p >> SHIFT
            sb = b >> SSHIFT
            start = (
                (t - p)
                - (mask[b] >> (p & LOW)).bit_count()
                - sum(bcnt[b + 1 : (sb + 1) << SSHIFT])
                - sum(scnt[sb + 1 :])
            )
            if start <= last_end:
                start = last_end + 1  # monotone defence: never optimistic
            if segments and last_end + 1 == start:
                segments[-1] = _new_segment(
                    HitCurveSegment, (segments[-1][0], segments[-1][1] + length)
                )
            else:
                segments.append(_new_segment(HitCurveSegment, (start, length)))
            last_end = start + length - 1
        # Only now (every rank was read on the snapshot) the runs' old markers die.
        for j0, length in runs:
            p = olds[j0]
            lo = p - length + 1
            while lo <= p:
                b = lo >> SHIFT
                end = (b << SHIFT) | LOW
                if end > p:
                    end = p
                cnt = end - lo + 1
                mask[b] |= ((1 << cnt) - 1) << (lo & LOW)
                bcnt[b] += cnt
                scnt[b >> SSHIFT] += cnt
                lo = end + 1
        dead_add = m
        if scattered:
            dead_add += self._kill_scattered(olds, m, pexp)
        dead = self._dead = self._dead + dead_add
        # Submit tail first: key n-1 gets t, the head gets t + n - 1 (most recent).
        before = len(pos)
        pos.update(zip(keys, range(t + n - 1, t - 1, -1), strict=True))
        if not scattered and len(pos) - before != n - m:
            # duplicates among the new blocks: keep first occurrences, renumber all
            keys = list(dict.fromkeys(keys))
            n = len(keys)
            pos.update(zip(keys, range(t + n - 1, t - 1, -1), strict=True))
        t += n
        self._next = t
        if self._bounded:
            # the key at each position, so keys leaving past the boundary leave at once
            if len(tail_first) != n:  # duplicates were dropped above
                tail_first = array("q", keys[::-1])
            self._by_pos[t - n : t] = tail_first
            if self._ttl:
                ep_time = self._ep_time
                if not ep_time or ep_time[-1] != now_ns:
                    self._ep_pos.append(t - n)
                    ep_time.append(now_ns)
            tracked = t - self._pexp - (dead - self._dead_below)
            if self._limit and tracked > self._limit:
                self._drop(tracked - self._limit)
                tracked = self._limit
            if t > 3 * tracked + SLACK:
                self._compact()
        elif t > 3 * (t - dead) + SLACK:
            self._compact()
        return _new_segment(RequestFact, (tuple(segments), n))

    def _kill_scattered(self, olds: list[int | None], m: int, pexp: int) -> int:
        """Mark dead the old markers of resident blocks after the prefix. O(n - m)."""
        killed = 0
        mask = self._mask
        bcnt = self._bcnt
        scnt = self._scnt
        for p in olds[m:]:
            if p is None or p < pexp:
                continue
            b = p >> SHIFT
            mask[b] |= 1 << (p & LOW)
            bcnt[b] += 1
            scnt[b >> SSHIFT] += 1
            killed += 1
        return killed

    def _dead_before(self, p: int) -> int:
        """Dead markers at positions < p. O(U / (W * SW) + SW) in C-speed sums."""
        if p >= self._cap:
            return self._dead
        b = p >> SHIFT
        sb = b >> SSHIFT
        return (
            sum(self._scnt[:sb])
            + sum(self._bcnt[sb << SSHIFT : b])
            + (self._mask[b] & ((1 << (p & LOW)) - 1)).bit_count()
        )

    def _advance_expiry(self, now: int) -> None:
        """Move the expiry boundary to ``now``; count blocks that expire.

        O(log E) for E epochs plus one :meth:`_dead_before`.
        """
        i = bisect_right(self._ep_time, now - self._ttl)
        new = self._ep_pos[i] if i < len(self._ep_pos) else self._next
        old = self._pexp
        if new <= old:
            return
        dead_below = self._dead_before(new)
        self.expired_blocks += (new - old) - (dead_below - self._dead_below)
        self._pexp = new
        self._dead_below = dead_below
        self._evict(old, new)

    def _evict(self, start: int, stop: int) -> None:
        """Remove from the dict the keys whose live marker lies in ``[start, stop)`` (the
        boundary just passed them), so a bounded engine holds no key it no longer tracks.
        O(stop - start) at C speed (no interpreter loop)."""
        seg = self._by_pos[start:stop]
        pos = self._pos
        gone = list(compress(seg, map(eq, map(pos.get, seg), range(start, stop))))
        deque(map(pos.__delitem__, gone), maxlen=0)

    def _drop(self, excess: int) -> None:
        """Move the lower boundary past the ``excess`` least recent live markers.

        Requires ``0 < excess < current_unique_blocks()``. Whole buckets are skipped by
        their dead counts (the boundary only moves forward, so each bucket is crossed once
        between compactions); in the last bucket the place is found by a fixed-point step
        and, if that does not settle, a binary search: O(SHIFT) popcounts of one bucket.
        """
        self.dropped_blocks += excess
        start = p = self._pexp
        t = self._next
        mask = self._mask
        bcnt = self._bcnt
        dead_skipped = 0
        while True:
            b = p >> SHIFT
            lo = p & LOW
            end = (b + 1) << SHIFT
            if end > t:
                end = t
            # dead bits never lie at or beyond ``t``, so no upper mask is needed
            word = mask[b]
            if lo:
                word >>= lo
                dead = word.bit_count()
            else:
                dead = bcnt[b]
            live = end - p - dead
            if live > excess:
                break
            excess -= live
            dead_skipped += dead
            p = end
            if not excess:
                self._pexp = p
                self._dead_below += dead_skipped
                self._evict(start, p)
                return
        # The place: the smallest s with ``excess`` live (zero) bits among word's low s
        # bits. Fixed-point steps s <- excess + dead_in(low s bits) rise from below to it
        # (one step when no marker there is dead); if three do not settle, a binary search
        # from the last lower bound to the bucket's end (zeros(x) never decreases in x).
        s = excess
        for _ in range(3):
            step = excess + (word & ((1 << s) - 1)).bit_count()
            if step == s:
                break
            s = step
        else:
            hi = end - p
            while s < hi:
                mid = (s + hi) >> 1
                if mid - (word & ((1 << mid) - 1)).bit_count() >= excess:
                    hi = mid
                else:
                    s = mid + 1
        self._pexp = p + s
        self._dead_below += dead_skipped + s - excess
        self._evict(start, p + s)

    def _grow(self, incoming: int) -> None:
        """Extend the position space (no renumbering): amortised O(1) per position."""
        self._alloc(2 * (self._next + incoming) + SLACK, keep=True)

    def _compact(self) -> None:
        """Renumber surviving markers to 0..L-1 (order kept); drop expired and dropped keys.

        O(D log D) for D dict entries. The old dict is cleared before the new one is built,
        so its table, position ints and dropped keys are free for the new dict to reuse
        (the process never holds two generations of positions).
        """
        pos = self._pos
        pexp = self._pexp
        t = self._next
        if self._bounded:  # the keys by position: live ones in order, no sort
            seg = self._by_pos[pexp:t]
            live = list(compress(seg, map(eq, map(pos.get, seg), range(pexp, t))))
        elif pexp:
            live = [k for k, p in pos.items() if p >= pexp]
            live.sort(key=pos.__getitem__)
        else:
            live = sorted(pos, key=pos.__getitem__)
        if self._ttl and live:
            ep_pos, ep_time = self._ep_pos, self._ep_time
            new_pos: list[int] = []
            new_time: list[int] = []
            last = None
            for i, k in enumerate(live):
                tm = ep_time[bisect_right(ep_pos, pos[k]) - 1]
                if tm != last:
                    new_pos.append(i)
                    new_time.append(tm)
                    last = tm
            self._ep_pos, self._ep_time = new_pos, new_time
        else:
            self._ep_pos, self._ep_time = [], []
        n_live = len(live)
        if self._bounded:  # in place: the array keeps its high-water size (no realloc churn)
            self._by_pos[:n_live] = array("q", live)
        pos.clear()  # frees the old table, positions and dropped keys first
        self._pos = dict(zip(live, range(n_live), strict=True))
        self._next = n_live
        self._dead = 0
        self._pexp = 0
        self._dead_below = 0
        self._alloc(2 * n_live + SLACK)


def _allocated(value: object) -> int:
    """Bytes the small-object allocator takes for ``value``: its size rounded up to 16."""
    return (sys.getsizeof(value) + 15) & ~15


def _split_runs(olds: list[int | None], m: int) -> list[tuple[int, int]]:
    """Split ``olds[:m]`` into maximal runs of positions descending by one.

    Inside a run ``olds[j] + j`` is constant, so runs are the groups of that key:
    O(m) C-speed work plus O(runs) interpreter steps.
    """
    runs: list[tuple[int, int]] = []
    j = 0
    for _, group in groupby(map(add, olds, range(m))):
        length = len(list(group))
        runs.append((j, length))
        j += length
    return runs
