"""Columns of int64 in protobuf's wire format, compiled: read and write them without a Python
object per value and without the GIL.

A protobuf message is a sequence of fields, each a tag (field number and wire type) and a
payload; a ``repeated int64`` field arrives as varints, either one tagged varint per value
or packed (one length-delimited run of varints, the proto3 default), and a parser must
accept both and concatenate every run in order. These kernels do that for the fields a
caller names, and nothing else:

- :func:`scan_message` walks a message's top-level fields: where each :data:`BYTES`
  field (strings, bytes) lies, how
  many values each :data:`COUNTED` field holds, and an upper bound on the values of each
  :data:`INT64S` field (the bytes of its packed runs are skipped, not read). Other fields
  are skipped. Cheap enough for an event loop: O(fields + bytes of the counted fields).
- :func:`decode_int64_fields` then reads every value of the :data:`INT64S` and
  :data:`COUNTED` fields into one array, field by field, checking every varint; it
  returns each field's exact count.
- :func:`encode_int64_fields` writes int64 arrays as consecutive packed fields, exactly the
  bytes protobuf serialises them to (an empty array is omitted, as protobuf omits it).

Anything these kernels do not handle -- a group, a truncated or over-long varint, a known
field with an unexpected wire type, field number 0, a string field sent twice (protobuf
checks every copy's UTF-8, the last one wins) -- makes them answer :data:`UNHANDLED`
and the caller hands the message to protobuf itself, which decides (it accepts it or
names the fault). So the fast path never accepts what protobuf refuses, nor reads a value
differently. Cost: ~1 ns a byte read; memory: the values. Numba, ``cache=True,
nogil=True``: a server decodes and encodes on its work threads while others run.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

__all__ = [
    "BYTES",
    "COUNTED",
    "INT64S",
    "OK",
    "SKIP",
    "UNHANDLED",
    "decode_int64_fields",
    "encode_int64_fields",
    "scan_message",
    "warm_up",
]

SKIP = 0
"""A field number the caller does not read (skipped, as protobuf keeps it as unknown)."""
BYTES = 1
"""A ``string`` or ``bytes`` field: :func:`scan_message` gives where it lies."""
INT64S = 2
"""A ``repeated int64`` field, packed or not, read by :func:`decode_int64_fields`."""
COUNTED = 3
"""An :data:`INT64S` field whose values :func:`scan_message` already counts (and checks)."""
OK = 0
UNHANDLED = 1
""":func:`scan_message`'s answer for a message the kernels leave to protobuf."""

_BAD = np.int64(-1)


@njit(cache=True, nogil=True, inline="always")
def _varint(buf: np.ndarray, pos: np.int64, end: np.int64) -> tuple[np.int64, np.int64]:
    """The varint at ``buf[pos:end]`` as int64 (two's complement of its 64 bits) and the
    position after it; position -1 if it is truncated or longer than 10 bytes, or its
    10th byte carries more than the 64th bit."""
    result = np.uint64(0)
    shift = np.uint64(0)
    while pos < end:
        b = np.uint64(buf[pos])
        pos += 1
        if shift == 63:
            if b > 1:
                return np.int64(0), _BAD
            return np.int64(result | (b << np.uint64(63))), pos
        result |= (b & np.uint64(0x7F)) << shift
        if b < 0x80:
            return np.int64(result), pos
        shift += np.uint64(7)
    return np.int64(0), _BAD


@njit(cache=True, nogil=True, inline="always")
def _count_varints(buf: np.ndarray, pos: np.int64, stop: np.int64) -> np.int64:
    """How many varints ``buf[pos:stop]`` holds, each checked as :func:`_varint` checks it;
    -1 if one is not. One branch per byte (~0.8 ns a byte)."""
    run = np.int64(0)
    n = np.int64(0)
    for i in range(pos, stop):
        b = buf[i]
        if b >= 0x80:
            run += 1
            if run > 9:
                return _BAD
        else:
            if run == 9 and b > 1:
                return _BAD
            run = 0
            n += 1
    return _BAD if run else n


