"""Exact hit-rate curves from a facts ledger: every capacity at once, no sweep.

Per instance, the rows' hit curves go into one :class:`~litehit_core.HitCurveAccumulator`
with weight ``block_size_tokens``, so its cumulative "hits" are hit *tokens*; divided by the
sum of ``input_token_len`` they are the token hit rate of an LRU of any capacity. The curve
is exact at every capacity, in the unit of the instance's model: piecewise linear in blocks
(model ``lru``, converted to GiB with the instance's ``block_bytes``; one block size per
instance, checked) or a staircase in bytes (model ``hybrid``).

A sampled ledger (``litehit replay --sample-rate``) gives estimates of the whole trace's
curve (:func:`ledger_curves`, :func:`~litehit_core.sampled_facts.estimated_curve`), in
the whole trace's capacities, labelled in the table (``≈``), the CSV (the ledger's sample
line first) and the plot's title.

This module computes (:func:`build_curves`), renders the text table (:func:`format_table`)
and the breakpoint CSV (:func:`write_breakpoints_csv`); the plot (PNG, SVG or PDF) is
:mod:`litehit_service.litehit.plot`'s. Files are written to ``<path>.<pid>.tmp`` by the
writers; ``litehit curve`` publishes them with
:func:`litehit_service.offline.outputs.atomic_outputs`; :func:`run_curve` is the whole
``litehit curve`` command.
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import IO

from litehit_core import FACTS_FILENAME, FactRow, InvalidRequestError, LocatedError, read_facts
from litehit_core.curve import GIB, InstanceCurve
from litehit_core.facts import LedgerSample, ledger_sample, sample_line
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES
from litehit_core.sampled_facts import SampleCounts, count_rows
from litehit_service.litehit.plot import curve_title, plot_curves, plot_format
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


def read_sample(facts_path: str | os.PathLike[str]) -> LedgerSample | None:
    """The sample of a ledger (None: exact); LocatedError at line 1 for a bad sample line.
    O(first line)."""
    try:
        return ledger_sample(facts_path)
    except ValueError as exc:
        raise LocatedError(os.fspath(facts_path), 1, str(exc)) from None


def ledger_curves(
    facts_path: str | os.PathLike[str],
    instance_id: str | None = None,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    counter: list[int] | None = None,
) -> tuple[LedgerSample | None, list[InstanceCurve]]:
    """:func:`build_curves` of a ledger (the rows counted into ``counter[0]`` with a
    progress bar when ``counter`` is given), and its sample: for a sampled ledger the
    curves are the whole trace's estimates
    (:func:`~litehit_core.sampled_facts.estimated_curve`). O(facts) + O(B log B) per
    instance."""
    sample, curves, _ = sampled_curves(
        facts_path, instance_id, max_line_bytes=max_line_bytes, counter=counter
    )
    return sample, curves


def sampled_curves(
    facts_path: str | os.PathLike[str],
    instance_id: str | None = None,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    counter: list[int] | None = None,
) -> tuple[LedgerSample | None, list[InstanceCurve], dict[str, int]]:
    """:func:`ledger_curves` and, per instance of a ledger sampled by subtree, the
    capacity below which its estimate is coarse
    (:meth:`~litehit_core.sampled_facts.SampleCounts.coarse_below`; empty otherwise).
    O(facts) + O(B log B) per instance."""
    sample = read_sample(facts_path)
    rows: Iterable[FactRow] = read_facts(facts_path, max_line_bytes=max_line_bytes)
    if counter is not None:
        rows = _counted(progress(rows, "req"), counter)
    if sample is None:
        return None, build_curves(rows, instance_id), {}
    counts = SampleCounts()
    curves = build_curves(count_rows(rows, counts), instance_id)
    coarse = {c.instance_id: counts.coarse_below(c, sample.rate, sample.unit) for c in curves}
    return sample, [counts.curve(c, sample.rate, sample.unit) for c in curves], coarse


def sample_label(sample: LedgerSample) -> str:
    """``≈ estimates from a sample: R = 0.01, seed 0`` (every sampled output says it)."""
    by = ", by subtree" if sample.unit == "subtree" else ""
    return f"≈ estimates from a sample: R = {sample.rate:g}, seed {sample.seed}{by}"


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
        corners = [c for (_, g), (c, h) in pairwise(points) if h > g]
        if len(corners) <= rows:
            return corners
        low = corners[0]
    ratio = (top / low) ** (1 / (rows - 1))
    return sorted({max(low, min(top, round(low * ratio**k))) for k in range(rows)} | {low, top})


def format_table(
    curves: Sequence[InstanceCurve],
    rows: int = TABLE_ROWS,
    sample: LedgerSample | None = None,
    coarse: dict[str, int] | None = None,
) -> str:
    """The stdout table: per instance a header, ~``rows`` log-spaced capacities and the
    marked points (merged in capacity order). Capacities show in GiB and in the curve's
    unit (blocks, or bytes for hybrid instances). A ``sample``'s curves are estimates: a
    first line says so (:func:`sample_label`) and every hit rate shows ``≈``; capacities
    below an instance's ``coarse`` threshold (:func:`sampled_curves`) are marked coarse.
    O(instances x (rows + marks) x log B)."""
    out: list[str] = []
    approx = "≈" if sample is not None else ""
    if sample is not None:
        out.append(f"{sample_label(sample)} (capacities and hits are the whole trace's)")
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
            f"theoretical max (infinite capacity): hit rate {approx}{cur.infinite_hit_rate:.6f} "
            f"({inf} hit tokens), first reached at {sat} {unit} = {cur.capacity_gb(sat):.6g} GiB"
        )
        below = (coarse or {}).get(cur.instance_id, 0)
        if below:
            out.append(
                f"coarse below {below} {unit}: the sample's cache holds fewer than 200 of "
                "the trace's average requests there, where the estimate reads low"
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
            if capacity < below:
                mark = f"{mark}; coarse" if mark else "coarse"
            out.append(
                f"{cur.capacity_gb(capacity):>14.6g} {capacity:>15} "
                f"{approx + format(cur.rate(hits), '.6f'):>9} "
                f"{of_max:>7}  {mark}".rstrip()
            )
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------- files


def write_breakpoints(
    curves: Sequence[InstanceCurve], fh: IO[str], sample: LedgerSample | None = None
) -> int:
    """Write the CSV (:data:`CSV_HEADER`, every exact breakpoint of every curve, instances
    in order) to ``fh``; returns the number of data rows. Estimates from a ``sample``:
    the ledger's sample line first. O(total breakpoints)."""
    if sample is not None:
        fh.write(sample_line(sample) + "\n")
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


