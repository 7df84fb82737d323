"""Query preparation: the policy's rules 1-8 (tokens, key granularity, timestamps) for
every way a query arrives.

:func:`prepare_query` validates and normalises one query (unary TraceQuery, each query
of a TraceQueryStream, each request of an offline replay batch); :func:`prepare_packed`
does the same for a TraceQueryPackedStream batch as arrays, vectorised for instances
without prefix hashing or re-blocking and through the same scalar
:func:`~litehit_core.normalize_request` otherwise, so every path gives the same keys,
tokens and errors. Nothing here changes state; the clock (rule 9) advances in
:mod:`~litehit_service.manager.recording`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from litehit_core import InvalidRequestError, normalize_request
from litehit_core.normalize import plain_token_lens
from litehit_core.sampled_estimate import SubtreeSampler
from litehit_core.sampling import kept
from litehit_service.errors import InvalidArgument
from litehit_service.manager.instance import InstanceState
from litehit_service.policy import QueryPolicy

__all__ = ["prepare_packed", "prepare_query", "sampled_keys"]


def sampled_keys(
    policy: QueryPolicy, keys: np.ndarray, offsets: np.ndarray, state: InstanceState
) -> tuple[np.ndarray, np.ndarray]:
    """The normalised ``keys`` (int64) of many queries of ``state`` (query i:
    ``keys[offsets[i]:offsets[i + 1]]``) the policy's sample keeps, and their offsets;
    unchanged at rate 1. By block: one vectorised hash per key. By subtree: the queries
    are one batch of the instance's :class:`~litehit_core.sampled_estimate.
    SubtreeSampler` (made on first use, numbered by ``state.total_queries``: call with
    ``state.lock`` held, before the queries are counted): each kept whole or dropped.
    O(keys) (by subtree O(keys log² D))."""
    if policy.sample_rate >= 1:
        return keys, offsets
    lens = np.diff(offsets)
    if policy.sample_unit == "subtree":
        if state.sampler is None:
            state.sampler = SubtreeSampler(policy.sample_rate, policy.sample_seed)
        mask = state.sampler.keep(keys, offsets, state.total_queries)
    else:
        mask = kept(keys, policy.sample_seed, policy.sample_rate)
    query = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
    out = np.zeros_like(offsets)
    np.cumsum(np.bincount(query[mask], minlength=len(lens)), out=out[1:])
    return keys[mask], out


def prepare_query(
    state: InstanceState,
    policy: QueryPolicy,
    block_keys: Sequence[int],
    input_token_len: int,
    token_ids_len: int,
    timestamp_ns: int,
    sample: bool = True,
) -> tuple[list[int], int, int]:
    """Validate and normalise one query of ``state`` (a unary TraceQuery, one query of a
    stream, or one request of an offline batch) by the policy's rules 1-8: (keys, tokens,
    time); the keys then filtered by the policy's sample unless ``sample`` is False (a
    batch filters all its keys at once: :func:`sampled_keys`). Changes nothing. O(keys)."""
    if input_token_len < 0:
        raise InvalidArgument(f"input_token_len must not be negative, got {input_token_len}")
    if token_ids_len < 0:
        raise InvalidArgument(f"token_ids_len must not be negative, got {token_ids_len}")
    stamp = policy.stamp(timestamp_ns)
    if len(block_keys) > policy.max_block_keys:
        raise InvalidArgument(
            f"block_keys has {len(block_keys)} keys, more than max_block_keys "
            f"{policy.max_block_keys}"
        )
    try:
        keys, tokens = normalize_request(
            block_keys,
            input_token_len or token_ids_len,
            state.block_size,
            state.enable_prefix_hash,
            policy.trace_block_size_tokens,
        )
    except InvalidRequestError as exc:
        raise InvalidArgument(f"instance_id {state.instance_id!r}: {exc}") from None
    if sample and policy.sample_rate < 1 and keys:
        bounds = np.array([0, len(keys)], np.int64)
        keys = sampled_keys(policy, np.array(keys, np.int64), bounds, state)[0].tolist()
    return keys, tokens, stamp


def prepare_packed(
    state: InstanceState,
    policy: QueryPolicy,
    block_keys: np.ndarray,
    key_counts: np.ndarray,
    input_token_lens: np.ndarray,
    timestamps_ns: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate and normalise a packed batch by the policy's rules 1-8: (keys, offsets,
    tokens, times), int64 arrays. Vectorised for instances without prefix hashing or
    re-blocking; a failing query is handed to the scalar rules for its message, so both
    paths raise the same errors. Changes nothing. O(keys + queries)."""
    iid = state.instance_id
    n = len(key_counts)
    for name, values in (
        ("input_token_lens", input_token_lens),
        ("timestamps_ns", timestamps_ns),
    ):
        if len(values) != n and not (name == "timestamps_ns" and len(values) == 0):
            raise InvalidArgument(
                f"{name} has {len(values)} values but key_counts has {n} (one per query)"
            )
    counts = np.asarray(key_counts, np.int64)
    lens = np.asarray(input_token_lens, np.int64)
    stamps = np.asarray(timestamps_ns, np.int64) if len(timestamps_ns) else np.zeros(n, np.int64)
    for name, values in (
        ("key_counts", counts),
        ("input_token_lens", lens),
        ("timestamps_ns", stamps),
    ):
        if n and values.min() < 0:
            i = int(np.argmax(values < 0))
            raise InvalidArgument(f"{name}[{i}] must not be negative, got {values[i]}")
    if int(counts.sum()) != len(block_keys):
        raise InvalidArgument(
            f"key_counts add up to {int(counts.sum())} but block_keys has {len(block_keys)} keys"
        )
    if n and counts.max() > policy.max_block_keys:
        i = int(np.argmax(counts > policy.max_block_keys))
        raise InvalidArgument(
            f"query {i}: block_keys has {counts[i]} keys, more than max_block_keys "
            f"{policy.max_block_keys}"
        )
    if policy.clock_ns is not None and n:
        now = policy.clock_ns()
        skew = policy.max_clock_skew_ns
        if skew is not None and (stamps > now + skew).any():
            first = int(np.argmax(stamps > now + skew))
            try:  # the scalar rule words the error (with its own reading of the clock)
                policy.stamp(int(stamps[first]))
            except InvalidArgument as exc:
                raise InvalidArgument(f"query {first}: {exc}") from None
        stamps = np.where(stamps > 0, stamps, now)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    bs = state.block_size
    trace_bs = policy.trace_block_size_tokens
    if not state.enable_prefix_hash and trace_bs in (0, bs):
        tokens = plain_token_lens(counts, lens, bs)
        if tokens is not None:
            return np.asarray(block_keys, np.int64), offsets, tokens, stamps
    keys: list[int] = []
    token_list: list[int] = []
    flat = np.asarray(block_keys, np.int64).tolist()
    for i in range(n):
        try:
            normalized = normalize_request(
                flat[offsets[i] : offsets[i + 1]], int(lens[i]), bs,
                state.enable_prefix_hash, trace_bs,
            )  # fmt: skip
        except InvalidRequestError as exc:
            raise InvalidArgument(f"instance_id {iid!r}: query {i}: {exc}") from None
        keys += normalized.block_keys
        token_list.append(normalized.input_token_len)
        offsets[i + 1] = len(keys)
    return np.array(keys, np.int64), offsets, np.array(token_list, np.int64), stamps