@njit(cache=True, nogil=True, inline="always")
def _decode_run(
    buf: np.ndarray, pos: np.int64, stop: np.int64, values: np.ndarray, at: np.int64
) -> np.int64:
    """Decode the varints of ``buf[pos:stop]`` into ``values`` from ``at`` on, each checked
    as :func:`_varint` checks it; the index after the last value, or -1 at a bad one. A
    varint with ten bytes of room left is read without bounds checks (~1 ns a byte)."""
    while pos < stop:
        b = buf[pos]
        pos += 1
        if b < 0x80:
            values[at] = b
            at += 1
            continue
        if stop - pos < 9:
            value, pos = _varint(buf, pos - 1, stop)
            if pos < 0:
                return _BAD
            values[at] = value
            at += 1
            continue
        x = np.uint64(b & 0x7F)
        shift = np.uint64(7)
        while True:
            b = buf[pos]
            pos += 1
            if shift == 63:
                if b > 1:
                    return _BAD
                x |= np.uint64(b) << shift
                break
            x |= np.uint64(b & 0x7F) << shift
            if b < 0x80:
                break
            shift += np.uint64(7)
        values[at] = np.int64(x)
        at += 1
    return at


@njit(cache=True, nogil=True)
def scan_message(buf: np.ndarray, kinds: np.ndarray, out: np.ndarray) -> np.int64:
    """Walk the top-level fields of the message ``buf`` (uint8). ``kinds[f]`` says how
    field number ``f`` is read (:data:`SKIP`, :data:`BYTES`, :data:`INT64S`,
    :data:`COUNTED`; numbers past the end are skipped). Fills ``out`` (int64, shape
    (len(kinds), 3), zeroed by the caller): ``out[f, 0]`` is the values of a
    :data:`COUNTED` field, at least the values of an :data:`INT64S` field (the bytes of
    its packed runs, which are not read here), 0 otherwise; ``out[f, 1:3]`` is the
    (offset, length) of a :data:`BYTES` field ((0, 0) when absent: the empty default;
    a field that occurs twice is left to protobuf). Returns :data:`OK`, or
    :data:`UNHANDLED` (``out`` then means nothing). O(fields + bytes of the counted fields)."""
    pos = np.int64(0)
    end = np.int64(buf.shape[0])
    nk = kinds.shape[0]
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        if pos < 0 or tag <= 0 or tag > 0xFFFFFFFF:
            return UNHANDLED
        field = tag >> 3
        wire = tag & 7
        if field == 0:
            return UNHANDLED
        kind = kinds[field] if field < nk else SKIP
        if wire == 0:
            if kind == BYTES:
                return UNHANDLED
            _, pos = _varint(buf, pos, end)
            if pos < 0:
                return UNHANDLED
            if kind == INT64S or kind == COUNTED:
                out[field, 0] += 1
        elif wire == 2:
            size, pos = _varint(buf, pos, end)
            if pos < 0 or size < 0 or size > end - pos:
                return UNHANDLED
            stop = pos + size
            if kind == COUNTED:
                n = _count_varints(buf, pos, stop)
                if n < 0:
                    return UNHANDLED
                out[field, 0] += n
            elif kind == INT64S:
                out[field, 0] += size  # a varint has at least one byte
            elif kind == BYTES:
                if out[field, 1] != 0:
                    # protobuf checks every occurrence's UTF-8, not only the last one's
                    return UNHANDLED
                out[field, 1] = pos
                out[field, 2] = size
            pos = stop
        elif wire == 1 or wire == 5:
            if kind != SKIP:
                return UNHANDLED
            pos += 8 if wire == 1 else 4
            if pos > end:
                return UNHANDLED
        else:  # groups (3, 4) and the undefined wire types 6, 7
            return UNHANDLED
    return OK


