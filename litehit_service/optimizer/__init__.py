"""The KVCacheManager optimizer's offline tools: policy replays, trade-offs, analyses.

Every tool here reads the optimizer's configuration (:mod:`.optimize.config`) and replays
its trace with :mod:`litehit_core.policy_replay` (LRU, RandomLRU, LeafAwareLRU, TTL, group
quotas, tiers), as ``../shared/spec/optimizer-replay.md`` specifies.

- :mod:`.optimize`: ``litehit optimize``, one replay and its per-instance CSVs and charts;
- :mod:`.tradeoff`: ``litehit tradeoff``, hit rate against capacity, one replay per point;
- :mod:`.analysis`: ``litehit export-tree`` and ``litehit lifecycle``, the radix tree and
  the block lives of one replay in analysis mode.
"""
