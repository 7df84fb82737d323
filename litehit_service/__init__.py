"""LiteHit service: the gRPC online optimizer, the offline tools and the ``litehit`` CLI.

Depends on :mod:`litehit_core`; the core never imports from here. The public API::

    from litehit_service import OptimizerClient, InstanceGroup, InstanceRegistration
    from litehit_service.messages import TraceQueryRequest   # every wire type

Names are imported on first use (so ``litehit --help`` does not load gRPC).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "OptimizerClient": "litehit_service.client",
    "InstanceGroup": "litehit_service.model",
    "InstanceRegistration": "litehit_service.model",
    "LocationSpec": "litehit_service.model",
    "LocationSpecGroup": "litehit_service.model",
    "RegistrationResult": "litehit_service.model",
    "TraceQueryResult": "litehit_service.model",
    "CapacityResult": "litehit_service.model",
    "TheoreticalResult": "litehit_service.model",
    "InstanceSummary": "litehit_service.model",
    "CapacitySummary": "litehit_service.model",
    "InstanceDebugInfo": "litehit_service.model",
    "OnlineOptimizerManager": "litehit_service.manager",
    "InstanceInfo": "litehit_service.manager",
    "QueryPolicy": "litehit_service.policy",
    "OptimizerError": "litehit_service.errors",
    "InvalidArgument": "litehit_service.errors",
    "Unsupported": "litehit_service.errors",
    "DuplicateEntity": "litehit_service.errors",
    "InstanceNotExist": "litehit_service.errors",
    "RegistryIOError": "litehit_service.errors",
    "ServiceNotReady": "litehit_service.errors",
}

__all__ = [
    "CapacityResult",
    "CapacitySummary",
    "DuplicateEntity",
    "InstanceDebugInfo",
    "InstanceGroup",
    "InstanceInfo",
    "InstanceNotExist",
    "InstanceRegistration",
    "InstanceSummary",
    "InvalidArgument",
    "LocationSpec",
    "LocationSpecGroup",
    "OnlineOptimizerManager",
    "OptimizerClient",
    "OptimizerError",
    "QueryPolicy",
    "RegistrationResult",
    "RegistryIOError",
    "ServiceNotReady",
    "TheoreticalResult",
    "TraceQueryResult",
    "Unsupported",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from litehit_service.client import OptimizerClient
    from litehit_service.errors import (
        DuplicateEntity,
        InstanceNotExist,
        InvalidArgument,
        OptimizerError,
        RegistryIOError,
        ServiceNotReady,
        Unsupported,
    )
    from litehit_service.manager import InstanceInfo, OnlineOptimizerManager
    from litehit_service.model import (
        CapacityResult,
        CapacitySummary,
        InstanceDebugInfo,
        InstanceGroup,
        InstanceRegistration,
        InstanceSummary,
        LocationSpec,
        LocationSpecGroup,
        RegistrationResult,
        TheoreticalResult,
        TraceQueryResult,
    )
    from litehit_service.policy import QueryPolicy


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'litehit_service' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
