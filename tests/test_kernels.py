"""The shared compiled primitives of litehit_core.kernels against plain numpy / Python."""

from __future__ import annotations

import numpy as np
import pytest

from litehit_core.errors import InvalidRequestError
from litehit_core.kernels import (
    distinct_keys,
    fenwick_add,
    fenwick_prefix,
    fenwick_search,
    home_slot,
    popcount,
)


@pytest.mark.parametrize("size", [1, 2, 7, 64, 100])
def test_fenwick_prefix_and_search_match_cumulative_sums(size: int) -> None:
    rng = np.random.default_rng(size)
    values = rng.integers(0, 5, size)
    fen = np.zeros(size, np.int64)
    for i, v in enumerate(values):
        fenwick_add(fen, i, v)
    sums = np.concatenate(([0], np.cumsum(values)))
    assert [fenwick_prefix(fen, i) for i in range(size + 1)] == sums.tolist()
    for target in range(-1, int(sums[-1]) + 3):
        # the largest i with prefix(i) < target
        expected = int(np.searchsorted(sums, target, side="left")) - 1 if target > 0 else 0
        assert fenwick_search(fen, target) == expected, target


def test_fenwick_add_removes_what_it_added() -> None:
    fen = np.zeros(16, np.int32)
    fenwick_add(fen, 5, 3)
    fenwick_add(fen, 5, -3)
    assert not fen.any()


def test_fenwick_search_of_an_empty_tree() -> None:
    assert fenwick_search(np.zeros(0, np.int64), 5) == 0


@pytest.mark.parametrize(
    "word", [0, 1, 2**63, 2**64 - 1, 0x5555555555555555, 0x8000000000000001, 12345678901234]
)
def test_popcount(word: int) -> None:
    assert popcount(np.uint64(word)) == bin(word).count("1")


def test_home_slot_is_in_range_and_spreads_sequential_keys() -> None:
    mask = 1023
    slots = [home_slot(key, mask) for key in range(-500, 3596)]
    assert min(slots) >= 0 and max(slots) <= mask
    assert len(set(slots)) > 0.6 * (mask + 1)  # 4096 sequential keys fill most slots
    assert home_slot(-(2**63), 7) == home_slot(-(2**63), 7)  # deterministic, int64 edge


def test_distinct_keys_keeps_first_occurrences_in_order() -> None:
    out = distinct_keys([5, 3, 5, 1, 3])
    assert out.dtype == np.int64 and out.tolist() == [5, 3, 1]
    assert distinct_keys([]).tolist() == []
    assert distinct_keys(range(3)).tolist() == [0, 1, 2]
    with pytest.raises(InvalidRequestError, match="int64"):
        distinct_keys([2**63])
