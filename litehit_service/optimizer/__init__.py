"""The KVCacheManager optimizer's offline tools: policy replays, trade-offs, analyses.

Every tool here reads the optimizer's configuration (:mod:`.optimize.config`) and replays
its trace with :mod:`litehit_core.policy_replay` (LRU, RandomLRU, LeafAwareLRU, TTL, group
quotas, tiers), as ``../shared/spec/optimizer-replay.md`` specifies.

- :mod:`.optimize`: ``litehit optimize``, one replay and its per-instance CSVs and charts;
- :mod:`.tradeoff`: ``litehit tradeoff``, hit rate against capacity, one replay per point;
- :mod:`.analysis`: ``litehit export-tree`` and ``litehit lifecycle``, the radix tree and
  the block lives of one replay in analysis mode;
- :mod:`.api`: the same from Python: ``optimize()`` and ``tradeoff()`` returning pyarrow
  Tables (``from litehit_service.optimizer.api import optimize, tradeoff``: here those
  names are the commands' subpackages), and the reference's ``OptimizerConfigLoader`` /
  ``OptimizerManager`` verbs (re-exported here too).

Names are imported on first use (``litehit --help`` loads none of them).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [  # the reference's objects and the API's types (optimize/tradeoff: in .api)
    "InvalidRequestError",
    "LocatedError",
    "OptimizeResult",
    "OptimizerConfig",
    "OptimizerConfigLoader",
    "OptimizerManager",
    "RadixTreeExport",
    "RadixTreeExportNode",
    "TraceOptions",
    "VerbOrderError",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("litehit_service.optimizer.api"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
