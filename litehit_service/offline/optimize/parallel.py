"""``litehit optimize --max-workers N`` / ``--executor ray``: groups replayed apart, merged.

Groups share nothing but two things: a row's ``CachedBlocksAllInstances`` (spec §6: every
instance of the run, right after the read) and the moments pending writes land (before
each record, every write due by its time is applied, whichever group reads). So each
group is replayed on its own (:func:`replay_group`) over a *sub-trace*
(:func:`group_trace`): that group's records, instance indices remapped to the one-group
configuration's, plus every other group's read as a
:data:`~litehit_core.policy_replay.loop.TICK` record at the same time and in the same
order (a TICK applies the group's pending writes due by then and gets a row without hits
whose ``cached_all`` is the group's cached blocks at that moment). Every group's replay
then has exactly one row per read of the trace, in trace order, and :func:`merge_parts`
takes, per read, the owning group's row and the SUM of every group's ``cached_all``;
per-instance totals are concatenated in configuration order and tier columns padded to
the widest group. :func:`~.run.gather` turns the merged replay into the
:class:`~.run.OptimizeResult`: the CSVs are byte-identical to one replay of every group.

The trace is decoded once by the caller and shared through
:class:`~litehit_service.offline.pool.TracePool` (forked processes inherit it; Ray gets
it once through its object store). A worker sends back its own reads' rows and one
``cached_all`` column (8 bytes per read of the trace), not the whole sub-replay.

Cost: per group O(its keys + reads of the trace) plus its evictions, so the total work
grows by (groups - 1) x reads TICK records and a merge of O(reads x groups); memory per
worker: its sub-trace (~30 bytes per record kept, 9 per own key) and its replay's arrays.
One group, or one local worker, replays once as :func:`~.run.run_optimize` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from litehit_core.policy_replay import ReplayRecords, ReplayResult, replay
from litehit_core.policy_replay.loop import TICK, WRITE
from litehit_service.offline.optimize.config import OptimizeConfig
from litehit_service.offline.optimize.run import OptimizeResult, build_setup, gather, run_optimize
from litehit_service.offline.optimize.trace import LoadedTrace
from litehit_service.offline.pool import TracePool, report_progress

__all__ = [
    "GroupPart",
    "GroupTask",
    "group_trace",
    "merge_parts",
    "replay_group",
    "run_parallel",
    "runs_in_parallel",
]

_TRACE_KEY = "trace"
_POLL_S = 0.2
"""Seconds between progress updates while the workers replay."""


class GroupTask(NamedTuple):
    """One group's replay: ``index`` in the configuration, ``config`` holding just that
    group, and the global indices of its instances (``first`` .. ``first + count - 1``)."""

    index: int
    config: OptimizeConfig
    first: int
    count: int


class GroupPart(NamedTuple):
    """What a group's replay sends back: ``rows`` of its own reads (the replay's columns;
    column 0 is the sub-trace's record index), ``cached_all`` (int64, one per read of the
    whole trace: the group's cached blocks right after it), the replay's ``stride`` (most
    tiers of an instance, 1 untiered), per-instance totals as
    :class:`~litehit_core.policy_replay.ReplayResult` has them, its arrays' bytes."""

    index: int
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


def group_trace(trace: LoadedTrace, first: int, count: int) -> LoadedTrace:
    """The sub-trace of the group whose instances are ``first .. first + count - 1``
    (module docstring): its records (instances renumbered from 0) and every other read as
    a TICK (no keys, instance 0, no TTL), in trace order; other groups' writes are left
    out. New writable arrays. O(records + keys)."""
    rec = trace.records
    own = (rec.insts >= first) & (rec.insts < first + count)
    keep = own | (rec.kinds != WRITE)
    lens = np.diff(rec.key_off)
    key_mask = np.repeat(own, lens)
    sub_lens = np.where(own, lens, 0)[keep]
    key_off = np.zeros(len(sub_lens) + 1, dtype=np.int64)
    np.cumsum(sub_lens, out=key_off[1:])
    records = ReplayRecords(
        kinds=np.where(own, rec.kinds, np.int8(TICK)).astype(np.int8)[keep],
        insts=np.where(own, rec.insts - first, 0).astype(np.int32)[keep],
        times=rec.times[keep],
        key_off=key_off,
        keys=rec.keys[key_mask],
        local=rec.local[key_mask],
        buckets=np.where(own, rec.buckets, -1).astype(np.int32)[keep],
    )
    return replace(trace, records=records, input_lens=trace.input_lens[keep])


