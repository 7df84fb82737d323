"""The files of an analysis replay, published: block lives and the fleet's copies.

:func:`publish_lifecycle` is what ``litehit lifecycle``, ``litehit optimize
--export-lifecycle`` / ``--draw-chart`` (several instances) and the Python API write, all
or nothing (:func:`lifecycle_paths` names them):

- ``litehit lifecycle``: ``lifecycle/{instance_id}_block_lifecycle.csv`` (every block
  life, written as the analysis replay streams, :class:`~.lifecycle.LifecycleWriter`) and
  ``lifecycle/{instance_id}_lifespan.png`` (:func:`~.lifecycle_plot.lifespan_figure`);
- ``reference`` (``optimize --export-lifecycle``): the reference's
  ``{instance_id}_lifecycle.csv`` and values, beside the hit-rate CSVs, no pictures;
  ``lives`` False: no lifecycle file;
- ``copies``: the fleet's ``global_duplicate_blocks.csv``/``.png`` (:mod:`.copies`).

:func:`optimize_analysis` says which of them ``litehit optimize`` writes for its flags.
The caller runs the analysis replay (its trace options and progress are its own) through
the ``analyse`` callable it passes. Cost: one analysis replay plus O(lives) formatting.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import NamedTuple

from litehit_core.policy_replay import Replayer
from litehit_service.optimizer.analysis.lifecycle import LifecycleWriter, LifeSummary
from litehit_service.optimizer.analysis.replay import Analysis, InstanceInfo, instance_infos
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.stream import Fed

__all__ = [
    "LIFECYCLE_DIR",
    "LIFECYCLE_FILES",
    "Analyse",
    "AnalysisFiles",
    "OnBatch",
    "lifecycle_paths",
    "optimize_analysis",
    "publish_lifecycle",
]

LIFECYCLE_DIR = "lifecycle"
"""The folder of ``litehit lifecycle``'s files inside the output folder."""

OnBatch = Callable[[Replayer, Fed], object]
"""What the analysis replay calls after each batch (:func:`~.replay.run_analysis`)."""
Analyse = Callable[[OnBatch], Analysis]
"""Runs the analysis replay of the configuration with the given ``on_batch``."""


class AnalysisFiles(NamedTuple):
    """Which files an analysis replay publishes (module docstring)."""

    reference: bool = False
    lives: bool = True
    copies: bool = False


LIFECYCLE_FILES = AnalysisFiles()
"""``litehit lifecycle``'s files: ``lifecycle/`` with the CSVs and the pictures."""


def optimize_analysis(
    config: OptimizeConfig, *, export_lifecycle: bool, draw_chart: bool
) -> AnalysisFiles | None:
    """The analysis files ``litehit optimize`` writes beside its hit-rate tables: the
    reference's lifecycle CSVs with ``--export-lifecycle``, the fleet's copies with
    ``--draw-chart`` when several instances run; None: no analysis replay."""
    copies = draw_chart and len(config.instances) > 1  # the fleet's duplicate blocks
    if not (export_lifecycle or copies):
        return None
    return AnalysisFiles(reference=True, lives=export_lifecycle, copies=copies)


def lifecycle_paths(
    infos: tuple[InstanceInfo, ...], out_dir: str, files: AnalysisFiles
) -> tuple[str, list[str], list[str], list[str]]:
    """The folder of the lifecycle files and the paths of ``files``: the CSVs (one per
    instance, configuration order), the pictures and the copies' two files."""
    from litehit_service.optimizer.analysis.copies import COPIES_CSV, COPIES_PNG

    reference, lives, copies = files
    folder = out_dir if reference or not lives else os.path.join(out_dir, LIFECYCLE_DIR)
    name = "{}_lifecycle.csv" if reference else "{}_block_lifecycle.csv"
    csvs = [os.path.join(folder, name.format(i.instance_id)) for i in infos] if lives else []
    pngs = [os.path.join(folder, f"{i.instance_id}_lifespan.png") for i in infos]
    pngs = pngs if lives and not reference else []
    extra = [os.path.join(out_dir, COPIES_CSV), os.path.join(out_dir, COPIES_PNG)]
    return folder, csvs, pngs, extra if copies else []


def publish_lifecycle(
    config: OptimizeConfig,
    out_dir: str,
    analyse: Analyse,
    files: AnalysisFiles = LIFECYCLE_FILES,
) -> tuple[Analysis, list[LifeSummary], str]:
    """Replay through ``analyse`` and publish ``files`` under ``out_dir``, all or nothing
    (module docstring): the analysis, each instance's :class:`~.lifecycle.LifeSummary`
    (configuration order) and the folder of the lifecycle files."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.offline.outputs import atomic_outputs, new_dirs
    from litehit_service.optimizer.analysis.copies import CopyCounter, copies_figure
    from litehit_service.optimizer.analysis.lifecycle_plot import lifespan_figure
    from litehit_service.optimizer.optimize.outputs import PICTURE_DPI

    load_kernels("text")
    infos = instance_infos(config)
    folder, csvs, pngs, extra = lifecycle_paths(infos, out_dir, files)
    with new_dirs([folder]), atomic_outputs([*csvs, *pngs, *extra]) as tmps:
        counter = CopyCounter() if files.copies else None
        with contextlib.ExitStack() as stack:
            handles = [stack.enter_context(open(t, "w", encoding="utf-8", newline=""))
                       for t in tmps[: len(csvs)]]  # fmt: skip
            writer = LifecycleWriter(
                infos, handles or [None] * len(infos), reference=files.reference, copies=counter
            )
            analysis = analyse(writer.on_batch)
            every = writer.finish(analysis)
        for tmp, summary in zip(tmps[len(csvs) : len(csvs) + len(pngs)], every, strict=False):
            lifespan_figure(summary).savefig(tmp, format="png", dpi=PICTURE_DPI)
        if counter is not None:
            table = counter.table()
            csv_tmp, png_tmp = tmps[len(csvs) + len(pngs) :]
            with open(csv_tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(table.csv_text())
            copies_figure(table).savefig(png_tmp, format="png", dpi=PICTURE_DPI)
    return analysis, every, folder
