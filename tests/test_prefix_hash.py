"""Prefix-chained block key hash: golden vectors and the unsigned 64-bit contract.

The golden vectors are copied verbatim from ``shared/golden/prefix_hash.json`` (that folder
is absent in a bare clone, so the numbers live here, and the file itself in
``tests/data/prefix_hash.json``; both are checked against it when it is there).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED, require
from hypothesis import given
from hypothesis import strategies as st

from litehit_core.prefix_chain import COMPILED_FROM, chain_keys
from litehit_core.prefix_hash import apply_prefix_hash, prefix_hash_next

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# (prev, raw, next)
GOLDEN_STEPS: list[tuple[int, int, int]] = [
    (0, 0, -7046029254386353131),
    (0, 1, -7046029254386353130),
    (0, -1, -7046029254386353132),
    (1, 0, -7046029254386349036),
    (-1, 0, 7046029250091389931),
    (-1, -1, 7046029250091389932),
    (9223372036854775807, 9223372036854775807, 7046029252238873580),
    (-9223372036854775808, 12345, 2177342784615918670),
    (81985529216486895, -81985529216486895, -3437960056337125790),
    (-7046029254386353131, 5, -8366447756632835642),
]

# (raw keys, chained keys)
GOLDEN_CHAINS: list[tuple[list[int], list[int]]] = [
    ([1, 2, 3], [-7046029254386353130, -8366447756632839738, 8024461590772477417]),
    ([-5, 7], [-7046029254386353136, -8366447756632880699]),
    ([42], [-7046029254386353089]),
    ([0], [-7046029254386353131]),
    ([1], [-7046029254386353130]),
    ([-1], [-7046029254386353132]),
    (
        [0, 1, 2, 3, 4, 5, 6, 7],
        [
            -7046029254386353131,
            -8366447756632835622,
            8024461590722362868,
            527151278305043601,
            -6044708287735678475,
            -4591413557813242875,
            -2388421665241184824,
            -7569635390601929078,
        ],
    ),
    (
        [9223372036854775807, -9223372036854775808, 42],
        [2177342782468422676, -8366447758780315174, 8024435204607561100],
    ),
    (
        [-5, -4, -3, -2, -1],
        [
            -7046029254386353136,
            -8366447756632880678,
            8024461590806138355,
            527151070401676435,
            -6045525018683229764,
        ],
    ),
    (
        [123456789012345678, -987654321098765432, 7, 7, 7],
        [
            -6922572465374007453,
            -1279896716609494079,
            -9025757941930781934,
            -146058463045763578,
            -3298883634931152208,
        ],
    ),
    (
        [0, 14, 15, 16, 17],
        [
            -7046029254386353131,
            -8366447756632835639,
            8024461590722137586,
            527151277382333568,
            -6044679080615921167,
        ],
    ),
    (
        [0, 28, 29, 30, 31],
        [
            -7046029254386353131,
            -8366447756632835585,
            8024461590722506166,
            527151277684397110,
            -6044676196076406455,
        ],
    ),
    (
        [9223372036854775806, 1099511627776, -1099511627776, 31337],
        [2177342782468422675, 856927576609348061, -1221452633692836111, -8529593205568347334],
    ),
]

int64s = st.integers(min_value=INT64_MIN, max_value=INT64_MAX)


def _spec_next(prev: int, raw: int) -> int:
    """The formula of the issue, written out step by step (the reference)."""
    m = 1 << 64
    h = prev % m
    v = raw % m
    rhs = (v + 0x9E3779B97F4A7C15 + ((h << 12) % m) + (h >> 32)) % m
    out = h ^ rhs
    return out - m if out >= (1 << 63) else out


@pytest.mark.parametrize(("prev", "raw", "expected"), GOLDEN_STEPS)
def test_prefix_hash_next_matches_golden_steps(prev: int, raw: int, expected: int) -> None:
    assert prefix_hash_next(prev, raw) == expected


@pytest.mark.parametrize(("raw", "expected"), GOLDEN_CHAINS)
def test_apply_prefix_hash_matches_golden_chains(raw: list[int], expected: list[int]) -> None:
    assert apply_prefix_hash(raw) == expected


@pytest.mark.parametrize(("raw", "expected"), GOLDEN_CHAINS)
def test_folding_next_from_zero_reproduces_golden_chains(
    raw: list[int], expected: list[int]
) -> None:
    prev = 0
    chained = []
    for r in raw:
        prev = prefix_hash_next(prev, r)
        chained.append(prev)
    assert chained == expected


def test_issue_example_and_generator_input() -> None:
    assert apply_prefix_hash(iter([1, 2, 3])) == [
        -7046029254386353130,
        -8366447756632839738,
        8024461590772477417,
    ]
    assert apply_prefix_hash([]) == []


@given(prev=int64s, raw=int64s)
def test_next_follows_the_unsigned_formula_and_stays_int64(prev: int, raw: int) -> None:
    out = prefix_hash_next(prev, raw)
    assert out == _spec_next(prev, raw)
    assert INT64_MIN <= out <= INT64_MAX


@given(prev=int64s, raw=int64s)
def test_inputs_are_taken_mod_2_64(prev: int, raw: int) -> None:
    # the unsigned view of a signed id and the signed id itself are the same key
    assert prefix_hash_next(prev + (1 << 64), raw - (1 << 64)) == prefix_hash_next(prev, raw)


@given(raw=st.lists(int64s, max_size=30))
def test_apply_is_a_fold_of_next_and_stays_int64(raw: list[int]) -> None:
    keys = apply_prefix_hash(raw)
    assert len(keys) == len(raw)
    prev = 0
    for r, k in zip(raw, keys, strict=True):
        prev = _spec_next(prev, r)
        assert k == prev
        assert INT64_MIN <= k <= INT64_MAX


@given(head=st.lists(int64s, max_size=10), tail=st.lists(int64s, max_size=10))
def test_chained_key_depends_on_prefix_only(head: list[int], tail: list[int]) -> None:
    assert apply_prefix_hash(head + tail)[: len(head)] == apply_prefix_hash(head)


def test_same_raw_id_under_different_prefixes_gives_different_keys() -> None:
    # raw 7 at position 3 of two different prefixes must not collide
    a = apply_prefix_hash([1, 2, 7])
    b = apply_prefix_hash([1, 3, 7])
    assert a[0] == b[0]
    assert a[2] != b[2]


@pytest.mark.parametrize(("raw", "expected"), GOLDEN_CHAINS)
def test_compiled_chain_matches_golden_chains(raw: list[int], expected: list[int]) -> None:
    long = raw * COMPILED_FROM  # through the compiled loop, not the short-input path
    assert chain_keys(long)[: len(raw)] == expected
    assert chain_keys(raw) == expected


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=80))
def test_compiled_chain_is_apply_prefix_hash(raw: list[int]) -> None:
    assert chain_keys(raw) == apply_prefix_hash(raw)


DATA = Path(__file__).resolve().parent / "data" / "prefix_hash.json"


def test_the_vectors_here_are_the_golden_file() -> None:
    """Catches the inline vectors or the tests' copy drifting from the golden file."""
    golden = json.loads(DATA.read_text())
    steps = [(s["prev"], s["raw"], s["next"]) for s in golden["steps"]]
    assert steps == GOLDEN_STEPS
    assert [(c["raw"], c["keys"]) for c in golden["chains"]] == GOLDEN_CHAINS


def test_the_tests_copy_is_the_shared_golden_file() -> None:
    shared = SHARED / "golden" / "prefix_hash.json"
    require(shared.is_file(), f"{shared} is absent (the shared golden vectors; the copy in "
            "tests/data is what the other tests read)")  # fmt: skip
    assert DATA.read_bytes() == shared.read_bytes()
