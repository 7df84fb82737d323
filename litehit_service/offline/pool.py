"""Where offline work over a decoded trace runs: this process, forked processes or Ray tasks.

One helper for every command that fans work out (``litehit optimize --max-workers``,
``litehit tradeoff``, ``litehit replay --executor ray``). A task is a module-level
function ``fn(task, trace)`` and a small, picklable ``task``; the trace (any object, e.g. a
:class:`~litehit_service.optimizer.optimize.trace.LoadedTrace`) is decoded once by the
caller and reaches the workers without being pickled per task:

- ``local`` with one worker runs each task at once in this process;
- ``local`` with more forks that many processes *after* the traces are in memory, so each
  inherits them (copy on write); the workers ignore SIGINT/SIGTERM
  (:func:`worker_signals`, as the trace parsers' do), this process decides when they stop;
- ``ray`` puts each trace into Ray's object store once (:func:`start_ray`: a local Ray
  unless an address is given; an initialised Ray is used as it is) and passes its
  reference to every task (arrays arrive read-only: a task that needs writable ones
  copies them).

When the block of a pool ends with an exception (an error, Ctrl-C, SIGTERM), its forked
workers are killed at once rather than waited for (:meth:`TracePool.abort`). Workers may
report progress with :func:`report_progress` (forked workers: a counter shared
with this process, read by :meth:`TracePool.reported`; inline: counted here; Ray tasks
report nothing live). Every executor hands back :class:`concurrent.futures.Future`
objects. Cost: one fork per worker (or one ``ray.put`` per trace); then the tasks'.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

__all__ = [
    "EXECUTORS",
    "RAY_MISSING",
    "TracePool",
    "default_workers",
    "report_progress",
    "start_ray",
    "stop_signals_held",
    "worker_signals",
    "worker_trace",
]

EXECUTORS = ("local", "ray")
"""What ``--executor`` accepts."""
RAY_MISSING = "--executor ray needs Ray: pip install '.[ray]' in the clone (or pip install ray)"
"""The message (a usage error) when Ray is asked for and not installed."""

_STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def worker_signals() -> None:
    """In a worker process (a pool's or the trace parsers'): ignore SIGINT and SIGTERM. A
    terminal's Ctrl-C or a kill of the process group reaches the workers too; the parent
    turns the signal into an exception, removes its temporary and shuts the pool down,
    which ends them. The signals
    were held across the fork (:func:`stop_signals_held`), so none can run the parent's
    handlers here before this; held ones are dropped, being ignored by then."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM (blocked, delivered when the block ends) in this thread, so
    a worker forked meanwhile starts with them blocked. Two system calls."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


_TRACES: dict[str, Any] = {}
"""In a forked worker: the traces its parent held (inherited, never pickled)."""
_COUNTER: list[Any] = []
"""In a forked worker: the shared progress counter (``multiprocessing.Value``), if any."""
_INLINE = [0]
"""In this process: progress reported by tasks run inline."""


def default_workers() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


_RAY_START_ATTEMPTS = 2
"""Tries of a local Ray start (a loaded machine can time out the first)."""


def start_ray(address: str | None) -> tuple[Any, bool]:
    """The ``ray`` module, initialised: connected to ``address`` or, without one, a local
    Ray started here; an already initialised Ray is used as it is. Returns ``(ray,
    started)`` -- ``started``: this call started it (the caller shuts it down).
    RuntimeError(:data:`RAY_MISSING`) when Ray is absent. Seconds for a local start."""
    try:
        import ray
    except ImportError:
        raise RuntimeError(RAY_MISSING) from None
    if ray.is_initialized():
        return ray, False
    for attempt in range(_RAY_START_ATTEMPTS):
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)  # fmt: skip
            break
        except Exception:
            # a local start on a loaded machine can time out waiting for its raylet
            # ("The current node timed out during startup"): clean up, try once more
            ray.shutdown()
            if attempt + 1 == _RAY_START_ATTEMPTS or address is not None:
                raise
    return ray, True


def worker_trace(key: str) -> Any:
    """In a forked worker: the inherited trace ``key``."""
    return _TRACES[key]


