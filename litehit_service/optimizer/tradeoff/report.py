"""The trade-off's summary on stdout: a table per policy, or one JSON object.

Per policy: how its points were measured (one replay each, or LiteHit's exact curve under
spec §7b), the theoretical hit rate and peak cached bytes of the warm-up, how the sweep
ended (99 % reached after k of n points, or every point), each point's capacity and hit
rate (``*``: dropped from the plot as descending), and the 95 %/99 % capacities with the
hit rate measured there and how they were found. Built from the summary rows, so
``--skip-run`` prints the same table; a run adds what only it knows (replays, seconds,
peak exactness, the groups' peaks). O(rows).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from litehit_service.optimizer.tradeoff.files import SummaryRow
from litehit_service.optimizer.tradeoff.points import EXACT, GIB
from litehit_service.optimizer.tradeoff.sweep import PolicyCurve, TradeoffResult

__all__ = ["summary_json", "summary_text"]


_UPPER_BOUND = " (sum of per-instance peaks: blocks expired, so an upper bound of the total's)"


def _rate(hits: int | None, tokens: int) -> float | None:
    if hits is None:
        return None
    return hits / tokens if tokens else 0.0


def _by_policy(rows: Sequence[SummaryRow]) -> dict[str, list[SummaryRow]]:
    out: dict[str, list[SummaryRow]] = {}
    for r in rows:
        out.setdefault(r.policy, []).append(r)
    return out


def _mark_line(r: SummaryRow) -> str:
    percent = r.kind[1:]
    if r.capacity_bytes is None:
        return f"  {percent}%: not reached by any capacity of the sweep"
    rate = _rate(r.hit_tokens, r.input_tokens) or 0.0
    cap = f"{r.capacity_bytes / GIB:,.4f} GiB ({r.capacity_bytes:,} bytes)"
    if r.method == "bisection":
        low = (r.low_bytes or 0) / GIB
        how = f"bisection: reached here, not at {low:,.4f} GiB (within 1 %)"
    elif r.method == "exact":
        how = "exact: the smallest capacity, from LiteHit's head-first curve (spec 7b)"
    else:
        how = r.method
    return f"  {percent}%: {cap}, measured hit rate {rate * 100:.4f}% ({how})"


def summary_text(rows: Sequence[SummaryRow], result: TradeoffResult | None = None) -> str:
    """The text summary (module docstring)."""
    curves = {c.label: c for c in (result.curves if result else ())}
    lines: list[str] = []
    for policy, rs in _by_policy(rows).items():
        theo = next((r for r in rs if r.kind == "theoretical"), None)
        points = [r for r in rs if r.kind == "point"]
        c = curves.get(policy)
        if theo is not None:
            peak = theo.capacity_bytes or 0
            lines.append(
                f"{policy}: theoretical hit rate "
                f"{(_rate(theo.hit_tokens, theo.input_tokens) or 0) * 100:.4f}% (warm-up at "
                f"infinite quota), peak cached {peak / GIB:,.4f} GiB ({peak:,} bytes)"
                + ("" if c is None or c.peak_exact else _UPPER_BOUND)
            )
        if c is not None:
            lines.append("  " + _how(c))
        elif points and all(r.method == EXACT for r in points):
            lines.append("  exact from one pass (spec 7b): points read from LiteHit's curve")
        lines.append(f"  {'capacity GiB':>16} {'capacity bytes':>22} {'hit rate':>10}")
        for r in points:
            rate = (_rate(r.hit_tokens, r.input_tokens) or 0) * 100
            flag = "" if r.plotted is not False else "  * dropped (descending)"
            lines.append(
                f"  {(r.capacity_bytes or 0) / GIB:>16,.4f} {r.capacity_bytes or 0:>22,} "
                f"{rate:>9.4f}%{flag}"
            )
        for r in rs:
            if r.kind in ("p95", "p99"):
                lines.append(_mark_line(r))
    if result is not None:
        lines.append(
            f"{result.replays} replays on {result.workers} worker"
            f"{'s' if result.workers != 1 else ''} ({result.executor}), {result.seconds:.2f} s"
        )
    return "\n".join(lines)


def _how(c: PolicyCurve) -> str:
    n, k = len(c.planned), len(c.points)
    if c.method == EXACT:
        head = (
            "exact from one pass (spec 7b): every point and the 95%/99% capacities come "
            "from LiteHit's head-first curve, no replay per capacity"
        )
    else:
        refine = len(c.refine)
        head = f"one replay per capacity, {refine} bisection replay{'s' if refine != 1 else ''}"
        if c.discarded:
            d = c.discarded
            head += f", {d} parallel replay{'s' if d != 1 else ''} above the stop point discarded"
    end = f"stopped at 99% after {k} of {n} points" if c.stopped else f"all {n} points"
    return f"{head}; {end}"


def summary_json(
    rows: Sequence[SummaryRow],
    result: TradeoffResult | None,
    extra: dict[str, object],
) -> str:
    """The summary as one JSON object: ``policies`` (per policy its theoretical hit rate
    and tokens, peak bytes, points, refinement replays and marks; with a run also its
    method, stop, discarded replays and weights), a run's ``replays``/``seconds``/
    ``workers``/``executor``, and ``extra``'s fields."""
    curves = {c.label: c for c in (result.curves if result else ())}
    policies = []
    for policy, rs in _by_policy(rows).items():
        theo = next((r for r in rs if r.kind == "theoretical"), None)
        entry: dict[str, object] = {"policy": policy}
        if theo is not None:
            entry.update(
                theoretical_hit_rate=_rate(theo.hit_tokens, theo.input_tokens),
                theoretical_hit_tokens=theo.hit_tokens,
                input_tokens=theo.input_tokens,
                peak_cached_bytes=theo.capacity_bytes,
            )
        c = curves.get(policy)
        if c is not None:
            entry.update(
                method=c.method,
                peak_is_exact=c.peak_exact,
                group_peak_bytes=list(c.weights),
                planned_points=len(c.planned),
                stopped_at_99=c.stopped,
                discarded_replays=c.discarded,
            )
        entry["points"] = [_point(r) for r in rs if r.kind == "point"]
        entry["refine"] = [_point(r) for r in rs if r.kind == "refine"]
        entry["marks"] = [
            {
                "percent": int(r.kind[1:]),
                "method": r.method,
                "capacity_bytes": r.capacity_bytes,
                "capacity_gib": None if r.capacity_bytes is None else r.capacity_bytes / GIB,
                "hit_tokens": r.hit_tokens,
                "hit_rate": _rate(r.hit_tokens, r.input_tokens),
                "bracket_low_bytes": r.low_bytes,
            }
            for r in rs
            if r.kind in ("p95", "p99")
        ]
        policies.append(entry)
    data: dict[str, object] = {"policies": policies}
    if result is not None:
        data.update(
            replays=result.replays,
            seconds=round(result.seconds, 6),
            workers=result.workers,
            executor=result.executor,
        )
    data.update(extra)
    return json.dumps(data, indent=2)


def _point(r: SummaryRow) -> dict[str, object]:
    return {
        "capacity_bytes": r.capacity_bytes,
        "capacity_gib": (r.capacity_bytes or 0) / GIB,
        "hit_tokens": r.hit_tokens,
        "hit_rate": _rate(r.hit_tokens, r.input_tokens),
        "method": r.method,
        **({} if r.plotted is None else {"plotted": r.plotted}),
    }
