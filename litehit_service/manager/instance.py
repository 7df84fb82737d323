"""One registered instance: its fixed configuration, its engine and its counters.

:class:`InstanceState` is the manager's live record of an instance (never handed out);
:class:`InstanceInfo` is the read-only view the metrics and the offline replay get.
Counters are in blocks (hits, blocks queried) and tokens (the hit-rate denominator);
hit rates are ratios of these accumulated integers.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from operator import add

import numpy as np

from litehit_core.accumulator import HitCurveAccumulator
from litehit_core.curve import InstanceCurve
from litehit_core.engine import EngineSpec, ReplayEngine, create_engine
from litehit_core.projector import Projection
from litehit_core.sampled_estimate import SubtreeSampler
from litehit_service.model import (
    CapacitySummary,
    InstanceDebugInfo,
    InstanceGroup,
    InstanceRegistration,
    InstanceSummary,
    TheoreticalResult,
)

__all__ = ["THEORETICAL_OFF", "InstanceInfo", "InstanceState"]

THEORETICAL_OFF = TheoreticalResult(max_hit_count=-1, current_unique_keys=-1, hit_rate=-1.0)
"""The theoretical result of an instance whose group has theoretical tracking off."""


class InstanceState:
    """One registered instance: its configuration, its engine and cumulative counters.

    Configuration attributes (``registration``, ``group``, ``spec``, ``projection``,
    ``block_bytes``, ``capacity_blocks``, ``batched``: its engine replays a batch in one
    compiled call, as the engine registry says...) never change after construction. ``engine``,
    ``clock_ns`` (the instance's monotone clock, see :class:`QueryPolicy`) and the counters
    (``total_queries``, ``total_blocks_queried`` in normalized blocks, ``total_input_tokens``,
    ``total_hits`` per slot in blocks, ``total_max_hits`` in blocks) are read and written
    only while holding ``lock``; the manager never hands this object out (see
    :class:`InstanceInfo`).
    """

    __slots__ = (
        "registration",
        "group",
        "instance_id",
        "instance_group",
        "block_size",
        "block_bytes",
        "capacity_gb",
        "capacity_blocks",
        "slot_units",
        "curve_resolution",
        "curve_max_corners",
        "enable_prefix_hash",
        "theoretical_enabled",
        "spec",
        "batched",
        "projection",
        "lock",
        "engine",
        "clock_ns",
        "total_queries",
        "total_blocks_queried",
        "total_input_tokens",
        "total_hits",
        "total_max_hits",
        "curve",
        "add_to_curve",
        "sampler",
    )

    def __init__(
        self,
        registration: InstanceRegistration,
        group: InstanceGroup,
        spec: EngineSpec,
        projection: Projection,
        slot_units: tuple[int, ...],
        capacity_blocks: tuple[int, ...],
        curve_resolution: int = 1,
        curve_max_corners: int = 0,
    ) -> None:
        self.registration = registration
        self.group = group
        self.instance_id = registration.instance_id
        self.instance_group = group.name
        self.block_size = registration.block_size
        self.block_bytes = projection.block_bytes
        self.capacity_gb = group.capacity_gb
        self.capacity_blocks = capacity_blocks
        self.slot_units = slot_units
        self.curve_resolution = curve_resolution
        self.curve_max_corners = curve_max_corners
        self.enable_prefix_hash = group.enable_prefix_hash
        self.theoretical_enabled = group.enable_theoretical_max_cache
        self.spec = spec
        self.batched = spec.description.batched(spec)
        self.projection = projection
        self.lock = threading.Lock()
        self._fresh()

    def _fresh(self) -> None:
        self.engine: ReplayEngine = create_engine(self.spec)
        self.clock_ns = 0
        self.total_queries = 0
        self.total_blocks_queried = 0
        self.total_input_tokens = 0
        self.total_hits = [0] * len(self.capacity_blocks)
        self.total_max_hits = 0
        self.sampler: SubtreeSampler | None = None
        """A replay sampled by subtree: this instance's sample (made on first use)."""
        self.set_curve(self.new_curve())

    def sample_columns(self) -> tuple[int, int, np.ndarray]:
        """A replay sampled by subtree (call with ``lock`` held): the trunk so far in the
        curve's unit (its blocks, or the bytes they occupy with their states:
        :meth:`~litehit_core.engine.EngineSpec.chain_size`), the whole trace's reused
        blocks estimated so far (rounded, at least 0) and the last batch's sample reuse
        per request (:class:`~litehit_core.sampled_estimate.SubtreeSampler`). O(1)."""
        sampler = self.sampler
        if sampler is None:
            return 0, 0, np.zeros(0, dtype=np.int64)
        trunk = self.spec.chain_size(sampler.trunk_blocks)
        return trunk, max(round(sampler.reuse.blocks), 0), sampler.last_reuse

    def count(self, hits: Sequence[int], best: int, queries: int, blocks: int, tokens: int) -> None:
        """Add queries to the counters (call with ``lock`` held): hit blocks per slot,
        hit blocks at infinite capacity (kept only with the theoretical maximum on),
        queries, blocks and tokens. O(slots)."""
        totals = self.total_hits
        totals[:] = map(add, totals, hits)
        if self.theoretical_enabled:
            self.total_max_hits += best
        self.total_queries += queries
        self.total_blocks_queried += blocks
        self.total_input_tokens += tokens

    def set_curve(self, curve: InstanceCurve) -> None:
        """Make ``curve`` the live curve (its add bound for the query path). O(1)."""
        self.curve = curve
        self.add_to_curve = curve.add_fact_curve

    def curve_view(self) -> InstanceCurve:
        """A frozen copy of the live curve with this instance's query and token counts;
        call with ``lock`` held. O(1) after merging the curve's buffer."""
        view = self.curve.frozen()
        view.requests, view.input_tokens = self.total_queries, self.total_input_tokens
        return view

    def new_curve(self, accumulator: HitCurveAccumulator | None = None) -> InstanceCurve:
        """An empty live curve for this instance (or one around ``accumulator``). O(1)."""
        return InstanceCurve(
            self.instance_id,
            self.block_size,
            self.block_bytes,
            model=self.spec.model,
            resolution_bytes=self.curve_resolution,
            max_corners=self.curve_max_corners,
            accumulator=accumulator,
        )

    def reset(self) -> None:
        """Forget every block and zero every counter (a fresh engine). O(1) + GC."""
        with self.lock:
            self._fresh()

    def info(self) -> InstanceInfo:
        """The immutable configuration of this instance. O(1)."""
        return InstanceInfo(
            self.instance_id,
            self.instance_group,
            self.registration,
            self.group,
            self.spec,
            self.block_bytes,
            self.capacity_blocks,
        )

    def summary(self) -> InstanceSummary:
        """A consistent snapshot of the counters and debug info, taken under ``lock``.

        Per slot ``hit_rate = total_hits * block_size / total_input_tokens`` (0.0 without
        tokens). O(slots) plus the cost of the engine's ``memory_usage_bytes``.
        """
        with self.lock:
            engine = self.engine
            unique = engine.current_unique_blocks()
            memory = engine.memory_usage_bytes() + self.curve.memory_bytes()
            expired = engine.expired_blocks
            dropped = engine.dropped_blocks
            kv_bytes = engine.tracked_bytes(self.block_bytes)
            queries = self.total_queries
            blocks = self.total_blocks_queried
            tokens = self.total_input_tokens
            hits = tuple(self.total_hits)
            max_hits = self.total_max_hits
        bs = self.block_size
        caps = tuple(
            CapacitySummary(gb, cap, h, h * bs / tokens if tokens else 0.0)
            for gb, cap, h in zip(self.capacity_gb, self.capacity_blocks, hits, strict=True)
        )
        if self.theoretical_enabled:
            max_rate = max_hits * bs / tokens if tokens else 0.0
        else:
            max_hits, max_rate = -1, -1.0
        debug = InstanceDebugInfo(
            block_size=bs,
            unique_keys=unique,
            linear_step=self.registration.linear_step,
            eviction_count=expired + dropped,
            memory_usage_bytes=memory,
            kv_cache_usage_bytes=kv_bytes,
            ttl_eviction_count=expired,
            max_tracked_blocks=self.spec.max_tracked_blocks,
            dropped_blocks=dropped,
        )
        return InstanceSummary(
            instance_id=self.instance_id,
            instance_group=self.instance_group,
            total_queries=queries,
            total_blocks_queried=blocks,
            total_input_tokens=tokens,
            capacity_summaries=caps,
            theoretical_enabled=self.theoretical_enabled,
            total_max_hits=max_hits,
            max_hit_rate=max_rate,
            debug_info=debug,
        )


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """A read-only view of one instance's configuration (what :meth:`instance_infos` hands
    out instead of the live state): ids, registration, group, engine spec, block bytes and
    the capacity of every slot in blocks (ascending, as the group lists them)."""

    instance_id: str
    instance_group: str
    registration: InstanceRegistration
    group: InstanceGroup
    spec: EngineSpec
    block_bytes: int
    capacity_blocks: tuple[int, ...]
