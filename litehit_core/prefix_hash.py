"""Prefix-chained block key hash.

``key_j = prefix_hash_next(key_{j-1}, raw_j)`` with ``key_0 = 0``, so key j encodes the
whole prefix of blocks 1..j: two requests share a key only if they share the prefix.
Arithmetic is unsigned 64-bit with a logical right shift; results are signed int64.
:func:`keys_name_their_prefix` (and :class:`PrefixCheck`, the same batch by batch) tells
whether a trace's keys behave so.
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


_Run = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Distinct keys, ascending, with each one's parent key and whether it starts a request."""


def _distinct(keys: np.ndarray, parent: np.ndarray, root: np.ndarray) -> _Run | None:
    """The distinct keys of the triples, or None when a key has two (parent, root)."""
    order = np.argsort(keys, kind="stable")
    k, p, r = keys[order], parent[order], root[order]
    same = k[1:] == k[:-1]
    if bool((same & ((p[1:] != p[:-1]) | (r[1:] != r[:-1]))).any()):
        return None
    keep = np.ones(len(k), bool)
    keep[1:] = ~same
    return k[keep], p[keep], r[keep]


def _union(a: _Run, b: _Run) -> _Run | None:
    """Two runs as one, or None when a key of both has two (parent, root): ``b``'s keys
    looked up in ``a`` (binary search), the new ones inserted. Memory: the output, 9 bytes
    a key of ``b`` besides the inputs (no sort of the whole). O((A + B) + B log A)."""
    ak, ap, ar = a
    bk, bp, br = b
    at = np.searchsorted(ak, bk)
    found = at < len(ak)
    found[found] = ak[at[found]] == bk[found]
    hit = at[found]
    if bool(((ap[hit] != bp[found]) | (ar[hit] != br[found])).any()):
        return None
    new = ~found
    where = at[new]
    return (
        np.insert(ak, where, bk[new]),
        np.insert(ap, where, bp[new]),
        np.insert(ar, where, br[new]),
    )


class PrefixCheck:
    """:func:`keys_name_their_prefix` over requests given batch by batch (a streamed
    trace): :meth:`add` each batch's keys and offsets, then :attr:`determined` (after
    :meth:`finish`). Holds each distinct key once with its parent and whether it starts a
    request (17 bytes a distinct key) in sorted runs of geometrically growing sizes,
    merged as they grow (a log-structured merge, each merge a binary search and an insert):
    O(K log K) over the keys, memory O(distinct keys), ~2.3x that during the last merge.
    Stops holding anything at the first key found with two parents."""

    def __init__(self) -> None:
        self.determined = True
        self._runs: list[_Run] = []

    def add(self, keys: np.ndarray, offsets: np.ndarray) -> None:
        """The requests ``keys[offsets[r]:offsets[r + 1]]`` (``offsets[0] == 0``)."""
        keys = np.asarray(keys, np.int64)
        if not self.determined or not len(keys):
            return
        offsets = np.asarray(offsets, np.int64)
        parent = np.empty_like(keys)
        parent[1:] = keys[:-1]
        root = np.zeros(len(keys), bool)
        root[offsets[:-1][np.diff(offsets) > 0]] = True
        parent[root] = 0
        self._push(_distinct(keys, parent, root))
        while (
            self.determined
            and len(self._runs) > 1
            and (len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]))
        ):
            self._merge()

    def finish(self) -> bool:
        """Merge what is held; :attr:`determined`. Frees the runs."""
        while self.determined and len(self._runs) > 1:
            self._merge()
        self._runs = []
        return self.determined

    def _push(self, run: _Run | None) -> None:
        if run is None:
            self.determined, self._runs = False, []
        else:
            self._runs.append(run)

    def _merge(self) -> None:
        b = self._runs.pop()
        self._push(_union(self._runs.pop(), b))
