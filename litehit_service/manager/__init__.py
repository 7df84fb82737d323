"""The online optimizer manager, one module per job:

- :mod:`.admin`: :class:`OnlineOptimizerManager`, instances and groups (validate, persist,
  publish) and the entry point of every query, curve and snapshot call;
- :mod:`.placement`: a group and a registration -> engine spec and capacity slots, with
  :class:`ManagerLimits`;
- :mod:`.instance`: one instance's live record (:class:`InstanceState`) and read-only view
  (:class:`InstanceInfo`);
- :mod:`.preparation`: a query's rules 1-8, unary, streamed, packed or offline;
- :mod:`.recording`: replay through the engine, projection, counters and live curve;
- :mod:`.curves`: GetHitRateCurve;
- :mod:`.durable`: snapshots captured, written and restored.
"""

from litehit_service.manager.admin import OnlineOptimizerManager
from litehit_service.manager.curves import (
    DEFAULT_CURVE_POINTS,
    MAX_CURVE_POINTS,
    MAX_CURVE_TARGETS,
)
from litehit_service.manager.durable import STATE_FORMAT, StateCapture, StateMismatch, StateStats
from litehit_service.manager.instance import THEORETICAL_OFF, InstanceInfo, InstanceState
from litehit_service.manager.placement import (
    DEFAULT_MAX_INSTANCES,
    DEFAULT_MAX_TRACKED_BLOCKS,
    MAX_TTL_SECONDS,
    ManagerLimits,
    validated_group,
)
from litehit_service.policy import BatchQueryError

__all__ = [
    "DEFAULT_CURVE_POINTS",
    "DEFAULT_MAX_INSTANCES",
    "DEFAULT_MAX_TRACKED_BLOCKS",
    "MAX_CURVE_POINTS",
    "MAX_CURVE_TARGETS",
    "MAX_TTL_SECONDS",
    "STATE_FORMAT",
    "THEORETICAL_OFF",
    "BatchQueryError",
    "InstanceInfo",
    "InstanceState",
    "ManagerLimits",
    "OnlineOptimizerManager",
    "StateCapture",
    "StateMismatch",
    "StateStats",
    "validated_group",
]
