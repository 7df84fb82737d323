"""The online optimizer: instance groups, registrations and per-instance LiteHit replays.

:class:`OnlineOptimizerManager` validates every admin request (groups, registrations),
persists it in the :class:`~litehit_service.registry.Registry` *before* publishing it in
memory, and answers TraceQuery by replaying block keys through one
:class:`litehit_core.LiteHit` per instance and projecting the request's capacity-free
fact onto every capacity slot with the core projector.

Errors are :class:`~litehit_service.errors.OptimizerError` subclasses whose messages name
the field and value; a failed call never changes state.

Concurrency: admin operations are serialized by one re-entrant lock; each instance has
its own lock for queries, resets and snapshots. ``trace_query`` never takes the admin
lock, so queries on different instances run concurrently (as far as the GIL allows) and
queries on one instance are applied one at a time in arrival order.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from operator import add
from typing import Any

import numpy as np

from litehit_core import (
    FACT_MODELS,
    MAX_CAPACITY_GB,
    InvalidRequestError,
    RequestFact,
    capacity_gb_to_bytes,
    normalize_request,
)
from litehit_core.accumulator import HitCurveAccumulator
from litehit_core.curve import GIB, InstanceCurve, log_spaced
from litehit_core.engine import LRU_ENGINES, EngineSpec, ReplayEngine, create_engine
from litehit_core.model import MAX_OBJECT_BYTES, TOUCH_ORDERS, touch_order_model
from litehit_core.normalize import plain_token_lens
from litehit_core.projector import Projection, project_segments, segment_sums
from litehit_core.state import EngineState
from litehit_service.errors import (
    DuplicateEntity,
    InstanceNotExist,
    InvalidArgument,
    OptimizerError,
    ReachMaxEntityCapacity,
    RegistryIOError,
    Unsupported,
)
from litehit_service.model import (
    CapacitySummary,
    HitRateCurveResult,
    HitRatePoint,
    InstanceDebugInfo,
    InstanceGroup,
    InstanceRegistration,
    InstanceSummary,
    LocationSpec,
    LocationSpecGroup,
    PackedQueryResult,
    RegistrationResult,
    TargetCapacity,
    TheoreticalResult,
    TraceQueryResult,
)
from litehit_service.policy import BatchQueryError, QueryPolicy
from litehit_service.registry import Registry, group_to_dict, registration_to_dict
from litehit_service.snapshots import SnapshotError, SnapshotStore

_NS_PER_SECOND = 1_000_000_000
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_TTL_SECONDS = INT64_MAX // _NS_PER_SECOND

DEFAULT_MAX_INSTANCES = 1024
DEFAULT_MAX_TRACKED_BLOCKS = 8_388_608
MAX_CURVE_POINTS = 100_000
DEFAULT_CURVE_POINTS = 512
MAX_CURVE_TARGETS = 1_000
CURVE_CORNERS_PER_TRACKED_BLOCK = 4
MIN_CURVE_CORNERS = 1 << 16
log = logging.getLogger(__name__)

THEORETICAL_OFF = TheoreticalResult(max_hit_count=-1, current_unique_keys=-1, hit_rate=-1.0)
"""The theoretical result of an instance whose group has theoretical tracking off."""


class InstanceState:
    """One registered instance: its configuration, its engine and cumulative counters.

    Configuration attributes (``registration``, ``group``, ``spec``, ``projection``,
    ``block_bytes``, ``capacity_blocks``...) never change after construction. ``engine``,
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
        self.set_curve(self.new_curve())

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


@dataclass(frozen=True, slots=True)
class ManagerLimits:
    """Bounds on what clients can make the manager hold; 0 = unlimited.

    ``max_instances``: registered instances (one more is REACH_MAX_ENTITY_CAPACITY).
    ``max_tracked_blocks``: distinct blocks one instance's engine tracks; past it the least
    recent are dropped, so every slot (at most this many blocks, checked at registration)
    stays exact and the theoretical maximum becomes an LRU of this many blocks.
    """

    max_instances: int = 0
    max_tracked_blocks: int = 0

    def __post_init__(self) -> None:
        for name in ("max_instances", "max_tracked_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")

    @classmethod
    def online(
        cls,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        max_tracked_blocks: int = DEFAULT_MAX_TRACKED_BLOCKS,
    ) -> ManagerLimits:
        """The service's limits (defaults: 1,024 instances, 8,388,608 blocks each)."""
        return cls(max_instances=max_instances, max_tracked_blocks=max_tracked_blocks)


