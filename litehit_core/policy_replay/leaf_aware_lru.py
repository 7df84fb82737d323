"""Policy ``leaf_aware_lru``: evict the least recent block none of whose children is
cached (spec §5, decided per block).

The instance's list (``prev``/``next``, oldest first) holds only its *evictable* blocks:
cached, with ``cached_children == 0``. An insert appends the new leaf and takes its parent
out (the parent has a cached child now); a touch or rewrite of an evictable block moves it
to the tail; when a block leaves and its parent has no cached child left, the parent
enters the list at its own ``seq`` (:func:`~litehit_core.policy_replay.lists.insert_ordered`,
O(1) when it is the oldest, the usual case). A victim is the list's head, one at a time, so
a parent freed by a victim competes for the next one. The cache stays prefix-closed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay.lists import append, insert_ordered, move_to_tail, unlink
from litehit_core.policy_replay.state import CACHED, NONE, ReplayArrays

__all__ = ["KIND", "ONE_SHOT", "choose_victims", "on_access", "on_remove", "on_write"]

KIND = 2
"""This policy's code in ``ReplayArrays.kind``."""
ONE_SHOT = False
"""Victims come one per call; the caller asks again until it has enough."""


@njit(cache=True, nogil=True)
def on_write(a: ReplayArrays, inst: np.int64, node: np.int64, inserted: bool) -> None:
    """A write inserted ``node`` (``cached_children`` of its parent already counts it; a
    leaf unless a tier's promotion or selective write brings back a block whose children
    the tier holds) or rewrote it."""
    if inserted:
        parent = np.int64(a.parent[node])
        if parent >= 0 and a.flags[parent] & CACHED and a.cached_children[parent] == 1:
            unlink(a.prev, a.next, a.head, a.tail, inst, parent)
        if a.cached_children[node] == 0:  # a tier may already hold its children
            append(a.prev, a.next, a.head, a.tail, inst, node)
    elif a.cached_children[node] == 0:
        move_to_tail(a.prev, a.next, a.head, a.tail, inst, node)


@njit(cache=True, nogil=True)
def on_access(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """A read hit ``node``: the newest of the list if it is in it."""
    if a.cached_children[node] == 0:
        move_to_tail(a.prev, a.next, a.head, a.tail, inst, node)


@njit(cache=True, nogil=True)
def on_remove(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """``node`` (evictable) leaves; its parent enters the list if ``node`` was its last
    cached child (``cached_children`` still counts it)."""
    unlink(a.prev, a.next, a.head, a.tail, inst, node)
    parent = np.int64(a.parent[node])
    if parent >= 0 and a.flags[parent] & CACHED and a.cached_children[parent] == 1:
        insert_ordered(a.prev, a.next, a.head, a.tail, inst, parent, a.seq)


@njit(cache=True, nogil=True)
def choose_victims(a: ReplayArrays, inst: np.int64, m: np.int64, out: np.ndarray) -> np.int64:
    """One victim (the oldest evictable block) into ``out``, or none. O(1)."""
    node = a.head[inst]
    if m <= 0 or node == NONE:
        return np.int64(0)
    out[0] = node
    return np.int64(1)
