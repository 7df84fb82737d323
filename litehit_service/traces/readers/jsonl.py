"""The line loop and error reporting every JSONL trace reader shares.

Every reader fails fast: the first bad line raises :class:`~litehit_core.LocatedError` whose
text is exactly ``"{path}:{line_no}: {reason}"`` (the reason names the field and the
offending value: :func:`bad_field`, :func:`require`). ``line_no`` is 1-based; 0 means the
error concerns the file or directory as a whole. Files are read as UTF-8 (a leading BOM is
skipped); bytes that are not UTF-8 are reported with their exact line (:func:`check_utf8`).
A line longer than ``max_line_bytes`` (a keyword of every reader; default
:data:`~litehit_core.lines.DEFAULT_MAX_LINE_BYTES`, 64 MiB) is an error at its line, found
without reading the line whole (:mod:`litehit_core.lines`). Lines are read as bytes and
parsed as bytes (orjson takes them directly); the parsers accept ``str`` as well.

Costs: O(bytes) per file; memory O(longest line) (at most ``max_line_bytes + 1`` bytes).
:func:`decode_object` is orjson's parse plus, only for a line it refuses, :mod:`json`'s;
:func:`check_int64_array` is C-level per key.
"""

from __future__ import annotations

import array
import json
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import orjson

from litehit_core import LocatedError
from litehit_core.lines import read_lines
from litehit_service.traces.readers.compressed import open_bytes
from litehit_service.traces.readers.records import INT64_MAX, INT64_MIN, LineParser, TraceEvent

__all__ = [
    "INT_ONLY",
    "JSON_WS",
    "MISSING",
    "bad_field",
    "check_int64_array",
    "check_utf8",
    "decode_object",
    "iter_events",
    "numbered_lines",
    "open_trace",
    "parse_numbered",
    "positive_int",
    "require",
    "show",
    "trace_lines",
]

MISSING: Any = object()
"""``obj.get(field, MISSING)``: tells an absent field from ``null``."""
INT_ONLY = frozenset({int})
JSON_WS = " \t\n\r"
"""JSON's whitespace characters."""
_raw_decode = json.JSONDecoder().raw_decode
_orjson_loads = orjson.loads
_BLANK = object()  # marks a blank line (``null`` is a value, not a blank)
_R, _F = ord("r"), ord("f")  # a byte of "true", of "false" (see check_int64_array)
_JSON_TYPE_NAMES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


def show(value: Any, limit: int = 80) -> str:
    """A JSON rendering of ``value`` for error messages, cut to ``limit`` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def open_trace(path: str) -> BinaryIO:
    """Open a trace file for reading bytes, decompressing gzip and zstd on the fly
    (:func:`~litehit_service.traces.readers.compressed.open_bytes`); a file that cannot be
    opened is a LocatedError at line 0. Its lines come from :func:`trace_lines`."""
    return open_bytes(path)


def trace_lines(fh: BinaryIO, path: str, max_line_bytes: int) -> Iterator[list[bytes]]:
    """The lines of an open trace, one list per chunk (:func:`litehit_core.lines.read_lines`:
    a leading BOM skipped, endings kept, a line over ``max_line_bytes`` an error at its line
    after every line before it). UTF-8 is checked per line by the parsing loop
    (:func:`check_utf8`), so an invalid byte is reported at its own line. O(bytes)."""
    return read_lines(fh, path, max_line_bytes, skip_bom=True)


def numbered_lines(fh: BinaryIO, path: str, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_no, line)`` and reject lines holding bytes that are not UTF-8. O(bytes)."""
    line_no = 0
    for lines in trace_lines(fh, path, max_line_bytes):
        for line in lines:
            line_no += 1
            if not line.isascii():
                check_utf8(line, line_no, path)
            yield line_no, line


def iter_events(path: str, parse: LineParser, max_line_bytes: int) -> Iterator[TraceEvent]:
    """The events of the file at ``path``, one :data:`LineParser` call per line, blank lines
    skipped; lazy and fail-fast (events before a bad line are yielded first). O(bytes)."""
    with open_trace(path) as fh:
        for line_no, text in numbered_lines(fh, path, max_line_bytes):
            event = parse(text, line_no, path)
            if event is not None:
                yield event


def parse_numbered(
    lines: Sequence[bytes] | Sequence[str],
    first_line_no: int,
    path: str,
    parse: LineParser,
    plain: bool = False,
) -> tuple[list[Any], LocatedError | None]:
    """Parse consecutive lines with ``parse`` (``first_line_no`` is the first one's 1-based
    number): the events before the first bad line and that line's error (or None). Blank
    lines are skipped; ``plain`` gives plain tuples instead of TraceEvents (cheaper to send
    between processes). O(total length)."""
    out: list[Any] = []
    append = out.append
    line_no = first_line_no
    try:
        for line_no, text in enumerate(lines, first_line_no):  # noqa: B007
            if not text.isascii():
                check_utf8(text, line_no, path)
            ev = parse(text, line_no, path)
            if ev is not None:
                append(tuple(ev) if plain else ev)
    except LocatedError as exc:
        return out, exc
    except RecursionError:
        return out, LocatedError(path, line_no, "invalid JSON: nested too deeply")
    return out, None


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


def decode_object(
    text: bytes | str, line_no: int, path: str, exact: bool = False
) -> dict[str, Any] | None:
    """Parse one JSONL line (bytes or text) into a dict; ``None`` for a blank line.
    O(len(text)).

    orjson parses well-formed lines (5x faster than :mod:`json`); anything it refuses
    (blank lines, syntax errors, NaN) takes the :mod:`json` path, which names syntax errors
    by column. orjson turns integers beyond int64 (negative) or uint64 into floats, so a
    line that then fails a field check is parsed again with ``exact=True`` (:mod:`json`,
    exact integers) to report the value as written (every format's line parser does:
    first fast, then exact on error).
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
        raise LocatedError(path, line_no, f"expected a JSON object, got {kind} {show(obj)}")
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
        if not text.strip(JSON_WS):
            return _BLANK
        try:
            obj = json.loads(text.rstrip(JSON_WS))  # keep the error on line 1
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
            extra = rest.lstrip(JSON_WS)
            if extra:
                column = end + len(rest) - len(extra) + 1
                raise LocatedError(path, line_no, f"invalid JSON: extra data at column {column}")
    return obj


def require(obj: dict[str, Any], field: str, line_no: int, path: str) -> Any:
    """``obj[field]``, or the error ``missing required field 'field'``."""
    value = obj.get(field, MISSING)
    if value is MISSING:
        raise LocatedError(path, line_no, f"missing required field {field!r}")
    return value


def bad_field(path: str, line_no: int, field: str, expected: str, value: Any) -> LocatedError:
    """The error ``field 'field' must be <expected>; got <value as JSON>`` (to raise)."""
    return LocatedError(path, line_no, f"field {field!r} must be {expected}; got {show(value)}")


def check_int64_array(
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
        if not literal or INT_ONLY.issuperset(map(type, values)):
            return
    for i, v in enumerate(values):
        if type(v) is not int:
            raise LocatedError(
                path, line_no, f"{field}[{i}] must be an int64 integer; got {show(v)}"
            )
        if not INT64_MIN <= v <= INT64_MAX:
            raise LocatedError(
                path,
                line_no,
                f"{field}[{i}] is outside the int64 range [{INT64_MIN}, {INT64_MAX}]; got {v}",
            )
    raise AssertionError("unreachable: array('q') rejected a valid int64 array")


def positive_int(value: Any) -> bool:
    """An ``int`` (not a bool) > 0."""
    return type(value) is int and value > 0