def report_progress(n: int) -> None:
    """From a task: ``n`` more units done (records, ...). A no-op in a Ray task. O(1)
    (forked workers: one locked add on shared memory)."""
    if _COUNTER:
        with _COUNTER[0].get_lock():
            _COUNTER[0].value += n
    else:
        _INLINE[0] += n


def _init_worker(traces: dict[str, Any], counter: Any) -> None:
    worker_signals()
    _TRACES.update(traces)
    _COUNTER[:] = [counter]


def _in_worker(fn: Callable[[Any, Any], Any], task: Any, key: str) -> Any:
    return fn(task, _TRACES[key])


def _in_ray(fn: Callable[[Any, Any], Any], task: Any, trace: Any) -> Any:
    _COUNTER.clear()
    _INLINE[0] = 0
    return fn(task, trace)


class TracePool:
    """Runs ``fn(task, trace)`` over ``traces`` (key -> decoded trace) with ``workers`` at
    once on ``executor`` (``"local"`` or ``"ray"``; Ray at ``ray_address``, else a local
    Ray started for the pool and stopped by :meth:`close`; an initialised Ray is used as it
    is). Ray runs as many tasks at once as its CPUs allow (``workers`` does not cap it). A
    context manager; :meth:`close` ends the workers."""

    def __init__(
        self,
        traces: dict[str, Any],
        *,
        workers: int,
        executor: str = "local",
        ray_address: str | None = None,
    ) -> None:
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.traces = traces
        self.workers = workers
        self.executor = executor
        self._procs: ProcessPoolExecutor | None = None
        self._counter: Any = None
        self._inline_start = _INLINE[0]
        self._ray: Any = None
        self._refs: dict[str, Any] = {}
        self._remote: Any = None
        self._ray_started = False
        if executor == "ray":
            self._ray, self._ray_started = start_ray(ray_address)
            self._refs = {key: self._ray.put(trace) for key, trace in traces.items()}
            self._remote = self._ray.remote(_in_ray)
        elif workers > 1:
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._counter = ctx.Value("q", 0)
            self._procs = ProcessPoolExecutor(
                workers, mp_context=ctx, initializer=_init_worker,
                initargs=(traces, self._counter),
            )  # fmt: skip

    @property
    def reports_progress(self) -> bool:
        """Whether :meth:`reported` follows the tasks live (not under Ray)."""
        return self._ray is None

    def reported(self) -> int:
        """Units the tasks reported with :func:`report_progress` so far."""
        if self._counter is not None:
            return int(self._counter.value)
        return _INLINE[0] - self._inline_start

    def submit(self, fn: Callable[[Any, Any], Any], task: Any, key: str) -> Future:
        """Start ``fn(task, traces[key])`` (``fn`` module-level: it is pickled by name);
        its future (already done when the pool runs inline)."""
        if self._ray is not None:
            return self._remote.remote(fn, task, self._refs[key]).future()
        if self._procs is not None:
            with stop_signals_held():  # the first submit forks the workers
                return self._procs.submit(_in_worker, fn, task, key)
        fut: Future = Future()
        try:
            fut.set_result(fn(task, self.traces[key]))
        except Exception as exc:
            fut.set_exception(exc)
        return fut

    def abort(self) -> None:
        """Kill the forked workers now (their tasks are lost), then :meth:`close`. For a
        run that failed or was interrupted: nothing waits for a long task to finish.

        Every worker the executor forked is killed, whether or not it has started a
        task, and the executor is not waited for: a worker killed while it held the result
        queue's lock would leave another worker blocked on that lock for ever, and a
        waiting shutdown with it."""
        if self._procs is not None:
            workers = list(getattr(self._procs, "_processes", {}).values())
            for worker in workers:
                worker.kill()
            self._procs.shutdown(wait=False, cancel_futures=True)
            for worker in workers:
                worker.join(timeout=5)
            self._procs = None
        self.close()

    def close(self) -> None:
        """End the workers (pending tasks cancelled) and a Ray this pool started."""
        if self._procs is not None:
            self._procs.shutdown(wait=True, cancel_futures=True)
            self._procs = None
        if self._ray is not None:
            self._refs.clear()
            if self._ray_started:
                self._ray.shutdown()
            self._ray = None

    def __enter__(self) -> TracePool:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