def replay_group(task: GroupTask, trace: LoadedTrace) -> GroupPart:
    """Replay one group over its sub-trace of ``trace`` (what a worker runs; plain
    Python, testable in this process). Progress: records of the sub-trace, through
    :func:`~litehit_service.offline.pool.report_progress`. O(sub-trace) + evictions."""
    sub = group_trace(trace, task.first, task.count)
    setup = build_setup(task.config, sub)
    result = replay(setup, sub.records, progress=report_progress)
    rows = result.rows
    own = sub.records.kinds[rows[:, 0]] != TICK
    return GroupPart(
        index=task.index,
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


def merge_parts(config: OptimizeConfig, trace: LoadedTrace, parts: list[GroupPart]) -> ReplayResult:
    """One replay's result from every group's part (configuration order): per read the
    owning group's row, column 0 the read's record index, ``cached_all`` summed over the
    groups; tier columns padded to the widest group (a group of one tier fills tier 0 as
    one replay of every group does: its hits and cached blocks). ``arrays`` is None (the
    parts' arrays stay in the workers). ValueError when a part does not fit the trace.
    O(reads x groups)."""
    rec = trace.records
    reads = np.flatnonzero(rec.kinds != WRITE)
    sizes = [len(g.instances) for g in config.groups]
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    owner = group_of[rec.insts[reads]] if len(reads) else np.zeros(0, dtype=np.int64)
    wide = max(p.stride for p in parts)
    width = 6 + 2 * wide if wide > 1 else 6
    rows = np.zeros((len(reads), width), dtype=np.int64)
    rows[:, 0] = reads
    for p in parts:
        mine = owner == p.index
        own = p.rows
        if len(own) != int(mine.sum()) or len(p.cached_all) != len(reads):
            raise ValueError(
                f"group {p.index}: {len(own)} own rows for {int(mine.sum())} reads, "
                f"{len(p.cached_all)} rows for {len(reads)}"
            )
        rows[mine, 1:4] = own[:, 1:4]
        rows[mine, 5] = own[:, 5]
        rows[:, 4] += p.cached_all
        if wide > 1:
            s = p.stride
            if s > 1:
                rows[mine, 6 : 6 + s] = own[:, 6 : 6 + s]
                rows[mine, 6 + wide : 6 + wide + s] = own[:, 6 + s : 6 + 2 * s]
            else:
                rows[mine, 6] = own[:, 1] + own[:, 2]
                rows[mine, 6 + wide] = own[:, 3]

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts])

    def padded(name: str) -> np.ndarray:
        blocks = [getattr(p, name) for p in parts]
        return np.concatenate([np.pad(b, ((0, 0), (0, wide - b.shape[1]))) for b in blocks])

    return ReplayResult(
        rows=rows,
        cached=cat("cached"),
        peak=cat("peak"),
        evicted=cat("evicted"),
        expired=cat("expired"),
        written=cat("written"),
        memory_bytes=sum(p.memory_bytes for p in parts),
        tier_cached=padded("tier_cached"),
        tier_evicted=padded("tier_evicted"),
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
    """Replay ``trace`` under ``config``, groups in parallel (module docstring): ``workers``
    forked processes (``local``) or Ray tasks (``ray``, at ``ray_address`` or a local Ray;
    as many at once as Ray's CPUs allow); one group, or ``local`` with one worker, is one
    replay in this process. ``progress(n)`` hears the share of the trace's records done
    (the calls add up to its record count). The same result as
    :func:`~.run.run_optimize` (``replay_seconds`` includes starting the workers;
    ``memory_bytes`` sums the groups' arrays). A worker's error is raised here; a bad
    configuration before any worker starts."""
    if not runs_in_parallel(config, workers, executor):
        return run_optimize(config, trace, progress=progress)
    build_setup(config, trace)  # its errors here, not in a worker
    tasks: list[GroupTask] = []
    first = 0
    for gi, group in enumerate(config.groups):
        sub = replace(config, groups=(group,))
        tasks.append(GroupTask(gi, sub, first, len(group.instances)))
        first += len(group.instances)
    rec = trace.records
    n_reads = int(np.count_nonzero(rec.kinds != WRITE))
    own_records = np.bincount(
        np.repeat(np.arange(len(tasks)), [t.count for t in tasks])[rec.insts],
        minlength=len(tasks),
    )
    own_reads = np.bincount(
        np.repeat(np.arange(len(tasks)), [t.count for t in tasks])[rec.insts[rec.kinds != WRITE]],
        minlength=len(tasks),
    )
    sizes = [int(own_records[t.index] + n_reads - own_reads[t.index]) for t in tasks]
    start = time.perf_counter()
    pool = TracePool({_TRACE_KEY: trace}, workers=min(workers, len(tasks)), executor=executor,
                     ray_address=ray_address)  # fmt: skip
    with pool:
        order = sorted(tasks, key=lambda t: -sizes[t.index])  # the longest first
        futures = {pool.submit(replay_group, t, _TRACE_KEY): t.index for t in order}
        parts = _collect(pool, futures, sizes, len(rec.kinds), progress)
    merged = merge_parts(config, trace, parts)
    return gather(config, trace, merged, time.perf_counter() - start)


def _collect(
    pool: TracePool,
    futures: dict[Future, int],
    sizes: list[int],
    n_records: int,
    progress: Callable[[int], object] | None,
) -> list[GroupPart]:
    """Every group's part in configuration order, reporting progress as the workers go
    (scaled to ``n_records``); the first failing group's error is raised."""
    parts: dict[int, GroupPart] = {}
    pending = set(futures)
    total = max(sum(sizes), 1)
    shown = 0
    finished = 0
    while pending:
        done, pending = wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
        for fut in done:
            index = futures[fut]
            parts[index] = fut.result()
            finished += sizes[index]
        units = pool.reported() if pool.reports_progress else finished
        target = min(units, total) * n_records // total
        if progress is not None and target > shown:
            progress(target - shown)
            shown = target
    if progress is not None and n_records > shown:
        progress(n_records - shown)
    return [parts[i] for i in sorted(parts)]
