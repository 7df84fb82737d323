"""One seed's sampled replay turned into an estimate of the whole trace's hit rate.

:func:`seed_sample` gathers what a seed's estimates need besides its replay: its records
(:func:`~.trace.seed_trace`), per record its sampling unit (the subtree that kept it) and
its reused tokens in the sample (:func:`~litehit_core.sampled_estimate.sample_reuse`),
and per instance the whole trace's reuse estimated by the seed's block sample.
:func:`seed_estimate` sums a replay's hit tokens, input tokens and reuse per unit and
applies :func:`~litehit_core.sampled_estimate.regression_estimate`: the estimate and its
variance. :func:`replay_point` is a pool task doing both for a trade-off point (the rows
never leave the worker). Cost: O(records + keys log keys) per seed, O(reads) per
estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from litehit_core.policy_replay.loop import WRITE
from litehit_core.sampled_estimate import Reuse, regression_estimate, sample_reuse
from litehit_core.sampled_facts import Estimate
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.rows import InstanceRows
from litehit_service.optimizer.optimize.run import OptimizeResult, run_optimize
from litehit_service.optimizer.optimize.trace import LoadedTrace
from litehit_service.optimizer.sampling.trace import SampledTrace, seed_mask, seed_trace
from litehit_service.optimizer.tradeoff.points import Point, point_from_result

__all__ = [
    "SeedEstimate",
    "SeedPoint",
    "SeedSample",
    "SeedTask",
    "combine",
    "replay_point",
    "seed_estimate",
    "seed_sample",
]


@dataclass(frozen=True, slots=True)
class SeedSample:
    """One seed's records (``trace``, replay order) and, per record, its unit index
    (``units``, 0..n_units-1) and reused tokens (``reuse_tokens``); per instance the whole
    trace's reuse (``reuse``); the sample ``rate``."""

    trace: LoadedTrace
    units: np.ndarray
    n_units: int
    reuse_tokens: np.ndarray
    reuse: tuple[Reuse, ...]
    rate: float


class SeedEstimate(NamedTuple):
    """One seed's estimate of a hit rate, its variance, and the sampled hit and input
    tokens it rests on."""

    rate: float
    variance: float
    hit_tokens: int
    input_tokens: int


def combine(seeds: Sequence[SeedEstimate]) -> Estimate:
    """The :class:`~litehit_core.sampled_facts.Estimate` of K seeds' estimates (seed
    order). O(K)."""
    return Estimate(
        tuple(s.hit_tokens for s in seeds),
        tuple(s.input_tokens for s in seeds),
        tuple(s.rate for s in seeds),
        tuple(s.variance for s in seeds),
    )


def seed_sample(sampled: SampledTrace, seed: int, config: OptimizeConfig) -> SeedSample:
    """Seed ``seed``'s :class:`SeedSample` of ``sampled`` (read under ``config``).
    O(its keys log keys)."""
    mine = seed_mask(sampled, seed)
    trace = seed_trace(sampled, seed, mine)
    _, units = np.unique(sampled.units[mine], return_inverse=True)
    r = trace.records
    tokens = np.array([i.block_size for i in config.instances], dtype=np.int64)
    reuse = sample_reuse(r.key_off, r.keys, r.insts, r.kinds != WRITE, tokens)
    whole = sampled.reuse.reuse(seed, tokens.tolist(), sampled.input_tokens.tolist())
    n_units = int(units.max()) + 1 if len(units) else 0
    return SeedSample(trace, units.astype(np.int64), n_units, reuse, tuple(whole),
                      sampled.options.rate)  # fmt: skip


def _read_hits(rows: InstanceRows, tier: int | None) -> np.ndarray:
    if tier is None:
        return (rows.local_hits + rows.remote_hits) * rows.block_size
    return rows.tier_hits[:, tier] * rows.block_size


def seed_estimate(
    sample: SeedSample,
    result: OptimizeResult,
    instances: Sequence[int],
    tier: int | None = None,
) -> SeedEstimate:
    """The hit rate of ``instances`` (indexes in configuration order) together, over the
    whole trace, from ``result`` (the replay of ``sample``; ``tier``: the share tier
    ``tier`` served). RuntimeError if the replay's rows do not follow the sample's reads
    (a bug). O(reads)."""
    r = sample.trace.records
    n = sample.n_units
    hits = np.zeros(n, dtype=np.float64)
    inputs = np.zeros(n, dtype=np.float64)
    reuse = np.zeros(n, dtype=np.float64)
    whole = Reuse(0.0, 0.0, 0)
    hit_total = input_total = 0
    for index in instances:
        rows = result.instances[index].rows
        if not isinstance(rows, InstanceRows):
            raise TypeError("a sampled estimate needs the replay's rows, not their totals")
        reads = np.flatnonzero((r.kinds != WRITE) & (r.insts == index))
        if len(reads) != rows.reads or not np.array_equal(r.times[reads], rows.timestamp_ns):
            raise RuntimeError(f"instance {index}: the replay's rows do not follow its reads")
        units = sample.units[reads]
        read_hits = _read_hits(rows, tier)
        hits += np.bincount(units, weights=read_hits, minlength=n)
        inputs += np.bincount(units, weights=rows.input_tokens, minlength=n)
        reuse += np.bincount(units, weights=sample.reuse_tokens[reads], minlength=n)
        whole = whole + sample.reuse[index]
        hit_total += int(read_hits.sum())
        input_total += rows.total_input_tokens
    present = inputs > 0
    rate, variance = regression_estimate(
        hits[present], inputs[present], reuse[present], whole, sample.rate
    )
    return SeedEstimate(rate, variance, hit_total, input_total)


class SeedTask(NamedTuple):
    """One seed's replay of ``config`` (scaled) over the pool's sample ``key``, reported as
    the point ``label`` at ``capacity_bytes`` (-1 = infinite)."""

    key: str
    label: str
    capacity_bytes: int
    config: OptimizeConfig


class SeedPoint(NamedTuple):
    """A sampled replay's point (the sample's own numbers) and its estimate over every
    instance."""

    point: Point
    estimate: SeedEstimate


def replay_point(task: SeedTask, sample: SeedSample) -> SeedPoint:
    """Replay ``sample`` under ``task.config`` (a pool task): its point and estimate.
    O(keys) plus the replay's evictions."""
    result = run_optimize(task.config, sample.trace)
    point = point_from_result(task.label, task.capacity_bytes, task.config, result)
    every = range(len(task.config.instances))
    return SeedPoint(point, seed_estimate(sample, result, every))
