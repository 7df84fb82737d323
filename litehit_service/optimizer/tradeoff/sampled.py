"""``litehit tradeoff --sample-rate R --sample-seeds K``: the curve estimated from samples.

The trace is read once and sampled for every seed (:mod:`~..sampling.trace`); per swept
policy:

1. **Warm-up**: every seed's sample replayed at infinite quota. The theoretical hit rate
   is estimated from them; ``M`` is estimated per group from each seed's peak ``s`` as
   ``T + (s - T) / R`` (:func:`~..sampling.scale.unscaled_bytes`; ``T`` the trunk's
   bytes), averaged over the seeds; those group estimates are the groups' weights.
2. **Sweep**: :func:`~.points.capacity_points` of ``M``; every capacity split over the
   groups by those weights as the exact sweep does, then scaled per seed
   (:func:`~..sampling.scale.scaled_config`) and replayed. Every planned point is replayed
   (a sampled replay costs ~R of an exact one); the points reported stop at the first
   whose estimate reaches 99 % of the theoretical estimate, as the exact sweep's rule.
3. **Marks**: the 95 % and 99 % capacities by linear interpolation between the estimated
   points (no bisection: an estimate is not sharper than its band).

All replays (policies x seeds x (1 + points)) go to a pool of forked processes
inheriting the samples (:class:`~litehit_service.offline.pool.TracePool`); each returns
its point's estimate, corrected by the trace's reuse, with its variance
(:func:`~..sampling.estimate.replay_point`: the rows stay in the worker). Outputs, all or
nothing, under names no exact run writes: ``pareto/sampled_curve_total.csv`` (per point
the estimate and the band, ``sample_rate``, ``sample_seeds``; :data:`SAMPLED_HEADER`) and
``pareto/sampled_curve_total.png`` (with several policies also
``pareto/sampled_multi_policy_total.png``; :mod:`.sampled_plot`). LiteHit's exact reference
curves need the whole trace: not drawn. Cost: K x (1 + points) replays of ~R of the trace
per policy.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from litehit_core.sampling import MIN_CACHE_REQUESTS
from litehit_service.offline.pool import TracePool
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.sampling.estimate import (
    SeedPoint,
    SeedTask,
    combine,
    replay_point,
    seed_sample,
)
from litehit_service.optimizer.sampling.scale import (
    Estimate,
    cache_requests,
    coarse,
    scaled_config,
    trunk_bytes,
    unscaled_bytes,
)
from litehit_service.optimizer.sampling.trace import SampledTrace
from litehit_service.optimizer.tradeoff.points import (
    GIB,
    at_capacity,
    capacity_points,
    capacity_unit,
    group_quotas,
)
from litehit_service.optimizer.tradeoff.sweep import (
    MARK_PERCENTS,
    STOP_PERCENT,
    TradeoffOptions,
    refuse_tiered,
    sweep_configs,
    trace_for,
)

__all__ = [
    "SAMPLED_CSV",
    "SAMPLED_HEADER",
    "SAMPLED_MULTI_PNG",
    "SAMPLED_PNG",
    "SampledCurve",
    "SampledTradeoff",
    "run_sampled_tradeoff",
    "sampled_csv",
    "sampled_json",
    "sampled_text",
]

SAMPLED_CSV = os.path.join("pareto", "sampled_curve_total.csv")
SAMPLED_PNG = os.path.join("pareto", "sampled_curve_total.png")
SAMPLED_MULTI_PNG = os.path.join("pareto", "sampled_multi_policy_total.png")
SAMPLED_HEADER = (
    "policy,kind,capacity_bytes,capacity_gib,hit_rate,hit_rate_low,hit_rate_high,"
    "sampled_hit_tokens,sampled_input_tokens,sample_rate,sample_seeds,coarse"
)


@dataclass(frozen=True, slots=True)
class SampledCurve:
    """One policy's estimated curve: the warm-up's estimate, ``M`` (``peak_bytes``) and the
    groups' weights, the planned capacities, the points reported (capacity, estimate), per
    point how many average requests its smallest scaled cache holds (``cache_requests``;
    under :data:`~litehit_core.sampling.MIN_CACHE_REQUESTS` the point is coarse), and per
    mark percent its interpolated capacity (None: not reached)."""

    label: str
    warmup: Estimate
    peak_bytes: int
    weights: tuple[int, ...]
    planned: tuple[int, ...]
    points: tuple[tuple[int, Estimate], ...]
    marks: tuple[tuple[int, int | None], ...]
    cache_requests: tuple[float | None, ...]

    def coarse(self, index: int) -> bool:
        """Whether point ``index`` is coarse (class docstring)."""
        return coarse(self.cache_requests[index])


@dataclass(frozen=True, slots=True)
class SampledTradeoff:
    """Every policy's curve, the sample's options, trunk size, replays and seconds."""

    curves: tuple[SampledCurve, ...]
    rate: float
    seeds: int
    trunk_blocks: int
    replays: int
    seconds: float
    workers: int


def _estimate(points: list[SeedPoint]) -> Estimate:
    return combine([p.estimate for p in points])


def _held(points: list[SeedPoint], sampled: SampledTrace) -> float | None:
    """The fewest average requests any instance's scaled cache holds over the seeds."""
    caps = [(k, i.capacity_blocks) for p in points for k, i in enumerate(p.point.instances)]
    return cache_requests(sampled, caps)


