"""The PNGs of ``litehit simulate`` and ``litehit sweep`` (matplotlib's Agg canvas, imported
lazily; figures are built by functions that return them, so tests read their axes).

:func:`report_figure`: LMCache's eight panels (1, 1b, 2-7) and a ninth, the exact hit rate
at every capacity with the simulated capacity marked. :func:`sweep_figure`: the exact curve
with the sweep's capacities marked on it. Histograms are drawn as one filled step outline
each (not one rectangle per bin), which keeps rendering fast.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from litehit_core.curve import GIB
from litehit_service.lmcache.simulator.simulate import Replay

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_HIST = {"histtype": "stepfilled", "edgecolor": "black", "linewidth": 0.5, "alpha": 0.85}
_FIXED_TITLES = {"axes.titley": 1.0}
"""Axes made under this rc put their titles at the fixed place: matplotlib's automatic
placement measures every axis's tick labels to dodge a top axis these figures do not
have (the same pixels; ~10 % of ``savefig``, bench/README.md issue 25)."""


def _curve_xy(replay: Replay, x_max_chunks: float, samples: int = 600) -> tuple[np.ndarray, ...]:
    """(GiB, hit rate %) along the exact curve: its corners plus log-spaced samples."""
    curve = replay.curve
    kv = replay.workload.kv_bytes_per_chunk
    caps, _ = curve.points()
    low = max(curve.first_hit, 1)
    grid = np.geomspace(low, max(x_max_chunks, low + 1), samples).astype(np.int64)
    xs = np.union1d(caps[(caps >= low) & (caps <= x_max_chunks)], grid)
    ys = curve.hit_tokens_at_many(xs) / max(curve.input_tokens, 1) * 100
    return xs * kv / GIB, ys


def report_figure(replay: Replay, data: dict[str, Any]) -> Figure:
    """The 3x3 statistics figure of :func:`~litehit_service.lmcache.simulator.simulate.report`."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    w = replay.workload
    a = data["aggregate"]
    chunks = a["cache_capacity_chunks"]
    prefix = replay.hit_prefix(chunks)
    hit_tokens = prefix * w.chunk_size
    rates = hit_tokens / w.seq_len * 100
    fig = Figure(figsize=(18, 12), dpi=80)
    fig.subplots_adjust(left=0.045, right=0.99, bottom=0.05, top=0.93, wspace=0.2, hspace=0.3)
    with rc_context(_FIXED_TITLES):
        axes = fig.subplots(3, 3)
    capacity = "unlimited" if chunks < 0 else f"{a['cache_capacity_gib']:.1f} GiB"
    fig.suptitle(
        f"Cache simulation statistics ({replay.touch_order}; chunk_size={w.first_chunk_size} "
        f"tokens, capacity={capacity}, {a['requests']:,} requests, token hit rate="
        f"{a['token_hit_rate']:.2%})",
        fontsize=12,
    )
    nonzero = rates[rates > 0]
    ax = axes[0, 0]
    ax.hist(nonzero, bins=50, **_HIST)
    ax.set(xlabel="Token hit rate (%) — zero-hit requests excluded",
           ylabel="Number of requests", title="1. Per-request token hit rate")  # fmt: skip
    share = a["hit_tokens"] / max(a["hit_tokens"] + a["miss_tokens"], 1)
    ax.text(0.98, 0.96,
            f"hit at all: {nonzero.shape[0] / max(rates.shape[0], 1):.0%} of requests\n"
            f"hit tokens: {share:.0%} of tokens",
            transform=ax.transAxes, ha="right", va="top", fontsize=10,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9})  # fmt: skip
    ax = axes[0, 1]
    high = nonzero[nonzero >= 97]
    if high.shape[0]:
        ax.hist(high, bins=20, range=(97, 100), **_HIST)
        ax.text(0.03, 0.95, f"100% hit: {int((rates == 100).sum()):,} requests",
                transform=ax.transAxes, va="top", fontsize=9)  # fmt: skip
    else:  # an empty histogram would draw a meaningless -0.04..0.04 axis
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.text(0.5, 0.5, f"no request reaches a 97% hit rate\n(highest: {rates.max():.1f}%)",
                transform=ax.transAxes, ha="center", va="center", fontsize=11)  # fmt: skip
    ax.set_xlim(97, 100)
    ax.set(xlabel="Token hit rate (%) — 97–100% zoom", ylabel="Number of requests",
           title="1b. Per-request token hit rate (97–100%)")  # fmt: skip
    ax = axes[0, 2]
    ax.hist(prefix[prefix > 0], bins=50, **_HIST)
    ax.set(xlabel="Hit prefix length (chunks) — zero-hit requests excluded",
           ylabel="Number of requests", title="2. Hit prefix length per request")  # fmt: skip
    keys, offsets = w.keys, w.offsets
    owner = np.repeat(np.arange(w.requests, dtype=np.int64), np.diff(offsets))
    hit = (np.arange(keys.shape[0], dtype=np.int64) - offsets[:-1][owner]) < prefix[owner]
    ax = axes[1, 0]
    if hit.any():
        reuse = np.unique(keys[hit], return_counts=True)[1]
        cap = int(min(reuse.max(), 100))
        ax.hist(reuse[reuse <= cap], bins=np.arange(1, cap + 2), **_HIST)
        above = int((reuse > cap).sum())
        if above:
            ax.text(0.97, 0.95, f"max={int(reuse.max()):,}\n{above:,} chunks above cap",
                    transform=ax.transAxes, ha="right", va="top", fontsize=9)  # fmt: skip
    ax.set(xlabel="Times a chunk was hit (capped at 100)", ylabel="Number of unique chunks",
           title="3. Chunk reuse count")  # fmt: skip
    ax = axes[1, 1]
    rolling = np.cumsum(hit_tokens) / np.cumsum(w.seq_len) * 100
    ax.plot(np.arange(1, rolling.shape[0] + 1), rolling, linewidth=1.5)
    ax.set_ylim(0, 100)
    ax.grid(True, linestyle="--", alpha=0.5)
    ax.set(xlabel="Request index", ylabel="Cumulative token hit rate (%)",
           title="4. Rolling token hit rate over time")  # fmt: skip
    ax = axes[1, 2]
    ax.hist(w.seq_len, bins=50, **_HIST)
    ax.set(xlabel="Input length (tokens / seq_len)", ylabel="Number of requests",
           title="5. Input length per request")  # fmt: skip
    order = np.argsort(keys, kind="stable")
    same = keys[order[1:]] == keys[order[:-1]]
    previous = np.full(keys.shape[0], -1, np.int64)
    previous[order[1:][same]] = order[:-1][same]
    where = np.flatnonzero(hit)
    ax = axes[2, 0]
    if where.shape[0]:
        ax.hist(where - previous[where], bins=50, **_HIST)
    ax.set(xlabel="Global span (chunks between last store and hit)",
           ylabel="Number of hit chunks", title="6. Global span distribution")  # fmt: skip
    ax = axes[2, 1]
    if where.shape[0]:
        ax.hist(replay.batch.depths[hit] - 1, bins=50, **_HIST)
    ax.set(xlabel="Cache position (0 = MRU, max = LRU)", ylabel="Number of hit chunks",
           title="7. Cache position at hit")  # fmt: skip
    ax = axes[2, 2]
    _draw_curve(ax, replay, chunks)
    ax.set_title("8. Exact token hit rate at every capacity (one replay)")
    return fig


