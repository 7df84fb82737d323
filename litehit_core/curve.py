"""One instance's exact token hit curve over every capacity: the one implementation behind
``litehit curve`` (from a ledger) and the live curves of ``litehit serve``.

An :class:`InstanceCurve` sums the facts of one instance (one model, one block size) in a
:class:`~litehit_core.accumulator.HitCurveAccumulator` of hit *blocks* and multiplies by
``block_size_tokens`` when read, so its values are hit tokens; divided by the summed input
tokens they are the token hit rate of an LRU of any capacity (rule: ratios of sums).

Capacities are in the curve's *unit*: blocks of ``block_bytes`` for model ``lru`` (the
facts are ramps in blocks), bytes for model ``hybrid`` (the facts are staircases of byte
thresholds). A hybrid curve may count its thresholds in a coarser *resolution*
(``resolution_bytes``: the gcd of the block and state bytes online, doubled only if the
curve would exceed ``max_corners``): it is exact at every multiple of the resolution, and
since every threshold of an instance is a sum of block and state charges, at every byte
while the resolution is that gcd.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from litehit_core.accumulator import CurvePoint, HitCurveAccumulator
from litehit_core.engine import DEFAULT_MODEL, FACT_MODELS
from litehit_core.errors import InvalidRequestError
from litehit_core.model import HitCurveSegment, HitCurveStep
from litehit_core.projector import bytes_to_blocks, capacity_gb_to_bytes

__all__ = ["GIB", "MARK_PERCENTS", "InstanceCurve", "Mark", "log_spaced"]

GIB = 1024**3
MARK_PERCENTS = (90, 95, 99)
"""Marked points: the smallest capacity reaching this percentage of the theoretical hits."""


def log_spaced(low: int, top: int, count: int) -> np.ndarray:
    """``count`` distinct integers from ``low`` to ``top`` (both included, 1 <= low <= top),
    log-spaced, consecutive where rounding would repeat one; every integer of the range when
    it holds fewer. An int64 array, ascending. O(count)."""
    if top - low + 1 <= count:
        return np.arange(low, top + 1, dtype=np.int64)
    if count == 1:
        return np.array([top], np.int64)
    steps = np.arange(count, dtype=np.int64)
    raw = np.geomspace(low, top, count).round().astype(np.int64)
    rising = np.maximum.accumulate(raw - steps) + steps  # strictly increasing
    return np.minimum(rising, top - (count - 1 - steps))


class Mark(NamedTuple):
    """The smallest capacity whose hits reach ``percent``% of the infinite-capacity hits.

    ``target_hit_tokens = ceil(percent * infinite / 100)``; ``capacity`` is in the curve's
    unit (blocks, or bytes for hybrid instances) and ``hit_tokens`` the exact value there
    (>= target, and one unit less is below it).
    """

    percent: int
    target_hit_tokens: int
    capacity: int
    capacity_bytes: int
    capacity_gb: float
    hit_tokens: int
    hit_rate: float


class InstanceCurve:
    """The exact cumulative token hit curve of one instance.

    ``model`` (a :data:`~litehit_core.model.FACT_MODELS` name), ``block_size_tokens`` and
    ``block_bytes`` fix how facts read; ``resolution_bytes`` (hybrid only, default 1) and
    ``max_corners`` (0 = unlimited) bound a hybrid curve as the module docstring says.
    ``add`` is O(segments) amortised; reads build the curve once per change (O(B log B)
    for B corners) and then cost O(log B).
    """

    __slots__ = (
        "instance_id",
        "model",
        "block_size_tokens",
        "block_bytes",
        "first_trace_id",
        "accumulator",
        "requests",
        "input_tokens",
        "_steps",
    )

    def __init__(
        self,
        instance_id: str,
        block_size_tokens: int,
        block_bytes: int,
        first_trace_id: str = "",
        model: str = DEFAULT_MODEL,
        resolution_bytes: int = 1,
        max_corners: int = 0,
        accumulator: HitCurveAccumulator | None = None,
    ) -> None:
        facts = FACT_MODELS.get(model)
        if facts is None:
            raise InvalidRequestError(f"model must be one of {sorted(FACT_MODELS)}, got {model!r}")
        for name, value in (("block_size_tokens", block_size_tokens), ("block_bytes", block_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRequestError(f"{name} must be an integer >= 1, got {value!r}")
        self.instance_id = instance_id
        self.model = model
        self.block_size_tokens = block_size_tokens
        self.block_bytes = block_bytes
        self.first_trace_id = first_trace_id
        self._steps = facts.curve == "steps"
        if accumulator is None:
            scale = resolution_bytes if self._steps else 1
            accumulator = HitCurveAccumulator(max_corners if self._steps else 0, scale)
        self.accumulator = accumulator
        self.requests = 0
        self.input_tokens = 0

    # ------------------------------------------------------------------ adding

    def add(
        self, hit_curve: tuple[HitCurveSegment, ...] | tuple[HitCurveStep, ...], input_tokens: int
    ) -> None:
        """Add one request's fact curve and its input tokens. O(segments) amortised."""
        if self._steps:
            self.accumulator.add_steps(hit_curve)
        else:
            self.accumulator.add_curve(hit_curve)  # type: ignore[arg-type]
        self.requests += 1
        self.input_tokens += input_tokens

    @property
    def add_fact_curve(self) -> Callable[[tuple], None]:
        """The accumulator's own add for this model's fact curves (ramps or steps), bound:
        the service's hot path. It adds the curve only; ``requests`` and ``input_tokens``
        are the caller's to keep. O(1)."""
        acc = self.accumulator
        return acc.add_steps if self._steps else acc.add_curve

    def frozen(self) -> InstanceCurve:
        """An immutable copy of the curve as it is now, readable without this curve's lock
        (see :meth:`HitCurveAccumulator.frozen`). O(1) after a merge."""
        view = InstanceCurve(
            self.instance_id,
            self.block_size_tokens,
            self.block_bytes,
            self.first_trace_id,
            self.model,
            accumulator=self.accumulator.frozen(),
        )
        view.requests, view.input_tokens = self.requests, self.input_tokens
        return view

    # ------------------------------------------------------------------- units

    @property
    def unit(self) -> str:
        """``"blocks"`` or ``"bytes"``: what a capacity of this curve counts."""
        return FACT_MODELS[self.model].unit

    @property
    def unit_bytes(self) -> int:
        """Bytes of one capacity unit: ``block_bytes`` for blocks, 1 for bytes."""
        return self.block_bytes if self.unit == "blocks" else 1

    @property
    def resolution_bytes(self) -> int:
        """The curve is exact at every multiple of this many bytes (one block for ``lru``)."""
        return self.unit_bytes * self.accumulator.scale

    def capacity_bytes(self, capacity: int) -> int:
        """Bytes of a capacity in the curve's unit. O(1)."""
        return capacity * self.unit_bytes

    def capacity_gb(self, capacity: int) -> float:
        """GiB of a capacity in the curve's unit. O(1)."""
        return capacity * self.unit_bytes / GIB

    def units_for_bytes(self, capacity_bytes: int) -> int:
        """A capacity in bytes in the curve's unit: whole blocks, or bytes; -1 if negative
        (infinite). O(1)."""
        if capacity_bytes < 0:
            return -1
        return bytes_to_blocks(capacity_bytes, self.unit_bytes)

    def units_for_gb(self, capacity_gb: float) -> int:
        """``capacity_gb`` GiB in the curve's unit, the facts query's conversion (whole
        blocks, or bytes); -1 if negative."""
        if capacity_gb < 0:
            return -1
        return self.units_for_bytes(capacity_gb_to_bytes(capacity_gb))

    # ----------------------------------------------------------------- reading

    def rate(self, hit_tokens: int) -> float:
        """``hit_tokens / input_tokens`` (0.0 without tokens), as the facts query does. O(1)."""
        return hit_tokens / self.input_tokens if self.input_tokens else 0.0

    def breakpoints(self) -> list[CurvePoint]:
        """Exact ``(capacity, hit_tokens)`` points; linear in between, flat after."""
        bs = self.block_size_tokens
        return [CurvePoint(c, h * bs) for c, h in self.accumulator.breakpoints()]

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """The breakpoints as int64 arrays ``(capacities, hit_tokens)``. O(B)."""
        cx, ch = self.accumulator.points()
        return cx, ch * self.block_size_tokens

    def corners(self) -> int:
        """Breakpoints of the curve after ``(0, 0)``. O(1) after a build."""
        return self.accumulator.corners()

    def hit_tokens_at(self, capacity: int) -> int:
        """Hit tokens at a capacity in the curve's unit (negative = infinite). O(log B)."""
        return self.accumulator.hits_at(capacity) * self.block_size_tokens

    def hit_tokens_at_many(self, capacities: np.ndarray) -> np.ndarray:
        """:meth:`hit_tokens_at` of an int64 array of capacities >= 0. O(k log B)."""
        return self.accumulator.hits_at_many(capacities) * self.block_size_tokens

    def hit_rate_at(self, capacity: int) -> float:
        """Token hit rate at a capacity in the curve's unit (negative = infinite). O(log B)."""
        return self.rate(self.hit_tokens_at(capacity))

    def hit_rate_at_gb(self, capacity_gb: float) -> float:
        """Token hit rate at ``capacity_gb`` GiB (negative = infinite). O(log B)."""
        return self.hit_rate_at(self.units_for_gb(capacity_gb))

    @property
    def infinite_hit_tokens(self) -> int:
        """Hit tokens with unlimited capacity: the theoretical maximum. O(1) cached."""
        return self.accumulator.infinite_hits() * self.block_size_tokens

    @property
    def infinite_hit_rate(self) -> float:
        """Token hit rate with unlimited capacity. O(1) cached."""
        return self.rate(self.infinite_hit_tokens)

    def capacity_for_hit_tokens(self, hit_tokens: int) -> int:
        """The smallest capacity (curve's unit) whose hits reach ``hit_tokens``. O(log B);
        InvalidRequestError above the theoretical maximum."""
        bs = self.block_size_tokens
        return self.accumulator.smallest_capacity_for(-(-hit_tokens // bs))

    def capacity_for_fraction(self, fraction: float) -> int:
        """The smallest capacity (curve's unit) whose hits reach ``fraction`` (0 < f <= 1)
        of the theoretical hits: ``ceil(f * theoretical)`` with ``f`` read as the decimal it
        prints as (0.9 is 9/10, as :meth:`mark` (90) reads it, not the binary float just
        above it); 0 when there are no hits. O(log B)."""
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise InvalidRequestError(f"target fraction must be a number, got {fraction!r}")
        if not 0 < fraction <= 1:
            raise InvalidRequestError(f"target fraction must be in (0, 1], got {fraction!r}")
        exact = Fraction(repr(float(fraction)))
        total = self.accumulator.infinite_hits()
        target = -(-exact.numerator * total // exact.denominator)
        return self.accumulator.smallest_capacity_for(target)

    @property
    def saturation(self) -> int:
        """The smallest capacity (curve's unit) reaching the theoretical maximum. O(log B)."""
        return self.accumulator.smallest_capacity_for(self.accumulator.infinite_hits())

    @property
    def first_hit(self) -> int:
        """The smallest capacity (curve's unit) with any hit (0 without hits). O(log B)."""
        return self.accumulator.smallest_capacity_for(1) if self.accumulator.infinite_hits() else 0

    def mark(self, percent: int) -> Mark:
        """The smallest capacity reaching ``percent``% (0..100) of the theoretical hits.

        Exact integer arithmetic: target = ceil(percent * infinite / 100). O(log B).
        """
        if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
            raise InvalidRequestError(f"percent must be an integer in [0, 100], got {percent!r}")
        target = -(-percent * self.infinite_hit_tokens // 100)
        capacity = self.capacity_for_hit_tokens(target)
        hits = self.hit_tokens_at(capacity)
        return Mark(
            percent,
            target,
            capacity,
            self.capacity_bytes(capacity),
            self.capacity_gb(capacity),
            hits,
            self.rate(hits),
        )

    def marks(self, percents: tuple[int, ...] = MARK_PERCENTS) -> list[Mark]:
        """:meth:`mark` for each of ``percents``. O(len x log B)."""
        return [self.mark(p) for p in percents]

    def memory_bytes(self) -> int:
        """Bytes the curve holds (its accumulator's arrays and buffer). O(1)."""
        return self.accumulator.memory_bytes()
