"""The core InstanceCurve: units, targets read as decimals, log spacing, point copies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from litehit_core import HitCurveSegment, InvalidRequestError
from litehit_core.accumulator import HitCurveAccumulator
from litehit_core.curve import InstanceCurve, log_spaced

S = HitCurveSegment


def ten_blocks() -> InstanceCurve:
    """Theoretical hits: 10 blocks, one at each capacity 1..10 (40 tokens)."""
    curve = InstanceCurve("i", 4, 1024)
    for d in range(1, 11):
        curve.add((S(d, 1),), 4)
    return curve


def test_target_fractions_are_read_as_the_decimals_they_print_as():
    curve = ten_blocks()
    assert curve.infinite_hit_tokens == 40 and curve.saturation == 10
    # 0.9 of 10 blocks is 9 (not 10, as the binary float 0.9000000000000000222 would give)
    assert curve.capacity_for_fraction(0.9) == 9
    assert curve.mark(90).capacity == 9
    assert curve.capacity_for_fraction(0.1) == 1
    assert curve.capacity_for_fraction(1e-15) == 1  # the first hit
    assert curve.capacity_for_fraction(1.0) == 10
    assert curve.capacity_for_fraction(0.95) == 10
    for bad in (0.0, -0.5, 1.0000001, float("nan")):
        with pytest.raises(InvalidRequestError, match="target fraction must be in"):
            curve.capacity_for_fraction(bad)
    empty = InstanceCurve("e", 4, 1024)
    assert empty.capacity_for_fraction(0.5) == 0 and empty.first_hit == 0


def test_units_and_resolution_of_both_models():
    lru = InstanceCurve("a", 4, 1000)
    assert (lru.unit, lru.unit_bytes, lru.resolution_bytes) == ("blocks", 1000, 1000)
    assert lru.units_for_bytes(2999) == 2 and lru.units_for_bytes(-1) == -1
    hybrid = InstanceCurve("h", 4, 1024, model="hybrid", resolution_bytes=512)
    assert (hybrid.unit, hybrid.unit_bytes, hybrid.resolution_bytes) == ("bytes", 1, 512)
    hybrid.add(((1536, 2), (3072, 3)), 12)
    assert [hybrid.hit_tokens_at(c) for c in (1535, 1536, 3071, 3072, 10**9)] == [0, 8, 8, 12, 12]
    with pytest.raises(InvalidRequestError, match="model must be one of"):
        InstanceCurve("x", 4, 1024, model="fifo")
    with pytest.raises(InvalidRequestError, match="block_bytes must be an integer >= 1"):
        InstanceCurve("x", 4, 0)


@given(
    low=st.integers(min_value=1, max_value=10**6),
    span=st.integers(min_value=0, max_value=10**9),
    count=st.integers(min_value=1, max_value=600),
)
def test_log_spaced_is_distinct_ascending_and_spans_the_range(low, span, count):
    top = low + span
    caps = log_spaced(low, top, count)
    assert caps.dtype == np.int64
    assert len(caps) == min(count, top - low + 1)
    assert int(caps[-1]) == top and (count == 1 or int(caps[0]) == low)
    assert bool((caps[1:] > caps[:-1]).all())


def test_a_curve_copied_from_its_points_reads_the_same():
    curve = ten_blocks()
    curve.add((S(3, 4),), 16)
    cx, ch = curve.points()
    copy = InstanceCurve("i", 4, 1024, accumulator=HitCurveAccumulator.from_points(cx, ch // 4))
    copy.requests, copy.input_tokens = curve.requests, curve.input_tokens
    assert copy.breakpoints() == curve.breakpoints()
    assert [copy.hit_tokens_at(c) for c in range(13)] == [curve.hit_tokens_at(c) for c in range(13)]
    assert copy.marks() == curve.marks() and copy.saturation == curve.saturation
    assert copy.frozen().breakpoints() == curve.breakpoints()
    with pytest.raises(InvalidRequestError, match="frozen view"):
        copy.add((S(1, 1),), 4)
    with pytest.raises(InvalidRequestError, match=r"must start at \(0, 0\)"):
        HitCurveAccumulator.from_points(np.array([1, 2]), np.array([0, 1]))
    with pytest.raises(InvalidRequestError, match="strictly increase"):
        HitCurveAccumulator.from_points(np.array([0, 2, 2]), np.array([0, 1, 2]))
