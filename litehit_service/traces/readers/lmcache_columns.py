"""LMCache lookup-hash logs, column-wise: the fast path of the LMCache reader.

A chunk of lines (~1 MiB) laid out as LMCache writes them -- ``"chunk_hashes": [...]}``
last, the hashes strings of one width -- is read with no Python bytecode per line: every
step is a C-level ``map`` over the lines or one numpy/bytes pass; orjson parses each line
without its hash array and :func:`hex_records_to_keys` decodes the chunk's hashes at once.
:func:`take_columns` gives exactly the events of the reference parser
(:func:`~litehit_service.traces.readers.lmcache_fields.parse_lmcache_line`) or ``None``,
and never raises for bad input: errors are the reference path's to report. The loader that
decides which lines go which way is :class:`~litehit_service.traces.readers.lmcache.LMCacheLoader`.
Cost: O(chunk bytes) in C; ~5 us per line plus ~40 ns per hash on the benchmark host.
"""

from __future__ import annotations

import array
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from itertools import accumulate, compress, repeat
from operator import add, eq, floordiv, getitem, itemgetter, mod, mul, sub
from typing import NamedTuple

import numpy as np
import orjson

from litehit_core import LocatedError
from litehit_service.traces.readers.jsonl import INT_ONLY
from litehit_service.traces.readers.lmcache_fields import ModelInfo, chunk_bytes, seconds_to_ns
from litehit_service.traces.readers.records import TraceEvent

__all__ = [
    "ColumnChunk",
    "hash_width",
    "hex_records_to_keys",
    "layout_of",
    "layout_runs",
    "many_seconds_to_ns",
    "take_columns",
]

_orjson_loads = orjson.loads
_JSON_WS_BYTES = b" \t\n\r"
_BEFORE_KEY = frozenset(b" \t\n\r,{")  # a byte that may precede an object key's quote
_TS_MAX_FAST = 9_223_372_035.0  # seconds; below it every ns value fits in int64
_POW10 = tuple(10**k for k in range(11))
_BIG_ENDIAN = sys.byteorder == "big"
_orjson_dumps = orjson.dumps
_new_event = partial(tuple.__new__, TraceEvent)  # TraceEvent from a full tuple, no checks
_LMC_SPEC = itemgetter("dtypes", "shapes")
_LAYOUTS = ((b'"chunk_hashes": [', b", "), (b'"chunk_hashes":[', b","))  # LMCache's; compact
_LAST3 = slice(-3, None)
_NUMBER_TYPES = frozenset({int, float})
_FLOAT_TYPE = frozenset({float})
_STR_TYPE = frozenset({str})
_LIST_TYPE = frozenset({list})
_LMC_FIELDS = itemgetter(
    "timestamp", "request_id", "model_name", "chunk_size", "seq_len", "chunk_hashes"
)


def hex_records_to_keys(joined: bytes, n: int, width: int, sep: bytes) -> list[int] | None:
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


def many_seconds_to_ns(seconds: Sequence[float]) -> list[int]:
    """:func:`seconds_to_ns` of many floats in [0, 2**63 ns) at once, exactly.

    ``repr`` of a float below 1e16 without an exponent is ``digits.digits``; when it has
    at most 9 decimals, the ns value is its digits without the dot times 10**(9 -
    decimals), exact. Everything is a C-level ``map`` (no per-value bytecode); values with
    an exponent or more decimals fall back to the Decimal path. O(n).
    """
    texts = list(map(repr, seconds))
    dots = list(map(str.find, texts, repeat(".")))
    if min(dots, default=0) < 0 or "e" in "".join(texts):
        return list(map(seconds_to_ns, seconds))
    decimals = list(map(sub, map(len, texts), map(add, dots, repeat(1))))
    if max(decimals, default=0) > 9:
        return list(map(seconds_to_ns, seconds))
    whole = map(int, map(str.replace, texts, repeat("."), repeat("")))
    return list(map(mul, whole, map(_POW10.__getitem__, map(sub, repeat(9), decimals))))


def layout_of(text: bytes) -> tuple[bytes, bytes]:
    """The hash array's key and separator as laid out in ``text``: LMCache's
    (``json.dumps``: ``"chunk_hashes": [`` and ``", "``) unless only the compact form is
    there. O(len(text))."""
    if text.rfind(_LAYOUTS[0][0]) < 0 and text.rfind(_LAYOUTS[1][0]) >= 0:
        return _LAYOUTS[1]
    return _LAYOUTS[0]


