"""A trace for the policy replay: records -> arrays sorted by time, checked (spec §2).

Standard JSONL (``get`` / ``write`` / ``request``, with ``block_mask`` and ``ttl_us``), its
Parquet form, Mooncake and LMCache inputs (every line a ``request``) are read in batches
(:mod:`.columns`: the standard format by columns with pyarrow, the others with the
project's trace readers, :mod:`litehit_service.traces.readers`). Every record must name a
configured instance (a format without instance names goes to ``--instance`` or to the
configuration's only instance) and a read's keys must fit its prompt (``len(keys) <=
input_len // block_size``); the first bad record stops the read with ``file:line: field:
reason``. :func:`load_trace` then sorts the records stably by timestamp (the whole trace
in memory, for the commands that replay it several times or keep every node);
``litehit optimize`` streams the batches instead (:mod:`.stream`). Cost: O(bytes); memory
~17 bytes per key plus ~50 per record.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from litehit_core import LocatedError
from litehit_core.policy_replay import ReplayRecords
from litehit_service.optimizer.optimize.columns import (
    Batch,
    Routing,
    TraceBatches,
    concat_batches,
    event_batch,
    trace_batches,
)
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.traces.readers.compressed import container_or_none
from litehit_service.traces.readers.records import TraceEvent, TraceReader
from litehit_service.traces.readers.registry import (
    detect_format,
    get_reader,
    reader_of_container,
)

__all__ = ["LoadedTrace", "load_trace", "open_trace_batches", "sorted_trace"]


@dataclass(frozen=True, slots=True)
class LoadedTrace:
    """The records in replay order, each record's prompt tokens (``input_lens``; 0 for a
    write), the distinct TTLs in ns the records' ``buckets`` index, the trace's path and
    format."""

    records: ReplayRecords
    input_lens: np.ndarray
    ttl_values: tuple[int, ...]
    path: str
    trace_format: str


def open_trace_batches(
    config: OptimizeConfig,
    *,
    trace_format: str | None = None,
    instance: str | None = None,
    max_line_bytes: int,
) -> tuple[Routing, TraceBatches, str]:
    """``config``'s trace as batches in file order (:func:`~.columns.trace_batches`), with
    their routing (whose ``ttl_values`` grow as batches are read) and the format's name.
    ``trace_format``: a registered format name (default: detected from the first line);
    ``instance``: the instance every record goes to (required for a format without
    instance names when the configuration has several). LocatedError for a bad option;
    a bad record raises when its batch is read."""
    path = config.trace_file_path
    reader = get_reader(trace_format) if trace_format else None  # an unknown name: refused
    # a Parquet trace is read by its columns whatever was asked (its format is the file's)
    reader = reader_of_container(container_or_none(path)) or reader
    if reader is None:
        reader = detect_format(path, max_line_bytes=max_line_bytes)
    instances = config.instances
    index = {inst.instance_id: i for i, inst in enumerate(instances)}
    if instance is not None and instance not in index:
        raise LocatedError(
            "",
            0,
            f"--instance {instance!r} is not a configured instance "
            f"(configured: {', '.join(index)})",
        )
    route = instance
    if route is None and not reader.names_instances:
        if len(instances) != 1:
            raise LocatedError(
                path,
                0,
                f"a {reader.name} trace names no instance and the "
                f"configuration has {len(instances)}: give --instance ID",
            )
        route = instances[0].instance_id
    group_of = [gi for gi, g in enumerate(config.groups) for _ in g.instances]
    routing = Routing(
        path=os.fspath(path),
        index=index,
        route=route,
        block_sizes=np.array([i.block_size for i in instances], dtype=np.int64),
        expires=np.array([i.policy.expires for i in instances], dtype=bool),
        default_ttl=np.array([config.groups[g].default_ttl_ns for g in group_of], dtype=np.int64),
    )
    options = _options(reader, route, config)
    batches = trace_batches(
        reader,
        os.fspath(path),
        routing,
        lambda: _events(reader, path, route, options, config, max_line_bytes),
        max_line_bytes=max_line_bytes,
        options=options,
    )
    return routing, batches, reader.name


def load_trace(
    config: OptimizeConfig,
    *,
    trace_format: str | None = None,
    instance: str | None = None,
    max_line_bytes: int,
) -> LoadedTrace:
    """Read, check and sort ``config``'s whole trace (module docstring; the options as
    :func:`open_trace_batches`'). LocatedError for a bad record or option."""
    routing, batches, name = open_trace_batches(
        config, trace_format=trace_format, instance=instance, max_line_bytes=max_line_bytes
    )
    parts = [batch for batch, _ in batches.batches]
    whole = concat_batches(parts) if parts else event_batch((), routing)
    return sorted_trace(whole, routing.ttl_values, routing.path, name)


def _options(reader: TraceReader, route: str | None, config: OptimizeConfig) -> dict[str, Any]:
    """The reader's options for a trace routed to ``route``: its instance id and block
    size, for a format that takes them."""
    options: dict[str, Any] = {}
    if "instance_id" in reader.options and route is not None:
        options["instance_id"] = route
    if "block_size" in reader.options and route is not None:
        options["block_size"] = next(
            i.block_size for i in config.instances if i.instance_id == route
        )
    return options


def _events(
    reader: TraceReader,
    path: str,
    route: str | None,
    options: dict[str, Any],
    config: OptimizeConfig,
    max_line_bytes: int,
) -> Iterable[TraceEvent]:
    if reader.sizes_in_trace:
        events, sizes = reader.read_sized(path, max_line_bytes=max_line_bytes, **options)
        block_sizes = {i.instance_id: i.block_size for i in config.instances}
        for name, (tokens_per_key, _bytes) in sizes.items():
            target = route if route is not None else name
            if target in block_sizes and block_sizes[target] != tokens_per_key:
                raise LocatedError(
                    path,
                    0,
                    f"the trace's {name!r} has {tokens_per_key} tokens "
                    f"per key, but instance {target!r} has block_size "
                    f"{block_sizes[target]}: set it to {tokens_per_key}",
                )
        return events
    return reader.read(path, max_line_bytes=max_line_bytes, **options)


def sorted_trace(
    batch: Batch, ttl_values: tuple[int, ...], path: str | os.PathLike[str], fmt: str
) -> LoadedTrace:
    """The records of ``batch`` sorted stably by time (a no-op copy for a sorted trace).
    O(records log records + keys)."""
    t = batch.times
    n_keys = batch.lens
    order = np.argsort(t, kind="stable")
    off = np.zeros(len(t) + 1, dtype=np.int64)
    np.cumsum(n_keys, out=off[1:])
    all_keys, all_local = batch.keys, batch.local
    if np.all(order == np.arange(len(t))):
        sorted_keys, sorted_local, new_off = all_keys.copy(), all_local.copy(), off
    else:
        new_off = np.zeros(len(t) + 1, dtype=np.int64)
        np.cumsum(n_keys[order], out=new_off[1:])
        # key i of the sorted order comes from its record's old start + its rank in it
        shift = np.repeat(off[:-1][order] - new_off[:-1], n_keys[order])
        take = shift + np.arange(int(new_off[-1]), dtype=np.int64)
        sorted_keys, sorted_local = all_keys[take], all_local[take]
    records = ReplayRecords(
        kinds=batch.kinds[order].copy(),
        insts=batch.insts[order].copy(),
        times=t[order].copy(),
        key_off=new_off,
        keys=sorted_keys,
        local=sorted_local,
        buckets=batch.buckets[order].copy(),
    )
    return LoadedTrace(records, batch.inputs[order].copy(), ttl_values, os.fspath(path), fmt)
