"""Tiered storage (spec §7): one instance's blocks over several tiers, compiled.

Each tier of an instance is an internal instance with its own policy state and its own
group quota (:mod:`~litehit_core.policy_replay.state`: replica ``b + t`` of base slot ``b``
is the block in tier ``t``). A path is cached when any tier holds it; a hit is served by
the lowest tier holding it. The rules:

- **read**: the walk of :func:`~litehit_core.policy_replay.blocks.read`; a hit touches
  the block in every tier holding it (``access_propagation_enabled``) or only in the
  serving tier; with ``promote_enabled`` a hit served by tier ``t > 0`` is written into
  tiers ``0..t-1`` and, after the walk, the tiers evict as after a write;
- **write**: a block some tier holds is rewritten in every tier holding it and its
  ``write_count`` grows; a new block goes into every tier (``write_through``) or tier 0
  (``write_through_selective``, ``cascading``); selective also writes a rewritten block
  into tier 1 once its ``write_count`` reaches the threshold; cascading demotes on
  eviction (:func:`~litehit_core.policy_replay.quota.evict_tiers`).

Costs: O(tiers) per key on top of the untiered read and write.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay.blocks import expire, put, touch
from litehit_core.policy_replay.dispatch import expires
from litehit_core.policy_replay.index import find, find_or_add
from litehit_core.policy_replay.setup import WRITE_SELECTIVE, WRITE_THROUGH
from litehit_core.policy_replay.state import (
    CACHED,
    E_ACCESS,
    E_MODE,
    E_PROMOTE,
    E_WRITE,
    EDGE_COLS,
    EDGE_FIELDS,
    NONE,
    THRESHOLD,
    TIERS,
    USERS,
    ReplayArrays,
)

__all__ = ["expire_tiers", "read_tiered", "write_tiered"]


@njit(cache=True, nogil=True)
def expire_tiers(a: ReplayArrays, user: np.int64, now: np.int64) -> None:
    """Expire the lapsed blocks of every tier of ``user`` whose policy expires blocks."""
    users = a.scalars[USERS]
    for tier in range(a.tiering[user, TIERS]):
        inst = user + tier * users
        if expires(a, inst):
            expire(a, inst, now)


@njit(cache=True, nogil=True, inline="always")
def _edge(a: ReplayArrays, user: np.int64, edge: np.int64, field: np.int64) -> np.int64:
    """Field ``field`` of ``user``'s edge ``edge`` (tier ``edge`` -> ``edge + 1``)."""
    return a.tiering[user, EDGE_COLS + EDGE_FIELDS * edge + field]


@njit(cache=True, nogil=True)
def _place(
    a: ReplayArrays, user: np.int64, base: np.int64, tier: np.int64, now: np.int64,
    bucket: np.int64,
) -> None:  # fmt: skip
    """A copy into ``tier``, and on into each next tier while the edge to it is
    ``write_through`` (spec §7a: a new block from tier 0, a selective copy from tier 1)."""
    users = a.scalars[USERS]
    tiers = a.tiering[user, TIERS]
    put(a, user + tier * users, base + tier, now, bucket)
    while tier + 1 < tiers and _edge(a, user, tier, E_MODE) == WRITE_THROUGH:
        tier += 1
        put(a, user + tier * users, base + tier, now, bucket)


@njit(cache=True, nogil=True)
def read_tiered(
    a: ReplayArrays,
    user: np.int64,
    keys: np.ndarray,
    local: np.ndarray,
    lo: np.int64,
    hi: np.int64,
    now: np.int64,
) -> tuple[np.int64, np.int64, bool]:
    """A ``get`` of ``keys[lo:hi]`` at ``now`` by tiered instance ``user`` (module
    docstring): (local hits, remote hits, whether a block was promoted); the hits per
    serving tier are left in ``a.tier_hits``. The caller evicts after a promotion.
    O(keys x tiers)."""
    users = a.scalars[USERS]
    tiers = a.tiering[user, TIERS]
    a.tier_hits[:] = 0
    parent = np.int64(-1) - user
    hkey = parent
    local_hits = np.int64(0)
    remote_hits = np.int64(0)
    promoted = False
    analyse = len(a.key_node) > 0
    for j in range(lo, hi):
        base = find(a, parent, hkey, keys[j])
        if base == NONE:
            break
        serving = np.int64(NONE)
        for tier in range(tiers):
            if a.flags[base + tier] & CACHED:
                serving = tier
                break
        if serving == NONE:
            if not local[j]:
                break
        else:
            if local[j]:
                local_hits += 1
            else:
                remote_hits += 1
            a.tier_hits[serving] += 1
            touch(a, user + serving * users, base + serving, now)
            for tier in range(serving + 1, tiers):  # down while the edges pass the touch
                if not _edge(a, user, tier - 1, E_ACCESS):
                    break
                if a.flags[base + tier] & CACHED:
                    touch(a, user + tier * users, base + tier, now)
            top = serving  # up while the edges pass a promotion
            while top > 0 and _edge(a, user, top - 1, E_PROMOTE):
                top -= 1
            if top < serving:
                src = base + serving
                bucket = np.int64(a.bucket[src]) if len(a.bucket) else np.int64(NONE)
                for tier in range(top, serving):
                    put(a, user + tier * users, base + tier, now, bucket)
                promoted = True
            if analyse:
                a.key_node[j] = base
        parent = base
        hkey = keys[j]
    return local_hits, remote_hits, promoted


@njit(cache=True, nogil=True)
def write_tiered(
    a: ReplayArrays,
    user: np.int64,
    keys: np.ndarray,
    lo: np.int64,
    hi: np.int64,
    now: np.int64,
    bucket: np.int64,
) -> None:
    """A ``write`` of ``keys[lo:hi]`` at ``now`` with TTL ``bucket`` by tiered instance
    ``user`` (module docstring). No eviction here. O(keys x tiers)."""
    users = a.scalars[USERS]
    tiers = a.tiering[user, TIERS]
    threshold = a.tiering[user, THRESHOLD]
    parent = np.int64(-1) - user
    hkey = parent
    for j in range(lo, hi):
        base = find_or_add(a, parent, hkey, keys[j])
        first = np.int64(NONE)
        for tier in range(tiers):
            if a.flags[base + tier] & CACHED:
                first = tier
                break
        if first != NONE:  # refreshed in the first tier holding it, on while edges pass it
            put(a, user + first * users, base + first, now, bucket)
            for tier in range(first + 1, tiers):
                if not _edge(a, user, tier - 1, E_WRITE):
                    break
                if a.flags[base + tier] & CACHED:
                    put(a, user + tier * users, base + tier, now, bucket)
            a.wcount[base] += 1
            if (
                tiers > 1
                and _edge(a, user, 0, E_MODE) == WRITE_SELECTIVE
                and a.wcount[base] >= threshold
                and not a.flags[base + 1] & CACHED
            ):
                _place(a, user, base, 1, now, bucket)
        else:
            a.wcount[base] = 1
            _place(a, user, base, 0, now, bucket)
        parent = base
        hkey = keys[j]
    a.acc_write[user] += hi - lo
