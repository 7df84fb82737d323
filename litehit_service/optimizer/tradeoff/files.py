"""What ``litehit tradeoff`` writes, and reads back for ``--skip-run``.

Under the output folder, all published together or not at all
(:func:`~litehit_service.offline.outputs.atomic_outputs`):

- ``pareto/csv_results/{policy}_{capacity_bytes}.csv`` per replayed (or, spec §7b, exactly
  read) capacity, sweep and bisection alike, and ``{policy}_inf.csv`` for the warm-up: one
  row per instance (``scope`` ``instance``; ``group_quota_bytes`` its group's share of the
  capacity) and a last ``total`` row (sums; per-group and block columns empty); columns
  :data:`POINT_HEADER` (block counts empty for a point read from LiteHit's curve).
  A run removes, after publishing, the older ``{policy}_*.csv`` of the policies it ran.
- ``pareto/pareto_curve_total.csv``: the curves, :data:`SUMMARY_HEADER`, one row per
  ``theoretical`` (the warm-up: capacity = ``M``, the peak cached bytes), ``point`` (in
  sweep order; ``plotted`` 0 for a dropped descending point), ``refine`` (a bisection
  replay) and ``p95``/``p99`` (the refined capacities; ``bracket_low_bytes`` the
  bracket's bottom) per policy. ``--skip-run`` re-plots from this file alone.
- with ``--hit-rate-type local|remote|all``, ``pareto/pareto_curve_local.csv`` and/or
  ``pareto_curve_remote.csv``: the same rows of the same replays with the local or
  remote hit tokens (:data:`HIT_RATE_TYPES`), without the ``p95``/``p99`` rows (the
  marks are the total curve's).
- ``pareto/litehit_exact_total.csv``: LiteHit's exact tail-first and head-first curves
  tabulated per policy (:data:`REFERENCE_HEADER`).

Hit rates are printed with 6 decimals beside the integer token counts they come from;
GiB with 9 significant digits. Cost: O(points x instances) text.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from litehit_core import LocatedError
from litehit_service.offline.outputs import publish_files
from litehit_service.optimizer.tradeoff.exact_curve import TOUCH_ORDERS
from litehit_service.optimizer.tradeoff.points import GIB, Point, keep_rising
from litehit_service.optimizer.tradeoff.sweep import TradeoffResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CSV_DIR",
    "CURVE_PNG",
    "HIT_RATE_TYPES",
    "MULTI_PNG",
    "POINT_HEADER",
    "REFERENCE_CSV",
    "REFERENCE_HEADER",
    "SUMMARY_CSV",
    "SUMMARY_HEADER",
    "ReferenceRow",
    "SummaryRow",
    "curve_png",
    "multi_png",
    "point_csv",
    "point_file",
    "read_reference",
    "read_summary",
    "reference_rows",
    "reference_text",
    "remove_stale",
    "rows_text",
    "summary_csv",
    "type_hits",
    "summary_rows",
    "with_plotted",
    "write_files",
]

HIT_RATE_TYPES = ("total", "local", "remote")
"""The curves a run can write: hit tokens over input tokens, all of them (``total``: the
one swept, stopped and marked), or only those of blocks the request's mask marks local
(``local``) or not (``remote``), from the same replays."""
HIT_RATE_TYPE = "total"
PARETO = "pareto"
CSV_DIR = os.path.join(PARETO, "csv_results")


def curve_png(kind: str) -> str:
    """``pareto/pareto_curve_{kind}.png``."""
    return os.path.join(PARETO, f"pareto_curve_{kind}.png")


def multi_png(kind: str) -> str:
    """``pareto/multi_policy_{kind}.png``."""
    return os.path.join(PARETO, f"multi_policy_{kind}.png")


def summary_csv(kind: str) -> str:
    """``pareto/pareto_curve_{kind}.csv``."""
    return os.path.join(PARETO, f"pareto_curve_{kind}.csv")


CURVE_PNG = curve_png(HIT_RATE_TYPE)
MULTI_PNG = multi_png(HIT_RATE_TYPE)
SUMMARY_CSV = summary_csv(HIT_RATE_TYPE)
REFERENCE_CSV = os.path.join(PARETO, f"litehit_exact_{HIT_RATE_TYPE}.csv")

POINT_HEADER = (
    "scope,instance_id,group_name,eviction_policy_type,capacity_bytes,group_quota_bytes,"
    "capacity_blocks,reads,input_tokens,hit_tokens,local_hit_tokens,remote_hit_tokens,"
    "hit_rate,local_hit_rate,remote_hit_rate,peak_cached_blocks,peak_cached_bytes,"
    "cached_blocks,evicted_blocks,expired_blocks,written_blocks,method"
)
SUMMARY_HEADER = (
    "policy,kind,capacity_bytes,capacity_gib,hit_tokens,input_tokens,hit_rate,"
    "fraction_of_theoretical,method,plotted,bracket_low_bytes"
)
REFERENCE_HEADER = "policy,capacity_bytes,capacity_gib,input_tokens," + ",".join(
    f"{o}_hit_tokens,{o}_hit_rate" for o in TOUCH_ORDERS
)
_POINT_FILE = re.compile(r"(.+)_(inf|\d+)\.csv\Z")


class SummaryRow(NamedTuple):
    """One row of :data:`SUMMARY_CSV` (the module docstring), numbers as integers."""

    policy: str
    kind: str
    capacity_bytes: int | None
    hit_tokens: int | None
    input_tokens: int
    method: str
    plotted: bool | None = None
    low_bytes: int | None = None


class ReferenceRow(NamedTuple):
    """One row of :data:`REFERENCE_CSV`: hit tokens per touch order at a capacity."""

    policy: str
    capacity_bytes: int
    input_tokens: int
    hit_tokens: tuple[int, ...]


def _rate(num: int | None, den: int) -> str:
    return "" if num is None else f"{num / den if den else 0.0:.6f}"


def _gib(capacity: int | None) -> str:
    return "" if capacity is None or capacity < 0 else f"{capacity / GIB:.9g}"


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def point_file(label: str, capacity_bytes: int) -> str:
    """``pareto/csv_results/{label}_{capacity_bytes or 'inf'}.csv``."""
    cap = "inf" if capacity_bytes < 0 else str(capacity_bytes)
    return os.path.join(CSV_DIR, f"{label}_{cap}.csv")


def point_csv(point: Point) -> str:
    """The per-point CSV (module docstring). O(instances)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    out.write(POINT_HEADER + "\n")
    for i in point.instances:
        peak_bytes = (
            None if i.peak_cached_blocks is None else i.peak_cached_blocks * i.bytes_per_block
        )
        w.writerow(
            [
                "instance", i.instance_id, i.group_name, i.policy, point.capacity_bytes,
                i.group_quota_bytes, _cell(i.capacity_blocks), i.reads, i.input_tokens,
                i.hit_tokens, i.local_hit_tokens, i.remote_hit_tokens,
                _rate(i.hit_tokens, i.input_tokens), _rate(i.local_hit_tokens, i.input_tokens),
                _rate(i.remote_hit_tokens, i.input_tokens), _cell(i.peak_cached_blocks),
                _cell(peak_bytes), _cell(i.cached_blocks), _cell(i.evicted_blocks),
                _cell(i.expired_blocks), _cell(i.written_blocks), point.method,
            ]
        )  # fmt: skip
    inst = point.instances
    tokens = point.input_tokens
    local = sum(i.local_hit_tokens for i in inst)
    remote = sum(i.remote_hit_tokens for i in inst)
    w.writerow(
        [
            "total", "", "", point.label, point.capacity_bytes,
            "", "", sum(i.reads for i in inst), tokens,
            point.hit_tokens, local, remote, _rate(point.hit_tokens, tokens),
            _rate(local, tokens), _rate(remote, tokens), "", _cell(point.peak_cached_bytes),
            "", "", "", "", point.method,
        ]
    )  # fmt: skip
    return out.getvalue()


