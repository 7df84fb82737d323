"""Trace lines parsed for the offline replay, in batches and in input order.

:func:`column_batches` reads a trace by columns (standard JSONL or Parquet, Mooncake);
:func:`inline_batches` parses in the calling process; :func:`pool_batches` in worker
processes (``workers x`` :data:`BATCH_LINES` lines in flight, results consumed in input
order, the workers deaf to SIGINT/SIGTERM so the replaying process decides when they
stop); :func:`lmcache_batches` reads a whole LMCache log at once. Each :data:`Batch` is
``(events, the error raised after them or None, bytes read for the progress bar)``: a
bad line ends the stream after the events before it. Cost O(trace bytes).
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from litehit_core import LocatedError
from litehit_service.litehit.config import ReplayConfig
from litehit_service.offline.pool import stop_signals_held, worker_signals
from litehit_service.traces.readers import open_trace, parse_lines, read_lmcache, trace_lines

if TYPE_CHECKING:
    from litehit_service.traces.readers.columns import ColumnSource

__all__ = [
    "BATCH_LINES",
    "INLINE_BATCH",
    "Batch",
    "Event",
    "column_batches",
    "inline_batches",
    "lmcache_batches",
    "pool_batches",
]

BATCH_LINES = 256
"""Lines per parse batch (one worker task); the pipeline reads ``workers x`` this at once."""
INLINE_BATCH = 4096
"""Lines per batch when parsing in the calling process (bounds memory, paces the bar)."""

Event = Sequence[Any]
"""(line_no, kind, instance_id, trace_id, timestamp_ns, keys, input_len): a TraceEvent or
a plain tuple with the same fields (what worker processes send back)."""
Batch = tuple[list[Event], "LocatedError | None", int]
"""(events, the error raised after them or None, bytes read for the progress bar)."""


def line_batches(
    fh: Any, path: str, size: int, max_line_bytes: int
) -> Iterator[tuple[int, list[bytes], LocatedError | None]]:
    """``(first line number, up to size lines, error)`` in file order; the error (a line
    over ``max_line_bytes``) comes with the lines before it, in the last batch. O(bytes)."""
    chunks = trace_lines(fh, path, max_line_bytes)
    pending: list[bytes] = []
    first = 1
    while True:
        error = None
        while len(pending) < size:
            try:
                pending += next(chunks)
            except StopIteration:
                break
            except LocatedError as exc:
                error = exc
                break
        if not pending and error is None:
            return
        batch, pending = pending[:size], pending[size:]  # an error leaves pending empty
        yield first, batch, error
        if error is not None:
            return
        first += len(batch)


def inline_batches(
    path: str, fmt: str, block_size: int, instance_id: str, sizes: bool, max_line_bytes: int
) -> Iterator[Batch]:
    """Parse in this process, :data:`INLINE_BATCH` lines at a time."""
    with open_trace(path) as fh:
        for first, lines, read_error in line_batches(fh, path, INLINE_BATCH, max_line_bytes):
            events, error = parse_lines(lines, first, path, fmt, block_size, instance_id)
            error = error or read_error
            yield events, error, sum(map(len, lines)) if sizes else 0
            if error is not None:
                return


def pool_batches(
    path: str,
    fmt: str,
    block_size: int,
    instance_id: str,
    sizes: bool,
    workers: int,
    max_line_bytes: int,
) -> Iterator[Batch]:
    """Parse in ``workers`` processes, :data:`BATCH_LINES` lines per task, in input order.

    Up to two rounds of ``workers x BATCH_LINES`` lines are in flight ahead of the consumer;
    a line over ``max_line_bytes`` ends the reading, its error following its batch's own.
    The workers ignore SIGINT and SIGTERM (:func:`worker_signals`): this process decides
    when they stop, after its own cleanup.
    """
    # fork: no re-import of __main__ (console scripts, python -m), millisecond start-up; the
    # children only parse text, so the parent's other threads (if any) do not matter there.
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    # (parse task, bytes for the bar, the read error after its lines or None)
    pending: deque[
        tuple[Future[tuple[list[Event], LocatedError | None]], int, LocatedError | None]
    ] = deque()
    pool_executor = ProcessPoolExecutor(workers, mp_context=ctx, initializer=worker_signals)
    with open_trace(path) as fh, pool_executor as pool:
        source = line_batches(fh, path, BATCH_LINES, max_line_bytes)
        done = False

        def submit_round() -> None:
            nonlocal done
            for _ in range(workers):
                item = next(source, None)
                if item is None:
                    done = True
                    return
                first, lines, read_error = item
                with stop_signals_held():  # a submit may fork the workers
                    fut = pool.submit(
                        parse_lines, lines, first, path, fmt, block_size, instance_id, True
                    )
                pending.append((fut, sum(map(len, lines)) if sizes else 0, read_error))
                if read_error is not None:
                    done = True
                    return

        try:
            submit_round()
            if not done:
                submit_round()
            while pending:
                fut, size, read_error = pending.popleft()
                events, error = fut.result()
                error = error or read_error
                if not done and len(pending) < 2 * workers:
                    submit_round()
                yield events, error, size
                if error is not None:
                    return
        finally:
            for fut, _, _ in pending:
                fut.cancel()


def column_batches(source: ColumnSource, path: str, sizes: bool) -> Iterator[Batch]:
    """A trace by columns (the reader's :class:`~litehit_service.traces.readers.columns.
    ColumnSource`: standard JSONL, compressed or Parquet; Mooncake JSONL): each chunk whose
    columns keep the format's rules becomes its events without a Python parse per line;
    any other goes through the format's line parser, which names its bad line. The events
    are those :func:`inline_batches` gives, field for field (a record without a
    ``trace_id`` column gets its line number). O(bytes) in pyarrow and numpy,
    ~0.2 us a record and ~20 ns a key in Python."""
    from litehit_service.traces.readers.jsonl import parse_numbered
    from litehit_service.traces.readers.records import EVENT_KINDS

    for chunk in source.chunks:
        cols = source.columns(chunk.table) if chunk.table is not None else None
        if cols is None:
            events, error = parse_numbered(chunk.lines(), chunk.first_line, path,
                                           source.parse, True)  # fmt: skip
            yield events, error, chunk.done if sizes else 0
            if error is not None:
                return
            continue
        n = chunk.table.num_rows
        first = chunk.first_line
        lines = range(first, first + n)
        trace = chunk.table.column("trace_id") if "trace_id" in chunk.table.column_names else None
        if trace is None:
            ids = list(map(str, lines))
        else:
            ids = trace.to_pylist()
            ids = [str(line) if tid is None else tid for line, tid in zip(lines, ids, strict=True)]
        flat = cols.keys.tolist()
        bounds = cols.offsets.tolist()
        keys = [flat[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        kinds = [EVENT_KINDS[k] for k in cols.kinds.tolist()]
        events = list(zip(lines, kinds, cols.instances.to_pylist(), ids, cols.times.tolist(),
                          keys, cols.inputs.tolist(), strict=True))  # fmt: skip
        yield events, None, chunk.done if sizes else 0


def lmcache_batches(path: str, config: ReplayConfig, max_line_bytes: int) -> Iterator[Batch]:
    """The whole LMCache log (sorted by timestamp) as one batch; chunk sizes checked."""
    # Block bytes come from the config's location specs, so the logs' dtypes/shapes are
    # not needed: a placeholder size skips reading them (an unknown dtype is no error).
    trace = read_lmcache(path, kv_bytes_per_chunk=1, max_line_bytes=max_line_bytes)
    for model, info in sorted(trace.models.items()):
        if info.chunk_size != config.block_size:
            raise LocatedError(
                path,
                0,
                f"model {model!r} has chunk_size {info.chunk_size} but the config's trace "
                f"block_size is {config.block_size}",
            )
    yield list(trace.events), None, 0
