"""The server's side of TraceQueryPackedStream on the wire: bytes in, bytes out, compiled.

A packed batch arrives as the bytes of a ``TraceQueryPackedRequest`` and leaves as those of a
``TraceQueryPackedResponse``. Decoding them with protobuf and building the answer message
hold the GIL for every value (~0.4 us per query), which serialises streams on different
instances; here the values never become Python objects:

- :func:`packed_frame` (on the event loop, a few microseconds a batch, GIL released): one
  compiled walk of the message's top-level fields finds ``trace_id``, ``instance_id`` and
  the number of queries -- what the transport needs before the batch is applied (its
  instance's gate, the query count) -- stepping over the arrays' bytes;
- :func:`frame_arrays` (on a work thread, ~1 ns a byte, GIL released): one compiled pass
  reads and checks every value of the arrays;
- :func:`answer_bytes` / :func:`error_bytes`: the answer's few scalar fields through protobuf,
  its arrays as packed varints by a compiled kernel, appended in field order: the very bytes
  protobuf would write for the whole message.

The kernels (:mod:`litehit_core.wire_kernels`) handle the encodings clients send (packed
and unpacked repeated fields, unknown fields); any other message (groups, malformed varints,
a field of an unexpected wire type, a string that is not UTF-8) goes to protobuf itself,
which accepts it or raises the same ``DecodeError`` as before. Which field is read how comes
from the service descriptor, so a field added to the proto is either read or refused
at import (never silently dropped).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from litehit_core import wire_kernels as wk
from litehit_service import messages as pb2
from litehit_service.model import PackedQueryResult
from litehit_service.wire import trace_error_fields

__all__ = [
    "PackedFrame",
    "answer_bytes",
    "answer_first_field",
    "error_bytes",
    "frame_arrays",
    "packed_frame",
    "request_kinds",
]

_REQUEST = pb2.TraceQueryPackedRequest
_RESPONSE = pb2.TraceQueryPackedResponse
_ARRAYS = ("block_keys", "key_counts", "input_token_lens", "timestamps_ns")
_STRINGS = ("trace_id", "instance_id")
_ANSWER_ARRAYS = (
    "total_blocks",
    "input_token_lens",
    "cache_hit_counts",
    "max_hit_counts",
    "current_unique_keys",
)


def request_kinds(message: type = _REQUEST) -> np.ndarray:
    """How each field number of ``message`` (TraceQueryPackedRequest) is read, from its
    descriptor (deny by default): raises ValueError for a field that is not one of its
    strings or int64 arrays, so a field added to the proto cannot be dropped silently."""
    fields = message.DESCRIPTOR.fields
    kinds = np.zeros(max(f.number for f in fields) + 1, np.int64)
    for f in fields:
        if f.name in _STRINGS and f.type == f.TYPE_STRING and not f.is_repeated:
            kinds[f.number] = wk.BYTES
        elif f.name in _ARRAYS and f.type == f.TYPE_INT64 and f.is_repeated:
            kinds[f.number] = wk.COUNTED if f.name == "key_counts" else wk.INT64S
        else:
            raise ValueError(f"{message.DESCRIPTOR.name}.{f.name} has no compiled decoding")
    return kinds


def answer_first_field(message: type = _RESPONSE) -> int:
    """The field number of the answer's first array in ``message``
    (TraceQueryPackedResponse); raises ValueError unless its arrays are its last fields,
    consecutive and in :data:`_ANSWER_ARRAYS` order (what appending them after the other
    fields' bytes relies on)."""
    fields = message.DESCRIPTOR.fields_by_name
    numbers = [fields[name].number if name in fields else -1 for name in _ANSWER_ARRAYS]
    last = max(f.number for f in message.DESCRIPTOR.fields)
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))) or numbers[-1] != last:
        raise ValueError(
            f"{message.DESCRIPTOR.name}: {', '.join(_ANSWER_ARRAYS)} are not its last fields"
        )
    return numbers[0]


_KINDS = request_kinds()
_NUMBERS = {f.name: f.number for f in _REQUEST.DESCRIPTOR.fields}
_FIRST_ANSWER_FIELD = np.int64(answer_first_field())
_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True)
class PackedFrame:
    """A TraceQueryPackedRequest as the transport holds it between the event loop and a
    work thread: its ids, its query count and its bytes (``bounds``: at least the values
    of each field number, from the scan) -- or protobuf's parse (``message``) when the
    kernels left the message to protobuf."""

    trace_id: str
    instance_id: str
    queries: int
    raw: bytes = b""
    bounds: np.ndarray | None = None
    message: pb2.TraceQueryPackedRequest | None = None


