"""A trace for the policy replay as batches of columns, in file order (spec §2).

:func:`trace_batches` reads a trace in batches of records and gives each as a
:class:`Batch` of flat arrays, checked and routed to the configured instances: the
standard format (JSONL, compressed or Parquet) and Mooncake JSONL by columns (the
reader's :class:`~litehit_service.traces.readers.columns.ColumnSource`), checked with numpy
on whole columns (:func:`columns_batch`); any chunk the column checks doubt -- a null where a
value is required, a value out of range, a key count past its prompt, a mask of the wrong
length, a TTL on a get, an unconfigured instance -- and every other format go through the
line parser and :func:`event_batch`, which raises the located error
(``path:line: field: reason``) of the first bad record. So the batches are the row path's,
by construction where the rows are good and by delegation where one is not.

Every record must name a configured instance (a format without instance names goes to
``--instance`` or to the configuration's only instance) and a read's keys must fit its
prompt (``len(keys) <= input_len // block_size``). TTLs get bucket numbers in first-seen
order across the batches (:attr:`Routing.ttl_index`). Cost: O(bytes) in pyarrow and numpy
for the columnar formats, the line parser's otherwise; memory: one batch (~17 bytes per
key, ~50 per record) besides the reader's chunk.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from litehit_core import LocatedError
from litehit_core.policy_replay.loop import GET, REQUEST, WRITE
from litehit_service.traces.readers.records import EVENT_KINDS, TraceEvent, TraceReader

if TYPE_CHECKING:
    from litehit_service.traces.readers.columns import ColumnSource, StandardColumns

__all__ = [
    "EVENTS_PER_BATCH",
    "Batch",
    "Routing",
    "TraceBatches",
    "columns_batch",
    "concat_batches",
    "event_batch",
    "table_batch",
    "trace_batches",
]

EVENTS_PER_BATCH = 65_536
"""Records per batch of a format read line by line."""
_KINDS = {"get": GET, "write": WRITE, "request": REQUEST}


class Batch(NamedTuple):
    """Records in file order: ``kinds`` int8, ``insts`` int32 (configuration order),
    ``times`` int64 ns, ``lens`` int64 (keys per record), ``inputs`` int64 (prompt tokens,
    0 for a write), ``keys`` int64, ``local`` uint8 (one per key: 1 = masked local),
    ``buckets`` int32 (the record's TTL bucket, -1 = none), ``lines`` int64 (each record's
    1-based line or row in the file, for messages)."""

    kinds: np.ndarray
    insts: np.ndarray
    times: np.ndarray
    lens: np.ndarray
    inputs: np.ndarray
    keys: np.ndarray
    local: np.ndarray
    buckets: np.ndarray
    lines: np.ndarray


@dataclass(slots=True)
class Routing:
    """Where records go and what they need: instance id -> configuration index
    (``index``), the instance every record goes to (``route``) or None, per instance its
    tokens per key, whether its policy expires blocks and its group's default TTL (ns);
    ``ttl_index``: TTL ns -> bucket, grown in first-seen order."""

    path: str
    index: dict[str, int]
    route: str | None
    block_sizes: np.ndarray
    expires: np.ndarray
    default_ttl: np.ndarray
    ttl_index: dict[int, int] = field(default_factory=dict)

    @property
    def ttl_values(self) -> tuple[int, ...]:
        """The TTLs (ns) in bucket order."""
        return tuple(self.ttl_index)


_KIND_CODES = np.array([_KINDS[k] for k in EVENT_KINDS], dtype=np.int8)
"""The replay's kind code of each standard kind, by its index in ``EVENT_KINDS``."""


def table_batch(table: Any, first_line: int, routing: Routing) -> Batch | None:
    """The batch of a pyarrow table of standard records (one row per line from
    ``first_line``), or None when a row needs the line parser's judgement (module
    docstring): the format's rules (:func:`~litehit_service.traces.readers.columns.
    standard_columns`), then the routing's (a configured instance, keys that fit the
    prompt: :func:`columns_batch`). ``routing.ttl_index`` grows only when a batch is
    returned. O(rows + keys) numpy passes, no Python object per row."""
    from litehit_service.traces.readers.columns import standard_columns

    cols = standard_columns(table)
    return None if cols is None else columns_batch(cols, first_line, routing)


