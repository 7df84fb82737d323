"""Request normalisation: validation, optional prefix chaining, re-blocking.

A trace may be recorded at a finer granularity (``trace_block_size_tokens``) than the
instance's cache block (``block_size_tokens``); LiteHit only coarsens. Because keys are
prefix-chained, the key of a coarse block is the chained key of its last fine block.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from litehit_core.model import InvalidRequestError, NormalizedRequest
from litehit_core.prefix_hash import apply_prefix_hash


def normalize_request(
    block_keys: Sequence[int],
    input_token_len: int,
    block_size_tokens: int,
    enable_prefix_hash: bool = False,
    trace_block_size_tokens: int = 0,
) -> NormalizedRequest:
    """Validate a request and return its keys at ``block_size_tokens`` granularity.

    Rules (each violation raises :class:`InvalidRequestError` naming field and numbers):
    ``block_size_tokens > 0``; ``input_token_len >= 0``; ``trace_block_size_tokens`` of 0
    means "same as block_size_tokens", otherwise it must be > 0 and divide
    ``block_size_tokens``; ``input_token_len == 0`` is derived as
    ``len(block_keys) * trace granularity``; ``len(block_keys)`` must equal
    ``input_token_len // trace granularity``. Keys are chained first (when enabled), then
    every k-th chained key is kept (indices k-1, 2k-1, ...; k = block / trace granularity),
    an incomplete tail dropped. The token denominator is never changed. O(n).
    """
    if block_size_tokens <= 0:
        raise InvalidRequestError(f"block_size_tokens must be > 0, got {block_size_tokens}")
    if input_token_len < 0:
        raise InvalidRequestError(f"input_token_len must not be negative, got {input_token_len}")
    trace_bs = trace_block_size_tokens or block_size_tokens
    if trace_bs < 0:
        raise InvalidRequestError(
            f"trace_block_size_tokens must not be negative, got {trace_block_size_tokens}"
        )
    if block_size_tokens % trace_bs:
        raise InvalidRequestError(
            f"block_size_tokens {block_size_tokens} must be a multiple of "
            f"trace_block_size_tokens {trace_bs} (re-blocking only coarsens)"
        )
    n = len(block_keys)
    if input_token_len == 0:
        input_token_len = n * trace_bs
    elif n != input_token_len // trace_bs:
        raise InvalidRequestError(
            f"len(block_keys) is {n} but input_token_len {input_token_len} // "
            f"block size {trace_bs} is {input_token_len // trace_bs} (complete blocks only)"
        )
    keys = apply_prefix_hash(block_keys) if enable_prefix_hash else list(block_keys)
    k = block_size_tokens // trace_bs
    if k > 1:
        keys = keys[k - 1 :: k]
    return NormalizedRequest(block_keys=keys, input_token_len=input_token_len)


def plain_token_lens(
    key_counts: np.ndarray, input_token_lens: np.ndarray, block_size_tokens: int
) -> np.ndarray | None:
    """:func:`normalize_request`'s length rule for many requests at once, for keys already
    at ``block_size_tokens`` without prefix hashing (nothing to chain or re-block): the
    token denominators (``input_token_len``, or ``key count x block size`` where it is 0),
    or None when any request breaks the rule (call :func:`normalize_request` on it for
    the error). Requires non-negative arrays of one length. O(requests) numpy work."""
    tokens = np.where(input_token_lens == 0, key_counts * block_size_tokens, input_token_lens)
    bad = (input_token_lens > 0) & (key_counts != input_token_lens // block_size_tokens)
    return None if bad.any() else tokens
