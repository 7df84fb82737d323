"""Exact cumulative hits at EVERY capacity, kept compactly and updated per request.

Two shapes of fact are summed, one per accumulator (its :attr:`~HitCurveAccumulator.kind`):

- ``"ramps"`` (full-attention facts, :class:`~litehit_core.model.HitCurveSegment`): a
  segment ``(s, r)`` contributes ``clip(C - s + 1, 0, r)`` hit blocks at capacity ``C``:
  slope +1 from ``C = s`` to ``C = s + r - 1``, flat afterwards. The sum ``H(C)`` is
  piecewise linear with integer slopes and is stored as its slope changes: ``+w`` at ``s``,
  ``-w`` at ``s + r``.
- ``"steps"`` (hybrid facts, :class:`~litehit_core.model.HitCurveStep` corners
  ``(threshold, hits)``): a jump of hits at each threshold, stored as the jump at that
  position.

Either way the state is two sorted numpy arrays (positions and values, one entry per
distinct position: 8 to 16 bytes per corner, narrowed to int32 where the values fit) plus
an append buffer (8 bytes per slope change of a weight-1 ramp, 16 per other entry) merged
in O(B + b log b) once it holds B/2 entries (at least 8,192: 64 KiB), so an ``add`` is
O(segments) amortised and the buffer adds at most 4 bytes per corner for ramps (8 for
steps) above the arrays. Measured on the Mooncake trace: 0.3-0.5 us per request, merges
included. Merges build new arrays and never write into old ones, so
:meth:`~HitCurveAccumulator.frozen` hands out an immutable view in O(1) after the merge.

Positions are in the capacity unit of the facts (blocks for ramps, bytes or a coarser unit
for steps). A steps accumulator with ``max_corners`` keeps at most that many positions by
doubling its :attr:`~HitCurveAccumulator.scale` when needed: a threshold ``t`` then counts
at ``ceil(t / scale) * scale``, so the curve stays exact at every multiple of ``scale`` and
is never above the exact curve elsewhere. Ramps need no bound: their positions are depths,
at most the tracked blocks + 1.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from litehit_core.model import HitCurveSegment, InvalidRequestError, RequestFact

__all__ = ["CurvePoint", "HitCurveAccumulator"]

_MIN_BUFFER = 8192
_BUFFER_SHARE = 2
_INT32 = (1 << 31) - 1
_EMPTY = np.zeros(0, np.int64)
_EMPTY.flags.writeable = False
KINDS = ("ramps", "steps")


def _summed(pos: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``pos`` with duplicates folded: unique positions and their summed values.
    O(n)."""
    if len(pos) < 2:
        return pos, val
    starts = np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1])))
    return pos[starts], np.add.reduceat(val, starts)


class CurvePoint(NamedTuple):
    """``hits`` (weighted) at ``capacity_blocks`` (the curve's unit); H is linear between
    consecutive points."""

    capacity_blocks: int
    hits: int


def _narrow(values: np.ndarray) -> np.ndarray:
    """``values`` as int32 when every value fits, else int64; read-only. O(n)."""
    if len(values) and (int(values.max()) > _INT32 or int(values.min()) < -_INT32):
        out = values.astype(np.int64, copy=False)
    else:
        out = values.astype(np.int32)
    out.flags.writeable = False
    return out