def columns_batch(cols: StandardColumns, first_line: int, routing: Routing) -> Batch | None:
    """The batch of a chunk's checked columns (any columnar format's,
    :class:`~litehit_service.traces.readers.columns.ColumnSource`; one row per line from
    ``first_line``), or None when a row breaks the routing's rules (an unconfigured
    instance, more keys than the prompt holds at its instance's block size).
    ``routing.ttl_index`` grows only when a batch is returned. O(rows + keys) numpy."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(cols.kinds)
    kinds = _KIND_CODES[cols.kinds]
    if routing.route is not None:
        insts = np.full(n, routing.index[routing.route], dtype=np.int32)
    else:
        names = list(routing.index)
        found = pc.index_in(cols.instances, value_set=pa.array(names, type=pa.string()))
        if found.null_count:  # an unconfigured instance id
            return None
        insts = found.to_numpy().astype(np.int32)
    lens = np.diff(cols.offsets)
    reads = kinds != WRITE
    inputs = np.where(reads, cols.inputs, 0)
    room = inputs // routing.block_sizes[insts]
    if (reads & (lens > room)).any():
        return None
    buckets = _buckets(cols.ttl_us, n, kinds, insts, routing)
    lines = np.arange(first_line, first_line + n, dtype=np.int64)
    return Batch(kinds, insts, cols.times, lens, inputs, cols.keys, cols.local, buckets, lines)


def _buckets(
    ttl_us: np.ndarray, n: int, kinds: np.ndarray, insts: np.ndarray, routing: Routing
) -> np.ndarray:
    """Per row its TTL bucket (-1: none), new TTLs added to ``routing.ttl_index`` in
    first-seen order."""
    default = routing.default_ttl[insts]
    ttl = np.where(ttl_us > 0, ttl_us * 1000, np.where(ttl_us < 0, 0, default))
    bucketed = (kinds != GET) & routing.expires[insts] & (ttl > 0)
    buckets = np.full(n, -1, dtype=np.int32)
    if bucketed.any():
        distinct, first = np.unique(ttl[bucketed], return_index=True)
        index = routing.ttl_index
        for value in distinct[np.argsort(first, kind="stable")].tolist():  # first-seen order
            index.setdefault(value, len(index))
        rank = np.array([index[v] for v in distinct.tolist()], dtype=np.int32)
        buckets[bucketed] = rank[np.searchsorted(distinct, ttl[bucketed])]
    return buckets


def event_batch(events: Iterable[TraceEvent], routing: Routing) -> Batch:
    """The batch of ``events`` (the line parser's, checked already), routed; the
    LocatedError of the first record of an unconfigured instance or with more keys than
    its prompt holds. O(keys) Python."""
    index, route, path = routing.index, routing.route, routing.path
    block_sizes = routing.block_sizes.tolist()
    expires = routing.expires.tolist()
    default_ttl = routing.default_ttl.tolist()
    ttl_index = routing.ttl_index
    kinds, insts, times, lens, inputs, buckets, lines = (
        array("b"), array("i"), array("q"), array("q"), array("q"), array("i"), array("q"),
    )  # fmt: skip
    keys, local = array("q"), array("B")
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
        lines.append(e.line_no)
        keys.extend(e.keys)
        local.extend(_mask(e.block_mask, n))
        bucket = -1
        if kind != GET and expires[inst]:
            ttl = e.ttl_us * 1000 if e.ttl_us > 0 else (0 if e.ttl_us < 0 else default_ttl[inst])
            if ttl > 0:
                bucket = ttl_index.setdefault(ttl, len(ttl_index))
        buckets.append(bucket)
    return Batch(
        np.frombuffer(kinds, dtype=np.int8),
        np.frombuffer(insts, dtype=np.int32),
        np.frombuffer(times, dtype=np.int64),
        np.frombuffer(lens, dtype=np.int64),
        np.frombuffer(inputs, dtype=np.int64),
        np.frombuffer(keys, dtype=np.int64),
        np.frombuffer(local, dtype=np.uint8),
        np.frombuffer(buckets, dtype=np.int32),
        np.frombuffer(lines, dtype=np.int64),
    )


def _mask(block_mask: int | tuple[bool, ...] | None, n: int) -> Sequence[int]:
    if block_mask is None:
        return bytes(n)
    if isinstance(block_mask, int):
        return b"\x01" * block_mask + bytes(n - block_mask)
    return bytes(block_mask)


def concat_batches(batches: Sequence[Batch]) -> Batch:
    """One batch of ``batches`` in order. O(their size)."""
    if len(batches) == 1:
        return batches[0]
    return Batch(*(np.concatenate(cols) for cols in zip(*batches, strict=True)))


@dataclass(slots=True)
class TraceBatches:
    """A trace's batches (:attr:`batches`: ``(batch, units it consumed)``, read once, in
    file order; the units are what a progress bar advances by), the progress ``unit``
    ("bytes", "rows" or "records") and its ``total`` when known."""

    unit: str
    total: int | None
    batches: Iterator[tuple[Batch, int]]


def trace_batches(
    reader: TraceReader,
    path: str,
    routing: Routing,
    events: Iterable[TraceEvent] | Callable[[], Iterable[TraceEvent]] | None,
    *,
    max_line_bytes: int,
    options: Mapping[str, Any] | None = None,
) -> TraceBatches:
    """The batches of the trace at ``path`` (module docstring): by columns when the
    ``reader`` gives a column source (:meth:`~litehit_service.traces.readers.records.
    TraceReader.column_source`, its ``options`` bound: a Mooncake trace's ``block_size``
    and ``instance_id``), else from ``events`` (the reader's, opened by the caller with
    its options, or a function that opens them, called only then)
    :data:`EVENTS_PER_BATCH` at a time."""
    source = reader.column_source(path, max_line_bytes=max_line_bytes, **(options or {}))
    if source is not None:
        return TraceBatches(source.unit, source.total, _columnar(source, routing))
    if callable(events):
        events = events()
    assert events is not None
    return TraceBatches("records", None, _grouped(iter(events), routing))


def _columnar(source: ColumnSource, routing: Routing) -> Iterator[tuple[Batch, int]]:
    from litehit_service.traces.readers.jsonl import parse_numbered

    for chunk in source.chunks:
        batch = None
        if chunk.table is not None:
            cols = source.columns(chunk.table)
            if cols is not None:
                batch = columns_batch(cols, chunk.first_line, routing)
        if batch is None:
            events, error = parse_numbered(chunk.lines(), chunk.first_line, routing.path,
                                           source.parse)  # fmt: skip
            batch = event_batch(events, routing)  # the routing errors of the good lines first
            if error is not None:
                raise error
        yield batch, chunk.done


def _grouped(events: Iterator[TraceEvent], routing: Routing) -> Iterator[tuple[Batch, int]]:
    while True:
        group = list(islice(events, EVENTS_PER_BATCH))
        if not group:
            return
        yield event_batch(group, routing), len(group)
