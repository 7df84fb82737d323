"""``litehit optimize --sample-rate R --sample-seeds K``: the K seeds' replays and outputs.

Each seed's records (:func:`~.trace.seed_trace`) are replayed under the configuration
scaled for its sample (:func:`~.scale.scaled_config`), K replays at once over
``workers`` forked processes (:class:`~litehit_service.offline.pool.TracePool`: the
sampled trace is inherited, not pickled). Each seed's per-read tables go, in the
reference's format unchanged, into their own folder ``sample-r{R}-seed{k}/`` of the
output folder (:func:`~litehit_core.sampling.sample_dir`), so no reader of
``{instance_id}_hit_rates.csv`` in the output folder mistakes an estimate for an exact
replay; at R = 1 a seed's tables are the exact replay's, byte for byte. The summary says
the numbers are estimates (``≈``, the band over the seeds; ``--json``: ``sample_rate``,
``sample_seeds``, ``hit_rate_low``, ``hit_rate_high``). Each seed's estimate is corrected
by the trace's reuse and has its own variance (:mod:`.estimate`). Cost: K replays of ~R
of the trace each.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from litehit_core.sampling import MIN_CACHE_REQUESTS, sample_dir
from litehit_service.offline.pool import TracePool
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.outputs import write_outputs
from litehit_service.optimizer.optimize.run import OptimizeResult, run_optimize
from litehit_service.optimizer.sampling.estimate import (
    SeedSample,
    SeedTask,
    combine,
    seed_estimate,
    seed_sample,
)
from litehit_service.optimizer.sampling.scale import (
    Estimate,
    cache_requests,
    coarse,
    scaled_config,
    trunk_bytes,
)
from litehit_service.optimizer.sampling.trace import SampledTrace

__all__ = [
    "SampledOptimize",
    "replay_seed",
    "run_sampled",
    "sampled_json",
    "sampled_text",
    "write_sampled",
]


def replay_seed(task: SeedTask, sample: SeedSample) -> OptimizeResult:
    """Replay one seed (a pool task). O(its keys) plus the replay's evictions."""
    return run_optimize(task.config, sample.trace)


@dataclass(frozen=True, slots=True)
class SampledOptimize:
    """Every seed's result and sample (seed order), the sample and the whole trace's
    totals."""

    results: tuple[OptimizeResult, ...]
    sampled: SampledTrace
    trunk_bytes: tuple[tuple[int, ...], ...]
    samples: tuple[SeedSample, ...]

    def cache_requests(self, index: int) -> float | None:
        """How many average reads instance ``index``'s scaled cache holds (the smallest
        over the seeds; None: infinite, or rate 1: nothing scaled)."""
        caps = [(index, r.instances[index].capacity_blocks) for r in self.results]
        return cache_requests(self.sampled, caps)

    def estimate(self, index: int, tier: int | None = None) -> Estimate:
        """Instance ``index``'s hit rate over the seeds (``tier``: the share of input
        tokens that tier served)."""
        return combine([
            seed_estimate(sample, result, [index], tier)
            for sample, result in zip(self.samples, self.results, strict=True)
        ])  # fmt: skip


def run_sampled(config: OptimizeConfig, sampled: SampledTrace, *, workers: int) -> SampledOptimize:
    """Replay every seed of ``sampled`` (module docstring) on ``workers`` processes."""
    rate = sampled.options.rate
    samples = {f"seed{k}": seed_sample(sampled, k, config) for k in range(sampled.options.seeds)}
    trunks = [tuple(trunk_bytes(config, s.trace, sampled.trunk)) for s in samples.values()]
    tasks = [
        SeedTask(key, "optimize", -1, scaled_config(config, trunk, rate))
        for key, trunk in zip(samples, trunks, strict=True)
    ]
    with TracePool(samples, workers=min(workers, len(tasks))) as pool:
        futures = [pool.submit(replay_seed, task, task.key) for task in tasks]
        results = tuple(f.result() for f in futures)
    return SampledOptimize(results, sampled, tuple(trunks), tuple(samples.values()))


