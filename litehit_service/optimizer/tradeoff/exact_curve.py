"""LiteHit's exact LRU curves beside a trade-off: every capacity from one pass per order.

As ``optimize --compare-exact`` does at one capacity (:mod:`..optimize.exact`), each
instance's reads (each read as a request: its keys written at once) go through LiteHit's
two full-attention models -- touching a request's blocks tail first and head first -- once
per touch order; here the facts are summed into an :class:`~litehit_core.curve.InstanceCurve`
per instance, which answers every capacity exactly. The configuration's total at a
capacity: each instance read at its group's share of the capacity (in its blocks), hits
summed over instances, divided by the total input tokens.

Under spec §7b (``exact_qualifies`` for every instance: with our own checks, no block masks and
keys that name their prefix) a policy whose
replay is LiteHit's model (:attr:`PolicyModel.exact`: ``lru``, and ``ttl`` without TTLs)
*is* that curve, request for request: :func:`exact_orders` says which curve, and the
trade-off then reads its points and its 95 %/99 % capacities (:func:`smallest_capacity`)
from it instead of replaying (:func:`facts_orders`: the same answer for a streamed trace,
from its facts). Elsewhere the curves are references, not predictions.
Engines and projections come from the registry (:mod:`litehit_core.engine`). Cost: one
pass per touch order, O(keys); a capacity read O(instances x log breakpoints).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from litehit_core.curve import InstanceCurve
from litehit_core.engine import EngineSpec, create_engine, touch_order_model
from litehit_core.model import TOUCH_ORDERS
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.exact import config_qualifies, exact_qualifies
from litehit_service.optimizer.optimize.trace import LoadedTrace
from litehit_service.optimizer.tradeoff.points import (
    EXACT,
    InstancePoint,
    Point,
    group_quotas,
)
from litehit_service.optimizer.tradeoff.stream import TraceFacts

__all__ = [
    "TOUCH_ORDERS",
    "exact_orders",
    "facts_orders",
    "exact_point",
    "litehit_curves",
    "smallest_capacity",
    "total_hit_tokens",
]


def litehit_curves(
    config: OptimizeConfig, trace: LoadedTrace, order: str
) -> tuple[InstanceCurve, ...]:
    """One exact curve per instance (configuration order) for touch ``order``: its reads
    as requests through a fresh engine of that order's model. O(keys of the reads)."""
    from litehit_core.policy_replay.loop import WRITE

    records = trace.records
    spec = EngineSpec(model=touch_order_model(order))
    curves = []
    for index, inst in enumerate(config.instances):
        engine = create_engine(spec)
        curve = InstanceCurve(
            inst.instance_id, inst.block_size, inst.bytes_per_block, model=spec.model
        )
        add = curve.add_fact_curve
        reads = np.flatnonzero((records.insts == index) & (records.kinds != WRITE))
        off, keys, times = records.key_off, records.keys, records.times
        for r in reads.tolist():
            fact = engine.process_request(keys[off[r] : off[r + 1]].tolist(), int(times[r]))
            add(fact.hit_curve)
        curve.requests, curve.input_tokens = len(reads), int(trace.input_lens[reads].sum())
        curves.append(curve)
    return tuple(curves)


def exact_orders(config: OptimizeConfig, trace: LoadedTrace) -> tuple[str, ...] | None:
    """Per instance the touch order whose LiteHit curve the replay of ``config`` equals
    exactly (spec §7b), or None when any instance needs one replay per capacity (its policy
    has no exact model, ``exact_qualifies`` fails, or the trace marks blocks local, which
    the replay skips over and LiteHit's model does not, or a key follows different parents:
    the replay caches paths, LiteHit keys, the same thing only when every key determines
    its prefix). O(keys log keys)."""
    by_model = {touch_order_model(o): o for o in TOUCH_ORDERS}
    orders: list[str] = []
    for gi, group in enumerate(config.groups):
        for ii, inst in enumerate(group.instances):
            order = by_model.get(inst.policy.exact) if inst.policy.exact else None
            if order is None or not exact_qualifies(config, trace, gi, ii):
                return None
            orders.append(order)
    return tuple(orders)