def type_hits(point: Point, kind: str) -> int:
    """``point``'s hit tokens of type ``kind`` (:data:`HIT_RATE_TYPES`) over every
    instance. O(instances)."""
    if kind == "total":
        return point.hit_tokens
    if kind == "local":
        return sum(i.local_hit_tokens for i in point.instances)
    return sum(i.remote_hit_tokens for i in point.instances)


def summary_rows(result: TradeoffResult, kind: str = HIT_RATE_TYPE) -> list[SummaryRow]:
    """The rows of :func:`summary_csv` ``(kind)`` for a run (module docstring).
    O(points)."""
    rows = []
    for c in result.curves:
        tokens = c.warmup.input_tokens
        rows.append(
            SummaryRow(c.label, "theoretical", c.peak_bytes, type_hits(c.warmup, kind), tokens,
                       "warmup")
        )  # fmt: skip
        hits = [type_hits(p, kind) for p in c.points]
        for p, h, k in zip(c.points, hits, keep_rising(hits), strict=True):
            rows.append(SummaryRow(c.label, "point", p.capacity_bytes, h, tokens, p.method, k))
        for p in c.refine:
            rows.append(
                SummaryRow(c.label, "refine", p.capacity_bytes, type_hits(p, kind), tokens,
                           p.method)
            )  # fmt: skip
        for m in c.marks if kind == HIT_RATE_TYPE else ():
            rows.append(
                SummaryRow(
                    c.label, f"p{m.percent}", m.capacity_bytes, m.hit_tokens, tokens, m.method,
                    None, m.low_bytes,
                )
            )  # fmt: skip
    return rows