def write_breakpoints_csv(
    curves: Sequence[InstanceCurve],
    path: str | os.PathLike[str],
    sample: LedgerSample | None = None,
) -> int:
    """Write the breakpoint CSV to ``<path>.<pid>.tmp`` (published by ``atomic_outputs``)."""
    with open(tmp_path(path), "w", encoding="utf-8", newline="") as fh:
        return write_breakpoints(curves, fh, sample)


# ---------------------------------------------------------------- the command


@dataclass(frozen=True)
class CurveRun:
    """What :func:`run_curve` built: the curves, their table text and what was written."""

    curves: list[InstanceCurve]
    table: str
    requests: int
    elapsed_s: float
    outputs: tuple[str, ...]
    sample: LedgerSample | None = None

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
    block_bytes_unknown: bool = False,
) -> CurveRun:
    """Read a ledger once, build every instance's exact curve, write the plot (``png``:
    a .png, .svg or .pdf path, checked before anything is read) and the breakpoint CSV
    (all or nothing) and render the table. The plot's title names the trace
    (:func:`trace_name`) and the instances; ``block_bytes_unknown`` draws capacities in
    blocks (see :mod:`~litehit_service.litehit.plot`). Raises LocatedError (a bad row, or
    a line longer than ``max_line_bytes`` bytes), :class:`CurveError` or
    InvalidRequestError (the plot's extension). O(facts) + O(B log B) per instance + the
    plot."""
    started = time.perf_counter()
    counter = [0]
    sample = read_sample(facts_path)

    coarse: dict[str, int] = {}

    def build() -> list[InstanceCurve]:
        _, curves, below = sampled_curves(
            facts_path, instance_id, max_line_bytes=max_line_bytes, counter=counter
        )
        coarse.update(below)
        return curves

    trace = trace_name(facts_path)
    label = f" ({sample_label(sample)})" if sample is not None else ""
    curves, outputs = render_curves(
        build,
        png,
        csv_path,
        linear=linear,
        title=lambda curves: _titled(curve_title(curves, trace), sample) + label,
        block_bytes_unknown=block_bytes_unknown,
        sample=sample,
    )
    return CurveRun(
        curves,
        format_table(curves, sample=sample, coarse=coarse),
        counter[0],
        time.perf_counter() - started,
        outputs,
        sample,
    )


def _titled(title: str, sample: LedgerSample | None) -> str:
    """A plot title; "Exact" becomes "Estimated" for a sample's curves."""
    return title if sample is None else title.replace("Exact ", "Estimated ", 1)


def trace_name(facts_path: str | os.PathLike[str]) -> str:
    """The trace a ledger came from, as far as its path tells (the ledger holds no trace
    name): for ``<dir>/litehit_facts.csv`` the folder's name without the ``_results`` that
    ``litehit convert --emit-config`` configures (``trace_results`` -> ``trace``), else the
    file's name without its extension. O(len(path))."""
    path = os.path.abspath(os.fspath(facts_path))
    name = os.path.basename(path)
    if name != FACTS_FILENAME:
        return os.path.splitext(name)[0]
    folder = os.path.basename(os.path.dirname(path))
    return folder.removesuffix("_results") or folder or name


def render_curves(
    build: Callable[[], list[InstanceCurve]],
    png: str | None,
    csv_path: str | None,
    *,
    linear: bool = False,
    title: str | Callable[[list[InstanceCurve]], str] = "",
    block_bytes_unknown: bool = False,
    sample: LedgerSample | None = None,
) -> tuple[list[InstanceCurve], tuple[str, ...]]:
    """``build()`` the curves, then write the breakpoint CSV and the plot (``png``: its
    format from its extension, checked before ``build()``), all or nothing (nothing is
    published if building or writing fails): the one output path of ``litehit curve``,
    from a ledger or from a server. ``title`` is the plot's, or makes it from the curves.
    Returns the curves and the files written."""
    if png is not None:
        plot_format(png)  # a bad extension fails before any work
    outputs = tuple(p for p in (png, csv_path) if p is not None)
    with atomic_outputs(outputs):
        curves = build()
        if csv_path is not None:
            write_breakpoints_csv(curves, csv_path, sample)
        if png is not None:
            text = title(curves) if callable(title) else title
            plot_curves(
                curves, png, linear=linear, title=text, block_bytes_unknown=block_bytes_unknown
            )
    return curves, outputs


def _counted(rows: Iterable[FactRow], counter: list[int]) -> Iterator[FactRow]:
    n = 0
    for n, row in enumerate(rows, 1):  # noqa: B007 - n is read after the loop
        yield row
    counter[0] = n