def _draw_curve(ax: Any, replay: Replay, marked_chunks: int) -> None:
    """The exact curve on a log axis, its theoretical maximum dashed, a capacity marked."""
    from matplotlib.ticker import NullLocator

    curve = replay.curve
    kv = replay.workload.kv_bytes_per_chunk
    top = max(curve.saturation, 1) * 2
    if marked_chunks > 0:
        top = max(top, marked_chunks * 2)
    xs, ys = _curve_xy(replay, top)
    ax.plot(xs, ys, linewidth=1.6)
    ax.axhline(curve.infinite_hit_rate * 100, linestyle="--", linewidth=1.0, color="gray")
    if marked_chunks > 0:
        rate = curve.hit_rate_at(marked_chunks) * 100
        ax.plot([marked_chunks * kv / GIB], [rate], marker="o", color="C3")
        # the label goes where the rising curve is not: above-left of the point when it
        # sits in the right half (a label right of it would be cut at the edge), else
        # below-right
        right_half = marked_chunks * marked_chunks > top * max(curve.first_hit, 1)
        ax.annotate(f"{marked_chunks * kv / GIB:.3g} GiB: {rate:.2f}%",
                    (marked_chunks * kv / GIB, rate), xytext=(-8, 8) if right_half else (8, -8),
                    ha="right" if right_half else "left", va="bottom" if right_half else "top",
                    textcoords="offset points", fontsize=9, color="C3")  # fmt: skip
    ax.set_xscale("log")
    ax.xaxis.set_minor_locator(NullLocator())  # decades only: fewer ticks to lay out
    ax.set_ylim(0, 100)
    ax.grid(True, linestyle="--", alpha=0.4)
    ax.set(xlabel="Cache capacity (GiB, log scale)", ylabel="Token hit rate (%)")


