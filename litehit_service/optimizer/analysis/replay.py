"""One analysis replay and how its files are published.

:func:`run_analysis` replays a validated ``litehit optimize`` configuration in the policy
replay's analysis mode: no node is ever freed, so a base slot names one block path for the
whole replay, every block life is a row of ``lives`` and every key a read hit names its
node in ``key_node`` (:mod:`litehit_core.policy_replay.state`); the commands publish
their files with :func:`litehit_service.offline.outputs.publish_files`. Cost: the
replay's O(keys), memory O(every path written) instead of O(cached blocks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from litehit_core.policy_replay import ReplayResult, replay
from litehit_core.policy_replay.state import HIGH, LIFE_FIELDS, STRIDE, USERS
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.run import build_setup
from litehit_service.optimizer.optimize.trace import LoadedTrace

if TYPE_CHECKING:
    pass

__all__ = ["Analysis", "InstanceInfo", "read_records", "run_analysis"]


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """A configured instance as the analyses name it: ``index`` (configuration order,
    the replay's instance ``u``; tier ``t`` is internal instance ``u + t * users``), its
    group and policy, ``tier_names`` (tier 0 first; empty when untiered)."""

    instance_id: str
    index: int
    group_name: str
    policy: str
    tier_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Analysis:
    """A finished analysis replay: the trace, the replay's result (``result.arrays``: the
    final arrays, nodes kept), every configured instance, ``stride`` (slots per node: the
    most tiers of any group), ``users`` (configured instances), ``nodes`` (base slots
    used: every path written, all instances) and ``end_ns``: the end of the replay, the
    later of the last record's time and the last write applied (a write delayed past the
    last record is applied at its due time)."""

    trace: LoadedTrace
    result: ReplayResult
    instances: tuple[InstanceInfo, ...]
    stride: int
    users: int
    nodes: int
    end_ns: int


def run_analysis(
    config: OptimizeConfig,
    trace: LoadedTrace,
    *,
    progress: Callable[[int], object] | None = None,
) -> Analysis:
    """Replay ``trace`` under ``config`` in analysis mode; ``progress(n)`` hears records
    done. LocatedError as ``litehit optimize`` for a configuration the replay refuses.
    O(keys) time, O(paths written + block lives) memory."""
    setup = build_setup(config, trace)._replace(analyse=True)
    result = replay(setup, trace.records, progress=progress)
    arrays = result.arrays
    stride = int(arrays.scalars[STRIDE])
    infos = []
    index = 0
    for group in config.groups:
        names = tuple(t.name for t in group.tiers)
        for inst in group.instances:
            infos.append(
                InstanceInfo(inst.instance_id, index, group.group_name, inst.policy.name, names)
            )
            index += 1
    times = trace.records.times
    lives = arrays.lives
    events = lives[:, [LIFE_FIELDS.index("birth"), LIFE_FIELDS.index("death")]]
    end = max(int(times[-1]) if len(times) else 0, int(events.max()) if len(lives) else 0)
    return Analysis(
        trace=trace,
        result=result,
        instances=tuple(infos),
        stride=stride,
        users=int(arrays.scalars[USERS]),
        nodes=int(arrays.scalars[HIGH]) // stride,
        end_ns=end,
    )


def read_records(analysis: Analysis) -> np.ndarray:
    """Per key of the records, the index of the record it belongs to (int64). O(keys)."""
    off = analysis.trace.records.key_off
    return np.repeat(np.arange(len(off) - 1, dtype=np.int64), np.diff(off))
