"""``litehit tradeoff``: hit rate against capacity, one policy replay per capacity (spec §8).

Reads an optimizer configuration (positional or ``-c CONFIG.json``), decodes its trace once
(or, for a trace of ``PLAN_BYTES`` of JSONL text or more under the local executor, lets
every replay read it in batches in its worker: :func:`streams`,
:mod:`~litehit_service.optimizer.tradeoff.stream`; records at most ``--reorder-window-ms``
out of order), replays it at infinite quota (the theoretical hit rate and peak cached
bytes ``M``), then at up to ``--num-points`` capacities ``M * e^x`` (x over [-8, 0]) in
ascending order, stopping after the first reaching 99 % of the theoretical, in parallel
(``--max-workers`` processes, or Ray tasks with ``--executor ray``; the same numbers for
any workers), and refines the 95 % and 99 % capacities by bisection to within 1 %. Under
spec §7b the ``lru`` curve comes from LiteHit's exact pass instead. Writes under ``pareto/`` of the
configuration's ``output_result_path`` (or ``-o DIR``), all or nothing: one CSV per
capacity, the curve's CSV, LiteHit's reference curves and the pictures
(:mod:`litehit_service.optimizer.tradeoff.files`). ``--skip-run`` re-plots from that
curve CSV. Prints ``Drop descending Pareto point ...`` per point left off the plot, then
a summary (``--json``: one JSON object); a progress bar on a terminal, one run line on
stderr. Bad flags or input exit 2 naming the value; a tiered configuration is refused.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from typing import Any

from litehit_service.commands import UsageError, say_warnings
from litehit_service.commands.options import (
    add_config,
    add_max_workers,
    add_output_dir,
    add_sample_options,
    add_trace_options,
    config_path,
    positive_int,
    reorder_window_ns,
)

HIT_RATE_CHOICES = ("total", "local", "remote", "all")
"""What ``--hit-rate-type`` accepts (``all``: the three curves)."""


def register(subparsers: Any) -> None:
    """Add the ``tradeoff`` subcommand to ``subparsers``."""
    p = subparsers.add_parser(
        "tradeoff",
        help="hit rate against capacity: one policy replay per capacity, the 95%%/99%% "
        "capacities refined by bisection",
        description=(
            "Sweep the capacity of an optimizer CONFIG.json (every group's quota scaled): "
            "a warm-up at infinite quota, then up to --num-points capacities in ascending "
            "order until one reaches 99% of the theoretical hit rate, replayed in "
            "parallel; writes pareto/ CSVs and pictures. Errors exit 2 and write nothing."
        ),
    )
    add_config(p, "optimizer")
    p.add_argument(
        "--eviction-policies",
        nargs="+",
        metavar="POLICY",
        type=_policy,
        help="sweep once per policy, every instance's eviction_policy_type replaced "
        "(default: the configuration's own)",
    )
    p.add_argument(
        "--num-points",
        type=positive_int,
        default=30,
        metavar="N",
        help="capacities of the sweep (default 30)",
    )
    p.add_argument(
        "--min-capacity-ratio",
        type=_ratio,
        default=1e-4,
        metavar="R",
        help="drop capacities below R x the peak cached bytes (a number in [0, 1]; default 1e-4)",
    )
    p.add_argument(
        "--hit-rate-type",
        type=_hit_rate_type,
        default="total",
        metavar="TYPE",
        help="the curves drawn: total (hit tokens / input tokens over every instance; the "
        "default), local or remote (the hit tokens of blocks the request's block_mask marks "
        "local, or the others, over the same input tokens), or all three; each writes "
        "pareto/pareto_curve_{type}.csv/.png (and multi_policy_{type}.png) from the same "
        "replays; the sweep, its stop and the 95/99%% marks always follow total, whose "
        "files are always written",
    )
    add_max_workers(
        p,
        "replays at once (default: the CPUs this process may use; the numbers are the same "
        "for any N)",
        type=positive_int,
        default=None,
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="run the replays in local processes (default) or as Ray tasks (needs pip "
        "install '.[ray]'; the same numbers)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --executor ray: the Ray cluster, e.g. ray://head:10001 or auto (default: "
        "start a local Ray for this run)",
    )
    p.add_argument(
        "--skip-run",
        action="store_true",
        help="re-plot from the pareto/ CSVs of an earlier run, replaying nothing",
    )
    p.add_argument(
        "--plot-title",
        metavar="TITLE",
        help="the pictures' title (default: the hit rate type and the trace's file name)",
    )
    for name, what in (("--x-min", "capacity (GiB)"), ("--x-max", "capacity (GiB)"),
                       ("--y-min", "hit rate (%%)"), ("--y-max", "hit rate (%%)")):  # fmt: skip
        p.add_argument(
            name,
            type=float,
            metavar="V",
            help=f"the curves' axis limit, {what} (the reference's flag; default: fitted)",
        )
    p.add_argument(
        "--warmup-capacity",
        type=float,
        metavar="GIB",
        help="accepted for the reference's command lines and not acted on: the warm-up "
        "replays at infinite quota, which no capacity bounds (default: none)",
    )
    p.add_argument(
        "--save-csv",
        action="store_true",
        help="accepted for the reference's command lines: the per-point CSVs under "
        "pareto/csv_results/ are always written",
    )
    p.add_argument(
        "--plot-timeseries",
        action="store_true",
        help="accepted for the reference's command lines and not acted on: a capacity's "
        "timeseries chart is litehit optimize --draw-chart with that quota",
    )
    p.add_argument(
        "--plot-capacity",
        type=float,
        nargs="+",
        metavar="GIB",
        help="accepted with --plot-timeseries and not acted on (default: none)",
    )
    add_output_dir(p)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    add_trace_options(p)  # --reorder-window-ms: a large trace is streamed
    add_sample_options(p)
    p.set_defaults(func=run)


def _policy(name: str) -> str:
    from litehit_core.engine import POLICIES

    if name not in POLICIES:
        raise argparse.ArgumentTypeError(f"must be one of {list(POLICIES)}, got {name!r}")
    return name


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:  # False for NaN
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}")
    return value


def _hit_rate_type(text: str) -> str:
    if text not in HIT_RATE_CHOICES:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(HIT_RATE_CHOICES)} (total: hit tokens / input tokens "
            f"over every instance), got {text!r}"
        )
    return text


def _types(args: argparse.Namespace) -> list[str]:
    """The curves to write: total always (the sweep's own), then the asked ones."""
    asked = ("local", "remote") if args.hit_rate_type == "all" else (args.hit_rate_type,)
    return list(dict.fromkeys(("total", *asked)))


def _title(args: argparse.Namespace, config: Any, kind: str) -> str:
    if args.plot_title:
        return args.plot_title if kind == "total" else f"{args.plot_title} ({kind})"
    return f"Hit rate vs capacity ({kind}): {os.path.basename(config.trace_file_path)}"


def run(args: argparse.Namespace) -> int:
    """Run the command (module docstring). Raises on failure (exit code by the CLI)."""
    from litehit_service.offline.outputs import run_line
    from litehit_service.optimizer.optimize.config import load_optimize_config
    from litehit_service.optimizer.tradeoff.sweep import refuse_tiered

    start = time.perf_counter()
    path = config_path(args)
    if args.plot_timeseries or args.plot_capacity or args.warmup_capacity is not None:
        print(
            "tradeoff: note: --warmup-capacity, --plot-timeseries and --plot-capacity are "
            "accepted and not acted on (see litehit tradeoff --help)",
            file=sys.stderr,
        )
    if args.ray_address is not None and args.executor != "ray":
        raise UsageError("--ray-address needs --executor ray")
    if args.executor == "ray" and importlib.util.find_spec("ray") is None:
        from litehit_service.litehit.lanes import RAY_MISSING

        raise UsageError(RAY_MISSING)
    config = load_optimize_config(path)
    say_warnings(config.warnings)
    refuse_tiered(config)
    out_dir = args.output_dir or config.output_result_path
    titles = {kind: _title(args, config, kind) for kind in _types(args)}
    if args.sample_rate is not None:
        return _run_sampled(args, config, out_dir, start)
    if args.sample_seeds != 1:
        raise UsageError(f"--sample-seeds {args.sample_seeds} needs --sample-rate")
    if args.skip_run:
        rows, result, files = _replot(args, out_dir, titles)
    else:
        rows, result, files = _sweep(args, config, out_dir, titles)
    extra = {"output_dir": out_dir, "hit_rate_type": args.hit_rate_type, "files": files}
    if args.json:
        from litehit_service.optimizer.tradeoff.report import summary_json

        print(summary_json(rows, result, extra))
    else:
        from litehit_service.optimizer.tradeoff.report import summary_text

        print(summary_text(rows, result))
    points = sum(1 for r in rows if r.kind == "point")
    policies = len({r.policy for r in rows})
    print(
        run_line("tradeoff", points, "points", f"{policies} policies",
                 time.perf_counter() - start, out_dir),
        file=sys.stderr,
    )  # fmt: skip
    return 0


def _run_sampled(args: argparse.Namespace, config: Any, out_dir: str, start: float) -> int:
    """``--sample-rate``: the curve estimated from samples of the trace, read once
    (:mod:`litehit_service.optimizer.tradeoff.sampled`)."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.offline.outputs import run_line
    from litehit_service.optimizer.sampling.trace import SampleOptions, load_sampled
    from litehit_service.optimizer.tradeoff.files import write_files
    from litehit_service.optimizer.tradeoff.pool import default_workers
    from litehit_service.optimizer.tradeoff.sampled import (
        SAMPLED_CSV,
        SAMPLED_MULTI_PNG,
        SAMPLED_PNG,
        run_sampled_tradeoff,
        sampled_csv,
        sampled_json,
        sampled_text,
    )
    from litehit_service.optimizer.tradeoff.sampled_plot import (
        sampled_figure,
        sampled_multi_figure,
    )
    from litehit_service.optimizer.tradeoff.sweep import (
        TradeoffOptions,
        loading_config,
        sweep_configs,
    )

    if args.skip_run:
        raise UsageError("--skip-run re-plots an exact run's CSVs: not with --sample-rate")
    if args.hit_rate_type != "total":
        raise UsageError("--sample-rate estimates the total hit rate only: not with "
                         f"--hit-rate-type {args.hit_rate_type}")  # fmt: skip
    if args.executor != "local":
        raise UsageError("--sample-rate runs its replays in local processes: not with "
                         "--executor ray")  # fmt: skip
    policies = tuple(args.eviction_policies) if args.eviction_policies else None
    variants = sweep_configs(config, policies)
    sampled = load_sampled(
        loading_config([cfg for _, cfg in variants]),
        SampleOptions(args.sample_rate, args.sample_seeds),
        trace_format=args.trace_format, instance=args.instance,
        max_line_bytes=args.max_line_bytes,
    )  # fmt: skip
    options = TradeoffOptions(
        policies=policies, num_points=args.num_points,
        min_capacity_ratio=args.min_capacity_ratio,
        workers=args.max_workers or default_workers(),
    )  # fmt: skip
    load_kernels("policy-replay")  # before any fork: the workers inherit them
    result = run_sampled_tradeoff(config, sampled, options)
    title = _title(args, config, "total")
    figures = {SAMPLED_PNG: sampled_figure(result, title)}
    if len(result.curves) > 1:
        figures[SAMPLED_MULTI_PNG] = sampled_multi_figure(result, title)
    files = write_files(out_dir, {SAMPLED_CSV: sampled_csv(result)}, figures)
    extra = {"output_dir": out_dir, "hit_rate_type": "total", "files": files}
    print(sampled_json(result, extra) if args.json else sampled_text(result))
    points = sum(len(c.points) for c in result.curves)
    print(
        run_line("tradeoff", points, "points",
                 f"{len(result.curves)} policies, sampled R = {result.rate:g} x "
                 f"{result.seeds} seed(s)", time.perf_counter() - start, out_dir),
        file=sys.stderr,
    )  # fmt: skip
    return 0


def _preload_matplotlib() -> None:
    """Import matplotlib in a thread while the workers replay (~0.5 s off the end of a
    run); called once the workers are forked, so no fork sees the thread."""
    import threading

    def load() -> None:
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401

    threading.Thread(target=load, name="preload-matplotlib", daemon=True).start()


def _print_drops(drops: list[str], as_json: bool) -> None:
    for line in drops:
        print(line, file=sys.stderr if as_json else sys.stdout)


def _replot(
    args: argparse.Namespace, out_dir: str, titles: dict[str, str]
) -> tuple[list, None, list[str]]:
    """Re-draw the pictures of an earlier run from its summary CSVs: the total rows (what
    is printed), None and the files written."""
    from litehit_service.optimizer.tradeoff.files import (
        REFERENCE_CSV,
        SUMMARY_CSV,
        read_reference,
        read_summary,
        summary_csv,
        with_plotted,
        write_files,
    )

    ref_path = os.path.join(out_dir, REFERENCE_CSV)
    refs = read_reference(ref_path) if os.path.exists(ref_path) else []
    every = {}
    for kind in titles:
        rows = with_plotted(read_summary(os.path.join(out_dir, summary_csv(kind))))
        if args.eviction_policies:
            present = list(dict.fromkeys(r.policy for r in rows))
            missing = [p for p in args.eviction_policies if p not in present]
            if missing:
                raise UsageError(
                    f"--eviction-policies {' '.join(missing)}: not in {SUMMARY_CSV} "
                    f"(it holds {', '.join(present) or 'no policy'})"
                )
            wanted = set(args.eviction_policies)
            rows = [r for r in rows if r.policy in wanted]
        every[kind] = rows
    figures, drops = _figures(every, refs, titles, _limits(args))
    files = write_files(out_dir, {}, figures)
    _print_drops(drops, args.json)
    return every["total"], None, files


def _limits(args: argparse.Namespace) -> tuple[float | None, ...]:
    """The axis limits asked for: (x min, x max, y min, y max), None where fitted."""
    return (args.x_min, args.x_max, args.y_min, args.y_max)


def _figures(
    every: dict[str, list], refs: list, titles: dict[str, str], limits: tuple = ()
) -> tuple[dict[str, Any], list[str]]:
    """The pictures of each curve type's rows (LiteHit's exact references on the total
    curve only: they are total hit rates) and the total curve's dropped points."""
    from litehit_service.optimizer.tradeoff.files import curve_png, multi_png
    from litehit_service.optimizer.tradeoff.plot import curve_figure, multi_figure, plot_curves

    figures: dict[str, Any] = {}
    drops: list[str] = []
    for kind, rows in every.items():
        curves, dropped = plot_curves(rows, refs if kind == "total" else [])
        drops += dropped if kind == "total" else []
        figures[curve_png(kind)] = curve_figure(curves, titles[kind], kind, limits)
        if len(curves) > 1:
            figures[multi_png(kind)] = multi_figure(curves, titles[kind], kind)
    return figures, drops