class OnlineOptimizerManager:
    """Groups, registrations and live hit-rate tracking for many instances.

    ``registry`` persists configuration (None: memory only); ``policy`` holds the rules
    every query follows (default: :meth:`QueryPolicy.online`; the offline replay passes
    :meth:`QueryPolicy.offline`); ``limits`` bounds what clients can make it hold
    (default: unlimited; ``litehit serve`` passes :meth:`ManagerLimits.online`);
    ``state_store`` keeps each instance's durable snapshot (None: state is not kept across
    restarts). ``lru_engine``: the implementation of full-attention (``"lru"``) instances,
    one of :data:`~litehit_core.engine.LRU_ENGINES` (the same facts either way; see
    :class:`~litehit_core.engine.EngineSpec`); ValueError otherwise.
    """

    def __init__(
        self,
        registry: Registry | None = None,
        policy: QueryPolicy | None = None,
        limits: ManagerLimits | None = None,
        state_store: SnapshotStore | None = None,
        lru_engine: str = "python",
    ) -> None:
        if lru_engine not in LRU_ENGINES:
            raise ValueError(f"lru_engine must be one of {list(LRU_ENGINES)}, got {lru_engine!r}")
        self.lru_engine = lru_engine
        self._registry = registry
        self.state_store = state_store
        self.state_stats = StateStats()
        self.policy = policy if policy is not None else QueryPolicy.online()
        self.limits = limits if limits is not None else ManagerLimits()
        self.instance_replacements = 0
        """Registrations that replaced an existing instance with a different one (cumulative)."""
        self._admin = threading.RLock()
        self._groups: dict[str, InstanceGroup] = {}
        self._instances: dict[str, InstanceState] = {}

    # ------------------------------------------------------------------ restore

    def restore(self) -> None:
        """Replace the in-memory configuration by the registry's (fresh LRU state/counters).

        A stored entry that no longer validates raises RegistryIOError naming it and
        changes nothing. No-op without a registry. O(stored rows).
        """
        if self._registry is None:
            return
        with self._admin:
            stored_groups, stored_regs = self._registry.load()
            groups: dict[str, InstanceGroup] = {}
            for g in stored_groups:
                try:
                    groups[g.name] = validated_group(g)
                except OptimizerError as exc:
                    raise RegistryIOError(
                        f"registry {self._registry.path!r}: stored instance group {g.name!r} "
                        f"is invalid: {exc}"
                    ) from exc
            instances: dict[str, InstanceState] = {}
            for reg in stored_regs:
                try:
                    instances[reg.instance_id] = _build_state(
                        reg, groups, self.limits, self.lru_engine
                    )[0]
                except OptimizerError as exc:
                    raise RegistryIOError(
                        f"registry {self._registry.path!r}: stored instance "
                        f"{reg.instance_id!r} is invalid: {exc}"
                    ) from exc
            self._groups = groups
            self._instances = instances

    # ------------------------------------------------------------------- groups

    def create_group(self, group: InstanceGroup) -> None:
        """Validate and add a new group; DuplicateEntity if the name is taken."""
        g = validated_group(group)
        self.policy.check_touch_order(g.name, g.touch_order)
        with self._admin:
            if g.name in self._groups:
                raise DuplicateEntity(f"instance group {g.name!r} already exists")
            self._save(lambda r: r.save_group(g))
            self._groups[g.name] = g

    def update_group(self, group: InstanceGroup) -> None:
        """Replace an existing group that has no registered instances."""
        g = validated_group(group)
        self.policy.check_touch_order(g.name, g.touch_order)
        with self._admin:
            self._require_group(g.name)
            self._require_no_instances(g.name, "updating")
            self._save(lambda r: r.save_group(g))
            self._groups[g.name] = g

    def remove_group(self, name: str) -> None:
        """Delete an existing group that has no registered instances."""
        with self._admin:
            self._require_group(name)
            self._require_no_instances(name, "removing")
            self._save(lambda r: r.delete_group(name))
            del self._groups[name]

    def get_group(self, name: str) -> InstanceGroup:
        """The group ``name`` (capacity_gb sorted ascending); InstanceNotExist if absent."""
        with self._admin:
            return self._require_group(name)

    def list_groups(self) -> list[InstanceGroup]:
        """Every group, sorted by name. O(groups log groups)."""
        with self._admin:
            return [self._groups[k] for k in sorted(self._groups)]

    # ------------------------------------------------------------ registrations

    def register_instance(self, reg: InstanceRegistration) -> RegistrationResult:
        """Validate, persist and place an instance; idempotent for an identical registration.

        Registering an id again with an identical registration (what a restarting gateway
        does) keeps its state and counters and returns the same result (``outcome``
        ``"unchanged"``). A different registration of an existing id replaces it with fresh
        state (``"replaced"``: logged at WARNING and counted in
        :attr:`instance_replacements`). A new id beyond ``limits.max_instances`` raises
        ReachMaxEntityCapacity. A failure leaves any previous registration of the same id
        untouched. O(specs + slots).
        """
        with self._admin:
            state, result = _build_state(reg, self._groups, self.limits, self.lru_engine)
            iid = state.instance_id
            existing = self._instances.get(iid)
            if existing is not None and existing.registration == state.registration:
                return replace(result, outcome="unchanged")
            limit = self.limits.max_instances
            if existing is None and limit and len(self._instances) >= limit:
                raise ReachMaxEntityCapacity(
                    f"instance_id {iid!r} cannot be registered: {len(self._instances)} "
                    f"instances are registered and max_instances is {limit}"
                )
            self._save(lambda r: r.save_instance(state.registration))
            self._instances[iid] = state
            self._forget_state(iid)
            if existing is None:
                return result
            self.instance_replacements += 1
            log.warning(
                "instance_id %r re-registered with a different registration: replaced with "
                "fresh state (its counters restart at zero)",
                iid,
            )
            return replace(result, outcome="replaced")

    def remove_instance(self, instance_id: str) -> None:
        """Forget an instance (memory, registry and therefore metrics)."""
        with self._admin:
            self._require_instance(instance_id)
            self._save(lambda r: r.delete_instance(instance_id))
            del self._instances[instance_id]
            self._forget_state(instance_id)

    def get_instance(self, instance_id: str) -> InstanceRegistration:
        """The registration of ``instance_id``; InstanceNotExist if absent."""
        return self._require_instance(instance_id).registration

    # ------------------------------------------------------------------ queries

    def trace_query(
        self,
        instance_id: str,
        block_keys: Sequence[int],
        input_token_len: int = 0,
        token_ids_len: int = 0,
        timestamp_ns: int = 0,
    ) -> TraceQueryResult:
        """Replay one request's block keys and report hits at every capacity slot.

        The fields follow the manager's :class:`QueryPolicy` (tokens, key granularity,
        timestamps). Per slot: ``cache_hit_count`` (blocks, the instance's projection),
        ``hit_rate = hits * block_size / input_token_len`` and ``current_unique_keys``, the
        blocks resident at the slot's capacity after the request (``min(unique blocks, slot
        blocks)`` for full attention; the Full blocks within the slot's bytes for hybrid
        instances). Bad input raises before any state changes. O(keys + slots * segments).
        """
        state, keys, tokens, stamp = self._prepare(
            instance_id, block_keys, input_token_len, token_ids_len, timestamp_ns
        )
        bs = state.block_size
        fact, hits, unique, best, resident = self._apply(state, keys, tokens, stamp, True)
        if state.theoretical_enabled:
            theoretical = TheoreticalResult(
                max_hit_count=best,
                current_unique_keys=unique,
                hit_rate=best * bs / tokens if tokens else 0.0,
            )
        else:
            theoretical = THEORETICAL_OFF
        return TraceQueryResult(
            total_blocks=fact.total_blocks,
            input_token_len=tokens,
            capacity_gb=state.capacity_gb,
            hit_blocks=hits,
            hit_rates=tuple([h * bs / tokens for h in hits]) if tokens else (0.0,) * len(hits),
            unique_keys=resident,
            theoretical=theoretical,
            fact=fact,
            block_size_tokens=bs,
            block_bytes=state.block_bytes,
        )

    def record_query(
        self,
        instance_id: str,
        block_keys: Sequence[int],
        input_token_len: int = 0,
        timestamp_ns: int = 0,
    ) -> tuple[RequestFact, int]:
        """Exactly :meth:`trace_query` (same validation, state and counters) without
        building the per-slot answer: returns the fact and the token denominator.

        The offline replay's entry point, where only the fact is written out.
        O(keys + slots * segments).
        """
        state, keys, tokens, stamp = self._prepare(
            instance_id, block_keys, input_token_len, 0, timestamp_ns
        )
        return self._apply(state, keys, tokens, stamp, False)[0], tokens

    def trace_query_packed(
        self,
        instance_id: str,
        block_keys: np.ndarray,
        key_counts: np.ndarray,
        input_token_lens: np.ndarray,
        timestamps_ns: np.ndarray,
    ) -> PackedQueryResult:
        """Replay a packed batch of queries of one instance, in order: query i has
        ``key_counts[i]`` keys of ``block_keys`` (int64 arrays), ``input_token_lens[i]``
        tokens (0 = derive) and arrives at ``timestamps_ns[i]`` (empty = all 0).

        Every query follows the same policy as :meth:`trace_query` (the same rules and
        messages, prefixed with the query's index) and gives the same answers as the same
        queries sent one by one (a timestamp of 0 reads the clock once for the batch).
        All or nothing: a bad query raises before anything changes. A compact
        full-attention engine replays the batch in one compiled call and the answers are
        projected as arrays (:func:`~litehit_core.projector.project_segments`); other
        engines replay query by query. O(keys + queries x slots).
        """
        state = self._instances.get(instance_id)
        if state is None:
            raise InstanceNotExist(f"instance_id {instance_id!r} is not registered")
        keys, offsets, tokens, stamps = self._prepare_packed(
            state, block_keys, key_counts, input_token_lens, timestamps_ns
        )
        with state.lock:
            try:
                now = self.policy.advance_many(instance_id, state.clock_ns, stamps)
            except BatchQueryError as exc:
                raise InvalidArgument(f"query {exc.index}: {exc.error}") from None
            hits, best, totals, uniques, _ = self._replay_packed(state, keys, offsets, tokens, now)
        return PackedQueryResult(
            block_size_tokens=state.block_size,
            capacity_gb=state.capacity_gb,
            total_blocks=totals,
            input_token_lens=tokens,
            hit_blocks=hits,
            max_hit_blocks=best if state.theoretical_enabled else None,
            unique_blocks=uniques,
        )

    def record_batch(
        self, instance_id: str, requests: Sequence[tuple[Sequence[int], int, int]]
    ) -> tuple[list[RequestFact], list[int]]:
        """:meth:`record_query` for many requests of one instance (``(block_keys,
        input_token_len, timestamp_ns)`` each, in order): the same facts, token
        denominators, state and counters, with the replay of a compact full-attention
        engine done in one compiled call. Each request is validated by the same scalar
        rules as :meth:`record_query`; the first that fails raises :class:`BatchQueryError`
        carrying its index and the very error ``record_query`` would raise, and then
        nothing of the batch was applied. The offline replay's batch entry point.
        O(keys + requests x slots)."""
        state = self._instances.get(instance_id)
        if state is None:
            raise InstanceNotExist(f"instance_id {instance_id!r} is not registered")
        n = len(requests)
        offsets = np.zeros(n + 1, np.int64)
        keys: list[int] = []
        token_list: list[int] = []
        stamp_list: list[int] = []
        prepare = self._prepare
        refused: BatchQueryError | None = None
        for i, (block_keys, input_token_len, timestamp_ns) in enumerate(requests):
            try:
                _, normalized, tokens, stamp = prepare(
                    instance_id, block_keys, input_token_len, 0, timestamp_ns
                )
            except OptimizerError as exc:
                refused = BatchQueryError(i, exc)
                break
            keys += normalized
            offsets[i + 1] = len(keys)
            token_list.append(tokens)
            stamp_list.append(stamp)
        with state.lock:
            # rule 9 of the requests before a refusal: an earlier backwards time wins
            now = self.policy.advance_many(
                instance_id, state.clock_ns, np.array(stamp_list, np.int64)
            )
            if refused is not None:
                raise refused
            _, _, _, _, facts = self._replay_packed(
                state,
                np.array(keys, np.int64),
                offsets,
                np.array(token_list, np.int64),
                now,
                want_facts=True,
            )
        return facts, token_list

    def _replay_packed(
        self,
        state: InstanceState,
        keys: np.ndarray,
        offsets: np.ndarray,
        tokens: np.ndarray,
        now: np.ndarray,
        want_facts: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[RequestFact]]:
        """Replay validated requests (``keys[offsets[i]:offsets[i + 1]]`` at ``now[i]``)
        on ``state`` and add them to its counters, clock and live curve; call with its
        lock held. Returns (hit blocks per request and slot, infinite-capacity hits,
        blocks, unique blocks after each request, the facts when ``want_facts``). A
        compact full-attention engine replays them in one compiled call and they are
        projected as arrays; other engines one by one. O(keys + requests x slots)."""
        n = len(tokens)
        engine = state.engine
        facts: list[RequestFact] = []
        if state.spec.model == "lru" and state.spec.lru_engine == "compact":
            batch = engine.process_batch(keys, offsets, now)  # type: ignore[attr-defined]
            used = int(batch.seg_offsets[-1])
            starts, runs = batch.seg_start[:used], batch.seg_len[:used]
            hits = project_segments(starts, runs, batch.seg_offsets, state.slot_units)
            best = segment_sums(runs, batch.seg_offsets)
            totals, uniques = batch.totals, batch.uniques
            state.curve.accumulator.add_ramps(starts, runs)
            if want_facts:
                facts = batch.facts()
        else:
            totals, uniques, best = (np.zeros(n, np.int64) for _ in range(3))
            hit_rows = []
            projection = state.projection
            flat = keys.tolist()
            for i in range(n):
                fact = engine.process_request(flat[offsets[i] : offsets[i + 1]], int(now[i]))
                hit_rows.append(projection.slots(fact, state.slot_units))
                best[i] = projection.infinite(fact)
                totals[i] = fact.total_blocks
                uniques[i] = engine.current_unique_blocks()
                state.add_to_curve(fact.hit_curve)
                facts.append(fact)
            hits = np.array(hit_rows, np.int64).reshape(n, len(state.slot_units))
        if n:
            state.clock_ns = int(now[-1])
        per_slot = hits.sum(axis=0).tolist()
        state.count(per_slot, int(best.sum()), n, int(totals.sum()), int(tokens.sum()))
        return hits, best, totals, uniques, facts

    def _prepare_packed(
        self,
        state: InstanceState,
        block_keys: np.ndarray,
        key_counts: np.ndarray,
        input_token_lens: np.ndarray,
        timestamps_ns: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Validate and normalise a packed batch by the policy's rules 1-8: (keys, offsets,
        tokens, times), int64 arrays. Vectorised for instances without prefix hashing or
        re-blocking; a failing query is handed to the scalar rules for its message, so both
        paths raise the same errors. Changes nothing. O(keys + queries)."""
        iid = state.instance_id
        n = len(key_counts)
        for name, values in (
            ("input_token_lens", input_token_lens),
            ("timestamps_ns", timestamps_ns),
        ):
            if len(values) != n and not (name == "timestamps_ns" and len(values) == 0):
                raise InvalidArgument(
                    f"{name} has {len(values)} values but key_counts has {n} (one per query)"
                )
        counts = np.asarray(key_counts, np.int64)
        lens = np.asarray(input_token_lens, np.int64)
        stamps = (
            np.asarray(timestamps_ns, np.int64) if len(timestamps_ns) else np.zeros(n, np.int64)
        )
        for name, values in (
            ("key_counts", counts),
            ("input_token_lens", lens),
            ("timestamps_ns", stamps),
        ):
            if n and values.min() < 0:
                i = int(np.argmax(values < 0))
                raise InvalidArgument(f"{name}[{i}] must not be negative, got {values[i]}")
        if int(counts.sum()) != len(block_keys):
            raise InvalidArgument(
                f"key_counts add up to {int(counts.sum())} but block_keys has "
                f"{len(block_keys)} keys"
            )
        policy = self.policy
        if n and counts.max() > policy.max_block_keys:
            i = int(np.argmax(counts > policy.max_block_keys))
            raise InvalidArgument(
                f"query {i}: block_keys has {counts[i]} keys, more than max_block_keys "
                f"{policy.max_block_keys}"
            )
        if policy.clock_ns is not None and n:
            now = policy.clock_ns()
            skew = policy.max_clock_skew_ns
            if skew is not None and (stamps > now + skew).any():
                first = int(np.argmax(stamps > now + skew))
                try:  # the scalar rule words the error (with its own reading of the clock)
                    policy.stamp(int(stamps[first]))
                except InvalidArgument as exc:
                    raise InvalidArgument(f"query {first}: {exc}") from None
            stamps = np.where(stamps > 0, stamps, now)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        bs = state.block_size
        trace_bs = policy.trace_block_size_tokens
        if not state.enable_prefix_hash and trace_bs in (0, bs):
            tokens = plain_token_lens(counts, lens, bs)
            if tokens is not None:
                return np.asarray(block_keys, np.int64), offsets, tokens, stamps
        keys: list[int] = []
        token_list: list[int] = []
        flat = np.asarray(block_keys, np.int64).tolist()
        for i in range(n):
            try:
                normalized = normalize_request(
                    flat[offsets[i] : offsets[i + 1]], int(lens[i]), bs,
                    state.enable_prefix_hash, trace_bs,
                )  # fmt: skip
            except InvalidRequestError as exc:
                raise InvalidArgument(f"instance_id {iid!r}: query {i}: {exc}") from None
            keys += normalized.block_keys
            token_list.append(normalized.input_token_len)
            offsets[i + 1] = len(keys)
        return np.array(keys, np.int64), offsets, np.array(token_list, np.int64), stamps

    def _prepare(
        self,
        instance_id: str,
        block_keys: Sequence[int],
        input_token_len: int,
        token_ids_len: int,
        timestamp_ns: int,
    ) -> tuple[InstanceState, list[int], int, int]:
        """Validate and normalise one query by the policy's rules 1-8: (state, keys,
        tokens, time). Changes nothing."""
        state = self._instances.get(instance_id)
        if state is None:
            raise InstanceNotExist(f"instance_id {instance_id!r} is not registered")
        if input_token_len < 0:
            raise InvalidArgument(f"input_token_len must not be negative, got {input_token_len}")
        if token_ids_len < 0:
            raise InvalidArgument(f"token_ids_len must not be negative, got {token_ids_len}")
        policy = self.policy
        stamp = policy.stamp(timestamp_ns)
        if len(block_keys) > policy.max_block_keys:
            raise InvalidArgument(
                f"block_keys has {len(block_keys)} keys, more than max_block_keys "
                f"{policy.max_block_keys}"
            )
        try:
            keys, tokens = normalize_request(
                block_keys,
                input_token_len or token_ids_len,
                state.block_size,
                state.enable_prefix_hash,
                policy.trace_block_size_tokens,
            )
        except InvalidRequestError as exc:
            raise InvalidArgument(f"instance_id {instance_id!r}: {exc}") from None
        return state, keys, tokens, stamp

    def _apply(
        self, state: InstanceState, keys: list[int], tokens: int, stamp: int, answer: bool
    ) -> tuple[RequestFact, tuple[int, ...], int, int, tuple[int, ...]]:
        """Replay ``keys`` on ``state`` under its lock (its clock advanced by the policy's
        rule 9) and add to its counters.

        Returns (fact, hit blocks per slot, unique blocks, infinite-capacity hit blocks,
        blocks resident per slot afterwards: only with ``answer``, else ``()``). The fact
        also goes into the instance's live curve.
        """
        projection = state.projection
        with state.lock:
            now = state.clock_ns = self.policy.advance(state.instance_id, state.clock_ns, stamp)
            engine = state.engine
            fact = engine.process_request(keys, now)
            unique = engine.current_unique_blocks()
            hits = tuple(projection.slots(fact, state.slot_units))
            resident = engine.resident_blocks(state.slot_units) if answer else ()
            best = projection.infinite(fact)
            state.count(hits, best, 1, fact.total_blocks, tokens)
            state.add_to_curve(fact.hit_curve)
        return fact, hits, unique, best, resident

    def list_instances(self, instance_group: str = "") -> list[InstanceSummary]:
        """Summaries of every instance (or of one group's), sorted by instance_id.

        A non-empty ``instance_group`` that does not exist raises InstanceNotExist.
        O(instances * slots).
        """
        with self._admin:
            if instance_group:
                self._require_group(instance_group)
            states = [
                self._instances[k]
                for k in sorted(self._instances)
                if not instance_group or self._instances[k].instance_group == instance_group
            ]
        return [s.summary() for s in states]

    def reset_stats(self, instance_id: str) -> None:
        """Give ``instance_id`` a fresh engine and zeroed counters (and drop its snapshot,
        so a crash cannot bring the old state back)."""
        self._require_instance(instance_id).reset()
        self._forget_state(instance_id)

    def hit_rate_curve(
        self,
        instance_id: str,
        capacity_gb: Sequence[float] = (),
        target_fractions: Sequence[float] = (),
        max_points: int = 0,
    ) -> HitRateCurveResult:
        """The exact live curve of ``instance_id`` (since registration or its last reset).

        With ``capacity_gb`` (each finite, >= 0, at most :data:`MAX_CURVE_POINTS` of them):
        the curve at those capacities, in their order. Without: every corner of the curve
        if there are at most ``max_points`` (0 = :data:`DEFAULT_CURVE_POINTS`, at most
        :data:`MAX_CURVE_POINTS`), else exact values at ``max_points`` log-spaced capacities
        from the first hit to saturation. Per target fraction (in (0, 1], at most
        :data:`MAX_CURVE_TARGETS`): the smallest capacity reaching it. InvalidArgument
        naming the field and value; InstanceNotExist. The curve is copied under the
        instance's lock in O(1) (after merging its buffer); the rest runs outside it,
        O(points log B + B).
        """
        caps = _curve_capacities(capacity_gb)
        fractions = _target_fractions(target_fractions)
        if isinstance(max_points, bool) or not isinstance(max_points, int):
            raise InvalidArgument(f"max_points must be an integer, got {max_points!r}")
        if not 0 <= max_points <= MAX_CURVE_POINTS:
            raise InvalidArgument(f"max_points must be in 0..{MAX_CURVE_POINTS}, got {max_points}")
        state = self._require_instance(instance_id)
        with state.lock:
            view = state.curve_view()
        blocks = view.unit == "blocks"
        ub = view.unit_bytes
        cx, ch = view.points()
        complete = False
        if caps:
            units = np.array([view.units_for_bytes(b) for b in caps], np.int64)
            nbytes = list(caps)
            gbs = [float(g) for g in capacity_gb]
        else:
            limit = max_points or DEFAULT_CURVE_POINTS
            if len(cx) <= limit:
                units, complete = cx, True
            else:
                units = log_spaced(max(view.first_hit, 1), max(view.saturation, 1), limit)
            nbytes = (units * ub).tolist()
            gbs = [b / GIB for b in nbytes]
        hit_tokens = ch if complete else view.hit_tokens_at_many(units)
        tokens = view.input_tokens
        points = tuple(
            HitRatePoint(gb, u if blocks else 0, b, h, h / tokens if tokens else 0.0)
            for gb, u, b, h in zip(gbs, units.tolist(), nbytes, hit_tokens.tolist(), strict=True)
        )
        targets = []
        for f in fractions:
            u = view.capacity_for_fraction(f)
            targets.append(TargetCapacity(f, u if blocks else 0, u * ub, u * ub / GIB))
        return HitRateCurveResult(
            points=points,
            capacity_for_targets=tuple(targets),
            total_input_tokens=tokens,
            theoretical_hit_tokens=view.infinite_hit_tokens,
            corners_complete=complete,
            resolution_bytes=view.resolution_bytes,
            corners=view.corners(),
            block_size=state.block_size,
            block_bytes=state.block_bytes,
            linear_step=state.registration.linear_step,
            total_queries=view.requests,
        )

    def curve_views(self) -> list[tuple[InstanceInfo, InstanceCurve]]:
        """Every instance's configuration with a frozen copy of its live curve, sorted by
        instance_id (for the metrics). O(instances) plus each curve's pending merge."""
        with self._admin:
            states = [self._instances[k] for k in sorted(self._instances)]
        out = []
        for state in states:
            with state.lock:
                view = state.curve_view()
            out.append((state.info(), view))
        return out

    def has_instance(self, instance_id: str) -> bool:
        """True when ``instance_id`` is registered. O(1)."""
        return instance_id in self._instances

    def instance_ids(self) -> list[str]:
        """Every registered instance id, sorted. O(instances log instances)."""
        with self._admin:
            return sorted(self._instances)

    # ------------------------------------------------------------ durable state

    def _forget_state(self, instance_id: str) -> None:
        if self.state_store is not None:
            self.state_store.remove(instance_id)

    def capture_state(self, instance_id: str) -> StateCapture | None:
        """A consistent copy of ``instance_id``'s state and counters, taken under its lock
        (None when it is not registered). The only part of a snapshot that pauses the
        instance's queries; O(tracked blocks) at C speed."""
        state = self._instances.get(instance_id)
        if state is None:
            return None
        with state.lock:
            engine = state.engine.export_state()
            curve = state.curve.accumulator
            curve_positions, curve_values = curve.arrays()  # immutable: safe after the lock
            meta = {
                "format": STATE_FORMAT,
                "registration": registration_to_dict(state.registration),
                "group": group_to_dict(state.group),
                "model": engine.model,
                "engine_format_version": engine.format_version,
                "now_ns": engine.now_ns,
                "expired_blocks": engine.expired_blocks,
                "dropped_blocks": engine.dropped_blocks,
                "clock_ns": state.clock_ns,
                "total_queries": state.total_queries,
                "total_blocks_queried": state.total_blocks_queried,
                "total_input_tokens": state.total_input_tokens,
                "total_hits": list(state.total_hits),
                "total_max_hits": state.total_max_hits,
                "curve_kind": curve.kind,
                "curve_scale": curve.scale,
            }
        arrays = {
            "keys": engine.keys,
            "epoch_starts": engine.epoch_starts,
            "epoch_times": engine.epoch_times,
            "curve_positions": curve_positions,
            "curve_values": curve_values,
        }
        if engine.kinds is not None:  # hybrid: Full (1) or Linear (2) per key
            arrays["kinds"] = engine.kinds
        return StateCapture(instance_id, state, meta, arrays)

    def write_state(self, capture: StateCapture) -> bool:
        """Write a capture to the state store (outside every lock); False (logged at ERROR,
        counted) when it failed. A capture of an instance replaced or removed meanwhile is
        dropped. O(size)."""
        store = self.state_store
        if store is None or self._instances.get(capture.instance_id) is not capture.state:
            return False
        started = time.monotonic()
        try:
            size = store.write(capture.instance_id, capture.meta, capture.arrays)
        except OSError as exc:
            self.state_stats.count("write_failed")
            log.error(
                "snapshot of instance %r not written: %s",
                capture.instance_id,
                exc,
                extra={"instance_id": capture.instance_id},
            )
            return False
        self.state_stats.written(time.monotonic() - started, size)
        return True

    def save_all_states(self) -> int:
        """Capture and write every instance's snapshot; returns how many were written.
        Used at stop, when no query runs. O(total tracked blocks)."""
        written = 0
        for instance_id in self.instance_ids():
            capture = self.capture_state(instance_id)
            if capture is not None and self.write_state(capture):
                written += 1
        return written

    def restore_states(self) -> int:
        """Give each registered instance the state and counters of its snapshot; returns
        how many were restored. A corrupt, truncated or foreign snapshot, or one of another
        registration, leaves its instance fresh (logged at ERROR or WARNING and counted by
        reason); the others still restore. Snapshots of unknown instances and temporaries
        of a killed writer are removed. O(total snapshot size)."""
        store = self.state_store
        if store is None:
            return 0
        restored = 0
        with self._admin:
            for path in store.remove_unknown(set(self._instances)):
                log.info("removed stale snapshot file %s", path)
            for instance_id, state in sorted(self._instances.items()):
                try:
                    found = store.read(instance_id)
                    if found is None:
                        continue
                    _restore_state(state, *found)
                except SnapshotError as exc:
                    self.state_stats.count("corrupt")
                    log.error(
                        "snapshot of instance %r is unusable, starting it fresh: %s",
                        instance_id,
                        exc,
                        extra={"instance_id": instance_id},
                    )
                    continue
                except StateMismatch as exc:
                    self.state_stats.count("mismatch")
                    log.warning(
                        "snapshot of instance %r does not match its registration, starting "
                        "it fresh: %s",
                        instance_id,
                        exc,
                        extra={"instance_id": instance_id},
                    )
                    continue
                restored += 1
        self.state_stats.restored = restored
        return restored

    def instance_infos(self) -> list[InstanceInfo]:
        """Read-only views of every instance's configuration, sorted by instance_id.

        O(instances log instances)."""
        with self._admin:
            return [self._instances[k].info() for k in sorted(self._instances)]

    # ------------------------------------------------------------------ helpers

    def _save(self, write: Callable[[Registry], None]) -> None:
        if self._registry is not None:
            write(self._registry)

    def _require_group(self, name: str) -> InstanceGroup:
        group = self._groups.get(name)
        if group is None:
            raise InstanceNotExist(f"instance group {name!r} does not exist")
        return group

    def _require_instance(self, instance_id: str) -> InstanceState:
        state = self._instances.get(instance_id)
        if state is None:
            raise InstanceNotExist(f"instance_id {instance_id!r} is not registered")
        return state

    def _require_no_instances(self, name: str, doing: str) -> None:
        members = sorted(k for k, s in self._instances.items() if s.instance_group == name)
        if members:
            shown = ", ".join(repr(m) for m in members[:5]) + (", ..." if len(members) > 5 else "")
            raise InvalidArgument(
                f"instance group {name!r} still has {len(members)} registered instance(s) "
                f"({shown}); remove them before {doing} the group"
            )


def _curve_capacities(capacity_gb: Sequence[float]) -> list[int]:
    """``capacity_gb`` as bytes, each checked finite and in [0, MAX_CAPACITY_GB]."""
    if len(capacity_gb) > MAX_CURVE_POINTS:
        raise InvalidArgument(
            f"capacity_gb has {len(capacity_gb)} values, at most {MAX_CURVE_POINTS} are allowed"
        )
    out = []
    for i, gb in enumerate(capacity_gb):
        if isinstance(gb, bool) or not isinstance(gb, int | float):
            raise InvalidArgument(f"capacity_gb[{i}] must be a number, got {gb!r}")
        if not (math.isfinite(gb) and 0 <= gb <= MAX_CAPACITY_GB):
            raise InvalidArgument(
                f"capacity_gb[{i}] must be finite and in [0, {MAX_CAPACITY_GB}], got {gb!r}"
            )
        out.append(capacity_gb_to_bytes(gb))
    return out


def _target_fractions(target_fractions: Sequence[float]) -> list[float]:
    """``target_fractions`` checked: at most MAX_CURVE_TARGETS, each a number in (0, 1]."""
    if len(target_fractions) > MAX_CURVE_TARGETS:
        raise InvalidArgument(
            f"target_fractions has {len(target_fractions)} values, at most {MAX_CURVE_TARGETS} "
            "are allowed"
        )
    out = []
    for i, f in enumerate(target_fractions):
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 1:
            raise InvalidArgument(f"target_fractions[{i}] must be in (0, 1], got {f!r}")
        out.append(float(f))
    return out


STATE_FORMAT = "litehit-instance-state"


class StateMismatch(Exception):
    """A snapshot that is valid but belongs to another registration, group or model."""


@dataclass(frozen=True, slots=True)
class StateCapture:
    """One instance's state copied under its lock, ready to be written to a snapshot."""

    instance_id: str
    state: InstanceState
    meta: dict[str, Any]
    arrays: dict[str, Any]


@dataclass
class StateStats:
    """Durable-state figures for the metrics (cumulative since the process started)."""

    failures: dict[str, int] = field(default_factory=dict)
    restored: int = 0
    writes: int = 0
    last_write_seconds: float = 0.0
    last_write_bytes: int = 0
    last_write_unix: float = 0.0

    def count(self, reason: str) -> None:
        """Count one failure (``corrupt``, ``mismatch``, ``write_failed``)."""
        self.failures[reason] = self.failures.get(reason, 0) + 1

    def written(self, seconds: float, size: int) -> None:
        """Record one snapshot written in ``seconds``, ``size`` bytes."""
        self.writes += 1
        self.last_write_seconds = seconds
        self.last_write_bytes = size
        self.last_write_unix = time.time()


def _restore_state(state: InstanceState, meta: dict[str, Any], arrays: dict[str, Any]) -> None:
    """Load a snapshot into ``state`` (fresh from restore); StateMismatch or SnapshotError
    when it does not fit, in which case ``state`` is unchanged. O(snapshot size)."""
    if meta.get("format") != STATE_FORMAT:
        raise SnapshotError(f"unknown state format {meta.get('format')!r}")
    if meta.get("registration") != registration_to_dict(state.registration):
        raise StateMismatch("the registration changed since it was written")
    if meta.get("group") != group_to_dict(state.group):
        raise StateMismatch("its instance group changed since it was written")
    try:
        hits = [int(h) for h in meta["total_hits"]]
        if len(hits) != len(state.capacity_blocks):
            raise StateMismatch(
                f"it has {len(hits)} slots, the group has {len(state.capacity_blocks)}"
            )
        engine_state = EngineState(
            model=str(meta["model"]),
            format_version=int(meta["engine_format_version"]),
            keys=arrays["keys"],
            epoch_starts=arrays["epoch_starts"],
            epoch_times=arrays["epoch_times"],
            now_ns=int(meta["now_ns"]),
            expired_blocks=int(meta["expired_blocks"]),
            dropped_blocks=int(meta["dropped_blocks"]),
            kinds=arrays.get("kinds"),
        )
        engine = create_engine(state.spec, engine_state)
        curve = _restored_curve(state, meta, arrays)
        counters = (
            int(meta["clock_ns"]),
            int(meta["total_queries"]),
            int(meta["total_blocks_queried"]),
            int(meta["total_input_tokens"]),
            int(meta["total_max_hits"]),
        )
    except (KeyError, TypeError, ValueError, InvalidRequestError) as exc:
        raise SnapshotError(f"inconsistent state: {exc}") from None
    with state.lock:
        state.engine = engine
        (
            state.clock_ns,
            state.total_queries,
            state.total_blocks_queried,
            state.total_input_tokens,
            state.total_max_hits,
        ) = counters
        state.total_hits = hits
        state.set_curve(curve)


def _restored_curve(
    state: InstanceState, meta: dict[str, Any], arrays: dict[str, Any]
) -> InstanceCurve:
    """The live curve a snapshot holds (InvalidRequestError when its arrays are not a
    curve); an empty one for a snapshot written before live curves existed. O(corners)."""
    if "curve_positions" not in arrays:
        log.warning(
            "snapshot of instance %r has no live curve (written by an older version): the "
            "curve restarts empty while the counters continue",
            state.instance_id,
            extra={"instance_id": state.instance_id},
        )
        return state.new_curve()
    kind = meta["curve_kind"]
    if kind is None:
        return state.new_curve()
    accumulator = HitCurveAccumulator.from_arrays(
        str(kind),
        arrays["curve_positions"],
        arrays["curve_values"],
        int(meta["curve_scale"]),
        state.curve_max_corners,
    )
    expected = FACT_MODELS[state.spec.model].curve
    if accumulator.kind != expected:
        raise InvalidRequestError(f"curve kind {kind!r} does not fit model {state.spec.model!r}")
    return state.new_curve(accumulator)


def validated_group(group: InstanceGroup) -> InstanceGroup:
    """Check every group rule; return the group as stored (capacity_gb as sorted floats).

    Raises the OptimizerError that create/update would. O(slots log slots).
    """
    name = group.name
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"instance group name must not be empty, got {name!r}")
    where = f"instance group {name!r}"
    if not group.capacity_gb:
        raise InvalidArgument(
            f"capacity_gb of {where} must not be empty, got {list(group.capacity_gb)!r}"
        )
    caps: list[float] = []
    for i, raw in enumerate(group.capacity_gb):
        try:
            gb = float(raw)
        except (TypeError, ValueError):
            raise InvalidArgument(
                f"capacity_gb[{i}] of {where} must be a number, got {raw!r}"
            ) from None
        if not (math.isfinite(gb) and gb > 0):
            raise InvalidArgument(f"capacity_gb[{i}] of {where} must be finite and > 0, got {gb!r}")
        if gb > MAX_CAPACITY_GB:
            raise InvalidArgument(
                f"capacity_gb[{i}] of {where} must be at most {MAX_CAPACITY_GB} GiB "
                f"(bytes must fit in int64), got {gb!r}"
            )
        caps.append(gb)
    if group.eviction_policy != "lru":
        raise InvalidArgument(
            f"eviction_policy of {where} must be 'lru', got {group.eviction_policy!r}"
        )
    ttl = group.ttl_seconds
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not 0 <= ttl <= MAX_TTL_SECONDS:
        raise InvalidArgument(
            f"ttl_seconds of {where} must be an integer in 0..{MAX_TTL_SECONDS}, got {ttl!r}"
        )
    if group.touch_order not in TOUCH_ORDERS:
        raise InvalidArgument(
            f"touch_order of {where} must be one of {list(TOUCH_ORDERS)}, got {group.touch_order!r}"
        )
    if group.shared_group_quota:
        raise Unsupported(
            f"shared_group_quota=True of {where} is not supported: every instance is "
            "simulated with its own capacity"
        )
    return replace(
        group,
        capacity_gb=tuple(sorted(caps)),
        shared_group_quota=bool(group.shared_group_quota),
        enable_theoretical_max_cache=bool(group.enable_theoretical_max_cache),
        enable_prefix_hash=bool(group.enable_prefix_hash),
    )


