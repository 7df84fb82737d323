"""HitCurveAccumulator: exact cumulative hits at every capacity, breakpoints, inverse query."""

from __future__ import annotations

from itertools import pairwise

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
    for f, tokens in zip(facts_of(WORKED_CURVES), [13, 12, 13, 8, 8], strict=True):
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
    assert all(a <= b for a, b in pairwise(hits))
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


# ---------------------------------------------------------------- buffer, steps, views

import random  # noqa: E402

import numpy as np  # noqa: E402

from litehit_core.projector import project_curve, project_steps  # noqa: E402


def random_ramps(rng: random.Random, n: int, depth: int) -> list[tuple[HitCurveSegment, ...]]:
    out = []
    for _ in range(n):
        segs, last = [], 0
        for _ in range(rng.randint(0, 3)):
            start = last + 1 + rng.randint(0, depth // 8)
            run = rng.randint(1, depth // 8 + 1)
            segs.append(S(start, run))
            last = start + run - 1
        out.append(tuple(segs))
    return out


def random_steps(rng: random.Random, n: int, top: int) -> list[tuple[tuple[int, int], ...]]:
    out = []
    for _ in range(n):
        thresholds = sorted(rng.sample(range(1, top), rng.randint(0, 4)))
        hits = sorted(rng.sample(range(1, 40), len(thresholds)))
        out.append(tuple(zip(thresholds, hits, strict=True)))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_many_merges_stay_exact_at_every_capacity(seed: int) -> None:
    """Thousands of curves: the buffer is merged many times; every capacity is still the
    sum of the projections, and the inverse query is exact."""
    rng = random.Random(seed)
    ramps = random_ramps(rng, 6000, 400)
    acc = HitCurveAccumulator()
    for i, curve in enumerate(ramps):
        acc.add_curve(curve, weight=1 + i % 3)
        if i % 1500 == 0:
            acc.hits_at(5)  # reads in between (cache invalidation across merges)
    acc._check()
    top = max_threshold(ramps) + 2
    expected = np.zeros(top + 1, np.int64)
    for i, curve in enumerate(ramps):
        for c in range(top + 1):
            expected[c] += (1 + i % 3) * project_curve(curve, c)
    got = acc.hits_at_many(np.arange(top + 1))
    assert got.tolist() == expected.tolist()
    assert [acc.hits_at(c) for c in range(0, top + 1, 37)] == expected[::37].tolist()
    for target in range(1, int(expected[-1]) + 1, 997):
        c = acc.smallest_capacity_for(target)
        assert expected[c] >= target > (expected[c - 1] if c else 0)


@pytest.mark.parametrize("seed", range(3))
def test_steps_are_exact_at_and_around_every_threshold(seed: int) -> None:
    rng = random.Random(seed)
    stairs = random_steps(rng, 3000, 5000)
    acc = HitCurveAccumulator()
    for st_ in stairs:
        acc.add_steps(st_)
    acc._check()
    caps = sorted({max(0, t + d) for s in stairs for t, _ in s for d in (-1, 0, 1)})
    want = [sum(project_steps(s, c) for s in stairs) for c in caps]
    assert acc.hits_at_many(np.array(caps)).tolist() == want
    assert [acc.hits_at(c) for c in caps[::11]] == want[::11]
    assert acc.infinite_hits() == sum(s[-1][1] for s in stairs if s)
    for target in range(1, acc.infinite_hits() + 1, 1013):
        c = acc.smallest_capacity_for(target)
        assert acc.hits_at(c) >= target > acc.hits_at(c - 1)


def test_kinds_do_not_mix() -> None:
    acc = HitCurveAccumulator()
    acc.add_steps(((4, 1),))
    with pytest.raises(InvalidRequestError, match="cannot add ramps to an accumulator of steps"):
        acc.add_curve((S(1, 1),))
    assert acc.kind == "steps" and acc.hits_at(4) == 1


def test_frozen_view_does_not_move_and_cannot_be_added_to() -> None:
    acc = HitCurveAccumulator()
    acc.add_curve((S(1, 2),))
    view = acc.frozen()
    for _ in range(3000):  # several merges in the source
        acc.add_curve((S(1, 3),))
    assert view.breakpoints() == [(0, 0), (2, 2)]
    assert acc.hits_at(3) == 2 + 3 * 3000
    with pytest.raises(InvalidRequestError, match="frozen view"):
        view.add_curve((S(1, 1),))


def test_arrays_round_trip_and_validation() -> None:
    rng = random.Random(5)
    acc = HitCurveAccumulator()
    for curve in random_ramps(rng, 3000, 300):
        acc.add_curve(curve)
    pos, val = acc.arrays()
    back = HitCurveAccumulator.from_arrays("ramps", pos.copy(), val.copy())
    assert back.breakpoints() == acc.breakpoints()
    back.add_curve((S(2, 5),))
    acc.add_curve((S(2, 5),))
    assert back.breakpoints() == acc.breakpoints()
    with pytest.raises(InvalidRequestError, match="kind must be one of"):
        HitCurveAccumulator.from_arrays("blocks", pos, val)
    with pytest.raises(InvalidRequestError, match="strictly increasing"):
        HitCurveAccumulator.from_arrays("ramps", pos[::-1].copy(), val)
    with pytest.raises(InvalidRequestError, match="one length"):
        HitCurveAccumulator.from_arrays("ramps", pos, val[:-1])
    with pytest.raises(InvalidRequestError, match="scale must be an integer >= 1"):
        HitCurveAccumulator.from_arrays("steps", pos, val, scale=0)


def test_memory_is_at_most_16_bytes_per_position_plus_an_eighth() -> None:
    acc = HitCurveAccumulator()
    for d in range(2, 200_001, 2):  # +1 at d, -1 at d + 1: 200,000 distinct positions
        acc.add_curve((S(d, 1),))
    pos, val = acc.arrays()
    assert len(pos) == 200_000
    assert pos.dtype == np.int32 and val.dtype == np.int32  # narrowed: 8 bytes per corner
    assert acc.memory_bytes() == 8 * 200_000
    for d in range(2, 99_999, 2):  # more adds sit in the buffer until B/2 of them:
        acc.add_curve((S(d, 1),))  # 8 bytes per slope change, 4 per corner at most
    assert acc.memory_bytes() == 8 * 200_000 + 8 * 99_998  # 49,999 segments, not merged
    assert acc.memory_bytes() <= 8 * 200_000 + 4 * 200_000
    acc.add_curve((S(2, 1),))  # the 100,000th entry: merged (the positions existed)
    assert acc.memory_bytes() == 8 * 200_000
    big = HitCurveAccumulator()
    big.add_curve((S(1, 1),), weight=1 << 40)
    assert big.arrays()[1].dtype == np.int64 and big.hits_at(1) == 1 << 40


def test_max_corners_coarsens_steps_exactly_at_multiples_of_the_scale() -> None:
    rng = random.Random(9)
    stairs = random_steps(rng, 4000, 100_000)
    exact = HitCurveAccumulator()
    bounded = HitCurveAccumulator(max_corners=500)
    for st_ in stairs:
        exact.add_steps(st_)
        bounded.add_steps(st_)
    pos, _ = bounded.arrays()
    assert len(pos) <= 500 and bounded.scale > 1
    bounded._check()
    k = bounded.scale
    caps = np.arange(0, 100_001, 97)
    on_grid = caps - caps % k
    assert bounded.hits_at_many(on_grid).tolist() == exact.hits_at_many(on_grid).tolist()
    assert (bounded.hits_at_many(caps) <= exact.hits_at_many(caps)).all()
    assert bounded.infinite_hits() == exact.infinite_hits()
    with pytest.raises(InvalidRequestError, match="max_corners must be an integer >= 0"):
        HitCurveAccumulator(max_corners=-1)
