"""KVCacheManager event-publisher logs -> standard ``get`` / ``write`` records (spec §10).

The log is JSON lines, one event each, with the fields every event has (``id``,
``source`` = the instance, ``component``, ``type``, ``trigger_time_us``) and per type:

- ``GetCacheLocation``: ``query_type``, ``keys``, ``tokens``, ``block_mask``, ``sw_size``,
  ``location_spec_names`` -> a ``get`` at ``trigger_time_us`` of instance ``source`` with
  the keys, the block mask as given (an integer or one boolean per key; ``[]`` or ``null``:
  none) and ``input_len = len(keys) x block_size``; ``trace_id`` is the event ``id``
  (or ``file:line`` without one). Only ``query_type`` ``prefix_match`` (the default when
  absent) is a prefix read: other query types are skipped and counted;
- ``StartWriteCache`` (``write_session_id``, ``keys``, ...) and ``FinishWriteCache``
  (``write_session_id``, ``success_block``) of the same source and session -> one ``write``
  of the start's keys at the finish's time (``trace_id`` = the session id). A start without
  a finish is written at start + 100 ms, after the end of the input decides it; a finish
  without a start is skipped and counted; a second start of a pending session ends the
  first as unfinished. ``success_block`` is not used (the reference does not either);
- any other type is skipped and counted by type. ``tokens`` is never read.

``--instance-map FILE`` (a JSON object) renames sources: ``"src": "instance"``,
``"src": {"instance_id": "instance", "block_size": 64}`` (its own block size) or
``"src": null`` (drop its events, counted); unlisted sources keep their name and
``--block-size``. Lines are checked field by field (``file:line: field 'keys' must be ...``).

Cost: O(bytes + events x log window); memory: a reorder window per file and the pending
write sessions (O(sessions open at once + sessions never finished)).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from litehit_core import LocatedError
from litehit_service.traces.logs.base import Conversion, Converted, Converter
from litehit_service.traces.logs.ordering import Stamped, time_ordered
from litehit_service.traces.readers.jsonl import (
    bad_field,
    check_int64_array,
    decode_object,
    require,
)
from litehit_service.traces.readers.records import INT64_MAX, TraceEvent

__all__ = ["READ_QUERY_TYPE", "UNFINISHED_WRITE_US", "PublisherLog", "read_instance_map"]

GET = "GetCacheLocation"
START = "StartWriteCache"
FINISH = "FinishWriteCache"
USED = (GET, START, FINISH)
READ_QUERY_TYPE = "prefix_match"
"""The one ``query_type`` that is a prefix read (the default when absent)."""
UNFINISHED_WRITE_US = 100_000
"""A write whose finish never came lands this long (µs) after its start (spec §10)."""
MAX_TRIGGER_US = INT64_MAX // 1000 - UNFINISHED_WRITE_US


class Event(NamedTuple):
    """One used event of the log (times in µs)."""

    kind: str
    source: str
    keys: list[int]
    mask: int | tuple[bool, ...] | None
    session: str
    event_id: str
    query_type: str


class Route(NamedTuple):
    """Where a source's records go: ``instance`` (``None``: dropped) and its block size."""

    instance: str | None
    block_size: int


def read_instance_map(path: str) -> dict[str, tuple[str | None, int | None]]:
    """The ``--instance-map`` file: source -> ``(instance or None, block size or None)``.
    LocatedError at line 0 naming the entry for anything else. O(entries)."""
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except OSError as exc:
        reason = f"cannot read the instance map: {exc.strerror or exc}"
        raise LocatedError(path, 0, reason) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LocatedError(path, 0, f"the instance map is not valid JSON: {exc}") from None
    if type(obj) is not dict:
        raise LocatedError(path, 0, "the instance map must be a JSON object source -> instance")
    out: dict[str, tuple[str | None, int | None]] = {}
    for source, entry in obj.items():
        field = f"[{json.dumps(source)}]"
        if entry is None or (type(entry) is str and entry):
            out[source] = (entry, None)
            continue
        if type(entry) is not dict or set(entry) - {"instance_id", "block_size"}:
            raise LocatedError(
                path,
                0,
                "must be an instance id, null (drop) or an object with 'instance_id' and "
                f"'block_size'; got {json.dumps(entry)[:80]}",
                field,
            )
        instance = entry.get("instance_id", source)
        size = entry.get("block_size")
        if instance is not None and (type(instance) is not str or not instance):
            raise LocatedError(path, 0, f"must be a non-empty string; got {instance!r}",
                               f"{field}.instance_id")  # fmt: skip
        if size is not None and (type(size) is not int or size <= 0):
            raise LocatedError(path, 0, f"must be an integer > 0; got {size!r}",
                               f"{field}.block_size")  # fmt: skip
        out[source] = (instance, size)
    return out


