"""Immutable domain values of the online optimizer (no gRPC/protobuf here).

Units: ``capacity_gb`` in binary GiB (1024**3 bytes), sizes in bytes, ``block_size`` in
tokens per block, hit counts and capacities in blocks unless a name says tokens/bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from litehit_core import RequestFact


@dataclass(frozen=True, slots=True)
class InstanceGroup:
    """Capacities and policy shared by the instances of one group.

    ``eviction_policy`` is ``"lru"`` (the only supported policy) or ``"unspecified"``;
    ``ttl_seconds`` 0 disables TTL expiry; ``capacity_gb`` is kept sorted ascending by the
    manager (duplicates kept, one result slot each). ``touch_order`` (offline replays
    only: the wire has no field for it) is ``"tail-first"`` or ``"head-first"`` (LMCache's
    order) for full-attention instances.
    """

    name: str
    capacity_gb: tuple[float, ...]
    eviction_policy: str = "lru"
    shared_group_quota: bool = False
    ttl_seconds: int = 0
    enable_theoretical_max_cache: bool = False
    enable_prefix_hash: bool = False
    touch_order: str = "tail-first"


@dataclass(frozen=True, slots=True)
class LocationSpec:
    """One storage location of a cache block: ``size`` bytes per block."""

    name: str
    size: int


@dataclass(frozen=True, slots=True)
class LocationSpecGroup:
    """A named set of location specs (by name) stored together per block."""

    name: str
    spec_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class InstanceRegistration:
    """How one inference instance lays out its KV cache blocks.

    ``block_size`` is tokens per block; the full-attention group (named, or the only
    group) gives the bytes per block. ``linear_step`` must be 0 (hybrid linear/Mamba
    layouts are not supported yet).
    """

    instance_id: str
    instance_group: str
    block_size: int
    location_spec_infos: tuple[LocationSpec, ...]
    location_spec_groups: tuple[LocationSpecGroup, ...]
    full_location_spec_group_name: str = ""
    linear_location_spec_group_name: str = ""
    linear_step: int = 0


@dataclass(frozen=True, slots=True)
class RegistrationResult:
    """Blocks per capacity slot (ascending ``capacity_gb``) and bytes per block.

    ``outcome`` says what the registration did (not part of the wire response, and not
    compared): ``"created"`` a new instance, ``"unchanged"`` an identical registration of
    an existing one (state and counters kept), ``"replaced"`` a different registration of
    an existing id (fresh state).
    """

    estimated_capacity_blocks: tuple[int, ...]
    size_full_only: int
    size_full_linear: int
    outcome: str = field(default="created", compare=False)


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """One query's outcome at one capacity slot (hits in blocks)."""

    capacity_gb: float
    cache_hit_count: int
    hit_rate: float
    current_unique_keys: int


@dataclass(frozen=True, slots=True)
class PackedQueryResult:
    """The answers to one packed batch of queries of one instance (numpy arrays, one row
    per query in batch order).

    ``hit_blocks[i, j]``: query i's hit blocks at slot j (``capacity_gb`` ascending);
    ``max_hit_blocks``: at unlimited capacity (None when the group's theoretical maximum
    is off); ``unique_blocks``: blocks tracked after the query; ``total_blocks`` and
    ``input_token_lens`` (tokens, the hit-rate denominator) per query.
    """

    block_size_tokens: int
    capacity_gb: tuple[float, ...]
    total_blocks: np.ndarray
    input_token_lens: np.ndarray
    hit_blocks: np.ndarray
    max_hit_blocks: np.ndarray | None
    unique_blocks: np.ndarray

    @property
    def queries(self) -> int:
        """Queries of the batch. O(1)."""
        return len(self.total_blocks)


class TheoreticalResult(NamedTuple):
    """One query's outcome with unlimited capacity; every field is -1 when disabled.

    A NamedTuple (immutable, built at C speed): one is made per query on the hot path.
    """

    max_hit_count: int
    current_unique_keys: int
    hit_rate: float