def streams(args: argparse.Namespace, config: Any) -> bool:
    """Whether the replays stream the trace (each task reads it in batches in its worker,
    :mod:`litehit_service.optimizer.tradeoff.stream`) rather than fork from one decoded
    copy: with the local executor, for a trace of
    :data:`~litehit_service.offline.outputs.PLAN_BYTES` of JSONL text or more (the rule
    ``optimize`` follows; tests move it to force either mode). O(1)."""
    from litehit_service.offline import outputs
    from litehit_service.traces.readers.compressed import text_bytes

    return args.executor == "local" and text_bytes(config.trace_file_path) >= outputs.PLAN_BYTES


def _sweep(
    args: argparse.Namespace, config: Any, out_dir: str, titles: dict[str, str]
) -> tuple[list, Any, list[str]]:
    """Replay the sweep and write its files: the rows, the result and the files written."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.offline.outputs import progress_bar
    from litehit_service.optimizer.optimize.trace import LoadedTrace, load_trace
    from litehit_service.optimizer.tradeoff.files import (
        REFERENCE_CSV,
        point_csv,
        point_file,
        reference_rows,
        reference_text,
        remove_stale,
        rows_text,
        summary_csv,
        summary_rows,
        write_files,
    )
    from litehit_service.optimizer.tradeoff.pool import default_workers
    from litehit_service.optimizer.tradeoff.stream import TraceSource
    from litehit_service.optimizer.tradeoff.sweep import (
        TradeoffOptions,
        loading_config,
        run_tradeoff,
        sweep_configs,
    )

    policies = tuple(args.eviction_policies) if args.eviction_policies else None
    variants = sweep_configs(config, policies)
    trace: LoadedTrace | TraceSource
    if streams(args, config):  # every replay reads the batches itself, in its worker
        trace = TraceSource(str(config.trace_file_path), args.trace_format, args.instance,
                            args.max_line_bytes, reorder_window_ns(args))  # fmt: skip
    else:
        trace = load_trace(
            loading_config([cfg for _, cfg in variants]),
            trace_format=args.trace_format,
            instance=args.instance,
            max_line_bytes=args.max_line_bytes,
        )
    options = TradeoffOptions(
        policies=policies,
        num_points=args.num_points,
        min_capacity_ratio=args.min_capacity_ratio,
        workers=args.max_workers or default_workers(),
        executor=args.executor,
        ray_address=args.ray_address,
    )
    load_kernels("policy-replay")  # before any fork: the workers inherit them
    total = len(variants) * (1 + args.num_points)
    with progress_bar(total, "points", "tradeoff") as advance:
        result = run_tradeoff(
            config, trace, options, progress=advance, workers_started=_preload_matplotlib
        )
    every = {kind: summary_rows(result, kind) for kind in titles}
    refs = reference_rows(result)
    texts: dict[str, str] = {}
    for c in result.curves:
        for point in (c.warmup, *c.points, *c.refine):
            texts[point_file(c.label, point.capacity_bytes)] = point_csv(point)
    for kind, rows in every.items():
        texts[summary_csv(kind)] = rows_text(rows)
    texts[REFERENCE_CSV] = reference_text(refs)
    figures, drops = _figures(every, refs, titles, _limits(args))
    files = write_files(out_dir, texts, figures)
    remove_stale(out_dir, [c.label for c in result.curves], files)
    _print_drops(drops, args.json)
    return every["total"], result, files