@njit(cache=True, nogil=True)
def decode_int64_fields(
    buf: np.ndarray, kinds: np.ndarray, starts: np.ndarray, values: np.ndarray
) -> np.int64:
    """Read the values of every :data:`INT64S` and :data:`COUNTED` field of a message
    :func:`scan_message` answered :data:`OK` for into ``values`` (int64, room for the
    scan's counts): field ``f``'s from ``starts[f]`` on, in message order, every varint
    checked. ``starts[f]`` ends past field ``f``'s last value. Returns :data:`OK`, or
    :data:`UNHANDLED` at a bad varint (the caller asks protobuf). O(bytes)."""
    pos = np.int64(0)
    end = np.int64(buf.shape[0])
    nk = kinds.shape[0]
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        field = tag >> 3
        wire = tag & 7
        kind = kinds[field] if field < nk else SKIP
        read = kind == INT64S or kind == COUNTED
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            if read:
                values[starts[field]] = value
                starts[field] += 1
        elif wire == 2:
            size, pos = _varint(buf, pos, end)
            stop = pos + size
            if read:
                at = _decode_run(buf, pos, stop, values, starts[field])
                if at < 0:
                    return UNHANDLED
                starts[field] = at
            pos = stop
        else:
            pos += 8 if wire == 1 else 4
    return OK


@njit(cache=True, nogil=True, inline="always")
def _size(value: np.int64) -> np.int64:
    """Bytes of ``value``'s varint (1-10)."""
    v = np.uint64(value)
    n = np.int64(1)
    while v >= 0x80:
        v >>= np.uint64(7)
        n += 1
    return n


@njit(cache=True, nogil=True, inline="always")
def _put(out: np.ndarray, at: np.int64, value: np.int64) -> np.int64:
    v = np.uint64(value)
    while v >= 0x80:
        out[at] = np.uint8((v & np.uint64(0x7F)) | np.uint64(0x80))
        v >>= np.uint64(7)
        at += 1
    out[at] = np.uint8(v)
    return at + 1


@njit(cache=True, nogil=True)
def encode_int64_fields(first_field: np.int64, arrays: tuple) -> np.ndarray:
    """``arrays`` (a tuple of int64 arrays) as packed fields ``first_field``,
    ``first_field + 1``, ...: the bytes (uint8) protobuf writes for them in a message
    where they follow every lower-numbered field; an empty array writes nothing. O(values)."""
    total = np.int64(0)
    sizes = np.zeros(len(arrays), np.int64)
    for i in range(len(arrays)):
        a = arrays[i]
        payload = np.int64(0)
        for j in range(a.shape[0]):
            payload += _size(a[j])
        sizes[i] = payload
        if a.shape[0]:
            total += _size((first_field + i) << 3 | 2) + _size(payload) + payload
    out = np.empty(total, np.uint8)
    at = np.int64(0)
    for i in range(len(arrays)):
        a = arrays[i]
        if a.shape[0] == 0:
            continue
        at = _put(out, at, (first_field + i) << 3 | 2)
        at = _put(out, at, sizes[i])
        for j in range(a.shape[0]):
            at = _put(out, at, a[j])
    return out


def warm_up() -> float:
    """Compile (or load from numba's cache) the kernels for the types the service passes
    them (a read-only message buffer, five answer columns); seconds it took."""
    start = time.perf_counter()
    column = np.array([1, -2, 300], np.int64)
    encoded = encode_int64_fields(np.int64(4), (column, column, column, column, column))
    buf = np.frombuffer(encoded.tobytes(), np.uint8)
    kinds = np.array([SKIP, BYTES, BYTES, INT64S, COUNTED, INT64S, INT64S, INT64S], np.int64)
    found = np.zeros((kinds.shape[0], 3), np.int64)
    if scan_message(buf, kinds, found) == OK:
        starts = np.zeros(kinds.shape[0], np.int64)
        np.cumsum(found[:-1, 0], out=starts[1:])
        decode_int64_fields(buf, kinds, starts, np.empty(int(found[:, 0].sum()), np.int64))
    return time.perf_counter() - start
