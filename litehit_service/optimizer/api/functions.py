"""The optimizer's tools from Python: :func:`optimize` and :func:`tradeoff` as tables.

``litehit optimize`` and ``litehit tradeoff`` without the command line and, unless asked,
without files: the results come back as pyarrow Tables (``.to_pandas()`` when pandas is
installed, ``polars.from_arrow`` likewise)::

    from litehit_service.optimizer.api import optimize, tradeoff

    result = optimize("policy.json")           # a path, a dict (the JSON) or a loaded config
    result.summary                             # one row per instance: reads, hit rate, ...
    result["conv"]                             # the per-read table of instance "conv"
    curve = tradeoff("policy.json", num_points=10)

The replay, the tables and the files are the commands' own (:mod:`..optimize.run`,
:func:`~..optimize.tables.arrow_table`, :func:`~..optimize.outputs.write_outputs`,
:func:`~..tradeoff.sweep.run_tradeoff`, :func:`~..tradeoff.files.summary_rows`), so a
number here is the number the command prints and writes. The reference optimizer's
objects and verbs (``OptimizerConfigLoader``, ``OptimizerManager``, ...) are
:mod:`.reference`'s, on the same functions.

Errors: a bad configuration, trace or argument raises
:class:`~litehit_core.LocatedError` (``path:line: field: reason``, every problem of a
configuration at once, exactly the text the command prints) or another
:class:`~litehit_core.InvalidRequestError` (a ``ValueError``), raised from this module
(the frames of the code that found it are dropped: the message says where the input is
wrong). Configuration warnings (a zero quota, a cache that can grow without bound) are
issued with :func:`warnings.warn` (``UserWarning``), one per line the command prints.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, Union

from litehit_core import DEFAULT_MAX_LINE_BYTES, InvalidRequestError
from litehit_service.optimizer.optimize.config import (
    OptimizeConfig,
    load_optimize_config,
    optimize_config_from_dict,
)
from litehit_service.optimizer.optimize.run import InstanceResult
from litehit_service.optimizer.optimize.run import OptimizeResult as ReplayRun

if TYPE_CHECKING:
    import pyarrow as pa

    from litehit_service.optimizer.analysis.lifecycle_files import AnalysisFiles, OnBatch
    from litehit_service.optimizer.analysis.replay import Analysis
    from litehit_service.optimizer.optimize.trace import LoadedTrace

__all__ = [
    "DEFAULT_REORDER_WINDOW_MS",
    "ConfigLike",
    "OptimizeResult",
    "TraceOptions",
    "analysis_replay",
    "as_config",
    "input_errors",
    "optimize",
    "replay_config",
    "say_warnings",
    "summary_table",
    "tradeoff",
]

DEFAULT_REORDER_WINDOW_MS = 1000
"""How far out of time order a trace streamed in analysis mode may be (ms), as the
commands' ``--reorder-window-ms`` default."""

ConfigLike = Union[str, "os.PathLike[str]", Mapping[str, Any], OptimizeConfig, Any]
"""What :func:`as_config` takes: a path to the JSON configuration, the JSON object as a
dict, a checked :class:`~..optimize.config.OptimizeConfig`, or an object whose
``optimize_config`` is one (the reference loader's ``config()``)."""

F = TypeVar("F", bound=Callable[..., Any])


