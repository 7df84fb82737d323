"""The online optimizer manager: instance groups, registrations and per-instance replays.

:class:`OnlineOptimizerManager` owns the instances and groups (admin: validate, persist
in the :class:`~litehit_service.registry.Registry` *before* publishing in memory) and is
the one entry point of queries, curves and durable state, each done by the module of its
job in this package: :mod:`.placement` (a registration -> engine spec and capacity
slots), :mod:`.preparation` (a query's rules 1-8), :mod:`.recording` (replay, projection
and counters), :mod:`.curves` (GetHitRateCurve) and :mod:`.durable` (snapshots). The
engine of each instance comes from the engine registry (:mod:`litehit_core.engine`); this
package never names a model.

Errors are :class:`~litehit_service.errors.OptimizerError` subclasses whose messages name
the field and value; a failed call never changes state.

Concurrency: admin operations are serialized by one re-entrant lock; each instance has
its own lock for queries, resets and snapshots. ``trace_query`` never takes the admin
lock, so queries on different instances run concurrently (as far as the GIL allows) and
queries on one instance are applied one at a time in arrival order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from litehit_core import RequestFact
from litehit_core.curve import InstanceCurve
from litehit_core.engine import LRU_ENGINES
from litehit_service.errors import (
    DuplicateEntity,
    InstanceNotExist,
    InvalidArgument,
    OptimizerError,
    ReachMaxEntityCapacity,
    RegistryIOError,
)
from litehit_service.manager.curves import hit_rate_curve
from litehit_service.manager.durable import (
    StateCapture,
    StateStats,
    capture_state,
    restore_states,
    write_state,
)
from litehit_service.manager.instance import THEORETICAL_OFF, InstanceInfo, InstanceState
from litehit_service.manager.placement import ManagerLimits, place_instance, validated_group
from litehit_service.manager.preparation import prepare_packed, prepare_query, sampled_keys
from litehit_service.manager.recording import apply_query, replay_packed
from litehit_service.model import (
    HitRateCurveResult,
    InstanceGroup,
    InstanceRegistration,
    InstanceSummary,
    PackedQueryResult,
    RegistrationResult,
    TheoreticalResult,
    TraceQueryResult,
)
from litehit_service.policy import BatchQueryError, QueryPolicy
from litehit_service.registry import Registry
from litehit_service.snapshots import SnapshotStore

__all__ = ["OnlineOptimizerManager"]

log = logging.getLogger("litehit_service.manager")


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
                    instances[reg.instance_id] = place_instance(
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

    def create_group(self, group: InstanceGroup) -> bool:
        """Validate and add a new group; idempotent for an identical group. True when the
        group was created, False when an identical one already existed.

        Creating a group that exists with an identical definition (compared after
        validation, so capacity order does not matter: what a restarting gateway does) is a
        no-op; a different group under a taken name raises DuplicateEntity.
        """
        g = validated_group(group)
        self.policy.check_touch_order(g.name, g.touch_order)
        with self._admin:
            existing = self._groups.get(g.name)
            if existing == g:
                return False
            if existing is not None:
                raise DuplicateEntity(f"instance group {g.name!r} already exists")
            self._save(lambda r: r.save_group(g))
            self._groups[g.name] = g
            return True

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
            state, result = place_instance(reg, self._groups, self.limits, self.lru_engine)
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
        state = self._require_instance(instance_id)
        keys, tokens, stamp = prepare_query(
            state, self.policy, block_keys, input_token_len, token_ids_len, timestamp_ns
        )
        bs = state.block_size
        fact, hits, unique, best, resident = apply_query(
            state, self.policy, keys, tokens, stamp, True
        )
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
        state = self._require_instance(instance_id)
        keys, tokens, stamp = prepare_query(
            state, self.policy, block_keys, input_token_len, 0, timestamp_ns
        )
        return apply_query(state, self.policy, keys, tokens, stamp, False)[0], tokens

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
        state = self._require_instance(instance_id)
        keys, offsets, tokens, stamps = prepare_packed(
            state, self.policy, block_keys, key_counts, input_token_lens, timestamps_ns
        )
        with state.lock:
            try:
                now = self.policy.advance_many(instance_id, state.clock_ns, stamps)
            except BatchQueryError as exc:
                raise InvalidArgument(f"query {exc.index}: {exc.error}") from None
            hits, best, totals, uniques, _ = replay_packed(state, keys, offsets, tokens, now)
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
        state = self._require_instance(instance_id)
        n = len(requests)
        offsets = np.zeros(n + 1, np.int64)
        keys: list[int] = []
        token_list: list[int] = []
        stamp_list: list[int] = []
        policy = self.policy
        refused: BatchQueryError | None = None
        for i, (block_keys, input_token_len, timestamp_ns) in enumerate(requests):
            try:
                normalized, tokens, stamp = prepare_query(
                    state, policy, block_keys, input_token_len, 0, timestamp_ns, sample=False
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
            kept_keys, offsets = sampled_keys(policy, np.array(keys, np.int64), offsets, state)
            _, _, _, _, facts = replay_packed(
                state,
                kept_keys,
                offsets,
                np.array(token_list, np.int64),
                now,
                want_facts=True,
            )
        return facts, token_list

    def sample_columns(self, instance_id: str) -> tuple[int, int, np.ndarray]:
        """A replay sampled by subtree: ``instance_id``'s trunk so far (its curve's unit),
        its reused blocks estimated so far and its last batch's sample reuse per request
        (:meth:`InstanceState.sample_columns`). O(1)."""
        state = self._require_instance(instance_id)
        with state.lock:
            return state.sample_columns()

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
        """The exact live curve of ``instance_id`` (see :func:`.curves.hit_rate_curve`);
        InstanceNotExist when it is not registered."""
        return hit_rate_curve(
            self._require_instance(instance_id), capacity_gb, target_fractions, max_points
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

    def batched(self, instance_id: str) -> bool:
        """True when ``instance_id``'s engine replays a batch in one compiled call (so
        :meth:`record_batch` is its fast path), as the engine registry says;
        InstanceNotExist when it is not registered. O(1)."""
        return self._require_instance(instance_id).batched

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
        (None when it is not registered); see :func:`.durable.capture_state`."""
        state = self._instances.get(instance_id)
        return None if state is None else capture_state(state)

    def write_state(self, capture: StateCapture) -> bool:
        """Write a capture to the state store (outside every lock); False (logged at ERROR,
        counted) when it failed. A capture of an instance replaced or removed meanwhile is
        dropped. O(size)."""
        store = self.state_store
        if store is None or self._instances.get(capture.instance_id) is not capture.state:
            return False
        return write_state(store, self.state_stats, capture)

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
        how many were restored (see :func:`.durable.restore_states`). 0 without a state
        store."""
        if self.state_store is None:
            return 0
        with self._admin:
            return restore_states(self.state_store, self.state_stats, self._instances)

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
