"""What :class:`~litehit_core.lite_hit.LiteHit` is as data: its bucket layout, its state
exported for a durable snapshot and loaded back, and the invariant check tests call.

:class:`LiteHitSnapshots` is the part of the engine that reads its whole layout at once
(``export_state``, ``from_state``, ``_check``); the replay itself is in
:mod:`litehit_core.lite_hit`. Positions are split into buckets of :data:`W` positions (one
Python int of dead-marker bits each) and super-buckets of :data:`SW` buckets.
"""

from __future__ import annotations

from array import array
from typing import TypeVar

import numpy as np

from litehit_core.model import InvalidRequestError
from litehit_core.state import EngineState, validated_arrays

_E = TypeVar("_E", bound="LiteHitSnapshots")

__all__ = ["LOW", "MODEL", "SHIFT", "SLACK", "SSHIFT", "SW", "W", "LiteHitSnapshots", "span_bits"]

MODEL = "lru"
"""This engine's name in :data:`litehit_core.engine.MODELS`: the ``model`` of its states
(:class:`~litehit_core.compact_lite_hit.CompactLiteHit` writes and reads the same)."""

SHIFT = 12  # bucket = 4096 positions (one Python int bit mask each); chosen by measurement
W = 1 << SHIFT
LOW = W - 1
SSHIFT = 3  # super-bucket = 8 buckets; chosen by measurement
SW = 1 << SSHIFT
SLACK = 1 << 14  # positions of slack before compaction / growth


def span_bits(lo: int, hi: int) -> int:
    """Bit mask of offsets lo..hi-1 (empty when hi <= lo)."""
    return ((1 << (hi - lo)) - 1) << lo if hi > lo else 0


