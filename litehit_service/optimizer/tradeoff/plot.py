"""The trade-off pictures, drawn from the summary rows (a run's or ``--skip-run``'s).

``pareto/pareto_curve_total.png``: one axes, capacity (GiB, linear, from 0) against total
hit rate (%): per policy its rising points from (0, 0) (a point below the last kept one is
dropped and reported by :func:`plot_curves`), its theoretical hit rate (dashed), its 95 %
and 99 % capacities (dotted verticals and a diamond, labelled with the measured rate and
how it was found), and LiteHit's
exact tail-first and head-first LRU curves as thin grey reference lines (of the first
policy: the references do not depend on the policy unless the groups' shares do).
``pareto/multi_policy_total.png`` (several policies): the same, one panel per policy.
``pareto_curve_local.png`` / ``_remote.png`` (and their ``multi_policy_``): the same for
the local or remote hit rate, without marks or references (those are total rates).
matplotlib is imported only here, when drawing. Cost: O(points + reference capacities).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from litehit_service.optimizer.tradeoff.exact_curve import TOUCH_ORDERS
from litehit_service.optimizer.tradeoff.files import ReferenceRow, SummaryRow
from litehit_service.optimizer.tradeoff.points import GIB, keep_rising

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["PlotCurve", "curve_figure", "multi_figure", "plot_curves"]

_REFERENCE_STYLE = {"tail-first": "--", "head-first": ":"}


@dataclass
class PlotCurve:
    """One policy's curve as drawn: the theoretical hit rate, the points (capacity bytes,
    hit rate) with which are kept, the marks (percent, capacity bytes, hit rate, method)
    and the reference curves (capacities, per touch order hit rates)."""

    policy: str
    theoretical: float
    points: list[tuple[int, float]] = field(default_factory=list)
    kept: list[bool] = field(default_factory=list)
    marks: list[tuple[int, int, float, str]] = field(default_factory=list)
    reference_caps: list[int] = field(default_factory=list)
    reference_rates: dict[str, list[float]] = field(default_factory=dict)


def plot_curves(
    rows: Sequence[SummaryRow], references: Sequence[ReferenceRow] = ()
) -> tuple[list[PlotCurve], list[str]]:
    """The curves to draw, in the rows' policy order, and one ``Drop descending Pareto
    point ...`` message per dropped point. O(rows)."""
    curves: dict[str, PlotCurve] = {}
    hits: dict[str, list[int]] = {}
    for r in rows:
        rate = (r.hit_tokens or 0) / r.input_tokens if r.input_tokens else 0.0
        c = curves.get(r.policy)
        if c is None:
            c = curves[r.policy] = PlotCurve(r.policy, 0.0)
            hits[r.policy] = []
        if r.kind == "theoretical":
            c.theoretical = rate
        elif r.kind == "point" and r.capacity_bytes is not None:
            c.points.append((r.capacity_bytes, rate))
            hits[r.policy].append(r.hit_tokens or 0)
        elif r.kind.startswith("p") and r.capacity_bytes is not None:
            c.marks.append((int(r.kind[1:]), r.capacity_bytes, rate, r.method))
    drops = []
    for policy, c in curves.items():
        c.kept = keep_rising(hits[policy])
        best = (0, 0.0)
        for (cap, rate), kept in zip(c.points, c.kept, strict=True):
            if kept:
                if rate >= best[1]:
                    best = (cap, rate)
                continue
            drops.append(
                f"Drop descending Pareto point {policy}: {cap / GIB:.6g} GiB ({cap} bytes) "
                f"hit rate {rate * 100:.4f}% < {best[1] * 100:.4f}% at {best[0] / GIB:.6g} GiB"
            )
    for r in references:
        c = curves.get(r.policy)
        if c is None:
            continue
        c.reference_caps.append(r.capacity_bytes)
        for order, h in zip(TOUCH_ORDERS, r.hit_tokens, strict=True):
            c.reference_rates.setdefault(order, []).append(
                h / r.input_tokens if r.input_tokens else 0.0
            )
    return list(curves.values()), drops


def _draw(ax: Any, c: PlotCurve, color: str, references: bool, row: int = 0) -> None:
    xs = [0.0] + [cap / GIB for (cap, _), k in zip(c.points, c.kept, strict=True) if k]
    ys = [0.0] + [rate * 100 for (_, rate), k in zip(c.points, c.kept, strict=True) if k]
    ax.plot(xs, ys, marker="o", markersize=3, color=color, label=c.policy)
    ax.axhline(c.theoretical * 100, color=color, linestyle="--", linewidth=0.8, alpha=0.6)
    for percent, cap, rate, method in c.marks:
        ax.axvline(cap / GIB, color=color, linestyle=":", linewidth=1)
        ax.plot([cap / GIB], [rate * 100], marker="D", markersize=4, color=color)
        ax.annotate(
            f"{percent}%: {cap / GIB:.4g} GiB\n{rate * 100:.2f}% ({method})",
            (cap / GIB, rate * 100),
            textcoords="offset points",
            xytext=(4, -26 - 24 * row),
            fontsize="x-small",
            color=color,
        )
    if references:
        caps = [0.0] + [cap / GIB for cap in c.reference_caps]
        for order, rates in c.reference_rates.items():
            ax.plot(
                caps,
                [0.0] + [r * 100 for r in rates],
                color="grey",
                linewidth=0.7,
                linestyle=_REFERENCE_STYLE.get(order, "-"),
                label=f"LiteHit exact LRU, {order}",
            )


_Y_LABELS = {
    "total": "total hit rate (%)",
    "local": "local hit rate (%): hits on blocks the mask marks local / input tokens",
    "remote": "remote hit rate (%): hits on the other blocks / input tokens",
}


def _finish(ax: Any, title: str, kind: str) -> None:
    ax.set_xlabel("capacity (GiB)")
    ax.set_ylabel(_Y_LABELS[kind], fontsize="small" if kind != "total" else None)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="lower right", fontsize="x-small")


def curve_figure(
    curves: Sequence[PlotCurve], title: str, kind: str = "total", limits: Sequence = ()
) -> Figure:
    """``pareto_curve_{kind}.png``: every policy on one axes (module docstring); ``kind``
    names the hit rate on the y axis; ``limits``: (x min, x max, y min, y max) in GiB and
    %, None where fitted."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 6.5), layout="constrained")
    ax = fig.subplots()
    colors = [f"C{i % 10}" for i in range(len(curves))]
    for i, c in enumerate(curves):
        _draw(ax, c, colors[i], references=i == 0, row=i)
    _finish(ax, title, kind)
    x_min, x_max, y_min, y_max = (*limits, None, None, None, None)[:4]
    if x_min is not None or x_max is not None:
        ax.set_xlim(x_min, x_max)
    if y_min is not None or y_max is not None:
        ax.set_ylim(y_min, y_max)
    return fig


def multi_figure(curves: Sequence[PlotCurve], title: str, kind: str = "total") -> Figure:
    """``multi_policy_{kind}.png``: one panel per policy (module docstring)."""
    from matplotlib.figure import Figure

    cols = min(2, len(curves))
    rows = -(-len(curves) // cols)
    fig = Figure(figsize=(7 * cols, 4.5 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, c in enumerate(curves):
        ax = axes[i // cols][i % cols]
        _draw(ax, c, f"C{i % 10}", references=True)
        _finish(ax, c.policy, kind)
    for j in range(len(curves), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(title)
    return fig
