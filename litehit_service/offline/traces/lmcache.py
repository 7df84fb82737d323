"""Trace readers: the standard LiteHit JSONL, Mooncake FAST'25 and LMCache lookup-hash logs.

Every reader turns a file into :class:`TraceEvent` tuples and fails fast: the first bad line
raises :class:`LocatedError` whose text is exactly ``"{path}:{line_no}: {reason}"`` (the
reason names the field and the offending value). ``line_no`` is 1-based; 0 means the error
concerns the file or directory as a whole. Files are read as UTF-8 (a leading BOM is
skipped); bytes that are not UTF-8 are reported with their exact line. A line longer than
``max_line_bytes`` (a keyword of every reader; default
:data:`~litehit_core.lines.DEFAULT_MAX_LINE_BYTES`, 64 MiB) is an error at its line, found
without reading the line whole (:mod:`litehit_core.lines`). Lines are read as bytes and
parsed as bytes (orjson takes them directly); the parsers accept ``str`` as well.

Standard trace JSONL, one object per line, blank lines skipped, unknown fields ignored:

- ``type``: ``"get"`` | ``"request"`` | ``"write"``;
- ``instance_id``: non-empty string (required);
- ``trace_id``: string (optional; default: the line number as a string);
- ``timestamp_ns``: integer > 0, or ``timestamp_us``: integer > 0 (x 1000); exactly one, and
  the value in nanoseconds must fit in int64;
- ``keys``: array of int64 integers, one per complete block (booleans are rejected);
- ``input_len``: integer > 0, required for get/request; optional for write (integer >= 0,
  default 0).

Costs: every reader is O(total bytes); the per-key work is a C-level type and range check;
memory O(longest line) (at most ``max_line_bytes + 1`` bytes of a line) plus, for LMCache,
the events (they are sorted).
"""

from __future__ import annotations

import array
import gc
import json
import math
import os
import re
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from functools import partial
from itertools import accumulate, compress, repeat
from operator import add, eq, floordiv, getitem, itemgetter, mod, mul, sub
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import orjson

from litehit_core import LocatedError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes, read_lines