def write_sampled(run: SampledOptimize, out_dir: str, output_format: str = "csv") -> list[str]:
    """Each seed's per-read tables into its :func:`~litehit_core.sampling.sample_dir`;
    the paths written."""
    written: list[str] = []
    for k, result in enumerate(run.results):
        folder = os.path.join(out_dir, sample_dir(run.sampled.options.rate, k))
        written += write_outputs(result, folder, draw_chart=False, output_format=output_format)
    return written


def sampled_text(run: SampledOptimize) -> str:
    """The summary: per instance its estimated hit rate with the band, the sampled and
    whole reads; a head line naming the sample."""
    s = run.sampled
    opts = s.options
    lines = [
        f"sampled replay: R = {opts.rate:g}, {opts.seeds} seed{'s' if opts.seeds != 1 else ''} "
        f"(estimates, corrected by the trace's reuse; the band is a 90% interval); trunk of "
        f"{len(s.trunk)} block(s) (share >= {opts.theta:g})",
        f"{'instance':<20} {'policy':<15} {'reads':>9} {'sampled':>9}  hit rate",
    ]
    first = run.results[0]
    for index, r in enumerate(first.instances):
        sampled_reads = round(sum(x.instances[index].rows.reads for x in run.results) / opts.seeds)
        lines.append(
            f"{r.instance_id:<20} {r.policy:<15} {int(s.reads[index]):>9} {sampled_reads:>9}  "
            f"{run.estimate(index).text()}"
        )
        for tier, name in enumerate(r.tier_names):
            lines.append(f"  tier {tier} ({name}): served {run.estimate(index, tier).text()}")
        if coarse(held := run.cache_requests(index)):
            assert held is not None
            enough = min(1.0, s.options.rate * MIN_CACHE_REQUESTS / max(held, 1e-9))
            lines.append(
                f"  coarse: the scaled cache holds ~{held:.3g} average requests (< "
                f"{MIN_CACHE_REQUESTS}), so this estimate reads low; --sample-rate "
                f"{enough:.2g} or more holds {MIN_CACHE_REQUESTS}"
            )
    return "\n".join(lines)


def sampled_json(run: SampledOptimize, extra: dict[str, object] | None = None) -> str:
    """The summary as one JSON object: ``sample_rate``, ``sample_seeds``, the trunk, and
    per instance ``hit_rate`` (the estimate), ``hit_rate_low``/``hit_rate_high`` (the
    band), ``hit_rate_per_seed``, the whole trace's reads and input tokens and each seed's
    sampled ones, ``estimate: true``."""
    s = run.sampled
    instances = []
    for index, r in enumerate(run.results[0].instances):
        est = run.estimate(index)
        held = run.cache_requests(index)
        instances.append(
            {
                "instance_id": r.instance_id,
                "group_name": r.group_name,
                "eviction_policy_type": r.policy,
                "estimate": True,
                "hit_rate": est.rate,
                "hit_rate_low": est.low,
                "hit_rate_high": est.high,
                "hit_rate_per_seed": est.per_seed,
                "reads": int(s.reads[index]),
                "input_tokens": int(s.input_tokens[index]),
                "sampled_reads": [x.instances[index].rows.reads for x in run.results],
                "sampled_input_tokens": list(est.inputs),
                "sampled_hit_tokens": list(est.hits),
                "tiers": [
                    {
                        "name": name,
                        "hit_rate": (t := run.estimate(index, k)).rate,
                        "hit_rate_low": t.low,
                        "hit_rate_high": t.high,
                    }
                    for k, name in enumerate(r.tier_names)
                ],  # fmt: skip
                "scaled_cache_requests": held,
                "coarse": coarse(held),
                "sampled_capacity_blocks": [
                    x.instances[index].capacity_blocks for x in run.results
                ],  # fmt: skip
            }
        )
    data: dict[str, object] = {
        "sample_rate": s.options.rate,
        "sample_seeds": s.options.seeds,
        "trunk_share": s.options.theta,
        "trunk_blocks": len(s.trunk),
        "trunk_bytes_per_seed": [list(t) for t in run.trunk_bytes],
        "instances": instances,
        "seed_dirs": [sample_dir(s.options.rate, k) for k in range(s.options.seeds)],
    }
    data.update(extra or {})
    return json.dumps(data, indent=2)
