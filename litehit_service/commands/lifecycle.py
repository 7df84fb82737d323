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
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from litehit_service.commands.export_tree import add_analysis_options, analyse, analysis_config

if TYPE_CHECKING:
    from litehit_service.optimizer.analysis.lifecycle import LifeSummary
    from litehit_service.optimizer.analysis.replay import Analysis
    from litehit_service.optimizer.optimize.config import OptimizeConfig


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
    its files, all or nothing
    (:func:`~litehit_service.optimizer.analysis.lifecycle_files.publish_lifecycle`): the
    analysis, each instance's :class:`~..optimizer.analysis.lifecycle.LifeSummary` and the
    folder written. ``litehit optimize`` calls it too, with ``reference``
    (``--export-lifecycle``: the reference's ``{instance_id}_lifecycle.csv`` and values,
    beside the hit-rate CSVs in ``out_dir``, no pictures), ``lives`` False (no lifecycle
    files) and ``copies`` (the fleet's ``global_duplicate_blocks.csv``/``.png`` in
    ``out_dir``, :mod:`~..optimizer.analysis.copies`)."""
    from litehit_service.optimizer.analysis.lifecycle_files import (
        AnalysisFiles,
        publish_lifecycle,
    )

    return publish_lifecycle(
        config,
        out_dir,
        lambda on_batch: analyse(args, command, config, on_batch),
        AnalysisFiles(reference=reference, lives=lives, copies=copies),
    )


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
