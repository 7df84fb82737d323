"""The lifecycle files, published: ``lifecycle/`` under an output folder, all or nothing.

:func:`publish_lifecycle` is what ``litehit lifecycle``, ``litehit optimize
--export-lifecycle`` and the Python API's ``AnalyzeResults(export_lifecycle=True)``
write: per instance ``{instance_id}_block_lifecycle.csv`` (every block life, written as
the analysis replay streams, :class:`~.lifecycle.LifecycleWriter`) and
``{instance_id}_lifespan.png`` (:func:`~.lifecycle_plot.lifespan_figure`). The caller
runs the analysis replay (its trace options and progress are its own) through the
``analyse`` callable it passes. Cost: one analysis replay plus O(lives) formatting.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from litehit_core.policy_replay import Replayer
from litehit_service.optimizer.analysis.lifecycle import LifecycleWriter, LifeSummary
from litehit_service.optimizer.analysis.replay import Analysis, instance_infos
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.stream import Fed

__all__ = ["LIFECYCLE_DIR", "Analyse", "OnBatch", "publish_lifecycle"]

LIFECYCLE_DIR = "lifecycle"
"""The folder of the lifecycle files inside the output folder."""

OnBatch = Callable[[Replayer, Fed], object]
"""What the analysis replay calls after each batch (:func:`~.replay.run_analysis`)."""
Analyse = Callable[[OnBatch], Analysis]
"""Runs the analysis replay of the configuration with the given ``on_batch``."""


def publish_lifecycle(
    config: OptimizeConfig, out_dir: str, analyse: Analyse
) -> tuple[Analysis, list[LifeSummary], str]:
    """Replay through ``analyse`` and publish ``lifecycle/`` under ``out_dir``, all or
    nothing (module docstring): the analysis, each instance's
    :class:`~.lifecycle.LifeSummary` (configuration order) and the folder written."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.offline.outputs import atomic_outputs, new_dirs
    from litehit_service.optimizer.analysis.lifecycle_plot import lifespan_figure
    from litehit_service.optimizer.optimize.outputs import PICTURE_DPI

    load_kernels("text")
    infos = instance_infos(config)
    folder = os.path.join(out_dir, LIFECYCLE_DIR)
    csvs = [os.path.join(folder, f"{i.instance_id}_block_lifecycle.csv") for i in infos]
    pngs = [os.path.join(folder, f"{i.instance_id}_lifespan.png") for i in infos]
    with new_dirs([folder]), atomic_outputs([*csvs, *pngs]) as tmps:
        with contextlib.ExitStack() as files:
            writer = LifecycleWriter(
                infos,
                [files.enter_context(open(t, "w", encoding="utf-8", newline=""))
                 for t in tmps[: len(csvs)]],
            )  # fmt: skip
            analysis = analyse(writer.on_batch)
            every = writer.finish(analysis)
        for tmp, lives in zip(tmps[len(csvs) :], every, strict=True):
            lifespan_figure(lives).savefig(tmp, format="png", dpi=PICTURE_DPI)
    return analysis, every, folder
