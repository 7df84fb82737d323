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
import json
import math
import os
import re
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Decimal
from operator import itemgetter
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import orjson

from litehit_core import LocatedError
from litehit_core.lines import DEFAULT_MAX_LINE_BYTES, check_max_line_bytes, read_lines

__all__ = [
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


def _seconds_to_ns(seconds: int | float) -> int:
    """Seconds -> ns, rounded half-even from the shortest decimal form of the float.

    ``repr`` recovers the digits written in the log (for up to 17 significant digits), so
    ``1717000000.123456`` gives exactly ``1717000000123456000``; plain float arithmetic
    would be off by up to ~128 ns at epoch magnitudes. O(1).
    """
    if type(seconds) is int:
        return seconds * 1_000_000_000
    scaled = Decimal(repr(seconds)).scaleb(9)
    return int(scaled.to_integral_value(rounding=ROUND_HALF_EVEN))


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
    model is filtered out (the line is still fully validated, except its dtypes). O(line)."""
    obj = _decode_object(text, line_no, path, exact=True)
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
    n_chunks = seq_len // chunk_size
    if len(hashes) != n_chunks:
        raise LocatedError(
            path,
            line_no,
            f"field 'chunk_hashes' has {len(hashes)} entries but seq_len {seq_len} // "
            f"chunk_size {chunk_size} = {n_chunks} complete chunks",
        )
    keys = []
    match = _HEX_RE.fullmatch
    for i, h in enumerate(hashes):
        if type(h) is not str or match(h) is None:
            raise _bad(path, line_no, f"chunk_hashes[{i}]", "a hex string (optional 0x)", h)
        keys.append(_hash_to_int64(h))

    event = TraceEvent(
        line_no=line_no,
        kind="request",
        instance_id=model_name,
        trace_id=request_id,
        timestamp_ns=ts_ns,
        keys=keys,
        input_len=seq_len,
    )
    if model is not None and model_name != model:
        return event, None
    if kv_bytes_per_chunk is not None:
        size = kv_bytes_per_chunk
    else:
        size = _chunk_bytes(obj, line_no, path)
    return event, ModelInfo(chunk_size, size)


def _lmcache_files(path: str) -> list[str]:
    if os.path.isdir(path):
        files = sorted(str(p) for p in Path(path).glob("lookup_hashes_*.jsonl"))
        if not files:
            raise LocatedError(path, 0, "directory holds no lookup_hashes_*.jsonl files")
        return files
    return [path]


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
    the low 64 bits as a signed int64), ``dtypes`` and ``shapes`` (per tensor; bytes per
    chunk = sum of prod(shape) x dtype size; unknown dtypes are an error unless
    ``kv_bytes_per_chunk`` is given, in which case dtypes/shapes are not read).

    ``model`` keeps only that model's events (an error when it matches none). A model
    whose chunk_size or bytes per chunk changes between lines is an error. Events are kind
    ``"request"``; ``line_no`` is the line within its own file. A line longer than
    ``max_line_bytes`` bytes is an error at its line. O(total size + n log n).
    """
    check_max_line_bytes(max_line_bytes)
    if kv_bytes_per_chunk is not None and (
        type(kv_bytes_per_chunk) is not int or kv_bytes_per_chunk <= 0
    ):
        raise ValueError(f"kv_bytes_per_chunk must be an integer > 0, got {kv_bytes_per_chunk!r}")
    root = os.fspath(path_or_dir)
    files = _lmcache_files(root)
    events: list[TraceEvent] = []
    models: dict[str, ModelInfo] = {}
    first_seen: dict[str, str] = {}
    all_models: set[str] = set()
    for path in files:
        with open_trace(path) as fh:
            for line_no, text in _lines(fh, path, max_line_bytes):
                parsed = _parse_lmcache_line(text, line_no, path, model, kv_bytes_per_chunk)
                if parsed is None:
                    continue
                event, info = parsed
                all_models.add(event.instance_id)
                if info is None:
                    continue
                name = event.instance_id
                known = models.get(name)
                if known is None:
                    models[name] = info
                    first_seen[name] = f"{path}:{line_no}"
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
                        f"first seen at {first_seen[name]}",
                    )
                events.append(event)
    if model is not None and not events:
        present = ", ".join(repr(m) for m in sorted(all_models)) or "none"
        raise LocatedError(root, 0, f"no events of model {model!r}; models present: {present}")
    events.sort(key=itemgetter(4))  # timestamp_ns; list.sort is stable
    return LMCacheTrace(events, models, files)
