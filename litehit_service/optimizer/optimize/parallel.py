"""``litehit optimize --max-workers N`` / ``--executor ray``: groups replayed apart, merged.

Groups share nothing but two things: a row's ``CachedBlocksAllInstances`` (spec §6: every
instance of the run, right after the read) and the moments pending writes land (before
each record, every write due by its time is applied, whichever group reads). So the
groups are split into N *parts* (:func:`plan_parts`: balanced by records and keys, each
part's groups in configuration order) and each part is replayed on its own
(:func:`replay_part`) over a *sub-trace* (:func:`part_trace`): the part's records,
instance indices remapped to the part's configuration, plus every other read of the
trace as a :data:`~litehit_core.policy_replay.loop.TICK` record at the same time and in
the same order (a TICK applies the part's pending writes due by then and gets a row
without hits whose ``cached_all`` is the part's cached blocks at that moment). Every
part's replay then has exactly one row per read of the trace, in trace order, and
:class:`Merger` takes, per read, the owning part's row and the SUM of every part's
``cached_all``; per-instance totals go back to their configuration positions and tier
columns are padded to the widest part. :func:`~.run.gather` turns the merged replay into
the :class:`~.run.OptimizeResult`: the CSVs are byte-identical to one replay of every
group.

The trace is decoded once by the caller and shared through
:class:`~litehit_service.offline.pool.TracePool` (forked processes inherit it, and the
compiled kernels, loaded here first: ~0.2 s once rather than in every worker; Ray gets
the trace once through its object store). A part sends back its own reads' rows and one
``cached_all`` column (8 bytes per read of the trace), folded into the result as it
arrives.

Cost: each part O(its keys + the trace's reads) plus its evictions -- the TICKs add (N -
1) x reads cheap records in all, N = min(workers, groups), whatever the number of groups;
the merge O(reads x N). Memory: the result's rows once here; per worker its sub-trace
(~30 bytes per record kept, 9 per own key), its replay's arrays and rows. One group, or
one local worker, replays once as :func:`~.run.run_optimize` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from litehit_core.policy_replay import ReplayRecords, ReplayResult, replay, warm_up
from litehit_core.policy_replay.loop import TICK, WRITE
from litehit_service.offline.pool import TracePool, report_progress
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.run import OptimizeResult, build_setup, gather, run_optimize
from litehit_service.optimizer.optimize.trace import LoadedTrace

__all__ = [
    "Merger",
    "PartResult",
    "PartTask",
    "part_trace",
    "plan_parts",
    "replay_part",
    "run_parallel",
    "runs_in_parallel",
]

_TRACE_KEY = "trace"
_POLL_S = 0.2
"""Seconds between progress updates while the workers replay."""


class PartTask(NamedTuple):
    """One part's replay: ``index`` among the parts, ``config`` holding the part's groups
    (configuration order) and ``members``: the global (configuration-order) index of each
    of the part's instances, in the part's order."""

    index: int
    config: OptimizeConfig
    members: tuple[int, ...]


class PartResult(NamedTuple):
    """What a part's replay sends back: ``members`` (as :class:`PartTask`), ``rows`` of
    its own reads (the replay's columns; column 0 is the sub-trace's record index),
    ``cached_all`` (int64, one per read of the whole trace: the part's cached blocks right
    after it), the replay's ``stride`` (most tiers of an instance, 1 untiered), per
    instance the totals as :class:`~litehit_core.policy_replay.ReplayResult` has them, and
    its arrays' bytes."""

    members: tuple[int, ...]
    rows: np.ndarray
    cached_all: np.ndarray
    stride: int
    cached: np.ndarray
    peak: np.ndarray
    evicted: np.ndarray
    expired: np.ndarray
    written: np.ndarray
    tier_cached: np.ndarray
    tier_evicted: np.ndarray
    memory_bytes: int


def runs_in_parallel(config: OptimizeConfig, workers: int, executor: str) -> bool:
    """Whether :func:`run_parallel` fans out: several groups, and several local workers or
    Ray."""
    return len(config.groups) > 1 and (workers > 1 or executor == "ray")


