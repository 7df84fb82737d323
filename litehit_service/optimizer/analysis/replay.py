"""One analysis replay, streamed, and how its files are published.

:func:`run_analysis` replays a validated ``litehit optimize`` configuration in the policy
replay's analysis mode: no node is ever freed, so a base slot names one block path for the
whole replay, and the replay records every block life (``lives``) and, per batch, the
slot each read hit (:attr:`~litehit_core.policy_replay.Replayer.key_hits`). The trace is
read batch by batch through the same reorder window as ``litehit optimize``
(:func:`~litehit_service.optimizer.optimize.stream.replay_batches`); after each batch the
command's ``on_batch`` takes what it needs (export-tree: the hits per path; lifecycle: the
lives that ended), so nothing is kept per record. Memory: the replay's node arrays, one
entry per path written (the tree is the output), plus the lives still alive and one
batch; the commands publish their files all or nothing
(:mod:`litehit_service.offline.outputs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from litehit_core.policy_replay import Replayer, ReplayResult
from litehit_core.policy_replay.state import HIGH, NOW, STRIDE, USERS
from litehit_service.optimizer.optimize.columns import Routing, TraceBatches
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.run import build_setup
from litehit_service.optimizer.optimize.stream import Fed, replay_batches

__all__ = ["Analysis", "InstanceInfo", "instance_infos", "run_analysis"]


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
    """A finished analysis replay: the replay's result (``result.arrays``: the final
    arrays, nodes kept; ``lives``: the lives no ``on_batch`` drained), every configured
    instance, ``stride`` (slots per node: the most tiers of any group), ``users``
    (configured instances), ``nodes`` (base slots used: every path written, all
    instances), ``records`` replayed and ``end_ns``: the end of the replay, the later of
    the last record's time and the last write applied (a write delayed past the last
    record is applied at its due time)."""

    result: ReplayResult
    instances: tuple[InstanceInfo, ...]
    stride: int
    users: int
    nodes: int
    records: int
    end_ns: int


def instance_infos(config: OptimizeConfig) -> tuple[InstanceInfo, ...]:
    """Every configured instance as the analyses name it, in configuration order."""
    infos = []
    for group in config.groups:
        names = tuple(t.name for t in group.tiers)
        for inst in group.instances:
            infos.append(InstanceInfo(inst.instance_id, len(infos), group.group_name,
                                      inst.policy.name, names))  # fmt: skip
    return tuple(infos)


def run_analysis(
    config: OptimizeConfig,
    routing: Routing,
    batches: TraceBatches,
    *,
    window_ns: int,
    on_batch: Callable[[Replayer, Fed], object] | None = None,
    progress: Callable[[int], object] | None = None,
) -> Analysis:
    """Replay ``batches`` (:func:`~..optimize.trace.open_trace_batches`) under ``config`` in
    analysis mode, in time order within ``window_ns``; ``on_batch(replayer, fed)`` runs
    after each batch (the replayer's ``key_hits`` are that batch's); ``progress(n)``
    hears the input units done. LocatedError as ``litehit optimize`` for a bad record or a
    configuration the replay refuses. O(keys) time; memory O(paths written + lives
    alive + one batch)."""
    replayer = Replayer(build_setup(config)._replace(analyse=True), analyse_keys=0)
    records = 0
    last = 0
    for fed in replay_batches(replayer, config, routing, batches, window_ns):
        if on_batch is not None:
            on_batch(replayer, fed)
        records += len(fed.batch.kinds)
        if len(fed.batch.times):
            last = int(fed.batch.times[-1])
        if progress is not None and fed.done:
            progress(fed.done)
    result = replayer.finish()
    arrays = result.arrays
    stride = int(arrays.scalars[STRIDE])
    return Analysis(
        result=result,
        instances=instance_infos(config),
        stride=stride,
        users=int(arrays.scalars[USERS]),
        nodes=int(arrays.scalars[HIGH]) // stride,
        records=records,
        end_ns=max(last, int(arrays.scalars[NOW])),
    )
