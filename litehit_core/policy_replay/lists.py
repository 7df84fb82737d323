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

from litehit_core.policy_replay.state import NONE

__all__ = ["append", "unlink", "move_to_tail", "insert_ordered"]


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
    tail = tails[h]
    prev[node] = tail
    nxt[node] = NONE
    if tail == NONE:
        heads[h] = node
    else:
        nxt[tail] = node
    tails[h] = node


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
    while fwd != NONE:
        if order[fwd] > value:  # insert before fwd
            p = prev[fwd]
            prev[node] = p
            nxt[node] = fwd
            prev[fwd] = node
            if p == NONE:
                heads[h] = node
            else:
                nxt[p] = node
            return
        if order[bwd] < value:  # insert after bwd
            n = nxt[bwd]
            nxt[node] = n
            prev[node] = bwd
            nxt[bwd] = node
            if n == NONE:
                tails[h] = node
            else:
                prev[n] = node
            return
        fwd = nxt[fwd]
        bwd = prev[bwd]
    append(prev, nxt, heads, tails, h, node)
