"""HitCurveAccumulator: exact cumulative hits at every capacity, breakpoints, inverse query."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from litehit_core.accumulator import CurvePoint, HitCurveAccumulator
from litehit_core.model import HitCurveSegment, InvalidRequestError, RequestFact
from litehit_core.projector import project_blocks, project_infinite

S = HitCurveSegment

WORKED_CURVES: list[tuple[HitCurveSegment, ...]] = [
    (),
    (S(1, 2),),
    (S(1, 2), S(4, 1)),
    (S(1, 1),),
    (S(1, 2),),
]


@st.composite
def curves(draw: st.DrawFn) -> tuple[HitCurveSegment, ...]:
    out = []
    last_end = 0
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        start = last_end + 1 + draw(st.integers(min_value=0, max_value=12))
        run = draw(st.integers(min_value=1, max_value=10))
        out.append(S(start, run))
        last_end = start + run - 1
    return tuple(out)


def facts_of(curve_list: list[tuple[HitCurveSegment, ...]]) -> list[RequestFact]:
    return [RequestFact(c, sum(r for _, r in c)) for c in curve_list]


def filled(curve_list: list[tuple[HitCurveSegment, ...]]) -> HitCurveAccumulator:
    acc = HitCurveAccumulator()
    for f in facts_of(curve_list):
        acc.add(f)
    return acc


def max_threshold(curve_list: list[tuple[HitCurveSegment, ...]]) -> int:
    return max((s + r - 1 for c in curve_list for s, r in c), default=0)


# ---------------------------------------------------------------- worked example


def test_worked_example_breakpoints_and_hits() -> None:
    acc = filled(WORKED_CURVES)
    assert acc.breakpoints() == [(0, 0), (1, 4), (2, 7), (3, 7), (4, 8)]
    assert all(isinstance(p, CurvePoint) for p in acc.breakpoints())
    assert [acc.hits_at(c) for c in range(7)] == [0, 4, 7, 7, 8, 8, 8]
    assert acc.hits_at(-1) == 8
    assert acc.infinite_hits() == 8
    assert acc.requests == 5


def test_worked_example_weighted_by_block_size_gives_hit_tokens() -> None:
    acc = HitCurveAccumulator()
    for f, tokens in zip(facts_of(WORKED_CURVES), [13, 12, 13, 8, 8]):
        acc.add(f, weight=4, input_tokens=tokens)
    assert acc.input_tokens == 54
    assert acc.hits_at(2) == 28
    assert acc.hits_at(3) == 28
    assert acc.infinite_hits() == 32


def test_worked_example_smallest_capacity() -> None:
    acc = filled(WORKED_CURVES)
    assert [acc.smallest_capacity_for(h) for h in range(9)] == [0, 1, 1, 1, 1, 2, 2, 2, 4]


# ---------------------------------------------------------------- exactness (property)


@given(curve_list=st.lists(curves(), max_size=25))
def test_hits_at_equals_sum_of_projections_at_every_capacity(
    curve_list: list[tuple[HitCurveSegment, ...]],
) -> None:
    facts = facts_of(curve_list)
    acc = filled(curve_list)
    for c in range(max_threshold(curve_list) + 3):
        assert acc.hits_at(c) == sum(project_blocks(f, c) for f in facts), c
    total = sum(project_infinite(f) for f in facts)
    assert acc.infinite_hits() == total
    assert acc.hits_at(-1) == total
    assert acc.hits_at(10**12) == total


@given(curve_list=st.lists(curves(), max_size=25))
def test_breakpoints_are_monotone_and_end_at_the_infinite_total(
    curve_list: list[tuple[HitCurveSegment, ...]],
) -> None:
    acc = filled(curve_list)
    points = acc.breakpoints()
    assert points[0] == (0, 0)
    caps = [p.capacity_blocks for p in points]
    hits = [p.hits for p in points]
    assert caps == sorted(set(caps))  # strictly increasing capacities
    assert all(a <= b for a, b in zip(hits, hits[1:]))
    assert hits[-1] == sum(r for c in curve_list for _, r in c)
    # every breakpoint lies on the true curve, and the curve is flat after the last one
    facts = facts_of(curve_list)
    for cap, h in points:
        assert h == sum(project_blocks(f, cap) for f in facts)
    assert caps[-1] <= max_threshold(curve_list)


@given(curve_list=st.lists(curves(), min_size=1, max_size=25))
def test_smallest_capacity_for_is_exact(curve_list: list[tuple[HitCurveSegment, ...]]) -> None:
    acc = filled(curve_list)
    total = acc.infinite_hits()
    assert acc.smallest_capacity_for(0) == 0
    for target in range(1, total + 1):
        c = acc.smallest_capacity_for(target)
        assert acc.hits_at(c) >= target
        assert c >= 1 and acc.hits_at(c - 1) < target
    with pytest.raises(InvalidRequestError) as info:
        acc.smallest_capacity_for(total + 1)
    assert str(total + 1) in str(info.value) and str(total) in str(info.value)


@given(weighted=st.lists(st.tuples(curves(), st.integers(min_value=1, max_value=64)), max_size=20))
def test_weights_scale_each_curve(
    weighted: list[tuple[tuple[HitCurveSegment, ...], int]],
) -> None:
    acc = HitCurveAccumulator()
    for curve, w in weighted:
        acc.add_curve(curve, weight=w)
    facts = [(RequestFact(c, 0), w) for c, w in weighted]
    for c in range(max_threshold([c for c, _ in weighted]) + 3):
        assert acc.hits_at(c) == sum(w * project_blocks(f, c) for f, w in facts)
    for target in range(1, acc.infinite_hits() + 1, 7):
        cap = acc.smallest_capacity_for(target)
        assert acc.hits_at(cap) >= target > acc.hits_at(cap - 1)


# ---------------------------------------------------------------- bookkeeping


def test_empty_accumulator() -> None:
    acc = HitCurveAccumulator()
    assert acc.breakpoints() == [(0, 0)]
    assert acc.hits_at(0) == 0 and acc.hits_at(100) == 0 and acc.hits_at(-1) == 0
    assert acc.infinite_hits() == 0
    assert acc.smallest_capacity_for(0) == 0
    with pytest.raises(InvalidRequestError, match="hits 1 exceeds the infinite-capacity total 0"):
        acc.smallest_capacity_for(1)
    assert (acc.requests, acc.input_tokens) == (0, 0)


def test_adding_after_a_query_invalidates_the_cached_curve() -> None:
    acc = HitCurveAccumulator()
    acc.add_curve((S(1, 2),))
    assert acc.hits_at(5) == 2
    acc.add_curve((S(3, 1),))
    assert acc.hits_at(5) == 3
    assert acc.breakpoints() == [(0, 0), (3, 3)]  # slope 1 throughout: one line


def test_add_many_equals_repeated_add_curve() -> None:
    one = HitCurveAccumulator()
    many = HitCurveAccumulator()
    for c in WORKED_CURVES:
        one.add_curve(c, weight=3)
    many.add_many(WORKED_CURVES, weight=3)
    assert one.breakpoints() == many.breakpoints()


def test_add_counts_requests_and_tokens() -> None:
    acc = HitCurveAccumulator()
    acc.add(RequestFact((S(1, 1),), 3), input_tokens=13)
    acc.add(RequestFact((), 0), input_tokens=2)
    assert (acc.requests, acc.input_tokens) == (2, 15)
    assert acc.hits_at(1) == 1


def test_touching_segments_of_different_facts() -> None:
    # one fact ends exactly where another starts: slopes +1 then +1 -> no spurious point
    acc = HitCurveAccumulator()
    acc.add_curve((S(1, 3),))
    acc.add_curve((S(4, 2),))
    assert acc.breakpoints() == [(0, 0), (5, 5)]
    assert [acc.hits_at(c) for c in range(7)] == [0, 1, 2, 3, 4, 5, 5]
    assert acc.smallest_capacity_for(4) == 4