__all__ = [
    "parse_lines",
    "EVENT_KINDS",
    "INT64_MAX",
    "INT64_MIN",
    "LMCacheTrace",
    "ModelInfo",
    "TraceEvent",
    "dtype_size",
    "format_standard_event",
    "parse_mooncake_line",
    "parse_standard_line",
    "read_lmcache",
    "read_mooncake",
    "read_standard",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_MASK64 = 2**64 - 1

EVENT_KINDS = ("get", "request", "write")
"""Event types of the standard format, in documentation order."""


class TraceEvent(NamedTuple):
    """One trace line: a request (``get``/``request``) or a write-back (``write``).

    ``timestamp_ns`` is in nanoseconds; ``keys`` are the int64 keys of complete blocks at the
    trace's native granularity; ``input_len`` is the prompt length in tokens (0 for a write
    without one). ``line_no`` is the 1-based line in the source file.
    """

    line_no: int
    kind: str
    instance_id: str
    trace_id: str
    timestamp_ns: int
    keys: list[int]
    input_len: int


class ModelInfo(NamedTuple):
    """Per-model facts of an LMCache log: tokens per chunk and KV bytes per chunk."""

    chunk_size: int
    bytes_per_chunk: int


class LMCacheTrace(NamedTuple):
    """Result of :func:`read_lmcache`.

    ``events``: every kept event sorted by timestamp (stable: ties keep file, then line,
    order); ``models``: model name -> :class:`ModelInfo` of the kept models; ``files``: the
    files read, in reading order.
    """

    events: list[TraceEvent]
    models: dict[str, ModelInfo]
    files: list[str]


# --------------------------------------------------------------------------- helpers

_MISSING: Any = object()
_INT_ONLY = frozenset({int})
_raw_decode = json.JSONDecoder().raw_decode
_orjson_loads = orjson.loads
_BLANK = object()  # marks a blank line (``null`` is a value, not a blank)
_R, _F = ord("r"), ord("f")  # a byte of "true", of "false" (see _check_int64_array)
_JSON_WS = " \t\n\r"
_JSON_TYPE_NAMES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


def _show(value: Any, limit: int = 80) -> str:
    """A JSON rendering of ``value`` for error messages, cut to ``limit`` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def open_trace(path: str) -> BinaryIO:
    """Open a trace file for reading bytes; a file that cannot be opened is a LocatedError at
    line 0. Its lines come from :func:`trace_lines`."""
    try:
        return open(path, "rb")
    except OSError as exc:
        raise LocatedError(path, 0, f"cannot read the trace: {exc.strerror or exc}") from None


def trace_lines(fh: BinaryIO, path: str, max_line_bytes: int) -> Iterator[list[bytes]]:
    """The lines of an open trace, one list per chunk (:func:`litehit_core.lines.read_lines`:
    a leading BOM skipped, endings kept, a line over ``max_line_bytes`` an error at its line
    after every line before it). UTF-8 is checked per line by the parsing loop
    (:func:`check_utf8`), so an invalid byte is reported at its own line. O(bytes)."""
    return read_lines(fh, path, max_line_bytes, skip_bom=True)


def _lines(fh: BinaryIO, path: str, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_no, line)`` and reject lines holding bytes that are not UTF-8. O(bytes)."""
    line_no = 0
    for lines in trace_lines(fh, path, max_line_bytes):
        for line in lines:
            line_no += 1
            if not line.isascii():
                check_utf8(line, line_no, path)
            yield line_no, line


def check_utf8(text: bytes | str, line_no: int, path: str) -> None:
    """Reject a line that holds bytes not valid UTF-8 (``bytes``, or ``str`` read with
    ``surrogateescape``), naming the column (in characters) of the first bad byte. O(len)."""
    if type(text) is str:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            column = exc.start + 1
        else:
            return
    else:
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as exc:
            column = len(text[: exc.start].decode("utf-8")) + 1
        else:
            return
    raise LocatedError(path, line_no, f"not valid UTF-8 (bad byte at column {column})")


def _decode_object(
    text: bytes | str, line_no: int, path: str, exact: bool = False
) -> dict[str, Any] | None:
    """Parse one JSONL line (bytes or text) into a dict; ``None`` for a blank line.
    O(len(text)).

    orjson parses well-formed lines (5x faster than :mod:`json`); anything it refuses
    (blank lines, syntax errors, NaN) takes the :mod:`json` path, which names syntax errors
    by column. orjson turns integers beyond int64 (negative) or uint64 into floats, so a
    line that then fails a field check is parsed again with ``exact=True`` (:mod:`json`,
    exact integers) to report the value as written; see :func:`parse_standard_line`.
    """
    if exact:
        obj = _decode_careful(text, line_no, path)
    else:
        try:
            obj = _orjson_loads(text)
        except orjson.JSONDecodeError:
            obj = _decode_careful(text, line_no, path)
    if obj is _BLANK:
        return None
    if type(obj) is not dict:
        kind = _JSON_TYPE_NAMES.get(type(obj), type(obj).__name__)
        raise LocatedError(path, line_no, f"expected a JSON object, got {kind} {_show(obj)}")
    return obj


def _decode_careful(text: bytes | str, line_no: int, path: str) -> Any:
    """The :mod:`json` parse of one line with exact error columns (in characters);
    ``_BLANK`` when blank."""
    if type(text) is not str:
        text = text.decode("utf-8", "surrogateescape")
    try:
        obj, end = _raw_decode(text)
    except json.JSONDecodeError:
        # Leading whitespace, a blank line or a real syntax error: take the careful path.
        if not text.strip(_JSON_WS):
            return _BLANK
        try:
            obj = json.loads(text.rstrip(_JSON_WS))  # keep the error on line 1
        except json.JSONDecodeError as exc:
            raise LocatedError(
                path, line_no, f"invalid JSON: {exc.msg} at column {exc.colno}"
            ) from None
        except RecursionError:
            raise LocatedError(path, line_no, "invalid JSON: nested too deeply") from None
    except RecursionError:
        raise LocatedError(path, line_no, "invalid JSON: nested too deeply") from None
    else:
        if end != len(text):
            rest = text[end:]
            extra = rest.lstrip(_JSON_WS)
            if extra:
                column = end + len(rest) - len(extra) + 1
                raise LocatedError(path, line_no, f"invalid JSON: extra data at column {column}")
    return obj


def _require(obj: dict[str, Any], field: str, line_no: int, path: str) -> Any:
    value = obj.get(field, _MISSING)
    if value is _MISSING:
        raise LocatedError(path, line_no, f"missing required field {field!r}")
    return value


def _bad(path: str, line_no: int, field: str, expected: str, value: Any) -> LocatedError:
    return LocatedError(path, line_no, f"field {field!r} must be {expected}; got {_show(value)}")


def _check_int64_array(
    values: list[Any], field: str, line_no: int, path: str, text: bytes | str
) -> None:
    """Raise unless every element of ``values`` (decoded from the JSON line ``text``) is an
    integer, not a boolean, within int64.

    O(n) in C: packing into an ``array('q')`` rejects every non-integer JSON value and every
    out-of-range integer; booleans (an ``int`` subclass) can only be present when the line
    contains a ``true``/``false`` literal, so only such lines pay an extra ``type`` pass.
    Python-level work happens only to locate the first offending element of a bad line.
    For bytes, a one-byte ``memchr`` for ``r`` / ``f`` first (absent from Mooncake lines)
    skips most substring searches, which cost more on bytes than on str.
    """
    try:
        array.array("q", values)
    except (TypeError, OverflowError):
        pass
    else:
        if type(text) is str:
            literal = "true" in text or "false" in text
        else:
            literal = (_R in text and b"true" in text) or (_F in text and b"false" in text)
        if not literal or _INT_ONLY.issuperset(map(type, values)):
            return
    for i, v in enumerate(values):
        if type(v) is not int:
            raise LocatedError(
                path, line_no, f"{field}[{i}] must be an int64 integer; got {_show(v)}"
            )
        if not INT64_MIN <= v <= INT64_MAX:
            raise LocatedError(
                path,
                line_no,
                f"{field}[{i}] is outside the int64 range [{INT64_MIN}, {INT64_MAX}]; got {v}",
            )
    raise AssertionError("unreachable: array('q') rejected a valid int64 array")


def _positive_int(value: Any) -> bool:
    return type(value) is int and value > 0


# --------------------------------------------------------------------------- standard


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
    obj = _decode_object(text, line_no, path, exact)
    if obj is None:
        return None

    kind = _require(obj, "type", line_no, path)
    if type(kind) is not str or kind not in EVENT_KINDS:
        raise _bad(path, line_no, "type", "one of 'get', 'request', 'write'", kind)

    instance_id = _require(obj, "instance_id", line_no, path)
    if type(instance_id) is not str or not instance_id:
        raise _bad(path, line_no, "instance_id", "a non-empty string", instance_id)

    trace_id = obj.get("trace_id", _MISSING)
    if trace_id is _MISSING:
        trace_id = str(line_no)
    elif type(trace_id) is not str:
        raise _bad(path, line_no, "trace_id", "a string", trace_id)

    ts_ns = obj.get("timestamp_ns", _MISSING)
    ts_us = obj.get("timestamp_us", _MISSING)
    if ts_ns is not _MISSING:
        if ts_us is not _MISSING:
            raise LocatedError(
                path, line_no, "give exactly one of 'timestamp_ns' and 'timestamp_us', not both"
            )
        if not _positive_int(ts_ns) or ts_ns > INT64_MAX:
            raise _bad(path, line_no, "timestamp_ns", "an integer in [1, 2**63-1]", ts_ns)
    elif ts_us is not _MISSING:
        if not _positive_int(ts_us) or ts_us * 1000 > INT64_MAX:
            raise _bad(path, line_no, "timestamp_us", "an integer in [1, (2**63-1) // 1000]", ts_us)
        ts_ns = ts_us * 1000
    else:
        raise LocatedError(
            path, line_no, "missing required field 'timestamp_ns' (or 'timestamp_us')"
        )

    keys = _require(obj, "keys", line_no, path)
    if type(keys) is not list:
        raise _bad(path, line_no, "keys", "an array of int64 integers", keys)
    if keys:
        _check_int64_array(keys, "keys", line_no, path, text)

    input_len = obj.get("input_len", _MISSING)
    if kind == "write":
        if input_len is _MISSING:
            input_len = 0
        elif type(input_len) is not int or input_len < 0:
            raise _bad(path, line_no, "input_len", "an integer >= 0", input_len)
    elif input_len is _MISSING:
        raise LocatedError(
            path, line_no, f"missing required field 'input_len' (required for type {kind!r})"
        )
    elif not _positive_int(input_len):
        raise _bad(path, line_no, "input_len", "an integer > 0", input_len)

    return TraceEvent(
        line_no=line_no,
        kind=kind,
        instance_id=instance_id,
        trace_id=trace_id,
        timestamp_ns=ts_ns,
        keys=keys,
        input_len=input_len,
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
    return _iter_standard(os.fspath(path), max_line_bytes)


def _iter_standard(p: str, max_line_bytes: int) -> Iterator[TraceEvent]:
    with open_trace(p) as fh:
        for line_no, text in _lines(fh, p, max_line_bytes):
            event = parse_standard_line(text, line_no, p)
            if event is not None:
                yield event


def parse_lines(
    lines: Sequence[bytes] | Sequence[str],
    first_line_no: int,
    path: str,
    trace_format: str,
    block_size: int,
    instance_id: str,
    plain: bool = False,
) -> tuple[list[Any], LocatedError | None]:
    """Parse consecutive trace lines (``first_line_no`` is the first one's 1-based number).

    Returns the events before the first bad line and that line's error (or None); blank
    lines are skipped; lines are UTF-8 bytes as read (or text), with or without endings.
    ``trace_format`` is "standard" or "mooncake" (``block_size`` and ``instance_id`` only
    apply to Mooncake). ``plain`` returns plain tuples (cheaper to send between processes)
    instead of TraceEvents. The one line loop of the Mooncake and standard readers that work
    in batches (``litehit replay``, also in worker processes, and ``litehit convert``).
    O(total length).
    """
    out: list[Any] = []
    append = out.append
    line_no = first_line_no
    try:
        if trace_format == "mooncake":
            for line_no, text in enumerate(lines, first_line_no):  # noqa: B007
                if not text.isascii():
                    check_utf8(text, line_no, path)
                ev = parse_mooncake_line(text, line_no, path, block_size, instance_id)
                if ev is not None:
                    append(tuple(ev) if plain else ev)
        else:
            for line_no, text in enumerate(lines, first_line_no):  # noqa: B007
                if not text.isascii():
                    check_utf8(text, line_no, path)
                ev = parse_standard_line(text, line_no, path)
                if ev is not None:
                    append(tuple(ev) if plain else ev)
    except LocatedError as exc:
        return out, exc
    except RecursionError:
        return out, LocatedError(path, line_no, "invalid JSON: nested too deeply")
    return out, None


def format_standard_event(event: TraceEvent, timestamp_ns: int | None = None) -> str:
    """One standard JSONL line (with ``"\\n"``) for ``event``.

    Compact JSON with keys in the order type, instance_id, trace_id, timestamp_ns, keys,
    input_len -- byte-identical to ``json.dumps(obj, separators=(",", ":"))`` of that dict.
    ``timestamp_ns`` overrides the event's timestamp. O(len(keys)).
    """
    ts = event.timestamp_ns if timestamp_ns is None else timestamp_ns
    return (
        f'{{"type":"{event.kind}","instance_id":{json.dumps(event.instance_id)},'
        f'"trace_id":{json.dumps(event.trace_id)},"timestamp_ns":{ts},'
        f'"keys":[{",".join(map(str, event.keys))}],"input_len":{event.input_len}}}\n'
    )


# --------------------------------------------------------------------------- Mooncake


def parse_mooncake_line(
    text: bytes | str,
    line_no: int,
    path: str,
    block_size: int = 512,
    instance_id: str = "default",
) -> TraceEvent | None:
    """Parse one Mooncake FAST'25 line (UTF-8 bytes or text) into a ``request`` event;
    ``None`` for a blank line.

    Fields: ``timestamp`` (milliseconds, relative, >= 0; integer, or a finite number rounded
    to the nearest ns), ``input_length`` (tokens, integer > 0), ``hash_ids`` (int64 ids, one
    per ``block_size`` tokens *including* the partial last block). Keeps the first
    ``input_length // block_size`` ids. ``hash_ids`` must have between that many and
    ``ceil(input_length / block_size)`` entries (more means a wrong ``block_size``).
    ``output_length`` and unknown fields are ignored. ``trace_id`` is the line number.
    ``block_size`` must be > 0 (the caller's job; :func:`read_mooncake` checks it).
    O(len(text)); per key only a slice plus a C-level type/range check.
    """
    try:
        return _mooncake_event(text, line_no, path, block_size, instance_id, False)
    except LocatedError:
        return _mooncake_event(text, line_no, path, block_size, instance_id, True)


def _mooncake_event(
    text: bytes | str, line_no: int, path: str, block_size: int, instance_id: str, exact: bool
) -> TraceEvent | None:
    obj = _decode_object(text, line_no, path, exact)
    if obj is None:
        return None
    try:
        ts = obj["timestamp"]
        input_len = obj["input_length"]
        hash_ids = obj["hash_ids"]
    except KeyError as exc:
        raise LocatedError(path, line_no, f"missing required field {exc.args[0]!r}") from None

    if type(ts) is int and ts >= 0:
        ts_ns = ts * 1_000_000
    elif type(ts) is float and math.isfinite(ts) and ts >= 0:
        ts_ns = round(ts * 1_000_000)
    else:
        raise _bad(path, line_no, "timestamp", "a number of milliseconds >= 0", ts)
    if ts_ns > INT64_MAX:
        raise _bad(path, line_no, "timestamp", "at most (2**63-1) ns in milliseconds", ts)
    if not _positive_int(input_len):
        raise _bad(path, line_no, "input_length", "an integer > 0", input_len)
    if type(hash_ids) is not list:
        raise _bad(path, line_no, "hash_ids", "an array of int64 integers", hash_ids)

    n_full = input_len // block_size
    n_ids = len(hash_ids)
    if n_ids < n_full or n_ids > n_full + (input_len % block_size > 0):
        n_max = n_full + (input_len % block_size > 0)
        raise LocatedError(
            path,
            line_no,
            f"field 'hash_ids' has {n_ids} entries but input_length {input_len} with "
            f"block_size {block_size} needs {n_full} complete blocks (at most {n_max} ids "
            f"including the partial last block); is the block size right?",
        )
    keys = hash_ids[:n_full]
    if keys:
        _check_int64_array(keys, "hash_ids", line_no, path, text)
    return TraceEvent(
        line_no=line_no,
        kind="request",
        instance_id=instance_id,
        trace_id=str(line_no),
        timestamp_ns=ts_ns,
        keys=keys,
        input_len=input_len,
    )


def _check_block_size(block_size: int) -> None:
    if type(block_size) is not int or block_size <= 0:
        raise ValueError(f"block_size must be an integer > 0, got {block_size!r}")


def read_mooncake(
    path: str | os.PathLike[str],
    block_size: int = 512,
    instance_id: str = "default",
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[TraceEvent]:
    """Iterate a Mooncake FAST'25 trace as ``request`` events (see :func:`parse_mooncake_line`).

    Blank lines are skipped; timestamps are converted ms -> ns (0 is kept: the standard
    format's ``timestamp_ns > 0`` is the converter's job). Arguments are checked at call time
    (``ValueError``); lines lazily, fail-fast (a line longer than ``max_line_bytes`` bytes
    is an error at its line). O(file size); ~12k lines parse in tens of ms.
    """
    _check_block_size(block_size)
    if type(instance_id) is not str or not instance_id:
        raise ValueError(f"instance_id must be a non-empty string, got {instance_id!r}")
    check_max_line_bytes(max_line_bytes)
    return _iter_mooncake(os.fspath(path), block_size, instance_id, max_line_bytes)


def _iter_mooncake(
    path: str, block_size: int, instance_id: str, max_line_bytes: int
) -> Iterator[TraceEvent]:
    parse = parse_mooncake_line
    with open_trace(path) as fh:
        for line_no, text in _lines(fh, path, max_line_bytes):
            event = parse(text, line_no, path, block_size, instance_id)
            if event is not None:
                yield event


# --------------------------------------------------------------------------- LMCache

_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "fp8": 1,
    "int8": 1,
    "uint8": 1,
}
_HEX_RE = re.compile(r"(?:0[xX])?[0-9a-fA-F]+")
_JSON_WS_BYTES = b" \t\n\r"
_BEFORE_KEY = frozenset(b" \t\n\r,{")  # a byte that may precede an object key's quote
_NS_PER_S = 1_000_000_000
_TS_MAX_FAST = 9_223_372_035.0  # seconds; below it every ns value fits in int64
_POW10 = tuple(10**k for k in range(11))
_BIG_ENDIAN = sys.byteorder == "big"
_orjson_dumps = orjson.dumps
_new_event = partial(tuple.__new__, TraceEvent)  # TraceEvent from a 7-tuple, no checks
_LMC_SPEC = itemgetter("dtypes", "shapes")
_LAYOUTS = ((b'"chunk_hashes": [', b", "), (b'"chunk_hashes":[', b","))  # LMCache's; compact
_LAST3 = slice(-3, None)
_MIN_COLUMNS = 32  # a failed chunk is halved down to this many lines
_NUMBER_TYPES = frozenset({int, float})
_FLOAT_TYPE = frozenset({float})
_STR_TYPE = frozenset({str})
_LIST_TYPE = frozenset({list})
_LMC_FIELDS = itemgetter(
    "timestamp", "request_id", "model_name", "chunk_size", "seq_len", "chunk_hashes"
)


def dtype_size(name: str) -> int | None:
    """Bytes per element of a tensor dtype name, or ``None`` when unknown.

    Known: float32/fp32/float 4; float16/half/fp16/bfloat16/bf16 2; every float8 variant
    (``float8_e4m3fn``, ``float8_e5m2``, ... and ``fp8*``) 1; int8/uint8 1. A ``torch.``
    prefix is accepted. O(1).
    """
    base = name[6:] if name.startswith("torch.") else name
    size = _DTYPE_BYTES.get(base)
    if size is None and base.startswith(("float8_", "fp8_")):
        size = 1
    return size


def _hash_to_int64(text: str) -> int:
    """Low 64 bits of a hex string, as a signed int64. O(len(text))."""
    value = int(text, 16) & _MASK64
    return value - (1 << 64) if value > INT64_MAX else value


def _hashes_to_keys(hashes: list[Any], line_no: int, path: str) -> list[int]:
    """Every hash of one line as the signed int64 of its low 64 bits; a hash that is not a
    hex string (optional ``0x``/``0X``) is an error naming it.

    O(total characters), per hash one ``int(h, 16)``: the checks are C-level passes over
    the joined strings (ASCII letters and digits only: no sign, ``_`` or space, which
    ``int`` would accept); the 64-bit mapping packs the values into an ``array('Q')`` and
    reads its bytes back as ``'q'``. Only a line that fails them takes the per-hash path
    that names the first bad hash.
    """
    try:
        joined = "".join(hashes)
        if joined.isascii() and joined.isalnum():
            values = array.array("Q", [int(h, 16) for h in hashes])
            return memoryview(values).cast("B").cast("q").tolist()
    except (TypeError, ValueError, OverflowError):
        pass  # a non-string, a non-hex string, or a hash wider than 64 bits
    match = _HEX_RE.fullmatch
    for i, h in enumerate(hashes):
        if type(h) is not str or match(h) is None:
            raise _bad(path, line_no, f"chunk_hashes[{i}]", "a hex string (optional 0x)", h)
    return [_hash_to_int64(h) for h in hashes]


def _hex_records_to_keys(joined: bytes, n: int, width: int, sep: bytes) -> list[int] | None:
    """The keys of ``n`` JSON strings of ``width`` characters each (quotes excluded), each
    followed by ``sep``: hex digits, all with the ``0x`` or ``0X`` prefix of the first or
    none, as signed int64 low 64 bits; ``None`` unless ``joined`` is exactly that with an
    even number of hex digits per string.

    Vectorised: strided slices check the quotes, prefix and separators at their fixed
    offsets, numpy cuts out the digit columns, ``bytes.fromhex`` validates and converts
    them (it would skip whitespace, so the byte count is checked), and the low 8 bytes of
    each hash are read as big-endian int64. O(len(joined)) in C; no per-hash Python work.
    """
    stride = width + 2 + len(sep)
    if n <= 0 or len(joined) != n * stride:
        return None
    prefix = 2 if joined[1:3] in (b"0x", b"0X") else 0
    digits = width - prefix
    quotes = b'"' * n
    if (
        digits <= 0
        or digits % 2
        or joined[0::stride] != quotes
        or joined[width + 1 :: stride] != quotes
        or (prefix and joined[1::stride] != b"0" * n)
        or (prefix and joined[2::stride] != joined[2:3] * n)
    ):
        return None
    for k, byte in enumerate(sep):
        if joined[width + 2 + k :: stride] != bytes((byte,)) * n:
            return None
    grid = np.frombuffer(joined, np.uint8).reshape(n, stride)
    try:
        raw = bytes.fromhex(grid[:, 1 + prefix : width + 1].tobytes().decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    size = digits // 2  # bytes per hash
    if len(raw) != n * size:
        return None  # whitespace inside a hash
    if size == 8:
        packed = array.array("q", raw)
        if not _BIG_ENDIAN:
            packed.byteswap()
        return packed.tolist()
    rows = np.frombuffer(raw, np.uint8).reshape(n, size)
    if size > 8:
        low = np.ascontiguousarray(rows[:, size - 8 :])
    else:
        low = np.zeros((n, 8), np.uint8)
        low[:, 8 - size :] = rows
    return low.view(">i8").ravel().tolist()


def _seconds_to_ns(seconds: int | float) -> int:
    """Seconds -> ns, rounded half-even from the shortest decimal form of the float.

    ``repr`` recovers the digits written in the log (for up to 17 significant digits), so
    ``1717000000.123456`` gives exactly ``1717000000123456000``; plain float arithmetic
    would be off by up to ~128 ns at epoch magnitudes. O(1).
    """
    if type(seconds) is int:
        return seconds * _NS_PER_S
    scaled = Decimal(repr(seconds)).scaleb(9)
    return int(scaled.to_integral_value(rounding=ROUND_HALF_EVEN))


def _many_seconds_to_ns(seconds: Sequence[float]) -> list[int]:
    """:func:`_seconds_to_ns` of many floats in [0, 2**63 ns) at once, exactly.

    ``repr`` of a float below 1e16 without an exponent is ``digits.digits``; when it has
    at most 9 decimals, the ns value is its digits without the dot times 10**(9 -
    decimals), exact. Everything is a C-level ``map`` (no per-value bytecode); values with
    an exponent or more decimals fall back to the Decimal path. O(n).
    """
    texts = list(map(repr, seconds))
    dots = list(map(str.find, texts, repeat(".")))
    if min(dots, default=0) < 0 or "e" in "".join(texts):
        return list(map(_seconds_to_ns, seconds))
    decimals = list(map(sub, map(len, texts), map(add, dots, repeat(1))))
    if max(decimals, default=0) > 9:
        return list(map(_seconds_to_ns, seconds))
    whole = map(int, map(str.replace, texts, repeat("."), repeat("")))
    return list(map(mul, whole, map(_POW10.__getitem__, map(sub, repeat(9), decimals))))


def _chunk_bytes(obj: dict[str, Any], line_no: int, path: str) -> int:
    """KV bytes of one chunk: sum over tensors of prod(shape) x dtype size. O(tensors)."""
    dtypes = _require(obj, "dtypes", line_no, path)
    shapes = _require(obj, "shapes", line_no, path)
    if type(dtypes) is not list or not dtypes or not all(type(d) is str for d in dtypes):
        raise _bad(path, line_no, "dtypes", "a non-empty array of strings", dtypes)
    if type(shapes) is not list or len(shapes) != len(dtypes):
        raise _bad(
            path, line_no, "shapes", f"an array of {len(dtypes)} shapes (one per dtype)", shapes
        )
    total = 0
    for i, (dtype, shape) in enumerate(zip(dtypes, shapes, strict=True)):
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
            raise _bad(path, line_no, f"shapes[{i}]", "an array of integers >= 0", shape)
        size = dtype_size(dtype)
        if size is None:
            raise LocatedError(
                path,
                line_no,
                f"field 'dtypes[{i}]' is an unknown dtype {_show(dtype)}; "
                "give the KV bytes per chunk explicitly (kv_bytes_per_chunk / "
                "--kv-bytes-per-chunk)",
            )
        total += math.prod(shape) * size
    if total <= 0:
        raise LocatedError(
            path,
            line_no,
            f"dtypes {_show(dtypes)} and shapes {_show(shapes)} give 0 bytes per chunk",
        )
    return total


def _parse_lmcache_line(
    text: bytes,
    line_no: int,
    path: str,
    model: str | None,
    kv_bytes_per_chunk: int | None,
) -> tuple[TraceEvent, ModelInfo | None] | None:
    """One LMCache lookup line -> (event, model info); model info is ``None`` when the line's
    model is filtered out (the line is still fully validated, except its dtypes). O(line).

    The reference parser: :func:`read_lmcache` takes it for every line its fast path does
    not take, and the fast path gives exactly what this gives. orjson parses first; a line
    it refuses or that fails a check is parsed again exactly (:func:`_decode_object`), so
    errors show values as written.
    """
    try:
        return _lmcache_line(text, line_no, path, model, kv_bytes_per_chunk, False)
    except LocatedError:
        return _lmcache_line(text, line_no, path, model, kv_bytes_per_chunk, True)


def _lmcache_line(
    text: bytes,
    line_no: int,
    path: str,
    model: str | None,
    kv_bytes_per_chunk: int | None,
    exact: bool,
) -> tuple[TraceEvent, ModelInfo | None] | None:
    obj = _decode_object(text, line_no, path, exact)
    if obj is None:
        return None

    ts = _require(obj, "timestamp", line_no, path)
    if not ((type(ts) is int and ts >= 0) or (type(ts) is float and math.isfinite(ts) and ts >= 0)):
        raise _bad(path, line_no, "timestamp", "a number of seconds >= 0", ts)
    ts_ns = _seconds_to_ns(ts)
    if ts_ns > INT64_MAX:
        raise _bad(path, line_no, "timestamp", "at most (2**63-1) ns in seconds", ts)

    request_id = obj.get("request_id", _MISSING)
    if request_id is _MISSING:
        request_id = f"{os.path.basename(path)}:{line_no}"
    elif type(request_id) is not str or not request_id:
        raise _bad(path, line_no, "request_id", "a non-empty string", request_id)

    model_name = _require(obj, "model_name", line_no, path)
    if type(model_name) is not str or not model_name:
        raise _bad(path, line_no, "model_name", "a non-empty string", model_name)

    chunk_size = _require(obj, "chunk_size", line_no, path)
    if not _positive_int(chunk_size):
        raise _bad(path, line_no, "chunk_size", "an integer > 0", chunk_size)
    seq_len = _require(obj, "seq_len", line_no, path)
    if not _positive_int(seq_len):
        raise _bad(path, line_no, "seq_len", "an integer > 0", seq_len)

    hashes = _require(obj, "chunk_hashes", line_no, path)
    if type(hashes) is not list:
        raise _bad(path, line_no, "chunk_hashes", "an array of hex strings", hashes)
    n_chunks = _check_hash_count(len(hashes), seq_len, chunk_size, line_no, path)
    keys = _hashes_to_keys(hashes, line_no, path)
    del keys[n_chunks:]  # the partial tail chunk's hash, if given

    event = TraceEvent(line_no, "request", model_name, request_id, ts_ns, keys, seq_len)
    if model is not None and model_name != model:
        return event, None
    if kv_bytes_per_chunk is not None:
        size = kv_bytes_per_chunk
    else:
        size = _chunk_bytes(obj, line_no, path)
    return event, ModelInfo(chunk_size, size)


def _check_hash_count(n_hashes: int, seq_len: int, chunk_size: int, line_no: int, path: str) -> int:
    """The number of complete chunks, ``seq_len // chunk_size``; raise unless ``n_hashes``
    is that, or one more when ``seq_len`` ends with a partial chunk (its hash). O(1)."""
    n_chunks = seq_len // chunk_size
    if n_hashes == n_chunks or (n_hashes == n_chunks + 1 and seq_len % chunk_size):
        return n_chunks
    reason = (
        f"field 'chunk_hashes' has {n_hashes} entries but seq_len {seq_len} // "
        f"chunk_size {chunk_size} = {n_chunks} complete chunks"
    )
    if n_hashes > n_chunks:
        reason += (
            f" ({n_chunks + 1} with the partial tail chunk's hash)"
            if seq_len % chunk_size
            else " (and no partial tail chunk)"
        )
    raise LocatedError(path, line_no, reason)


def _lmcache_files(path: str) -> list[str]:
    if os.path.isdir(path):
        files = sorted(str(p) for p in Path(path).glob("lookup_hashes_*.jsonl"))
        if not files:
            raise LocatedError(path, 0, "directory holds no lookup_hashes_*.jsonl files")
        return files
    return [path]


def _layout_of(text: bytes) -> tuple[bytes, bytes]:
    """The hash array's key and separator as laid out in ``text``: LMCache's
    (``json.dumps``: ``"chunk_hashes": [`` and ``", "``) unless only the compact form is
    there. O(len(text))."""
    if text.rfind(_LAYOUTS[0][0]) < 0 and text.rfind(_LAYOUTS[1][0]) >= 0:
        return _LAYOUTS[1]
    return _LAYOUTS[0]


def _hash_width(text: bytes, key: bytes, sep: bytes) -> int:
    """For :func:`_layout_runs`: the width of the line's hash strings when it is laid out
    for the column-wise path (``key`` last, strings of one width separated by ``sep``;
    0 without hashes), else -1. The same checks as :meth:`_LMCacheReader._columns` makes
    on a whole chunk, on one line. O(len(text))."""
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return -1
    k = text.rfind(key)
    end = len(text.rstrip(_JSON_WS_BYTES)) - 2
    start = k + len(key)
    if k <= 0 or text[k - 1] not in _BEFORE_KEY or text[end : end + 2] != b"]}" or end < start:
        return -1
    if end == start:
        return 0
    width = text.find(b'"', start + 1, end) - start - 1
    if width < 1 or text[start] != 0x22 or (end - start + len(sep)) % (width + 2 + len(sep)):
        return -1
    return width


def _layout_runs(lines: list[bytes]) -> list[tuple[int, int, bool]]:
    """``lines`` cut into ``(start, stop, alike)`` runs: maximal runs of lines laid out for
    the column-wise path with one hash width (``alike``), and single other lines. The
    fallback of a chunk that is not laid out alike (a blank line, another layout, mixed
    widths): so one odd line costs the reference parse of that line only. O(bytes), a
    Python step per line."""
    if not lines:
        return []
    key, sep = _layout_of(lines[0])
    runs: list[tuple[int, int, bool]] = []
    start, width = 0, 0  # the open run and its hash width (0: none seen yet)
    for i, text in enumerate(lines):
        w = _hash_width(text, key, sep)
        if w >= 0 and (w == 0 or width == 0 or w == width):
            width = width or w
            continue
        if i > start:
            runs.append((start, i, True))
        if w < 0:
            runs.append((i, i + 1, False))
            start, width = i + 1, 0
        else:
            start, width = i, w
    if start < len(lines):
        runs.append((start, len(lines), True))
    return runs


class _LMCacheReader:
    """The state of one :func:`read_lmcache` call: events and models so far.

    Lines come in chunks (:func:`trace_lines`, ~1 MiB). A chunk is first read column-wise
    (:meth:`_columns`): every step is a C-level ``map`` over its lines or one numpy/bytes
    pass, with no Python bytecode per line. It applies when every line is laid out as
    LMCache writes it -- ``"chunk_hashes": [...]}`` last, the hashes strings of one width
    -- and passes every check; then orjson parses each line without its hash array and
    :func:`_hex_records_to_keys` decodes the chunk's hashes at once. Otherwise nothing is
    changed and the chunk is split in halves, down to :data:`_MIN_COLUMNS` lines, below
    which each line goes through the reference parser :func:`_parse_lmcache_line`. The
    column-wise path gives exactly the reference parser's events (``tests/test_traces.py``
    compares them); errors always come from the reference path, so the first bad line of
    a file is the one reported, with the reference message.
    """

    def __init__(self, model: str | None, kv_bytes_per_chunk: int | None) -> None:
        self.model = model
        self.kv_bytes_per_chunk = kv_bytes_per_chunk
        self.events: list[TraceEvent] = []
        self.models: dict[str, ModelInfo] = {}
        self.first_seen: dict[str, str] = {}
        self.all_models: set[str] = set()
        self.column_lines = 0  # lines taken column-wise (the rest: the reference parser)

    def read(self, fh: BinaryIO, path: str, max_line_bytes: int) -> None:
        """Read one file into the events. O(bytes)."""
        line_no = 1
        for lines in trace_lines(fh, path, max_line_bytes):
            self._chunk(lines, line_no, path)
            line_no += len(lines)

    def _chunk(self, lines: list[bytes], first: int, path: str) -> None:
        """Lines ``first``, ``first + 1``, ... of ``path``: column-wise when possible; else
        the runs of lines laid out alike column-wise and the other lines one by one; else
        (the layout holds but a value does not) in halves, one by one below
        ``2 * _MIN_COLUMNS`` lines."""
        if not lines or self._columns(lines, first, path):
            return
        runs = _layout_runs(lines)
        if len(runs) == 1 and runs[0][2]:
            if len(lines) >= 2 * _MIN_COLUMNS:
                half = len(lines) // 2
                self._chunk(lines[:half], first, path)
                self._chunk(lines[half:], first + half, path)
                return
            runs = [(0, len(lines), False)]
        for start, stop, alike in runs:
            if alike:
                self._chunk(lines[start:stop], first + start, path)
            else:
                for line_no in range(first + start, first + stop):
                    self._line(lines[line_no - first], line_no, path)

    def _line(self, text: bytes, line_no: int, path: str) -> None:
        """One line through the reference parser; errors are raised here. O(line)."""
        if not text.isascii():
            check_utf8(text, line_no, path)
        parsed = _parse_lmcache_line(text, line_no, path, self.model, self.kv_bytes_per_chunk)
        if parsed is None:
            return
        event, info = parsed
        name = event.instance_id
        self.all_models.add(name)
        if info is None:
            return
        known = self.models.get(name)
        if known is None:
            self.models[name] = info
            self.first_seen[name] = f"{path}:{line_no}"
        elif known != info:
            field, now, then = (
                ("chunk_size", info.chunk_size, known.chunk_size)
                if known.chunk_size != info.chunk_size
                else ("bytes per chunk", info.bytes_per_chunk, known.bytes_per_chunk)
            )
            raise LocatedError(
                path,
                line_no,
                f"model {name!r}: {field} {now} differs from {then} "
                f"first seen at {self.first_seen[name]}",
            )
        self.events.append(event)

    def _columns(self, lines: list[bytes], first: int, path: str) -> bool:
        """Take the chunk column-wise, or return ``False`` having changed nothing. Never
        raises for bad input. O(chunk bytes), C-level: per line a few ``map`` steps and
        one orjson call on the line without its hashes; per hash no Python object but its
        key."""
        if not all(map(bytes.isascii, lines)):
            try:  # UTF-8 errors are the reference path's to report, at their line
                deque(map(bytes.decode, lines), maxlen=0)
            except UnicodeDecodeError:
                return False
        key, sep = _layout_of(lines[0])
        # Where the hash array starts and ends: the key's last occurrence, right after
        # "{", "," or whitespace, and a line ending with "]}" (then orjson parsing the rest
        # proves the key is the top-level object's last one; see read_lmcache).
        keys_at = list(map(bytes.rfind, lines, repeat(key)))
        if min(keys_at) <= 0 or not _BEFORE_KEY.issuperset(
            map(getitem, lines, map(sub, keys_at, repeat(1)))
        ):
            return False
        starts = list(map(add, keys_at, repeat(len(key))))
        if set(map(getitem, lines, repeat(_LAST3))) == {b"]}\n"}:
            ends = list(map(sub, map(len, lines), repeat(3)))
        else:  # other line endings, trailing whitespace, the file's last line
            stops = list(map(len, map(bytes.rstrip, lines, repeat(_JSON_WS_BYTES))))
            ends = list(map(sub, stops, repeat(2)))
            if set(map(getitem, lines, map(slice, ends, stops))) != {b"]}"}:
                return False
        if min(map(sub, ends, starts)) < 0:
            return False
        heads = map(getitem, lines, map(slice, repeat(None), starts))
        try:
            objs = list(map(_orjson_loads, map(add, heads, repeat(b"]}"))))
            rows = list(map(_LMC_FIELDS, objs))
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return False
        stamps, rids, names, chunk_sizes, seq_lens, empties = zip(*rows)
        if not (
            _NUMBER_TYPES.issuperset(map(type, stamps))
            and min(stamps) >= 0
            and max(stamps) < _TS_MAX_FAST
            and _STR_TYPE.issuperset(map(type, rids))
            and all(rids)
            and _STR_TYPE.issuperset(map(type, names))
            and all(names)
            and _INT_ONLY.issuperset(map(type, chunk_sizes))
            and min(chunk_sizes) > 0
            and _INT_ONLY.issuperset(map(type, seq_lens))
            and min(seq_lens) > 0
            and _LIST_TYPE.issuperset(map(type, empties))
            and not any(empties)
        ):
            return False

        # Hash arrays: n strings of one width, each but the last followed by ``sep``.
        arrays = list(map(getitem, lines, map(slice, starts, ends)))
        width = stride = 0
        counts: list[int] = [0] * len(lines)
        head = next(filter(None, arrays), None)
        if head is not None:
            width = head.find(b'"', 1) - 1
            stride = width + 2 + len(sep)
            if width < 1:
                return False
            lengths = map(len, arrays)
            if all(arrays):
                sized = list(map(add, lengths, repeat(len(sep))))
            else:  # an empty array has no separator after it either
                sized = list(map(add, lengths, map(mul, map(bool, arrays), repeat(len(sep)))))
            counts = list(map(floordiv, sized, repeat(stride)))
            if list(map(mul, counts, repeat(stride))) != sized:
                return False
        n_chunks = list(map(floordiv, seq_lens, chunk_sizes))
        extra = list(map(sub, counts, n_chunks))  # 1: the partial tail chunk's hash
        if not {0, 1}.issuperset(extra) or not all(
            map(mod, compress(seq_lens, extra), compress(chunk_sizes, extra))
        ):
            return False

        # The kept lines, their bytes per chunk and models.
        line_nos: Iterable[int] = range(first, first + len(lines))
        model = self.model
        if model is None:
            wanted: list[bool] | None = None
            kept_objs, kept_names, kept_sizes = objs, names, chunk_sizes
        else:
            wanted = list(map(eq, names, repeat(model)))
            kept_objs = list(compress(objs, wanted))
            kept_names = tuple(compress(names, wanted))
            kept_sizes = tuple(compress(chunk_sizes, wanted))
            line_nos = list(compress(line_nos, wanted))
        if self.kv_bytes_per_chunk is not None:
            sizes: Iterable[int] = repeat(self.kv_bytes_per_chunk)
        else:
            try:  # orjson's text tells 2 from 2.0 and true (== would not)
                specs = list(map(_orjson_dumps, map(_LMC_SPEC, kept_objs)))
                spec_sizes = {
                    spec: _chunk_bytes(kept_objs[specs.index(spec)], 0, path) for spec in set(specs)
                }
            except (KeyError, orjson.JSONEncodeError, LocatedError):
                return False
            sizes = list(map(spec_sizes.__getitem__, specs))
        new_models: dict[str, ModelInfo] = {}
        for name, chunk_size, size in dict.fromkeys(zip(kept_names, kept_sizes, sizes)):
            known = self.models.get(name) or new_models.get(name)
            if known is None:
                new_models[name] = ModelInfo(chunk_size, size)
            elif known != (chunk_size, size):
                return False  # the reference path raises it at its line

        # Keys, timestamps, and then the state changes.
        keys: list[int] = []
        total = sum(counts)
        if total:
            joined = sep.join([*filter(None, arrays), b""])
            decoded = _hex_records_to_keys(joined, total, width, sep)
            if decoded is None:
                return False
            keys = decoded
        starts = list(accumulate(counts, initial=0))
        per_line = map(keys.__getitem__, map(slice, starts, map(add, starts, n_chunks)))
        if wanted is not None:
            stamps = tuple(compress(stamps, wanted))
            rids = tuple(compress(rids, wanted))
            seq_lens = tuple(compress(seq_lens, wanted))
            per_line = compress(per_line, wanted)
        if _FLOAT_TYPE.issuperset(map(type, stamps)):
            ns = _many_seconds_to_ns(stamps)
        else:
            ns = list(map(_seconds_to_ns, stamps))
        self.all_models.update(names)
        kept_line_nos = list(line_nos)
        for name, info in new_models.items():
            self.models[name] = info
            self.first_seen[name] = f"{path}:{kept_line_nos[kept_names.index(name)]}"
        rows_out = zip(kept_line_nos, repeat("request"), kept_names, rids, ns, per_line, seq_lens)
        self.events += map(_new_event, rows_out)
        self.column_lines += len(lines)
        return True


def read_lmcache(
    path_or_dir: str | os.PathLike[str],
    model: str | None = None,
    kv_bytes_per_chunk: int | None = None,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> LMCacheTrace:
    """Read LMCache lookup-hash logs: one JSONL file, or every ``lookup_hashes_*.jsonl`` of a
    directory (in file-name order), merged and stably sorted by timestamp.

    Fields per line: ``timestamp`` (seconds, >= 0 -> ns rounded to nearest), ``request_id``
    (-> trace_id; optional, default ``"<file name>:<line>"``), ``model_name`` (-> instance_id),
    ``chunk_size`` (tokens, > 0), ``seq_len`` (-> input_len, > 0), ``chunk_hashes`` (hex
    strings of the ``seq_len // chunk_size`` complete chunks, optional ``0x``; each becomes
    the low 64 bits as a signed int64; when ``seq_len`` ends with a partial chunk, one more
    hash -- the partial tail chunk's -- is accepted, checked and ignored: tail tokens are
    always a miss; any other count is an error naming both counts), ``dtypes`` and
    ``shapes`` (per tensor; bytes per chunk = sum of prod(shape) x dtype size; unknown
    dtypes are an error unless ``kv_bytes_per_chunk`` is given, in which case dtypes/shapes
    are not read).

    ``model`` keeps only that model's events (an error when it matches none). A model
    whose chunk_size or bytes per chunk changes between lines is an error. Events are kind
    ``"request"``; ``line_no`` is the line within its own file. A line longer than
    ``max_line_bytes`` bytes is an error at its line.

    Cost: O(total size + n log n). Lines laid out as LMCache writes them (``chunk_hashes``
    last, fixed-width ``"0x..."`` strings) take a fast path: orjson parses the line without
    its hashes and the hashes of many lines are decoded together in C
    (:class:`_LMCacheReader`); ~5 us per line plus ~40 ns per hash on the benchmark host,
    less than LMCache's own loader (``bench/bench_lmcache.py``). Memory: the events, plus a
    batch of at most 65,536 hashes.
    """
    check_max_line_bytes(max_line_bytes)
    if kv_bytes_per_chunk is not None and (
        type(kv_bytes_per_chunk) is not int or kv_bytes_per_chunk <= 0
    ):
        raise ValueError(f"kv_bytes_per_chunk must be an integer > 0, got {kv_bytes_per_chunk!r}")
    root = os.fspath(path_or_dir)
    files = _lmcache_files(root)
    reader = _LMCacheReader(model, kv_bytes_per_chunk)
    collecting = gc.isenabled()
    gc.disable()  # see the docstring: nothing to collect, only objects to scan
    try:
        for path in files:
            with open_trace(path) as fh:
                reader.read(fh, path, max_line_bytes)
    finally:
        if collecting:
            gc.enable()
    events = reader.events
    if model is not None and not events:
        present = ", ".join(repr(m) for m in sorted(reader.all_models)) or "none"
        raise LocatedError(root, 0, f"no events of model {model!r}; models present: {present}")
    events.sort(key=itemgetter(4))  # timestamp_ns; list.sort is stable
    return LMCacheTrace(events, reader.models, files)
