"""Group quotas: capacity eviction after a write, by eviction mode (spec §4), compiled.

After instance ``i`` of group ``G`` wrote (tiers: each tier ``t`` of ``i`` in its group
``G_t``, tier 0 first, :func:`evict_tiers`), while the group's usage exceeds its quota:
mode 2 (INSTANCE_ROUGH) asks ``i``'s policy for ``batch`` victims, mode 3
(INSTANCE_PRECISE) for ``min(batch, ceil(excess / bytes_per_block_i))``, mode 1
(GROUP_ROUGH) asks every instance of ``G`` in configuration order for ``batch`` victims
before looking again; a round that evicts nothing ends it. Cost: O(victims) plus each
policy's price per call.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from litehit_core.policy_replay.blocks import put, remove_block
from litehit_core.policy_replay.dispatch import choose_victims, one_shot
from litehit_core.policy_replay.setup import CASCADING
from litehit_core.policy_replay.state import (
    BATCH,
    CACHED,
    E_MODE,
    EDGE_COLS,
    EDGE_FIELDS,
    EVICTED,
    MODE,
    NONE,
    NOW,
    TIERS,
    USERS,
    ReplayArrays,
    ReplayStalled,
)

__all__ = [
    "EVICTION_MODES",
    "GROUP_ROUGH",
    "INSTANCE_PRECISE",
    "INSTANCE_ROUGH",
    "evict",
    "evict_tiers",
]

GROUP_ROUGH, INSTANCE_ROUGH, INSTANCE_PRECISE = 1, 2, 3
EVICTION_MODES = {
    GROUP_ROUGH: "GROUP_ROUGH",
    INSTANCE_ROUGH: "INSTANCE_ROUGH",
    INSTANCE_PRECISE: "INSTANCE_PRECISE",
}
"""Eviction mode code -> its name in the reference."""


@njit(cache=True, nogil=True)
def _take(a: ReplayArrays, inst: np.int64, m: np.int64) -> np.int64:
    """Ask ``inst``'s policy for ``m`` victims and remove them; how many went (a victim
    drawn twice goes once). A cascading tier first writes each victim into the next tier
    (spec §7; evicted from the last tier, it is gone)."""
    got = np.int64(0)
    out = a.victims
    users = a.scalars[USERS]
    user = inst % users
    tier = inst // users  # cascading edge tier -> tier + 1 (spec §7a): into the next tier
    demote = tier + 1 < a.tiering[user, TIERS] and (
        a.tiering[user, EDGE_COLS + EDGE_FIELDS * tier + E_MODE] == CASCADING
    )
    while got < m:
        k = choose_victims(a, inst, m - got, out)
        if k == 0:
            break
        before = got
        for t in range(k):
            node = np.int64(out[t])
            if a.flags[node] & CACHED:
                if demote:  # cascading: into the next tier as a fresh write, first
                    bucket = np.int64(a.bucket[node]) if len(a.bucket) else np.int64(NONE)
                    put(a, inst + users, node + 1, a.scalars[NOW], bucket)
                remove_block(a, inst, node, np.int64(EVICTED))
                got += 1
        if got == before:  # the policy chose only blocks that are not cached
            raise ReplayStalled("victims chosen, none cached", inst, a.scalars[NOW])
        if one_shot(a, inst):
            break
    a.evicted[inst] += got
    return got


@njit(cache=True, nogil=True)
def evict(a: ReplayArrays, inst: np.int64) -> None:
    """Bring ``inst``'s group back within its quota after ``inst`` wrote (see the module
    docstring)."""
    group = a.group[inst]
    quota = a.quota[group]
    if quota < 0:
        return
    mode = a.scalars[MODE]
    batch = a.scalars[BATCH]
    while a.usage[group] > quota:
        before = a.usage[group]
        if mode == GROUP_ROUGH:
            evicted = np.int64(0)
            for idx in range(a.member_off[group], a.member_off[group + 1]):
                evicted += _take(a, np.int64(a.members[idx]), batch)
        else:
            m = batch
            if mode == INSTANCE_PRECISE:
                excess = a.usage[group] - quota
                bpb = a.bpb[inst]
                m = min(batch, (excess + bpb - 1) // bpb)
            evicted = _take(a, inst, m)
        if evicted == 0:
            return
        if a.usage[group] >= before:  # blocks went, their bytes did not
            raise ReplayStalled("an eviction round freed no bytes", inst, a.scalars[NOW])


@njit(cache=True, nogil=True)
def evict_tiers(a: ReplayArrays, user: np.int64) -> None:
    """Bring each tier of configured instance ``user`` back within its group's quota,
    tier 0 first (a cascading tier's demotions reach the next tier before it is looked
    at). Untiered: :func:`evict` once."""
    users = a.scalars[USERS]
    for tier in range(a.tiering[user, TIERS]):
        evict(a, user + tier * users)
