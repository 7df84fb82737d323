"""The pictures of a sampled trade-off: ``pareto/sampled_curve_total.png`` and, with
several policies, ``pareto/sampled_multi_policy_total.png``.

Capacity (GiB, linear, from 0) against the estimated total hit rate (%). The curve
picture: per policy its estimated points joined from (0, 0) and its 95 %/99 % capacities
as diamonds on the curve, coarse points (:meth:`~.sampled.SampledCurve.coarse`) hollow;
with one policy also its band (a 90 % interval) shaded with
its edges drawn, its estimated theoretical hit rate (dashed) and the marks as labelled
dotted verticals. With several policies the bands would hide each other's curves, so the
curve picture draws the lines only and the multi-policy picture gives each policy its own
panel with everything (shared axes). The titles name the sample (``R``, seeds) and say
the curves are estimates. matplotlib is imported only here. Cost: O(points).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litehit_service.optimizer.tradeoff.points import GIB
from litehit_service.optimizer.tradeoff.sampled import SampledCurve, SampledTradeoff

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["sampled_figure", "sampled_multi_figure"]

_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _subtitle(result: SampledTradeoff) -> str:
    seeds = f"{result.seeds} seed{'s' if result.seeds != 1 else ''}"
    band = ", band: 90% interval"
    return f"sampled estimate: R = {result.rate:g}, {seeds}{band}"


def _draw(ax: Any, c: SampledCurve, color: str, seeds: int, full: bool) -> None:
    """One policy's curve on ``ax``; ``full``: with its band, theoretical and labelled
    marks (else the line and diamond marks only)."""
    caps = [0.0] + [cap / GIB for cap, _ in c.points]
    mid = [0.0] + [est.rate * 100 for _, est in c.points]
    label = f"{c.label} (≈)" if not full else f"{c.label} (≈, 90% band)"
    ax.plot(caps, mid, "o-", color=color, markersize=3.5, linewidth=1.4, label=label)
    rough = [k for k in range(len(c.points)) if c.coarse(k)]
    if rough:
        ax.plot([caps[k + 1] for k in rough], [mid[k + 1] for k in rough], "o", color="white",
                markeredgecolor=color, markersize=5,
                label=f"{c.label}: coarse (reads low)")  # fmt: skip
    theo = c.warmup.rate * 100
    for pct, cap in c.marks:
        if cap is None:
            continue
        ax.plot([cap / GIB], [pct / 100 * theo], "D", color=color, markersize=5,
                markeredgecolor="black", markeredgewidth=0.5)  # fmt: skip
        if full:
            ax.axvline(cap / GIB, color=color, linestyle=":", linewidth=0.8, alpha=0.7)
            ax.annotate(f"{pct}% ≈ {cap / GIB:,.4g} GiB", (cap / GIB, pct / 100 * theo),
                        textcoords="offset points", xytext=(-4, -12 if pct == 95 else 6),
                        ha="right", fontsize=7, color=color)  # fmt: skip
    if not full:
        return
    if any(est.high > est.low for _, est in c.points):
        low = [0.0] + [est.low * 100 for _, est in c.points]
        high = [0.0] + [est.high * 100 for _, est in c.points]
        ax.fill_between(caps, low, high, color=color, alpha=0.15, linewidth=0)
        for edge in (low, high):
            ax.plot(caps, edge, color=color, linewidth=0.6, alpha=0.8)
    ax.axhline(theo, color=color, linestyle="--", linewidth=0.8, alpha=0.7)


def _right(result: SampledTradeoff) -> float:
    """The x axis' right end (GiB): the largest point's capacity and 3 % more."""
    return 1.03 * max((cap / GIB for c in result.curves for cap, _ in c.points), default=1.0)


def _axes(ax: Any, right: float) -> None:
    ax.set_xlim(0, right)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("capacity (GiB)")
    ax.set_ylabel("hit rate (%), estimated")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def sampled_figure(result: SampledTradeoff, title: str) -> Figure:
    """The curve picture (module docstring)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    full = len(result.curves) == 1
    for n, c in enumerate(result.curves):
        _draw(ax, c, _COLORS[n % len(_COLORS)], result.seeds, full)
    how = "dashed: theoretical, dotted: 95%/99%" if full else "diamonds: 95%/99%; bands per panel"
    ax.set_title(f"{title}\n{_subtitle(result)} ({how})", fontsize=9)
    _axes(ax, _right(result))
    fig.tight_layout()
    return fig


def sampled_multi_figure(result: SampledTradeoff, title: str) -> Figure:
    """One panel per policy, each with its band, theoretical and marks (shared axes)."""
    from matplotlib.figure import Figure

    n = len(result.curves)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(6.0 * cols, 3.8 * rows), dpi=100)
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    for k, c in enumerate(result.curves):
        ax = axes[k // cols][k % cols]
        _draw(ax, c, _COLORS[k % len(_COLORS)], result.seeds, True)
        ax.set_title(c.label, fontsize=9)
        _axes(ax, _right(result))
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    fig.suptitle(f"{title}\n{_subtitle(result)}", fontsize=9)
    fig.tight_layout()
    return fig