class TraceQueryResult(NamedTuple):
    """Everything one TraceQuery produced, including the core's capacity-free fact.

    A NamedTuple (immutable, built at C speed): one is made per query on the hot path.

    ``total_blocks`` counts normalized blocks (at ``block_size_tokens``);
    ``input_token_len`` is the token denominator of every hit rate. Per capacity slot
    (ascending, as the group lists them) the parallel tuples hold ``capacity_gb``,
    ``hit_blocks`` (blocks), ``hit_rates`` and ``unique_keys``
    (``min(unique blocks, slot blocks)``); :attr:`capacity_results` zips them.
    """

    total_blocks: int
    input_token_len: int
    capacity_gb: tuple[float, ...]
    hit_blocks: tuple[int, ...]
    hit_rates: tuple[float, ...]
    unique_keys: tuple[int, ...]
    theoretical: TheoreticalResult
    fact: RequestFact
    block_size_tokens: int
    block_bytes: int

    @property
    def capacity_results(self) -> tuple[CapacityResult, ...]:
        """One :class:`CapacityResult` per slot. O(slots)."""
        return tuple(
            map(CapacityResult, self.capacity_gb, self.hit_blocks, self.hit_rates, self.unique_keys)
        )


@dataclass(frozen=True, slots=True)
class CapacitySummary:
    """Cumulative hits of an instance at one capacity slot (``total_hits`` in blocks)."""

    capacity_gb: float
    capacity_blocks: int
    total_hits: int
    hit_rate: float


@dataclass(frozen=True, slots=True)
class InstanceDebugInfo:
    """The instance's unbounded ("theoretical") cache, as the reference documents it.

    ``unique_keys``: blocks tracked now; ``eviction_count``: blocks that cache lost
    (TTL expirations plus blocks dropped past ``max_tracked_blocks``, cumulative);
    ``kv_cache_usage_bytes``: ``unique_keys`` x block bytes; ``memory_usage_bytes``: the
    engine's own memory (estimate); ``ttl_eviction_count``: TTL expirations;
    ``max_tracked_blocks``: the tracking limit (0 = none); ``dropped_blocks``: blocks
    dropped past it.
    """

    block_size: int
    unique_keys: int
    linear_step: int
    eviction_count: int
    memory_usage_bytes: int
    kv_cache_usage_bytes: int
    ttl_eviction_count: int
    max_tracked_blocks: int = 0
    dropped_blocks: int = 0


@dataclass(frozen=True, slots=True)
class InstanceSummary:
    """Cumulative counters of one instance since registration or the last reset.

    ``total_max_hits`` and ``max_hit_rate`` are -1 when theoretical tracking is off.
    """

    instance_id: str
    instance_group: str
    total_queries: int
    total_blocks_queried: int
    total_input_tokens: int
    capacity_summaries: tuple[CapacitySummary, ...]
    theoretical_enabled: bool
    total_max_hits: int
    max_hit_rate: float
    debug_info: InstanceDebugInfo


@dataclass(frozen=True, slots=True)
class HitRatePoint:
    """The live curve at one capacity: ``hit_tokens`` cumulative, ``hit_rate`` over the
    instance's input tokens; ``capacity_blocks`` 0 for hybrid instances (bytes)."""

    capacity_gb: float
    capacity_blocks: int
    capacity_bytes: int
    hit_tokens: int
    hit_rate: float


@dataclass(frozen=True, slots=True)
class TargetCapacity:
    """The smallest capacity whose hits reach ``target_fraction`` of the theoretical hits
    (0 when there are none); ``capacity_blocks`` 0 for hybrid instances."""

    target_fraction: float
    capacity_blocks: int
    capacity_bytes: int
    capacity_gb: float


@dataclass(frozen=True, slots=True)
class HitRateCurveResult:
    """One instance's live curve as GetHitRateCurve answers it (see the proto for each
    field): points, capacities for targets, the totals, and how to read them."""

    points: tuple[HitRatePoint, ...]
    capacity_for_targets: tuple[TargetCapacity, ...]
    total_input_tokens: int
    theoretical_hit_tokens: int
    corners_complete: bool
    resolution_bytes: int
    corners: int
    block_size: int
    block_bytes: int
    linear_step: int
    total_queries: int
    model: str = ""
