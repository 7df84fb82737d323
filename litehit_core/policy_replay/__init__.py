"""Policy replay: one replay per capacity for the eviction policies of the KVCacheManager
optimizer (spec ``optimizer-replay.md`` §2-§6).

Unlike LiteHit's engines (one capacity-free pass, every capacity by projection), a policy
simulator needs the capacity while it replays: RandomLRU, leaf-aware LRU, TTL, shared group
quotas and delayed writes have no stack property. The pieces, libCacheSim-style:

- one module per policy, each with the same verbs (``on_write``, ``on_access``,
  ``on_remove``, ``choose_victims``): :mod:`.lru`, :mod:`.random_lru`,
  :mod:`.leaf_aware_lru`, :mod:`.ttl`; :mod:`.dispatch` routes a verb to an instance's
  policy (the names, parameters and defaults users see are in
  :data:`litehit_core.engine.POLICIES`);
- shared: :mod:`.setup` (what is replayed), :mod:`.state` (the flat arrays),
  :mod:`.index` (path -> node), :mod:`.lists`, :mod:`.blocks` (read, write, remove,
  expire), :mod:`.quota` (eviction modes), :mod:`.loop` (records -> rows),
  :mod:`.replay` (the driver), :mod:`.check` (invariants).

Everything in the hot loop is compiled with numba (``nogil``, cached on disk); there is
no Python object per block. The kernels pass every array behind one structref pointer
(:func:`.state.as_struct`). numba's disk cache knows only the file a kernel is defined
in; :mod:`litehit_core.kernel_cache` drops every cached kernel when any source changes,
so the kernels that call into an edited module are compiled again.
"""

from litehit_core.policy_replay.replay import (
    Replayer,
    ReplayRecords,
    ReplayResult,
    ReplaySetup,
    replay,
    warm_up,
)
from litehit_core.policy_replay.setup import EdgeSetup, InstanceSetup, TierSetup

__all__ = [
    "EdgeSetup",
    "InstanceSetup",
    "Replayer",
    "ReplayRecords",
    "ReplayResult",
    "ReplaySetup",
    "TierSetup",
    "replay",
    "warm_up",
]
