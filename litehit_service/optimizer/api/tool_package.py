"""A tool's subpackage that is also its Python function: ``optimize`` and ``tradeoff``.

``litehit_service.optimizer.optimize`` and ``litehit_service.optimizer.tradeoff`` are the
packages of ``litehit optimize`` and ``litehit tradeoff``, and the Python API's functions
have the same names (:func:`.functions.optimize`, :func:`.functions.tradeoff`), re-exported from
``litehit_service.optimizer``. A package has one attribute per name, and importing a
subpackage sets it to the subpackage, so a plain re-export would turn back into the
package as soon as any command imported it. Instead each of the two subpackages is a
:class:`ToolPackage`: still the package (``from litehit_service.optimizer.optimize.config
import ...``, ``import litehit_service.optimizer.optimize.run as run`` and string paths
such as ``monkeypatch.setattr("litehit_service.optimizer.optimize.run.x", ...)`` work as
before), and, called, the function: ``from litehit_service.optimizer import optimize;
optimize("policy.json")`` runs :func:`.functions.optimize` (``inspect.signature`` and
``__wrapped__`` give the function's). The API module is imported at the first call.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

__all__ = ["API_MODULE", "ToolPackage"]

API_MODULE = "litehit_service.optimizer.api.functions"
"""Where the functions live."""


class ToolPackage(types.ModuleType):
    """A module that, called, calls the function of :data:`API_MODULE` named as the
    module's last dotted component."""

    @property
    def __wrapped__(self) -> Any:
        return getattr(importlib.import_module(API_MODULE), self.__name__.rpartition(".")[2])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)
