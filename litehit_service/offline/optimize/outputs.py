"""What ``litehit optimize`` leaves behind: CSVs, the time-series chart, the summary.

All files of a run are published together or not at all
(:func:`~litehit_service.offline.outputs.atomic_outputs`): ``{instance_id}_hit_rates.csv``
per instance in the output folder and, with a chart, ``timeseries/
multi_instance_cache_analysis.png`` -- top: cumulative hit rate per instance over time;
bottom: each read's hit rate (dots) with a trailing-window mean (line); cached blocks per
instance on a second axis. The summary is a fixed-width table on stdout (or JSON).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import numpy as np

from litehit_service.offline.optimize.rows import format_csv
from litehit_service.offline.optimize.run import OptimizeResult
from litehit_service.offline.outputs import atomic_outputs

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CHART",
    "csv_name",
    "summary_json",
    "summary_text",
    "timeseries_figure",
    "write_outputs",
]

CHART = os.path.join("timeseries", "multi_instance_cache_analysis.png")
"""The chart's path inside the output folder."""
WINDOW = 100
"""Reads in the trailing mean of the chart's bottom panel."""


def csv_name(instance_id: str) -> str:
    """``{instance_id}_hit_rates.csv``."""
    return f"{instance_id}_hit_rates.csv"


def write_outputs(result: OptimizeResult, out_dir: str, *, draw_chart: bool) -> list[str]:
    """Write every CSV (and the chart) into ``out_dir`` (created if needed), all or
    nothing; the paths written. O(reads)."""
    paths = [os.path.join(out_dir, csv_name(r.instance_id)) for r in result.instances]
    texts = [format_csv(r.rows) for r in result.instances]
    figure = timeseries_figure(result) if draw_chart else None
    if figure is not None:
        paths.append(os.path.join(out_dir, CHART))
    created = _make_dirs([os.path.dirname(p) for p in paths])
    try:
        with atomic_outputs(paths) as tmps:
            for tmp, text in zip(tmps, texts, strict=False):
                with open(tmp, "w", encoding="utf-8", newline="") as fh:
                    fh.write(text)
            if figure is not None:
                figure.savefig(tmps[-1], format="png", dpi=110)
    except BaseException:
        for folder in reversed(created):
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise
    return paths


def _make_dirs(folders: list[str]) -> list[str]:
    """Create the missing folders; those created, parents first (removed again when the
    run fails, so a failed run leaves nothing)."""
    created: list[str] = []
    for folder in dict.fromkeys(folders):
        missing = []
        path = os.path.abspath(folder)
        while not os.path.isdir(path):
            missing.append(path)
            path = os.path.dirname(path)
        for path in reversed(missing):
            os.mkdir(path)
            created.append(path)
    return created


def timeseries_figure(result: OptimizeResult) -> Figure:
    """The two-panel chart (module docstring)."""
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
        (line,) = top.plot(seconds, acc * 100, label=f"{r.instance_id} ({r.policy})")
        storage.plot(seconds, rows.cached, color=line.get_color(), alpha=0.35, linestyle="--")
        per = np.divide(
            hit_t, rows.input_tokens, out=np.zeros(len(hit_t)), where=rows.input_tokens > 0
        )
        bottom.scatter(seconds, per * 100, s=2, alpha=0.25, color=line.get_color())
        window = min(WINDOW, len(per))
        mean = np.convolve(per, np.ones(window) / window, mode="full")[: len(per)]
        mean[: window - 1] = np.cumsum(per[: window - 1]) / np.arange(1, window)
        bottom.plot(seconds, mean * 100, color=line.get_color(), label=r.instance_id)
    top.set_ylabel("cumulative hit rate (%)")
    top.set_title("Cumulative hit rate per instance (dashed: cached blocks, right axis)")
    storage.set_ylabel("cached blocks")
    top.legend(loc="lower right", fontsize="small")
    bottom.set_ylabel("hit rate per read (%)")
    bottom.set_xlabel("time since the instance's first read (s)")
    bottom.set_title(f"Hit rate per read (dots) and its mean over the last {WINDOW} reads")
    for ax in (top, bottom):
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
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
