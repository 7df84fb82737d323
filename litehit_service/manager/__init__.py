"""The online optimizer manager (moved from ``litehit_service/manager.py``; split by job
into the modules of this package)."""

from litehit_service.manager.admin import (
    DEFAULT_CURVE_POINTS,
    DEFAULT_MAX_INSTANCES,
    DEFAULT_MAX_TRACKED_BLOCKS,
    MAX_CURVE_POINTS,
    MAX_CURVE_TARGETS,
    MAX_TTL_SECONDS,
    STATE_FORMAT,
    THEORETICAL_OFF,
    BatchQueryError,
    InstanceInfo,
    InstanceState,
    ManagerLimits,
    OnlineOptimizerManager,
    StateCapture,
    StateMismatch,
    StateStats,
    validated_group,
)

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