def input_errors(fn: F) -> F:
    """Decorate a public function: an :class:`~litehit_core.InvalidRequestError` (bad
    configuration, trace or argument) is raised again from here, without the frames of the
    code that found it (its message names the place in the input)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InvalidRequestError as exc:
            raise exc.with_traceback(None) from None

    return wrapper  # type: ignore[return-value]


def as_config(
    config_or_path: ConfigLike, *, base_dir: str | os.PathLike[str] = "."
) -> OptimizeConfig:
    """The checked configuration of ``config_or_path`` (:data:`ConfigLike`). A dict's
    relative paths are taken from ``base_dir`` (default: the working folder); a file's from
    its folder, as the commands do. LocatedError (``ConfigErrors``: every problem at once)
    for a bad configuration; TypeError for anything else. O(configuration size)."""
    if isinstance(config_or_path, OptimizeConfig):
        return config_or_path
    inner = getattr(config_or_path, "optimize_config", None)
    if isinstance(inner, OptimizeConfig):
        return inner
    if isinstance(config_or_path, (str, os.PathLike)):
        return load_optimize_config(config_or_path)
    if isinstance(config_or_path, Mapping):
        return optimize_config_from_dict(dict(config_or_path), base_dir=base_dir)
    raise TypeError(
        "config_or_path must be a path to an optimizer configuration (JSON), its object as "
        "a dict, or OptimizerConfigLoader().config(); got "
        f"{type(config_or_path).__name__}"
    )


def say_warnings(config: OptimizeConfig, stacklevel: int = 4) -> None:
    """Issue the configuration's warnings (the lines the commands print on stderr) with
    :func:`warnings.warn`; ``stacklevel`` 4 names the caller of a public function
    decorated with :func:`input_errors`."""
    for line in config.warnings:
        warnings.warn(line.removeprefix("WARNING: "), UserWarning, stacklevel=stacklevel)


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """How the trace is read, as the commands' flags: ``trace_format`` (a registered
    format name; None: detected from the first line), ``instance`` (every record goes to
    it; needed for a trace that names no instance when the configuration has several),
    ``max_line_bytes`` (the longest line accepted) and ``reorder_window_ms`` (how far out
    of time order records may be when the trace is streamed: the analysis replays of the
    tree export and the lifecycle files; a whole-trace replay sorts it all)."""

    trace_format: str | None = None
    instance: str | None = None
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    reorder_window_ms: int = DEFAULT_REORDER_WINDOW_MS

    def check(self) -> None:
        """InvalidRequestError naming a bad option."""
        if isinstance(self.max_line_bytes, bool) or not (
            isinstance(self.max_line_bytes, int) and self.max_line_bytes > 0
        ):
            raise InvalidRequestError(
                f"max_line_bytes: must be an integer > 0, got {self.max_line_bytes!r}"
            )
        if isinstance(self.reorder_window_ms, bool) or not (
            isinstance(self.reorder_window_ms, int) and self.reorder_window_ms >= 0
        ):
            raise InvalidRequestError(
                f"reorder_window_ms: must be an integer >= 0, got {self.reorder_window_ms!r}"
            )

    def load(self, config: OptimizeConfig) -> LoadedTrace:
        """``config``'s whole trace, read, checked and sorted
        (:func:`~..optimize.trace.load_trace`). O(trace); ~17 bytes per key held."""
        from litehit_service.optimizer.optimize.trace import load_trace

        self.check()
        return load_trace(config, trace_format=self.trace_format, instance=self.instance,
                          max_line_bytes=self.max_line_bytes)  # fmt: skip


def replay_config(config: OptimizeConfig, trace: LoadedTrace, workers: int = 1) -> ReplayRun:
    """``litehit optimize``'s replay of ``trace`` under ``config``: one replay in this
    process (``workers`` 1) or the groups in ``workers`` forked parts, merged (the same
    result). O(keys) plus the evictions."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.optimizer.optimize.parallel import run_parallel

    if isinstance(workers, bool) or not (isinstance(workers, int) and workers >= 1):
        raise InvalidRequestError(f"max_workers: must be an integer >= 1, got {workers!r}")
    load_kernels("policy-replay")  # before any fork: the workers inherit them
    return run_parallel(config, trace, workers=workers)


