"""Where a trade-off's replays run: this process, forked processes, or Ray tasks.

Every task works on the pool's trace under its key: a trace decoded once by the caller
(:func:`~..optimize.trace.load_trace`) or, for a large trace, a
:class:`~.stream.TraceSource` each task reads in batches itself (:mod:`.stream`: memory
follows the cache, not the trace). Tasks run on the shared
:class:`~litehit_service.offline.pool.TracePool` (the one ``litehit optimize
--max-workers`` uses): ``local`` with one worker runs each task at once in this process;
``local`` with more forks that many processes *after* the trace is in memory, so each
inherits it (copy on write: nothing is pickled or re-read per task; a source is a few
hundred bytes); ``ray`` puts a decoded trace into Ray's object store once and passes its
reference to each task (Ray started as ``litehit replay --executor ray`` starts it; one
writable copy of the arrays per task, ~1 ms for the Mooncake trace, so the compiled
kernels see the array types they were compiled for; the command never streams under Ray).
A task is small: a configuration (groups, quotas, policies) and what to compute
(:class:`ReplayTask`: one policy replay, :class:`CurvesTask`: LiteHit's exact curves,
:class:`FactsTask`: a streamed trace's §7b facts); its answer is small too (per-instance
totals, not the rows). Every executor hands back :class:`concurrent.futures.Future`
objects.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from litehit_service.offline.pool import EXECUTORS, TracePool, default_workers, worker_trace
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.run import run_optimize
from litehit_service.optimizer.optimize.trace import LoadedTrace
from litehit_service.optimizer.tradeoff.exact_curve import litehit_curves
from litehit_service.optimizer.tradeoff.points import point_from_result
from litehit_service.optimizer.tradeoff.stream import (
    TraceSource,
    stream_curves,
    stream_facts,
    stream_point,
)

__all__ = [
    "EXECUTORS",
    "CurvesTask",
    "FactsTask",
    "ReplayTask",
    "TradeoffPool",
    "default_workers",
    "run_task",
]


class ReplayTask(NamedTuple):
    """One policy replay of ``config`` over trace ``trace`` (a key of the pool's traces),
    reported as the point ``label`` at ``capacity_bytes`` (-1 = infinite)."""

    trace: str
    label: str
    capacity_bytes: int
    config: OptimizeConfig


class CurvesTask(NamedTuple):
    """LiteHit's exact curves of every instance of ``config`` for touch ``order``."""

    trace: str
    order: str
    config: OptimizeConfig


class FactsTask(NamedTuple):
    """The §7b facts (:class:`~.stream.TraceFacts`) of streamed trace ``trace`` read
    under ``config`` (the decoding configuration)."""

    trace: str
    config: OptimizeConfig


Task = ReplayTask | CurvesTask | FactsTask
"""What a :class:`TradeoffPool` runs."""


def run_task(task: Task, trace: LoadedTrace | TraceSource | None = None) -> Any:
    """Run one task over ``trace`` (default: the worker's inherited trace of the task's
    key; a :class:`~.stream.TraceSource` is read in batches by the task): a
    :class:`~.points.Point` for a replay, a tuple of curves for a LiteHit pass, the
    :class:`~.stream.TraceFacts` for a facts pass. O(keys) plus the replay's evictions."""
    if trace is None:
        trace = worker_trace(task.trace)
    if isinstance(trace, TraceSource):
        if isinstance(task, CurvesTask):
            return stream_curves(task.config, trace, task.order)
        if isinstance(task, FactsTask):
            return stream_facts(task.config, trace)
        return stream_point(task.label, task.capacity_bytes, task.config, trace)
    if isinstance(task, FactsTask):
        raise TypeError("a FactsTask reads a streamed trace (a TraceSource)")
    if not all(a.flags.writeable for a in (*trace.records, trace.input_lens)):
        trace = _writable(trace)
    if isinstance(task, CurvesTask):
        return litehit_curves(task.config, trace, task.order)
    result = run_optimize(task.config, trace)
    return point_from_result(task.label, task.capacity_bytes, task.config, result)


def _writable(trace: LoadedTrace) -> LoadedTrace:
    """A copy whose arrays are writable (Ray's object store hands out read-only ones)."""
    records = type(trace.records)(*(np.array(a) for a in trace.records))
    return replace(trace, records=records, input_lens=np.array(trace.input_lens))


class TradeoffPool:
    """Runs tasks over ``traces`` (key -> decoded trace or streamed source) with
    ``workers`` at once on ``executor`` (``"local"`` or ``"ray"``; Ray at
    ``ray_address``, else a local Ray started for the pool and stopped by :meth:`close`;
    an initialised Ray is used as it is): a
    :class:`~litehit_service.offline.pool.TracePool` running :func:`run_task`. A context
    manager; :meth:`close` ends the workers (an error in the block kills forked workers
    at once)."""

    def __init__(
        self,
        traces: dict[str, LoadedTrace | TraceSource],
        *,
        workers: int,
        executor: str = "local",
        ray_address: str | None = None,
    ) -> None:
        self._pool = TracePool(traces, workers=workers, executor=executor,
                               ray_address=ray_address)  # fmt: skip
        self.traces = traces
        self.workers = workers
        self.executor = executor

    def submit(self, task: Task) -> Future:
        """Start ``task``; its future (already done when the pool runs inline)."""
        return self._pool.submit(run_task, task, task.trace)

    def close(self) -> None:
        """End the workers (pending tasks cancelled) and a Ray this pool started."""
        self._pool.close()

    def __enter__(self) -> TradeoffPool:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._pool.__exit__(exc_type, *exc)  # an error kills the workers at once
