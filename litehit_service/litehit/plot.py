"""The plot of ``litehit curve``: one matplotlib Figure per run, saved as PNG, SVG or PDF.

:func:`build_figure` returns the Figure (nothing is written; tests read its axes, labels,
limits and title); :func:`plot_curves` saves it to ``<path>.<pid>.tmp`` in the format the
path's extension names (:func:`plot_format`: png, svg or pdf, passed to ``savefig``
explicitly since the temporary's own name ends in ``.tmp``); ``litehit curve`` publishes it
with :func:`~litehit_service.offline.outputs.atomic_outputs`. matplotlib is imported
lazily; no display is needed.

The axes: the token hit rate against the capacity, in GiB (a log axis unless ``linear``),
from just below where the curves start to rise (:func:`plot_start`, so no flat decade
fills the left) to past saturation. When every curve counts blocks of the same bytes, a
second axis on top counts them in blocks; there is none for hybrid curves (in bytes) or
for instances of different block bytes, where no one block count fits. When the bytes per
block are unknown (the ledger's ``block_bytes`` is a placeholder: ``litehit curve
--block-bytes-unknown``), the capacity is drawn in blocks only and the axis says so.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from litehit_core import InvalidRequestError
from litehit_core.curve import GIB, MARK_PERCENTS, InstanceCurve
from litehit_service.offline.outputs import tmp_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PLOT_FORMATS = ("png", "svg", "pdf")
"""Plot formats, named by the output file's extension (case-insensitive)."""
PLOT_SAMPLES = 1500
"""Log-spaced samples per line added to the exact breakpoints (a straight piece in blocks
is curved on a log axis, so breakpoints alone would draw it wrong)."""
RISE_PERCENT = 1
"""A curve "starts to rise" where its hits first exceed their level at the first hit by
this percentage of the theoretical maximum (:func:`plot_start`)."""
TITLE = "Exact LRU prefix-cache hit rate"
UNKNOWN_BYTES_LABEL = "LRU capacity in blocks (bytes per block unknown)"
_MIB = 1024 * 1024


