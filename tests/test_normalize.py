"""normalize_request: every validation rule, its error message, chaining and re-blocking."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from litehit_core.model import InvalidRequestError, NormalizedRequest
from litehit_core.normalize import normalize_request
from litehit_core.prefix_hash import apply_prefix_hash

# apply_prefix_hash([1, 2, 3, 4, 5, 6, 7]), computed with the formula by hand;
# the first three are the golden chain [1, 2, 3].
CHAINED_1_TO_7 = [
    -7046029254386353130,
    -8366447756632839738,
    8024461590772477417,
    527151483457094799,
    -6043833288980432614,
    3606874645768167642,
    -5529366739869389401,
]


def _error(**kwargs: object) -> str:
    with pytest.raises(InvalidRequestError) as info:
        normalize_request(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    return str(info.value)


# ---------------------------------------------------------------- validation errors


@pytest.mark.parametrize("block_size", [0, -4])
def test_block_size_must_be_positive(block_size: int) -> None:
    msg = _error(block_keys=[1], input_token_len=4, block_size_tokens=block_size)
    assert "block_size_tokens" in msg
    assert str(block_size) in msg


def test_input_token_len_must_not_be_negative() -> None:
    msg = _error(block_keys=[], input_token_len=-3, block_size_tokens=4)
    assert "input_token_len" in msg
    assert "-3" in msg


def test_block_size_must_be_a_multiple_of_trace_granularity() -> None:
    msg = _error(
        block_keys=[1, 2, 3], input_token_len=12, block_size_tokens=6, trace_block_size_tokens=4
    )
    assert re.search(r"(?<!trace_)block_size_tokens\D*6", msg)
    assert re.search(r"trace_block_size_tokens\D*4", msg)


def test_trace_granularity_coarser_than_block_is_rejected() -> None:
    # re-blocking only coarsens: 4-token blocks cannot be built from 8-token trace blocks
    msg = _error(block_keys=[1], input_token_len=8, block_size_tokens=4, trace_block_size_tokens=8)
    assert re.search(r"(?<!trace_)block_size_tokens\D*4", msg)
    assert re.search(r"trace_block_size_tokens\D*8", msg)


def test_negative_trace_granularity_is_rejected() -> None:
    msg = _error(block_keys=[1], input_token_len=4, block_size_tokens=4, trace_block_size_tokens=-4)
    assert "trace_block_size_tokens" in msg
    assert "-4" in msg


def test_too_many_keys_for_input_token_len() -> None:
    # 13 tokens at block 4 -> 3 complete blocks, but 4 keys given
    msg = _error(block_keys=[1, 2, 3, 4], input_token_len=13, block_size_tokens=4)
    assert "len(block_keys)" in msg and "input_token_len" in msg
    assert "4" in msg and "13" in msg and "3" in msg


def test_too_few_keys_for_input_token_len() -> None:
    # 17 tokens at block 4 -> 4 complete blocks, but 2 keys given
    msg = _error(block_keys=[1, 2], input_token_len=17, block_size_tokens=4)
    assert "len(block_keys) is 2" in msg
    assert "17" in msg
    assert "is 4" in msg


def test_key_count_is_checked_at_trace_granularity() -> None:
    # 21 tokens: 5 trace blocks of 4 (valid), but only 2 blocks of 8 without a trace size
    ok = normalize_request([1, 2, 3, 4, 5], 21, 8, trace_block_size_tokens=4)
    assert ok.input_token_len == 21
    msg = _error(block_keys=[1, 2, 3, 4, 5], input_token_len=21, block_size_tokens=8)
    assert "len(block_keys) is 5" in msg and "21" in msg and "is 2" in msg


def test_empty_request_with_tokens_is_rejected() -> None:
    msg = _error(block_keys=[], input_token_len=8, block_size_tokens=4)
    assert "len(block_keys) is 0" in msg and "is 2" in msg


# ---------------------------------------------------------------- token denominator


def test_input_token_len_zero_is_derived_from_key_count() -> None:
    assert normalize_request([7, 8, 9], 0, 4) == NormalizedRequest([7, 8, 9], 12)


def test_input_token_len_zero_derivation_uses_trace_granularity() -> None:
    out = normalize_request([1, 2, 3], 0, 8, trace_block_size_tokens=4)
    assert out == NormalizedRequest([2], 12)


def test_empty_request_with_zero_tokens() -> None:
    assert normalize_request([], 0, 16) == NormalizedRequest([], 0)


def test_trailing_partial_block_stays_in_the_denominator() -> None:
    # 15 tokens = 3 complete blocks of 4 + 3 tokens that never enter the cache
    out = normalize_request([1, 2, 3], 15, 4)
    assert out.block_keys == [1, 2, 3]
    assert out.input_token_len == 15


def test_fewer_tokens_than_one_block() -> None:
    assert normalize_request([], 3, 4) == NormalizedRequest([], 3)


# ---------------------------------------------------------------- chaining and re-blocking


def test_prefix_hash_applied_when_enabled() -> None:
    out = normalize_request([1, 2, 3], 12, 4, enable_prefix_hash=True)
    assert out == NormalizedRequest(CHAINED_1_TO_7[:3], 12)


def test_keys_unchanged_when_hash_disabled() -> None:
    assert normalize_request([1, 2, 3], 12, 4) == NormalizedRequest([1, 2, 3], 12)


def test_reblocking_chains_first_then_keeps_every_kth_key() -> None:
    # the example: keys [1..5], 21 tokens, block 8, trace block 4 -> k = 2,
    # keep chained indices 1 and 3; 21 tokens stay the denominator
    out = normalize_request(
        [1, 2, 3, 4, 5], 21, 8, enable_prefix_hash=True, trace_block_size_tokens=4
    )
    assert out.block_keys == [CHAINED_1_TO_7[1], CHAINED_1_TO_7[3]]
    assert out.block_keys == [-8366447756632839738, 527151483457094799]
    assert out.input_token_len == 21
    # chaining AFTER re-blocking would give a different (wrong) key set
    assert out.block_keys != apply_prefix_hash([2, 4])


def test_reblocking_without_hash_keeps_plain_keys() -> None:
    out = normalize_request([1, 2, 3, 4, 5], 21, 8, trace_block_size_tokens=4)
    assert out == NormalizedRequest([2, 4], 21)


def test_reblocking_drops_incomplete_tail() -> None:
    # k = 3: keep indices 2 and 5; key 7 is an incomplete 12-token block and is dropped
    out = normalize_request([1, 2, 3, 4, 5, 6, 7], 28, 12, trace_block_size_tokens=4)
    assert out == NormalizedRequest([3, 6], 28)
    hashed = normalize_request(
        [1, 2, 3, 4, 5, 6, 7], 28, 12, enable_prefix_hash=True, trace_block_size_tokens=4
    )
    assert hashed == NormalizedRequest([CHAINED_1_TO_7[2], CHAINED_1_TO_7[5]], 28)


def test_reblocking_shorter_than_one_coarse_block_keeps_nothing() -> None:
    assert normalize_request([1, 2, 3], 13, 16, trace_block_size_tokens=4) == NormalizedRequest(
        [], 13
    )


def test_trace_granularity_equal_to_block_size_is_identity() -> None:
    assert normalize_request([5, 6], 9, 4, trace_block_size_tokens=4) == NormalizedRequest(
        [5, 6], 9
    )


def test_caller_list_is_not_aliased_or_mutated() -> None:
    keys = [1, 2, 3]
    out = normalize_request(keys, 12, 4)
    out.block_keys.append(99)
    assert keys == [1, 2, 3]
    normalize_request(keys, 12, 4, enable_prefix_hash=True)
    assert keys == [1, 2, 3]


@given(
    raw=st.lists(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), max_size=40),
    trace_bs=st.integers(min_value=1, max_value=8),
    k=st.integers(min_value=1, max_value=5),
    partial=st.integers(min_value=0, max_value=7),
    chain=st.booleans(),
)
def test_reblocking_property(
    raw: list[int], trace_bs: int, k: int, partial: int, chain: bool
) -> None:
    partial %= trace_bs
    tokens = len(raw) * trace_bs + partial
    out = normalize_request(
        raw, tokens, trace_bs * k, enable_prefix_hash=chain, trace_block_size_tokens=trace_bs
    )
    chained = apply_prefix_hash(raw) if chain else raw
    assert out.block_keys == chained[k - 1 :: k]
    assert len(out.block_keys) == len(raw) // k
    assert out.input_token_len == tokens


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 30)), max_size=8),
    st.sampled_from([1, 4]),
)
def test_plain_token_lens_is_normalize_request_for_many(requests, block_size):
    """The vectorised length rule accepts exactly what normalize_request accepts and gives
    its token denominators."""
    import numpy as np

    from litehit_core.normalize import plain_token_lens

    counts = np.array([c for c, _ in requests], np.int64)
    lens = np.array([n for _, n in requests], np.int64)
    expected = []
    for c, n in requests:
        try:
            expected.append(normalize_request(list(range(c)), n, block_size).input_token_len)
        except InvalidRequestError:
            expected = None
            break
    got = plain_token_lens(counts, lens, block_size)
    assert (got.tolist() if got is not None else None) == expected
