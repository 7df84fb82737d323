"""What ``litehit optimize`` leaves behind: CSVs, the time-series chart, the summary.

All files of a run are published together or not at all
(:func:`~litehit_service.offline.outputs.publish_files`): ``{instance_id}_hit_rates.csv``
per instance in the output folder and, with a chart, ``timeseries/
multi_instance_cache_analysis.png`` -- top: cumulative hit rate per instance over time;
bottom: each read's hit rate (dots) with the token-weighted rate of the last
:data:`WINDOW` reads (line); cached blocks per
instance on a second axis; when some instance is tiered also
``timeseries/per_tier_timeseries.png`` -- top: each tier's cumulative hit rate (the share
of input tokens it served), bottom: the blocks each tier holds. With an aggregate window
of W ns also :data:`AGGREGATE_CSV` and :data:`AGGREGATE_CHART` (:func:`aggregate_windows`:
every instance's reads summed per window). The summary is a fixed-width table on stdout
(or JSON).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from litehit_service.optimizer.optimize.run import OptimizeResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "AGGREGATE_CHART",
    "AGGREGATE_CSV",
    "AGGREGATE_HEADER",
    "CHART",
    "PICTURE_DPI",
    "AggregateWindows",
    "aggregate_csv",
    "aggregate_figure",
    "aggregate_windows",
    "TIER_CHART",
    "csv_name",
    "table_name",
    "picture_figures",
    "picture_names",
    "picture_texts",
    "summary_json",
    "summary_text",
    "window_rate",
    "tier_figure",
    "timeseries_figure",
    "published",
    "write_outputs",
    "write_pictures",
]

PICTURE_DPI = 110
"""Dots per inch of the charts."""
CHART = os.path.join("timeseries", "multi_instance_cache_analysis.png")
"""The chart's path inside the output folder."""
TIER_CHART = os.path.join("timeseries", "per_tier_timeseries.png")
"""The per-tier chart's path inside the output folder (tiered runs)."""
WINDOW = 100
"""Reads in the trailing window of the chart's bottom panel."""


def window_rate(hit_tokens: np.ndarray, input_tokens: np.ndarray, window: int) -> np.ndarray:
    """Per read, the hit rate of the last ``window`` reads up to it (fewer at the start):
    their hit tokens over their input tokens, token-weighted as the cumulative rate is (a
    mean of per-read rates would count a 16-token read as much as a 16k-token one). 0
    where those reads have no input tokens. O(reads)."""
    hits = np.cumsum(hit_tokens, dtype=np.float64)
    inputs = np.cumsum(input_tokens, dtype=np.float64)
    hits[window:] -= hits[:-window].copy()
    inputs[window:] -= inputs[:-window].copy()
    return np.divide(hits, inputs, out=np.zeros(len(hits)), where=inputs > 0)


AGGREGATE_CSV = "aggregate_hit_rates.csv"
"""Every instance summed per window of trace time (``--aggregate-window-s``)."""
AGGREGATE_CHART = "aggregate_hit_rates.png"
"""Its chart: the hit rate per window and the cumulative one."""
AGGREGATE_HEADER = (
    "WindowStartNs,WindowEndNs,Reads,ReadBlocks,HitBlocks,InputTokens,HitTokens,HitRate,"
    "AccHitTokens,AccInputTokens,AccHitRate"
)
"""The aggregate CSV's header (see :class:`AggregateWindows`)."""


def csv_name(instance_id: str) -> str:
    """``{instance_id}_hit_rates.csv``."""
    return f"{instance_id}_hit_rates.csv"


def table_name(instance_id: str, output_format: str = "csv") -> str:
    """``{instance_id}_hit_rates.csv`` or ``.parquet``."""
    return f"{instance_id}_hit_rates.{output_format}"


def write_outputs(
    result: OptimizeResult,
    out_dir: str,
    *,
    draw_chart: bool,
    aggregate_window_ns: int | None = None,
    output_format: str = "csv",
    fast_chart: bool = False,
) -> list[str]:
    """Write every per-read table (``output_format``: CSV or Parquet, :mod:`.tables`) and
    the chart (with ``aggregate_window_ns`` the aggregate CSV and its chart) into
    ``out_dir`` (created if needed), all or nothing; the paths written. O(reads)."""
    from litehit_service.optimizer.optimize.rows import InstanceRows, Running
    from litehit_service.optimizer.optimize.tables import TABLES

    tiered = any(r.tier_names for r in result.instances)
    names = [table_name(r.instance_id, output_format) for r in result.instances]
    figures = picture_names(tiered, draw_chart, aggregate_window_ns)
    with published(out_dir, names, figures) as (table_tmps, picture_tmps):
        for r, tmp in zip(result.instances, table_tmps, strict=True):
            assert isinstance(r.rows, InstanceRows)  # the whole-trace path keeps them
            table = TABLES[output_format](tmp, r.tier_names)
            try:
                table.write(r.rows, Running())
            finally:
                table.close()
        write_pictures(result, picture_tmps, draw_chart=draw_chart,
                       aggregate_window_ns=aggregate_window_ns, fast_chart=fast_chart)  # fmt: skip
    return [os.path.join(out_dir, n) for n in [*names, *figures]]


