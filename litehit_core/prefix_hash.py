"""Prefix-chained block key hash.

``key_j = prefix_hash_next(key_{j-1}, raw_j)`` with ``key_0 = 0``, so key j encodes the
whole prefix of blocks 1..j: two requests share a key only if they share the prefix.
Arithmetic is unsigned 64-bit with a logical right shift; results are signed int64.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_MASK = (1 << 64) - 1
_SIGN = 1 << 63
_GOLDEN = 0x9E3779B97F4A7C15


def prefix_hash_next(prev: int, raw: int) -> int:
    """Chain one raw block id onto ``prev``; returns a signed int64. O(1)."""
    h = prev & _MASK
    rhs = ((raw & _MASK) + _GOLDEN + ((h << 12) & _MASK) + (h >> 32)) & _MASK
    out = h ^ rhs
    return out - (1 << 64) if out & _SIGN else out


def apply_prefix_hash(raw_keys: Iterable[int]) -> list[int]:
    """Chain a whole request's raw block ids from ``prev = 0``. O(n)."""
    mask = _MASK
    golden = _GOLDEN
    out: list[int] = []
    append = out.append
    h = 0
    for raw in raw_keys:
        h ^= ((raw & mask) + golden + ((h << 12) & mask) + (h >> 32)) & mask
        append(h - (1 << 64) if h & _SIGN else h)
    return out


def keys_name_their_prefix(keys: np.ndarray, offsets: np.ndarray) -> bool:
    """Whether every key of the requests ``keys[offsets[r]:offsets[r + 1]]`` (int64 arrays)
    always follows the same parent key, or always starts a request: then a key names its
    whole prefix, as prefix-chained keys do (the input on which
    :class:`~litehit_core.lite_hit.LiteHit` is exact at every capacity). O(K log K)."""
    keys = np.asarray(keys, np.int64)
    offsets = np.asarray(offsets, np.int64)
    if len(keys) < 2:
        return True
    parent = np.empty_like(keys)
    parent[1:] = keys[:-1]
    root = np.zeros(len(keys), bool)
    root[offsets[:-1][np.diff(offsets) > 0]] = True
    parent[root] = 0
    order = np.lexsort((root, parent, keys))
    k, p, r = keys[order], parent[order], root[order]
    same = k[1:] == k[:-1]
    return not bool((same & ((p[1:] != p[:-1]) | (r[1:] != r[:-1]))).any())
