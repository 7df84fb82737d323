"""One trade-off run: warm-up, the capacity sweep, the 95 %/99 % capacities (spec §8).

Per swept policy (``--eviction-policies``; default: the configuration's own policies):

1. **Warm-up**: one replay with every group's quota infinite. Its total hit rate is the
   theoretical ``H_inf``; ``M``, the capacity the sweep tops out at, is the sum over
   instances of each one's peak cached blocks x its block bytes (the replay reports peaks
   per instance). At infinite quota nothing is evicted, so unless a TTL expires blocks the
   cache only grows and that sum *is* the peak of the total; with expiring TTLs it is an
   upper bound (the summary says which).
2. **Sweep**: :func:`~.points.capacity_points` of ``M``, ascending, each capacity split
   over the groups (:func:`~.points.group_quotas`) in proportion to their warm-up peaks
   (so at ``M * e^x`` every group gets about ``e^x`` of what it used at infinite quota,
   and at ``M`` every group holds its peak: the configured quotas are replaced); one
   replay each. The sequential rule stops after the first point reaching 99 % of ``H_inf``. With
   several workers a sliding window of ``workers`` replays runs in ascending order, and no
   point above one already known to reach 99 % is started; replays above the final stop
   point are discarded, so the points reported are the sequential ones whatever the
   workers.
3. **Refinement**: for 95 % and 99 % the bracket (the last point below, the first point
   reaching) is bisected (midpoints rounded down to the capacity unit, one replay each, the
   two targets' midpoints side by side) until it is within 1 % of its top or one unit;
   the top and the hit rate measured there are reported. Plain bisection, whatever the
   workers: the same replays every time.

When a policy's replay is LiteHit's head-first model exactly (spec §7b,
:func:`~.exact_curve.exact_orders`) steps 2-3 read LiteHit's exact curve instead: every
point, and the smallest capacities reaching 95 %/99 % (exact, no bisection). LiteHit's
tail-first and head-first curves are computed for every run (two passes, in the pool
beside the warm-up) and drawn as references. Cost: (1 + points + ~10) replays per policy
over ``workers``, plus two LiteHit passes.

The trace is either decoded once (the workers inherit it) or a
:class:`~.stream.TraceSource` every task reads in batches itself (:mod:`.stream`: memory
follows the cache); then the §7b check reads the trace's facts from one more pass
(:func:`~.stream.stream_facts`, only when a swept configuration passes §7b's
configuration checks). The result is the same either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from litehit_core import LocatedError
from litehit_core.curve import InstanceCurve, log_spaced
from litehit_core.engine import POLICIES, PolicyModel
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.run import build_setup
from litehit_service.optimizer.optimize.trace import LoadedTrace
from litehit_service.optimizer.tradeoff.exact_curve import (
    TOUCH_ORDERS,
    exact_orders,
    exact_point,
    facts_orders,
    smallest_capacity,
    total_hit_tokens,
)
from litehit_service.optimizer.tradeoff.points import (
    EXACT,
    REPLAY,
    Point,
    at_capacity,
    capacity_points,
    capacity_unit,
    group_quotas,
    reaches,
    target_hit_tokens,
    tiered_groups,
    with_policy,
)
from litehit_service.optimizer.tradeoff.pool import (
    CurvesTask,
    FactsTask,
    ReplayTask,
    TradeoffPool,
)
from litehit_service.optimizer.tradeoff.stream import TraceSource, facts_needed

__all__ = [
    "MARK_PERCENTS",
    "MIXED",
    "STOP_PERCENT",
    "Mark",
    "PolicyCurve",
    "TradeoffOptions",
    "TradeoffResult",
    "refuse_tiered",
    "run_tradeoff",
    "sweep_configs",
    "trace_for",
]

MARK_PERCENTS = (95, 99)
STOP_PERCENT = 99
REFINE_PERCENT = 1
"""Bisection stops when the bracket is within this % of its top."""
MIXED = "config"
"""The label of a sweep of the configuration's own, differing, policies."""
REFERENCE_POINTS = 200
"""Capacities at which LiteHit's reference curves are tabulated (plus the sweep's)."""


