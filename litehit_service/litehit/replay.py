"""Offline replay: a trace file through the online manager, into a facts ledger.

:func:`run_replay` drives the SAME :class:`~litehit_service.manager.OnlineOptimizerManager`
as ``litehit serve`` (in process: no network, no registry), so offline facts and online
answers cannot disagree. For every trace event, in input order:

- ``write`` events are skipped (a get already writes its blocks back);
- routing: to ``override_instance_id`` if set, else to every instance in config order if
  ``fanout_all_instances``, else to the event's ``instance_id`` (which must be configured);
- ``manager.record_query(instance, keys, input_token_len, timestamp_ns=trace timestamp)``
  replays the request under :meth:`QueryPolicy.offline` (the same rules as online queries,
  with the differences that policy names: the trace timestamp is "now", so TTL is
  deterministic; an instance's timestamps must not go backwards; keys are coarsened from
  the config's ``block_size`` to the instance's; no key limit);
- one facts row per (request, instance), in input order, goes to
  ``<output_result_path>/litehit_facts.csv`` (written as ``litehit_facts.csv.<pid>.tmp``,
  renamed at the end; see :mod:`litehit_core.temporaries`).

All or nothing: the first bad line (malformed, longer than ``max_line_bytes``, backwards
timestamp, unknown instance, length rule) or a trace without requests raises
:class:`LocatedError` (``path:line: reason``) and publishes nothing.

A standard trace (JSONL, compressed, Parquet) is read by columns with pyarrow
(:func:`~litehit_service.litehit.parsing.column_batches`, any reader's column source with
``events_by_columns``), the line parser only for a doubtful chunk; Mooncake line by line
(its orjson line parser makes the events faster than pyarrow plus the conversion).
``pipeline_worker_count > 1`` parses lines in worker processes instead (batches of
``workers x 256`` lines, results consumed in input order); the replay itself stays serial
in the calling process, so the ledger is byte-identical to a one-worker run.
Normalisation (prefix chaining, re-blocking) stays in ``trace_query``: the manager chains
keys with the group's ``enable_prefix_hash`` itself, so keys normalised elsewhere would be
chained twice.

A sampled replay (``sample_rate`` R < 1, issue 37) reads the trace once for K seeds: one
manager per seed whose policy keeps only the normalised keys its hash keeps
(:func:`litehit_service.manager.preparation.sampled_keys`, one vectorised pass per batch
through ``record_batch`` whatever the engine), one sampled ledger per seed (every request
keeps its row and its whole ``input_token_len``); the summary's estimates are read back
from those ledgers (:class:`~litehit_service.litehit.summary.SampledEstimates`). The unit
is :func:`sampling_unit`'s: single blocks when every instance is tail-first LRU
(:data:`~litehit_core.facts.FACTS_HEADER_SAMPLED`), else whole requests by subtree below
each instance's learned trunk (:data:`~litehit_core.facts.FACTS_HEADER_SUBTREE`: each
row's sample reuse, the trunk's size and the block-sampled reuse so far).

Cost: O(trace bytes) parsing plus, per request and routed instance, one ``record_query``
(O(keys + slots)) and one formatted row (O(curve segments)); memory O(batch + engine
state). With the compact engine (``engine``: ``"compact"``, or ``"auto"`` for a trace of
:data:`AUTO_COMPACT_BYTES` or more) each parse batch goes to the manager's ``record_batch``
once per instance: the same validation per request, one compiled replay for all of them
(instances are independent, so grouping by instance changes no fact); the first failing
request in trace order is reported exactly as the one-by-one loop reports it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from litehit_core import (
    FACTS_FILENAME,
    FactLineFormat,
    FactsWriter,
    InvalidRequestError,
    LocatedError,
)
from litehit_core.engine import (
    BLOCK_SAMPLED_MODELS,
    DEFAULT_MODEL,
    LRU_ENGINES,
    auto_lru_engine,
)
from litehit_core.facts import LedgerSample
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes
from litehit_core.sampling import sample_dir
from litehit_service.config_files import raise_config_errors
from litehit_service.errors import OptimizerError
from litehit_service.litehit.config import ReplayConfig, check_config
from litehit_service.litehit.parsing import (
    BATCH_LINES,
    Batch,
    Event,
    column_batches,
    inline_batches,
    lmcache_batches,
    pool_batches,
)
from litehit_service.litehit.summary import ReplaySummary, SampledEstimates
from litehit_service.manager import BatchQueryError, OnlineOptimizerManager
from litehit_service.model import InstanceSummary
from litehit_service.offline.runtime import relaxed_gc
from litehit_service.policy import QueryPolicy
from litehit_service.traces.readers import get_reader
from litehit_service.traces.readers.compressed import container_or_none, plain_size, text_bytes
from litehit_service.traces.readers.registry import reader_of_container

__all__ = [
    "BATCH_LINES",
    "EXECUTORS",
    "ReplaySummary",
    "run_replay",
    "sample_dir",
    "sampling_unit",
]

EXECUTORS = ("local", "ray")
"""Where instance lanes run: this process, or one Ray task each."""

_Lane = tuple[str, Callable[[str, int, int, Sequence[tuple[int, int]]], str]]
"""A routing target: the instance id and its ledger line formatter."""


# --------------------------------------------------------------------------- replay


REPLAY_ENGINES = ("auto", *LRU_ENGINES)


REPLAY_CHUNK_BYTES = 1 << 20
"""JSON per batch of a replay read by columns: every record becomes Python objects here
(events, facts), so smaller batches than a policy replay's (peak RSS 390 MB vs 500 MB at
4 MiB on the Mooncake conversation x 40, the same time)."""


def lru_engine_for(engine: str, trace_path: str, sample_rate: float = 1.0) -> str:
    """The full-attention engine a replay uses: ``engine`` itself, or for ``"auto"`` the
    engine registry's pick for the trace's size in JSONL bytes
    (:func:`~litehit_core.engine.auto_lru_engine`; a compressed or Parquet file counts
    :data:`~litehit_service.traces.readers.compressed.EXPANSION` times its size, an
    unreadable file as empty, and the reader reports it with its own message), times
    ``sample_rate`` for a sampled replay (its engines hold ~R of the blocks: below the
    compact engine's threshold the Python engine's smaller start-up wins, 65 vs 180 MB of
    peak RSS on Mooncake x 10 at R = 0.01, bench/bench_replay_sampling.py, 2026-12-05).
    ValueError naming the value for anything else."""
    if engine not in REPLAY_ENGINES:
        raise ValueError(f"engine must be one of {list(REPLAY_ENGINES)}, got {engine!r}")
    if engine != "auto":
        return engine
    return auto_lru_engine(int(text_bytes(trace_path) * sample_rate))


def run_replay(
    config: ReplayConfig,
    *,
    progress: bool | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    executor: str = "local",
    ray_address: str | None = None,
    engine: str = "auto",
    sample_rate: float = 1.0,
    sample_seeds: int = 1,
) -> ReplaySummary:
    """Replay ``config``'s trace through a fresh in-process manager; write the facts ledger.

    ``progress``: show a tqdm bar on stderr (None = only when stderr is a terminal).
    ``max_line_bytes``: the longest trace line accepted (bytes, ending excluded; a longer
    one is a LocatedError at its line, found without reading it whole); ``ValueError``
    unless an integer > 0.
    ``executor``: ``"local"`` (this process) or ``"ray"`` (one Ray task per instance lane,
    :mod:`litehit_service.litehit.lanes`; at ``ray_address``, else a local Ray): the same
    ledger byte for byte, the same errors.
    ``engine``: the full-attention engine, ``"python"``, ``"compact"`` or ``"auto"`` (see
    :func:`lru_engine_for`); the same ledger byte for byte.
    ``sample_rate`` R < 1 (issue 37): the trace read once, each request's normalised keys
    sampled per seed (``sample_seeds`` K managers, salts 0..K-1; only the kept blocks
    reach the engines, so memory follows the sample), one sampled ledger per seed in
    :func:`sample_dir` of the output folder (and none at ``litehit_facts.csv``), by
    block or by subtree (:func:`sampling_unit`). Only with the local executor
    (InvalidRequestError otherwise). R = 1 is the exact replay.
    Raises :class:`~litehit_core.LocatedError` (the trace or the config) with ``path:line:
    reason``; then no ledger (and no temporary) is left behind, and an existing ledger is
    untouched; so on KeyboardInterrupt and the CLI's SIGTERM exception. Temporaries of the
    ledger left by killed runs are deleted first. Cost: see the module docstring.
    """
    started = time.perf_counter()
    check_max_line_bytes(max_line_bytes)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
    check_config(config)
    if not (0 < sample_rate <= 1) or not (1 <= sample_seeds <= 64):
        raise ValueError(f"sample_rate must be in (0, 1] and sample_seeds in [1, 64], got "
                         f"{sample_rate!r} and {sample_seeds!r}")  # fmt: skip
    sampled = sample_rate < 1
    if sampled and executor != "local":
        raise InvalidRequestError("a sampled replay runs in this process: not with --executor ray")
    lru_engine = lru_engine_for(engine, config.trace_file_path, sample_rate)
    if progress is None:
        progress = sys.stderr.isatty()
    seeds = sample_seeds if sampled else 1
    manager, results = built = _manager(config, lru_engine)
    models = {info.instance_id: info.spec.model for info in manager.instance_infos()}
    unit = sampling_unit(models)
    if sampled:  # one manager per seed (the first one only told the models)
        managers = [_manager(config, lru_engine, sample_rate, k, unit) for k in range(seeds)]
        manager, results = managers[0]
    else:
        managers = [built]
    with_model = any(model != DEFAULT_MODEL for model in models.values())  # ledger header
    lanes: dict[str, _Lane] = {}
    formats: dict[str, tuple[str, int, int, str | None]] = {}
    for reg, result in zip(config.instances, results, strict=True):
        formats[reg.instance_id] = (reg.instance_id, reg.block_size, result.size_full_only,
                                    models[reg.instance_id] if with_model else None)  # fmt: skip
        lanes[reg.instance_id] = (reg.instance_id, FactLineFormat(*formats[reg.instance_id]).line)

    path = config.trace_file_path
    fmt = config.trace_format
    if config.override_instance_id:
        fixed: tuple[_Lane, ...] | None = (lanes[config.override_instance_id],)
    elif config.fanout_all_instances:
        fixed = tuple(lanes.values())
    else:
        fixed = None
    default_id = config.override_instance_id or next(iter(lanes))
    reader = reader_of_container(container_or_none(path)) or get_reader(fmt)
    whole = reader.whole_input
    if whole:  # LMCache: the whole log, sorted, as one batch
        batches = lmcache_batches(path, config, max_line_bytes)
    elif config.pipeline_worker_count > 1:
        workers = config.pipeline_worker_count
        batches = pool_batches(
            path, fmt, config.block_size, default_id, progress, workers, max_line_bytes
        )
    else:  # standard JSONL or Parquet: by columns (pyarrow's threads), no line loop
        source = None
        if reader.events_by_columns:
            source = reader.column_source(
                path,
                max_line_bytes=max_line_bytes,
                chunk_bytes=REPLAY_CHUNK_BYTES,
                block_size=config.block_size,
                instance_id=default_id,
            )
        if source is not None:
            batches = column_batches(source, path, progress)
        else:
            batches = inline_batches(path, fmt, config.block_size, default_id, progress,
                                     max_line_bytes)  # fmt: skip

    out = Path(config.output_result_path)
    if sampled:
        paths = [out / sample_dir(sample_rate, k) / FACTS_FILENAME for k in range(seeds)]
    else:
        paths = [out / FACTS_FILENAME]
    facts_path = paths[0]
    bar = _progress_bar(path, whole, progress)
    try:
        with ExitStack() as stack:
            writers = [
                stack.enter_context(
                    FactsWriter(
                        p,
                        with_model=with_model and not sampled,  # by subtree: always
                        sample=LedgerSample(sample_rate, k, unit) if sampled else None,
                    )
                )
                for k, p in enumerate(paths)
            ]
            stack.enter_context(relaxed_gc())
            writer = writers[0]
            if executor == "ray":
                requests, writes, summaries = _drive_lanes(
                    config, formats, batches, lanes, fixed, path, writer, bar, ray_address,
                    lru_engine,
                )  # fmt: skip
            else:
                sampled_formats = None
                if sampled:  # by subtree: the model column too
                    sampled_formats = {
                        iid: FactLineFormat(*f[:3], models[iid] if unit == "subtree" else None)
                        for iid, f in formats.items()
                    }
                sinks = [
                    (m, w, sampled_formats) for (m, _), w in zip(managers, writers, strict=True)
                ]
                requests, writes = _drive(sinks, batches, lanes, fixed, path, bar)
                summaries = manager.list_instances()
            if not requests:
                raise LocatedError(
                    path,
                    0,
                    "no valid rows: the trace holds no get/request events"
                    + (f" (only {writes} write events)" if writes else " (it is empty)"),
                )
    finally:
        if bar is not None:
            bar.close()
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    estimates = None
    if sampled:
        estimates = SampledEstimates.read(sample_rate, [str(p) for p in paths], max_line_bytes)
    elapsed = time.perf_counter() - started
    return ReplaySummary(
        requests=requests,
        rows=requests * (len(fixed) if fixed is not None else 1),
        writes_skipped=writes,
        instances=len(lanes),
        elapsed_s=elapsed,
        requests_per_s=requests / elapsed if elapsed > 0 else 0.0,
        facts_path=str(facts_path),
        instance_summaries=tuple(summaries),
        sampled=estimates,
    )


def sampling_unit(models: dict[str, str]) -> str:
    """How a sampled replay of instances with these ``models`` (by instance id) samples:
    ``"block"`` (SHARDS, exact in expectation) when every model's prefix hit is a block's
    own stack distance (:data:`~litehit_core.engine.BLOCK_SAMPLED_MODELS`: full attention
    touched tail first), else ``"subtree"`` for every instance (head first or hybrid: a
    block's hit depends on its ancestors' order, so whole requests are kept below the
    trunk; one ledger holds one unit). O(instances)."""
    return "block" if all(m in BLOCK_SAMPLED_MODELS for m in models.values()) else "subtree"


def _manager(
    config: ReplayConfig,
    lru_engine: str,
    sample_rate: float = 1.0,
    seed: int = 0,
    unit: str = "block",
) -> tuple[OnlineOptimizerManager, list[Any]]:
    """A fresh manager with ``config``'s groups and instances (every refusal reported at
    once: the config's error), sampling at ``sample_rate`` with ``seed`` by ``unit``; its
    registration results in instance order."""
    policy = QueryPolicy.offline(config.block_size, sample_rate, seed, unit)
    manager = OnlineOptimizerManager(policy=policy, lru_engine=lru_engine)
    problems, refused = [], set()  # every group and instance the manager refuses, at once
    for i, group in enumerate(config.instance_groups):
        try:
            manager.create_group(group)
        except OptimizerError as exc:
            problems.append(config.error(f"instance_groups[{i}]", str(exc)))
            refused.add(group.name)
    results = []
    for i, reg in enumerate(config.instances):
        try:
            if reg.instance_group not in refused:  # else its group's error says it all
                results.append(manager.register_instance(reg))
        except OptimizerError as exc:
            problems.append(config.error(f"instances[{i}]", str(exc)))
    raise_config_errors(problems)
    return manager, results


def _progress_bar(path: str, whole_input: bool, enabled: bool) -> Any:
    """A bar of the trace's bytes, or of requests for a format read whole (``None`` when
    not ``enabled``)."""
    if not enabled:
        return None
    from tqdm import tqdm

    total = None if whole_input else plain_size(path)  # None: compressed, size unknown
    return tqdm(
        total=total,
        unit="B" if not whole_input else "req",
        unit_scale=True,
        file=sys.stderr,
        leave=False,
        mininterval=0.5,
        desc="replay",
    )


def _routed(
    batches: Iterator[Batch],
    lanes: dict[str, _Lane],
    fixed: tuple[_Lane, ...] | None,
    path: str,
    bar: Any,
    counts: list[int],
) -> Iterator[list[tuple[Event, tuple[_Lane, ...]]]]:
    """The one routing rule, batch by batch: each request event with the lanes it goes to
    (``override_instance_id``, every lane with ``fanout_all_instances``, else its own
    instance, which must be configured: a LocatedError at its line otherwise). ``write``
    events are counted and skipped; ``counts`` becomes ``[events seen, writes]``. A batch's
    parse error is raised after its events were yielded. O(events)."""
    routes = {iid: (lane,) for iid, lane in lanes.items()}
    get_route = routes.get
    for events, error, size in batches:
        counts[0] += len(events)
        routed = []
        append = routed.append
        for event in events:
            if event[1] == "write":
                counts[1] += 1
                continue
            targets = fixed or get_route(event[2])
            if targets is None:
                raise LocatedError(
                    path,
                    event[0],
                    f"instance_id {event[2]!r} is not a configured instance {sorted(lanes)}; "
                    "set override_instance_id or fanout_all_instances to route every request",
                )
            append((event, targets))
        yield routed
        if bar is not None:
            bar.update(size or len(events))
        if error is not None:
            raise error


_Sink = tuple[OnlineOptimizerManager, FactsWriter, "dict[str, FactLineFormat] | None"]
"""A manager replaying the routed events and the ledger its rows go to; with the lanes'
formats for a sampled ledger (None: the lanes' own exact lines)."""


def _drive(
    sinks: Sequence[_Sink],
    batches: Iterator[Batch],
    lanes: dict[str, _Lane],
    fixed: tuple[_Lane, ...] | None,
    path: str,
    bar: Any,
) -> tuple[int, int]:
    """The hot loop: query, format and write every routed event (:func:`_routed`), the
    trace read once for every sink (one for an exact replay, one per seed sampled).
    Returns (requests, writes).

    Per request and sink: one ``record_query`` per routed instance and one line from the
    lane's :class:`~litehit_core.FactLineFormat` (a sampled ledger's line also carries the
    blocks the sample kept).
    """
    counts = [0, 0]
    rows: list[str] = []
    append = rows.append
    modes = [any(m.batched(lane_id) for lane_id in m.instance_ids()) for m, _, _ in sinks]
    for routed in _routed(batches, lanes, fixed, path, bar, counts):
        for (manager, writer, sampled), batched in zip(sinks, modes, strict=True):
            if batched or sampled is not None:  # a sample: its keys filtered batch by batch
                _record_batches(manager, routed, path, append, sampled)
            else:
                record = manager.record_query
                for (line_no, _, _, tid, ts, keys, input_len, *_), targets in routed:
                    for lane_id, line in targets:
                        try:
                            fact, tokens = record(lane_id, keys, input_len, ts)
                        except OptimizerError as exc:
                            raise LocatedError(path, line_no, str(exc)) from None
                        append(line(tid, ts, tokens, fact.hit_curve))
            writer.write_lines(rows)
            rows.clear()
    return counts[0] - counts[1], counts[1]


def _record_batches(
    manager: OnlineOptimizerManager,
    routed: list[tuple[Event, tuple[_Lane, ...]]],
    path: str,
    append: Callable[[str], None],
    sampled: dict[str, FactLineFormat] | None = None,
) -> None:
    """One routed batch through :meth:`~OnlineOptimizerManager.record_batch`, one call per
    instance (instances are independent, so grouping changes no fact), then its rows in
    trace order. A failing request raises the LocatedError the one-by-one loop would: the
    earliest failing line of any instance, with the same message. O(events)."""
    per_lane: dict[str, list[Event]] = {}
    for event, targets in routed:
        for lane_id, _ in targets:
            per_lane.setdefault(lane_id, []).append(event)
    answers: dict[str, tuple[Iterator[Any], Iterator[int]]] = {}
    failure: tuple[int, str] | None = None
    for lane_id, events in per_lane.items():
        try:
            facts, tokens = manager.record_batch(lane_id, [(e[5], e[6], e[4]) for e in events])
        except BatchQueryError as exc:
            line_no = events[exc.index][0]
            if failure is None or line_no < failure[0]:
                failure = (line_no, str(exc.error))
            continue
        answers[lane_id] = (iter(facts), iter(tokens))
    if failure is not None:
        raise LocatedError(path, failure[0], failure[1])
    if sampled is not None:  # a sampled ledger's lines: blocks kept (trunk, reuse), the curve
        subtree = manager.policy.sample_unit == "subtree"
        columns = {lane: manager.sample_columns(lane) for lane in answers} if subtree else {}
        reuse = {lane: iter(c[2].tolist()) for lane, c in columns.items()}
        for (_, _, _, tid, ts, *_), targets in routed:
            for lane_id, _ in targets:
                facts_left, tokens_left = answers[lane_id]
                fact = next(facts_left)
                extra = None
                if subtree:
                    trunk, trace, _ = columns[lane_id]
                    extra = (next(reuse[lane_id]), trunk, trace)
                line = sampled[lane_id].sampled_line
                append(line(tid, ts, next(tokens_left), fact.total_blocks, fact.hit_curve,
                            extra))  # fmt: skip
        return
    for (_, _, _, tid, ts, *_), targets in routed:
        for lane_id, line in targets:
            facts_left, tokens_left = answers[lane_id]
            append(line(tid, ts, next(tokens_left), next(facts_left).hit_curve))


def _drive_lanes(
    config: ReplayConfig,
    formats: dict[str, tuple[str, int, int, str | None]],
    batches: Iterator[Batch],
    lanes: dict[str, _Lane],
    fixed: tuple[_Lane, ...] | None,
    path: str,
    writer: FactsWriter,
    bar: Any,
    ray_address: str | None,
    lru_engine: str = "python",
) -> tuple[int, int, list[InstanceSummary]]:
    """:func:`_drive` with every instance lane replayed as a Ray task
    (:mod:`litehit_service.litehit.lanes`): route everything here, replay the lanes there,
    write the rows in trace order. Returns (requests, writes, instance summaries in
    registration order). The error raised is the one :func:`_drive` would raise."""
    from litehit_service.litehit.lanes import LaneSpec, first_error, replay_lane, run_lanes

    groups = {group.name: group for group in config.instance_groups}
    specs = {
        reg.instance_id: LaneSpec(
            config.block_size,
            groups[reg.instance_group],
            reg,
            formats[reg.instance_id],
            lru_engine,
        )  # fmt: skip
        for reg in config.instances
    }
    counts = [0, 0]
    work: dict[str, list[Any]] = {iid: [] for iid in lanes}
    n_rows = 0
    stopped: LocatedError | None = None
    try:
        for routed in _routed(batches, lanes, fixed, path, bar, counts):
            for (line_no, _, _, tid, ts, keys, input_len, *_), targets in routed:
                for lane_id, _ in targets:
                    work[lane_id].append((n_rows, line_no, tid, ts, keys, input_len))
                    n_rows += 1
    except LocatedError as exc:
        stopped = exc  # raised below unless a lane failed on an earlier line
    results = run_lanes(specs, work, ray_address)
    failed = first_error(results, list(lanes), path)
    if failed is not None and (stopped is None or failed.line_no < stopped.line_no):
        raise failed
    if stopped is not None:
        raise stopped
    rows: list[str] = [""] * n_rows
    for result in results.values():
        for index, text in result.rows:
            rows[index] = text
    writer.write_lines(rows)
    summaries = {iid: result.summary for iid, result in results.items()}
    for iid, spec in specs.items():  # a lane without requests: its untouched summary
        if iid not in summaries:
            summaries[iid] = replay_lane(spec, []).summary
    return (
        counts[0] - counts[1],
        counts[1],
        [summaries[reg.instance_id] for reg in config.instances],
    )


def with_workers(config: ReplayConfig, workers: int) -> ReplayConfig:
    """``config`` with ``pipeline_worker_count`` replaced (checked by :func:`run_replay`)."""
    return replace(config, pipeline_worker_count=workers)


def with_output_dir(config: ReplayConfig, folder: str) -> ReplayConfig:
    """``config`` writing into ``folder`` instead of its ``output_result_path`` (``-o DIR``)."""
    return replace(config, output_result_path=folder)


def with_touch_order(config: ReplayConfig, touch_order: str) -> ReplayConfig:
    """``config`` with every group's ``touch_order`` replaced (a ``--touch-order`` flag
    overriding the configuration for the whole run; checked when the replay starts)."""
    groups = tuple(replace(g, touch_order=touch_order) for g in config.instance_groups)
    return replace(config, instance_groups=groups)
