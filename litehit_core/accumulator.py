"""Exact cumulative hits at EVERY capacity, as a piecewise-linear curve.

A segment ``(s, r)`` contributes ``clip(C - s + 1, 0, r)`` hit blocks at capacity ``C``:
slope +1 from ``C = s`` to ``C = s + r - 1``, flat afterwards. Summed over many facts, the
cumulative hits ``H(C)`` are piecewise linear with integer slopes, so the whole curve is
the sorted list of slope changes — no loop over capacities. A staircase corner (a jump of
hits at one capacity, :class:`~litehit_core.model.HitCurveStep`) is a slope over one unit.
Capacities are in the curve's unit (blocks; bytes for hybrid staircases); weights turn
blocks into any unit (e.g. ``block_size_tokens`` for hit tokens).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from litehit_core.model import HitCurveSegment, InvalidRequestError, RequestFact


class CurvePoint(NamedTuple):
    """``hits`` (weighted) at ``capacity_blocks``; H is linear between consecutive points."""

    capacity_blocks: int
    hits: int


class HitCurveAccumulator:
    """Adds hit curves; answers cumulative hits at any capacity exactly.

    ``add`` is O(segments); :meth:`breakpoints` is O(B log B) for B distinct slope changes
    (cached until the next ``add``); :meth:`hits_at` is O(log B) after that.
    """

    __slots__ = ("_delta", "_points", "requests", "input_tokens")

    def __init__(self) -> None:
        self._delta: dict[int, int] = {}
        self._points: list[CurvePoint] | None = None
        self.requests = 0
        self.input_tokens = 0

    def add_curve(self, hit_curve: Sequence[HitCurveSegment], weight: int = 1) -> None:
        """Add one request's curve, each hit block counting ``weight``. O(segments)."""
        delta = self._delta
        get = delta.get
        for s, r in hit_curve:
            delta[s] = get(s, 0) + weight
            e = s + r
            delta[e] = get(e, 0) - weight
        self._points = None

    def add_steps(self, steps: Sequence[tuple[int, int]], weight: int = 1) -> None:
        """Add one request's staircase (corners ``(threshold, hit blocks)``, both strictly
        increasing), each hit block counting ``weight``: a jump at each threshold.
        O(corners)."""
        delta = self._delta
        get = delta.get
        previous = 0
        for threshold, hits in steps:
            jump = (hits - previous) * weight
            previous = hits
            delta[threshold] = get(threshold, 0) + jump
            delta[threshold + 1] = get(threshold + 1, 0) - jump
        self._points = None

    def add(self, fact: RequestFact, weight: int = 1, input_tokens: int = 0) -> None:
        """Add a fact and its token denominator (``input_tokens``). O(segments)."""
        self.add_curve(fact.hit_curve, weight)
        self.requests += 1
        self.input_tokens += input_tokens

    def add_many(self, curves: Iterable[Sequence[HitCurveSegment]], weight: int = 1) -> None:
        """Add many curves with one weight. O(total segments)."""
        for curve in curves:
            self.add_curve(curve, weight)

    def breakpoints(self) -> list[CurvePoint]:
        """The exact curve: ``(0, 0)`` then one point per slope change, last one flat forever.

        ``H(C)`` for C between two points is linear interpolation (integer slopes).
        O(B log B) for B distinct slope changes on first call (a sort of the change points;
        measured at a few ms for 7k breakpoints), then O(1) until the next ``add``.
        """
        if self._points is None:
            points = [CurvePoint(0, 0)]
            slope = 0
            hits = 0
            last = 0
            for x in sorted(self._delta):
                d = self._delta[x]
                if not d:
                    continue
                c = x - 1  # the slope changes between capacity x - 1 and x
                hits += slope * (c - last)
                if c != last:
                    points.append(CurvePoint(c, hits))
                slope += d
                last = c
            self._points = points
        return self._points

    def hits_at(self, capacity_blocks: int) -> int:
        """Cumulative hits at ``capacity_blocks`` (negative = infinite). O(log B)."""
        points = self.breakpoints()
        if capacity_blocks < 0:
            return points[-1].hits
        i = bisect_right(points, (capacity_blocks, float("inf"))) - 1
        c0, h0 = points[i]
        if i + 1 == len(points):
            return h0
        c1, h1 = points[i + 1]
        return h0 + (h1 - h0) * (capacity_blocks - c0) // (c1 - c0)

    def infinite_hits(self) -> int:
        """Cumulative hits with unlimited capacity (the theoretical maximum). O(1) cached."""
        return self.breakpoints()[-1].hits

    def smallest_capacity_for(self, hits: int) -> int:
        """The smallest capacity (blocks) whose cumulative hits reach ``hits``. O(log B).

        Raises :class:`InvalidRequestError` if even infinite capacity cannot reach it.
        """
        points = self.breakpoints()
        if hits > points[-1].hits:
            raise InvalidRequestError(
                f"hits {hits} exceeds the infinite-capacity total {points[-1].hits}"
            )
        if hits <= 0:
            return 0
        lo = 0
        hi = len(points) - 1
        while lo < hi:  # first point with hits >= target
            mid = (lo + hi) // 2
            if points[mid].hits >= hits:
                hi = mid
            else:
                lo = mid + 1
        c1, h1 = points[lo]
        c0, h0 = points[lo - 1]
        slope = (h1 - h0) // (c1 - c0)
        return c0 + -(-(hits - h0) // slope)