def facts_orders(config: OptimizeConfig, facts: TraceFacts | None) -> tuple[str, ...] | None:
    """:func:`exact_orders` of a streamed trace, from its ``facts``
    (:func:`~.stream.stream_facts`; None: not gathered, as no swept configuration passes
    §7b's configuration checks): the same answer, the same checks. O(instances)."""
    if facts is None:
        return None
    by_model = {touch_order_model(o): o for o in TOUCH_ORDERS}
    orders: list[str] = []
    k = 0
    for gi, group in enumerate(config.groups):
        for ii, inst in enumerate(group.instances):
            order = by_model.get(inst.policy.exact) if inst.policy.exact else None
            if (
                order is None
                or not config_qualifies(config, gi, ii, facts.has_ttls)
                or not facts.requests_only[k]
                or facts.masked[k]
                or not facts.prefix_determined
            ):
                return None
            orders.append(order)
            k += 1
    return tuple(orders)


def _units(quotas: Sequence[int], config: OptimizeConfig) -> list[int]:
    """Each instance's group quota in its blocks (-1 = infinite)."""
    return [
        -1 if q < 0 else q // inst.bytes_per_block
        for g, q in zip(config.groups, quotas, strict=True)
        for inst in g.instances
    ]


def total_hit_tokens(
    curves: Sequence[InstanceCurve],
    config: OptimizeConfig,
    weights: Sequence[int],
    capacities: Sequence[int],
) -> np.ndarray:
    """Hit tokens over every instance at each capacity in bytes (>= 0): instance i read at
    its group's share (:func:`group_quotas`) in its blocks. int64 array. O(k x instances x
    log breakpoints)."""
    caps = list(capacities)
    out = np.zeros(len(caps), np.int64)
    if not caps:
        return out
    per_cap = [_units(group_quotas(c, weights), config) for c in caps]
    for i, curve in enumerate(curves):
        units = np.array([u[i] for u in per_cap], np.int64)
        out += curve.hit_tokens_at_many(units)
    return out


def exact_point(
    label: str,
    capacity_bytes: int,
    config: OptimizeConfig,
    curves: Sequence[InstanceCurve],
    weights: Sequence[int],
) -> Point:
    """The :class:`Point` LiteHit's curves give at ``capacity_bytes`` (spec §7b: what a
    replay gives, without block counts; no masks, so every hit is remote). O(instances)."""
    quotas = group_quotas(capacity_bytes, weights)
    units = _units(quotas, config)
    group_of = [(g, q) for g, q in zip(config.groups, quotas, strict=True) for _ in g.instances]
    instances = []
    for inst, curve, unit, (group, quota) in zip(
        config.instances, curves, units, group_of, strict=True
    ):
        hits = curve.hit_tokens_at(unit)
        instances.append(
            InstancePoint(
                instance_id=inst.instance_id,
                group_name=group.group_name,
                policy=inst.policy.name,
                bytes_per_block=inst.bytes_per_block,
                group_quota_bytes=quota,
                reads=curve.requests,
                input_tokens=curve.input_tokens,
                hit_tokens=hits,
                local_hit_tokens=0,
                remote_hit_tokens=hits,
            )
        )
    return Point(label, capacity_bytes, EXACT, tuple(instances))


def smallest_capacity(
    target_hit_tokens: int,
    curves: Sequence[InstanceCurve],
    config: OptimizeConfig,
    weights: Sequence[int],
    unit: int,
    top: int,
) -> int | None:
    """The smallest multiple of ``unit`` in [0, ``top``] whose total hit tokens reach
    ``target_hit_tokens`` (the total never falls as the capacity grows: every share and
    every LRU curve rises), None when ``top`` does not reach it. O(log(top / unit) x
    instances x log breakpoints)."""

    def hits(k: int) -> int:
        return int(total_hit_tokens(curves, config, weights, [k * unit])[0])

    lo, hi = -1, top // unit  # hits(lo) < target (lo = -1: below every capacity)
    if hits(hi) < target_hit_tokens:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if hits(mid) >= target_hit_tokens:
            hi = mid
        else:
            lo = mid
    return hi * unit