def _build_state(
    reg: InstanceRegistration,
    groups: dict[str, InstanceGroup],
    limits: ManagerLimits,
    lru_engine: str = "python",
) -> tuple[InstanceState, RegistrationResult]:
    """Validate a registration against ``groups``; build its fresh state and result."""
    iid = reg.instance_id
    if not isinstance(iid, str) or not iid:
        raise InvalidArgument(f"instance_id must not be empty, got {iid!r}")
    where = f"instance_id {iid!r}"
    group = groups.get(reg.instance_group)
    if group is None:
        raise InstanceNotExist(f"instance_group {reg.instance_group!r} of {where} does not exist")
    bs = reg.block_size
    if not isinstance(bs, int) or isinstance(bs, bool) or not 0 < bs <= INT32_MAX:
        raise InvalidArgument(
            f"block_size of {where} must be an integer in 1..{INT32_MAX} (tokens), got {bs!r}"
        )
    specs = tuple(reg.location_spec_infos)
    sizes = _validated_specs(specs, where)
    spec_groups = tuple(
        LocationSpecGroup(g.name, tuple(g.spec_names)) for g in reg.location_spec_groups
    )
    members = _validated_spec_groups(spec_groups, sizes, where)
    step = reg.linear_step
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= INT32_MAX:
        raise InvalidArgument(
            f"linear_step of {where} must be an integer in 0..{INT32_MAX} (tokens), got {step!r}"
        )
    if step % bs:
        hint = f"; {step} blocks would be {step * bs} tokens" if step * bs <= INT32_MAX else ""
        raise InvalidArgument(
            f"linear_step of {where} is in tokens and must be a positive multiple of "
            f"block_size {bs} tokens, got {step}{hint}"
        )
    full_name = reg.full_location_spec_group_name
    if full_name:
        if full_name not in members:
            raise InvalidArgument(
                f"full_location_spec_group_name {full_name!r} of {where} is not one of the "
                f"location_spec_groups {sorted(members)!r}"
            )
    elif len(members) == 1:
        full_name = next(iter(members))
    else:
        raise InvalidArgument(
            f"full_location_spec_group_name of {where} is empty and there are "
            f"{len(members)} location_spec_groups {sorted(members)!r}: name the full group "
            "(it may only be omitted when there is exactly one)"
        )
    linear_name = reg.linear_location_spec_group_name
    if step == 0 and linear_name:
        raise InvalidArgument(
            f"linear_location_spec_group_name of {where} must be empty when linear_step is "
            f"0 (a full-attention instance), got {linear_name!r}"
        )
    if step and not linear_name:
        raise InvalidArgument(
            f"linear_location_spec_group_name of {where} must name the location_spec_group "
            f"of the linear/Mamba state when linear_step is {step}, got ''"
        )
    if linear_name and linear_name not in members:
        raise InvalidArgument(
            f"linear_location_spec_group_name {linear_name!r} of {where} is not one of the "
            f"location_spec_groups {sorted(members)!r}"
        )
    if linear_name and linear_name == full_name:
        raise InvalidArgument(
            f"linear_location_spec_group_name of {where} must differ from the full group, "
            f"both are {full_name!r}"
        )
    full_specs = members[full_name]
    linear_specs = members[linear_name] if linear_name else ()
    shared = sorted(set(full_specs) & set(linear_specs))
    if shared:
        raise InvalidArgument(
            f"location_spec_groups {full_name!r} (full) and {linear_name!r} (linear) of "
            f"{where} share specs {shared!r}: a spec belongs to one of them"
        )
    block_bytes = sum(sizes[n] for n in full_specs)
    state_bytes = sum(sizes[n] for n in linear_specs)
    size_full_linear = block_bytes + state_bytes
    if size_full_linear > INT64_MAX:
        raise InvalidArgument(
            f"location_spec_infos sizes of {where} add up to {size_full_linear} bytes per "
            f"block, more than {INT64_MAX} (int64)"
        )
    ttl_ns = group.ttl_seconds * _NS_PER_SECOND
    slot_bytes = tuple(capacity_gb_to_bytes(gb) for gb in group.capacity_gb)
    limit = limits.max_tracked_blocks
    if step:
        for name, value in (("full", block_bytes), ("linear", state_bytes)):
            if value > MAX_OBJECT_BYTES:
                raise InvalidArgument(
                    f"the {name} location_spec_group of {where} takes {value} bytes, more than "
                    f"{MAX_OBJECT_BYTES} (1 TiB) per block or state"
                )
        steps = step // bs
        spec = EngineSpec(
            model="hybrid",
            ttl_ns=ttl_ns,
            max_tracked_blocks=limit,
            full_bytes=block_bytes,
            linear_bytes=state_bytes,
            step_blocks=steps,
        )
        projection = Projection(spec, block_bytes)
        slot_units = tuple(projection.units(b) for b in slot_bytes)
        per_step = steps * block_bytes + state_bytes
        capacity_blocks = tuple(b * steps // per_step for b in slot_bytes)
        too_big = limit and slot_units[-1] > spec.max_tracked_bytes
        if group.touch_order != "tail-first":
            raise InvalidArgument(
                f"touch_order {group.touch_order!r} of instance group {group.name!r} is for "
                f"full-attention instances; {where} is hybrid (linear_step {step}), whose "
                "blocks and states are touched tail first"
            )
        # every threshold is a sum of block and state charges: a multiple of their gcd
        curve_resolution = math.gcd(block_bytes, state_bytes)
        curve_max_corners = (
            max(CURVE_CORNERS_PER_TRACKED_BLOCK * limit, MIN_CURVE_CORNERS) if limit else 0
        )
    else:
        model = touch_order_model(group.touch_order)
        spec = EngineSpec(
            model=model, ttl_ns=ttl_ns, max_tracked_blocks=limit, lru_engine=lru_engine
        )
        projection = Projection(spec, block_bytes)
        slot_units = capacity_blocks = tuple(projection.units(b) for b in slot_bytes)
        too_big = limit and capacity_blocks[-1] > limit
        curve_resolution, curve_max_corners = 1, 0  # depths: at most limit + 1 corners
    if too_big:
        raise InvalidArgument(
            f"capacity_gb {group.capacity_gb[-1]!r} of instance group {group.name!r} holds "
            f"{capacity_blocks[-1]} blocks of {block_bytes} bytes for {where}, more than "
            f"max_tracked_blocks {limit}: raise --max-tracked-blocks or use a smaller slot"
        )
    stored = replace(reg, location_spec_infos=specs, location_spec_groups=spec_groups)
    state = InstanceState(
        stored,
        group,
        spec,
        projection,
        slot_units,
        capacity_blocks,
        curve_resolution,
        curve_max_corners,
    )
    return state, RegistrationResult(capacity_blocks, block_bytes, size_full_linear)


def _validated_specs(specs: Iterable[LocationSpec], where: str) -> dict[str, int]:
    """Spec name -> size (bytes); names non-empty and unique, sizes integers > 0."""
    sizes: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if not isinstance(spec.name, str) or not spec.name:
            raise InvalidArgument(
                f"location_spec_infos[{i}].name of {where} must not be empty, got {spec.name!r}"
            )
        if spec.name in sizes:
            raise InvalidArgument(
                f"location_spec_infos[{i}].name {spec.name!r} of {where} is duplicated"
            )
        size = spec.size
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= INT64_MAX:
            raise InvalidArgument(
                f"location_spec_infos[{i}].size of spec {spec.name!r} of {where} must be an "
                f"integer in 1..{INT64_MAX} (bytes), got {size!r}"
            )
        sizes[spec.name] = size
    return sizes


def _validated_spec_groups(
    groups: Iterable[LocationSpecGroup], sizes: dict[str, int], where: str
) -> dict[str, tuple[str, ...]]:
    """Group name -> member spec names; names unique, members non-empty, unique and known."""
    members: dict[str, tuple[str, ...]] = {}
    for i, g in enumerate(groups):
        if not isinstance(g.name, str) or not g.name:
            raise InvalidArgument(
                f"location_spec_groups[{i}].name of {where} must not be empty, got {g.name!r}"
            )
        if g.name in members:
            raise InvalidArgument(
                f"location_spec_groups[{i}].name {g.name!r} of {where} is duplicated"
            )
        if not g.spec_names:
            raise InvalidArgument(
                f"location_spec_groups[{i}].spec_names of group {g.name!r} of {where} must not "
                "be empty"
            )
        seen: set[str] = set()
        for name in g.spec_names:
            if name not in sizes:
                raise InvalidArgument(
                    f"location_spec_groups[{i}].spec_names of group {g.name!r} of {where} names "
                    f"unknown spec {name!r} (known: {sorted(sizes)!r})"
                )
            if name in seen:
                raise InvalidArgument(
                    f"location_spec_groups[{i}].spec_names of group {g.name!r} of {where} lists "
                    f"spec {name!r} twice"
                )
            seen.add(name)
        members[g.name] = tuple(g.spec_names)
    return members
