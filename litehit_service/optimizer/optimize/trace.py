"""A trace for the policy replay: records -> sorted arrays, validated before replay (spec §2).

Standard JSONL (``get`` / ``write`` / ``request``, with ``block_mask`` and ``ttl_us``),
Mooncake and LMCache inputs (every line a ``request``) are read with the project's trace
readers (:mod:`litehit_service.traces.readers`). Every record must name a configured
instance (a format without instance names goes to ``--instance`` or to the configuration's
only instance) and a read's keys must fit its prompt (``len(keys) <= input_len //
block_size``). The first bad record stops the load with ``file:line: field: reason``
before anything is replayed. Records are then sorted stably by timestamp. Cost: the
reader's O(bytes); memory ~17 bytes per key plus ~30 per record (flat arrays, no Python
object per key after parsing).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from litehit_core import LocatedError
from litehit_core.policy_replay import ReplayRecords
from litehit_core.policy_replay.loop import GET, REQUEST, WRITE
from litehit_service.optimizer.optimize.config import OptimizeConfig
from litehit_service.traces.readers.compressed import container_of
from litehit_service.traces.readers.records import TraceEvent, TraceReader
from litehit_service.traces.readers.registry import (
    detect_format,
    get_reader,
    reader_of_container,
)

__all__ = ["LoadedTrace", "load_trace"]

_KINDS = {"get": GET, "write": WRITE, "request": REQUEST}


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


def load_trace(
    config: OptimizeConfig,
    *,
    trace_format: str | None = None,
    instance: str | None = None,
    max_line_bytes: int,
) -> LoadedTrace:
    """Read and validate ``config``'s trace (module docstring). ``trace_format``: a
    registered format name (default: detected from the first line); ``instance``: the
    instance every record goes to (required for a format without instance names when the
    configuration has several). LocatedError for a bad record or option."""
    path = config.trace_file_path
    reader = (
        get_reader(trace_format)
        if trace_format
        else detect_format(path, max_line_bytes=max_line_bytes)
    )
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
    if reader is reader_of_container(container_of(path)):  # a Parquet trace: columns
        loaded = _columns(path, config, index, route, reader.name)
        if loaded is not None:
            return loaded
    events = _events(reader, path, route, config, max_line_bytes)
    return _arrays(events, config, index, route, path, reader.name)


def _columns(
    path: str, config: OptimizeConfig, index: dict[str, int], route: str | None, fmt: str
) -> LoadedTrace | None:
    """The columnar load of a Parquet trace (:mod:`.columns`), or None for the row path."""
    from litehit_service.optimizer.optimize.columns import parquet_arrays

    instances = config.instances
    group_of = [gi for gi, g in enumerate(config.groups) for _ in g.instances]
    found = parquet_arrays(
        path,
        index,
        route,
        [i.block_size for i in instances],
        [i.policy.expires for i in instances],
        [config.groups[g].default_ttl_ns for g in group_of],
    )
    if found is None:
        return None
    (kinds, insts, times, lens, inputs, keys, local, buckets), ttl_values = found
    ttl_index = {ttl: i for i, ttl in enumerate(ttl_values)}
    return _sorted(kinds, insts, times, lens, inputs, keys, local, buckets, ttl_index, path, fmt)


def _events(
    reader: TraceReader, path: str, route: str | None, config: OptimizeConfig, max_line_bytes: int
) -> Iterable[TraceEvent]:
    options: dict[str, object] = {}
    if "instance_id" in reader.options and route is not None:
        options["instance_id"] = route
    if "block_size" in reader.options and route is not None:
        options["block_size"] = next(
            i.block_size for i in config.instances if i.instance_id == route
        )
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


def _arrays(
    events: Iterable[TraceEvent],
    config: OptimizeConfig,
    index: dict[str, int],
    route: str | None,
    path: str,
    fmt: str,
) -> LoadedTrace:
    instances = config.instances
    block_sizes = [i.block_size for i in instances]
    group_of = [gi for gi, g in enumerate(config.groups) for _ in g.instances]
    expires = [i.policy.expires for i in instances]
    default_ttl = [config.groups[g].default_ttl_ns for g in group_of]
    kinds, insts, times, lens, inputs, buckets = (
        array("b"),
        array("i"),
        array("q"),
        array("q"),
        array("q"),
        array("i"),
    )
    keys, local = array("q"), array("B")
    ttl_index: dict[int, int] = {}
    for e in events:
        name = route if route is not None else e.instance_id
        inst = index.get(name)
        if inst is None:
            raise LocatedError(
                path,
                e.line_no,
                f"instance {name!r} is not configured (configured: {', '.join(index)}; "
                "--instance ID sends every record to one)",
                "instance_id",
            )
        n = len(e.keys)
        kind = _KINDS[e.kind]
        if kind != WRITE:
            room = e.input_len // block_sizes[inst]
            if n > room:
                raise LocatedError(
                    path,
                    e.line_no,
                    f"{n} keys but input_len {e.input_len} "
                    f"holds {room} complete blocks of {block_sizes[inst]} tokens "
                    f"(instance {name!r})",
                    "keys",
                )
        kinds.append(kind)
        insts.append(inst)
        times.append(e.timestamp_ns)
        lens.append(n)
        inputs.append(e.input_len if kind != WRITE else 0)
        keys.extend(e.keys)
        local.extend(_mask(e.block_mask, n))
        bucket = -1
        if kind != GET and expires[inst]:
            ttl = e.ttl_us * 1000 if e.ttl_us > 0 else (0 if e.ttl_us < 0 else default_ttl[inst])
            if ttl > 0:
                bucket = ttl_index.setdefault(ttl, len(ttl_index))
        buckets.append(bucket)
    return _sorted(kinds, insts, times, lens, inputs, keys, local, buckets, ttl_index, path, fmt)


def _mask(block_mask: int | tuple[bool, ...] | None, n: int) -> Sequence[int]:
    if block_mask is None:
        return bytes(n)
    if isinstance(block_mask, int):
        return b"\x01" * block_mask + bytes(n - block_mask)
    return bytes(block_mask)


def _sorted(
    kinds: array,
    insts: array,
    times: array,
    lens: array,
    inputs: array,
    keys: array,
    local: array,
    buckets: array,
    ttl_index: dict[int, int],
    path: str,
    fmt: str,
) -> LoadedTrace:
    """The records sorted stably by time (a no-op copy for a sorted trace)."""
    t = np.frombuffer(times, dtype=np.int64)
    n_keys = np.frombuffer(lens, dtype=np.int64)
    order = np.argsort(t, kind="stable")
    off = np.zeros(len(t) + 1, dtype=np.int64)
    np.cumsum(n_keys, out=off[1:])
    all_keys = np.frombuffer(keys, dtype=np.int64)
    all_local = np.frombuffer(local, dtype=np.uint8)
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
        kinds=np.frombuffer(kinds, dtype=np.int8)[order].copy(),
        insts=np.frombuffer(insts, dtype=np.int32)[order].copy(),
        times=t[order].copy(),
        key_off=new_off,
        keys=sorted_keys,
        local=sorted_local,
        buckets=np.frombuffer(buckets, dtype=np.int32)[order].copy(),
    )
    ttl_values = tuple(sorted(ttl_index, key=ttl_index.__getitem__))
    inputs_sorted = np.frombuffer(inputs, dtype=np.int64)[order].copy()
    return LoadedTrace(records, inputs_sorted, ttl_values, os.fspath(path), fmt)
