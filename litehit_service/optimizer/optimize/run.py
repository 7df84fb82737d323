"""One ``litehit optimize`` run: configuration + trace -> replay -> per-instance results.

:func:`build_setup` turns a validated configuration and its loaded trace into the compiled
replay's :class:`~litehit_core.policy_replay.ReplaySetup` (groups' byte quotas, each
instance's policy code and parameters from :data:`litehit_core.engine.POLICIES`);
:func:`run_optimize` replays and gathers :class:`InstanceResult` per instance. Outputs
(CSV, chart, summary) are :mod:`.outputs`'. Cost: the replay's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from litehit_core.policy_replay import (
    EdgeSetup,
    InstanceSetup,
    ReplayResult,
    ReplaySetup,
    TierSetup,
    replay,
)
from litehit_service.optimizer.optimize.config import MAX_BATCH, GroupConfig, OptimizeConfig
from litehit_service.optimizer.optimize.rows import InstanceRows, RowTotals, instance_rows
from litehit_service.optimizer.optimize.tier_config import EDGE_MODES, WRITE_MODES
from litehit_service.optimizer.optimize.trace import LoadedTrace

__all__ = [
    "InstanceResult",
    "OptimizeResult",
    "build_setup",
    "check_delay",
    "gather",
    "instance_results",
    "run_optimize",
]

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class InstanceResult:
    """One instance after the replay: its rows (or, streamed without pictures, their
    totals: :class:`~.rows.RowTotals`) and totals (summed over its tiers).
    ``capacity_blocks``: the group's quota in this instance's blocks (None = infinite;
    tiered: tier 0's); ``tier_names`` (empty untiered), and per tier the blocks cached at
    the end and evicted from it."""

    instance_id: str
    group_name: str
    policy: str
    rows: InstanceRows | RowTotals
    peak_cached_blocks: int
    cached_blocks: int
    evicted_blocks: int
    expired_blocks: int
    written_blocks: int
    capacity_blocks: int | None
    tier_names: tuple[str, ...] = ()
    tier_cached_blocks: tuple[int, ...] = ()
    tier_evicted_blocks: tuple[int, ...] = ()

    @property
    def hit_rate(self) -> float:
        """Hit tokens / input tokens over every read (0 without reads)."""
        total = self.rows.total_input_tokens
        return self.rows.hit_tokens / total if total else 0.0

    def summary(self) -> dict[str, object]:
        """The machine-readable summary (``--json``)."""
        return {
            "instance_id": self.instance_id,
            "group_name": self.group_name,
            "eviction_policy_type": self.policy,
            "reads": self.rows.reads,
            "input_tokens": self.rows.total_input_tokens,
            "hit_tokens": self.rows.hit_tokens,
            "hit_rate": self.hit_rate,
            "capacity_blocks": self.capacity_blocks,
            "peak_cached_blocks": self.peak_cached_blocks,
            "cached_blocks": self.cached_blocks,
            "evicted_blocks": self.evicted_blocks,
            "expired_blocks": self.expired_blocks,
            "written_blocks": self.written_blocks,
            **(
                {
                    "tiers": [
                        {
                            "name": name,
                            "hit_tokens": int(hits),
                            "cached_blocks": cached,
                            "evicted_blocks": evicted,
                        }
                        for name, hits, cached, evicted in zip(
                            self.tier_names,
                            self.rows.tier_hit_tokens,
                            self.tier_cached_blocks,
                            self.tier_evicted_blocks,
                            strict=True,
                        )
                    ]
                }
                if self.tier_names
                else {}
            ),
        }


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """Every instance's result in configuration order, the replay's seconds and the bytes
    its arrays held at the end."""

    instances: tuple[InstanceResult, ...]
    replay_seconds: float
    memory_bytes: int


def build_setup(
    config: OptimizeConfig, trace: LoadedTrace | None = None, *, ttl_values: tuple[int, ...] = ()
) -> ReplaySetup:
    """The compiled replay's setup for ``config`` (module docstring) and ``trace``'s TTLs
    (without a trace: ``ttl_values``, a stream's so far). LocatedError naming
    ``trace_replay.write_delay_ns`` when a write's due time in ``trace`` would pass int64
    (a stream checks each batch: :func:`check_delay`). O(config)."""
    instances: list[InstanceSetup] = []
    members: list[tuple[int, ...]] = []
    for gi, group in enumerate(config.groups):
        first = len(instances)
        for inst in group.instances:
            sample = (  # draws beyond any cache's size draw the same: capped to int64
                min(max(math.floor(config.batch_size / inst.params["sample_rate"]), 1), MAX_BATCH)
                if inst.policy.dense
                else 0
            )
            instances.append(
                InstanceSetup(
                    kind=inst.policy.kind,
                    group=gi,
                    bytes_per_block=inst.bytes_per_block,
                    sample=sample,
                    fallback=bool(inst.params.get("fallback_on_pressure", True)),
                    refresh=group.ttl_refresh_on_read,
                    dense=inst.policy.dense,
                )
            )
        members.append(tuple(range(first, len(instances))))
    if trace is not None:
        check_delay(config, trace.records.times)
    return ReplaySetup(
        instances=tuple(instances),
        quotas=tuple(g.quota_bytes for g in config.groups),
        members=tuple(members),
        ttl_values=trace.ttl_values if trace is not None else ttl_values,
        eviction_mode=config.eviction_mode,
        batch=config.batch_size,
        delay_ns=config.write_delay_ns,
        tiers=tuple(_tier_setup(g) for g in config.groups),
    )


def check_delay(config: OptimizeConfig, times: np.ndarray) -> None:
    """LocatedError naming ``trace_replay.write_delay_ns`` when a record at one of
    ``times`` (ns) would have its write due past int64. O(len(times))."""
    if len(times) and int(times.max()) > _INT64_MAX - config.write_delay_ns:
        raise config.error(
            "trace_replay.write_delay_ns",
            f"must keep every write's due time "
            f"within int64 ns; the trace ends at {int(times.max())} ns, so at "
            f"most {_INT64_MAX - int(times.max())}, got "
            f"{config.write_delay_ns}",
        )


def _tier_setup(group: GroupConfig) -> TierSetup | None:
    if not group.tiers:
        return None
    s = group.strategy
    return TierSetup(
        quotas=tuple(group.tier_quota_bytes(t) for t in range(len(group.tiers))),
        write_mode=WRITE_MODES.index(s.write_mode),
        propagate=s.access_propagation,
        promote=s.promote,
        threshold=s.selective_write_threshold,
        edges=tuple(
            EdgeSetup(
                EDGE_MODES.index(e.write_mode), e.access_propagation, e.write_propagation, e.promote
            )
            for e in s.edges
        ),  # fmt: skip
    )


def run_optimize(
    config: OptimizeConfig,
    trace: LoadedTrace,
    *,
    progress: Callable[[int], object] | None = None,
    check: bool = False,
) -> OptimizeResult:
    """Replay ``trace`` under ``config``; ``progress(n)`` hears records done. O(keys)."""
    setup = build_setup(config, trace)
    start = time.perf_counter()
    result = replay(setup, trace.records, progress=progress, check=check)
    return gather(config, trace, result, time.perf_counter() - start)


def gather(
    config: OptimizeConfig, trace: LoadedTrace, result: ReplayResult, seconds: float
) -> OptimizeResult:
    """Every instance's :class:`InstanceResult` from a replay of ``trace`` under
    ``config`` (``result``: one replay of every group, or groups replayed apart and
    merged). O(reads)."""
    rows = [
        instance_rows(trace.records, trace.input_lens, result.rows, index, inst.block_size,
                      len(group.tiers))
        for index, (group, inst) in enumerate(
            (g, i) for g in config.groups for i in g.instances
        )
    ]  # fmt: skip
    return OptimizeResult(instance_results(config, result, rows), seconds, result.memory_bytes)


def instance_results(
    config: OptimizeConfig,
    result: ReplayResult,
    rows: Sequence[InstanceRows | RowTotals],
) -> tuple[InstanceResult, ...]:
    """Every instance's :class:`InstanceResult` (configuration order) from a replay's
    totals and each instance's ``rows`` (or their totals). O(instances x tiers)."""
    out: list[InstanceResult] = []
    index = 0
    for group in config.groups:
        quota = group.tier_quota_bytes(0) if group.tiers else group.quota_bytes
        names = tuple(t.name for t in group.tiers)
        n = len(names)
        for inst in group.instances:
            out.append(
                InstanceResult(
                    instance_id=inst.instance_id,
                    group_name=group.group_name,
                    policy=inst.policy.name,
                    rows=rows[index],
                    peak_cached_blocks=int(result.peak[index]),
                    cached_blocks=int(result.cached[index]),
                    evicted_blocks=int(result.evicted[index]),
                    expired_blocks=int(result.expired[index]),
                    written_blocks=int(result.written[index]),
                    capacity_blocks=None if quota < 0 else quota // inst.bytes_per_block,
                    tier_names=names,
                    tier_cached_blocks=tuple(int(v) for v in result.tier_cached[index, :n]),
                    tier_evicted_blocks=tuple(int(v) for v in result.tier_evicted[index, :n]),
                )
            )
            index += 1
    return tuple(out)
