"""The optimizer's tools from Python: ``from litehit_service.optimizer.api import
optimize, tradeoff, OptimizerConfigLoader, OptimizerManager`` (the reference's objects are
also re-exported by :mod:`litehit_service.optimizer`; ``optimize`` and ``tradeoff`` are not,
as those names there are the commands' subpackages).

:mod:`.functions`: ``optimize()`` and ``tradeoff()``, results as pyarrow Tables, no file
unless asked; :mod:`.reference`: the reference optimizer's ``OptimizerConfigLoader``,
``OptimizerManager`` and its verbs (``Init``, ``DirectRun``, ``AnalyzeResults``,
``ExportRadixTrees``). Both run
the commands' own code (replay, tables, files), so the numbers are the commands'.
"""

from litehit_core import InvalidRequestError, LocatedError
from litehit_service.optimizer.api.functions import (
    OptimizeResult,
    TraceOptions,
    optimize,
    tradeoff,
)
from litehit_service.optimizer.api.reference import (
    OptimizerConfig,
    OptimizerConfigLoader,
    OptimizerManager,
    RadixTreeExport,
    RadixTreeExportNode,
    VerbOrderError,
)

__all__ = [
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
    "optimize",
    "tradeoff",
]
