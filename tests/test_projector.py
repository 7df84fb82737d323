"""Projector: capacity -> hit blocks, the byte boundary, GiB conversion, the vectorised form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litehit_core.model import HitCurveSegment, InvalidRequestError, RequestFact
from litehit_core.projector import (
    bytes_to_blocks,
    capacity_gb_to_blocks,
    capacity_gb_to_bytes,
    project_blocks,
    project_bytes,
    project_curve,
    project_curve_infinite,
    project_infinite,
    project_matrix,
)

GIB = 1024**3


def fact(*segments: tuple[int, int], total: int | None = None) -> RequestFact:
    curve = tuple(HitCurveSegment(s, r) for s, r in segments)
    return RequestFact(curve, total if total is not None else sum(r for _, r in curve))


@st.composite
def curves(draw: st.DrawFn) -> tuple[HitCurveSegment, ...]:
    """Contract-shaped curves: runs >= 1, thresholds strictly increasing."""
    out = []
    last_end = 0
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        start = last_end + 1 + draw(st.integers(min_value=0, max_value=40))
        run = draw(st.integers(min_value=1, max_value=20))
        out.append(HitCurveSegment(start, run))
        last_end = start + run - 1
    return tuple(out)


# ---------------------------------------------------------------- project_blocks


@pytest.mark.parametrize(
    "f", [fact(), fact((1, 1)), fact((1, 5)), fact((1, 2), (4, 1)), fact((3, 2), (9, 4))]
)
def test_capacity_zero_never_hits(f: RequestFact) -> None:
    assert project_blocks(f, 0) == 0


@pytest.mark.parametrize(
    ("capacity", "hits"),
    [
        (0, 0),
        (4, 0),  # start - 1
        (5, 1),  # start: first block of the run
        (6, 2),
        (7, 3),  # start + run - 1: the whole run
        (8, 3),  # start + run: nothing more to gain
        (10**9, 3),
    ],
)
def test_single_segment_edges(capacity: int, hits: int) -> None:
    assert project_blocks(fact((5, 3)), capacity) == hits


@pytest.mark.parametrize(
    ("capacity", "hits"),
    [
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 2),  # gap between segments: flat
        (4, 3),
        (9, 3),
        (10, 4),  # third segment starts
        (11, 5),
        (12, 6),
        (13, 6),
        (1000, 6),
    ],
)
def test_multi_segment_sums(capacity: int, hits: int) -> None:
    f = fact((1, 2), (4, 1), (10, 3))
    assert project_blocks(f, capacity) == hits
    assert project_curve(f.hit_curve, capacity) == hits


def test_worked_example_projection() -> None:
    # curves of the worked example; capacity 2 and 3 blocks, then infinite
    facts = [fact(total=3), fact((1, 2)), fact((1, 2), (4, 1)), fact((1, 1)), fact((1, 2))]
    assert [project_blocks(f, 2) for f in facts] == [0, 2, 2, 1, 2]
    assert [project_blocks(f, 3) for f in facts] == [0, 2, 2, 1, 2]
    assert [project_infinite(f) for f in facts] == [0, 2, 3, 1, 2]


def test_project_infinite() -> None:
    assert project_infinite(fact()) == 0
    assert project_infinite(fact((1, 2), (4, 1), (10, 3))) == 6
    assert project_curve_infinite([HitCurveSegment(7, 4)]) == 4


def test_total_blocks_does_not_affect_projection() -> None:
    # blocks past the curve miss at every capacity, however many there are
    assert project_blocks(fact((1, 2), total=50), 100) == 2
    assert project_infinite(fact((1, 2), total=50)) == 2


@given(curve=curves(), capacity=st.integers(min_value=0, max_value=400))
def test_project_blocks_counts_blocks_whose_threshold_fits(
    curve: tuple[HitCurveSegment, ...], capacity: int
) -> None:
    # block k of segment (s, r) hits exactly when s + k <= capacity
    thresholds = [s + k for s, r in curve for k in range(r)]
    expected = sum(1 for t in thresholds if t <= capacity)
    assert project_blocks(RequestFact(curve, len(thresholds)), capacity) == expected


# ---------------------------------------------------------------- bytes boundary


@pytest.mark.parametrize(
    ("capacity_bytes", "hits"),
    [
        (0, 0),
        (1023, 0),  # 0 whole blocks
        (1024, 1),
        (2 * 1024 - 1, 1),  # k * block_bytes - 1 -> k - 1 blocks
        (2 * 1024, 2),  # k * block_bytes -> k blocks
        (4 * 1024 - 1, 2),  # 3 blocks: the gap
        (4 * 1024, 3),
        (10**12, 3),
    ],
)
def test_project_bytes_floors_to_whole_blocks(capacity_bytes: int, hits: int) -> None:
    assert project_bytes(fact((1, 2), (4, 1)), capacity_bytes, 1024) == hits


def test_bytes_to_blocks() -> None:
    assert bytes_to_blocks(0, 1024) == 0
    assert bytes_to_blocks(3 * 1024 - 1, 1024) == 2
    assert bytes_to_blocks(3 * 1024, 1024) == 3
    assert bytes_to_blocks(7, 1) == 7


@pytest.mark.parametrize("block_bytes", [0, -1024])
def test_block_bytes_must_be_positive(block_bytes: int) -> None:
    with pytest.raises(InvalidRequestError, match=rf"block_bytes must be > 0, got {block_bytes}"):
        bytes_to_blocks(4096, block_bytes)
    with pytest.raises(InvalidRequestError, match="block_bytes"):
        project_bytes(fact((1, 2)), 4096, block_bytes)


def test_negative_capacity_bytes_rejected() -> None:
    with pytest.raises(InvalidRequestError, match=r"capacity_bytes must not be negative, got -1"):
        bytes_to_blocks(-1, 1024)
    with pytest.raises(InvalidRequestError, match="capacity_bytes"):
        project_bytes(fact((1, 2)), -1, 1024)


# ---------------------------------------------------------------- GiB conversion


@pytest.mark.parametrize(
    ("gb", "expected"),
    [
        (0, 0),
        (0.0, 0),
        (1, GIB),
        (0.5, GIB // 2),
        (2048 / GIB, 2048),
        (3072 / GIB, 3072),
        (2.75 / GIB, 2),  # truncation, not rounding
        (2.999 / GIB, 2),
        (1e-12, 0),
        (-2.75 / GIB, -2),  # trunc goes toward zero
        (1.5, 1610612736),
    ],
)
def test_capacity_gb_to_bytes_truncates(gb: float, expected: int) -> None:
    out = capacity_gb_to_bytes(gb)
    assert out == expected
    assert type(out) is int


@pytest.mark.parametrize("gb", [math.nan, math.inf, -math.inf])
def test_capacity_gb_to_bytes_rejects_non_finite(gb: float) -> None:
    with pytest.raises(InvalidRequestError) as info:
        capacity_gb_to_bytes(gb)
    assert "capacity_gb" in str(info.value)
    assert str(gb) in str(info.value)


def test_capacity_gb_to_blocks() -> None:
    assert capacity_gb_to_blocks(1, 1024) == 1024 * 1024
    assert capacity_gb_to_blocks((3 * 1024 - 1) / GIB, 1024) == 2  # bytes first, then floor
    assert capacity_gb_to_blocks(0, 1024) == 0
    with pytest.raises(InvalidRequestError, match=r"capacity_gb must not be negative, got -1"):
        capacity_gb_to_blocks(-1, 1024)
    with pytest.raises(InvalidRequestError, match="capacity_gb"):
        capacity_gb_to_blocks(math.nan, 1024)
    with pytest.raises(InvalidRequestError, match="block_bytes"):
        capacity_gb_to_blocks(1, 0)


# ---------------------------------------------------------------- project_matrix


def test_project_matrix_worked_example() -> None:
    curves_ = [(), ((1, 2),), ((1, 2), (4, 1)), ((1, 1),), ((1, 2),)]
    out = project_matrix(curves_, [1024] * 5, [2048, 3072, -1, 0])
    assert out.dtype == np.int64
    assert out.tolist() == [[0, 0, 0, 0], [2, 2, 2, 0], [2, 2, 3, 0], [1, 1, 1, 0], [2, 2, 2, 0]]


def test_project_matrix_per_row_block_bytes() -> None:
    # the same curve under two block sizes: 8192 B is 8 blocks of 1024 but 2 of 4096
    curve = ((1, 10),)
    assert project_matrix([curve, curve], [1024, 4096], [8192, -1]).tolist() == [
        [8, 10],
        [2, 10],
    ]


def test_project_matrix_empty_inputs() -> None:
    assert project_matrix([], [], [1, 2]).shape == (0, 2)
    assert project_matrix([(), ()], [1024, 1024], [5, -1]).tolist() == [[0, 0], [0, 0]]


def test_project_matrix_rejects_bad_block_bytes() -> None:
    with pytest.raises(InvalidRequestError, match=r"block_bytes must be > 0, got 0"):
        project_matrix([((1, 2),)], [0], [4096])


def test_project_matrix_rejects_bad_block_bytes_even_for_empty_curves() -> None:
    # like project_bytes, project_matrix validates block_bytes even when no curve has a hit
    with pytest.raises(InvalidRequestError, match=r"block_bytes must be > 0, got 0"):
        project_bytes(fact(), 4096, 0)
    with pytest.raises(InvalidRequestError, match=r"block_bytes must be > 0, got 0"):
        project_matrix([()], [0], [4096])


@given(
    data=st.lists(
        st.tuples(curves(), st.integers(min_value=1, max_value=5000)), min_size=0, max_size=12
    ),
    slots=st.lists(
        st.one_of(
            st.just(-1),
            st.just(0),
            st.integers(min_value=-(10**6), max_value=-1),
            st.integers(min_value=0, max_value=300_000),
            st.integers(min_value=0, max_value=(1 << 62)),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_project_matrix_equals_project_bytes(
    data: list[tuple[tuple[HitCurveSegment, ...], int]], slots: list[int]
) -> None:
    out = project_matrix([c for c, _ in data], [bb for _, bb in data], slots)
    assert out.shape == (len(data), len(slots))
    for i, (curve, bb) in enumerate(data):
        f = RequestFact(curve, sum(r for _, r in curve))
        for k, sb in enumerate(slots):
            expected = project_infinite(f) if sb < 0 else project_bytes(f, sb, bb)
            assert out[i, k] == expected, (curve, bb, sb)


def test_capacity_gb_too_large_for_a_float_byte_count_is_rejected():
    from litehit_core import InvalidRequestError, capacity_gb_to_bytes

    with pytest.raises(InvalidRequestError, match=r"capacity_gb is too large, got 1e\+300"):
        capacity_gb_to_bytes(1e300)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(1, 5)), max_size=4),
    st.lists(st.integers(0, 40), max_size=10),
)
def test_project_curve_slots_equals_per_capacity_projection(pairs, capacities):
    from litehit_core import project_curve, project_curve_slots

    curve, last = [], 0
    for gap, run in pairs:  # build a valid curve: strictly increasing thresholds
        curve.append(HitCurveSegment(last + gap, run))
        last = last + gap + run - 1
    assert project_curve_slots(curve, capacities) == [project_curve(curve, c) for c in capacities]


def _naive_hits(curve: list[HitCurveSegment], capacity: int) -> int:
    """Block k of segment (s, r) hits exactly when capacity >= s + k (the definition)."""
    return sum(1 for s, r in curve for k in range(r) if capacity >= s + k)


@pytest.mark.parametrize("segments", [0, 1, 2, 3])
def test_every_small_curve_at_every_capacity_matches_the_definition(segments: int) -> None:
    """Exhaustive over small curves of 0-3 segments, at every capacity from 0 to past the
    end: every boundary of every segment (first block, last block, one either side) is
    checked in the fast paths (0, 1, 2 segments) and the general path."""
    from itertools import product

    from litehit_core import project_curve, project_curve_slots

    shapes = product(product(range(1, 4), range(1, 4)), repeat=segments)
    checked = 0
    for shape in shapes:
        curve, last = [], 0
        for gap, run in shape:
            curve.append(HitCurveSegment(last + gap, run))
            last = last + gap + run - 1
        capacities = list(range(last + 3))
        expected = [_naive_hits(curve, c) for c in capacities]
        assert [project_curve(curve, c) for c in capacities] == expected, curve
        assert project_curve_slots(curve, capacities) == expected, curve
        assert project_curve_slots(curve, capacities[::-1]) == expected[::-1], curve
        checked += 1
    assert checked == 9**segments
