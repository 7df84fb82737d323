"""Policy ``ttl``: blocks expire a fixed time after their anchor; under capacity pressure
it evicts like ``lru`` when ``fallback_on_pressure`` (spec §5).

A block's TTL (ns) is an index into ``ReplayArrays.ttl_values`` (``bucket``; -1 = never
expires), set by the write that inserted or last rewrote it; ``anchor`` is the time of that
write, or of the latest read hit when the group has ``ttl_refresh_on_read``. Each
(instance, TTL) pair keeps its blocks in an expiry list (``tprev``/``tnext``) in anchor
order -- anchors only move forward, so an update appends -- and :func:`next_expired` looks
at the head of each list: O(distinct TTLs) per call. The recency list for the fallback is
``lru``'s.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay import lru
from litehit_core.policy_replay.lists import append, move_to_tail, unlink
from litehit_core.policy_replay.state import NONE, ReplayArrays

__all__ = [
    "KIND",
    "ONE_SHOT",
    "choose_victims",
    "next_expired",
    "on_access",
    "on_remove",
    "on_write",
]

KIND = 3
"""This policy's code in ``ReplayArrays.kind``."""
ONE_SHOT = False
"""As ``lru``: all victims at once."""


@njit(cache=True, nogil=True)
def _list(a: ReplayArrays, inst: np.int64, bucket: np.int64) -> np.int64:
    return inst * len(a.ttl_values) + bucket


@njit(cache=True, nogil=True)
def on_write(
    a: ReplayArrays, inst: np.int64, node: np.int64, inserted: bool, now: np.int64, bucket: np.int64
) -> None:
    """A write at ``now`` with TTL ``bucket`` inserted or rewrote ``node``: newest in
    recency, re-anchored at ``now``, in the expiry list of the write's TTL."""
    lru.on_write(a, inst, node, inserted)
    old = np.int64(NONE) if inserted else np.int64(a.bucket[node])
    a.anchor[node] = now
    if old == bucket and old != NONE:
        move_to_tail(a.tprev, a.tnext, a.thead, a.ttail, _list(a, inst, old), node)
        return
    if old != NONE:
        unlink(a.tprev, a.tnext, a.thead, a.ttail, _list(a, inst, old), node)
    a.bucket[node] = bucket
    if bucket != NONE:
        append(a.tprev, a.tnext, a.thead, a.ttail, _list(a, inst, bucket), node)


@njit(cache=True, nogil=True)
def on_access(a: ReplayArrays, inst: np.int64, node: np.int64, now: np.int64) -> None:
    """A read hit ``node`` at ``now``: newest in recency; re-anchored when the group
    refreshes TTLs on reads."""
    lru.on_access(a, inst, node)
    if a.refresh[inst]:
        a.anchor[node] = now
        bucket = np.int64(a.bucket[node])
        if bucket != NONE:
            move_to_tail(a.tprev, a.tnext, a.thead, a.ttail, _list(a, inst, bucket), node)


@njit(cache=True, nogil=True)
def on_remove(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """``node`` leaves both lists."""
    lru.on_remove(a, inst, node)
    bucket = np.int64(a.bucket[node])
    if bucket != NONE:
        unlink(a.tprev, a.tnext, a.thead, a.ttail, _list(a, inst, bucket), node)
        a.bucket[node] = NONE


@njit(cache=True, nogil=True)
def choose_victims(a: ReplayArrays, inst: np.int64, m: np.int64, out: np.ndarray) -> np.int64:
    """As ``lru`` with ``fallback_on_pressure``; none without it."""
    if not a.fallback[inst]:
        return np.int64(0)
    return lru.choose_victims(a, inst, m, out)


@njit(cache=True, nogil=True)
def next_expired(a: ReplayArrays, inst: np.int64, now: np.int64) -> np.int64:
    """A block of ``inst`` expired at ``now`` (``now - anchor > ttl``), or -1. O(TTLs)."""
    for bucket in range(len(a.ttl_values)):
        node = np.int64(a.thead[_list(a, inst, bucket)])
        if node != NONE and now - a.anchor[node] > a.ttl_values[bucket]:
            return node
    return np.int64(NONE)
