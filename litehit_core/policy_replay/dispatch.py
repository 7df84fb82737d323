"""The policies of a replay by code: the one table the compiled loop goes through.

Each policy is one module with the same verbs (``on_write``, ``on_access``, ``on_remove``,
``choose_victims``, and the flag ``ONE_SHOT``) and a ``KIND`` code stored per instance in
``ReplayArrays.kind``; :data:`POLICY_MODULES` lists them by the name a configuration uses,
and the functions below route a verb to the instance's policy (numba compiles the branch
into the loop: no indirect call). Adding a policy: one module, one entry here, one branch
per verb. The names users type, the parameters and the defaults are in
:data:`litehit_core.engine.POLICIES`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay import leaf_aware_lru, lru, random_lru, ttl
from litehit_core.policy_replay.state import NONE, ReplayArrays

__all__ = [
    "POLICY_MODULES",
    "choose_victims",
    "expires",
    "next_expired",
    "on_access",
    "on_remove",
    "on_write",
    "one_shot",
]

POLICY_MODULES = {
    "lru": lru,
    "random_lru": random_lru,
    "leaf_aware_lru": leaf_aware_lru,
    "ttl": ttl,
}
"""Policy name -> its module (each with ``KIND`` and the verbs)."""

_LRU, _RANDOM, _LEAF, _TTL = lru.KIND, random_lru.KIND, leaf_aware_lru.KIND, ttl.KIND
assert sorted(m.KIND for m in POLICY_MODULES.values()) == list(range(len(POLICY_MODULES)))


@njit(cache=True, nogil=True)
def on_write(
    a: ReplayArrays, inst: np.int64, node: np.int64, inserted: bool, now: np.int64, bucket: np.int64
) -> None:
    """The instance's policy hears that a write at ``now`` inserted or rewrote ``node``."""
    kind = a.kind[inst]
    if kind == _LRU:
        lru.on_write(a, inst, node, inserted)
    elif kind == _RANDOM:
        random_lru.on_write(a, inst, node, inserted)
    elif kind == _LEAF:
        leaf_aware_lru.on_write(a, inst, node, inserted)
    else:
        ttl.on_write(a, inst, node, inserted, now, bucket)


@njit(cache=True, nogil=True)
def on_access(a: ReplayArrays, inst: np.int64, node: np.int64, now: np.int64) -> None:
    """The instance's policy hears that a read at ``now`` hit ``node``."""
    kind = a.kind[inst]
    if kind == _LRU:
        lru.on_access(a, inst, node)
    elif kind == _RANDOM:
        random_lru.on_access(a, inst, node)
    elif kind == _LEAF:
        leaf_aware_lru.on_access(a, inst, node)
    else:
        ttl.on_access(a, inst, node, now)


@njit(cache=True, nogil=True)
def on_remove(a: ReplayArrays, inst: np.int64, node: np.int64) -> None:
    """The instance's policy lets ``node`` go (before the cache forgets it)."""
    kind = a.kind[inst]
    if kind == _LRU:
        lru.on_remove(a, inst, node)
    elif kind == _RANDOM:
        random_lru.on_remove(a, inst, node)
    elif kind == _LEAF:
        leaf_aware_lru.on_remove(a, inst, node)
    else:
        ttl.on_remove(a, inst, node)


@njit(cache=True, nogil=True)
def choose_victims(a: ReplayArrays, inst: np.int64, m: np.int64, out: np.ndarray) -> np.int64:
    """Up to ``m`` victims of the instance's policy into ``out``; how many."""
    kind = a.kind[inst]
    if kind == _LRU:
        return lru.choose_victims(a, inst, m, out)
    if kind == _RANDOM:
        return random_lru.choose_victims(a, inst, m, out)
    if kind == _LEAF:
        return leaf_aware_lru.choose_victims(a, inst, m, out)
    return ttl.choose_victims(a, inst, m, out)


@njit(cache=True, nogil=True)
def one_shot(a: ReplayArrays, inst: np.int64) -> bool:
    """Whether one ``choose_victims`` call is all the instance's policy gives per request."""
    kind = a.kind[inst]
    if kind == _RANDOM:
        return random_lru.ONE_SHOT
    if kind == _LEAF:
        return leaf_aware_lru.ONE_SHOT
    if kind == _TTL:
        return ttl.ONE_SHOT
    return lru.ONE_SHOT


@njit(cache=True, nogil=True)
def expires(a: ReplayArrays, inst: np.int64) -> bool:
    """Whether the instance's policy expires blocks by time."""
    return a.kind[inst] == _TTL


@njit(cache=True, nogil=True)
def next_expired(a: ReplayArrays, inst: np.int64, now: np.int64) -> np.int64:
    """A block of the instance expired at ``now``, or -1."""
    if a.kind[inst] == _TTL:
        return ttl.next_expired(a, inst, now)
    return np.int64(NONE)
