"""Exact hit-rate curves from a facts ledger: every capacity at once, no sweep.

Per instance, the rows' hit curves go into one :class:`~litehit_core.HitCurveAccumulator`
with weight ``block_size_tokens``, so its cumulative "hits" are hit *tokens*; divided by the
sum of ``input_token_len`` they are the token hit rate of an LRU of any capacity. The curve
is exact at every capacity, in the unit of the instance's model: piecewise linear in blocks
(model ``lru``, converted to GiB with the instance's ``block_bytes``; one block size per
instance, checked) or a staircase in bytes (model ``hybrid``).

This module computes (:func:`build_curves`), renders the text table (:func:`format_table`),
the breakpoint CSV (:func:`write_breakpoints_csv`) and the PNG (:func:`plot_curves`, the
matplotlib Agg canvas, imported lazily; no display needed). Files are written to
``<path>.<pid>.tmp`` by the writers; ``litehit curve`` publishes them with
:func:`litehit_service.offline.outputs.atomic_outputs`; :func:`run_curve` is the whole
``litehit curve`` command.
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO

import numpy as np

from litehit_core import FactRow, InvalidRequestError, read_facts
from litehit_core.curve import GIB, MARK_PERCENTS, InstanceCurve
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES
from litehit_service.offline.outputs import atomic_outputs, progress, run_line, tmp_path

TABLE_ROWS = 30
"""Log-spaced capacity rows of the text table (fewer when the curve saturates early)."""
CSV_HEADER = (
    "instance_id",
    "capacity_blocks",
    "capacity_bytes",
    "capacity_gb",
    "hit_tokens",
    "hit_rate",
)
"""The breakpoint CSV: ``capacity_blocks`` is 0 for curves in bytes (hybrid instances)."""
PLOT_SAMPLES = 1500
"""Log-spaced samples per line added to the exact breakpoints (a straight piece in blocks
is curved on a log axis, so breakpoints alone would draw it wrong)."""


class CurveError(InvalidRequestError):
    """The facts cannot make a curve (mixed block sizes, no rows, unknown instance)."""


def build_curves(rows: Iterable[FactRow], instance_id: str | None = None) -> list[InstanceCurve]:
    """One exact curve per instance of ``rows`` (or only ``instance_id``), sorted by id.

    Every row is still read (and so validated by the reader). Raises :class:`CurveError`
    when an instance's rows disagree on ``block_size_tokens``, ``block_bytes`` or ``model``
    (naming both values and a trace_id of each), when there are no rows, or when
    ``instance_id`` does not occur (listing the instances present). O(total segments) plus
    O(B log B) per instance for the breakpoints.
    """
    curves: dict[str, InstanceCurve] = {}
    seen: set[str] = set()
    for row in rows:
        iid = row.instance_id
        if instance_id is not None and iid != instance_id:
            seen.add(iid)
            continue
        cur = curves.get(iid)
        if cur is None:
            cur = curves[iid] = InstanceCurve(
                iid, row.block_size_tokens, row.block_bytes, row.trace_id, row.model
            )
        elif (
            row.block_bytes != cur.block_bytes
            or row.block_size_tokens != cur.block_size_tokens
            or row.model != cur.model
        ):
            raise CurveError(_mixed_message(cur, row))
        cur.add(row.hit_curve, row.input_token_len)
    if not curves:
        if instance_id is not None and seen:
            raise CurveError(
                f"instance_id {instance_id!r} is not in the facts; instances present: "
                + ", ".join(repr(i) for i in sorted(seen))
            )
        raise CurveError("the facts have no rows")
    out = [curves[i] for i in sorted(curves)]
    for cur in out:
        cur.breakpoints()
    return out


def _mixed_message(cur: InstanceCurve, row: FactRow) -> str:
    if row.block_bytes != cur.block_bytes:
        name, old, new = "block_bytes", cur.block_bytes, row.block_bytes
    elif row.model != cur.model:
        name, old, new = "model", cur.model, row.model
    else:
        name, old, new = "block_size_tokens", cur.block_size_tokens, row.block_size_tokens
    return (
        f"instance {cur.instance_id!r} has rows with different {name}: {old} "
        f"(trace_id {cur.first_trace_id!r}) and {new} (trace_id {row.trace_id!r}); "
        "a curve needs one block size and one model per instance"
    )


# ---------------------------------------------------------------- text table


def table_capacities(curve: InstanceCurve, rows: int = TABLE_ROWS) -> list[int]:
    """About ``rows`` capacities (curve's unit) up to saturation. Blocks: log-spaced from 1
    block. Bytes (a staircase): every corner, where the hit rate rises, if there are at
    most ``rows``; else log-spaced from the first capacity with a hit. O(rows + B)."""
    top = curve.saturation
    if top <= 0:
        return []
    if rows < 2:
        return [top]
    low = 1
    if curve.unit != "blocks":
        points = curve.breakpoints()
        corners = [c for (c, h), (_, g) in zip(points[1:], points) if h > g]
        if len(corners) <= rows:
            return corners
        low = corners[0]
    ratio = (top / low) ** (1 / (rows - 1))
    return sorted({max(low, min(top, round(low * ratio**k))) for k in range(rows)} | {low, top})


def format_table(curves: Sequence[InstanceCurve], rows: int = TABLE_ROWS) -> str:
    """The stdout table: per instance a header, ~``rows`` log-spaced capacities and the
    marked points (merged in capacity order). Capacities show in GiB and in the curve's
    unit (blocks, or bytes for hybrid instances). O(instances x (rows + marks) x log B)."""
    out: list[str] = []
    for cur in curves:
        inf = cur.infinite_hit_tokens
        unit = cur.unit
        out.append(
            f"instance {cur.instance_id}: {cur.requests} requests, {cur.input_tokens} input "
            f"tokens, blocks of {cur.block_size_tokens} tokens = {cur.block_bytes} bytes"
            + ("" if unit == "blocks" else f" (model {cur.model}: capacities in bytes)")
        )
        sat = cur.saturation
        out.append(
            f"theoretical max (infinite capacity): hit rate {cur.infinite_hit_rate:.6f} "
            f"({inf} hit tokens), first reached at {sat} {unit} = {cur.capacity_gb(sat):.6g} GiB"
        )
        labels: dict[int, list[str]] = {c: [] for c in table_capacities(cur, rows)}
        for m in cur.marks():
            labels.setdefault(m.capacity, []).append(f"{m.percent}%")
        labels.setdefault(sat, [])
        column = f"capacity_{unit}"
        out.append(f"{'capacity_gib':>14} {column:>15} {'hit_rate':>9} {'of_max':>7}  mark")
        for capacity in sorted(labels):
            hits = cur.hit_tokens_at(capacity)
            of_max = f"{100 * hits / inf:.1f}%" if inf else "-"
            tags = labels[capacity]
            mark = ", ".join(tags) + " of max" if tags else ""
            if capacity == sat and inf:
                mark = f"{mark}; max" if mark else "max"
            out.append(
                f"{cur.capacity_gb(capacity):>14.6g} {capacity:>15} {cur.rate(hits):>9.6f} "
                f"{of_max:>7}  {mark}".rstrip()
            )
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------- files


def write_breakpoints(curves: Sequence[InstanceCurve], fh: IO[str]) -> int:
    """Write the CSV (:data:`CSV_HEADER`, every exact breakpoint of every curve, instances
    in order) to ``fh``; returns the number of data rows. O(total breakpoints)."""
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    n = 0
    for cur in curves:
        iid, ub, tokens = cur.instance_id, cur.unit_bytes, cur.input_tokens
        blocks = cur.unit == "blocks"
        for c, h in cur.breakpoints():
            rate = h / tokens if tokens else 0.0
            writer.writerow((iid, c if blocks else 0, c * ub, repr(c * ub / GIB), h, repr(rate)))
        n += len(cur.breakpoints())
    return n


def write_breakpoints_csv(curves: Sequence[InstanceCurve], path: str | os.PathLike[str]) -> int:
    """Write the breakpoint CSV to ``<path>.<pid>.tmp`` (published by ``atomic_outputs``)."""
    with open(tmp_path(path), "w", encoding="utf-8", newline="") as fh:
        return write_breakpoints(curves, fh)


# ---------------------------------------------------------------- plot


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


def plot_curves(
    curves: Sequence[InstanceCurve],
    path: str | os.PathLike[str],
    linear: bool = False,
    title: str = "",
) -> None:
    """Draw one line per curve (capacity GiB vs token hit rate) to a PNG at ``<path>.<pid>.tmp``.

    Log x axis unless ``linear``; the theoretical maximum of each curve is a dashed
    horizontal line in the curve's colour; the :data:`MARK_PERCENTS` points are marked and
    labelled. Lines are exact: every breakpoint is drawn, plus log-spaced samples between
    them (evaluated on the piecewise-linear curve). O(B + samples) per curve plus rendering.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    fig = Figure(figsize=(10, 6), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    x_max_gb = max(cur.capacity_gb(max(cur.saturation, 1)) for cur in curves)
    if linear:
        x_max_gb *= 1.1
    elif len(curves) == 1:  # room for the flat tail and the labels right of the 99% point
        x_max_gb = max(2.0 * x_max_gb, 8.0 * curves[0].mark(MARK_PERCENTS[-1]).capacity_gb)
    else:
        x_max_gb *= 2.0
    # from the first capacity with a hit (a block for block curves at the least), so the
    # log axis starts where the curves do
    x_min_gb = min(cur.capacity_gb(max(cur.first_hit, 1)) for cur in curves)
    y_top = max(cur.infinite_hit_rate for cur in curves)
    single = len(curves) == 1
    for idx, cur in enumerate(curves):
        xs, ys = sample_curve(
            cur, x_max_gb * GIB / cur.unit_bytes, linear, x_start=x_min_gb * GIB / cur.unit_bytes
        )
        xs_gb = xs * (cur.unit_bytes / GIB)
        color = f"C{idx % 10}"
        inf_rate = cur.infinite_hit_rate
        marks = cur.marks()
        label = (
            f"{cur.instance_id} ({cur.block_size_tokens}-token blocks, max {100 * inf_rate:.2f}%)"
        )
        if not single:  # several lines: the marked capacities go in the legend
            label += "\n" + "/".join(f"{m.percent}" for m in marks) + "% of max at "
            label += " / ".join(_short_gb(m.capacity_gb) for m in marks)
        ax.plot(xs_gb, ys, color=color, linewidth=1.6, label=label)
        ax.axhline(inf_rate, color=color, linestyle="--", linewidth=1.0, alpha=0.8)
        for k, m in enumerate(marks):
            if not linear and m.capacity < 1:
                continue  # capacity 0 has no place on a log axis
            ax.vlines(m.capacity_gb, 0, m.hit_rate, colors=color, linestyles=":", alpha=0.6)
            ax.plot([m.capacity_gb], [m.hit_rate], marker="o", color=color, markersize=5)
            if not single:  # a short tag above-left of the point (the curve is lower there)
                ax.annotate(
                    f"{m.percent}%",
                    xy=(m.capacity_gb, m.hit_rate),
                    xytext=(-4, 3),
                    textcoords="offset points",
                    fontsize=7,
                    color=color,
                    ha="right",
                    va="bottom",
                )
                continue
            # right of the point and below 90% of the max, where the curve is not
            x_text = m.capacity_gb * 1.3 if not linear else m.capacity_gb + 0.02 * x_max_gb
            ax.annotate(
                f"{m.percent}% of max: {_short_gb(m.capacity_gb)}",
                xy=(m.capacity_gb, m.hit_rate),
                xytext=(x_text, inf_rate * (0.78 - 0.08 * k)),
                textcoords="data",
                fontsize=8,
                color=color,
                va="center",
                arrowprops={"arrowstyle": "-", "color": color, "alpha": 0.5, "linewidth": 0.7},
            )
    if not linear:
        ax.set_xscale("log")
        ax.set_xlim(x_min_gb, x_max_gb)
        ax.set_xlabel("LRU capacity (GiB, log scale)")
    else:
        ax.set_xlim(0, x_max_gb)
        ax.set_xlabel("LRU capacity (GiB)")
    ax.set_ylim(0, min(1.0, y_top * 1.12) if y_top > 0 else 1.0)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    ax.set_ylabel("token hit rate")
    ax.set_title(title or "Exact LRU prefix-cache hit rate vs capacity")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(  # below the axes: never on top of a curve
        loc="outside lower center",
        ncols=min(len(curves), 3),
        fontsize=8,
        title="instance (dashed line: its infinite-capacity maximum)",
        title_fontsize=8,
    )
    with open(tmp_path(path), "wb") as fh:
        fig.savefig(fh, format="png")


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


# ---------------------------------------------------------------- the command


@dataclass(frozen=True)
class CurveRun:
    """What :func:`run_curve` built: the curves, their table text and what was written."""

    curves: list[InstanceCurve]
    table: str
    requests: int
    elapsed_s: float
    outputs: tuple[str, ...]

    def summary_line(self) -> str:
        """The one-line summary printed on stderr."""
        dest = ", ".join(self.outputs) if self.outputs else "table only"
        parts = f"{len(self.curves)} instances"
        return run_line("curve", self.requests, "requests", parts, self.elapsed_s, dest)


def run_curve(
    facts_path: str,
    png: str | None = None,
    csv_path: str | None = None,
    *,
    instance_id: str | None = None,
    linear: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> CurveRun:
    """Read a ledger once, build every instance's exact curve, write the PNG and the
    breakpoint CSV (all or nothing) and render the table. Raises LocatedError (a bad row,
    or a line longer than ``max_line_bytes`` bytes) or :class:`CurveError`. O(facts) +
    O(B log B) per instance + the PNG."""
    started = time.perf_counter()
    counter = [0]

    def build() -> list[InstanceCurve]:
        facts = read_facts(facts_path, max_line_bytes=max_line_bytes)
        return build_curves(progress(_counted(facts, counter), "req"), instance_id)

    title = f"Exact LRU prefix-cache hit rate: {os.path.basename(facts_path)}"
    curves, outputs = render_curves(build, png, csv_path, linear=linear, title=title)
    return CurveRun(
        curves, format_table(curves), counter[0], time.perf_counter() - started, outputs
    )


def render_curves(
    build: Callable[[], list[InstanceCurve]],
    png: str | None,
    csv_path: str | None,
    *,
    linear: bool = False,
    title: str = "",
) -> tuple[list[InstanceCurve], tuple[str, ...]]:
    """``build()`` the curves, then write the breakpoint CSV and the PNG, all or nothing
    (nothing is published if building or writing fails): the one output path of ``litehit
    curve``, from a ledger or from a server. Returns the curves and the files written."""
    outputs = tuple(p for p in (png, csv_path) if p is not None)
    with atomic_outputs(outputs):
        curves = build()
        if csv_path is not None:
            write_breakpoints_csv(curves, csv_path)
        if png is not None:
            plot_curves(curves, png, linear=linear, title=title)
    return curves, outputs


def _counted(rows: Iterable[FactRow], counter: list[int]) -> Iterator[FactRow]:
    n = 0
    for n, row in enumerate(rows, 1):  # noqa: B007 - n is read after the loop
        yield row
    counter[0] = n
