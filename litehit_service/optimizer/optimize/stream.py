"""``litehit optimize`` streamed: batches in, the replay's state and one batch held.

:func:`stream_optimize` reads the trace batch by batch (:func:`~.trace.open_trace_batches`),
puts the records in time order within a bounded reorder window (:class:`Reorder`), feeds
them to one :class:`~litehit_core.policy_replay.Replayer` and appends each batch's rows to
the instances' CSVs as they come (:func:`~.rows.csv_lines` continues the running sums).
Memory follows the cache -- the replay's arrays, the writes still pending, the records of
the reorder window and one batch -- not the trace. The pictures (``--draw-chart``,
``--aggregate-window-s``) need every read's row: only then are the rows kept (~100 bytes a
read per instance).

The CSVs are written to temporaries beside their final paths and renamed at the end, all
together: a bad record late in the trace, an interrupt or a full disk leave no output.
Records are checked batch by batch, so such an error comes after the replay of the
batches before it (the run's time, not its outputs, is lost).

Spec §2 sorts the records stably by time before the replay; a stream can sort only what
it holds: records are held until the trace has moved ``window_ns`` past them, then
released in time order (ties in file order), so any trace whose records are at most the
window out of order replays exactly as sorted; a record further out of order is refused,
naming it and the two ways out (a wider ``--reorder-window-ms``, or the trace sorted
first).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from litehit_core import LocatedError
from litehit_core.policy_replay import Replayer, ReplayRecords
from litehit_service.optimizer.optimize.columns import Batch, Routing, TraceBatches
from litehit_service.optimizer.optimize.config import (
    OptimizeConfig,
)
from litehit_service.optimizer.optimize.outputs import (
    picture_names,
    published,
    table_name,
    write_pictures,
)
from litehit_service.optimizer.optimize.rows import (
    InstanceRows,
    RowTotals,
    Running,
    concat_rows,
    instance_rows,
    no_rows,
)
from litehit_service.optimizer.optimize.run import (
    OptimizeResult,
    build_setup,
    check_delay,
    instance_results,
)
from litehit_service.optimizer.optimize.tables import TABLES, CsvTable, ParquetTable

__all__ = [
    "HELD_KEYS",
    "Fed",
    "Reorder",
    "batch_records",
    "replay_batches",
    "stream_optimize",
    "time_ordered",
]

HELD_KEYS = 1 << 20
"""The most keys (plus records) the reorder window holds: ~10 MB. A trace so dense that
the window's span of time holds more releases its oldest records early (the window
narrows, and an error for a record out of order says so)."""


class Reorder:
    """Batches in file order -> batches in time order, stable (module docstring): holds
    the records within ``window_ns`` of the latest time seen, at most :data:`HELD_KEYS`
    keys and records. A record earlier than one already released is a LocatedError naming
    its line. O(records log batch)."""

    def __init__(self, window_ns: int, path: str, held_keys: int = HELD_KEYS) -> None:
        self.window_ns = window_ns
        self.path = path
        self.held_keys = held_keys
        self.held: Batch | None = None
        self.released = np.iinfo(np.int64).min  # the latest time released
        self.latest = np.iinfo(np.int64).min // 2  # the latest time seen (no overflow below)

    def push(self, batch: Batch) -> Batch:
        """Take ``batch``; give the records now due, in time order."""
        times = batch.times
        if len(times):
            before = np.maximum.accumulate(np.r_[self.latest, times[:-1]])  # latest before each
            late = (times < before - self.window_ns) | (times < self.released)
            if late.any():
                raise self._late(batch, int(np.argmax(late)))
            self.latest = max(self.latest, int(times.max()))
        both = batch if self.held is None else _concat(self.held, batch)
        held_times = both.times
        if bool(np.all(held_times[1:] >= held_times[:-1])):  # already in order: no sort
            order = np.arange(len(held_times))
        else:
            order = np.argsort(held_times, kind="stable")
        cut = int(np.searchsorted(held_times[order], self.latest - self.window_ns, "right"))
        weight = both.lens[order] + 1
        after = np.cumsum(weight[::-1])[::-1]  # keys and records held from each index on
        bounded = int(np.searchsorted(-after, -self.held_keys, "left"))  # first after <= cap
        cut = max(cut, bounded)
        out, self.held = _take(both, order[:cut]), _take(both, order[cut:])
        if cut:
            self.released = int(out.times[-1])
        return out

    def _late(self, batch: Batch, i: int) -> LocatedError:
        t = int(batch.times[i])
        latest = max(self.latest, int(batch.times[:i].max(initial=self.latest)))
        if t >= latest - self.window_ns:  # within the window, but after the bound released
            why = (f"before a record already replayed (at {self.released} ns): the window "
                   f"holds at most {self.held_keys:,} keys and records")  # fmt: skip
        else:
            why = f"before an earlier line's {latest}"
        return LocatedError(
            self.path,
            int(batch.lines[i]),
            f"timestamp_ns {t} is more than the reorder window ({self.window_ns / 1e6:g} ms) "
            f"{why}: the trace is out of time order; widen --reorder-window-ms, or sort the "
            "trace by timestamp_ns first",
            "timestamp_ns",
        )

    def finish(self) -> Batch | None:
        """The records still held, in time order."""
        held, self.held = self.held, None
        if held is None:
            return None
        return _take(held, np.argsort(held.times, kind="stable"))


def _concat(a: Batch, b: Batch) -> Batch:
    return Batch(*(np.concatenate(pair) for pair in zip(a, b, strict=True)))


def _take(batch: Batch, order: np.ndarray) -> Batch:
    """The records ``order`` of ``batch`` (their keys and masks with them); a run of
    consecutive records (a sorted trace's case) is a slice, copying nothing."""
    n = len(batch.kinds)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(batch.lens, out=off[1:])
    if not len(order) or (
        int(order[-1]) - int(order[0]) == len(order) - 1 and bool(np.all(np.diff(order) == 1))
    ):
        lo = int(order[0]) if len(order) else 0
        hi = lo + len(order)
        keys = slice(int(off[lo]), int(off[hi]))
        return Batch(
            batch.kinds[lo:hi], batch.insts[lo:hi], batch.times[lo:hi], batch.lens[lo:hi],
            batch.inputs[lo:hi], batch.keys[keys], batch.local[keys], batch.buckets[lo:hi],
            batch.lines[lo:hi],
        )  # fmt: skip
    lens = batch.lens[order]
    new_off = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lens, out=new_off[1:])
    take = np.repeat(off[:-1][order] - new_off[:-1], lens) + np.arange(
        int(new_off[-1]), dtype=np.int64
    )
    return Batch(
        batch.kinds[order], batch.insts[order], batch.times[order], lens,
        batch.inputs[order], batch.keys[take], batch.local[take], batch.buckets[order],
        batch.lines[order],
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Lane:
    """One instance's output while the stream runs."""

    table: CsvTable | ParquetTable
    running: Running
    totals: RowTotals
    kept: list[InstanceRows]
    tier_names: tuple[str, ...]


def stream_optimize(
    config: OptimizeConfig,
    routing: Routing,
    batches: TraceBatches,
    out_dir: str,
    *,
    window_ns: int,
    draw_chart: bool = False,
    aggregate_window_ns: int | None = None,
    progress: Callable[[int], object] | None = None,
    output_format: str = "csv",
    fast_chart: bool = False,
) -> OptimizeResult:
    """Replay the ``batches`` under ``config`` and write the outputs into ``out_dir``, all
    or nothing (module docstring); ``progress(n)`` hears the units each batch consumed;
    ``output_format``: the per-read tables as CSV or Parquet (:data:`TABLES`). The
    result's instances carry :class:`RowTotals` (or, with pictures, every row)."""
    table_type = TABLES[output_format]
    names = [table_name(i.instance_id, output_format) for i in config.instances]
    pictures = draw_chart or aggregate_window_ns is not None
    tiered = any(g.tiers for g in config.groups)
    figures = picture_names(tiered, draw_chart, aggregate_window_ns)
    with published(out_dir, names, figures) as (table_tmps, picture_tmps):
        lanes = []
        try:
            members = [(group, inst) for group in config.groups for inst in group.instances]
            for (group, inst), tmp in zip(members, table_tmps, strict=True):
                tier_names = tuple(t.name for t in group.tiers)
                table = table_type(tmp, tier_names)
                lanes.append(_Lane(table, Running(), RowTotals(inst.block_size), [], tier_names))
            start = time.perf_counter()
            replayer, memory = _replay(config, routing, batches, lanes, window_ns, pictures,
                                       progress)  # fmt: skip
            seconds = time.perf_counter() - start
        finally:
            for lane in lanes:
                lane.table.close()
        result = _result(config, replayer, lanes, seconds, memory, pictures)
        write_pictures(result, picture_tmps, draw_chart=draw_chart,
                       aggregate_window_ns=aggregate_window_ns, fast_chart=fast_chart)  # fmt: skip
    return result


def _replay(
    config: OptimizeConfig,
    routing: Routing,
    batches: TraceBatches,
    lanes: list[_Lane],
    window_ns: int,
    keep: bool,
    progress: Callable[[int], object] | None,
) -> tuple[Replayer, int]:
    replayer = Replayer(build_setup(config))
    memory = 0
    for fed in replay_batches(replayer, config, routing, batches, window_ns):
        for index, lane in enumerate(lanes):
            mine = instance_rows(fed.records, fed.batch.inputs, fed.rows, index,
                                 lane.totals.block_size, len(lane.tier_names))  # fmt: skip
            if not mine.reads:
                continue
            lane.table.write(mine, lane.running)
            lane.totals.add(mine)
            if keep:
                lane.kept.append(mine)
        memory = max(memory, fed.held)
        if progress is not None and fed.done:
            progress(fed.done)
    return replayer, memory


class Fed(NamedTuple):
    """One batch replayed by :func:`replay_batches`: the ``batch`` (in time order), its
    ``records`` as the replay took them, the ``rows`` of its reads, the input units it
    consumed (``done``, for progress) and the bytes of records ``held`` besides the cache
    (the replayer's carry, the reorder window, this batch)."""

    batch: Batch
    records: ReplayRecords
    rows: np.ndarray
    done: int
    held: int


def replay_batches(
    replayer: Replayer,
    config: OptimizeConfig,
    routing: Routing,
    batches: TraceBatches,
    window_ns: int,
) -> Iterator[Fed]:
    """Feed ``batches`` through a reorder window of ``window_ns`` (:class:`Reorder`) into
    ``replayer`` (its write delay checked against ``config`` per batch), one :class:`Fed`
    per batch replayed: what every streamed command (optimize, the analyses) loops over.
    O(keys) + the replay."""
    reorder = Reorder(window_ns, routing.path)
    for batch, done in _then_finish(batches.batches, reorder):
        check_delay(config, batch.times)
        records = batch_records(batch)
        rows = replayer.feed(records, ttl_values=routing.ttl_values)
        yield Fed(batch, records, rows, done, _held(replayer, reorder, batch))


def time_ordered(routing: Routing, batches: TraceBatches, window_ns: int) -> Iterator[Batch]:
    """The trace's records in time order (ties in file order) through a reorder window of
    ``window_ns`` (:class:`Reorder`; a record further out of order raises naming it),
    batch by batch: for a pass that reads the records without a policy replay (LiteHit's
    exact curves). O(keys)."""
    for batch, _ in _then_finish(batches.batches, Reorder(window_ns, routing.path)):
        yield batch


def _then_finish(
    batches: Iterator[tuple[Batch, int]], reorder: Reorder
) -> Iterator[tuple[Batch, int]]:
    """The reorder window's output for each batch read, then what it still holds (as
    :func:`time_ordered`)."""
    for batch, done in batches:
        yield reorder.push(batch), done
    rest = reorder.finish()
    if rest is not None:
        yield rest, 0


def batch_records(batch: Batch) -> ReplayRecords:
    """``batch`` as the replay's records (its keys' offsets computed). O(records)."""
    off = np.zeros(len(batch.kinds) + 1, dtype=np.int64)
    np.cumsum(batch.lens, out=off[1:])
    return ReplayRecords(
        kinds=batch.kinds, insts=batch.insts, times=batch.times, key_off=off,
        keys=batch.keys, local=batch.local, buckets=batch.buckets,
    )  # fmt: skip


def _held(replayer: Replayer, reorder: Reorder, batch: Batch) -> int:
    """Bytes of records held besides the cache (the carry, the window, this batch)."""
    held = sum(a.nbytes for a in replayer.carry)
    if reorder.held is not None:
        held += sum(a.nbytes for a in reorder.held)
    return held + sum(a.nbytes for a in batch)


def _result(
    config: OptimizeConfig,
    replayer: Replayer,
    lanes: list[_Lane],
    seconds: float,
    held: int,
    keep: bool,
) -> OptimizeResult:
    result = replayer.finish()
    rows: list[InstanceRows | RowTotals] = [lane.totals for lane in lanes]
    if keep:
        rows = [
            concat_rows(lane.kept) if lane.kept else no_rows(lane.totals.block_size,
                                                             len(lane.tier_names))
            for lane in lanes
        ]  # fmt: skip
    return OptimizeResult(
        instance_results(config, result, rows), seconds, result.memory_bytes + held
    )
