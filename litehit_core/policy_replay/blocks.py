"""What every policy shares about one instance's blocks: a read, a write, a removal and
TTL expiry (spec §3), compiled.

These functions keep the cache's books -- ``flags``, ``seq``, per-instance and per-group
counts, ``cached_children``, the index (a node is deleted as soon as it is neither cached
nor has children) -- and tell the instance's policy through
:mod:`~litehit_core.policy_replay.dispatch`. Each is ``nogil``, ``cache=True``; costs are
per key, O(1) expected each.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay.dispatch import next_expired, on_access, on_remove, on_write
from litehit_core.policy_replay.index import delete, find, find_or_add
from litehit_core.policy_replay.state import CACHED, CACHED_ALL, NONE, SEQ, ReplayArrays

__all__ = ["expire", "read", "remove_block", "write"]


@njit(cache=True, nogil=True)
def _next_seq(a: ReplayArrays) -> np.int64:
    value = a.scalars[SEQ]
    a.scalars[SEQ] = value + 1
    return value


@njit(cache=True, nogil=True)
def read(
    a: ReplayArrays,
    inst: np.int64,
    keys: np.ndarray,
    local: np.ndarray,
    lo: np.int64,
    hi: np.int64,
    now: np.int64,
) -> tuple[np.int64, np.int64, np.int64]:
    """A ``get`` of ``keys[lo:hi]`` (head first) at ``now``: walk the path while blocks
    are cached; a missing block marked in ``local`` is skipped, any other miss ends the
    walk. Every hit is touched head to tail. Returns (local hits, remote hits, known):
    the nodes of the first ``known`` keys are left in ``a.path`` (a write of the same keys
    right after starts from them). O(keys)."""
    parent = np.int64(-1) - inst
    local_hits = np.int64(0)
    remote_hits = np.int64(0)
    known = np.int64(0)
    hkey = parent
    for j in range(lo, hi):
        node = find(a, parent, hkey, keys[j])
        if node == NONE:
            break  # a path never written (or forgotten): nothing below it is cached
        a.path[known] = node
        known += 1
        if a.flags[node] & CACHED:
            if local[j]:
                local_hits += 1
            else:
                remote_hits += 1
            a.seq[node] = _next_seq(a)
            on_access(a, inst, node, now)
        elif not local[j]:
            break
        parent = node
        hkey = keys[j]
    return local_hits, remote_hits, known


@njit(cache=True, nogil=True)
def write(
    a: ReplayArrays,
    inst: np.int64,
    keys: np.ndarray,
    lo: np.int64,
    hi: np.int64,
    now: np.int64,
    bucket: np.int64,
    known: np.int64,
) -> None:
    """A ``write`` of ``keys[lo:hi]`` at ``now`` with TTL ``bucket``: each block head to
    tail is rewritten if cached, else inserted. The nodes of the first ``known`` keys are
    in ``a.path`` (left by the read just before; 0 otherwise). No eviction here.
    O(keys)."""
    parent = np.int64(-1) - inst
    group = a.group[inst]
    hkey = parent
    for j in range(lo, hi):
        if j - lo < known:
            node = np.int64(a.path[j - lo])
        else:
            node = find_or_add(a, parent, hkey, keys[j])
        inserted = not (a.flags[node] & CACHED)
        if inserted:
            a.flags[node] = CACHED
            a.cached[inst] += 1
            a.scalars[CACHED_ALL] += 1
            a.usage[group] += a.bpb[inst]
            if parent >= 0:
                a.cached_children[parent] += 1
        a.seq[node] = _next_seq(a)
        on_write(a, inst, node, inserted, now, bucket)
        parent = node
        hkey = keys[j]
    a.acc_write[inst] += hi - lo


@njit(cache=True, nogil=True)
def remove_block(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """Take cached ``node`` out of ``inst``'s cache (its descendants stay), then forget
    every node left neither cached nor with children, from ``node`` up. O(1) amortised."""
    on_remove(a, inst, node)
    a.flags[node] = 0
    a.cached[inst] -= 1
    a.scalars[CACHED_ALL] -= 1
    a.usage[a.group[inst]] -= a.bpb[inst]
    parent = np.int64(a.parent[node])
    if parent >= 0:
        a.cached_children[parent] -= 1
    while node >= 0 and a.flags[node] == 0 and a.children[node] == 0:
        parent = np.int64(a.parent[node])
        delete(a, node)
        node = parent


@njit(cache=True, nogil=True)
def expire(a: ReplayArrays, inst: np.int64, now: np.int64) -> None:
    """Remove every block of ``inst`` whose TTL has lapsed at ``now`` (only policies that
    expire blocks have any). O(TTLs + expired blocks)."""
    while True:
        node = next_expired(a, inst, now)
        if node == NONE:
            return
        remove_block(a, inst, node)
        a.expired[inst] += 1
