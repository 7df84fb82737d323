"""LMCache lookup-hash logs, one line at a time: the reference parser and its units.

A line (LMCache's ``LookupHashLoggingSubscriber``) holds ``timestamp`` (seconds, >= 0 -> ns,
exactly: :func:`seconds_to_ns`), ``request_id``, ``model_name``, ``chunk_size`` (tokens),
``seq_len`` (tokens), ``chunk_hashes`` (hex strings -> the signed int64 of their low 64
bits: :func:`hashes_to_keys`), ``dtypes`` and ``shapes`` (KV bytes per chunk:
:func:`chunk_bytes`, :func:`dtype_size`). :func:`parse_lmcache_line` is the reference: every
line the column-wise path (:mod:`~litehit_service.traces.readers.lmcache_columns`) does not
take goes through it, and every error of the LMCache reader comes from it. Reading whole
logs: :mod:`~litehit_service.traces.readers.lmcache`. Cost: O(line), per hash one
``int(h, 16)``.
"""

from __future__ import annotations

import array
import math
import os
import re
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, NamedTuple

from litehit_core import LocatedError
from litehit_service.traces.readers.jsonl import (
    MISSING,
    bad_field,
    decode_object,
    positive_int,
    require,
    show,
)
from litehit_service.traces.readers.records import INT64_MAX, MASK64, TraceEvent

__all__ = [
    "NS_PER_S",
    "ModelInfo",
    "check_hash_count",
    "chunk_bytes",
    "dtype_size",
    "hash_to_int64",
    "hashes_to_keys",
    "parse_lmcache_line",
    "seconds_to_ns",
]


class ModelInfo(NamedTuple):
    """Per-model facts of an LMCache log: tokens per chunk and KV bytes per chunk."""

    chunk_size: int
    bytes_per_chunk: int


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
NS_PER_S = 1_000_000_000


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


def hash_to_int64(text: str) -> int:
    """Low 64 bits of a hex string, as a signed int64. O(len(text))."""
    value = int(text, 16) & MASK64
    return value - (1 << 64) if value > INT64_MAX else value


def hashes_to_keys(hashes: list[Any], line_no: int, path: str) -> list[int]:
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
            raise bad_field(path, line_no, f"chunk_hashes[{i}]", "a hex string (optional 0x)", h)
    return [hash_to_int64(h) for h in hashes]


def seconds_to_ns(seconds: int | float) -> int:
    """Seconds -> ns, rounded half-even from the shortest decimal form of the float.

    ``repr`` recovers the digits written in the log (for up to 17 significant digits), so
    ``1717000000.123456`` gives exactly ``1717000000123456000``; plain float arithmetic
    would be off by up to ~128 ns at epoch magnitudes. O(1).
    """
    if type(seconds) is int:
        return seconds * NS_PER_S
    scaled = Decimal(repr(seconds)).scaleb(9)
    return int(scaled.to_integral_value(rounding=ROUND_HALF_EVEN))


def chunk_bytes(obj: dict[str, Any], line_no: int, path: str) -> int:
    """KV bytes of one chunk: sum over tensors of prod(shape) x dtype size. O(tensors)."""
    dtypes = require(obj, "dtypes", line_no, path)
    shapes = require(obj, "shapes", line_no, path)
    if type(dtypes) is not list or not dtypes or not all(type(d) is str for d in dtypes):
        raise bad_field(path, line_no, "dtypes", "a non-empty array of strings", dtypes)
    if type(shapes) is not list or len(shapes) != len(dtypes):
        raise bad_field(
            path, line_no, "shapes", f"an array of {len(dtypes)} shapes (one per dtype)", shapes
        )
    total = 0
    for i, (dtype, shape) in enumerate(zip(dtypes, shapes, strict=True)):
        if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
            raise bad_field(path, line_no, f"shapes[{i}]", "an array of integers >= 0", shape)
        size = dtype_size(dtype)
        if size is None:
            raise LocatedError(
                path,
                line_no,
                f"field 'dtypes[{i}]' is an unknown dtype {show(dtype)}; "
                "give the KV bytes per chunk explicitly (kv_bytes_per_chunk / "
                "--kv-bytes-per-chunk)",
            )
        total += math.prod(shape) * size
    if total <= 0:
        raise LocatedError(
            path,
            line_no,
            f"dtypes {show(dtypes)} and shapes {show(shapes)} give 0 bytes per chunk",
        )
    return total


def parse_lmcache_line(
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
    it refuses or that fails a check is parsed again exactly (:func:`decode_object`), so
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
    obj = decode_object(text, line_no, path, exact)
    if obj is None:
        return None

    ts = require(obj, "timestamp", line_no, path)
    if not ((type(ts) is int and ts >= 0) or (type(ts) is float and math.isfinite(ts) and ts >= 0)):
        raise bad_field(path, line_no, "timestamp", "a number of seconds >= 0", ts)
    ts_ns = seconds_to_ns(ts)
    if ts_ns > INT64_MAX:
        raise bad_field(path, line_no, "timestamp", "at most (2**63-1) ns in seconds", ts)

    request_id = obj.get("request_id", MISSING)
    if request_id is MISSING:
        request_id = f"{os.path.basename(path)}:{line_no}"
    elif type(request_id) is not str or not request_id:
        raise bad_field(path, line_no, "request_id", "a non-empty string", request_id)

    model_name = require(obj, "model_name", line_no, path)
    if type(model_name) is not str or not model_name:
        raise bad_field(path, line_no, "model_name", "a non-empty string", model_name)

    chunk_size = require(obj, "chunk_size", line_no, path)
    if not positive_int(chunk_size):
        raise bad_field(path, line_no, "chunk_size", "an integer > 0", chunk_size)
    seq_len = require(obj, "seq_len", line_no, path)
    if not positive_int(seq_len):
        raise bad_field(path, line_no, "seq_len", "an integer > 0", seq_len)

    hashes = require(obj, "chunk_hashes", line_no, path)
    if type(hashes) is not list:
        raise bad_field(path, line_no, "chunk_hashes", "an array of hex strings", hashes)
    n_chunks = check_hash_count(len(hashes), seq_len, chunk_size, line_no, path)
    keys = hashes_to_keys(hashes, line_no, path)
    del keys[n_chunks:]  # the partial tail chunk's hash, if given

    event = TraceEvent(line_no, "request", model_name, request_id, ts_ns, keys, seq_len)
    if model is not None and model_name != model:
        return event, None
    if kv_bytes_per_chunk is not None:
        size = kv_bytes_per_chunk
    else:
        size = chunk_bytes(obj, line_no, path)
    return event, ModelInfo(chunk_size, size)


def check_hash_count(n_hashes: int, seq_len: int, chunk_size: int, line_no: int, path: str) -> int:
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