def plan_parts(config: OptimizeConfig, trace: LoadedTrace, parts: int) -> list[PartTask]:
    """The groups in ``min(parts, groups)`` parts of about equal work (records + keys of
    their instances; the heaviest group first into the lightest part), each part's groups
    in configuration order; empty parts dropped. O(records + groups x parts)."""
    sizes = [len(g.instances) for g in config.groups]
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    rec = trace.records
    weight = np.bincount(group_of[rec.insts], weights=np.diff(rec.key_off) + 1,
                         minlength=len(sizes))  # fmt: skip
    bins: list[list[int]] = [[] for _ in range(min(parts, len(sizes)))]
    loads = [0.0] * len(bins)
    for gi in sorted(range(len(sizes)), key=lambda g: (-weight[g], g)):
        k = min(range(len(bins)), key=lambda b: (loads[b], b))
        bins[k].append(gi)
        loads[k] += float(weight[gi])
    first = np.r_[0, np.cumsum(sizes)]
    tasks = []
    for groups in (sorted(b) for b in bins if b):
        members = tuple(int(i) for g in groups for i in range(first[g], first[g + 1]))
        sub = replace(config, groups=tuple(config.groups[g] for g in groups))
        tasks.append(PartTask(len(tasks), sub, members))
    return tasks


def part_trace(trace: LoadedTrace, members: tuple[int, ...]) -> LoadedTrace:
    """The sub-trace of the part with instances ``members`` (module docstring): their
    records (instances renumbered to the position in ``members``) and every other read as
    a TICK (no keys, instance 0, no TTL), in trace order; other instances' writes are left
    out. New writable arrays. O(records + keys)."""
    rec = trace.records
    remap = np.full(max(int(rec.insts.max(initial=0)), *members) + 1, -1, dtype=np.int64)
    remap[list(members)] = np.arange(len(members))
    local = remap[rec.insts]
    own = local >= 0
    keep = own | (rec.kinds != WRITE)
    lens = np.diff(rec.key_off)
    key_mask = np.repeat(own, lens)
    sub_lens = np.where(own, lens, 0)[keep]
    key_off = np.zeros(len(sub_lens) + 1, dtype=np.int64)
    np.cumsum(sub_lens, out=key_off[1:])
    records = ReplayRecords(
        kinds=np.where(own, rec.kinds, np.int8(TICK)).astype(np.int8)[keep],
        insts=np.where(own, local, 0).astype(np.int32)[keep],
        times=rec.times[keep],
        key_off=key_off,
        keys=rec.keys[key_mask],
        local=rec.local[key_mask],
        buckets=np.where(own, rec.buckets, -1).astype(np.int32)[keep],
    )
    return replace(trace, records=records, input_lens=trace.input_lens[keep])


def replay_part(task: PartTask, trace: LoadedTrace) -> PartResult:
    """Replay one part over its sub-trace of ``trace`` (what a worker runs; plain Python,
    testable in this process). Progress: records of the sub-trace, through
    :func:`~litehit_service.offline.pool.report_progress`. O(sub-trace) + evictions."""
    sub = part_trace(trace, task.members)
    result = replay(build_setup(task.config, sub), sub.records, progress=report_progress)
    rows = result.rows
    own = sub.records.kinds[rows[:, 0]] != TICK
    return PartResult(
        members=task.members,
        rows=rows[own],
        cached_all=rows[:, 4].copy(),
        stride=result.tier_cached.shape[1],
        cached=result.cached,
        peak=result.peak,
        evicted=result.evicted,
        expired=result.expired,
        written=result.written,
        tier_cached=result.tier_cached,
        tier_evicted=result.tier_evicted,
        memory_bytes=result.memory_bytes,
    )


