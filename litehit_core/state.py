"""An engine's exported state: what a durable snapshot stores and a restore reads.

:class:`EngineState` is exactly the information an engine's compaction keeps — the tracked
keys in recency order, their last-access times (run-length encoded) and the clock and
counters — so restoring it gives an engine that answers every later request as the
exported one would. Writing it to disk (and choosing a file format) is the caller's job.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["STATE_FORMAT_VERSION", "EngineState"]

STATE_FORMAT_VERSION = 1
"""The :attr:`EngineState.format_version` this code writes and reads."""


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
