"""Projection: the only place where a capacity meets a :class:`RequestFact`.

Capacities are in blocks; :func:`project_bytes` is the single byte boundary (one floor
division by ``block_bytes``). Every component (online service, offline replay, facts
queries, curves) goes through these functions; a component holding an engine of any model
goes through the :class:`Projection` its :class:`~litehit_core.engine.EngineSpec` describes.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import chain

import numpy as np

from litehit_core.engine import EngineSpec
from litehit_core.errors import InvalidRequestError
from litehit_core.model import HitCurveSegment, RequestFact

_GIB = 1024**3
_INFINITE_BLOCKS = 1 << 62
MAX_CAPACITY_GB = (2**63 - 1) // _GIB
"""Largest finite capacity_gb whose bytes fit in int64 (the wire's type; about 8 EiB)."""


def project_curve(hit_curve: Sequence[HitCurveSegment], capacity_blocks: int) -> int:
    """Hit blocks of one hit curve at ``capacity_blocks`` (blocks). O(segments).

    Sum over segments with ``start <= C`` of ``min(run, C - start + 1)``.
    """
    hits = 0
    for start, run in hit_curve:
        if start > capacity_blocks:
            break  # thresholds strictly increase along the curve
        span = capacity_blocks - start + 1
        hits += run if run < span else span
    return hits


def project_curve_infinite(hit_curve: Sequence[HitCurveSegment]) -> int:
    """Hit blocks of one hit curve at infinite capacity. O(segments)."""
    if len(hit_curve) < 2:
        return hit_curve[0][1] if hit_curve else 0
    return sum([run for _, run in hit_curve])


def project_curve_slots(
    hit_curve: Sequence[HitCurveSegment], capacities_blocks: Sequence[int]
) -> list[int]:
    """Hit blocks of one curve at each of many capacities (blocks), in their order.

    Same result as ``[project_curve(hit_curve, c) for c in capacities_blocks]``, with the
    common zero-, one- and two-segment curves done in one pass. O(slots * segments).
    """
    if not hit_curve:
        return [0] * len(capacities_blocks)
    if len(hit_curve) == 1:
        start, run = hit_curve[0]
        last = start + run - 1
        return [
            run if c >= last else (c - start + 1 if c >= start else 0) for c in capacities_blocks
        ]
    if len(hit_curve) == 2:  # one queue jump: the common multi-segment shape
        (s1, r1), (s2, r2) = hit_curve
        l1 = s1 + r1 - 1
        l2 = s2 + r2 - 1
        return [
            (r1 if c >= l1 else (c - s1 + 1 if c >= s1 else 0))
            + (r2 if c >= l2 else (c - s2 + 1 if c >= s2 else 0))
            for c in capacities_blocks
        ]
    return [project_curve(hit_curve, c) for c in capacities_blocks]


def project_blocks(fact: RequestFact, capacity_blocks: int) -> int:
    """Hit blocks of ``fact`` in an LRU of ``capacity_blocks`` blocks. O(segments)."""
    return project_curve(fact.hit_curve, capacity_blocks)


def project_infinite(fact: RequestFact) -> int:
    """Hit blocks of ``fact`` with unlimited capacity (the theoretical maximum). O(segments)."""
    return project_curve_infinite(fact.hit_curve)


def bytes_to_blocks(capacity_bytes: int, block_bytes: int) -> int:
    """Whole blocks that fit in ``capacity_bytes``: the one floor division. O(1)."""
    if block_bytes <= 0:
        raise InvalidRequestError(f"block_bytes must be > 0, got {block_bytes}")
    if capacity_bytes < 0:
        raise InvalidRequestError(f"capacity_bytes must not be negative, got {capacity_bytes}")
    return capacity_bytes // block_bytes


def project_bytes(fact: RequestFact, capacity_bytes: int, block_bytes: int) -> int:
    """Hit blocks of ``fact`` in a cache of ``capacity_bytes`` bytes. O(segments)."""
    return project_curve(fact.hit_curve, bytes_to_blocks(capacity_bytes, block_bytes))


def capacity_gb_to_bytes(gb: float) -> int:
    """Binary GiB to bytes: ``trunc(gb * 1024**3)``. Rejects NaN and infinities. O(1)."""
    if not math.isfinite(gb):
        raise InvalidRequestError(f"capacity_gb must be finite, got {gb}")
    scaled = gb * _GIB
    if not math.isfinite(scaled):
        raise InvalidRequestError(f"capacity_gb is too large, got {gb}")
    return math.trunc(scaled)


INFINITE_CAPACITY_GB = -1
"""The one marker of an infinite capacity slot in a facts query (``litehit query``,
:func:`~litehit_core.query.query_facts`); it projects to -1 bytes (infinite)."""
CAPACITY_SLOT_RULE = (
    f"{INFINITE_CAPACITY_GB} (infinite) or a finite number of GiB in [0, {MAX_CAPACITY_GB}]"
)
"""What :func:`capacity_slot_bytes` accepts, as error messages word it."""


def capacity_slot_bytes(gb: object, field: str = "capacity_gb") -> int:
    """A query's capacity slot in GiB as bytes: the one rule for capacities offline and
    online. -1 (int or float) is infinite and gives -1; 0 and positive finite GiB up to
    :data:`MAX_CAPACITY_GB` give ``trunc(gb * 1024**3)`` (0 = no hits). Anything else (any
    other negative, NaN, an infinity, more than the maximum, not a number, a bool) is an
    :class:`InvalidRequestError` naming ``field`` and the value. O(1)."""
    if (
        isinstance(gb, bool)
        or not isinstance(gb, (int, float))
        or not (gb == INFINITE_CAPACITY_GB or 0 <= gb <= MAX_CAPACITY_GB)  # False for NaN
    ):
        raise InvalidRequestError(f"{field} must be {CAPACITY_SLOT_RULE}, got {gb!r}")
    return -1 if gb == INFINITE_CAPACITY_GB else capacity_gb_to_bytes(gb)


def capacity_gb_to_blocks(gb: float, block_bytes: int) -> int:
    """Binary GiB to whole blocks of ``block_bytes``; a negative ``gb`` is rejected. O(1)."""
    if gb < 0:
        raise InvalidRequestError(f"capacity_gb must not be negative, got {gb}")
    return bytes_to_blocks(capacity_gb_to_bytes(gb), block_bytes)


def project_matrix(
    curves: Sequence[Sequence[HitCurveSegment]],
    block_bytes: Sequence[int],
    slot_bytes: Sequence[int],
) -> np.ndarray:
    """Hit blocks of many curves at many byte capacities: an int64 (curves x slots) matrix.

    ``block_bytes[i]`` is curve i's block size in bytes; ``slot_bytes[k] < 0`` means
    infinite. The vectorised form of :func:`project_bytes` (same floor division, same
    clip per segment): O(segments x slots) numpy work plus O(curves + segments) Python.
    """
    n_rows, n_slots = len(curves), len(slot_bytes)
    hits = np.zeros((n_rows, n_slots), dtype=np.int64)
    # Block capacities per distinct block size, in Python ints (a capacity in bytes may
    # exceed int64), capped at "infinite": the same floor division as bytes_to_blocks.
    sizes = sorted(set(block_bytes))
    for bb in sizes:
        if bb <= 0:
            raise InvalidRequestError(f"block_bytes must be > 0, got {bb}")
    per_size = np.array(
        [
            [_INFINITE_BLOCKS if sb < 0 else min(sb // bb, _INFINITE_BLOCKS) for sb in slot_bytes]
            for bb in sizes
        ],
        dtype=np.int64,
    ).reshape(len(sizes), n_slots)
    counts = np.fromiter(map(len, curves), dtype=np.int64, count=n_rows)
    n_segments = int(counts.sum())
    if not n_segments:
        return hits
    if len(sizes) == 1:
        row_caps = np.broadcast_to(per_size[0], (n_segments, n_slots))
    else:
        size_index = {bb: i for i, bb in enumerate(sizes)}
        which = np.fromiter(map(size_index.__getitem__, block_bytes), np.int64, count=n_rows)
        row_caps = per_size[np.repeat(which, counts)]
    flat = np.fromiter(
        chain.from_iterable(chain.from_iterable(curves)), np.int64, count=2 * n_segments
    ).reshape(n_segments, 2)
    owner = np.repeat(np.arange(n_rows), counts)
    np.add.at(hits, owner, _ramp_hits(row_caps, flat[:, :1], flat[:, 1:2]))
    return hits


def _ramp_hits(capacities: np.ndarray, starts: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """Hit blocks of each segment (rows) at each capacity (columns): ``min(run, C - start
    + 1)`` when ``start <= C``, else 0 (:func:`project_curve`'s sum term). O(size)."""
    return np.clip(capacities - starts + 1, 0, runs)


def project_segments(
    starts: np.ndarray, runs: np.ndarray, offsets: np.ndarray, capacities_blocks: Sequence[int]
) -> np.ndarray:
    """Hit blocks of many ramps facts given as arrays (fact r's segments are
    ``starts``/``runs`` at ``offsets[r]:offsets[r + 1]``) at each capacity in blocks: an
    int64 (facts x slots) matrix, the same numbers as :func:`project_curve_slots` per fact.
    O(segments x slots) numpy work."""
    used = int(offsets[-1]) if len(offsets) else 0
    caps = np.asarray(capacities_blocks, np.int64)[None, :]
    per_segment = _ramp_hits(caps, starts[:used, None], runs[:used, None])
    summed = np.zeros((used + 1, caps.shape[1]), np.int64)
    np.cumsum(per_segment, axis=0, out=summed[1:])
    return summed[offsets[1:]] - summed[offsets[:-1]]


def segment_sums(runs: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Hit blocks at infinite capacity of many ramps facts given as arrays (see
    :func:`project_segments`). O(segments)."""
    summed = np.zeros(int(offsets[-1]) + 1 if len(offsets) else 1, np.int64)
    np.cumsum(runs[: len(summed) - 1], out=summed[1:])
    return summed[offsets[1:]] - summed[offsets[:-1]]


def project_steps_matrix(
    curves: Sequence[Sequence[tuple[int, int]]],
    unit_bytes: Sequence[int],
    slot_bytes: Sequence[int],
) -> np.ndarray:
    """Hit blocks of many staircases at many byte capacities: an int64 (curves x slots)
    matrix, the vectorised :func:`project_steps`.

    ``unit_bytes[i]`` is the bytes of curve i's capacity unit (1 for thresholds in bytes,
    ``block_bytes`` for thresholds in blocks: the same floor division as
    :func:`bytes_to_blocks`); ``slot_bytes[k] < 0`` means infinite. O(corners x slots)
    numpy work plus O(curves + corners) Python.
    """
    n_rows, n_slots = len(curves), len(slot_bytes)
    hits = np.zeros((n_rows, n_slots), dtype=np.int64)
    counts = np.fromiter(map(len, curves), dtype=np.int64, count=n_rows)
    n_corners = int(counts.sum())
    if not n_corners:
        return hits
    for ub in set(unit_bytes):
        if ub <= 0:
            raise InvalidRequestError(f"unit_bytes must be > 0, got {ub}")
    flat = np.fromiter(
        chain.from_iterable(chain.from_iterable(curves)), np.int64, count=2 * n_corners
    ).reshape(n_corners, 2)
    owner = np.repeat(np.arange(n_rows), counts)
    # increments of hit blocks at each corner (hits are cumulative along a staircase)
    jumps = flat[:, 1].copy()
    starts = np.cumsum(counts) - counts
    inner = np.ones(n_corners, dtype=bool)
    inner[starts[counts > 0]] = False
    jumps[inner] -= flat[:-1, 1][inner[1:]]
    sizes = sorted(set(unit_bytes))
    per_size = np.array(
        [
            [_INFINITE_BLOCKS if sb < 0 else min(sb // ub, _INFINITE_BLOCKS) for sb in slot_bytes]
            for ub in sizes
        ],
        dtype=np.int64,
    ).reshape(len(sizes), n_slots)
    index = {ub: i for i, ub in enumerate(sizes)}
    which = np.fromiter(map(index.__getitem__, unit_bytes), np.int64, count=n_rows)
    reached = flat[:, :1] <= per_size[which[owner]]
    np.add.at(hits, owner, reached * jumps[:, None])
    return hits


def project_steps(steps: Sequence[tuple[int, int]], capacity: int) -> int:
    """Hit blocks of a staircase (:class:`~litehit_core.model.HitCurveStep` corners) at
    ``capacity`` (the staircase's unit): the last corner with ``threshold <= capacity``.
    O(log corners)."""
    if not steps or steps[0][0] > capacity:
        return 0
    i = bisect_right(steps, (capacity, _INFINITE_BLOCKS)) - 1
    return steps[i][1]


def project_steps_slots(steps: Sequence[tuple[int, int]], capacities: Sequence[int]) -> list[int]:
    """:func:`project_steps` at each of many capacities, in their order. O(slots log corners)."""
    if not steps:
        return [0] * len(capacities)
    if len(steps) == 1:
        threshold, hits = steps[0]
        return [hits if c >= threshold else 0 for c in capacities]
    return [project_steps(steps, c) for c in capacities]


class Projection:
    """Capacity meets the facts of one instance: bytes -> the model's unit -> hits.

    Built once per instance from its :class:`~litehit_core.engine.EngineSpec` and its block
    size in bytes. :meth:`units` turns a capacity in bytes into the unit of the model's
    facts: whole blocks for ``"lru"`` (one floor division by ``block_bytes``), bytes as
    they are for ``"hybrid"`` (never rounded to blocks). The other methods read a fact
    (ramps or a staircase, as the model says) at capacities already in that unit.
    O(segments) per capacity.
    """

    __slots__ = ("block_bytes", "unit", "hits", "slots", "infinite")

    def __init__(self, spec: EngineSpec, block_bytes: int) -> None:
        if block_bytes <= 0:
            raise InvalidRequestError(f"block_bytes must be > 0, got {block_bytes}")
        self.block_bytes = block_bytes
        model = spec.description
        self.unit = model.unit
        if model.curve == "steps":
            self.hits = _steps_hits
            self.slots = _steps_slots
            self.infinite = _steps_infinite
        else:
            self.hits = _ramps_hits
            self.slots = _ramps_slots
            self.infinite = _ramps_infinite

    def units(self, capacity_bytes: int) -> int:
        """``capacity_bytes`` in the unit of the facts (blocks or bytes). O(1)."""
        if self.unit == "bytes":
            if capacity_bytes < 0:
                raise InvalidRequestError(
                    f"capacity_bytes must not be negative, got {capacity_bytes}"
                )
            return capacity_bytes
        return bytes_to_blocks(capacity_bytes, self.block_bytes)


def _ramps_hits(fact: RequestFact, units: int) -> int:
    """Hit blocks of a ramps fact at ``units`` blocks. O(segments)."""
    return project_curve(fact.hit_curve, units)


def _ramps_slots(fact: RequestFact, units: Sequence[int]) -> list[int]:
    return project_curve_slots(fact.hit_curve, units)


def _ramps_infinite(fact: RequestFact) -> int:
    return project_curve_infinite(fact.hit_curve)


def _steps_hits(fact: RequestFact, units: int) -> int:
    return project_steps(fact.hit_curve, units)


def _steps_slots(fact: RequestFact, units: Sequence[int]) -> list[int]:
    return project_steps_slots(fact.hit_curve, units)


def _steps_infinite(fact: RequestFact) -> int:
    curve = fact.hit_curve
    return curve[-1][1] if curve else 0