def analysis_replay(
    config: OptimizeConfig, options: TraceOptions, on_batch: OnBatch | None = None
) -> Analysis:
    """The trace of ``config`` replayed in analysis mode, streamed (every path written
    kept: the tree export and the lifecycle files read it), ``on_batch`` after each batch,
    as ``litehit export-tree`` and ``litehit lifecycle`` run it. O(keys); memory O(paths
    written)."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.optimizer.analysis.replay import run_analysis
    from litehit_service.optimizer.optimize.trace import open_trace_batches

    options.check()
    routing, batches, _ = open_trace_batches(
        config,
        trace_format=options.trace_format,
        instance=options.instance,
        max_line_bytes=options.max_line_bytes,
    )
    load_kernels("policy-replay")
    return run_analysis(config, routing, batches, window_ns=options.reorder_window_ms * 1_000_000,
                        on_batch=on_batch)  # fmt: skip


_SUMMARY_COLUMNS = (
    ("instance_id", "string"),
    ("group_name", "string"),
    ("eviction_policy_type", "string"),
    ("reads", "int64"),
    ("input_tokens", "int64"),
    ("hit_tokens", "int64"),
    ("hit_rate", "float64"),
    ("capacity_blocks", "int64"),
    ("peak_cached_blocks", "int64"),
    ("cached_blocks", "int64"),
    ("evicted_blocks", "int64"),
    ("expired_blocks", "int64"),
    ("written_blocks", "int64"),
)


def summary_table(instances: Sequence[InstanceResult]) -> pa.Table:
    """One row per instance, the fields of ``litehit optimize --json``'s ``instances``
    (``capacity_blocks`` null: infinite quota; tiered runs add ``tiers``: per tier its
    name, hit tokens, cached and evicted blocks). O(instances)."""
    import pyarrow as pa

    rows = [r.summary() for r in instances]
    table = pa.table(
        {name: pa.array([r[name] for r in rows], type=kind) for name, kind in _SUMMARY_COLUMNS}
    )
    if any("tiers" in r for r in rows):
        table = table.append_column("tiers", pa.array([r.get("tiers", []) for r in rows]))
    return table


@dataclass(frozen=True)
class OptimizeResult:
    """What :func:`optimize` returns.

    - ``tables``: instance id -> its per-read pyarrow Table (configuration order): the
      columns of ``{instance_id}_hit_rates.csv`` by the same names (spec §6; int64, the
      rates float64 and unrounded, as ``--output-format parquet`` writes them), one row
      per read in replay order; ``result[instance_id]`` is the same table;
    - ``summary``: one row per instance (:func:`summary_table`);
    - ``instances``: the replay's :class:`~..optimize.run.InstanceResult` per instance;
    - ``replay_seconds``, ``memory_bytes`` (the replay's arrays at the end);
    - ``files``: the paths written (empty without ``output_dir``).
    """

    tables: dict[str, pa.Table]
    summary: pa.Table
    instances: tuple[InstanceResult, ...]
    replay_seconds: float
    memory_bytes: int
    files: tuple[str, ...] = ()

    def __getitem__(self, instance_id: str) -> pa.Table:
        return self.tables[instance_id]

    @property
    def hit_rate(self) -> float:
        """Hit tokens / input tokens over every read of every instance (0 without any)."""
        tokens = sum(r.rows.total_input_tokens for r in self.instances)
        return sum(r.rows.hit_tokens for r in self.instances) / tokens if tokens else 0.0


@input_errors
def optimize(
    config_or_path: ConfigLike,
    *,
    output_dir: str | os.PathLike[str] | None = None,
    draw_chart: bool = False,
    fast_chart: bool = False,
    output_format: str = "csv",
    export_lifecycle: bool = False,
    max_workers: int = 1,
    trace_format: str | None = None,
    instance: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    reorder_window_ms: int = DEFAULT_REORDER_WINDOW_MS,
) -> OptimizeResult:
    """Replay the configuration's trace under its policies and quotas (``litehit
    optimize``) and return the per-read tables and the summary (:class:`OptimizeResult`).

    Nothing is written unless ``output_dir`` is given; then exactly the files of
    ``litehit optimize -c CONFIG -o output_dir`` with the same flags (``draw_chart``,
    ``fast_chart``, ``output_format`` ``"csv"``/``"parquet"``, ``export_lifecycle``: the
    reference's ``{instance_id}_lifecycle.csv`` too; these two and a chart of several
    instances, its ``global_duplicate_blocks`` files, take one more replay in analysis
    mode), the tables and the charts all or nothing, then the analysis files. ``max_workers``
    > 1 replays the groups in that many forked processes (the same numbers); the trace
    options are :class:`TraceOptions`'. Cost: the replay, O(keys) plus evictions; memory:
    the decoded trace (as :func:`~..optimize.trace.load_trace` holds it), the replay's
    rows and the tables (24 eight-byte columns a read, more when tiered).
    """
    from litehit_service.optimizer.analysis.lifecycle_files import optimize_analysis
    from litehit_service.optimizer.optimize.tables import arrow_table

    config = as_config(config_or_path)
    say_warnings(config)
    if output_format not in ("csv", "parquet"):
        raise InvalidRequestError(
            f"output_format: must be 'csv' or 'parquet', got {output_format!r}"
        )
    if (draw_chart or fast_chart or export_lifecycle) and output_dir is None:
        raise InvalidRequestError(
            "draw_chart, fast_chart and export_lifecycle write files: give output_dir"
        )
    options = TraceOptions(trace_format, instance, max_line_bytes, reorder_window_ms)
    run = replay_config(config, options.load(config), max_workers)
    files: list[str] = []
    if output_dir is not None:
        chart = draw_chart or fast_chart
        files += write_run(run, os.fspath(output_dir), draw_chart=chart,
                           fast_chart=fast_chart, output_format=output_format)  # fmt: skip
        more = optimize_analysis(config, export_lifecycle=export_lifecycle, draw_chart=chart)
        if more is not None:
            files += write_analysis_files(config, os.fspath(output_dir), options, more)[1]
    return OptimizeResult(
        tables={r.instance_id: arrow_table(r.rows, r.tier_names) for r in run.instances},  # type: ignore[arg-type]
        summary=summary_table(run.instances),
        instances=run.instances,
        replay_seconds=run.replay_seconds,
        memory_bytes=run.memory_bytes,
        files=tuple(files),
    )


def write_run(run: ReplayRun, out_dir: str, **flags: Any) -> list[str]:
    """``litehit optimize``'s per-read tables (and pictures when ``flags`` ask) of ``run``
    into ``out_dir``, all or nothing (:func:`~..optimize.outputs.write_outputs`); the paths.
    O(reads)."""
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.optimizer.optimize.outputs import write_outputs

    load_kernels("text")
    flags.setdefault("draw_chart", False)
    return write_outputs(run, out_dir, **flags)


def write_analysis_files(
    config: OptimizeConfig,
    out_dir: str,
    options: TraceOptions,
    files: AnalysisFiles,
    on_batch: OnBatch | None = None,
) -> tuple[Analysis, list[str]]:
    """The analysis replay's ``files`` under ``out_dir`` as ``litehit optimize`` writes them
    (:func:`~..analysis.lifecycle_files.publish_lifecycle`; ``on_batch`` also hears the
    replay's batches): that replay and the paths written. O(keys + lives)."""
    from litehit_service.optimizer.analysis.lifecycle_files import (
        lifecycle_paths,
        publish_lifecycle,
    )

    def analyse(writer_batch: OnBatch) -> Analysis:
        def both(replayer: Any, fed: Any) -> None:
            writer_batch(replayer, fed)
            if on_batch is not None:
                on_batch(replayer, fed)

        return analysis_replay(config, options, both)

    analysis, _, _ = publish_lifecycle(config, out_dir, analyse, files)
    _, csvs, pngs, extra = lifecycle_paths(analysis.instances, out_dir, files)
    return analysis, [*csvs, *pngs, *extra]


_TRADEOFF_COLUMNS = (
    ("policy", "string"),
    ("kind", "string"),
    ("capacity_bytes", "int64"),
    ("capacity_gib", "float64"),
    ("hit_tokens", "int64"),
    ("input_tokens", "int64"),
    ("hit_rate", "float64"),
    ("fraction_of_theoretical", "float64"),
    ("method", "string"),
    ("plotted", "bool"),
    ("bracket_low_bytes", "int64"),
)


@input_errors
def tradeoff(
    config_or_path: ConfigLike,
    *,
    policies: Sequence[str] | None = None,
    num_points: int = 30,
    min_capacity_ratio: float = 1e-4,
    max_workers: int = 1,
    hit_rate_type: str = "total",
    trace_format: str | None = None,
    instance: str | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> pa.Table:
    """Hit rate against capacity (``litehit tradeoff``, spec §8), one policy replay per
    capacity, returned as a pyarrow Table with the columns of
    ``pareto/pareto_curve_total.csv``: per policy (``policies``: each instance's policy
    replaced by each; None: the configuration's own) a ``theoretical`` row (infinite
    quota: ``capacity_bytes`` is the peak cached bytes), the ``point`` rows in ascending
    capacity (``num_points`` capacities ``M e^x``, x evenly spaced over [-8, 0], none below
    ``min_capacity_ratio`` M; stopped after the first reaching 99 % of the theoretical;
    ``plotted``: rising, so drawn), the bisection's ``refine`` rows and the ``p95``/``p99``
    marks (``method`` ``bisection``, ``exact``, ``trivial`` or ``unreached``). Capacities in
    bytes (``capacity_gib`` = bytes / 2^30), rates hit tokens / input tokens, unrounded.
    ``hit_rate_type`` ``"local"`` or ``"remote"``: the rows of
    ``pareto_curve_{type}.csv`` instead, the hit tokens of the blocks the reads' masks mark
    local (or not) at the same capacities, without the marks. Writes nothing.
    ``max_workers`` > 1 replays in forked processes (the same rows). Cost: (1 + points +
    ~10) replays per policy; a tiered configuration is refused.
    """
    import pyarrow as pa

    from litehit_core.engine import POLICIES
    from litehit_service.offline.kernels import load_kernels
    from litehit_service.optimizer.tradeoff.files import HIT_RATE_TYPES, summary_rows
    from litehit_service.optimizer.tradeoff.points import GIB
    from litehit_service.optimizer.tradeoff.sweep import (
        TradeoffOptions,
        loading_config,
        refuse_tiered,
        run_tradeoff,
        sweep_configs,
    )

    config = as_config(config_or_path)
    say_warnings(config)
    refuse_tiered(config)
    if isinstance(policies, str):
        policies = [policies]
    for name in policies or ():
        if name not in POLICIES:
            raise InvalidRequestError(f"policies: must be among {list(POLICIES)}, got {name!r}")
    if isinstance(num_points, bool) or not (isinstance(num_points, int) and num_points >= 1):
        raise InvalidRequestError(f"num_points: must be an integer >= 1, got {num_points!r}")
    if not 0 <= min_capacity_ratio <= 1:  # False for NaN
        raise InvalidRequestError(
            f"min_capacity_ratio: must be a number in [0, 1], got {min_capacity_ratio!r}"
        )
    if isinstance(max_workers, bool) or not (isinstance(max_workers, int) and max_workers >= 1):
        raise InvalidRequestError(f"max_workers: must be an integer >= 1, got {max_workers!r}")
    if hit_rate_type not in HIT_RATE_TYPES:
        raise InvalidRequestError(
            f"hit_rate_type: must be one of {list(HIT_RATE_TYPES)}, got {hit_rate_type!r}"
        )
    chosen = tuple(policies) if policies else None
    variants = sweep_configs(config, chosen)
    trace = TraceOptions(trace_format, instance, max_line_bytes).load(
        loading_config([cfg for _, cfg in variants])
    )
    load_kernels("policy-replay")
    options = TradeoffOptions(
        policies=chosen,
        num_points=num_points,
        min_capacity_ratio=min_capacity_ratio,
        workers=max_workers,
    )
    rows = summary_rows(run_tradeoff(config, trace, options), hit_rate_type)
    theoretical = {r.policy: r.hit_tokens or 0 for r in rows if r.kind == "theoretical"}

    def ratio(num: int | None, den: int) -> float | None:
        return None if num is None else (num / den if den else 0.0)

    values: dict[str, list[Any]] = {name: [] for name, _ in _TRADEOFF_COLUMNS}
    for r in rows:
        cap = r.capacity_bytes
        for name, value in (
            ("policy", r.policy),
            ("kind", r.kind),
            ("capacity_bytes", cap),
            ("capacity_gib", None if cap is None or cap < 0 else cap / GIB),
            ("hit_tokens", r.hit_tokens),
            ("input_tokens", r.input_tokens),
            ("hit_rate", ratio(r.hit_tokens, r.input_tokens)),
            ("fraction_of_theoretical", ratio(r.hit_tokens, theoretical.get(r.policy, 0))),
            ("method", r.method),
            ("plotted", r.plotted),
            ("bracket_low_bytes", r.low_bytes),
        ):
            values[name].append(value)
    return pa.table({name: pa.array(values[name], type=kind) for name, kind in _TRADEOFF_COLUMNS})
