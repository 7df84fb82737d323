"""The picture of ``litehit lifecycle``: ``{instance_id}_lifespan.png``.

Left: the CDF of lifespans (share of lives lasting at most x), one line for every life
and one for the ended lives only (an alive life is measured to the end of the replay);
right: a histogram of lifespans over log-spaced bins, stacked: ended by eviction, by
TTL, alive at the end. A tiered instance gets one CDF line per tier instead. x in
seconds on a log axis; lives of 0 µs are drawn at half the shortest other lifespan (the
axis label says how many). matplotlib (Agg) is
imported here only; O(lives log lives).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from litehit_core.policy_replay.state import EVICTED, EXPIRED
from litehit_service.optimizer.analysis.lifecycle import LifeSummary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["lifespan_figure"]

BINS = 40
"""Histogram bins (log-spaced between the shortest and the longest lifespan)."""
CDF_POINTS = 501
"""Points of a CDF line (its quantiles at 0, 0.2, .. 100 %: the picture of every life
without drawing every life)."""
_FLOOR_S = 1e-6
"""Where lives of 0 µs are drawn when no life is longer."""


def _cdf(ax: object, seconds: np.ndarray, label: str, **style: object) -> None:
    if not len(seconds):
        return
    shares = np.linspace(0, 1, CDF_POINTS)
    xs = np.quantile(seconds, shares, method="inverted_cdf")
    ax.step(xs, shares * 100, where="post", label=f"{label} ({len(seconds)})", **style)  # type: ignore[attr-defined]


def lifespan_figure(lives: LifeSummary) -> Figure:
    """The two panels (module docstring) for one instance."""
    from matplotlib.figure import Figure

    raw = lives.lifespan_us / 1e6
    positive = raw[raw > 0]
    floor = float(positive.min()) / 2 if len(positive) else _FLOOR_S
    seconds = np.maximum(raw, floor)
    zero = int(len(raw) - len(positive))
    fig = Figure(figsize=(12, 4.8))
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.12, top=0.92, wspace=0.18)
    left, right = fig.subplots(1, 2)
    ended = ~lives.alive
    if lives.info.tier_names:
        for t, name in enumerate(lives.info.tier_names):
            _cdf(left, seconds[lives.tier == t], f"tier {t} ({name})")
    else:
        _cdf(left, seconds, "every life")
        _cdf(left, seconds[ended], "ended lives", linestyle="--")
    left.set_xscale("log")
    left.set_ylim(0, 100)
    left.set_xlabel(
        "lifespan (s, log)" + (f"; {zero} lives of 0 µs drawn at {floor:.3g} s" if zero else "")
    )
    left.set_ylabel("lives lasting at most x (%)")
    left.set_title(f"{lives.info.instance_id}: CDF of block lifespans")
    if len(seconds):
        lo, hi = float(seconds.min()), float(seconds.max())
        edges = np.geomspace(lo, hi if hi > lo else lo * 10, BINS + 1)
        parts = [
            (seconds[lives.cause == EVICTED], "evicted"),
            (seconds[lives.cause == EXPIRED], "expired (TTL)"),
            (seconds[lives.alive], "alive at the end"),
        ]
        parts = [(v, label) for v, label in parts if len(v)]
        right.hist([v for v, _ in parts], bins=edges, stacked=True,
                   label=[label for _, label in parts])  # fmt: skip
        right.legend(loc="best", fontsize="small")
    right.set_xscale("log")
    right.set_xlabel("lifespan (s, log)")
    right.set_ylabel("lives")
    right.set_title("Lifespans by how the life ended")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    if len(seconds):
        left.legend(loc="lower right", fontsize="small")
    return fig