def hash_width(text: bytes, key: bytes, sep: bytes) -> int:
    """For :func:`layout_runs`: the width of the line's hash strings when it is laid out
    for the column-wise path (``key`` last, strings of one width separated by ``sep``;
    0 without hashes), else -1. The same checks as :func:`take_columns` makes
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


def layout_runs(lines: list[bytes]) -> list[tuple[int, int, bool]]:
    """``lines`` cut into ``(start, stop, alike)`` runs: maximal runs of lines laid out for
    the column-wise path with one hash width (``alike``), and single other lines. The
    fallback of a chunk that is not laid out alike (a blank line, another layout, mixed
    widths): so one odd line costs the reference parse of that line only. O(bytes), a
    Python step per line."""
    if not lines:
        return []
    key, sep = layout_of(lines[0])
    runs: list[tuple[int, int, bool]] = []
    start, width = 0, 0  # the open run and its hash width (0: none seen yet)
    for i, text in enumerate(lines):
        w = hash_width(text, key, sep)
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


class ColumnChunk(NamedTuple):
    """What :func:`take_columns` read from a chunk: the kept lines' events (an iterator, to
    be consumed at once), every line's model name (kept or not), and the models first seen
    in the chunk with where (``"path:line"``)."""

    events: Iterator[TraceEvent]
    names: tuple[str, ...]
    new_models: dict[str, tuple[ModelInfo, str]]


def take_columns(
    lines: list[bytes],
    first: int,
    path: str,
    model: str | None,
    kv_bytes_per_chunk: int | None,
    models: Mapping[str, ModelInfo],
) -> ColumnChunk | None:
    """Lines ``first``, ``first + 1``, ... of ``path`` (a non-empty chunk) read
    column-wise, keeping ``model``'s lines only (all when ``None``), with
    ``kv_bytes_per_chunk`` or the bytes per chunk of each line's dtypes and shapes, given
    the ``models`` known so far; ``None`` when the chunk is not laid out for this path or
    a check fails (a model's facts differing from ``models`` included). Never raises for
    bad input. O(chunk bytes), C-level: per line a few ``map`` steps and one orjson call
    on the line without its hashes; per hash no Python object but its key."""
    if not all(map(bytes.isascii, lines)):
        try:  # UTF-8 errors are the reference path's to report, at their line
            deque(map(bytes.decode, lines), maxlen=0)
        except UnicodeDecodeError:
            return None
    key, sep = layout_of(lines[0])
    # Where the hash array starts and ends: the key's last occurrence, right after
    # "{", "," or whitespace, and a line ending with "]}" (then orjson parsing the rest
    # proves the key is the top-level object's last one; see the LMCache reader).
    keys_at = list(map(bytes.rfind, lines, repeat(key)))
    if min(keys_at) <= 0 or not _BEFORE_KEY.issuperset(
        map(getitem, lines, map(sub, keys_at, repeat(1)))
    ):
        return None
    starts = list(map(add, keys_at, repeat(len(key))))
    if set(map(getitem, lines, repeat(_LAST3))) == {b"]}\n"}:
        ends = list(map(sub, map(len, lines), repeat(3)))
    else:  # other line endings, trailing whitespace, the file's last line
        stops = list(map(len, map(bytes.rstrip, lines, repeat(_JSON_WS_BYTES))))
        ends = list(map(sub, stops, repeat(2)))
        if set(map(getitem, lines, map(slice, ends, stops))) != {b"]}"}:
            return None
    if min(map(sub, ends, starts)) < 0:
        return None
    heads = map(getitem, lines, map(slice, repeat(None), starts))
    try:
        objs = list(map(_orjson_loads, map(add, heads, repeat(b"]}"))))
        rows = list(map(_LMC_FIELDS, objs))
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return None
    stamps, rids, names, chunk_sizes, seq_lens, empties = zip(*rows, strict=True)
    if not (
        _NUMBER_TYPES.issuperset(map(type, stamps))
        and min(stamps) >= 0
        and max(stamps) < _TS_MAX_FAST
        and _STR_TYPE.issuperset(map(type, rids))
        and all(rids)
        and _STR_TYPE.issuperset(map(type, names))
        and all(names)
        and INT_ONLY.issuperset(map(type, chunk_sizes))
        and min(chunk_sizes) > 0
        and INT_ONLY.issuperset(map(type, seq_lens))
        and min(seq_lens) > 0
        and _LIST_TYPE.issuperset(map(type, empties))
        and not any(empties)
    ):
        return None

    # Hash arrays: n strings of one width, each but the last followed by ``sep``.
    arrays = list(map(getitem, lines, map(slice, starts, ends)))
    width = stride = 0
    counts: list[int] = [0] * len(lines)
    head = next(filter(None, arrays), None)
    if head is not None:
        width = head.find(b'"', 1) - 1
        stride = width + 2 + len(sep)
        if width < 1:
            return None
        lengths = map(len, arrays)
        if all(arrays):
            sized = list(map(add, lengths, repeat(len(sep))))
        else:  # an empty array has no separator after it either
            sized = list(map(add, lengths, map(mul, map(bool, arrays), repeat(len(sep)))))
        counts = list(map(floordiv, sized, repeat(stride)))
        if list(map(mul, counts, repeat(stride))) != sized:
            return None
    n_chunks = list(map(floordiv, seq_lens, chunk_sizes))
    extra = list(map(sub, counts, n_chunks))  # 1: the partial tail chunk's hash
    if not {0, 1}.issuperset(extra) or not all(
        map(mod, compress(seq_lens, extra), compress(chunk_sizes, extra))
    ):
        return None

    # The kept lines, their bytes per chunk and models.
    line_nos: Iterable[int] = range(first, first + len(lines))
    if model is None:
        wanted: list[bool] | None = None
        kept_objs, kept_names, kept_sizes = objs, names, chunk_sizes
    else:
        wanted = list(map(eq, names, repeat(model)))
        kept_objs = list(compress(objs, wanted))
        kept_names = tuple(compress(names, wanted))
        kept_sizes = tuple(compress(chunk_sizes, wanted))
        line_nos = list(compress(line_nos, wanted))
    if kv_bytes_per_chunk is not None:
        sizes: Iterable[int] = repeat(kv_bytes_per_chunk)
    else:
        try:  # orjson's text tells 2 from 2.0 and true (== would not)
            specs = list(map(_orjson_dumps, map(_LMC_SPEC, kept_objs)))
            spec_sizes = {
                spec: chunk_bytes(kept_objs[specs.index(spec)], 0, path) for spec in set(specs)
            }
        except (KeyError, orjson.JSONEncodeError, LocatedError):
            return None
        sizes = list(map(spec_sizes.__getitem__, specs))
    new_models: dict[str, ModelInfo] = {}
    # sizes may repeat one value without end (--kv-bytes-per-chunk): not strict
    for name, chunk_size, size in dict.fromkeys(zip(kept_names, kept_sizes, sizes, strict=False)):
        known = models.get(name) or new_models.get(name)
        if known is None:
            new_models[name] = ModelInfo(chunk_size, size)
        elif known != (chunk_size, size):
            return None  # the reference path raises it at its line

    # Keys and timestamps.
    keys: list[int] = []
    total = sum(counts)
    if total:
        joined = sep.join([*filter(None, arrays), b""])
        decoded = hex_records_to_keys(joined, total, width, sep)
        if decoded is None:
            return None
        keys = decoded
    starts = list(accumulate(counts, initial=0))
    per_line = map(keys.__getitem__, map(slice, starts, map(add, starts, n_chunks)))
    if wanted is not None:
        stamps = tuple(compress(stamps, wanted))
        rids = tuple(compress(rids, wanted))
        seq_lens = tuple(compress(seq_lens, wanted))
        per_line = compress(per_line, wanted)
    if _FLOAT_TYPE.issuperset(map(type, stamps)):
        ns = many_seconds_to_ns(stamps)
    else:
        ns = list(map(seconds_to_ns, stamps))
    kept_line_nos = list(line_nos)
    first_seen = {
        name: (info, f"{path}:{kept_line_nos[kept_names.index(name)]}")
        for name, info in new_models.items()
    }
    rows_out = zip(
        kept_line_nos, repeat("request"), kept_names, rids, ns, per_line, seq_lens,
        repeat(None), repeat(0),
    )  # fmt: skip
    return ColumnChunk(map(_new_event, rows_out), names, first_seen)