class Merger:
    """Folds :class:`PartResult` objects (any order) into one replay's result of every
    instance of ``trace`` (:meth:`add`, then :meth:`result`). Each part is folded as it
    arrives and may be dropped: the merger holds the result's rows and totals only.
    ``stride``: the most tiers of any instance of the run (1 untiered)."""

    def __init__(self, trace: LoadedTrace, n_instances: int, stride: int) -> None:
        rec = trace.records
        self._reads = np.flatnonzero(rec.kinds != WRITE)
        self._inst = rec.insts[self._reads]
        self.stride = stride
        width = 6 + 2 * stride if stride > 1 else 6
        self.rows = np.zeros((len(self._reads), width), dtype=np.int64)
        self.rows[:, 0] = self._reads
        self.totals = {name: np.zeros(n_instances, dtype=np.int64)
                       for name in ("cached", "peak", "evicted", "expired", "written")}  # fmt: skip
        self.tiers = {name: np.zeros((n_instances, stride), dtype=np.int64)
                      for name in ("tier_cached", "tier_evicted")}  # fmt: skip
        self.memory_bytes = 0

    def add(self, part: PartResult) -> None:
        """Fold ``part`` in: its reads' rows, its ``cached_all`` added to every row, its
        instances' totals; a part of one tier fills tier 0 as one replay of every group
        does (its hits and cached blocks). ValueError when it does not fit. O(reads)."""
        rows, wide, members = self.rows, self.stride, list(part.members)
        mine = np.isin(self._inst, members)
        own = part.rows
        if len(own) != int(mine.sum()) or len(part.cached_all) != len(rows):
            raise ValueError(
                f"part of instances {members}: {len(own)} rows for {int(mine.sum())} "
                f"reads, {len(part.cached_all)} rows for {len(rows)}"
            )
        rows[mine, 1:4] = own[:, 1:4]
        rows[mine, 5] = own[:, 5]
        rows[:, 4] += part.cached_all
        s = part.stride
        if wide > 1 and s > 1:
            rows[mine, 6 : 6 + s] = own[:, 6 : 6 + s]
            rows[mine, 6 + wide : 6 + wide + s] = own[:, 6 + s : 6 + 2 * s]
        elif wide > 1:
            rows[mine, 6] = own[:, 1] + own[:, 2]
            rows[mine, 6 + wide] = own[:, 3]
        for name, values in self.totals.items():
            values[members] = getattr(part, name)
        for name, values in self.tiers.items():
            values[members, :s] = getattr(part, name)
        self.memory_bytes += part.memory_bytes

    def result(self) -> ReplayResult:
        """The merged replay (``arrays`` is None: the parts' arrays stayed in the
        workers; ``memory_bytes`` sums the parts')."""
        return ReplayResult(
            rows=self.rows,
            **self.totals,
            memory_bytes=self.memory_bytes,
            **self.tiers,
            arrays=None,  # type: ignore[arg-type]
        )


def run_parallel(
    config: OptimizeConfig,
    trace: LoadedTrace,
    *,
    workers: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    progress: Callable[[int], object] | None = None,
) -> OptimizeResult:
    """Replay ``trace`` under ``config``, groups in ``min(workers, groups)`` parts in
    parallel (module docstring): forked processes (``local``) or Ray tasks (``ray``, at
    ``ray_address`` or a local Ray; as many at once as its CPUs allow); one group, or
    ``local`` with one worker, is one replay in this process. ``progress(n)`` hears the
    share of the trace's records done (the calls add up to its record count). The same
    result as :func:`~.run.run_optimize` (``replay_seconds`` includes starting the
    workers; ``memory_bytes`` sums the parts' arrays). A worker's error is raised here; a
    bad configuration before any worker starts."""
    if not runs_in_parallel(config, workers, executor):
        return run_optimize(config, trace, progress=progress)
    build_setup(config, trace)  # its errors here, not in a worker
    start = time.perf_counter()
    tasks = plan_parts(config, trace, workers)
    rec = trace.records
    n_reads = int(np.count_nonzero(rec.kinds != WRITE))
    sizes = []
    for t in tasks:
        own = np.isin(rec.insts, t.members)
        sizes.append(int(own.sum() + n_reads - np.count_nonzero(own & (rec.kinds != WRITE))))
    stride = max((len(g.tiers) if g.tiers else 1) for g in config.groups)
    merger = Merger(trace, len(config.instances), stride)
    if executor == "local":  # load the kernels once here: the forked workers inherit them
        warm_up()
    pool = TracePool({_TRACE_KEY: trace}, workers=len(tasks), executor=executor,
                     ray_address=ray_address)  # fmt: skip
    with pool:
        order = sorted(tasks, key=lambda t: -sizes[t.index])  # the longest first
        futures = {pool.submit(replay_part, t, _TRACE_KEY): t.index for t in order}
        _collect(pool, futures, sizes, len(rec.kinds), merger, progress)
    return gather(config, trace, merger.result(), time.perf_counter() - start)


def _collect(
    pool: TracePool,
    futures: dict[Future, int],
    sizes: list[int],
    n_records: int,
    merger: Merger,
    progress: Callable[[int], object] | None,
) -> None:
    """Fold every part into ``merger`` as it arrives, reporting progress as the workers go
    (scaled to ``n_records``); the first failing part's error is raised."""
    pending = set(futures)
    total = max(sum(sizes), 1)
    shown = finished = 0
    while pending:
        done, pending = wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
        for fut in done:
            merger.add(fut.result())
            finished += sizes[futures[fut]]
        units = pool.reported() if pool.reports_progress else finished
        target = min(units, total) * n_records // total
        if progress is not None and target > shown:
            progress(target - shown)
            shown = target
    if progress is not None and n_records > shown:
        progress(n_records - shown)