def parse_line(text: bytes, line_no: int, path: str, counts: Counter[str]) -> Stamped | None:
    """One log line: its used event stamped with ``trigger_time_us`` (ns), or ``None`` for
    a blank line or another type (counted in ``counts`` by type). O(len(text))."""
    obj = decode_object(text, line_no, path)
    if obj is None:
        return None
    kind = require(obj, "type", line_no, path)
    if type(kind) is not str:
        raise bad_field(path, line_no, "type", "a string", kind)
    counts[kind] += 1
    if kind not in USED:
        return None
    source = require(obj, "source", line_no, path)
    if type(source) is not str or not source:
        raise bad_field(path, line_no, "source", "a non-empty string (the instance)", source)
    time_us = require(obj, "trigger_time_us", line_no, path)
    if type(time_us) is not int or not 0 < time_us <= MAX_TRIGGER_US:
        raise bad_field(
            path, line_no, "trigger_time_us", f"an integer in [1, {MAX_TRIGGER_US}]", time_us
        )
    keys: list[int] = []
    mask = None
    session = ""
    if kind != FINISH:
        keys = require(obj, "keys", line_no, path)
        if type(keys) is not list:
            raise bad_field(path, line_no, "keys", "an array of int64 integers", keys)
        if keys:
            check_int64_array(keys, "keys", line_no, path, text)
    if kind != GET:
        session = require(obj, "write_session_id", line_no, path)
        if type(session) is not str or not session:
            raise bad_field(path, line_no, "write_session_id", "a non-empty string", session)
    query_type = READ_QUERY_TYPE
    event_id = ""
    if kind == GET:
        mask = _block_mask(obj.get("block_mask"), len(keys), line_no, path)
        query_type = obj.get("query_type", READ_QUERY_TYPE)
        if type(query_type) is not str:
            raise bad_field(path, line_no, "query_type", "a string", query_type)
        event_id = obj.get("id", "")
        if type(event_id) is not str:
            raise bad_field(path, line_no, "id", "a string", event_id)
    event = Event(kind, source, keys, mask, session, event_id, query_type)
    return Stamped(time_us * 1000, path, line_no, event, f"trigger_time_us {time_us}")


def _block_mask(value: Any, n_keys: int, line_no: int, path: str) -> int | tuple[bool, ...] | None:
    """A get's ``block_mask``: ``None`` when absent, ``null`` or ``[]`` (none given)."""
    if value is None or value == []:
        return None
    if type(value) is int and 0 <= value <= n_keys:
        return value
    if type(value) is list and len(value) == n_keys and all(type(v) is bool for v in value):
        return tuple(value)
    raise bad_field(
        path,
        line_no,
        "block_mask",
        f"an integer in [0, {n_keys}] or an array of {n_keys} booleans (one per key)",
        value,
    )