class LiteHitSnapshots:
    """The snapshot and invariant half of :class:`~litehit_core.lite_hit.LiteHit` (a base
    class: every attribute it reads is the engine's)."""

    __slots__ = ()

    def export_state(self) -> EngineState:
        """The engine's state for a durable snapshot (see :class:`EngineState`).

        Exactly what a compaction keeps: the tracked keys least recent first, their access
        times per run (with TTL), the clock and the counters. The engine is unchanged.
        Cost: a bounded engine (TTL or limit: every engine of the service) reads its
        key-by-position array and dead-marker bits, O(U) numpy work that never touches the
        dict (U = position space, O(tracked blocks + slack)); an unbounded one reads keys
        and positions from the dict with ``np.fromiter`` and scatters them at their
        positions, O(D + U). No sort either way; epochs by one ``np.searchsorted``.
        InvalidRequestError if a key does not fit in int64 (keys of the service and the
        trace readers always do).
        """
        pexp = self._pexp
        if self._bounded:
            present, keys = self._live_by_position()
        else:
            present, keys = self._live_from_dict()
        times = None
        if self._ttl and len(keys):
            ordered = np.flatnonzero(present)
            ordered += pexp
            epoch = np.searchsorted(np.array(self._ep_pos, np.int64), ordered, "right") - 1
            times = np.array(self._ep_time, np.int64)[epoch]
        return EngineState.exported(
            MODEL, keys, times, self._now, self.expired_blocks, self.dropped_blocks
        )

    def _live_by_position(self) -> tuple[np.ndarray, np.ndarray]:
        """(live mask over [boundary, next), live keys in order) of a bounded engine: read
        from the key-by-position array and the dead-marker bits, without touching the dict.
        O(U) numpy work (a copy of the array and the unpacked bits): milliseconds for
        millions of blocks, which is all a snapshot holds the instance's lock for."""
        pexp, t = self._pexp, self._next
        keys = np.frombuffer(self._by_pos, np.int64, t)[pexp:]
        words = b"".join(w.to_bytes(W >> 3, "little") for w in self._mask)
        dead = np.unpackbits(np.frombuffer(words, np.uint8), bitorder="little")[pexp:t]
        present = dead == 0
        return present, keys[present]

    def _live_from_dict(self) -> tuple[np.ndarray, np.ndarray]:
        """(live mask over [boundary, next), live keys in order) read from the dict: keys
        and positions with ``np.fromiter``, scattered at their positions (no sort).
        O(D + U) C-speed work for D dict entries."""
        pos = self._pos
        n = len(pos)
        pexp = self._pexp
        try:
            keys = np.fromiter(pos.keys(), np.int64, n)
        except (OverflowError, TypeError) as exc:
            raise InvalidRequestError(f"export_state needs int64 block keys: {exc}") from None
        positions = np.fromiter(pos.values(), np.int64, n)
        if pexp:
            kept = positions >= pexp
            keys = keys[kept]
            positions = positions[kept]
            positions -= pexp
        span = self._next - pexp
        present = np.zeros(span, np.bool_)
        present[positions] = True
        by_position = np.empty(span, np.int64)
        by_position[positions] = keys
        return present, by_position[present]

    @classmethod
    def from_state(cls: type[_E], state: EngineState, ttl_ns: int, max_tracked_blocks: int) -> _E:
        """An engine that continues exactly where the one that exported ``state`` stopped.

        ``ttl_ns`` and ``max_tracked_blocks`` are the engine's parameters (normally those of
        the exporting engine). A smaller limit than the state's key count drops the least
        recent keys at once (counted in ``dropped_blocks``), as a shrinking LRU would; a
        different TTL applies to the stored access times. The state is validated first:
        InvalidRequestError, naming the field, for a wrong model or format version, arrays
        that are not one-dimensional int64, duplicate keys, epochs that do not start at 0,
        do not strictly increase, lie beyond the keys or after ``now_ns``, a state without
        access times for an engine with TTL, or negative counters.
        Cost: O(n) C-speed work for n keys (``dict(zip(keys.tolist(), range(n)))``) plus
        O(n / W) for the bucket arrays; the validation is O(n) numpy work.
        """
        engine = cls(ttl_ns=ttl_ns, max_tracked_blocks=max_tracked_blocks)
        keys, starts, times = validated_arrays(state, MODEL, engine._ttl)
        n = len(keys)
        pos = dict(zip(keys.tolist(), range(n), strict=True))
        if len(pos) != n:
            raise InvalidRequestError(
                f"state.keys must be distinct, got {n - len(pos)} duplicate(s) in {n} keys"
            )
        engine._pos = pos
        engine._next = n
        if engine._bounded:
            engine._by_pos = array("q", keys.tobytes())
        engine._alloc(2 * n + SLACK)
        if engine._ttl:
            engine._ep_pos = starts.tolist()
            engine._ep_time = times.tolist()
        engine._now = int(state.now_ns)
        engine.expired_blocks = int(state.expired_blocks)
        engine.dropped_blocks = int(state.dropped_blocks)
        limit = engine._limit
        if limit and n > limit:
            engine._drop(n - limit)
            if n > 3 * limit + SLACK:
                engine._compact()
        return engine

    def _check(self) -> None:
        """Verify every internal invariant from scratch (tests call this). O(U)."""
        pos, t, pexp = self._pos, self._next, self._pexp
        values = set(pos.values())
        assert len(values) == len(pos), "two keys share a position"
        assert all(0 <= p < t for p in values), "position outside [0, next)"
        assert t <= self._cap == self._nb << SHIFT
        assert len(self._mask) == len(self._bcnt) == self._nb == len(self._scnt) << SSHIFT
        live = [0] * self._nb
        for p in values:
            live[p >> SHIFT] |= 1 << (p & LOW)
        dead = dead_below = 0
        counts = [0] * self._nb
        for b, word in enumerate(self._mask):
            counts[b] = word.bit_count()
            dead += counts[b]
            lo = b << SHIFT
            in_range = span_bits(max(pexp, lo) - lo, min(t, lo + W) - lo)
            below = span_bits(0, min(pexp, lo + W) - lo)
            assert word & in_range == in_range & ~live[b], f"marker state wrong in bucket {b}"
            assert not word & ~(in_range | below), f"dead bit beyond next in bucket {b}"
            assert not word & below & live[b], f"live key below expiry marked dead in {b}"
            dead_below += (word & below).bit_count()
        assert dead == self._dead, (dead, self._dead)
        assert dead_below == self._dead_below, (dead_below, self._dead_below)
        assert self._bcnt == counts, "bucket dead counts wrong"
        for sb, total in enumerate(self._scnt):
            assert total == sum(counts[sb << SSHIFT : (sb + 1) << SSHIFT]), f"super {sb} wrong"
        assert self._ep_pos == sorted(self._ep_pos)
        assert self._ep_time == sorted(self._ep_time)
        assert len(self._ep_pos) == len(self._ep_time)
        assert not self._ttl or not self._ep_time or self._ep_time[-1] <= self._now
        tracked = [p for p in values if p >= pexp]
        if self._ttl and tracked:
            assert self._ep_pos and self._ep_pos[0] <= min(tracked), "a block has no epoch"
        assert 0 <= pexp <= t, f"boundary {pexp} outside [0, {t}]"
        unique = self.current_unique_blocks()
        assert unique == len(tracked)
        assert self._bounded == bool(self._ttl or self._limit)
        assert not self._limit or unique <= self._limit, f"{unique} > {self._limit} tracked"
        assert self.expired_blocks >= 0 and self.dropped_blocks >= 0
        if self._bounded:  # no key it no longer tracks; the key of every live position
            assert len(pos) == unique, f"{len(pos) - unique} untracked keys kept"
            by_pos = self._by_pos
            assert len(by_pos) >= t
            assert all(by_pos[p] == k for k, p in pos.items()), "key by position wrong"
        assert t <= 3 * unique + SLACK, f"compaction overdue: {t} positions, {unique} live"