@dataclass(frozen=True)
class TradeoffOptions:
    """The knobs of :func:`run_tradeoff` (the command's flags)."""

    policies: tuple[str, ...] | None = None
    num_points: int = 30
    min_capacity_ratio: float = 1e-4
    workers: int = 1
    executor: str = "local"
    ray_address: str | None = None


@dataclass(frozen=True, slots=True)
class Mark:
    """The capacity reaching ``percent`` % of the theoretical hit tokens: ``method``
    ``"bisection"`` (``capacity_bytes`` reaches it, ``low_bytes`` does not, within 1 %,
    after ``steps`` midpoints),
    ``"exact"`` (the smallest such capacity, from LiteHit's exact curve), ``"trivial"``
    (the theoretical is 0) or ``"unreached"`` (no capacity of the sweep reaches it)."""

    percent: int
    target_hit_tokens: int
    method: str
    capacity_bytes: int | None = None
    hit_tokens: int | None = None
    low_bytes: int | None = None
    steps: int = 0


@dataclass(frozen=True, slots=True)
class PolicyCurve:
    """One policy's sweep (module docstring): the warm-up, ``M`` (``peak_bytes``;
    ``peak_exact`` False when expiring TTLs make it an upper bound), the groups' warm-up
    peaks (the weights of their shares), the planned capacities, the points reported (up to the
    stop), replays done above the stop and discarded, the bisection's replays, the marks,
    and LiteHit's reference curves (``reference_caps`` x per touch order hit tokens)."""

    label: str
    method: str
    warmup: Point
    peak_bytes: int
    peak_exact: bool
    weights: tuple[int, ...]
    planned: tuple[int, ...]
    points: tuple[Point, ...]
    discarded: int
    refine: tuple[Point, ...]
    marks: tuple[Mark, ...]
    reference_caps: np.ndarray = field(repr=False)
    reference_hits: dict[str, np.ndarray] = field(repr=False)

    @property
    def stopped(self) -> bool:
        """Whether the sweep stopped at a point reaching 99 % (else it ran every point)."""
        return bool(self.points) and reaches(
            self.points[-1].hit_tokens, STOP_PERCENT, self.warmup.hit_tokens
        )


@dataclass(frozen=True)
class TradeoffResult:
    """Every policy's curve, the replays run (discarded ones included), the seconds, the
    workers and executor."""

    curves: tuple[PolicyCurve, ...]
    replays: int
    seconds: float
    workers: int
    executor: str


def refuse_tiered(config: OptimizeConfig) -> None:
    """A LocatedError at the first tiered group: a tiered configuration has no single
    capacity to sweep (each tier's storages[].capacity is its own quota). O(groups)."""
    tiered = tiered_groups(config)
    if tiered:
        gi = tiered[0]
        raise config.error(
            f"instance_groups[{gi}]",
            f"group {config.groups[gi].group_name!r} is tiered: a trade-off sweeps one "
            "capacity per group, and a tiered group has one per tier "
            "(storages[].capacity), so there is no single capacity to sweep. Run "
            "'litehit optimize' on the tiered configuration for its hit rates, or "
            "'litehit tradeoff' on a copy without tiers whose quota_capacity stands for "
            "the one tier whose capacity you want to sweep",
        )


def sweep_configs(
    config: OptimizeConfig, policies: Sequence[str] | None
) -> list[tuple[str, OptimizeConfig]]:
    """``(label, configuration)`` per swept policy: every instance's policy replaced by
    it, or (``policies`` None) the configuration as it is, labelled by its one policy or
    :data:`MIXED`. ValueError naming an unknown policy. O(policies x instances)."""
    if policies is None:
        names = {i.policy.name for i in config.instances}
        return [(names.pop() if len(names) == 1 else MIXED, config)]
    out = []
    for name in dict.fromkeys(policies):
        policy = POLICIES.get(name)
        if policy is None:
            raise ValueError(f"eviction policy must be one of {list(POLICIES)}, got {name!r}")
        out.append((name, with_policy(config, policy)))
    return out


