"""An engine's exported state: what a durable snapshot stores and a restore reads.

:class:`EngineState` is exactly the information an engine's compaction keeps — the tracked
keys in recency order, their last-access times (run-length encoded) and the clock and
counters — so restoring it gives an engine that answers every later request as the
exported one would. Writing it to disk (and choosing a file format) is the caller's job;
:func:`validated_arrays` checks a state before an engine of one key list loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from litehit_core.errors import InvalidRequestError

__all__ = ["STATE_FORMAT_VERSION", "EngineState", "validated_arrays"]

STATE_FORMAT_VERSION = 1
"""The :attr:`EngineState.format_version` this code writes and reads."""

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True, eq=False)
class EngineState:
    """One engine's state, immutable (its arrays are read-only when exported).

    - ``model``: the :data:`~litehit_core.engine.MODELS` name of the engine (``"lru"``).
    - ``format_version``: :data:`STATE_FORMAT_VERSION`.
    - ``keys``: int64 array of the tracked block keys, least recent first.
    - ``epoch_starts``, ``epoch_times``: int64 arrays of equal length; run ``i`` of keys with
      one last-access time starts at index ``epoch_starts[i]`` of ``keys`` and was touched
      at ``epoch_times[i]`` ns (both strictly increasing, the first start 0). Empty for an
      engine without TTL (times are then never needed).
    - ``now_ns``: the engine's monotone clock in ns (``-2**63`` before any request with TTL).
    - ``expired_blocks``, ``dropped_blocks``: the cumulative counters (TTL expirations,
      blocks dropped by ``max_tracked_blocks``).

    Compare states field by field (numpy arrays have no single truth value, so ``==`` on
    two states is identity).
    """

    model: str
    format_version: int
    keys: np.ndarray
    epoch_starts: np.ndarray
    epoch_times: np.ndarray
    now_ns: int
    expired_blocks: int
    dropped_blocks: int
    kinds: np.ndarray | None = None
    """Hybrid engines: per key, 1 = a Full block, 2 = a Linear state (None otherwise)."""

    @classmethod
    def exported(
        cls,
        model: str,
        keys: np.ndarray,
        times: np.ndarray | None,
        now_ns: int,
        expired_blocks: int,
        dropped_blocks: int,
        kinds: np.ndarray | None = None,
    ) -> EngineState:
        """The state an engine exports: ``keys`` (int64, least recent first) with their
        last-access ``times`` (int64 ns per key, non-decreasing; None without TTL) folded
        into epochs, every array made read-only. O(keys) numpy work."""
        if times is not None and len(keys):
            starts = np.flatnonzero(times[1:] != times[:-1])
            starts += 1
            starts = np.concatenate((np.zeros(1, np.int64), starts.astype(np.int64)))
            epoch_times = times[starts]
        else:
            starts = np.zeros(0, np.int64)
            epoch_times = np.zeros(0, np.int64)
        for values in (keys, starts, epoch_times, kinds):
            if values is not None:
                values.flags.writeable = False
        return cls(
            model=model,
            format_version=STATE_FORMAT_VERSION,
            keys=keys,
            epoch_starts=starts,
            epoch_times=epoch_times,
            now_ns=now_ns,
            expired_blocks=expired_blocks,
            dropped_blocks=dropped_blocks,
            kinds=kinds,
        )


def validated_arrays(
    state: EngineState, model: str, ttl_ns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``state``'s keys, epoch starts and epoch times, checked for an engine of ``model``
    with lifetime ``ttl_ns`` (0 = none) that keeps one list of keys (``LiteHit`` and
    ``CompactLiteHit``: model ``"lru"``) before it loads them: an :class:`EngineState` of
    that model and :data:`STATE_FORMAT_VERSION`, integer counters in int64, 1-d int64
    arrays, epochs starting at 0, strictly increasing, below ``len(keys)`` and not after
    ``now_ns``, access times present when ``ttl_ns`` is set. Distinct keys are the
    engine's check (it builds its table anyway).

    O(n + E) numpy work. InvalidRequestError naming the field for any inconsistency.
    """
    if not isinstance(state, EngineState):
        raise InvalidRequestError(f"state must be an EngineState, got {type(state).__name__}")
    if state.model != model:
        raise InvalidRequestError(f"state.model must be {model!r}, got {state.model!r}")
    if state.format_version != STATE_FORMAT_VERSION:
        raise InvalidRequestError(
            f"state.format_version must be {STATE_FORMAT_VERSION}, got {state.format_version!r}"
        )
    for name in ("now_ns", "expired_blocks", "dropped_blocks"):
        value = getattr(state, name)
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
            raise InvalidRequestError(f"state.{name} must be an integer, got {value!r}")
        low = _INT64_MIN if name == "now_ns" else 0
        if not low <= value <= _INT64_MAX:
            raise InvalidRequestError(f"state.{name} must be in [{low}, {_INT64_MAX}], got {value}")
    arrays = []
    for name in ("keys", "epoch_starts", "epoch_times"):
        array = getattr(state, name)
        if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype != np.int64:
            shown = (
                f"{array.ndim}-d {array.dtype} array"
                if isinstance(array, np.ndarray)
                else type(array).__name__
            )
            raise InvalidRequestError(f"state.{name} must be a 1-d int64 array, got a {shown}")
        arrays.append(array)
    keys, starts, times = arrays
    n, epochs = len(keys), len(starts)
    if len(times) != epochs:
        raise InvalidRequestError(
            f"state.epoch_starts and state.epoch_times must have one length, "
            f"got {epochs} and {len(times)}"
        )
    if epochs:
        if not n:
            raise InvalidRequestError(f"state has {epochs} epoch(s) but no keys")
        if starts[0] != 0:
            raise InvalidRequestError(f"state.epoch_starts[0] must be 0, got {starts[0]}")
        if starts[-1] >= n:
            raise InvalidRequestError(
                f"state.epoch_starts must lie below len(keys) {n}, got {starts[-1]}"
            )
        if epochs > 1 and not (np.all(starts[1:] > starts[:-1]) and np.all(times[1:] > times[:-1])):
            raise InvalidRequestError(
                "state.epoch_starts and state.epoch_times must strictly increase"
            )
        if times[-1] > state.now_ns:
            raise InvalidRequestError(
                f"state.epoch_times must not pass now_ns {state.now_ns}, got {times[-1]}"
            )
    elif ttl_ns and n:
        raise InvalidRequestError(
            f"state has {n} keys but no access times (epoch_starts is empty); "
            f"an engine with ttl_ns {ttl_ns} needs them"
        )
    return keys, starts, times