def with_plotted(rows: Sequence[SummaryRow]) -> list[SummaryRow]:
    """``rows`` with each point's ``plotted`` recomputed: kept unless below the last kept
    point of its policy (:func:`~.points.keep_rising`). O(rows)."""
    best: dict[str, int] = {}
    out = []
    for r in rows:
        if r.kind == "point":
            hits = r.hit_tokens or 0
            r = r._replace(plotted=hits >= best.get(r.policy, 0))
            best[r.policy] = max(best.get(r.policy, 0), hits)
        out.append(r)
    return out


def rows_text(rows: Iterable[SummaryRow]) -> str:
    """:data:`SUMMARY_CSV`'s text. O(rows)."""
    rows = list(rows)
    theoretical = {r.policy: r.hit_tokens or 0 for r in rows if r.kind == "theoretical"}
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    out.write(SUMMARY_HEADER + "\n")
    for r in rows:
        frac = _rate(r.hit_tokens, theoretical.get(r.policy, 0))
        plotted = "" if r.plotted is None else int(r.plotted)
        w.writerow(
            [
                r.policy, r.kind, _cell(r.capacity_bytes), _gib(r.capacity_bytes),
                _cell(r.hit_tokens), r.input_tokens, _rate(r.hit_tokens, r.input_tokens), frac,
                r.method, plotted, _cell(r.low_bytes),
            ]
        )  # fmt: skip
    return out.getvalue()


def reference_rows(result: TradeoffResult) -> list[ReferenceRow]:
    """The rows of :data:`REFERENCE_CSV` for a run. O(policies x capacities)."""
    rows = []
    for c in result.curves:
        tokens = c.warmup.input_tokens
        hits = np.stack([c.reference_hits[o] for o in TOUCH_ORDERS], axis=1).tolist()
        for cap, h in zip(c.reference_caps.tolist(), hits, strict=True):
            rows.append(ReferenceRow(c.label, cap, tokens, tuple(h)))
    return rows