def loading_config(configs: Sequence[OptimizeConfig]) -> OptimizeConfig:
    """The configuration to decode the trace with once for every swept one: an instance
    gets an expiring policy when any swept configuration gives it one (its TTL buckets
    are then read); the arrays do not depend on anything else. O(instances)."""
    base = configs[0]
    expiring: list[PolicyModel | None] = [None] * len(base.instances)
    for cfg in configs:
        for k, inst in enumerate(cfg.instances):
            if inst.policy.expires and expiring[k] is None:
                expiring[k] = inst.policy
    it = iter(expiring)
    groups = tuple(
        replace(
            g,
            instances=tuple(
                i if (p := next(it)) is None else replace(i, policy=p) for i in g.instances
            ),
        )
        for g in base.groups
    )
    return replace(base, groups=groups)


def trace_for(config: OptimizeConfig, trace: LoadedTrace) -> LoadedTrace:
    """``trace`` (decoded under :func:`loading_config`) as ``load_trace`` gives it under
    ``config``: the TTL buckets of instances whose policy does not expire cleared (and no
    TTLs at all when none does). O(records)."""
    expires = np.array([i.policy.expires for i in config.instances], bool)
    records = trace.records
    if expires.all():
        return trace
    if not expires.any():
        buckets = np.full(len(records.buckets), -1, np.int32)
        return replace(trace, records=records._replace(buckets=buckets), ttl_values=())
    buckets = np.where(expires[records.insts], records.buckets, -1).astype(np.int32)
    return replace(trace, records=records._replace(buckets=buckets))


def run_tradeoff(
    config: OptimizeConfig,
    trace: LoadedTrace | TraceSource,
    options: TradeoffOptions,
    *,
    progress: Callable[[int], object] | None = None,
    workers_started: Callable[[], object] | None = None,
) -> TradeoffResult:
    """The whole trade-off (module docstring) over ``trace`` decoded under
    :func:`loading_config` of :func:`sweep_configs`, or a :class:`~.stream.TraceSource`
    every task reads in batches itself (:mod:`.stream`; local executor only: Ray tasks
    get a decoded trace), the same result. ``progress(n)``: n more of the
    ``policies x (1 + num_points)`` warm-ups and points are done; ``workers_started()``
    is called once the worker processes exist (no fork after it: the caller may start
    threads then). LocatedError for a tiered configuration or a warm-up that caches
    nothing."""
    start = time.perf_counter()
    refuse_tiered(config)
    advance = progress or (lambda n: None)
    variants = sweep_configs(config, options.policies)
    infinite = [-1] * len(config.groups)
    traces: dict[str, LoadedTrace | TraceSource]
    if isinstance(trace, TraceSource):  # each task reads it under its own configuration
        traces = {label: trace for label, _ in variants}
        for _, cfg in variants:  # its errors here, not in a worker (the trace's: per batch)
            build_setup(at_capacity(cfg, infinite))
    else:
        traces = {label: trace_for(cfg, trace) for label, cfg in variants}
        for label, cfg in variants:  # its errors here, not in a worker
            build_setup(at_capacity(cfg, infinite), traces[label])
    first = variants[0][0]
    replays = 0
    with TradeoffPool(
        traces, workers=options.workers, executor=options.executor,
        ray_address=options.ray_address,
    ) as pool:  # fmt: skip
        warm_futs = [
            pool.submit(ReplayTask(label, label, -1, at_capacity(cfg, infinite)))
            for label, cfg in variants
        ]
        facts_fut = None
        if isinstance(trace, TraceSource) and facts_needed([cfg for _, cfg in variants]):
            facts_fut = pool.submit(FactsTask(first, loading_config([c for _, c in variants])))
        curve_futs = {o: pool.submit(CurvesTask(first, o, config)) for o in TOUCH_ORDERS}
        if workers_started is not None:
            workers_started()
        curves: list[PolicyCurve] = []
        for (label, cfg), warm_fut in zip(variants, warm_futs, strict=True):
            warm = warm_fut.result()
            advance(1)
            source = traces[label]
            if isinstance(source, TraceSource):
                facts = None if facts_fut is None else facts_fut.result()
                orders = partial(facts_orders, cfg, facts)
            else:
                orders = partial(exact_orders, cfg, source)
            run = _PolicyRun(pool, label, cfg, source.path, orders, warm, options, curve_futs,
                             advance)  # fmt: skip
            curves.append(run.curve())
            replays += 1 + run.replays
    return TradeoffResult(
        tuple(curves), replays, time.perf_counter() - start, options.workers, options.executor
    )