def _interpolate(points: list[tuple[int, Estimate]], target: float) -> int | None:
    """The capacity where the estimated curve (from (0, 0)) first reaches ``target``,
    linearly between the two points around it."""
    prev_cap, prev_rate = 0, 0.0
    for cap, est in points:
        rate = est.rate
        if rate >= target:
            if rate == prev_rate:
                return cap
            return round(prev_cap + (cap - prev_cap) * (target - prev_rate) / (rate - prev_rate))
        if rate > prev_rate:
            prev_cap, prev_rate = cap, rate
    return None


def run_sampled_tradeoff(
    config: OptimizeConfig,
    sampled: SampledTrace,
    options: TradeoffOptions,
    *,
    progress: Callable[[int], object] | None = None,
) -> SampledTradeoff:
    """The whole sampled trade-off (module docstring) of ``sampled`` (read under
    :func:`~.sweep.loading_config`). LocatedError for a tiered configuration."""
    start = time.perf_counter()
    refuse_tiered(config)
    advance = progress or (lambda n: None)
    rate, seeds = sampled.options.rate, sampled.options.seeds
    variants = sweep_configs(config, options.policies)
    per_seed = [seed_sample(sampled, k, config) for k in range(seeds)]
    trunks = [trunk_bytes(config, s.trace, sampled.trunk) for s in per_seed]
    traces = {
        f"{label}#{k}": replace(s, trace=trace_for(cfg, s.trace))
        for label, cfg in variants
        for k, s in enumerate(per_seed)
    }
    infinite = [-1] * len(config.groups)
    unit = capacity_unit(config)
    replays = 0
    curves = []
    with TracePool(traces, workers=options.workers) as pool:

        def submit(label: str, cfg: OptimizeConfig, cap: int, quotas: list[int]) -> list:
            placed = at_capacity(cfg, quotas)
            tasks = [
                SeedTask(f"{label}#{k}", label, cap, scaled_config(placed, trunks[k], rate))
                for k in range(seeds)
            ]
            return [pool.submit(replay_point, t, t.key) for t in tasks]

        warm_futs = [submit(label, cfg, -1, infinite) for label, cfg in variants]
        for (label, cfg), futs in zip(variants, warm_futs, strict=True):
            warm = [f.result() for f in futs]
            replays += seeds
            advance(1)
            groups = [p.point.group_peak_bytes(cfg) for p in warm]
            weights = [
                sum(unscaled_bytes(g[gi], trunks[k][gi], rate) for k, g in enumerate(groups))
                // seeds
                for gi in range(len(config.groups))
            ]
            peak = sum(weights)
            planned = capacity_points(peak, options.num_points, options.min_capacity_ratio, unit)
            if peak <= 0:
                planned = []
            futures = [
                (cap, submit(label, cfg, cap, group_quotas(cap, weights))) for cap in planned
            ]
            theoretical = _estimate(warm)
            points: list[tuple[int, Estimate]] = []
            held: list[float | None] = []
            for cap, futs_k in futures:
                done = [f.result() for f in futs_k]
                est = _estimate(done)
                replays += seeds
                advance(1)
                if not points or points[-1][1].rate < STOP_PERCENT / 100 * theoretical.rate:
                    points.append((cap, est))
                    held.append(_held(done, sampled))
            marks = tuple(
                (pct, _interpolate(points, pct / 100 * theoretical.rate)) for pct in MARK_PERCENTS
            )
            curves.append(
                SampledCurve(
                    label,
                    theoretical,
                    peak,
                    tuple(weights),
                    tuple(planned),
                    tuple(points),
                    marks,
                    tuple(held),
                )  # fmt: skip
            )
    return SampledTradeoff(
        tuple(curves), rate, seeds, len(sampled.trunk), replays,
        time.perf_counter() - start, options.workers,
    )  # fmt: skip


Row = tuple[str, str, int | None, Estimate | None, bool]


def _rows(result: SampledTradeoff) -> list[Row]:
    rows: list[Row] = []
    for c in result.curves:
        rows.append((c.label, "theoretical", c.peak_bytes, c.warmup, False))
        rows += [(c.label, "point", cap, est, c.coarse(k)) for k, (cap, est) in enumerate(c.points)]
        rows += [(c.label, f"p{pct}", cap, None, False) for pct, cap in c.marks]
    return rows


