"""The requests of ``litehit gen-dataset``: every input line read once into a small index,
sorted as LMCache sorts them, then read again one by one in that order.

A request (:class:`Request`) is what a prompt is made of: its chunk hash strings, tokens per
chunk, ``seq_len`` and the text forms of its id and timestamp (the tail's seed).

- LMCache lookup-hash logs (:class:`LookupParser`): LMCache's ``gen-dataset`` fields --
  ``chunk_hashes`` (strings, used verbatim), ``chunk_size``, ``seq_len``, ``request_id``
  (any JSON value; Python's ``str`` of it, as ``json.loads`` gives it) and ``timestamp``
  (the sort key; 0.0 when absent); ``model_name`` only for ``--instance``.
- Standard and Mooncake traces (:class:`EventParser`): each key is a chunk whose hash string
  is the key's decimal text, ``block_size`` tokens each; ``seq_len`` is ``input_len``; the
  id is the reader's ``trace_id`` (standard: ``trace_id``, its line number when absent;
  Mooncake: the line number); writes are skipped (they carry no prompt).

:func:`index_requests` reads every file once and keeps, per kept line, only its sort key
and where it is (file, byte offset, length, line number): about 44 bytes per request
whatever the line's size (:class:`RequestIndex`). :meth:`RequestIndex.order` sorts stably
(LMCache's ``list.sort`` by timestamp: ties keep file order, then line order) and
:meth:`RequestIndex.requests` reads the lines back in that order (a seek and one read each)
and parses them again. Errors are :class:`~litehit_core.LocatedError` ``path:line: field
value`` at the first bad line, all found by the first pass. Cost: two parses per line,
O(bytes) each, plus O(n log n) for the sort.
"""

from __future__ import annotations

import codecs
import math
import os
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from litehit_core import LocatedError
from litehit_service.traces.readers.compressed import container_of
from litehit_service.traces.readers.jsonl import (
    MISSING,
    bad_field,
    decode_object,
    numbered_lines,
    open_trace,
    positive_int,
    require,
    show,
)
from litehit_service.traces.readers.lmcache import lmcache_files
from litehit_service.traces.readers.lmcache_fields import check_hash_count
from litehit_service.traces.readers.records import INT64_MAX, INT64_MIN, TraceReader

__all__ = [
    "EventParser",
    "LookupParser",
    "Request",
    "RequestIndex",
    "SortKeys",
    "index_requests",
    "input_files",
]

OPEN_FILES = 32
"""Files :meth:`RequestIndex.requests` keeps open at once (least recently read closed)."""
MODELS_SHOWN = 20
"""Model names kept for the "no events of model" message."""
_BIG = 2.0**63  # a float this large may be an integer orjson could not hold
_ENCODE_HINT = "Unicode text (no lone surrogate escapes)"


class Request(NamedTuple):
    """One prompt to make: ``hashes`` (one chunk of ``chunk_size`` tokens each, head first),
    ``seq_len`` tokens in all (the rest, when positive, is the tail), the text forms of the
    record's id and timestamp (``None`` when it has none)."""

    hashes: list[str]
    chunk_size: int
    seq_len: int
    request_id: str | None
    timestamp: str | None

    def tail_id(self, n: int) -> str:
        """The id in the tail's seed of the ``n``-th prompt written (0-based): LMCache's
        ``request_id``, else ``f"{timestamp}_{n}"`` (``f"{n}_{n}"`` without a timestamp)."""
        if self.request_id is not None:
            return self.request_id
        return f"{n if self.timestamp is None else self.timestamp}_{n}"


Parsed = tuple[int | float, Request]
"""A kept line: its sort key and its request."""


def _lossy(value: Any) -> bool:
    """Whether the text form of a parsed value needs :mod:`json`'s parse: a float that may
    be an integer beyond 64 bits orjson could not hold, or an array or object (whose
    ``str`` shows every nested value, and key order with duplicate keys). O(1)."""
    kind = type(value)
    return (kind is float and abs(value) >= _BIG) or kind is list or kind is dict


