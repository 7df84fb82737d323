"""Capacities for a sampled replay, and the estimate with its band over the seeds.

A sampled replay at rate R sees every trunk block (each kept record carries its trunk)
and about R of everything else, so a group's quota ``Q`` becomes ``T + R (Q - T)``
(:func:`~litehit_core.sampling.scaled_bytes`), ``T`` being the bytes of the trunk blocks
the seed's records carry on the group's instances; each tier's capacity likewise; the
eviction batch per instance becomes ``max(1, round(R b))``. TTLs and write delays are
times: they never scale. :func:`unscaled_bytes` maps a sampled byte count (a peak) back.

The estimate of a hit rate over the seeds and its 90 % band are
:class:`~litehit_core.sampled_facts.Estimate` (shared with ``litehit replay
--sample-rate``), from each seed's estimate corrected by the trace's reuse
(:mod:`.estimate`). Cost: O(records) per seed for the trunk bytes, O(groups) the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from litehit_core.sampled_facts import Estimate
from litehit_core.sampling import MIN_CACHE_REQUESTS, scaled_bytes, scaled_count
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.trace import LoadedTrace
from litehit_service.optimizer.sampling.trace import SampledTrace

__all__ = [
    "Estimate",
    "cache_requests",
    "coarse",
    "scaled_config",
    "trunk_bytes",
    "unscaled_bytes",
]

GIB = 1 << 30


def trunk_bytes(config: OptimizeConfig, trace: LoadedTrace, trunk: np.ndarray) -> list[int]:
    """Per group of ``config`` the bytes of the distinct trunk blocks ``trace``'s records
    carry on its instances (one copy per instance). O(keys log trunk)."""
    r = trace.records
    n_inst = len(config.instances)
    if not len(trunk) or not len(r.keys):
        return [0] * len(config.groups)
    lens = np.diff(r.key_off)
    insts = np.repeat(r.insts.astype(np.int64), lens)
    at = np.minimum(np.searchsorted(trunk, r.keys), len(trunk) - 1)
    inside = trunk[at] == r.keys
    pairs = np.unique(insts[inside] * len(trunk) + at[inside])
    per_inst = np.bincount(pairs // len(trunk), minlength=n_inst)
    out, k = [], 0
    for g in config.groups:
        out.append(sum(int(per_inst[k + j]) * i.bytes_per_block
                       for j, i in enumerate(g.instances)))  # fmt: skip
        k += len(g.instances)
    return out


def _gib(quota: int) -> float:
    value = -1.0 if quota < 0 else quota / GIB
    if quota >= 0 and math.floor(value * GIB) != quota:
        raise ValueError(f"a quota of {quota} bytes is not exact in GiB")
    return value


def scaled_config(config: OptimizeConfig, trunk: Sequence[int], rate: float) -> OptimizeConfig:
    """``config`` for a replay of a sample at ``rate`` (module docstring): every group's
    quota and tier capacities scaled with its trunk's bytes ``trunk[g]`` kept whole
    (``used_percentage`` folded in, then 1), the eviction batch scaled. At rate 1 the
    replay is the exact one (the same bytes, the same batch). O(groups)."""
    groups = []
    for g, t in zip(config.groups, trunk, strict=True):
        quota = scaled_bytes(g.quota_bytes, t, rate)
        tiers = tuple(
            replace(tier, capacity=_gib(scaled_bytes(g.tier_quota_bytes(k), t, rate)))
            for k, tier in enumerate(g.tiers)
        )
        groups.append(replace(g, quota_capacity=_gib(quota), used_percentage=1.0, tiers=tiers))
    return replace(config, groups=tuple(groups), batch_size=scaled_count(config.batch_size, rate))


def unscaled_bytes(sampled: int, trunk: int, rate: float) -> int:
    """The full-trace bytes a sampled replay's ``sampled`` bytes stand for: ``T + (s - T)
    / R`` with ``T = min(trunk, sampled)``, rounded down. O(1)."""
    t = min(trunk, sampled)
    return t + math.floor((sampled - t) / rate)


def cache_requests(
    sampled: SampledTrace, capacities: Iterable[tuple[int, int | None]]
) -> float | None:
    """The fewest of the whole trace's average reads that any scaled cache of
    ``capacities`` ((instance index, capacity in its blocks; None = infinite) pairs)
    holds; None at rate 1 (nothing scaled) or when none is finite. Under
    :data:`~litehit_core.sampling.MIN_CACHE_REQUESTS` the estimate is coarse. O(pairs)."""
    if sampled.options.rate == 1:
        return None
    blocks, reads = sampled.reuse.read_blocks, sampled.reads
    held = [
        cap * int(reads[i]) / int(blocks[i])
        for i, cap in capacities
        if cap is not None and reads[i] > 0 and blocks[i] > 0
    ]
    return min(held) if held else None


def coarse(requests: float | None) -> bool:
    """Whether a scaled cache holding ``requests`` average reads is too small to trust
    (:data:`~litehit_core.sampling.MIN_CACHE_REQUESTS`)."""
    return requests is not None and requests < MIN_CACHE_REQUESTS