class HitCurveAccumulator:
    """Adds hit curves (ramps) or staircases (steps); answers cumulative hits at any
    capacity exactly.

    ``add_curve``/``add_steps`` are O(segments) amortised; :meth:`breakpoints` and the
    queries build the curve's points once per change, O(B log B) for B positions
    (vectorised), then :meth:`hits_at` is O(log B). ``max_corners`` (0 = unlimited) bounds
    a steps accumulator's positions (see the module docstring).
    """

    __slots__ = (
        "_pos",
        "_val",
        "_unit",
        "_bp",
        "_bv",
        "_limit",
        "_cx",
        "_ch",
        "_frozen",
        "_open",
        "kind",
        "scale",
        "max_corners",
        "requests",
        "input_tokens",
    )

    def __init__(self, max_corners: int = 0, scale: int = 1) -> None:
        if isinstance(max_corners, bool) or not isinstance(max_corners, int) or max_corners < 0:
            raise InvalidRequestError(f"max_corners must be an integer >= 0, got {max_corners!r}")
        if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
            raise InvalidRequestError(f"scale must be an integer >= 1, got {scale!r}")
        self.max_corners = max_corners
        self.kind: str | None = None
        """``"ramps"`` or ``"steps"`` once something was added (None before)."""
        self.scale = scale
        """Steps: positions count in units of this many capacity units (1 = exact)."""
        self.requests = 0
        self.input_tokens = 0
        self._pos: np.ndarray = _EMPTY
        self._val: np.ndarray = _EMPTY
        self._unit = array("q")  # ramps of weight 1: +s for +1 at s, -(s + r) for -1 at s + r
        self._bp = array("q")  # any other change: its position ...
        self._bv = array("q")  # ... and its value
        self._limit = _MIN_BUFFER
        self._cx: np.ndarray | None = None
        self._ch: np.ndarray | None = None
        self._frozen = False
        self._open: str | None = None  # the kind adds may use without checks

    # ------------------------------------------------------------------ adding

    def _begin(self, kind: str) -> None:
        """Check that ``kind`` may be added (not frozen, not mixed) and open for it."""
        if self._frozen:
            raise InvalidRequestError("this accumulator is a frozen view; add to its source")
        if self.kind is None:
            if kind == "ramps" and self.scale != 1:
                raise InvalidRequestError(f"ramps need scale 1, got {self.scale}")
            self.kind = kind
        elif self.kind != kind:
            raise InvalidRequestError(f"cannot add {kind} to an accumulator of {self.kind}")
        self._open = kind

    def add_curve(self, hit_curve: Sequence[HitCurveSegment], weight: int = 1) -> None:
        """Add one request's ramps, each hit block counting ``weight``. O(segments)
        amortised; weight 1 (the service's case) is the fast path: one signed entry per
        slope change, nothing else touched."""
        if not hit_curve:
            return
        if self._open != "ramps" or weight != 1:
            self._add_weighted(hit_curve, weight)
            return
        unit = self._unit
        for s, r in hit_curve:
            unit.append(s)
            unit.append(-s - r)
        if len(unit) >= self._limit:
            self._merge()

    def add_ramps(self, starts: np.ndarray, runs: np.ndarray) -> None:
        """:meth:`add_curve` (weight 1) for the segments of many requests at once, given as
        int64 arrays. O(segments) amortised, numpy work."""
        if not len(starts):
            return
        if self._open != "ramps":
            self._begin("ramps")
        pairs = np.empty(2 * len(starts), np.int64)
        pairs[0::2] = starts
        pairs[1::2] = -(starts + runs)
        self._unit.frombytes(pairs.tobytes())
        if len(self._unit) >= self._limit:
            self._merge()

    def _add_weighted(self, hit_curve: Sequence[HitCurveSegment], weight: int) -> None:
        if self._open != "ramps":
            self._begin("ramps")
        if weight == 1:
            self.add_curve(hit_curve)
            return
        bp, bv = self._bp, self._bv
        for s, r in hit_curve:
            bp.append(s)
            bp.append(s + r)
            bv.append(weight)
            bv.append(-weight)
        if len(bp) >= self._limit:
            self._merge()

    def add_steps(self, steps: Sequence[tuple[int, int]], weight: int = 1) -> None:
        """Add one request's staircase (corners ``(threshold, hit blocks)``, both strictly
        increasing, thresholds >= 1), each hit block counting ``weight``. O(corners)
        amortised."""
        if not steps:
            return
        if self._open != "steps":
            self._begin("steps")
        bp, bv = self._bp, self._bv
        scale = self.scale
        previous = 0
        for threshold, hits in steps:
            bp.append(threshold if scale == 1 else -(-threshold // scale))
            bv.append((hits - previous) * weight)
            previous = hits
        if len(bp) >= self._limit:
            self._merge()

    def add_jumps(self, thresholds: np.ndarray, jumps: np.ndarray) -> None:
        """Add many staircase corners at once: ``jumps[i]`` (weighted hit blocks, > 0)
        gained from capacity ``thresholds[i]`` (>= 1) on; the flat form of
        :meth:`add_steps` over many requests. O(k) plus the merge."""
        if self._open != "steps":
            self._begin("steps")
        pos = np.asarray(thresholds, np.int64)
        if self.scale != 1:
            pos = -(-pos // self.scale)
        self._bp.frombytes(np.ascontiguousarray(pos, np.int64).tobytes())
        self._bv.frombytes(np.ascontiguousarray(jumps, np.int64).tobytes())
        if len(self._bp) >= self._limit:
            self._merge()

    def add(self, fact: RequestFact, weight: int = 1, input_tokens: int = 0) -> None:
        """Add a full-attention fact and its token denominator (``input_tokens``).
        O(segments)."""
        self.add_curve(fact.hit_curve, weight)
        self.requests += 1
        self.input_tokens += input_tokens

    def add_many(self, curves: Iterable[Sequence[HitCurveSegment]], weight: int = 1) -> None:
        """Add many ramps curves with one weight. O(total segments)."""
        for curve in curves:
            self.add_curve(curve, weight)

    def _merge(self) -> None:
        """Fold the buffer into the sorted arrays (new arrays; old ones stay valid).
        O(B + b log b) for B positions and b buffered entries."""
        if not self._bp and not self._unit:
            return
        unit = np.frombuffer(self._unit, np.int64)
        add_pos = np.concatenate((np.frombuffer(self._bp, np.int64), np.abs(unit)))
        add_val = np.concatenate((np.frombuffer(self._bv, np.int64), np.sign(unit)))
        self._unit, self._bp, self._bv = array("q"), array("q"), array("q")
        self._cx = None
        order = np.argsort(add_pos)  # only the buffer is sorted: O(b log b)
        add_pos, add_val = _summed(add_pos[order], add_val[order])
        pos, val = self._pos.astype(np.int64), self._val.astype(np.int64)  # copies
        at = np.searchsorted(pos, add_pos)
        there = at < len(pos)
        there[there] = pos[at[there]] == add_pos[there]
        val[at[there]] += add_val[there]  # positions present: add in place (unique)
        fresh = ~there
        pos = np.insert(pos, at[fresh], add_pos[fresh])  # O(B + b)
        val = np.insert(val, at[fresh], add_val[fresh])
        keep = val != 0
        pos, val = pos[keep], val[keep]
        if self.kind == "steps" and self.max_corners:
            while len(pos) > self.max_corners:  # coarsen: exact at multiples of the scale
                pos, val = _summed(-(-pos // 2), val)
                self.scale *= 2
        self._pos, self._val = _narrow(pos), _narrow(val)
        self._limit = max(_MIN_BUFFER, len(pos) // _BUFFER_SHARE)

    # ----------------------------------------------------------------- reading

    def frozen(self) -> HitCurveAccumulator:
        """An immutable view of the curve as it is now (merging the buffer first): reads
        work on it without the source's lock while the source keeps adding. O(B + b log b)
        for the merge, O(1) after it."""
        if self._frozen:
            return self
        self._merge()
        view = HitCurveAccumulator(self.max_corners)
        view.kind, view.scale = self.kind, self.scale
        view.requests, view.input_tokens = self.requests, self.input_tokens
        view._pos, view._val = self._pos, self._val
        view._frozen = True
        return view

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, values)``: read-only int arrays, positions strictly increasing in
        units of :attr:`scale` (slope changes for ramps, jumps for steps). O(merge)."""
        self._merge()
        return self._pos, self._val

    @classmethod
    def from_arrays(
        cls,
        kind: str,
        positions: np.ndarray,
        values: np.ndarray,
        scale: int = 1,
        max_corners: int = 0,
    ) -> HitCurveAccumulator:
        """An accumulator continuing from :meth:`arrays` (validated: InvalidRequestError
        naming the problem). O(B)."""
        if kind not in KINDS:
            raise InvalidRequestError(f"kind must be one of {KINDS}, got {kind!r}")
        acc = cls(max_corners, scale)
        pos = np.asarray(positions)
        val = np.asarray(values)
        if pos.ndim != 1 or pos.shape != val.shape:
            raise InvalidRequestError(
                f"positions and values must be 1-d of one length, got {pos.shape} and {val.shape}"
            )
        if pos.dtype.kind != "i" or val.dtype.kind != "i":
            raise InvalidRequestError("positions and values must be integer arrays")
        if len(pos) and (int(pos[0]) < 1 or bool((pos[1:] <= pos[:-1]).any())):
            raise InvalidRequestError("positions must be >= 1 and strictly increasing")
        acc.kind = kind
        acc._pos, acc._val = _narrow(pos.astype(np.int64)), _narrow(val.astype(np.int64))
        acc._limit = max(_MIN_BUFFER, len(pos) // _BUFFER_SHARE)
        return acc

    @classmethod
    def from_points(cls, capacities: np.ndarray, hits: np.ndarray) -> HitCurveAccumulator:
        """A frozen accumulator whose curve is the piecewise-linear interpolation of the
        points (``(0, 0)`` first, capacities strictly increasing, hits never decreasing):
        exact where the points are, interpolated (floor) between them, flat after the last.
        For curves received as points (a server's answer). Validated:
        InvalidRequestError. O(points)."""
        cx = np.array(capacities, dtype=np.int64)
        ch = np.array(hits, dtype=np.int64)
        if cx.ndim != 1 or cx.shape != ch.shape or not len(cx):
            raise InvalidRequestError("points need equal, non-empty 1-d capacities and hits")
        if int(cx[0]) != 0 or int(ch[0]) != 0:
            raise InvalidRequestError(f"points must start at (0, 0), got ({cx[0]}, {ch[0]})")
        if bool((cx[1:] <= cx[:-1]).any()) or bool((ch[1:] < ch[:-1]).any()):
            raise InvalidRequestError(
                "point capacities must strictly increase and their hits never decrease"
            )
        acc = cls()
        acc.kind = "ramps"
        acc._cx, acc._ch = cx, ch
        acc._frozen = True
        return acc

    def _points(self) -> tuple[np.ndarray, np.ndarray]:
        """(capacities, hits): int64 arrays of the breakpoints, cached until an add."""
        if self._unit or self._bp:
            self._merge()  # the cache is stale while anything is buffered
        if self._cx is None:
            pos = self._pos.astype(np.int64) * self.scale
            val = self._val.astype(np.int64)
            if self.kind == "steps":
                after = np.cumsum(val)
                before = after - val
                cx = np.empty(2 * len(pos), np.int64)
                ch = np.empty(2 * len(pos), np.int64)
                cx[0::2], cx[1::2] = pos - 1, pos
                ch[0::2], ch[1::2] = before, after
            else:  # the slope changes between capacity x - 1 and x
                cx = pos - 1
                slope = np.cumsum(val)
                ch = np.zeros(len(cx), np.int64)
                if len(cx) > 1:
                    np.cumsum(slope[:-1] * np.diff(cx), out=ch[1:])
            cx = np.concatenate((np.zeros(1, np.int64), cx))
            ch = np.concatenate((np.zeros(1, np.int64), ch))
            keep = np.concatenate(([True], cx[1:] != cx[:-1]))  # one point per capacity
            self._cx, self._ch = cx[keep], ch[keep]
        return self._cx, self._ch  # type: ignore[return-value]

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """The exact curve as two int64 arrays ``(capacities, hits)``: ``(0, 0)`` first,
        linear between consecutive points, flat after the last. O(B log B) once per change.
        """
        return self._points()

    def breakpoints(self) -> list[CurvePoint]:
        """:meth:`points` as a list of :class:`CurvePoint`. O(B) after :meth:`points`."""
        cx, ch = self._points()
        return [CurvePoint(c, h) for c, h in zip(cx.tolist(), ch.tolist(), strict=True)]

    def corners(self) -> int:
        """Breakpoints of the curve (its points after ``(0, 0)``). O(points)."""
        return len(self._points()[0]) - 1

    def hits_at(self, capacity_blocks: int) -> int:
        """Cumulative hits at ``capacity_blocks`` (negative = infinite). O(log B)."""
        cx, ch = self._points()
        if capacity_blocks < 0:
            return int(ch[-1])
        i = int(np.searchsorted(cx, capacity_blocks, "right")) - 1
        c0, h0 = int(cx[i]), int(ch[i])
        if i + 1 == len(cx):
            return h0
        c1, h1 = int(cx[i + 1]), int(ch[i + 1])
        return h0 + (h1 - h0) * (capacity_blocks - c0) // (c1 - c0)

    def hits_at_many(self, capacities: np.ndarray) -> np.ndarray:
        """:meth:`hits_at` of an int64 array of capacities (>= 0), vectorised. O(k log B)."""
        cx, ch = self._points()
        caps = np.asarray(capacities, np.int64)
        i = np.searchsorted(cx, caps, "right") - 1
        j = np.minimum(i + 1, len(cx) - 1)
        span = np.maximum(cx[j] - cx[i], 1)
        return ch[i] + (ch[j] - ch[i]) * (caps - cx[i]) // span

    def infinite_hits(self) -> int:
        """Cumulative hits with unlimited capacity (the theoretical maximum). O(1) cached."""
        return int(self._points()[1][-1])

    def smallest_capacity_for(self, hits: int) -> int:
        """The smallest capacity whose cumulative hits reach ``hits``. O(log B).

        Raises :class:`InvalidRequestError` if even infinite capacity cannot reach it.
        """
        cx, ch = self._points()
        top = int(ch[-1])
        if hits > top:
            raise InvalidRequestError(f"hits {hits} exceeds the infinite-capacity total {top}")
        if hits <= 0:
            return 0
        i = int(np.searchsorted(ch, hits, "left"))  # hits never decrease along the points
        c1, h1 = int(cx[i]), int(ch[i])
        c0, h0 = int(cx[i - 1]), int(ch[i - 1])
        # the smallest c in (c0, c1] with h0 + (h1 - h0) * (c - c0) // (c1 - c0) >= hits
        return c0 + -(-(hits - h0) * (c1 - c0) // (h1 - h0))

    def memory_bytes(self) -> int:
        """Bytes of the arrays and the buffer (what the accumulator holds). O(1)."""
        buffered = (len(self._unit) + len(self._bp) + len(self._bv)) * 8
        return self._pos.nbytes + self._val.nbytes + buffered

    def _check(self) -> None:
        """Invariants (tests): sorted unique positions >= 1, no zero value, a curve that
        never decreases and ends flat."""
        pos, val = self.arrays()
        assert pos.shape == val.shape
        if len(pos):
            assert int(pos[0]) >= 1 and bool((pos[1:] > pos[:-1]).all())
            assert bool((val != 0).all())
        cx, ch = self._points()
        assert int(cx[0]) == 0 and int(ch[0]) == 0
        assert bool((cx[1:] > cx[:-1]).all()) and bool((ch[1:] >= ch[:-1]).all())
        if self.kind == "ramps" and len(val):
            assert int(np.cumsum(val.astype(np.int64))[-1]) == 0  # flat at the end
