"""Capacity points of a trade-off curve and the numbers of one point (spec §8).

A *capacity* is the bytes of cache the whole configuration gets; :func:`group_quotas`
splits it over the groups, :func:`at_capacity` puts the split into a configuration (every
group's ``quota_capacity`` replaced, ``used_percentage`` 1), :func:`with_policy` replaces
every instance's policy. :func:`capacity_points` are the sweep's capacities (``M * e^x``,
x evenly spaced over [-8, 0], multiples of the capacity unit). :class:`Point` holds what
one replay (or LiteHit's exact pass) gives at one capacity: per instance its tokens and
hits and, for a replay, its block counts. Every comparison with a fraction of the
theoretical hit rate is done on integers (:func:`reaches`). Cost: O(groups) per point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from litehit_core.engine import PolicyModel
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.run import OptimizeResult

__all__ = [
    "GIB",
    "REPLAY",
    "EXACT",
    "InstancePoint",
    "Point",
    "at_capacity",
    "capacity_points",
    "capacity_unit",
    "group_quotas",
    "keep_rising",
    "point_from_result",
    "reaches",
    "target_hit_tokens",
    "tiered_groups",
    "with_policy",
]

GIB = 1 << 30
REPLAY = "replay"
"""A point measured by one policy replay."""
EXACT = "exact"
"""A point read from LiteHit's exact head-first pass (spec §7b)."""
X_LOW = -8.0
"""The sweep's smallest capacity is ``M * e^X_LOW``."""


@dataclass(frozen=True, slots=True)
class InstancePoint:
    """One instance at one capacity: its group's quota in bytes (-1 = infinite) and in
    this instance's blocks, its reads' tokens and hit tokens (local / remote by the trace's
    block masks) and, for a replay, its block counts (None from LiteHit's pass)."""

    instance_id: str
    group_name: str
    policy: str
    bytes_per_block: int
    group_quota_bytes: int
    reads: int
    input_tokens: int
    hit_tokens: int
    local_hit_tokens: int
    remote_hit_tokens: int
    peak_cached_blocks: int | None = None
    cached_blocks: int | None = None
    evicted_blocks: int | None = None
    expired_blocks: int | None = None
    written_blocks: int | None = None

    @property
    def capacity_blocks(self) -> int | None:
        """The group quota in this instance's blocks (None = infinite)."""
        if self.group_quota_bytes < 0:
            return None
        return self.group_quota_bytes // self.bytes_per_block


@dataclass(frozen=True, slots=True)
class Point:
    """The whole configuration at ``capacity_bytes`` (-1: the warm-up's infinite quota),
    measured by ``method`` (:data:`REPLAY` or :data:`EXACT`)."""

    label: str
    capacity_bytes: int
    method: str
    instances: tuple[InstancePoint, ...]

    @property
    def hit_tokens(self) -> int:
        """Hit tokens over every instance."""
        return sum(i.hit_tokens for i in self.instances)

    @property
    def input_tokens(self) -> int:
        """Input tokens over every instance (the same at every capacity)."""
        return sum(i.input_tokens for i in self.instances)

    @property
    def hit_rate(self) -> float:
        """Total hit tokens / total input tokens (0 without input)."""
        total = self.input_tokens
        return self.hit_tokens / total if total else 0.0

    @property
    def peak_cached_bytes(self) -> int | None:
        """Sum over instances of the most blocks each held x its block bytes (None from
        LiteHit's pass). Exact as the total's peak when no block ever left the cache."""
        if any(i.peak_cached_blocks is None for i in self.instances):
            return None
        return sum(i.peak_cached_blocks * i.bytes_per_block for i in self.instances)  # type: ignore[operator]

    def group_peak_bytes(self, config: OptimizeConfig) -> list[int]:
        """:attr:`peak_cached_bytes` per group of ``config`` (instances in its order)."""
        out, index = [], 0
        for g in config.groups:
            n = len(g.instances)
            out.append(
                sum(
                    (i.peak_cached_blocks or 0) * i.bytes_per_block
                    for i in self.instances[index : index + n]
                )
            )
            index += n
        return out


def point_from_result(
    label: str, capacity_bytes: int, config: OptimizeConfig, result: OptimizeResult
) -> Point:
    """A :class:`Point` from one ``run_optimize`` result under ``config`` (its rows, or
    their totals from a streamed replay). O(reads)."""
    quotas = [g.quota_bytes for g in config.groups for _ in g.instances]
    instances = []
    for inst, r, quota in zip(config.instances, result.instances, quotas, strict=True):
        rows = r.rows
        local = rows.local_hit_tokens
        remote = rows.hit_tokens - local
        instances.append(
            InstancePoint(
                instance_id=r.instance_id,
                group_name=r.group_name,
                policy=r.policy,
                bytes_per_block=inst.bytes_per_block,
                group_quota_bytes=quota,
                reads=rows.reads,
                input_tokens=rows.total_input_tokens,
                hit_tokens=local + remote,
                local_hit_tokens=local,
                remote_hit_tokens=remote,
                peak_cached_blocks=r.peak_cached_blocks,
                cached_blocks=r.cached_blocks,
                evicted_blocks=r.evicted_blocks,
                expired_blocks=r.expired_blocks,
                written_blocks=r.written_blocks,
            )
        )
    return Point(label, capacity_bytes, REPLAY, tuple(instances))


