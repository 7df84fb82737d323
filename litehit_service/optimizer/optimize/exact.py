"""LiteHit's exact LRU curves beside a policy replay (``optimize --compare-exact``).

For each instance, its reads' keys (each read as a request: its keys written at once) go
through LiteHit's two full-attention models -- touching a request's blocks tail first
(``lru``) and head first (``lru-head-first``) -- in one pass each, and the facts are
projected at the instance's group quota. Under spec §7b (``request`` records, no delay,
eviction mode 3, one instance in its group) the replay's ``lru`` equals the head-first
figure exactly; elsewhere the two are references, not predictions. Engines and projections
come from the registry (:mod:`litehit_core.engine`). Cost: one pass per model, O(keys).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from litehit_core.engine import EngineSpec, create_engine, touch_order_model
from litehit_core.model import TOUCH_ORDERS
from litehit_core.policy_replay import ReplayRecords
from litehit_core.prefix_hash import keys_name_their_prefix
from litehit_core.projector import Projection
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.run import OptimizeResult
from litehit_service.optimizer.optimize.trace import LoadedTrace

__all__ = [
    "ExactRates",
    "config_qualifies",
    "exact_qualifies",
    "exact_rates",
    "prefix_determined",
]


@dataclass(frozen=True, slots=True)
class ExactRates:
    """One instance: LiteHit's hit rate (hit tokens / input tokens) at the group quota per
    touch order, the replay's, and whether the replay is the head-first model exactly."""

    instance_id: str
    capacity_blocks: int | None
    by_touch_order: dict[str, float]
    replay: float
    exact: bool


def exact_qualifies(
    config: OptimizeConfig, trace: LoadedTrace, group_index: int, instance_index: int
) -> bool:
    """Whether spec §7b holds for this instance: only ``request`` reads, no delay, mode 3,
    alone in an untiered group, a policy whose replay is LiteHit's (``exact``) and, for a
    policy that expires blocks, no TTL at all and the LRU fallback on -- plus two checks of
    ours: its reads mark no block local, and every key of the trace names its prefix
    (:func:`prefix_determined`). O(keys log keys)."""
    from litehit_core.policy_replay.loop import REQUEST

    if not config_qualifies(config, group_index, instance_index, bool(trace.ttl_values)):
        return False
    offset = sum(len(g.instances) for g in config.groups[:group_index])
    mine = trace.records.insts == offset + instance_index
    if not (trace.records.kinds[mine] == REQUEST).all():
        return False
    # the replay skips over blocks marked local and caches paths; LiteHit's model does
    # neither: the same only without masks and when every key names its prefix
    mask = np.repeat(mine, np.diff(trace.records.key_off))
    return not trace.records.local[mask].any() and prefix_determined(trace.records)


def config_qualifies(
    config: OptimizeConfig, group_index: int, instance_index: int, has_ttls: bool
) -> bool:
    """The part of :func:`exact_qualifies` the configuration decides, given whether the
    trace holds any TTL (``has_ttls``): a policy whose replay is LiteHit's, alone in an
    untiered group, no delay, mode 3, and for a policy that expires blocks no TTL and the
    LRU fallback on. O(1)."""
    group = config.groups[group_index]
    inst = group.instances[instance_index]
    if inst.policy.exact is None or len(group.instances) != 1 or group.tiers:
        return False
    if config.write_delay_ns != 0 or config.eviction_mode != 3:
        return False
    return not (inst.policy.expires and (has_ttls or not inst.params.get("fallback_on_pressure")))


def prefix_determined(records: ReplayRecords) -> bool:
    """Whether every key always follows the same parent key (or always starts a read):
    then a key names its whole path, as with prefix-chained hashes
    (:func:`~litehit_core.prefix_hash.keys_name_their_prefix`). O(keys log keys)."""
    return keys_name_their_prefix(records.keys, records.key_off)


def exact_rates(
    config: OptimizeConfig, trace: LoadedTrace, result: OptimizeResult
) -> list[ExactRates]:
    """:class:`ExactRates` per instance, configuration order. O(keys) per touch order."""
    from litehit_core.policy_replay.loop import WRITE

    records = trace.records
    out: list[ExactRates] = []
    index = 0
    for gi, group in enumerate(config.groups):
        quota = group.quota_bytes
        for ii, inst in enumerate(group.instances):
            reads = np.flatnonzero((records.insts == index) & (records.kinds != WRITE))
            rates: dict[str, float] = {}
            tokens = int(trace.input_lens[reads].sum())
            for order in TOUCH_ORDERS:
                spec = EngineSpec(model=touch_order_model(order))
                engine = create_engine(spec)
                projection = Projection(spec, inst.bytes_per_block)
                units = None if quota < 0 else projection.units(quota)
                hits = 0
                for r in reads:
                    keys = records.keys[records.key_off[r] : records.key_off[r + 1]].tolist()
                    fact = engine.process_request(keys, int(records.times[r]))
                    hits += (
                        projection.infinite(fact) if units is None else projection.hits(fact, units)
                    )
                rates[order] = hits * inst.block_size / tokens if tokens else 0.0
            out.append(
                ExactRates(
                    inst.instance_id,
                    result.instances[index].capacity_blocks,
                    rates,
                    result.instances[index].hit_rate,
                    exact_qualifies(config, trace, gi, ii),
                )
            )
            index += 1
    return out