def sweep_figure(replay: Replay, data: dict[str, Any], linear: bool = False) -> Figure:
    """The exact curve from the smallest to the largest swept capacity, the sweep's
    capacities marked on it, the theoretical maximum dashed."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    w = replay.workload
    kv = w.kv_bytes_per_chunk
    points = data["points"]
    fig = Figure(figsize=(9, 5.4), dpi=100, layout="constrained")
    with rc_context(_FIXED_TITLES):
        ax = fig.add_subplot()
    top_chunks = max(points[-1]["capacity_chunks"], 1)
    curve = replay.curve
    if linear:
        xs = np.linspace(0, top_chunks, 800).round().astype(np.int64)
        caps, _ = curve.points()
        xs = np.union1d(xs, caps[caps <= top_chunks])
        ys = curve.hit_tokens_at_many(xs) / max(curve.input_tokens, 1) * 100
        xs = xs * kv / GIB
    else:
        xs, ys = _curve_xy(replay, top_chunks)
    ax.plot(xs, ys, linewidth=2, label="exact (every capacity, one replay)")
    ax.plot([p["capacity_gib"] for p in points], [p["hit_rate"] * 100 for p in points],
            "o", markersize=4, label="sweep capacities")  # fmt: skip
    ax.axhline(curve.infinite_hit_rate * 100, linestyle="--", linewidth=1, color="gray",
               label=f"unlimited: {curve.infinite_hit_rate:.2%}")  # fmt: skip
    if not linear:
        ax.set_xscale("log")
    ax.set_xlim(points[0]["capacity_gib"] * (1 if linear else 0.9),
                points[-1]["capacity_gib"] * (1.02 if linear else 1.1))  # fmt: skip
    ax.set_ylim(0, 100)
    ax.grid(True, which="both", linestyle="--", alpha=0.5)
    ax.set_xlabel("Cache capacity (GiB)")
    ax.set_ylabel("Token hit rate (%)")
    model = w.model or "all models"
    ax.set_title(
        f"Token cache hit rate vs capacity ({replay.touch_order})\n(chunk_size = "
        f"{w.first_chunk_size} tokens, {w.requests:,} requests, model = {model}, "
        f"{'linear' if linear else 'log'} scale)"
    )
    # below the axes: inside, any corner covers points of some curve (the last ones rise)
    fig.legend(loc="outside lower center", ncols=3, fontsize=9, frameon=False)
    return fig


def save(fig: Figure, path: str | os.PathLike[str], fmt: str = "png") -> None:
    """Write ``fig`` to ``path`` in ``fmt`` (the caller publishes it atomically)."""
    fig.savefig(path, format=fmt)
