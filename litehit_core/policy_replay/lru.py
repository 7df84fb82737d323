"""Policy ``lru``: evict the cached blocks touched or written longest ago (spec §5).

Its blocks sit in the instance's recency list (``prev``/``next``, oldest at the head): an
insert appends, a touch or a rewrite moves to the tail, a victim is taken from the head.
Every verb O(1) (``choose_victims``: O(m)); compiled, ``nogil``, ``cache=True``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay.lists import append, move_to_tail, unlink
from litehit_core.policy_replay.state import NONE, ReplayArrays

__all__ = ["KIND", "ONE_SHOT", "choose_victims", "on_access", "on_remove", "on_write"]

KIND = 0
"""This policy's code in ``ReplayArrays.kind``."""
ONE_SHOT = False
"""``choose_victims`` returns all it can at once (the caller need not ask again)."""


@njit(cache=True, nogil=True)
def on_write(a: ReplayArrays, inst: np.int64, node: np.int64, inserted: bool) -> None:
    """A write inserted ``node`` (``inserted``) or rewrote it: it becomes the newest."""
    if inserted:
        append(a.prev, a.next, a.head, a.tail, inst, node)
    else:
        move_to_tail(a.prev, a.next, a.head, a.tail, inst, node)


@njit(cache=True, nogil=True)
def on_access(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """A read hit ``node``: it becomes the newest."""
    move_to_tail(a.prev, a.next, a.head, a.tail, inst, node)


@njit(cache=True, nogil=True)
def on_remove(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """``node`` leaves the cache."""
    unlink(a.prev, a.next, a.head, a.tail, inst, node)


@njit(cache=True, nogil=True)
def choose_victims(a: ReplayArrays, inst: np.int64, m: np.int64, out: np.ndarray) -> np.int64:
    """Up to ``m`` victims into ``out``, oldest first: the list's head. O(m)."""
    k = np.int64(0)
    node = np.int64(a.head[inst])
    while k < m and node != NONE:
        out[k] = node
        k += 1
        node = np.int64(a.next[node])
    return k