class PublisherConversion(Conversion):
    """One run: pairs write sessions in time order; counts what it reads and skips."""

    def __init__(
        self,
        files: Sequence[str],
        routes: Mapping[str, Route],
        block_size: int,
        window_ns: int,
        max_line_bytes: int,
        advance: Callable[[int], object],
    ) -> None:
        self.files = files
        self.routes = dict(routes)
        self.block_size = block_size
        self.window_ns = window_ns
        self.max_line_bytes = max_line_bytes
        self.advance = advance
        self.read: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.written: Counter[str] = Counter()
        self.per_instance: Counter[str] = Counter()
        self.pending: dict[tuple[str, str], Stamped] = {}
        self.unfinished: list[Stamped] = []

    def _route(self, source: str) -> Route:
        route = self.routes.get(source)
        if route is None:
            route = self.routes[source] = Route(source, self.block_size)
        return route

    def records(self) -> Iterator[Converted]:
        counts = self.read

        def parse(text: bytes, line_no: int, path: str) -> Stamped | None:
            return parse_line(text, line_no, path, counts)

        stream = time_ordered(
            self.files, parse, window_ns=self.window_ns,
            max_line_bytes=self.max_line_bytes, advance=self.advance,
        )  # fmt: skip
        for item in stream:
            event: Event = item.value
            if event.kind == GET:
                record = self._get(item, event)
                if record is not None:
                    yield record
            elif event.kind == START:
                earlier = self.pending.pop((event.source, event.session), None)
                if earlier is not None:
                    self.skipped["StartWriteCache restarted before its finish"] += 1
                    self.unfinished.append(earlier)
                self.pending[(event.source, event.session)] = item
            else:
                start = self.pending.pop((event.source, event.session), None)
                if start is None:
                    self.skipped["FinishWriteCache without a StartWriteCache"] += 1
                    continue
                record = self._write(start, item.time, "at the finish")
                if record is not None:
                    yield record

    def _get(self, item: Stamped, event: Event) -> Converted | None:
        if event.query_type != READ_QUERY_TYPE:
            self.skipped[f"GetCacheLocation with query_type {event.query_type}"] += 1
            return None
        if not event.keys:
            self.skipped["GetCacheLocation without keys"] += 1
            return None
        route = self._route(event.source)
        if route.instance is None:
            self.skipped[f"events of dropped source {event.source}"] += 1
            return None
        trace_id = event.event_id or f"{os.path.basename(item.path)}:{item.line_no}"
        self.written["gets"] += 1
        self.per_instance[route.instance] += 1
        return Converted(
            TraceEvent(
                item.line_no,
                "get",
                route.instance,
                trace_id,
                item.time,
                event.keys,
                len(event.keys) * route.block_size,
                event.mask,
            )  # fmt: skip
        )

    def _write(self, start: Stamped, time_ns: int, how: str) -> Converted | None:
        event: Event = start.value
        if not event.keys:
            self.skipped["StartWriteCache without keys"] += 1
            return None
        route = self._route(event.source)
        if route.instance is None:
            self.skipped[f"events of dropped source {event.source}"] += 1
            return None
        self.written[f"writes {how}"] += 1
        self.per_instance[route.instance] += 1
        return Converted(
            TraceEvent(
                start.line_no, "write", route.instance, event.session, time_ns, event.keys, 0
            )  # fmt: skip
        )

    def late(self) -> list[Converted]:
        starts = sorted([*self.unfinished, *self.pending.values()], key=lambda s: s.time)
        self.pending.clear()
        self.unfinished.clear()
        late = []
        for start in starts:
            record = self._write(start, start.time + UNFINISHED_WRITE_US * 1000,
                                 "at start + 100 ms (no finish)")  # fmt: skip
            if record is not None:
                late.append(record)
        return late

    def block_sizes(self) -> dict[str, int]:
        return {
            route.instance: route.block_size
            for route in self.routes.values()
            if route.instance is not None and route.instance in self.per_instance
        }

    def report(self) -> list[str]:
        read = ", ".join(f"{kind} {n}" for kind, n in sorted(self.read.items()))
        lines = [f"publisher-log: read {sum(self.read.values())} events ({read or 'none'})"]
        wrote = ", ".join(f"{n} {what}" for what, n in self.written.items())
        lines.append(f"publisher-log: wrote {wrote or 'nothing'}")
        if self.skipped:
            skipped = ", ".join(f"{n} {what}" for what, n in sorted(self.skipped.items()))
            lines.append(f"publisher-log: skipped {skipped}")
        others = {k: n for k, n in self.read.items() if k not in USED}
        if others:
            listing = ", ".join(f"{n} {kind}" for kind, n in sorted(others.items()))
            lines.append(f"publisher-log: skipped other event types: {listing}")
        instances = ", ".join(f"{name} ({n})" for name, n in sorted(self.per_instance.items()))
        lines.append(f"publisher-log: {len(self.per_instance)} instances: {instances}")
        return lines


class PublisherLog(Converter):
    """KVCacheManager event-publisher logs (see the module docstring)."""

    name = "publisher-log"
    options = ("block_size", "instance_map", "reorder_window_ms")
    required = ("block_size",)
    default_time_offset_ns = 0
    example = (
        b'{"id":"e1","source":"a","component":"cache_manager","type":"GetCacheLocation",'
        b'"trigger_time_us":1000,"query_type":"prefix_match","keys":[1,2],"tokens":[],'
        b'"block_mask":[],"sw_size":0,"location_spec_names":[]}\n'
        b'{"id":"e2","source":"a","component":"cache_manager","type":"StartWriteCache",'
        b'"trigger_time_us":1200,"write_session_id":"s1","keys":[1,2,3],"tokens":[],'
        b'"block_mask":[],"location_spec_group_names":[],"write_timeout_seconds":30}\n'
        b'{"id":"e3","source":"a","component":"cache_manager","type":"FinishWriteCache",'
        b'"trigger_time_us":1500,"write_session_id":"s1","success_block":[]}\n'
    )

    def sniff(self, obj: Mapping[str, Any]) -> bool:
        """A ``trigger_time_us`` or a ``write_session_id`` field."""
        return "trigger_time_us" in obj or "write_session_id" in obj

    def open(
        self,
        inputs: Sequence[str],
        *,
        max_line_bytes: int,
        advance: Callable[[int], object],
        block_size: int = 0,
        instance_map: str | None = None,
        reorder_window_ms: int = 1000,
        **options: Any,
    ) -> Conversion:
        """A conversion of ``inputs`` (files) with tokens per key ``block_size``."""
        routes: dict[str, Route] = {}
        if instance_map is not None:
            for source, (instance, size) in read_instance_map(instance_map).items():
                routes[source] = Route(instance, size or block_size)
        return PublisherConversion(
            inputs, routes, block_size, reorder_window_ms * 1_000_000, max_line_bytes, advance
        )


CONVERTER = PublisherLog()
