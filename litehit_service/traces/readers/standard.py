"""LiteHit's standard trace JSONL: reading, one line at a time, and writing.

One object per line, blank lines skipped, unknown fields ignored (a converter may add
optional fields such as ``chat_id``):

- ``type``: ``"get"`` | ``"request"`` | ``"write"``;
- ``instance_id``: non-empty string (required);
- ``trace_id``: string (optional; default: the line number as a string);
- ``timestamp_ns``: integer > 0, or ``timestamp_us``: integer > 0 (x 1000); exactly one, and
  the value in nanoseconds must fit in int64;
- ``keys``: array of int64 integers, one per complete block (booleans are rejected);
- ``input_len``: integer > 0, required for get/request; optional for write (integer >= 0,
  default 0);
- ``block_mask`` (get/request, optional): an integer in [0, len(keys)] (the first n blocks
  are already local) or an array of booleans, one per key;
- ``ttl_us`` (write/request, optional): an integer > 0 (this write's TTL in microseconds),
  0 (the group's default) or -1 (never expires).

The last two matter to the policy replay (``litehit optimize``) only.

Errors and the line loop: :mod:`~litehit_service.traces.readers.jsonl`. Cost: O(bytes);
per key a C-level type and range check; memory O(longest line).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

from orjson import dumps

from litehit_core import LocatedError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes
from litehit_service.traces.readers.jsonl import (
    MISSING,
    bad_field,
    check_int64_array,
    decode_object,
    iter_events,
    positive_int,
    require,
)
from litehit_service.traces.readers.records import (
    EVENT_KINDS,
    INT64_MAX,
    LineParser,
    TraceEvent,
    TraceReader,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "READER",
    "StandardReader",
    "format_standard_event",
    "parse_standard_line",
    "read_standard",
]

DEFAULT_BLOCK_SIZE = 256
"""Tokens per key of a standard trace when nobody says (the trace does not): a replay
config's default ``block_size``."""


def parse_standard_line(text: bytes | str, line_no: int, path: str) -> TraceEvent | None:
    """Parse one line (UTF-8 bytes or text) of a standard trace; ``None`` for a blank line.

    Raises :class:`LocatedError` naming the field and value for any rule in the module
    docstring. O(len(text)).
    """
    try:
        return _standard_event(text, line_no, path, False)
    except LocatedError:
        return _standard_event(text, line_no, path, True)  # report exact values


def _standard_event(text: bytes | str, line_no: int, path: str, exact: bool) -> TraceEvent | None:
    obj = decode_object(text, line_no, path, exact)
    if obj is None:
        return None

    kind = require(obj, "type", line_no, path)
    if type(kind) is not str or kind not in EVENT_KINDS:
        raise bad_field(path, line_no, "type", "one of 'get', 'request', 'write'", kind)

    instance_id = require(obj, "instance_id", line_no, path)
    if type(instance_id) is not str or not instance_id:
        raise bad_field(path, line_no, "instance_id", "a non-empty string", instance_id)

    trace_id = obj.get("trace_id", MISSING)
    if trace_id is MISSING:
        trace_id = str(line_no)
    elif type(trace_id) is not str:
        raise bad_field(path, line_no, "trace_id", "a string", trace_id)

    ts_ns = obj.get("timestamp_ns", MISSING)
    ts_us = obj.get("timestamp_us", MISSING)
    if ts_ns is not MISSING:
        if ts_us is not MISSING:
            raise LocatedError(
                path, line_no, "give exactly one of 'timestamp_ns' and 'timestamp_us', not both"
            )
        if not positive_int(ts_ns) or ts_ns > INT64_MAX:
            raise bad_field(path, line_no, "timestamp_ns", "an integer in [1, 2**63-1]", ts_ns)
    elif ts_us is not MISSING:
        if not positive_int(ts_us) or ts_us * 1000 > INT64_MAX:
            raise bad_field(
                path, line_no, "timestamp_us", "an integer in [1, (2**63-1) // 1000]", ts_us
            )
        ts_ns = ts_us * 1000
    else:
        raise LocatedError(
            path, line_no, "missing required field 'timestamp_ns' (or 'timestamp_us')"
        )

    keys = require(obj, "keys", line_no, path)
    if type(keys) is not list:
        raise bad_field(path, line_no, "keys", "an array of int64 integers", keys)
    if keys:
        check_int64_array(keys, "keys", line_no, path, text)

    input_len = obj.get("input_len", MISSING)
    if kind == "write":
        if input_len is MISSING:
            input_len = 0
        elif type(input_len) is not int or input_len < 0:
            raise bad_field(path, line_no, "input_len", "an integer >= 0", input_len)
    elif input_len is MISSING:
        raise LocatedError(
            path, line_no, f"missing required field 'input_len' (required for type {kind!r})"
        )
    elif not positive_int(input_len):
        raise bad_field(path, line_no, "input_len", "an integer > 0", input_len)

    block_mask = obj.get("block_mask")
    if block_mask is not None:
        block_mask = _block_mask(block_mask, kind, len(keys), line_no, path)
    ttl_us = obj.get("ttl_us", 0)
    if ttl_us != 0 or type(ttl_us) is not int:
        if kind == "get":
            raise bad_field(
                path, line_no, "ttl_us", "absent on a get (a get writes nothing)", ttl_us
            )
        if type(ttl_us) is not int or ttl_us < -1 or ttl_us > INT64_MAX // 1000:
            raise bad_field(path, line_no, "ttl_us", "an integer > 0, 0 or -1", ttl_us)
    return TraceEvent(
        line_no=line_no,
        kind=kind,
        instance_id=instance_id,
        trace_id=trace_id,
        timestamp_ns=ts_ns,
        keys=keys,
        input_len=input_len,
        block_mask=block_mask,
        ttl_us=ttl_us,
    )