@contextmanager
def published(
    out_dir: str, tables: Sequence[str], pictures: Sequence[str]
) -> Iterator[tuple[list[str], dict[str, str]]]:
    """The temporaries of the per-read ``tables`` and the ``pictures`` (names under
    ``out_dir``): (the tables', in order; picture name -> its), all published together
    when the block succeeds, and removed with the folders made for them when it raises
    (:func:`~litehit_service.offline.outputs.atomic_outputs`). O(files)."""
    from litehit_service.offline.outputs import atomic_outputs, new_dirs

    paths = [os.path.join(out_dir, n) for n in [*tables, *pictures]]
    with new_dirs([os.path.dirname(p) for p in paths]), atomic_outputs(paths) as tmps:
        yield tmps[: len(tables)], dict(zip(pictures, tmps[len(tables) :], strict=True))


def write_pictures(
    result: OptimizeResult,
    to: dict[str, str],
    *,
    draw_chart: bool,
    aggregate_window_ns: int | None,
    fast_chart: bool = False,
) -> None:
    """Write the pictures asked for (and the aggregate CSV) to the paths ``to`` maps
    their names to (:func:`picture_names`); ``fast_chart``: the chart's cheaper form
    (:func:`timeseries_figure`). O(reads)."""
    for name, text in picture_texts(result, aggregate_window_ns):
        with open(to[name], "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
    for name, figure in picture_figures(result, draw_chart, aggregate_window_ns, fast_chart):
        figure.savefig(to[name], format="png", dpi=PICTURE_DPI)


def picture_names(tiered: bool, draw_chart: bool, aggregate_window_ns: int | None) -> list[str]:
    """The pictures' files (and the aggregate CSV) a run writes beside its CSVs, in the
    order :func:`picture_texts` then :func:`picture_figures` give them."""
    out = []
    if aggregate_window_ns is not None:
        out += [AGGREGATE_CSV, AGGREGATE_CHART]
    if draw_chart:
        out.append(CHART)
        if tiered:
            out.append(TIER_CHART)
    return out


def picture_texts(result: OptimizeResult, aggregate_window_ns: int | None) -> list[tuple[str, str]]:
    """The aggregate CSV when asked (its rows need every read's row). O(reads)."""
    if aggregate_window_ns is None:
        return []
    return [(AGGREGATE_CSV, aggregate_csv(aggregate_windows(result, aggregate_window_ns)))]


def picture_figures(
    result: OptimizeResult,
    draw_chart: bool,
    aggregate_window_ns: int | None,
    fast_chart: bool = False,
) -> list[tuple[str, Figure]]:
    """The charts asked for, by file name. O(reads)."""
    figures = []
    if aggregate_window_ns is not None:
        figures.append(
            (AGGREGATE_CHART, aggregate_figure(aggregate_windows(result, aggregate_window_ns)))
        )
    if draw_chart:
        figures.append((CHART, timeseries_figure(result, fast=fast_chart)))
        if any(r.tier_names for r in result.instances):
            figures.append((TIER_CHART, tier_figure(result)))
    return figures


@dataclass(frozen=True, slots=True)
class AggregateWindows:
    """Every instance's reads summed per window ``[start_ns, start_ns + window_ns)`` of
    trace time, windows counted from the first read of the run (any instance); a window
    without reads is left out (so at most one window per read, whatever the width; the
    starts show the gaps). Per window (int64 arrays): ``reads``, ``read_blocks`` (keys
    read), ``hit_blocks`` (local + remote), ``input_tokens``, ``hit_tokens`` (each
    instance's hit blocks x its block size)."""

    window_ns: int
    start_ns: np.ndarray
    reads: np.ndarray
    read_blocks: np.ndarray
    hit_blocks: np.ndarray
    input_tokens: np.ndarray
    hit_tokens: np.ndarray


def aggregate_windows(result: OptimizeResult, window_ns: int) -> AggregateWindows:
    """Sum every instance's reads per window of ``window_ns`` (> 0) ns (see
    :class:`AggregateWindows`). O(reads log reads)."""
    if window_ns <= 0:
        raise ValueError(f"window_ns must be > 0, got {window_ns}")
    rows = [r.rows for r in result.instances]
    times = np.concatenate([r.timestamp_ns for r in rows] + [np.zeros(0, dtype=np.int64)])
    columns = [
        [r.read_blocks for r in rows],
        [r.local_hits + r.remote_hits for r in rows],
        [r.input_tokens for r in rows],
        [(r.local_hits + r.remote_hits) * r.block_size for r in rows],
    ]
    values = [np.concatenate(c + [np.zeros(0, dtype=np.int64)]).astype(np.int64) for c in columns]
    if not len(times):
        empty = np.zeros(0, dtype=np.int64)
        return AggregateWindows(window_ns, empty, empty, empty, empty, empty, empty)
    first = int(times.min())
    window = (times - first) // window_ns
    order = np.argsort(window, kind="stable")
    window = window[order]
    starts = np.flatnonzero(np.r_[True, window[1:] != window[:-1]])
    sums = [np.add.reduceat(v[order], starts) for v in values]
    return AggregateWindows(
        window_ns=window_ns,
        start_ns=first + window[starts] * window_ns,
        reads=np.diff(np.r_[starts, len(window)]).astype(np.int64),
        read_blocks=sums[0],
        hit_blocks=sums[1],
        input_tokens=sums[2],
        hit_tokens=sums[3],
    )


def aggregate_csv(w: AggregateWindows) -> str:
    """:data:`AGGREGATE_HEADER` and one line per window: hit rates are hit tokens / input
    tokens (per window, then accumulated over the windows so far) with 6 decimals, 0 when
    no input tokens. O(windows)."""
    acc_hit = np.cumsum(w.hit_tokens, dtype=np.int64)
    acc_in = np.cumsum(w.input_tokens, dtype=np.int64)
    lines = [AGGREGATE_HEADER]
    for k in range(len(w.start_ns)):
        start = int(w.start_ns[k])
        hit, inp, ahit, ain = (int(w.hit_tokens[k]), int(w.input_tokens[k]), int(acc_hit[k]),
                               int(acc_in[k]))  # fmt: skip
        lines.append(
            f"{start},{start + w.window_ns},{int(w.reads[k])},{int(w.read_blocks[k])},"
            f"{int(w.hit_blocks[k])},{inp},{hit},{hit / inp if inp else 0.0:.6f},"
            f"{ahit},{ain},{ahit / ain if ain else 0.0:.6f}"
        )
    return "\n".join(lines) + "\n"


def aggregate_figure(w: AggregateWindows) -> Figure:
    """Hit rate per window (dots and line, at each window's start) and the cumulative one,
    every instance summed; x: seconds since the first read."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5), layout="constrained")
    ax = fig.subplots()
    if len(w.start_ns):
        seconds = (w.start_ns - w.start_ns[0]) / 1e9
        per = np.divide(w.hit_tokens, w.input_tokens, out=np.zeros(len(seconds)),
                        where=w.input_tokens > 0)  # fmt: skip
        acc_in = np.cumsum(w.input_tokens)
        acc = np.divide(np.cumsum(w.hit_tokens), acc_in, out=np.zeros(len(seconds)),
                        where=acc_in > 0)  # fmt: skip
        ax.plot(seconds, per * 100, marker=".", linewidth=0.8, label="per window")
        ax.plot(seconds, acc * 100, linewidth=2, label="cumulative")
        ax.legend(loc="lower right", fontsize="small")
    ax.set_ylim(0, 100)
    ax.set_xlabel("window start, seconds since the first read")
    ax.set_ylabel("hit rate (%)")
    ax.set_title(f"Hit rate of every instance per {w.window_ns / 1e9:g} s window")
    ax.grid(alpha=0.3)
    return fig


FAST_CHART_POINTS = 2000
"""Points per instance and line of ``--fast-chart``'s chart."""


def timeseries_figure(result: OptimizeResult, *, fast: bool = False) -> Figure:
    """The two-panel chart (module docstring); ``fast`` (``--fast-chart``): each line
    drawn through at most :data:`FAST_CHART_POINTS` evenly spaced reads (the rates are
    still computed over every read) and no dot per read, so a chart of millions of reads
    draws in a moment."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    storage = top.twinx()
    for r in result.instances:
        rows = r.rows
        if not rows.reads:
            continue
        seconds = (rows.timestamp_ns - rows.timestamp_ns[0]) / 1e9
        hit_t = (rows.local_hits + rows.remote_hits) * rows.block_size
        acc_in = np.cumsum(rows.input_tokens)
        acc = np.divide(np.cumsum(hit_t), acc_in, out=np.zeros(len(acc_in)), where=acc_in > 0)
        window = window_rate(hit_t, rows.input_tokens, WINDOW)
        shown = np.arange(rows.reads)
        if fast and rows.reads > FAST_CHART_POINTS:
            shown = np.unique(np.linspace(0, rows.reads - 1, FAST_CHART_POINTS).astype(np.int64))
        (line,) = top.plot(seconds[shown], acc[shown] * 100,
                           label=f"{r.instance_id} ({r.policy})")  # fmt: skip
        storage.plot(seconds[shown], rows.cached[shown], color=line.get_color(), alpha=0.35,
                     linestyle="--")  # fmt: skip
        if not fast:
            per = np.divide(
                hit_t, rows.input_tokens, out=np.zeros(len(hit_t)), where=rows.input_tokens > 0
            )
            bottom.scatter(seconds, per * 100, s=2, alpha=0.25, color=line.get_color())
        bottom.plot(seconds[shown], window[shown] * 100, color=line.get_color(),
                    label=r.instance_id)  # fmt: skip
    top.set_ylabel("cumulative hit rate (%)")
    top.set_title("Cumulative hit rate per instance (dashed: cached blocks, right axis)")
    storage.set_ylabel("cached blocks")
    top.legend(loc="lower right", fontsize="small")
    bottom.set_ylabel("hit rate (%)" if fast else "hit rate per read (%)")
    bottom.set_xlabel("time since the instance's first read (s)")
    bottom.set_title(
        f"Hit rate of the last {WINDOW} reads (line: hit tokens / input tokens, as above)"
        + ("" if fast else " and per read (dots)")
    )
    for ax in (top, bottom):
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    return fig


def tier_figure(result: OptimizeResult) -> Figure:
    """The per-tier chart (module docstring): one colour per tier, one line style per
    tiered instance."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    styles = ("-", "--", ":", "-.")
    tiered = [r for r in result.instances if r.tier_names and r.rows.reads]
    for k, r in enumerate(tiered):
        rows = r.rows
        seconds = (rows.timestamp_ns - rows.timestamp_ns[0]) / 1e9
        acc_in = np.cumsum(rows.input_tokens)
        for tier, name in enumerate(r.tier_names):
            color = f"C{tier % 10}"
            label = f"{r.instance_id}: tier {tier} ({name})"
            served = np.cumsum(rows.tier_hits[:, tier]) * rows.block_size
            acc = np.divide(served, acc_in, out=np.zeros(len(acc_in)), where=acc_in > 0)
            style = styles[k % len(styles)]
            top.plot(seconds, acc * 100, color=color, linestyle=style, label=label)
            bottom.plot(seconds, rows.tier_cached[:, tier], color=color, linestyle=style,
                        label=label)  # fmt: skip
    top.set_ylabel("cumulative hit rate served (%)")
    top.set_ylim(0, 100)
    top.set_title("Share of input tokens each tier served, cumulative")
    bottom.set_ylabel("cached blocks")
    bottom.set_xlabel("time since the instance's first read (s)")
    bottom.set_title("Blocks each tier holds after each read")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    return fig


def summary_text(result: OptimizeResult) -> str:
    """A table, one line per instance: reads, hit rate, capacity, peak and cached
    blocks, evictions and expiries."""
    head = (
        f"{'instance':<20} {'policy':<15} {'reads':>9} {'hit rate':>9} {'capacity':>10} "
        f"{'peak':>10} {'cached':>10} {'evicted':>10} {'expired':>9}"
    )
    lines = [head]
    for r in result.instances:
        cap = "inf" if r.capacity_blocks is None else str(r.capacity_blocks)
        lines.append(
            f"{r.instance_id:<20} {r.policy:<15} {r.rows.reads:>9} {r.hit_rate * 100:>8.2f}% "
            f"{cap:>10} {r.peak_cached_blocks:>10} {r.cached_blocks:>10} "
            f"{r.evicted_blocks:>10} {r.expired_blocks:>9}"
        )
        total = r.rows.total_input_tokens
        for tier, name in enumerate(r.tier_names):
            served = int(r.rows.tier_hit_tokens[tier])
            lines.append(
                f"  tier {tier} ({name}): served {served / total * 100 if total else 0:.2f}% "
                f"of input tokens, {r.tier_cached_blocks[tier]} blocks cached, "
                f"{r.tier_evicted_blocks[tier]} evicted"
            )
    return "\n".join(lines)


def summary_json(result: OptimizeResult, extra: dict[str, object] | None = None) -> str:
    """The summary as one JSON object: ``instances`` (each :meth:`InstanceResult.summary`),
    ``replay_seconds``, ``memory_bytes`` and ``extra``'s fields."""
    data: dict[str, object] = {
        "instances": [r.summary() for r in result.instances],
        "replay_seconds": round(result.replay_seconds, 6),
        "memory_bytes": result.memory_bytes,
    }
    data.update(extra or {})
    return json.dumps(data, indent=2)
