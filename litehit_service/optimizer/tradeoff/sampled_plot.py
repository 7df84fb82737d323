"""The picture of a sampled trade-off: ``pareto/sampled_curve_total.png``.

One axes, capacity (GiB, linear, from 0) against the estimated total hit rate (%): per
policy its estimated points joined from (0, 0), the band (lowest..highest seed) shaded
around them, its estimated theoretical hit rate (dashed) and the interpolated 95 %/99 %
capacities (dotted verticals). The title names the sample (``R``, seeds) and says the
curve is an estimate. matplotlib is imported only here. Cost: O(points).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litehit_service.optimizer.tradeoff.points import GIB
from litehit_service.optimizer.tradeoff.sampled import SampledTradeoff

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["sampled_figure"]


def sampled_figure(result: SampledTradeoff, title: str) -> Figure:
    """The figure (module docstring)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5.5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for n, c in enumerate(result.curves):
        color = colors[n % len(colors)]
        caps = [0.0] + [cap / GIB for cap, _ in c.points]
        mid = [0.0] + [est.rate * 100 for _, est in c.points]
        low = [0.0] + [est.low * 100 for _, est in c.points]
        high = [0.0] + [est.high * 100 for _, est in c.points]
        ax.plot(caps, mid, "o-", color=color, markersize=3.5, linewidth=1.4,
                label=f"{c.label} (≈ estimate)")  # fmt: skip
        if result.seeds > 1:
            ax.fill_between(caps, low, high, color=color, alpha=0.12, linewidth=0,
                            label=f"{c.label}: band over {result.seeds} seeds")  # fmt: skip
            for edge in (low, high):  # the edges drawn: overlapping bands stay readable
                ax.plot(caps, edge, color=color, linewidth=0.6, alpha=0.8)
        ax.axhline(c.warmup.rate * 100, color=color, linestyle="--", linewidth=0.8, alpha=0.7)
        for pct, cap in c.marks:
            if cap is not None:
                ax.axvline(cap / GIB, color=color, linestyle=":", linewidth=0.8, alpha=0.7)
                ax.annotate(f"{pct}%", (cap / GIB, pct / 100 * c.warmup.rate * 100),
                            textcoords="offset points", xytext=(3, -10 - 9 * n), fontsize=7,
                            color=color)  # fmt: skip
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("capacity (GiB)")
    ax.set_ylabel("hit rate (%), estimated")
    seeds = f"{result.seeds} seed{'s' if result.seeds != 1 else ''}"
    ax.set_title(f"{title}\nsampled estimate: R = {result.rate:g}, {seeds} "
                 "(dashed: theoretical, dotted: 95%/99%)", fontsize=9)  # fmt: skip
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