def _block_mask(
    value: Any, kind: str, n_keys: int, line_no: int, path: str
) -> int | tuple[bool, ...]:
    """A read's ``block_mask``: an int in [0, n_keys] or one boolean per key."""
    if kind == "write":
        raise bad_field(
            path, line_no, "block_mask", "absent on a write (a mask is for reads)", value
        )
    if type(value) is int:
        if not 0 <= value <= n_keys:
            raise bad_field(
                path,
                line_no,
                "block_mask",
                f"an integer in [0, {n_keys}] (the number of keys)",
                value,
            )
        return value
    if type(value) is list and len(value) == n_keys and all(type(v) is bool for v in value):
        return tuple(value)
    raise bad_field(
        path,
        line_no,
        "block_mask",
        f"an integer or an array of {n_keys} booleans (one per key)",
        value,
    )


def read_standard(
    path: str | os.PathLike[str], *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[TraceEvent]:
    """Iterate the events of a standard trace file in file order (blank lines skipped).

    Lazy and fail-fast: events before a bad line (or a line longer than ``max_line_bytes``
    bytes) are yielded, then :class:`LocatedError` is raised; ``ValueError`` at call time
    for a ``max_line_bytes`` that is not an integer > 0. O(file size); memory O(longest
    line), at most ``max_line_bytes + 1`` bytes of it.
    """
    check_max_line_bytes(max_line_bytes)
    return iter_events(os.fspath(path), parse_standard_line, max_line_bytes)


def format_standard_event(
    event: TraceEvent, timestamp_ns: int | None = None, extra: str = ""
) -> str:
    """One standard JSONL line (with ``"\\n"``) for ``event``.

    Compact JSON with keys in the order type, instance_id, trace_id, timestamp_ns, keys,
    input_len (then block_mask and ttl_us when set, then ``extra``: ``""`` or
    ``',"name":value...'``, optional fields readers ignore) -- byte-identical to
    ``json.dumps(obj, separators=(",", ":"))`` of that dict.
    ``timestamp_ns`` overrides the event's timestamp. O(len(keys)).
    """
    ts = event.timestamp_ns if timestamp_ns is None else timestamp_ns
    fields = ""
    if event.block_mask is not None:
        fields += f',"block_mask":{json.dumps(event.block_mask, separators=(",", ":"))}'
    if event.ttl_us:
        fields += f',"ttl_us":{event.ttl_us}'
    fields += extra
    return (
        f'{{"type":"{event.kind}","instance_id":{json.dumps(event.instance_id)},'
        f'"trace_id":{json.dumps(event.trace_id)},"timestamp_ns":{ts},'
        f'"keys":{dumps(event.keys).decode()},"input_len":{event.input_len}{fields}}}\n'
    )


class StandardReader(TraceReader):
    """LiteHit's standard trace JSONL (``get`` / ``request`` / ``write`` records, ns
    timestamps, int64 keys per complete block; see the module docstring). No options; read
    lazily in file order, line by line. O(bytes)."""

    name = "standard"
    default_block_size = DEFAULT_BLOCK_SIZE
    columnar = True
    example = (
        b'{"type":"request","instance_id":"a","trace_id":"r1","timestamp_ns":1000,'
        b'"keys":[1,2],"input_len":1100}\n'
        b"\n"
        b'{"type":"get","instance_id":"b","timestamp_us":2,"keys":[-1],"input_len":512}\n'
        b'{"type":"write","instance_id":"b","timestamp_ns":3000,"keys":[-1,7]}\n'
    )

    def read(
        self,
        path: str | os.PathLike[str],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> Iterator[TraceEvent]:
        """:func:`read_standard`."""
        return read_standard(path, max_line_bytes=max_line_bytes)

    def sniff(self, obj: Mapping[str, Any]) -> bool:
        """A ``keys`` field and a ``type`` field that is a standard kind (a publisher
        log's events have both fields with other types)."""
        return "keys" in obj and obj.get("type") in EVENT_KINDS

    def line_parser(self, **options: Any) -> LineParser:
        """:func:`parse_standard_line` (no options)."""
        return parse_standard_line

    def column_source(
        self,
        path: str,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        chunk_bytes: int | None = None,
        **options: Any,
    ) -> Any:
        """JSONL (plain or compressed) or Parquet by columns:
        :func:`~litehit_service.traces.readers.columns.standard_chunks` and
        :func:`~litehit_service.traces.readers.columns.standard_columns` (no options)."""
        from litehit_service.traces.readers.columns import (
            ColumnSource,
            standard_chunks,
            standard_columns,
        )

        unit, total, chunks = standard_chunks(path, max_line_bytes, chunk_bytes)
        return ColumnSource(unit, total, chunks, standard_columns, parse_standard_line)


READER = StandardReader()
