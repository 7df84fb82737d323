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
from litehit_core.policy_replay.state import (
    ALIVE,
    CACHED,
    CACHED_ALL,
    EXPIRED,
    KEEP,
    LIVES,
    NONE,
    NOW,
    SEQ,
    STRIDE,
    USERS,
    ReplayArrays,
    ReplayStalled,
)

__all__ = ["expire", "put", "read", "remove_block", "touch", "write"]

_NODE, _INST, _BIRTH, _DEATH, _HITS, _LAST, _CAUSE = range(7)


@njit(cache=True, nogil=True)
def _next_seq(a: ReplayArrays) -> np.int64:
    value = a.scalars[SEQ]
    a.scalars[SEQ] = value + 1
    return value


@njit(cache=True, nogil=True)
def touch(a: ReplayArrays, inst: np.int64, node: np.int64, now: np.int64) -> None:
    """A read at ``now`` hit replica ``node`` of (internal) instance ``inst``: newest in
    recency, the policy told, the life's hits counted (analyses). O(1)."""
    a.seq[node] = _next_seq(a)
    on_access(a, inst, node, now)
    if len(a.life):
        life = a.life[node]
        a.lives[life, _HITS] += 1
        a.lives[life, _LAST] = now


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
    """A ``get`` of ``keys[lo:hi]`` (head first) at ``now`` by an untiered instance: walk
    the path while blocks are cached; a missing block marked in ``local`` is skipped, any
    other miss ends the walk. Every hit is touched head to tail. Returns (local hits,
    remote hits, known): the nodes of the first ``known`` keys are left in ``a.path`` (a
    write of the same keys right after starts from them). O(keys)."""
    parent = np.int64(-1) - inst
    local_hits = np.int64(0)
    remote_hits = np.int64(0)
    known = np.int64(0)
    hkey = parent
    analyse = len(a.key_node) > 0
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
            touch(a, inst, node, now)
            if analyse:
                a.key_node[j] = node
        elif not local[j]:
            break
        parent = node
        hkey = keys[j]
    return local_hits, remote_hits, known


@njit(cache=True, nogil=True)
def put(a: ReplayArrays, inst: np.int64, node: np.int64, now: np.int64, bucket: np.int64) -> None:
    """Write replica ``node`` into (internal) instance ``inst`` at ``now`` with TTL
    ``bucket``: inserted when not cached (the books, the parent's ``cached_children``, a
    new life), rewritten otherwise; newest in recency either way, the policy told. No
    eviction here. O(1)."""
    inserted = not (a.flags[node] & CACHED)
    if inserted:
        a.flags[node] = CACHED
        a.cached[inst] += 1
        a.scalars[CACHED_ALL] += 1
        a.usage[a.group[inst]] += a.bpb[inst]
        parent = np.int64(a.parent[node])
        if parent >= 0:
            a.cached_children[parent] += 1
        if len(a.life):
            life = a.scalars[LIVES]
            a.scalars[LIVES] = life + 1
            a.life[node] = life
            a.lives[life, _NODE] = node
            a.lives[life, _INST] = inst
            a.lives[life, _BIRTH] = now
            a.lives[life, _DEATH] = NONE
            a.lives[life, _HITS] = 0
            a.lives[life, _LAST] = NONE
            a.lives[life, _CAUSE] = ALIVE
    a.seq[node] = _next_seq(a)
    on_write(a, inst, node, inserted, now, bucket)


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
    """A ``write`` of ``keys[lo:hi]`` at ``now`` with TTL ``bucket`` by an untiered
    instance: each block head to tail is rewritten if cached, else inserted. The nodes of
    the first ``known`` keys are in ``a.path`` (left by the read just before; 0
    otherwise). No eviction here. O(keys)."""
    parent = np.int64(-1) - inst
    hkey = parent
    for j in range(lo, hi):
        if j - lo < known:
            node = np.int64(a.path[j - lo])
        else:
            node = find_or_add(a, parent, hkey, keys[j])
        put(a, inst, node, now, bucket)
        parent = node
        hkey = keys[j]
    a.acc_write[inst] += hi - lo


@njit(cache=True, nogil=True)
def remove_block(a: ReplayArrays, inst: np.int64, node: np.int64, cause: np.int64) -> None:
    """Take cached replica ``node`` out of (internal) instance ``inst`` (its descendants
    stay; ``cause`` ends its life), then -- unless nodes are kept -- forget every node left
    with no replica cached and no children, from ``node``'s up. O(tiers) amortised."""
    on_remove(a, inst, node)
    a.flags[node] = 0
    a.cached[inst] -= 1
    a.scalars[CACHED_ALL] -= 1
    a.usage[a.group[inst]] -= a.bpb[inst]
    parent = np.int64(a.parent[node])
    if parent >= 0:
        a.cached_children[parent] -= 1
    if len(a.life):
        life = a.life[node]
        a.life[node] = NONE
        a.lives[life, _DEATH] = a.scalars[NOW]
        a.lives[life, _CAUSE] = cause
    if a.scalars[KEEP]:
        return
    stride = a.scalars[STRIDE]
    base = node - inst // a.scalars[USERS]
    while base >= 0 and a.children[base] == 0 and not a.flags[base : base + stride].any():
        parent = np.int64(a.parent[base])
        delete(a, base)
        base = parent


@njit(cache=True, nogil=True)
def expire(a: ReplayArrays, inst: np.int64, now: np.int64) -> None:
    """Remove every block of (internal) instance ``inst`` whose TTL has lapsed at ``now``
    (only policies that expire blocks have any). O(TTLs + expired blocks)."""
    left = a.cached[inst]  # no more can expire: one more is a list that does not shrink
    while True:
        node = next_expired(a, inst, now)
        if node == NONE:
            return
        if left == 0:
            raise ReplayStalled("TTL expiry did not end", inst, now)
        left -= 1
        remove_block(a, inst, node, np.int64(EXPIRED))
        a.expired[inst] += 1
