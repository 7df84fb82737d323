"""The compiled primitives the numba engines share: hash slots, Fenwick trees, bit buckets.

:class:`~litehit_core.hybrid.HybridLRU` (and :class:`~litehit_core.block_lru.BlockLRU`, its
blocks-only configuration) and :class:`~litehit_core.compact_lite_hit.CompactLiteHit` are
built from the same few operations on flat numpy arrays; they live here, once:

- :func:`home_slot`: the home slot of a key in a power-of-two open-addressing table;
- :func:`fenwick_add`, :func:`fenwick_prefix`, :func:`fenwick_search`: a Fenwick (binary
  indexed) tree over positions, for ranks (how much lies before a position: a recency
  depth) and order statistics (where the k-th unit lies: the oldest resident of a capacity);
- :func:`popcount`: set bits of a 64-bit bucket word (one bit per position);
- :func:`distinct_keys`: a request's keys as the int64 array the kernels take.

Every compiled function is ``nogil`` (other threads run meanwhile), ``cache=True`` (compiled
once per install, then loaded from numba's disk cache) and ``inline="always"``: numba copies
its body into the calling kernel, so a call costs what the inline code cost. They are meant
to be called from other numba kernels; from the interpreter each call pays a dispatch
(~1 µs). numba's cache knows only the file a kernel is defined in: after changing a
function here, delete the engines' ``__pycache__/*.nbi``/``*.nbc`` (or touch their modules)
so that the kernels inlining it are compiled again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from litehit_core.errors import InvalidRequestError

__all__ = [
    "distinct_keys",
    "fenwick_add",
    "fenwick_prefix",
    "fenwick_search",
    "home_slot",
    "popcount",
]

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@njit(cache=True, nogil=True, inline="always")
def home_slot(key: np.int64, mask: np.int64) -> np.int64:
    """The home slot of ``key`` in a table of ``mask + 1`` slots (a power of two): the
    key's bits mixed (SplitMix64-style multiply and shifts, so sequential or strided keys
    spread evenly), then masked. In ``0..mask``. O(1): two multiplies."""
    z = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(29)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(32)
    return np.int64(z & np.uint64(mask))


@njit(cache=True, nogil=True, inline="always")
def fenwick_add(fen: np.ndarray, i: np.int64, value: np.int64) -> None:
    """Add ``value`` at position ``i`` (0-based, ``0 <= i < len(fen)``) of the Fenwick
    tree ``fen`` (any integer dtype; units are the caller's: bytes, blocks, dead markers).
    O(log len(fen))."""
    n = fen.shape[0]
    i += 1
    while i <= n:
        fen[i - 1] += value
        i += i & -i


@njit(cache=True, nogil=True, inline="always")
def fenwick_prefix(fen: np.ndarray, i: np.int64) -> np.int64:
    """Sum of the values at positions < i (``0 <= i <= len(fen)``): the rank of position
    ``i``. O(log len(fen))."""
    total = np.int64(0)
    while i > 0:
        total += fen[i - 1]
        i -= i & -i
    return total


@njit(cache=True, nogil=True, inline="always")
def fenwick_search(fen: np.ndarray, target: np.int64) -> np.int64:
    """The largest ``i`` with ``fenwick_prefix(fen, i) < target`` in a tree of
    non-negative values (0 when ``target <= 0``): the order statistic, i.e. position ``i``
    holds the ``target``-th unit counted from position 0 (``len(fen)`` when the tree holds
    fewer). One descent from the highest power of two: O(log len(fen))."""
    size = fen.shape[0]
    top = 1
    while top * 2 <= size:
        top *= 2
    q = np.int64(0)
    rest = target
    bit = top
    while bit:
        nxt = q + bit
        if nxt <= size and fen[nxt - 1] < rest:
            q = nxt
            rest -= fen[nxt - 1]
        bit >>= 1
    return q


@njit(cache=True, nogil=True, inline="always")
def popcount(x: np.uint64) -> np.int64:
    """Set bits of the 64-bit word ``x`` (a bucket of 64 positions, one bit each). O(1):
    the branch-free SWAR count, no loop."""
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return np.int64((x * _H01) >> np.uint64(56))


def distinct_keys(block_keys: Sequence[int]) -> np.ndarray:
    """The keys as an int64 array, duplicates kept at their first occurrence (the order of
    a request, head first). InvalidRequestError for a key outside int64. O(n) (interpreter:
    one set, and a dict only when there are duplicates)."""
    keys = list(block_keys)
    if len(set(keys)) != len(keys):
        keys = list(dict.fromkeys(keys))
    try:
        return np.array(keys, np.int64)
    except OverflowError:
        raise InvalidRequestError(
            "block_keys must be int64 integers, got one outside [-2**63, 2**63)"
        ) from None