def plot_format_error(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` names no plot format (its extension is not png, svg or pdf), or None."""
    ext = os.path.splitext(os.fspath(path))[1]
    if ext[1:].lower() in PLOT_FORMATS:
        return None
    got = f"extension {ext!r}" if ext else "no extension"
    return f"{os.fspath(path)!r} has {got}; the plot format follows it: .png, .svg or .pdf"


def plot_format(path: str | os.PathLike[str]) -> str:
    """The format of a plot written to ``path``: its extension, lower case (png, svg or
    pdf); InvalidRequestError naming the extension otherwise. O(len(path))."""
    problem = plot_format_error(path)
    if problem is not None:
        raise InvalidRequestError(problem)
    return os.path.splitext(os.fspath(path))[1][1:].lower()


def curve_title(curves: Sequence[InstanceCurve], trace: str = "") -> str:
    """``Exact LRU prefix-cache hit rate: trace T, instance I`` (``instances A, B and 3
    more`` past four; without ``trace`` just the instances; a trace whose name already
    says trace, like ``trace`` or ``mooncake_trace``, is not called "trace" twice).
    O(instances)."""
    ids = [cur.instance_id for cur in curves]
    shown = ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")
    who = f"instance {shown}" if len(ids) == 1 else f"instances {shown}"
    if not trace:
        return f"{TITLE}: {who}"
    named = trace if "trace" in trace.lower() else f"trace {trace}"
    return f"{TITLE}: {named}, {who}"


def sample_curve(
    curve: InstanceCurve,
    x_end: float,
    linear: bool = False,
    samples: int = PLOT_SAMPLES,
    x_start: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Points ``(capacity, hit_rate)`` (float numpy arrays, capacities in the curve's unit)
    that draw ``curve`` right.

    Linear axis: the exact breakpoints up to ``x_end`` plus 0 and the end (the curve is
    straight between them). Log axis (from ``x_start``): the breakpoints plus ``samples``
    log-spaced capacities, each evaluated exactly on the piecewise-linear curve, so no gap
    between consecutive points exceeds a ratio of ``(x_end / x_start) ** (1 / (samples -
    1))``. O(B + samples).
    """
    points = curve.breakpoints()
    caps = np.fromiter((c for c, _ in points), dtype=np.float64, count=len(points))
    hits = np.fromiter((h for _, h in points), dtype=np.float64, count=len(points))
    if linear:
        xs = np.union1d(caps[caps <= x_end], [0.0, x_end])
    else:
        grid = np.geomspace(x_start, max(x_end, x_start), samples)
        xs = np.union1d(caps[(caps >= x_start) & (caps <= x_end)], grid)
    return xs, np.interp(xs, caps, hits) / (curve.input_tokens or 1)


def plot_start(curve: InstanceCurve) -> int:
    """Where a log axis should start for ``curve`` (a capacity in its unit, >= 1).

    Half the capacity where the curve starts to rise (where its hits first exceed their
    level at the first hit by :data:`RISE_PERCENT` % of the maximum), but not below the
    first hit nor above any marked point: a curve that rises at once starts at its first
    hit, one flat for decades after it starts a factor of 2 before its rise. 1 without
    hits. O(log B)."""
    total = curve.infinite_hit_tokens
    if total == 0:
        return 1
    first = max(curve.first_hit, 1)
    target = curve.hit_tokens_at(first) + -(-total * RISE_PERCENT // 100)
    start = first if target > total else max(first, curve.capacity_for_hit_tokens(target) // 2)
    return min([start, *(m.capacity for m in curve.marks() if m.capacity >= 1)])


def build_figure(
    curves: Sequence[InstanceCurve],
    *,
    linear: bool = False,
    title: str = "",
    block_bytes_unknown: bool = False,
) -> Figure:
    """The plot of ``curves`` as a matplotlib Figure (not drawn, not saved).

    One line per curve (token hit rate against capacity), its theoretical maximum a dashed
    horizontal line in its colour, the :data:`MARK_PERCENTS` points marked and labelled;
    lines are exact (every breakpoint plus log-spaced samples on the piecewise-linear
    curve). The axes are as the module docstring says. ``block_bytes_unknown`` draws
    capacities in blocks (InvalidRequestError for a curve in bytes). O(B + samples) per
    curve.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    if block_bytes_unknown:
        for cur in curves:
            if cur.unit != "blocks":
                raise InvalidRequestError(
                    f"instance {cur.instance_id!r} (model {cur.model}) counts capacity in "
                    "bytes, so it cannot be drawn in blocks of unknown bytes"
                )
    # x per capacity unit of each curve: GiB, or blocks when their bytes are unknown
    per_unit = [1.0 if block_bytes_unknown else cur.unit_bytes / GIB for cur in curves]
    fig = Figure(figsize=(10, 6), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    single = len(curves) == 1
    x_max = max(max(cur.saturation, 1) * k for cur, k in zip(curves, per_unit, strict=True))
    if linear:
        x_max *= 1.1
    elif single:  # room for the flat tail and the labels right of the 99% point
        x_max = max(2.0 * x_max, 8.0 * curves[0].mark(MARK_PERCENTS[-1]).capacity * per_unit[0])
    else:
        x_max *= 2.0
    x_min = min(plot_start(cur) * k for cur, k in zip(curves, per_unit, strict=True))
    y_top = max(cur.infinite_hit_rate for cur in curves)
    for idx, (cur, k) in enumerate(zip(curves, per_unit, strict=True)):
        xs, ys = sample_curve(cur, x_max / k, linear, x_start=x_min / k)
        color = f"C{idx % 10}"
        inf_rate = cur.infinite_hit_rate
        marks = cur.marks()
        label = (
            f"{cur.instance_id} ({cur.block_size_tokens}-token blocks, max {100 * inf_rate:.2f}%)"
        )
        if not single:  # several lines: the marked capacities go in the legend
            label += "\n" + "/".join(f"{m.percent}" for m in marks) + "% of max at "
            label += " / ".join(_short(m.capacity, k, block_bytes_unknown) for m in marks)
        ax.plot(xs * k, ys, color=color, linewidth=1.6, label=label)
        ax.axhline(inf_rate, color=color, linestyle="--", linewidth=1.0, alpha=0.8)
        for j, m in enumerate(marks):
            if not linear and m.capacity < 1:
                continue  # capacity 0 has no place on a log axis
            x = m.capacity * k
            ax.vlines(x, 0, m.hit_rate, colors=color, linestyles=":", alpha=0.6)
            ax.plot([x], [m.hit_rate], marker="o", color=color, markersize=5)
            if not single:  # a short tag above-left of the point (the curve is lower there)
                ax.annotate(
                    f"{m.percent}%",
                    xy=(x, m.hit_rate),
                    xytext=(-4, 3),
                    textcoords="offset points",
                    fontsize=7,
                    color=color,
                    ha="right",
                    va="bottom",
                )
                continue
            # one column right of the last point and below 90% of the max, where the curve
            # is not; the higher the point, the higher its label, so no leader line
            # crosses another or a label
            last = marks[-1].capacity * k
            x_text = last * 1.3 if not linear else last + 0.02 * x_max
            ax.annotate(
                f"{m.percent}% of max: {_short(m.capacity, k, block_bytes_unknown)}",
                xy=(x, m.hit_rate),
                xytext=(x_text, inf_rate * (0.62 + 0.08 * j)),
                textcoords="data",
                fontsize=8,
                color=color,
                va="center",
                arrowprops={"arrowstyle": "-", "color": color, "alpha": 0.5, "linewidth": 0.7},
            )
    _capacity_axes(ax, curves, linear, x_min, x_max, block_bytes_unknown)
    ax.set_ylim(0, min(1.0, y_top * 1.12) if y_top > 0 else 1.0)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    ax.set_ylabel("token hit rate")
    ax.set_title(title or f"{TITLE} vs capacity")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(  # below the axes: never on top of a curve
        loc="outside lower center",
        ncols=min(len(curves), 3),
        fontsize=8,
        title="instance (dashed line: its infinite-capacity maximum)",
        title_fontsize=8,
    )
    return fig


def _capacity_axes(
    ax: Axes,
    curves: Sequence[InstanceCurve],
    linear: bool,
    x_min: float,
    x_max: float,
    block_bytes_unknown: bool,
) -> None:
    """Scale, limits and labels of the capacity axis, and the blocks axis on top."""
    scale = "" if linear else ", log scale"
    if linear:
        ax.set_xlim(0, x_max)
    else:
        ax.set_xscale("log")
        ax.set_xlim(x_min, x_max)
    if block_bytes_unknown:
        ax.set_xlabel(UNKNOWN_BYTES_LABEL + scale)
        return
    ax.set_xlabel(f"LRU capacity (GiB{scale})")
    block_bytes = {cur.block_bytes for cur in curves}
    if len(block_bytes) != 1 or any(cur.unit != "blocks" for cur in curves):
        return  # bytes (hybrid) or mixed block sizes: no one block count fits
    (bb,) = block_bytes
    top = ax.secondary_xaxis(
        "top", functions=(lambda gb: gb * (GIB / bb), lambda blocks: blocks * (bb / GIB))
    )
    top.set_xlabel(f"LRU capacity in blocks of {_short_bytes(bb)}")


def plot_curves(
    curves: Sequence[InstanceCurve],
    path: str | os.PathLike[str],
    linear: bool = False,
    title: str = "",
    *,
    block_bytes_unknown: bool = False,
) -> None:
    """Save :func:`build_figure` of ``curves`` to ``<path>.<pid>.tmp`` in the format of
    ``path``'s extension (:func:`plot_format`, checked first). O(B + samples) per curve
    plus rendering."""
    fmt = plot_format(path)
    fig = build_figure(curves, linear=linear, title=title, block_bytes_unknown=block_bytes_unknown)
    with open(tmp_path(path), "wb") as fh:
        fig.savefig(fh, format=fmt)


def _short(capacity: int, per_unit: float, blocks: bool) -> str:
    """A marked capacity: ``1,234 blocks`` when bytes are unknown, else GiB."""
    return f"{capacity:,} blocks" if blocks else _short_gb(capacity * per_unit)


def _short_gb(gb: float) -> str:
    """A capacity label: GiB with 3-4 significant digits (MiB/KiB below 0.01 GiB)."""
    if gb == 0:
        return "0 GiB"
    if gb >= 100:
        return f"{gb:,.0f} GiB"
    if gb >= 0.01:
        return f"{gb:.3g} GiB"
    if gb >= 1 / 1024:
        return f"{gb * 1024:.3g} MiB"
    return f"{gb * 1024 * 1024:.3g} KiB"


def _short_bytes(n: int) -> str:
    """Bytes per block: ``64 MiB``, ``1 KiB`` when whole, else ``3,000 bytes``."""
    if n % _MIB == 0:
        return f"{n // _MIB:,} MiB"
    if n % 1024 == 0:
        return f"{n // 1024:,} KiB"
    return f"{n:,} bytes"
