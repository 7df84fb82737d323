"""Doubly linked lists over node slots, compiled: the recency lists the policies share.

A list is two link arrays (``prev``, ``next``, indexed by node) and two end arrays
(``heads``, ``tails``, indexed by list number ``h``): an instance's LRU list lives in
``ReplayArrays.prev/next/head/tail`` at ``h = instance``; a TTL expiry list in
``tprev/tnext/thead/ttail`` at ``h = instance * buckets + bucket``. Head = oldest. Every
function is ``nogil``, ``cache=True``, inlined into its caller, O(1) unless it says so.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay.state import NONE, ReplayStalled

__all__ = ["append", "unlink", "move_to_tail", "insert_ordered"]


@njit(cache=True, nogil=True, inline="always")
def _link(
    prev: np.ndarray,
    nxt: np.ndarray,
    heads: np.ndarray,
    tails: np.ndarray,
    h: np.int64,
    node: np.int64,
    before: np.int64,
    after: np.int64,
) -> None:
    """Link ``node`` (not in a list) into list ``h`` between ``before`` and ``after``
    (neighbours there, either -1 at an end)."""
    prev[node] = before
    nxt[node] = after
    if before == NONE:
        heads[h] = node
    else:
        nxt[before] = node
    if after == NONE:
        tails[h] = node
    else:
        prev[after] = node


@njit(cache=True, nogil=True, inline="always")
def append(
    prev: np.ndarray,
    nxt: np.ndarray,
    heads: np.ndarray,
    tails: np.ndarray,
    h: np.int64,
    node: np.int64,
) -> None:
    """Link ``node`` (not in a list) at the tail (newest end) of list ``h``."""
    _link(prev, nxt, heads, tails, h, node, np.int64(tails[h]), np.int64(NONE))


@njit(cache=True, nogil=True, inline="always")
def unlink(
    prev: np.ndarray,
    nxt: np.ndarray,
    heads: np.ndarray,
    tails: np.ndarray,
    h: np.int64,
    node: np.int64,
) -> None:
    """Take ``node`` out of list ``h``."""
    p = prev[node]
    n = nxt[node]
    if p == NONE:
        heads[h] = n
    else:
        nxt[p] = n
    if n == NONE:
        tails[h] = p
    else:
        prev[n] = p
    prev[node] = NONE
    nxt[node] = NONE


@njit(cache=True, nogil=True, inline="always")
def move_to_tail(
    prev: np.ndarray,
    nxt: np.ndarray,
    heads: np.ndarray,
    tails: np.ndarray,
    h: np.int64,
    node: np.int64,
) -> None:
    """Make ``node`` (in list ``h``) the newest of its list."""
    if tails[h] != node:
        unlink(prev, nxt, heads, tails, h, node)
        append(prev, nxt, heads, tails, h, node)


@njit(cache=True, nogil=True)
def insert_ordered(
    prev: np.ndarray,
    nxt: np.ndarray,
    heads: np.ndarray,
    tails: np.ndarray,
    h: np.int64,
    node: np.int64,
    order: np.ndarray,
) -> None:
    """Link ``node`` into list ``h`` (sorted by ``order`` ascending from the head) at its
    place. Searches from both ends at once, so it costs O(min(rank, length - rank)): O(1)
    when the node is the oldest or the newest, the usual cases."""
    value = order[node]
    fwd = heads[h]
    bwd = tails[h]
    steps = len(nxt)  # more steps than nodes: the list has a cycle
    while fwd != NONE:
        steps -= 1
        if steps < 0:
            raise ReplayStalled("a sorted list walk did not end", NONE, NONE)
        if order[fwd] > value:  # insert before fwd
            _link(prev, nxt, heads, tails, h, node, np.int64(prev[fwd]), np.int64(fwd))
            return
        if order[bwd] < value:  # insert after bwd
            _link(prev, nxt, heads, tails, h, node, np.int64(bwd), np.int64(nxt[bwd]))
            return
        fwd = nxt[fwd]
        bwd = prev[bwd]
    append(prev, nxt, heads, tails, h, node)