def _decode(text: bytes, line_no: int, path: str, exact: bool) -> dict[str, Any] | None:
    """:func:`decode_object`, with Python's own limits (an integer of over 4300 digits)
    reported at the line too."""
    try:
        return decode_object(text, line_no, path, exact)
    except LocatedError:
        raise
    except (ValueError, RecursionError) as exc:
        raise LocatedError(path, line_no, f"invalid JSON: {exc}") from None


def _encodable(text: str) -> bool:
    """``text.encode()`` works (LMCache hashes its UTF-8 bytes)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class LookupParser:
    """One LMCache lookup-hash line as LMCache's gen-dataset reads it (module docstring),
    fail-fast where LMCache skips or crashes: ``(timestamp or 0.0, Request)``, or ``None``
    for a blank line or one of another model than ``model``. ``models`` collects the other
    models' names (at most :data:`MODELS_SHOWN`, as JSON).

    Rules: ``timestamp`` a finite number (int or float, not a boolean) when present;
    ``chunk_size`` and ``seq_len`` integers > 0; ``chunk_hashes`` (default ``[]``) an array
    of strings, ``seq_len // chunk_size`` of them or one more (the partial tail chunk's
    hash, which LMCache expands to a whole chunk); a hash, or a ``request_id`` string used
    for a tail, must be encodable as UTF-8. A line of another model is only parsed.
    """

    def __init__(self, model: str | None) -> None:
        self.model = model
        self.models: set[str] = set()

    def __call__(self, text: bytes, line_no: int, path: str) -> Parsed | None:
        try:
            return self._parse(text, line_no, path, False)
        except LocatedError:
            return self._parse(text, line_no, path, True)  # values as written

    def _parse(self, text: bytes, line_no: int, path: str, exact: bool) -> Parsed | None:
        obj = _decode(text, line_no, path, exact)
        if obj is None:
            return None
        if self.model is not None and obj.get("model_name") != self.model:
            if len(self.models) < MODELS_SHOWN:
                self.models.add(show(obj.get("model_name")))
            return None
        ts = obj.get("timestamp", MISSING)
        rid = obj.get("request_id", MISSING)
        if not exact and (_lossy(ts) or _lossy(rid)):
            return self._parse(text, line_no, path, True)
        if ts is MISSING:
            key: int | float = 0.0
            ts_text = None
        elif type(ts) is int or (type(ts) is float and math.isfinite(ts)):
            key, ts_text = ts, f"{ts}"
        else:
            raise bad_field(path, line_no, "timestamp", "a finite number of seconds", ts)
        chunk_size = require(obj, "chunk_size", line_no, path)
        if not positive_int(chunk_size):
            raise bad_field(path, line_no, "chunk_size", "an integer > 0", chunk_size)
        seq_len = require(obj, "seq_len", line_no, path)
        if not positive_int(seq_len):
            raise bad_field(path, line_no, "seq_len", "an integer > 0", seq_len)
        hashes = obj.get("chunk_hashes", [])
        if type(hashes) is not list:
            raise bad_field(path, line_no, "chunk_hashes", "an array of strings", hashes)
        if hashes and not (set(map(type, hashes)) == {str} and _encodable("".join(hashes))):
            for i, h in enumerate(hashes):
                if type(h) is not str:
                    raise bad_field(path, line_no, f"chunk_hashes[{i}]", "a string", h)
                if not _encodable(h):
                    raise bad_field(path, line_no, f"chunk_hashes[{i}]", _ENCODE_HINT, h)
        check_hash_count(len(hashes), seq_len, chunk_size, line_no, path)
        request_id = None if rid is MISSING else f"{rid}"
        if request_id is not None and seq_len > len(hashes) * chunk_size:
            if not _encodable(request_id):  # LMCache hashes f"__tail__{request_id}"
                raise bad_field(path, line_no, "request_id", _ENCODE_HINT, rid)
        return key, Request(hashes, chunk_size, seq_len, request_id, ts_text)


class EventParser:
    """One line of a trace format with a line parser (standard, Mooncake) as a request:
    ``(timestamp_ns, Request)``, or ``None`` for a blank line, a write or another instance
    than ``model`` (whose names ``models`` collects). Each key is a chunk of
    ``block_size`` tokens named by its decimal text; more keys than ``input_len //
    block_size`` complete blocks is an error (a wrong block size)."""

    def __init__(self, reader: TraceReader, model: str | None, block_size: int) -> None:
        parse = reader.line_parser(block_size=block_size)
        if parse is None:
            raise ValueError(f"trace format {reader.name!r} has no line parser")
        self.parse = parse
        self.model = model
        self.block_size = block_size
        self.models: set[str] = set()

    def __call__(self, text: bytes, line_no: int, path: str) -> Parsed | None:
        event = self.parse(text, line_no, path)
        if event is None or event.kind == "write":
            return None
        if self.model is not None and event.instance_id != self.model:
            if len(self.models) < MODELS_SHOWN:
                self.models.add(show(event.instance_id))
            return None
        size = self.block_size
        if len(event.keys) > event.input_len // size:
            raise LocatedError(
                path,
                line_no,
                f"{len(event.keys)} keys but input_len {event.input_len} holds "
                f"{event.input_len // size} complete blocks of {size} tokens; is --block-size "
                "right?",
            )
        hashes = [f"{k}" for k in event.keys]
        return event.timestamp_ns, Request(hashes, size, event.input_len, event.trace_id, None)


class SortKeys:
    """Numbers (ints and floats) kept for one stable, exact sort: 8 bytes each while they
    are all int64 or all exactly representable as floats (compared in numpy), else Python
    objects (compared as Python compares them). O(1) amortised per key."""

    def __init__(self) -> None:
        self._ints = array("q")
        self._floats: array[float] | None = None
        self._objects: list[int | float] | None = None

    def __len__(self) -> int:
        for keys in (self._objects, self._floats):
            if keys is not None:
                return len(keys)
        return len(self._ints)

    def append(self, key: int | float) -> None:
        if self._objects is not None:
            self._objects.append(key)
        elif self._floats is not None:
            if type(key) is float or _exact_float(key):
                self._floats.append(key)
            else:
                self._objects = [*self._floats, key]  # the floats compare as their keys did
                self._floats = None
        elif type(key) is int and INT64_MIN <= key <= INT64_MAX:
            self._ints.append(key)
        elif _exact_float(key) and all(map(_exact_float, self._ints)):
            self._floats = array("d", self._ints)
            self._floats.append(key)
            self._ints = array("q")
        else:
            self._objects = [*self._ints, key]
            self._ints = array("q")

    def order(self) -> np.ndarray:
        """The positions in stable ascending order of their keys (int64). O(n log n)."""
        if self._objects is not None:
            keys = self._objects
            return np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)
        if self._floats is not None:
            values = np.frombuffer(self._floats, dtype=np.float64)
        else:
            values = np.frombuffer(self._ints, dtype=np.int64)
        return np.argsort(values, kind="stable").astype(np.int64, copy=False)


def _exact_float(key: int | float) -> bool:
    """Whether ``float(key)`` is exactly ``key`` (then comparisons keep their results)."""
    if type(key) is float:
        return True
    try:
        return float(key) == key
    except OverflowError:
        return False


class RequestIndex:
    """Where each kept line is and its sort key (:func:`index_requests`); ``parse`` reads
    a line back into its request. ``chunk_size`` is the one chunk size of them all."""

    def __init__(self, parse: Callable[[bytes, int, str], Parsed | None]) -> None:
        self.parse = parse
        self.files: list[str] = []
        self.stats: list[tuple[int, int]] = []  # (size, mtime_ns) per file when indexed
        self.keys = SortKeys()
        self.file = array("i")
        self.offset = array("q")
        self.length = array("q")
        self.line = array("q")
        self.chunk_size = 0
        self.first = ""  # where chunk_size was first seen

    def __len__(self) -> int:
        return len(self.file)

    def order(self, max_samples: int | None = None) -> np.ndarray:
        """The positions sorted by time (stable), cut to ``max_samples`` when > 0."""
        order = self.keys.order()
        if max_samples is not None and max_samples > 0:
            order = order[:max_samples]
        return order

    def requests(self, order: Sequence[int] | np.ndarray) -> Iterator[Request]:
        """The requests at ``order``, each line read again (a seek and a read; at most
        :data:`OPEN_FILES` files open) and parsed again. A file changed since it was indexed
        is an error at line 0. O(bytes of those lines)."""
        handles: OrderedDict[int, BinaryIO] = OrderedDict()
        try:
            for i in _chunked(order):
                f = self.file[i]
                fh = handles.get(f)
                if fh is None:
                    fh = handles[f] = self._reopen(f)
                    if len(handles) > OPEN_FILES:
                        handles.popitem(last=False)[1].close()
                else:
                    handles.move_to_end(f)
                fh.seek(self.offset[i])
                text = fh.read(self.length[i])
                line_no, path = self.line[i], self.files[f]
                parsed = self.parse(text, line_no, path)
                if parsed is None:
                    raise LocatedError(path, line_no, "the line changed while gen-dataset read it")
                yield parsed[1]
        finally:
            for fh in handles.values():
                fh.close()

    def _reopen(self, f: int) -> BinaryIO:
        path = self.files[f]
        fh = open_trace(path)
        st = os.fstat(fh.fileno())
        if (st.st_size, st.st_mtime_ns) != self.stats[f]:
            fh.close()
            raise LocatedError(path, 0, "the file changed while gen-dataset read it")
        return fh

    def add_file(self, path: str, fh: BinaryIO, max_line_bytes: int, advance: Any) -> None:
        """Index every line of one open file (:func:`index_requests`). O(bytes)."""
        f = len(self.files)
        self.files.append(path)
        st = os.fstat(fh.fileno())
        self.stats.append((st.st_size, st.st_mtime_ns))
        offset = len(codecs.BOM_UTF8) if fh.read(3) == codecs.BOM_UTF8 else 0
        fh.seek(0)
        parse, keys = self.parse, self.keys
        pending = 0
        for line_no, text in numbered_lines(fh, path, max_line_bytes):
            size = len(text)
            parsed = parse(text, line_no, path)
            if parsed is not None:
                key, request = parsed
                if request.chunk_size != self.chunk_size:
                    self._chunk_size(request.chunk_size, path, line_no)
                keys.append(key)
                self.file.append(f)
                self.offset.append(offset)
                self.length.append(size)
                self.line.append(line_no)
            offset += size
            pending += size
            if pending >= 1 << 20:
                advance(pending)
                pending = 0
        advance(pending)

    def _chunk_size(self, size: int, path: str, line_no: int) -> None:
        if not self.chunk_size:
            self.chunk_size, self.first = size, f"{path}:{line_no}"
            return
        raise LocatedError(
            path,
            line_no,
            f"field 'chunk_size' {size} differs from {self.chunk_size} first seen at "
            f"{self.first}; gen-dataset takes one chunk size (--instance picks one model)",
        )


def _chunked(order: Sequence[int] | np.ndarray, size: int = 65536) -> Iterator[int]:
    """The positions of ``order`` as Python ints, converted ``size`` at a time."""
    if not isinstance(order, np.ndarray):
        yield from order
        return
    for start in range(0, len(order), size):
        yield from order[start : start + size].tolist()


def input_files(reader: TraceReader, path: str) -> list[str]:
    """The files of one ``-i`` path: for LMCache logs (the format whose records state their
    chunk size) a directory's ``lookup_hashes_*.jsonl`` in name order; else the path."""
    if reader.sizes_in_trace:
        return lmcache_files(path)
    return [path]


def index_requests(
    paths: Sequence[str],
    parse: Callable[[bytes, int, str], Parsed | None],
    *,
    max_line_bytes: int,
    advance: Callable[[int], object],
) -> RequestIndex:
    """Read ``paths`` in order (``advance(n)`` hears the bytes read) and index every line
    ``parse`` keeps. Fail-fast: the first bad line raises. O(bytes); memory about 44 bytes
    per kept line (its key and place), however long the lines."""
    index = RequestIndex(parse)
    for path in paths:
        container = container_of(path) if os.path.isfile(path) else None
        if container is not None:  # the lines are read again by offset: a seekable file
            raise LocatedError(
                path,
                0,
                f"a {container} file: gen-dataset reads its inputs twice (an index, then "
                "each line again in time order); give it plain JSONL",
            )
        with open_trace(path) as fh:
            index.add_file(path, fh, max_line_bytes, advance)
    return index
