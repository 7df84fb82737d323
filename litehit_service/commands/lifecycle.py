"""``litehit lifecycle``: every block life of a policy replay, and their statistics.

Replays CONFIG.json (``litehit optimize``'s configuration; positional or ``-c``) in the
policy replay's analysis mode and writes, per instance, into ``lifecycle/`` under the
configuration's ``output_result_path`` or ``-o DIR``, all or nothing:
``{instance_id}_block_lifecycle.csv`` (one row per life,
:mod:`litehit_service.optimizer.analysis.lifecycle`) and ``{instance_id}_lifespan.png``
(CDF and histogram of lifespans). Prints the statistics per instance (``--json``: one
JSON object); a progress bar on a terminal; one run line on stderr. Errors as
``litehit optimize``'s: exit 2 for bad input, nothing written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from litehit_service.commands.export_tree import add_analysis_options, analyse, analysis_config

if TYPE_CHECKING:
    from litehit_service.optimizer.analysis.lifecycle import LifeSummary
    from litehit_service.optimizer.analysis.replay import Analysis
    from litehit_service.optimizer.optimize.config import OptimizeConfig

LIFECYCLE_DIR = "lifecycle"
"""The folder of the lifecycle files inside the output folder."""


def register(subparsers: Any) -> None:
    """Add the ``lifecycle`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "lifecycle",
        help="replay a trace (as optimize) and list every block life with its statistics",
        description=(
            "Replay the trace of an optimizer CONFIG.json (as litehit optimize) and write "
            "lifecycle/{instance_id}_block_lifecycle.csv (one row per block life: birth, "
            "death, lifespan, hits) and {instance_id}_lifespan.png; print lifespan "
            "percentiles, the share of lives never hit, revivals, utilisation and deaths. "
            "Errors exit 2 and write nothing."
        ),
    )
    add_analysis_options(p)
    p.add_argument("--json", action="store_true", help="print the statistics as one JSON object")
    p.set_defaults(func=run)


def write_lifecycle(
    args: argparse.Namespace,
    config: OptimizeConfig,
    out_dir: str,
    command: str,
    *,
    reference: bool = False,
    lives: bool = True,
    copies: bool = False,
) -> tuple[Analysis, list[LifeSummary], str]:
    """Replay ``config``'s trace (options from ``args``) in analysis mode and publish
    its files, all or nothing (module docstring): the analysis, each instance's
    :class:`~..optimizer.analysis.lifecycle.LifeSummary` and the folder written.
    ``litehit optimize`` calls it too, with ``reference`` (``--export-lifecycle``: the
    reference's ``{instance_id}_lifecycle.csv`` and values, beside the hit-rate CSVs in
    ``out_dir``, no pictures), ``lives`` False (no lifecycle files) and ``copies`` (the
    fleet's ``global_duplicate_blocks.csv``/``.png`` in ``out_dir``,
    :mod:`~..optimizer.analysis.copies`)."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.offline.outputs import atomic_outputs, new_dirs
    from litehit_service.optimizer.analysis.copies import (
        COPIES_CSV,
        COPIES_PNG,
        CopyCounter,
        copies_figure,
    )
    from litehit_service.optimizer.analysis.lifecycle import LifecycleWriter
    from litehit_service.optimizer.analysis.lifecycle_plot import lifespan_figure
    from litehit_service.optimizer.analysis.replay import instance_infos
    from litehit_service.optimizer.optimize.outputs import PICTURE_DPI

    load_kernels("text")
    infos = instance_infos(config)
    folder = out_dir if reference or not lives else os.path.join(out_dir, LIFECYCLE_DIR)
    name = "{}_lifecycle.csv" if reference else "{}_block_lifecycle.csv"
    csvs = [os.path.join(folder, name.format(i.instance_id)) for i in infos] if lives else []
    pngs = [os.path.join(folder, f"{i.instance_id}_lifespan.png") for i in infos]
    pngs = pngs if lives and not reference else []
    extra = [os.path.join(out_dir, COPIES_CSV), os.path.join(out_dir, COPIES_PNG)]
    extra = extra if copies else []
    with new_dirs([folder]), atomic_outputs([*csvs, *pngs, *extra]) as tmps:
        counter = CopyCounter() if copies else None
        with contextlib.ExitStack() as files:
            handles = [files.enter_context(open(t, "w", encoding="utf-8", newline=""))
                       for t in tmps[: len(csvs)]]  # fmt: skip
            writer = LifecycleWriter(
                infos, handles or [None] * len(infos), reference=reference, copies=counter
            )
            analysis = analyse(args, command, config, writer.on_batch)
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


def run(args: argparse.Namespace) -> int:
    """Run the command (module docstring). Raises on failure (exit code by the CLI)."""
    from litehit_service.offline.outputs import run_line
    from litehit_service.optimizer.analysis.lifecycle import lifecycle_stats, stats_text

    start = time.perf_counter()
    config, out_dir = analysis_config(args, "lifecycle")
    analysis, every, folder = write_lifecycle(args, config, out_dir, "lifecycle")
    stats = [lifecycle_stats(lives) for lives in every]
    if args.json:
        print(json.dumps({"end_time_ns": analysis.end_ns, "instances": stats}, indent=2))
    else:
        print("\n".join(stats_text(s) for s in stats))
    print(
        run_line(
            "lifecycle",
            sum(len(lives.cause) for lives in every),
            "lives",
            f"{len(every)} instances",
            time.perf_counter() - start,
            folder,
        ),
        file=sys.stderr,
    )
    return 0
