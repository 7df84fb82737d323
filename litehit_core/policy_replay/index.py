"""The radix index of a policy replay: block path -> node slot, compiled.

A block is identified by its path (spec §3): its parent's node and its own key, so the
index is an open-addressing table of ``(parent, key)`` -- a trie stored as a hash table.
``parent`` is the parent's slot, or ``-1 - instance`` for an instance's first block, so
every instance has its own tree in the one table. The *home* slot is hashed from the
parent's **key** (the root marker for a first block) and the block's key, which the caller
knows from the request before the parent's lookup ends: the probes of a request's blocks
do not wait for each other (measured 2026-12-04 at 8x the Mooncake trace); the entries
are compared on the parent's slot, so two paths ending in the same two keys stay apart.
Slots hold ``node + 1`` (0 = empty); linear probing; a deletion shifts the following
entries back (no tombstones), so a lookup costs the same after millions of deletions. The
table stays at most half full (:func:`~litehit_core.policy_replay.state.reserve` doubles
it when the loop stops for room). Every function is ``nogil``, ``cache=True``, O(1) expected.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.kernels import home_slot
from litehit_core.policy_replay.state import (
    FREE_HEAD,
    HIGH,
    KEEP,
    NODES,
    NONE,
    NOW,
    STRIDE,
    ReplayArrays,
    ReplayStalled,
)

__all__ = ["delete", "find", "find_or_add", "rebuild_table"]

_PARENT_MIX = np.int64(0x2545F4914F6CDD1D)


@njit(cache=True, nogil=True, inline="always")
def _home(hkey: np.int64, key: np.int64, mask: np.int64) -> np.int64:
    return home_slot(key ^ (hkey * _PARENT_MIX), mask)


@njit(cache=True, nogil=True, inline="always")
def _hkey(a: ReplayArrays, parent: np.int64) -> np.int64:
    """What a child of ``parent`` is hashed with: the parent's key (its root marker for a
    first block)."""
    return a.key[parent] if parent >= 0 else parent


@njit(cache=True, nogil=True, inline="always")
def _probe(a: ReplayArrays, parent: np.int64, hkey: np.int64, key: np.int64) -> tuple:
    """(slot, node): where the search for path ``(parent, key)`` ended -- its entry, or
    the empty slot that ends its probe sequence (node -1)."""
    table = a.table
    mask = np.int64(len(table) - 1)
    slot = _home(hkey, key, mask)
    while True:
        entry = np.int64(table[slot])
        if entry == 0:
            return slot, np.int64(NONE)
        node = entry - 1
        if a.key[node] == key and np.int64(a.parent[node]) == parent:
            return slot, node
        slot = (slot + 1) & mask


@njit(cache=True, nogil=True)
def find(a: ReplayArrays, parent: np.int64, hkey: np.int64, key: np.int64) -> np.int64:
    """The node of path ``(parent, key)``, or -1 when it is not known; ``hkey`` is the
    parent's key (``parent`` itself for a first block). O(1) expected."""
    return _probe(a, parent, hkey, key)[1]


@njit(cache=True, nogil=True)
def find_or_add(a: ReplayArrays, parent: np.int64, hkey: np.int64, key: np.int64) -> np.int64:
    """The node (base slot) of path ``(parent, key)``; when it is not known, a new
    uncached one (:data:`~litehit_core.policy_replay.state.STRIDE` slots, one replica per
    tier) taken from the free slots and indexed in the empty slot the search ended on (one probe
    sequence, not two); its parent's ``children`` then grows by one. The caller has
    reserved room. O(1) expected."""
    slot, node = _probe(a, parent, hkey, key)
    if node != NONE:
        return node
    node = a.scalars[FREE_HEAD]
    stride = a.scalars[STRIDE]
    if node == NONE:
        node = a.scalars[HIGH]
        a.scalars[HIGH] = node + stride
    else:
        a.scalars[FREE_HEAD] = a.next[node]
    a.scalars[NODES] += 1
    for tier in range(stride):  # one replica per tier, each linked to its parent's
        slot_t = node + tier
        a.key[slot_t] = key
        a.parent[slot_t] = parent + tier if parent >= 0 else parent
        a.flags[slot_t] = 0
        a.children[slot_t] = 0
        a.cached_children[slot_t] = 0
        a.prev[slot_t] = NONE
        a.next[slot_t] = NONE
        if len(a.life):
            a.life[slot_t] = NONE
    if len(a.wcount):
        a.wcount[node] = 0
    if parent >= 0:
        a.children[parent] += 1
    a.table[slot] = node + 1
    return node


@njit(cache=True, nogil=True)
def delete(a: ReplayArrays, node: np.int64) -> None:
    """Remove base slot ``node`` (no replica cached, no children) from the index and free
    its slots; its
    parent's ``children`` drops by one. O(1) expected (backward-shift deletion)."""
    table = a.table
    mask = np.int64(len(table) - 1)
    parent = np.int64(a.parent[node])
    slot = _home(_hkey(a, parent), a.key[node], mask)
    while np.int64(table[slot]) != node + 1:
        if table[slot] == 0:  # the probe sequence ended: the node is not indexed
            raise ReplayStalled("a node deleted twice (not in the index)", NONE, a.scalars[NOW])
        slot = (slot + 1) & mask
    hole = slot
    slot = (slot + 1) & mask
    while table[slot] != 0:
        other = np.int64(table[slot]) - 1
        home = _home(_hkey(a, np.int64(a.parent[other])), a.key[other], mask)
        # move the entry back into the hole unless its home lies cyclically in (hole, slot]
        if (slot - home) & mask >= (slot - hole) & mask:
            table[hole] = table[slot]
            hole = slot
        slot = (slot + 1) & mask
    table[hole] = 0
    if parent >= 0:
        a.children[parent] -= 1
    a.next[node] = a.scalars[FREE_HEAD]
    a.scalars[FREE_HEAD] = node
    a.scalars[NODES] -= 1


@njit(cache=True, nogil=True)
def rebuild_table(a: ReplayArrays) -> None:
    """Index every live node in ``a.table`` (zeroed, larger than before). A node is live
    when a replica is cached or when it has children (free slots are neither). O(slots)."""
    table = a.table
    mask = np.int64(len(table) - 1)
    stride = a.scalars[STRIDE]
    keep = a.scalars[KEEP]
    for node in range(0, a.scalars[HIGH], stride):
        if keep == 0 and a.children[node] == 0 and not a.flags[node : node + stride].any():
            continue  # a free slot (analyses keep every node, cached or not)
        slot = _home(_hkey(a, np.int64(a.parent[node])), a.key[node], mask)
        while table[slot] != 0:
            slot = (slot + 1) & mask
        table[slot] = node + 1
