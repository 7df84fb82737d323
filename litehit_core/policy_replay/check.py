"""The invariants of a replay's arrays, checked from scratch (tests call it after chunks).

Pure Python over the arrays (slow: O(nodes x depth)); raises AssertionError naming the
broken invariant. It is the cheap proof that the compiled books agree with themselves:
counts, usage, the index, every policy's list or dense array.
"""

from __future__ import annotations

import numpy as np

from litehit_core.policy_replay import leaf_aware_lru, random_lru, ttl
from litehit_core.policy_replay.state import (
    ALIVE,
    CACHED,
    CACHED_ALL,
    HIGH,
    KEEP,
    LIFE_FIELDS,
    LIVES,
    NODES,
    NONE,
    PENDING,
    STRIDE,
    TIERS,
    USERS,
    ReplayArrays,
)

__all__ = ["check_arrays"]


def check_arrays(a: ReplayArrays) -> None:
    """Verify every invariant of ``a`` (module docstring). O(nodes x depth x tiers)."""
    assert a.scalars[PENDING] >= 0, "pending keys are never negative"
    stride = int(a.scalars[STRIDE])
    users = int(a.scalars[USERS])
    high = int(a.scalars[HIGH])
    assert high <= len(a.key), "the high-water mark is inside the arrays"
    bases = range(0, high, stride)
    live = [
        b
        for b in bases
        if a.scalars[KEEP] or a.children[b] > 0 or any(a.flags[b : b + stride] & CACHED)
    ]
    assert len(live) == a.scalars[NODES], ("live nodes", len(live), int(a.scalars[NODES]))
    indexed = sorted(int(v) - 1 for v in a.table if v)
    assert indexed == live, "the index holds exactly the live nodes"
    children = np.zeros(len(a.key), dtype=np.int64)
    cached_children = np.zeros(len(a.key), dtype=np.int64)
    cached = np.zeros(len(a.kind), dtype=np.int64)
    owner = {}
    for n in live:
        p, depth = int(a.parent[n]), 0
        while p >= 0:
            p, depth = int(a.parent[p]), depth + 1
            assert depth < len(a.key), "parent chains end at a root"
        owner[n] = -1 - p
        parent = int(a.parent[n])
        if parent >= 0:
            assert parent in owner or parent in live, "a live node's parent is live"
            children[parent] += 1
        for t in range(stride):
            replica = n + t
            assert a.key[replica] == a.key[n], "replicas share the key"
            expect = parent + t if parent >= 0 else parent
            assert a.parent[replica] == expect, "a replica's parent is its tier's"
            if a.flags[replica] & CACHED:
                if parent >= 0:
                    cached_children[parent + t] += 1
                cached[owner[n] + t * users] += 1
    assert all(children[n] == a.children[n] for n in live), "children counts"
    assert all(
        cached_children[n + t] == a.cached_children[n + t] for n in live for t in range(stride)
    ), "cached_children"
    assert list(cached) == list(a.cached), ("cached per instance", cached, a.cached)
    assert int(cached.sum()) == a.scalars[CACHED_ALL], "cached over every instance"
    usage = np.zeros(len(a.quota), dtype=np.int64)
    for inst, count in enumerate(cached):
        usage[a.group[inst]] += count * a.bpb[inst]
    assert list(usage) == list(a.usage), ("usage per group", usage, a.usage)
    for inst in range(len(a.kind)):
        user, tier = inst % users, inst // users
        mine = sorted(n + tier for n in live if owner[n] == user and a.flags[n + tier] & CACHED)
        _check_policy(a, inst, mine)
    if len(a.life):
        _check_lives(a, [n + t for n in live for t in range(stride)])


def _check_lives(a: ReplayArrays, replicas: list[int]) -> None:
    node, death, cause = (LIFE_FIELDS.index(f) for f in ("node", "death", "cause"))
    used = int(a.scalars[LIVES])
    alive = {int(r) for r in range(used) if a.lives[r, cause] == ALIVE}
    for replica in replicas:
        life = int(a.life[replica])
        if a.flags[replica] & CACHED:
            assert life in alive and a.lives[life, node] == replica, "a cached block's life"
            alive.discard(life)
        else:
            assert life == NONE, "an uncached block has no life"
    assert not alive, "every open life is a cached block's"
    assert all(a.lives[r, death] != NONE for r in range(used) if a.lives[r, cause] != ALIVE)


def _walk(a: ReplayArrays, prev: np.ndarray, nxt: np.ndarray, head: int, tail: int) -> list[int]:
    out, node, last = [], head, NONE
    while node != NONE:
        assert prev[node] == last, "list back links"
        out.append(int(node))
        last, node = node, int(nxt[node])
        assert len(out) <= len(a.key), "list without a cycle"
    assert last == tail, "list tail"
    return out


def _check_policy(a: ReplayArrays, inst: int, mine: list[int]) -> None:
    kind = int(a.kind[inst])
    if kind == random_lru.KIND:
        start = int(a.dense_start[inst])
        dense = sorted(int(x) for x in a.dense[start : start + len(mine)])
        assert dense == mine, "the dense array holds exactly the cached blocks"
        for node in mine:
            assert a.dense[start + a.prev[node]] == node, "dense positions"
            assert a.dense_seq[start + a.prev[node]] == a.seq[node], "dense_seq mirrors seq"
        return
    order = _walk(a, a.prev, a.next, int(a.head[inst]), int(a.tail[inst]))
    seqs = [int(a.seq[n]) for n in order]
    assert seqs == sorted(seqs), "the recency list is in seq order"
    if kind == leaf_aware_lru.KIND:
        leaves = sorted(n for n in mine if a.cached_children[n] == 0)
        assert sorted(order) == leaves, "the leaf list holds exactly the evictable blocks"
        if a.tiering[inst % int(a.scalars[USERS]), TIERS] > 1:
            return  # a tier may hold a block whose parent only another tier holds
        for n in mine:
            parent = int(a.parent[n])
            assert parent < 0 or a.flags[parent] & CACHED, "leaf-aware caches are prefix-closed"
        return
    assert sorted(order) == mine, "the recency list holds exactly the cached blocks"
    if kind == ttl.KIND:
        buckets = len(a.ttl_values)
        listed = 0
        for b in range(buckets):
            h = inst * buckets + b
            members = _walk(a, a.tprev, a.tnext, int(a.thead[h]), int(a.ttail[h]))
            anchors = [int(a.anchor[n]) for n in members]
            assert anchors == sorted(anchors), "an expiry list is in anchor order"
            assert all(a.bucket[n] == b for n in members), "expiry list membership"
            listed += len(members)
        with_ttl = sum(1 for n in mine if a.bucket[n] != NONE)
        assert with_ttl == listed, "every block with a TTL is in its expiry list"
