"""``litehit export-tree``: each instance's prefix tree after a policy replay.

Replays CONFIG.json (``litehit optimize``'s configuration; positional as for optimize, or
``-c``) in the policy replay's analysis mode and writes, per instance, into
``radix_tree/`` under the configuration's ``output_result_path`` or ``-o DIR``, all or
nothing: ``{instance_id}_radix_tree.json`` (the compressed trie of every path written,
:mod:`litehit_service.optimizer.analysis.tree`), ``{instance_id}_radix_tree.png`` (its top
by gets) and with ``--show-hot-paths`` ``{instance_id}_hot_paths.png`` (the ``--top-k``
most-hit nodes with their ancestors; also printed). Prints one summary line per instance;
a progress bar on a terminal; one run line on stderr. Errors as ``litehit optimize``'s:
exit 2 for bad input, nothing written.

The options every analysis command shares (:func:`add_analysis_options`), its
configuration (:func:`analysis_config`) and its replay (:func:`analyse`) are here;
``litehit lifecycle`` uses them too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from litehit_service.commands import say_plan, say_warnings
from litehit_service.commands.options import (
    add_config,
    add_option,
    add_output_dir,
    add_trace_options,
    config_path,
    positive_int,
    reorder_window_ns,
)

if TYPE_CHECKING:
    from litehit_core.policy_replay import Replayer
    from litehit_service.optimizer.analysis.replay import Analysis
    from litehit_service.optimizer.optimize.config import OptimizeConfig
    from litehit_service.optimizer.optimize.stream import Fed

ANALYSIS_MB_PER_S = 30.0
"""What an analysis replay streams on a 2-core machine, in MB/s of JSONL (for the plan
line; bench/README.md: the 200x run)."""
TREE_DIR = "radix_tree"
"""The folder of the tree files inside the output folder."""


def register(subparsers: Any) -> None:
    """Add the ``export-tree`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "export-tree",
        help="replay a trace (as optimize) and export each instance's prefix tree",
        description=(
            "Replay the trace of an optimizer CONFIG.json (as litehit optimize) and write "
            "radix_tree/{instance_id}_radix_tree.json (the compressed trie of every path "
            "written, with cached blocks at the end and gets per node) and a picture of "
            "its top. Errors exit 2 and write nothing."
        ),
    )
    add_analysis_options(p)
    p.add_argument(
        "--show-hot-paths",
        action="store_true",
        help="also print the --top-k most-hit nodes with their ancestor chains and draw "
        "them in {instance_id}_hot_paths.png",
    )
    add_option(
        p,
        "--top-k",
        aliases=("--hot-nodes",),
        type=positive_int,
        default=10,
        metavar="K",
        help="hot nodes shown by --show-hot-paths (default 10)",
    )
    p.add_argument(
        "--show-blocks",
        action="store_true",
        help="with the hot paths, print each one's block keys, root first (the first "
        "--max-blocks of them)",
    )
    p.add_argument(
        "--max-blocks",
        type=positive_int,
        default=10,
        metavar="N",
        help="block keys printed per hot path by --show-blocks (default 10)",
    )
    p.add_argument(
        "--stats-only",
        action="store_true",
        help="print the statistics (and hot paths) and write the tree JSON, without the pictures",
    )
    p.add_argument(
        "--layout",
        default=None,
        metavar="NAME",
        help="accepted for the reference's command lines and not acted on: the picture "
        "lays out its top itself (default: none)",
    )
    p.add_argument(
        "--node-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="accepted for the reference's command lines and not acted on: boxes are "
        "sized by their text (default: none)",
    )
    p.add_argument(
        "--counts-only",
        action="store_true",
        help="write each node's total_blocks and cached_blocks as counts, not as lists of "
        "block keys (the file stays small on traces of millions of blocks; not the "
        "reference's shape; default: key lists)",
    )
    p.set_defaults(func=run)


def add_analysis_options(p: argparse.ArgumentParser) -> None:
    """The configuration (positional ``CONFIG.json`` or ``-c``), ``-o``, ``--trace-format``,
    ``--instance`` and ``--max-line-bytes``, as ``litehit optimize`` takes them."""
    add_config(p, "optimizer")
    add_output_dir(p)
    add_trace_options(p)


def analysis_config(args: argparse.Namespace, command: str) -> tuple[OptimizeConfig, str]:
    """The configuration of ``args`` (checked) and the output folder; the plan line of a
    long run on stderr. Raises as ``litehit optimize`` does (exit 2 for bad input)."""
    from litehit_service.optimizer.optimize.config import load_optimize_config

    config = load_optimize_config(config_path(args))
    say_warnings(config.warnings)
    out_dir = args.output_dir or config.output_result_path
    say_plan(command, config.trace_file_path, ANALYSIS_MB_PER_S, out_dir)
    return config, out_dir


def analyse(
    args: argparse.Namespace,
    command: str,
    config: OptimizeConfig,
    on_batch: Callable[[Replayer, Fed], object] | None = None,
) -> Analysis:
    """Replay the trace of ``config`` (options from ``args``), streamed, in analysis mode
    (progress bar on a terminal; ``on_batch`` after each batch, as
    :func:`~litehit_service.optimizer.analysis.replay.run_analysis` calls it). Raises as
    ``litehit optimize`` does (exit 2 for bad input)."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.offline.outputs import progress_bar
    from litehit_service.optimizer.analysis.replay import run_analysis
    from litehit_service.optimizer.optimize.trace import open_trace_batches

    routing, batches, _ = open_trace_batches(
        config,
        trace_format=args.trace_format,
        instance=args.instance,
        max_line_bytes=args.max_line_bytes,
    )
    load_kernels("policy-replay")  # a compile is announced, and done before the bar
    with progress_bar(batches.total, batches.unit, command) as advance:
        return run_analysis(config, routing, batches, window_ns=reorder_window_ns(args),
                            on_batch=on_batch, progress=advance)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run the command (module docstring). Raises on failure (exit code by the CLI)."""
    from litehit_service.offline.outputs import publish_files, run_line
    from litehit_service.optimizer.analysis.tree import (
        PathHits,
        build_trees,
        hot_paths_text,
        tree_json,
        tree_summary,
    )
    from litehit_service.optimizer.analysis.tree_plot import hot_paths_figure, tree_figure

    start = time.perf_counter()
    config, out_dir = analysis_config(args, "export-tree")
    hits = PathHits()
    analysis = analyse(args, "export-tree", config, hits.add)
    trees = build_trees(analysis, hits, with_keys=not args.counts_only or args.show_blocks)
    texts = []
    figures = []
    for tree in trees:
        name = tree.info.instance_id
        shown = tree.without_keys() if args.counts_only else tree
        texts.append((os.path.join(TREE_DIR, f"{name}_radix_tree.json"),
                      tree_json(shown, end_ns=analysis.end_ns)))  # fmt: skip
        if args.stats_only:
            continue
        figures.append((os.path.join(TREE_DIR, f"{name}_radix_tree.png"), tree_figure(tree)))
        if args.show_hot_paths:
            figures.append(
                (os.path.join(TREE_DIR, f"{name}_hot_paths.png"),
                 hot_paths_figure(tree, args.top_k))
            )  # fmt: skip
    publish_files(out_dir, texts, figures)
    for tree in trees:
        print(tree_summary(tree))
        if args.show_hot_paths or args.show_blocks:
            print(hot_paths_text(tree, args.top_k, args.max_blocks if args.show_blocks else 0))
    print(
        run_line(
            "export-tree",
            sum(t.size for t in trees),
            "nodes",
            f"{len(trees)} instances",
            time.perf_counter() - start,
            os.path.join(out_dir, TREE_DIR),
        ),
        file=sys.stderr,
    )
    return 0