def reference_text(rows: Iterable[ReferenceRow]) -> str:
    """:data:`REFERENCE_CSV`'s text. O(rows)."""
    lines = [REFERENCE_HEADER]
    for r in rows:
        cells = [r.policy, str(r.capacity_bytes), _gib(r.capacity_bytes), str(r.input_tokens)]
        for h in r.hit_tokens:
            cells += [str(h), _rate(h, r.input_tokens)]
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def _read_csv(path: str, header: str) -> list[tuple[int, dict[str, str]]]:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise LocatedError(
            path, 0, "not found: --skip-run re-plots the CSVs of an earlier run; run "
            "without --skip-run first (or give -o DIR of that run)"
        ) from None  # fmt: skip
    reader = csv.reader(io.StringIO(text))
    first = next(reader, None)
    if first != header.split(","):
        raise LocatedError(path, 1, f"the header must be {header!r}")
    names = header.split(",")
    out = []
    for n, rec in enumerate(reader, start=2):
        if len(rec) != len(names):
            raise LocatedError(path, n, f"{len(rec)} fields, the header has {len(names)}")
        out.append((n, dict(zip(names, rec, strict=True))))
    return out


def _int(path: str, line: int, row: dict[str, str], name: str) -> int | None:
    text = row[name]
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise LocatedError(path, line, f"{name} must be an integer, got {text!r}", name) from None


def read_summary(path: str) -> list[SummaryRow]:
    """:data:`SUMMARY_CSV` as written; LocatedError (file, line, field) otherwise. O(rows)."""
    rows = []
    kinds = ("theoretical", "point", "refine", "p95", "p99")
    for n, row in _read_csv(path, SUMMARY_HEADER):
        if row["kind"] not in kinds:
            raise LocatedError(path, n, f"kind must be one of {list(kinds)}, got {row['kind']!r}")
        tokens = _int(path, n, row, "input_tokens")
        plotted = row["plotted"]
        rows.append(
            SummaryRow(
                row["policy"], row["kind"], _int(path, n, row, "capacity_bytes"),
                _int(path, n, row, "hit_tokens"), tokens or 0, row["method"],
                None if plotted == "" else plotted == "1", _int(path, n, row, "bracket_low_bytes"),
            )
        )  # fmt: skip
    return rows


def read_reference(path: str) -> list[ReferenceRow]:
    """:data:`REFERENCE_CSV` as written; LocatedError otherwise. O(rows)."""
    rows = []
    for n, row in _read_csv(path, REFERENCE_HEADER):
        hits = tuple(_int(path, n, row, f"{o}_hit_tokens") or 0 for o in TOUCH_ORDERS)
        cap = _int(path, n, row, "capacity_bytes") or 0
        rows.append(ReferenceRow(row["policy"], cap, _int(path, n, row, "input_tokens") or 0, hits))
    return rows


def write_files(
    out_dir: str, texts: dict[str, str], figures: dict[str, Figure] | None = None
) -> list[str]:
    """Write ``texts`` and ``figures`` (relative path -> content) under ``out_dir``, all or
    nothing (:func:`~litehit_service.offline.outputs.publish_files`); the paths written.
    O(bytes)."""
    return publish_files(out_dir, list(texts.items()), list((figures or {}).items()))


def remove_stale(out_dir: str, labels: Iterable[str], written: Iterable[str]) -> list[str]:
    """Delete ``{label}_{capacity|inf}.csv`` files of ``labels`` under ``pareto/csv_results``
    that this run did not write (an older run's capacities); the paths removed. O(files)."""
    folder = os.path.join(out_dir, CSV_DIR)
    keep = {os.path.abspath(p) for p in written}
    wanted = set(labels)
    removed = []
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return removed
    for name in names:
        m = _POINT_FILE.match(name)
        path = os.path.abspath(os.path.join(folder, name))
        if m and m.group(1) in wanted and path not in keep:
            os.remove(path)
            removed.append(path)
    return removed