def sampled_csv(result: SampledTradeoff) -> str:
    """``pareto/sampled_curve_total.csv`` (module docstring): the theoretical, the points
    and the marks of every policy, each estimate with its band (a mark: its capacity
    only); ``coarse``: the point's scaled cache holds too few requests to trust
    (:meth:`SampledCurve.coarse`). O(points)."""
    lines = [SAMPLED_HEADER]
    for policy, kind, cap, est, rough in _rows(result):
        capacity = "" if cap is None else str(cap)
        gib = "" if cap is None else f"{cap / GIB:.9g}"
        if est is None:
            nums = ",,,,"
        else:
            nums = (f"{est.rate:.6f},{est.low:.6f},{est.high:.6f},{sum(est.hits)},"
                    f"{sum(est.inputs)}")  # fmt: skip
        lines.append(f"{policy},{kind},{capacity},{gib},{nums},{result.rate:g},{result.seeds},"
                     f"{str(rough).lower()}")  # fmt: skip
    return "\n".join(lines) + "\n"


def _band(est: Estimate) -> str:
    return est.text()


def sampled_text(result: SampledTradeoff) -> str:
    """The text summary: per policy the estimated theoretical hit rate, each point with
    ``≈`` and its band, the interpolated marks; a head and a tail line naming the sample."""
    s = "s" if result.seeds != 1 else ""
    lines = [
        f"sampled trade-off: R = {result.rate:g}, {result.seeds} seed{s}; every hit rate is "
        "an estimate (corrected by the trace's reuse, averaged over the seeds; the band is a "
        "90% interval)"
    ]
    for c in result.curves:
        lines.append(
            f"{c.label}: theoretical hit rate {_band(c.warmup)} (warm-up at infinite quota), "
            f"peak cached ≈ {c.peak_bytes / GIB:,.4f} GiB ({c.peak_bytes:,} bytes, from the "
            "samples' peaks)"
        )
        lines.append(f"  {'capacity GiB':>16} {'capacity bytes':>22}  hit rate")
        for k, (cap, est) in enumerate(c.points):
            note = (
                f"  coarse: the scaled cache holds ~{c.cache_requests[k]:.3g} requests"
                if (c.coarse(k))
                else ""
            )
            lines.append(f"  {cap / GIB:>16,.4f} {cap:>22,}  {_band(est)}{note}")
        if any(c.coarse(k) for k in range(len(c.points))):
            lines.append(
                f"  coarse points (scaled cache under {MIN_CACHE_REQUESTS} average requests) "
                "read low; a higher --sample-rate sharpens them"
            )
        for pct, cap in c.marks:
            where = "not reached" if cap is None else f"≈ {cap / GIB:,.4f} GiB ({cap:,} bytes)"
            lines.append(f"  {pct}%: {where} (interpolated between the estimated points)")
    lines.append(
        f"{result.replays} sampled replays on {result.workers} worker"
        f"{'s' if result.workers != 1 else ''}, {result.seconds:.2f} s"
    )
    return "\n".join(lines)


def _point(cap: int, est: Estimate, c: SampledCurve | None = None, k: int = 0) -> dict:
    extra = {} if c is None else {
        "scaled_cache_requests": c.cache_requests[k],
        "coarse": c.coarse(k),
    }  # fmt: skip
    return extra | {
        "capacity_bytes": cap,
        "capacity_gib": cap / GIB,
        "hit_rate": est.rate,
        "hit_rate_low": est.low,
        "hit_rate_high": est.high,
        "hit_rate_per_seed": est.per_seed,
        "estimate": True,
    }


def sampled_json(result: SampledTradeoff, extra: dict[str, object]) -> str:
    """The summary as one JSON object: ``sample_rate``, ``sample_seeds``, per policy the
    theoretical estimate and band, the points (each ``hit_rate``, ``hit_rate_low``,
    ``hit_rate_high``), the marks; the run's replays and seconds; ``extra``'s fields."""
    policies = []
    for c in result.curves:
        theo = _point(c.peak_bytes, c.warmup)
        policies.append(
            {
                "policy": c.label,
                "method": "sampled",
                "theoretical_hit_rate": c.warmup.rate,
                "theoretical_hit_rate_low": c.warmup.low,
                "theoretical_hit_rate_high": c.warmup.high,
                "peak_cached_bytes": c.peak_bytes,
                "group_peak_bytes": list(c.weights),
                "planned_points": len(c.planned),
                "hit_rate_low": theo["hit_rate_low"],
                "hit_rate_high": theo["hit_rate_high"],
                "points": [_point(cap, est, c, k) for k, (cap, est) in enumerate(c.points)],
                "marks": [
                    {
                        "percent": pct,
                        "method": "interpolated",
                        "capacity_bytes": cap,
                        "capacity_gib": None if cap is None else cap / GIB,
                    }
                    for pct, cap in c.marks
                ],  # fmt: skip
            }
        )
    data: dict[str, object] = {
        "sample_rate": result.rate,
        "sample_seeds": result.seeds,
        "trunk_blocks": result.trunk_blocks,
        "policies": policies,
        "replays": result.replays,
        "seconds": round(result.seconds, 6),
        "workers": result.workers,
    }
    data.update(extra)
    return json.dumps(data, indent=2)
