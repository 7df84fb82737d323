"""A trade-off's passes streamed: each task reads the trace in batches itself (issue 34).

When the trace is large (``litehit tradeoff`` streams at
:data:`~litehit_service.offline.outputs.PLAN_BYTES` of JSONL text or more, local workers
only) the caller decodes nothing: the pool's "trace" is a :class:`TraceSource` (where the
trace is and how to read it, a few hundred bytes every forked worker inherits), and each
task opens the trace's batches in its worker (:func:`~..optimize.trace.open_trace_batches`
under the task's own configuration), puts them in time order through the reorder window
and keeps only what its answer needs:

- :func:`stream_point` (the warm-up, every point, every bisection replay): a
  :class:`~litehit_core.policy_replay.Replayer` fed batch by batch
  (:func:`~..optimize.stream.replay_batches`), per instance the totals of its reads
  (:class:`~..optimize.rows.RowTotals`, no rows) -> the same :class:`~.points.Point` as the
  decoded replay. Memory: the cache's arrays, the pending writes, the window, one batch.
- :func:`stream_curves` (LiteHit's exact curves for one touch order): every instance's
  engine fed its reads as they come (the decoded pass runs the instances one after another;
  the engines are independent, so the curves are the same). Memory: the engines (what the
  exact model caches at every capacity) and one batch.
- :func:`stream_facts` (what spec §7b needs of the whole trace, one pass in file order under
  the decoding configuration, :func:`~.sweep.loading_config`): per instance whether every
  record is a ``request`` and whether any key is marked local, whether any TTL appears, and
  whether every key names its prefix (:class:`~litehit_core.prefix_hash.PrefixCheck`:
  each distinct key once with its parent, 17 bytes a distinct key -- about what the cache
  at infinite quota holds). Run only when some swept configuration passes §7b's
  configuration checks (:func:`facts_needed`).

A bad record raises its located error in the task that reads it (every task reads the
whole trace, so the first result the sweep waits for carries it); nothing is written.
Cost per task: the decoded task's plus reading the trace (pyarrow; ~0.3 s per 10 M keys
from Parquet).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from litehit_core.curve import InstanceCurve
from litehit_core.engine import EngineSpec, create_engine, touch_order_model
from litehit_core.policy_replay import Replayer
from litehit_core.policy_replay.loop import REQUEST, WRITE
from litehit_core.prefix_hash import PrefixCheck
from litehit_service.optimizer.optimize.columns import Routing, TraceBatches
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.optimizer.optimize.exact import config_qualifies
from litehit_service.optimizer.optimize.rows import RowTotals, instance_rows
from litehit_service.optimizer.optimize.run import OptimizeResult, build_setup, instance_results
from litehit_service.optimizer.optimize.stream import batch_records, replay_batches, time_ordered
from litehit_service.optimizer.optimize.trace import open_trace_batches
from litehit_service.optimizer.tradeoff.points import Point, point_from_result

__all__ = [
    "TraceFacts",
    "TraceSource",
    "facts_needed",
    "stream_curves",
    "stream_facts",
    "stream_point",
]


class TraceSource(NamedTuple):
    """Where a streamed trade-off's trace is and how every task reads it: the options of
    :func:`~..optimize.trace.open_trace_batches` (``trace_format``, ``instance``,
    ``max_line_bytes``; the path is each configuration's ``trace_file_path``) and the
    reorder window in ns."""

    path: str
    trace_format: str | None
    instance: str | None
    max_line_bytes: int
    window_ns: int

    def open(self, config: OptimizeConfig) -> tuple[Routing, TraceBatches]:
        """The trace's batches under ``config`` (file order) and their routing."""
        routing, batches, _ = open_trace_batches(
            config, trace_format=self.trace_format, instance=self.instance,
            max_line_bytes=self.max_line_bytes,
        )  # fmt: skip
        return routing, batches


@dataclass(frozen=True, slots=True)
class TraceFacts:
    """What spec §7b needs of the whole trace (module docstring), per instance in
    configuration order: ``requests_only`` (every record a ``request``), ``masked`` (a key
    marked local); ``has_ttls``: a TTL under the decoding configuration;
    ``prefix_determined``: every key follows one parent (or always starts a request)."""

    requests_only: tuple[bool, ...]
    masked: tuple[bool, ...]
    has_ttls: bool
    prefix_determined: bool


def stream_point(
    label: str, capacity_bytes: int, config: OptimizeConfig, source: TraceSource
) -> Point:
    """One policy replay of the trace under ``config``, streamed (module docstring):
    the :class:`Point` ``label`` at ``capacity_bytes`` (-1 = infinite). O(keys) + the
    replay's evictions; memory follows the cache."""
    routing, batches = source.open(config)
    members = [(g, i) for g in config.groups for i in g.instances]
    totals = [RowTotals(inst.block_size) for _, inst in members]
    replayer = Replayer(build_setup(config))
    for fed in replay_batches(replayer, config, routing, batches, source.window_ns):
        if not len(fed.rows):
            continue
        for index, ((group, inst), total) in enumerate(zip(members, totals, strict=True)):
            mine = instance_rows(fed.records, fed.batch.inputs, fed.rows, index,
                                 inst.block_size, len(group.tiers))  # fmt: skip
            if mine.reads:
                total.add(mine)
    result = replayer.finish()
    gathered = OptimizeResult(instance_results(config, result, totals), 0.0, result.memory_bytes)
    return point_from_result(label, capacity_bytes, config, gathered)


def stream_curves(
    config: OptimizeConfig, source: TraceSource, order: str
) -> tuple[InstanceCurve, ...]:
    """:func:`~.exact_curve.litehit_curves` streamed: one exact curve per instance
    (configuration order) for touch ``order``, every instance's engine fed its reads in
    time order. O(keys of the reads)."""
    routing, batches = source.open(config)
    spec = EngineSpec(model=touch_order_model(order))
    engines = [create_engine(spec) for _ in config.instances]
    curves = [
        InstanceCurve(inst.instance_id, inst.block_size, inst.bytes_per_block, model=spec.model)
        for inst in config.instances
    ]
    reads = [0] * len(curves)
    tokens = [0] * len(curves)
    for batch in time_ordered(routing, batches, source.window_ns):
        records = batch_records(batch)
        off, keys, times, insts = records.key_off, records.keys, records.times, records.insts
        inputs = batch.inputs
        for r in np.flatnonzero(batch.kinds != WRITE).tolist():
            i = int(insts[r])
            fact = engines[i].process_request(keys[off[r] : off[r + 1]].tolist(), int(times[r]))
            curves[i].add_fact_curve(fact.hit_curve)
            reads[i] += 1
            tokens[i] += int(inputs[r])
    for curve, n, t in zip(curves, reads, tokens, strict=True):
        curve.requests, curve.input_tokens = n, t
    return tuple(curves)


def stream_facts(config: OptimizeConfig, source: TraceSource) -> TraceFacts:
    """:class:`TraceFacts` of the trace read under ``config`` (the decoding configuration,
    whose expiring instances' TTLs count), one pass in file order. O(keys log keys);
    memory: 17 bytes a distinct key (:class:`~litehit_core.prefix_hash.PrefixCheck`)."""
    routing, batches = source.open(config)
    n = len(config.instances)
    other = np.zeros(n, bool)
    masked = np.zeros(n, bool)
    prefix = PrefixCheck()
    for batch, _ in batches.batches:
        records = batch_records(batch)
        other[np.unique(batch.insts[batch.kinds != REQUEST])] = True
        if batch.local.any():
            key_inst = np.repeat(batch.insts, batch.lens)
            masked[np.unique(key_inst[batch.local != 0])] = True
        prefix.add(records.keys, records.key_off)
    return TraceFacts(
        requests_only=tuple(not v for v in other.tolist()),
        masked=tuple(masked.tolist()),
        has_ttls=bool(routing.ttl_values),
        prefix_determined=prefix.finish(),
    )


def facts_needed(configs: Sequence[OptimizeConfig]) -> bool:
    """Whether any of ``configs`` passes spec §7b's configuration checks for every
    instance (trace without TTLs assumed): only then does the trace's :class:`TraceFacts`
    decide anything. O(instances)."""
    return any(
        all(
            config_qualifies(cfg, gi, ii, False)
            for gi, g in enumerate(cfg.groups)
            for ii in range(len(g.instances))
        )
        for cfg in configs
    )