class _PolicyRun:
    """Steps 2-3 of one policy (module docstring)."""

    def __init__(
        self,
        pool: TradeoffPool,
        label: str,
        config: OptimizeConfig,
        path: str,
        orders: Callable[[], tuple[str, ...] | None],
        warm: Point,
        options: TradeoffOptions,
        curve_futs: dict[str, Future],
        advance: Callable[[int], object],
    ) -> None:
        self.pool, self.label, self.config, self.warm = pool, label, config, warm
        self.options, self.curve_futs, self.advance = options, curve_futs, advance
        self.replays = 0
        self.theoretical = warm.hit_tokens
        peak = warm.peak_cached_bytes or 0
        if peak <= 0:
            raise LocatedError(
                path,
                0,
                f"the warm-up replay ({label}, infinite quota) cached nothing: the trace "
                "writes no block, so there is no capacity to sweep",
            )
        self.peak = peak
        self.peak_exact = len(config.instances) == 1 or not any(
            i.expired_blocks for i in warm.instances
        )
        self.weights = warm.group_peak_bytes(config)
        self.unit = capacity_unit(config)
        self.orders = orders()

    def _task(self, capacity: int) -> ReplayTask:
        quotas = group_quotas(capacity, self.weights)
        return ReplayTask(self.label, self.label, capacity, at_capacity(self.config, quotas))

    def _curves(self, order: str) -> tuple[InstanceCurve, ...]:
        return self.curve_futs[order].result()

    def _exact_curves(self) -> list[InstanceCurve]:
        """Each instance's exact curve (spec §7b) by its own touch order."""
        assert self.orders is not None
        by_order = {o: self._curves(o) for o in set(self.orders)}
        return [by_order[o][k] for k, o in enumerate(self.orders)]

    def curve(self) -> PolicyCurve:
        planned = capacity_points(
            self.peak, self.options.num_points, self.options.min_capacity_ratio, self.unit
        )
        if self.orders is not None:
            exact = self._exact_curves()
            points, discarded = self._exact_sweep(planned, exact), 0
            refine: list[Point] = []
            marks = [self._exact_mark(p, exact) for p in MARK_PERCENTS]
        else:
            points, discarded = self._sweep(planned)
            refine, marks = self._refine(points)
        self.advance(self.options.num_points - len(points) - discarded)
        grid = np.union1d(
            log_spaced(1, self.peak // self.unit, REFERENCE_POINTS) * self.unit,
            np.array([p.capacity_bytes for p in points], np.int64),
        )
        reference = {
            o: total_hit_tokens(self._curves(o), self.config, self.weights, grid.tolist())
            for o in TOUCH_ORDERS
        }
        return PolicyCurve(
            label=self.label,
            method=REPLAY if self.orders is None else EXACT,
            warmup=self.warm,
            peak_bytes=self.peak,
            peak_exact=self.peak_exact,
            weights=tuple(self.weights),
            planned=tuple(planned),
            points=tuple(points),
            discarded=discarded,
            refine=tuple(refine),
            marks=tuple(marks),
            reference_caps=grid,
            reference_hits=reference,
        )

    def _exact_sweep(self, planned: list[int], exact: list[InstanceCurve]) -> list[Point]:
        points = []
        for cap in planned:
            points.append(exact_point(self.label, cap, self.config, exact, self.weights))
            self.advance(1)
            if reaches(points[-1].hit_tokens, STOP_PERCENT, self.theoretical):
                break
        return points

    def _exact_mark(self, percent: int, exact: list[InstanceCurve]) -> Mark:
        target = target_hit_tokens(percent, self.theoretical)
        cap = smallest_capacity(target, exact, self.config, self.weights, self.unit, self.peak)
        if cap is None:
            return Mark(percent, target, "unreached")
        hits = exact_point(self.label, cap, self.config, exact, self.weights).hit_tokens
        low = cap - self.unit if cap > 0 else None
        return Mark(percent, target, "exact", cap, hits, low)

    def _sweep(self, planned: list[int]) -> tuple[list[Point], int]:
        """The sliding window (module docstring): the points up to the first reaching
        99 %, and how many replays above it were discarded."""
        workers = self.pool.workers
        done: dict[int, Point] = {}
        running: dict[Future, int] = {}
        nxt, limit = 0, len(planned)
        while running or nxt < limit:
            while nxt < limit and len(running) < workers:
                running[self.pool.submit(self._task(planned[nxt]))] = nxt
                nxt += 1
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                i = running.pop(fut)
                done[i] = fut.result()
                self.replays += 1
                self.advance(1)
                if reaches(done[i].hit_tokens, STOP_PERCENT, self.theoretical):
                    limit = min(limit, i + 1)
            for fut, i in list(running.items()):
                if i >= limit and fut.cancel():
                    del running[fut]
        stop = min(
            (i for i, p in done.items() if reaches(p.hit_tokens, STOP_PERCENT, self.theoretical)),
            default=len(planned) - 1,
        )
        points = [done[i] for i in range(stop + 1)]
        return points, len(done) - len(points)

    def _refine(self, points: list[Point]) -> tuple[list[Point], list[Mark]]:
        """Bisect the 95 % and 99 % brackets side by side (module docstring)."""
        measured = {p.capacity_bytes: p for p in points}
        brackets: dict[int, list[int]] = {}  # percent -> [low, high, replays]
        marks: dict[int, Mark] = {}
        for percent in MARK_PERCENTS:
            target = target_hit_tokens(percent, self.theoretical)
            if target == 0:
                marks[percent] = Mark(percent, 0, "trivial", 0, 0)
                continue
            first = next((k for k, p in enumerate(points) if p.hit_tokens >= target), None)
            if first is None:
                marks[percent] = Mark(percent, target, "unreached")
                continue
            low = points[first - 1].capacity_bytes if first else 0
            brackets[percent] = [low, points[first].capacity_bytes, 0]
        refine: dict[int, Point] = {}
        while True:
            mids = {
                p: (lo + hi) // 2 // self.unit * self.unit
                for p, (lo, hi, _) in brackets.items()
                if hi - lo > self.unit and 100 * (hi - lo) > REFINE_PERCENT * hi
            }
            if not mids:
                break
            futs = {
                cap: self.pool.submit(self._task(cap))
                for cap in sorted(set(mids.values()))
                if cap not in measured
            }
            for cap, fut in futs.items():
                measured[cap] = refine[cap] = fut.result()
                self.replays += 1
            for percent, mid in mids.items():
                b = brackets[percent]
                b[2] += 1
                if reaches(measured[mid].hit_tokens, percent, self.theoretical):
                    b[1] = mid
                else:
                    b[0] = mid
        for percent, (lo, hi, steps) in brackets.items():
            target = target_hit_tokens(percent, self.theoretical)
            marks[percent] = Mark(
                percent, target, "bisection", hi, measured[hi].hit_tokens, lo, steps
            )
        return [refine[c] for c in sorted(refine)], [marks[p] for p in MARK_PERCENTS]