def packed_frame(raw: bytes) -> PackedFrame:
    """Scan the bytes of a TraceQueryPackedRequest for its ids and query count (the
    arrays' values are read by :func:`frame_arrays`). Raises ``DecodeError`` when
    protobuf's parser would for what it reads. O(fields + queries), compiled, GIL
    released."""
    buf = np.frombuffer(raw, np.uint8)
    found = np.zeros((_KINDS.shape[0], 3), np.int64)
    if wk.scan_message(buf, _KINDS, found) == wk.OK:
        try:
            ids = [raw[o : o + n].decode() for o, n in found[[_NUMBERS[s] for s in _STRINGS], 1:]]
        except UnicodeDecodeError:
            pass  # protobuf words the refusal
        else:
            queries = int(found[_NUMBERS["key_counts"], 0])
            return PackedFrame(ids[0], ids[1], queries, raw, found[:, 0].copy())
    return _parsed(raw)


def _parsed(raw: bytes) -> PackedFrame:
    """The frame of protobuf's own parse (raises its ``DecodeError``)."""
    message = _REQUEST.FromString(raw)
    return PackedFrame(message.trace_id, message.instance_id, len(message.key_counts),
                       message=message)  # fmt: skip


def frame_arrays(frame: PackedFrame) -> tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A packed batch as the manager takes it: (instance_id, block_keys, key_counts,
    input_token_lens, timestamps_ns), int64 arrays (views of one buffer). Raises
    ``DecodeError`` for a value protobuf's parser refuses. O(bytes), compiled, GIL
    released."""
    if frame.message is None:
        assert frame.bounds is not None
        starts = np.zeros(_KINDS.shape[0], np.int64)
        np.cumsum(frame.bounds[:-1], out=starts[1:])
        first = starts.copy()
        values = _scratch(int(frame.bounds.sum()))
        if wk.decode_int64_fields(np.frombuffer(frame.raw, np.uint8), _KINDS, starts, values):
            frame = _parsed(frame.raw)  # raises DecodeError, or protobuf reads it
        else:
            arrays = [values[first[_NUMBERS[n]] : starts[_NUMBERS[n]]].copy() for n in _ARRAYS]
            return (frame.instance_id, *arrays)
    m = frame.message
    assert m is not None
    return (m.instance_id, *(np.array(getattr(m, name), np.int64) for name in _ARRAYS))


_SCRATCH_MAX = 1 << 21
"""Values (16 MiB) up to which a work thread keeps its decoding buffer between batches."""
_local = threading.local()


def _scratch(n: int) -> np.ndarray:
    """An int64 buffer of at least ``n`` values for one decode on this thread. The bound
    it is sized by (a packed run's bytes) is ~6x the values of real keys, so a fresh
    buffer per batch would fault in (and, past glibc's mmap threshold, map and unmap:
    a TLB flush on every core running the server) several MiB it never fills; the
    thread's buffer is reused instead, up to :data:`_SCRATCH_MAX` values."""
    if n > _SCRATCH_MAX:
        return np.empty(n, np.int64)
    buf = getattr(_local, "values", None)
    if buf is None or buf.shape[0] < n:
        buf = _local.values = np.empty(max(n, 1 << 16), np.int64)
    return buf


def answer_bytes(result: PackedQueryResult, trace_id: str) -> bytes:
    """The bytes of the TraceQueryPackedResponse answering a batch (hits row-major, query
    by query): what protobuf serialises the message to. O(queries x slots), compiled."""
    header = {"status": {"code": pb2.OK}}
    if trace_id:
        header["request_id"] = trace_id  # type: ignore[assignment]
    head = _RESPONSE(header=header, block_size=result.block_size_tokens,
                     capacity_gb=result.capacity_gb).SerializeToString()  # fmt: skip
    best = result.max_hit_blocks
    columns = (result.total_blocks, result.input_token_lens, result.hit_blocks.ravel(),
               _EMPTY if best is None else best, result.unique_blocks)  # fmt: skip
    arrays = tuple(np.ascontiguousarray(c, np.int64) for c in columns)
    return head + wk.encode_int64_fields(_FIRST_ANSWER_FIELD, arrays).tobytes()


def error_bytes(trace_id: str, code: int, message: str) -> bytes:
    """A refused batch's answer: only the header (nothing was applied)."""
    return _RESPONSE(**trace_error_fields(trace_id, code, message)).SerializeToString()