def tiered_groups(config: OptimizeConfig) -> list[int]:
    """Indices of the groups with tiers (``GroupConfig.tiers`` non-empty)."""
    # TODO(tiers): GroupConfig.tiers is landing with tiered storage; drop the getattr
    # fallback once every configuration object has the attribute.
    return [gi for gi, g in enumerate(config.groups) if getattr(g, "tiers", ())]


def with_policy(config: OptimizeConfig, policy: PolicyModel) -> OptimizeConfig:
    """``config`` with every instance's policy replaced by ``policy``; its parameters keep
    the configured values the new policy reads, defaults for the others. O(instances)."""
    groups = tuple(
        replace(
            g,
            instances=tuple(
                replace(
                    i,
                    policy=policy,
                    params={name: i.params.get(name, d) for name, d in policy.params},
                )
                for i in g.instances
            ),
        )
        for g in config.groups
    )
    return replace(config, groups=groups)


def group_quotas(capacity_bytes: int, weights: Sequence[int]) -> list[int]:
    """``capacity_bytes`` split over the groups in proportion to ``weights`` (bytes), each
    share rounded down: ``capacity * w_g // sum(w)``; -1 for every group when the capacity
    is -1 (infinite). O(groups)."""
    if capacity_bytes < 0:
        return [-1] * len(weights)
    total = sum(weights)
    if total <= 0:
        raise ValueError(f"the groups' weights must sum to > 0, got {list(weights)}")
    return [capacity_bytes * w // total for w in weights]


def at_capacity(config: OptimizeConfig, quotas: Sequence[int]) -> OptimizeConfig:
    """``config`` whose group g has a quota of exactly ``quotas[g]`` bytes (-1 = infinite):
    ``quota_capacity = quota / 2**30`` GiB (exact in binary below 2**53 bytes) with
    ``used_percentage`` 1. O(groups)."""
    groups = []
    for g, quota in zip(config.groups, quotas, strict=True):
        new = replace(g, quota_capacity=-1.0 if quota < 0 else quota / GIB, used_percentage=1.0)
        if new.quota_bytes != quota:  # beyond 2**53 bytes a float GiB cannot say it
            raise ValueError(f"group {g.group_name!r}: a quota of {quota} bytes is not exact")
        groups.append(new)
    return replace(config, groups=tuple(groups))


def capacity_unit(config: OptimizeConfig) -> int:
    """The step of every capacity: the gcd of the instances' block bytes (one block for a
    single instance). O(instances)."""
    return math.gcd(*(i.bytes_per_block for i in config.instances))


def capacity_points(peak_bytes: int, num_points: int, min_ratio: float, unit: int) -> list[int]:
    """The sweep's capacities in bytes, ascending: ``peak_bytes * e^x`` for ``num_points``
    x evenly spaced over [-8, 0] (x = 0 alone for one point), rounded down to a multiple of
    ``unit``; those below ``min_ratio * peak_bytes`` or at 0 dropped, repeats once. O(n)."""
    xs = np.linspace(X_LOW, 0.0, num_points) if num_points > 1 else np.zeros(1)
    out: list[int] = []
    for x in xs.tolist():
        raw = peak_bytes if x == 0 else math.floor(peak_bytes * math.exp(x))
        cap = raw // unit * unit
        if cap <= 0 or cap < min_ratio * peak_bytes or (out and cap <= out[-1]):
            continue
        out.append(cap)
    return out


def target_hit_tokens(percent: int, theoretical_hit_tokens: int) -> int:
    """The fewest hit tokens reaching ``percent`` % of the theoretical:
    ``ceil(percent * theoretical / 100)``. O(1)."""
    return -(-percent * theoretical_hit_tokens // 100)


def reaches(hit_tokens: int, percent: int, theoretical_hit_tokens: int) -> bool:
    """Whether ``hit_tokens`` reach ``percent`` % of the theoretical hit tokens (the input
    tokens are the same at every capacity, so hit rates compare as hit tokens). O(1)."""
    return 100 * hit_tokens >= percent * theoretical_hit_tokens


def keep_rising(hits: Sequence[int]) -> list[bool]:
    """Which points of an ascending-capacity curve stay on the plot: a point is dropped
    when its hits are below the last kept point's (the curve starts at (0, 0)). O(n)."""
    best, keep = 0, []
    for h in hits:
        keep.append(h >= best)
        best = max(best, h)
    return keep
