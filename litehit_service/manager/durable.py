"""Durable state: each instance's snapshot captured, written and restored.

:func:`capture_state` copies an instance's engine state (through the engine registry's
snapshot codec), counters and live curve under its lock; :func:`write_state` writes it
outside every lock; :func:`restore_states` loads every registered instance's snapshot at
start (a corrupt one, or one of another registration, leaves its instance fresh, logged
at ERROR and counted); :class:`StateStats` holds the figures the metrics export. A
ResetStats or a re-registration drops the snapshot (the manager calls the store), so a
crash cannot bring old counters back.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from litehit_core import InvalidRequestError
from litehit_core.accumulator import HitCurveAccumulator
from litehit_core.curve import InstanceCurve
from litehit_core.engine import create_engine, state_from_record, state_record
from litehit_service.manager.instance import InstanceState
from litehit_service.registry import group_to_dict, registration_to_dict
from litehit_service.snapshots import SnapshotError, SnapshotStore

__all__ = [
    "STATE_FORMAT",
    "RestoreSummary",
    "StateCapture",
    "StateMismatch",
    "StateStats",
    "capture_state",
    "restore_states",
    "write_state",
]

log = logging.getLogger("litehit_service.manager")


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


@dataclass(frozen=True, slots=True)
class RestoreSummary:
    """What one :func:`restore_states` did: ``instances`` registered, ``restored`` from their
    snapshot, the others started fresh (``fresh``: reason -> count; ``no snapshot``,
    ``corrupt``, ``mismatch``); ``oldest_unix``/``newest_unix`` the write times (file
    modification times) of the restored snapshots, None when none was restored."""

    instances: int = 0
    restored: int = 0
    fresh: dict[str, int] = field(default_factory=dict)
    oldest_unix: float | None = None
    newest_unix: float | None = None


@dataclass
class StateStats:
    """Durable-state figures for the metrics (cumulative since the process started) and
    the summary of the start-up restore (``last_restore``, None before one ran)."""

    failures: dict[str, int] = field(default_factory=dict)
    restored: int = 0
    last_restore: RestoreSummary | None = None
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


def restore_state(state: InstanceState, meta: dict[str, Any], arrays: dict[str, Any]) -> None:
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
        engine = create_engine(state.spec, state_from_record(meta, arrays))
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
    expected = state.spec.description.curve
    if accumulator.kind != expected:
        raise InvalidRequestError(f"curve kind {kind!r} does not fit model {state.spec.model!r}")
    return state.new_curve(accumulator)


def capture_state(state: InstanceState) -> StateCapture:
    """A consistent copy of an instance's state and counters, taken under its lock. The
    only part of a snapshot that pauses the instance's queries; O(tracked blocks) at C
    speed. The engine's fields go through the registry's snapshot codec
    (:func:`~litehit_core.engine.state_record`)."""
    with state.lock:
        engine_meta, engine_arrays = state_record(state.engine.export_state())
        curve = state.curve.accumulator
        curve_positions, curve_values = curve.arrays()  # immutable: safe after the lock
        meta = {
            "format": STATE_FORMAT,
            "registration": registration_to_dict(state.registration),
            "group": group_to_dict(state.group),
            "clock_ns": state.clock_ns,
            "total_queries": state.total_queries,
            "total_blocks_queried": state.total_blocks_queried,
            "total_input_tokens": state.total_input_tokens,
            "total_hits": list(state.total_hits),
            "total_max_hits": state.total_max_hits,
            "curve_kind": curve.kind,
            "curve_scale": curve.scale,
        }
    meta.update(engine_meta)
    arrays = {**engine_arrays, "curve_positions": curve_positions, "curve_values": curve_values}
    return StateCapture(state.instance_id, state, meta, arrays)


def write_state(store: SnapshotStore, stats: StateStats, capture: StateCapture) -> bool:
    """Write a capture to the state store (outside every lock); False (logged at ERROR,
    counted in ``stats``) when it failed. O(size)."""
    started = time.monotonic()
    try:
        size = store.write(capture.instance_id, capture.meta, capture.arrays)
    except OSError as exc:
        stats.count("write_failed")
        log.error(
            "snapshot of instance %r not written: %s",
            capture.instance_id,
            exc,
            extra={"instance_id": capture.instance_id},
        )
        return False
    stats.written(time.monotonic() - started, size)
    return True


def restore_states(
    store: SnapshotStore, stats: StateStats, instances: dict[str, InstanceState]
) -> int:
    """Give each of ``instances`` the state and counters of its snapshot (call with the
    admin lock held); returns how many were restored. A corrupt, truncated or foreign
    snapshot, or one of another registration, leaves its instance fresh (logged at ERROR
    and counted in ``stats`` by reason); the others still restore. Snapshots of unknown
    instances and temporaries of a killed writer are removed. O(total snapshot size)."""
    restored = 0
    fresh: dict[str, int] = {}
    written: list[float] = []
    for path in store.remove_unknown(set(instances)):
        log.info("removed stale snapshot file %s", path)
    for instance_id, state in sorted(instances.items()):
        try:
            found = store.read(instance_id)
            if found is None:
                fresh["no snapshot"] = fresh.get("no snapshot", 0) + 1
                continue
            restore_state(state, *found)
        except SnapshotError as exc:
            stats.count("corrupt")
            fresh["corrupt"] = fresh.get("corrupt", 0) + 1
            log.error(
                "snapshot of instance %r is unusable, starting it fresh: %s",
                instance_id,
                exc,
                extra={"instance_id": instance_id},
            )
            continue
        except StateMismatch as exc:
            stats.count("mismatch")
            fresh["mismatch"] = fresh.get("mismatch", 0) + 1
            log.error(
                "snapshot of instance %r does not match its registration, starting it fresh: %s",
                instance_id,
                exc,
                extra={"instance_id": instance_id},
            )
            continue
        restored += 1
        when = store.written_unix(instance_id)
        if when is not None:
            written.append(when)
    stats.restored = restored
    stats.last_restore = RestoreSummary(
        len(instances),
        restored,
        fresh,
        min(written) if written else None,
        max(written) if written else None,
    )
    return restored
