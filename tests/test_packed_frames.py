"""The packed stream's compiled wire path (litehit_service.packed_frames,
litehit_core.wire_kernels) against protobuf itself, the independent oracle: every encoding
a client may send reads as protobuf reads it, every malformed message is refused exactly
when protobuf refuses it, and every answer is the very bytes protobuf writes.

Bugs these catch: a varint misread at 7/8/9/10 bytes or for a negative value; unpacked or
split repeated fields dropped or reordered; a repeated string read first-wins instead of
last-wins; an unknown field not skipped; a truncated message accepted; an answer array
written in the wrong order or an empty one written; a field added to the proto skipped.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from litehit_service import messages as pb2
from litehit_service import packed_frames as pf
from litehit_service import wire
from litehit_service.model import PackedQueryResult

ARRAYS = ("block_keys", "key_counts", "input_token_lens", "timestamps_ns")
NUMBER = {f.name: f.number for f in pb2.TraceQueryPackedRequest.DESCRIPTOR.fields}


def varint(value: int) -> bytes:
    """Protobuf's varint of an int64 (negative: its 64-bit two's complement), written
    here independently of the code under test."""
    v = value & (2**64 - 1)
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def length_delimited(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


def ours(raw: bytes) -> tuple:
    frame = pf.packed_frame(raw)
    arrays = pf.frame_arrays(frame)
    assert arrays[0] == frame.instance_id
    return (frame.trace_id, frame.instance_id, frame.queries,
            *(a.tolist() for a in arrays[1:]))  # fmt: skip


def protobufs(raw: bytes) -> tuple:
    m = pb2.TraceQueryPackedRequest.FromString(raw)
    return (m.trace_id, m.instance_id, len(m.key_counts),
            *(list(getattr(m, name)) for name in ARRAYS))  # fmt: skip


INTERESTING = [0, 1, 127, 128, 2**14 - 1, 2**14, 2**21, 2**28, 2**35, 2**42, 2**49, 2**56,
               2**63 - 1, -1, -2, -(2**63), -(2**62), 300, 2**56 - 1]  # fmt: skip


def random_values(rng: random.Random, n: int) -> list[int]:
    return [
        rng.choice(INTERESTING) if rng.random() < 0.3 else rng.randrange(-(2**63), 2**63)
        for _ in range(n)
    ]


def random_message(rng: random.Random) -> bytes:
    """A TraceQueryPackedRequest in a randomly chosen legal encoding: fields in any
    order, arrays packed or not and split into several runs, strings repeated (the last
    wins), unknown fields of every wire type but groups."""
    values = {name: random_values(rng, rng.randrange(0, 30)) for name in ARRAYS}
    parts: list[bytes] = []
    for name, vals in values.items():
        field = NUMBER[name]
        at = 0
        while at < len(vals):
            run = vals[at : at + rng.randrange(1, 12)]
            at += len(run)
            if rng.random() < 0.6:
                parts.append(length_delimited(field, b"".join(map(varint, run))))
            else:
                parts.extend(tag(field, 0) + varint(v) for v in run)
        if not vals and rng.random() < 0.3:
            parts.append(length_delimited(field, b""))  # an empty packed run
    for name in ("trace_id", "instance_id"):
        for _ in range(rng.randrange(0, 3)):
            text = "".join(rng.choice("abcé€😀-_") for _ in range(rng.randrange(0, 9)))
            parts.append(length_delimited(NUMBER[name], text.encode()))
    for _ in range(rng.randrange(0, 4)):
        field = rng.choice([7, 9, 15, 16, 2047, 123456])
        kind = rng.randrange(4)
        if kind == 0:
            parts.append(tag(field, 0) + varint(rng.randrange(-(2**63), 2**63)))
        elif kind == 1:
            parts.append(tag(field, 1) + rng.randbytes(8))
        elif kind == 2:
            parts.append(length_delimited(field, rng.randbytes(rng.randrange(0, 20))))
        else:
            parts.append(tag(field, 5) + rng.randbytes(4))
    rng.shuffle(parts)
    return b"".join(parts)


def test_every_legal_encoding_reads_as_protobuf_reads_it():
    rng = random.Random(20261205)
    compiled = 0
    for _ in range(3000):
        raw = random_message(rng)
        assert ours(raw) == protobufs(raw), raw.hex()
        compiled += pf.packed_frame(raw).message is None
    assert compiled > 1000  # a good share took the compiled path (repeated ids: protobuf)


def test_what_clients_send_takes_the_compiled_path():
    """Catches a silent slowdown: protobuf's own packed encoding must not fall back."""
    msg = wire.packed_query_to_pb("i", [1, -2, 2**62], [1, 2], [4, 8], [5, 6], trace_id="t")
    frame = pf.packed_frame(msg.SerializeToString())
    assert frame.message is None and frame.queries == 2


def test_protobufs_own_serialisation_and_the_edges():
    for values in ([], INTERESTING, [2**63 - 1] * 5, [-1] * 5):
        msg = wire.packed_query_to_pb("inst", values, [len(values)], [7], [0], trace_id="t")
        raw = msg.SerializeToString()
        assert ours(raw) == protobufs(raw)
    assert ours(b"") == ("", "", 0, [], [], [], [])


def test_malformed_bytes_are_refused_exactly_when_protobuf_refuses_them():
    """Every prefix of a message (truncations) and random byte changes: our path either
    reads what protobuf reads or raises DecodeError where protobuf does."""
    rng = random.Random(7)
    cases = []
    for _ in range(150):
        raw = random_message(rng)
        cases += [raw[:cut] for cut in range(len(raw))]
        for _ in range(10):
            b = bytearray(raw or b"\x00")
            b[rng.randrange(len(b))] = rng.randrange(256)
            cases.append(bytes(b))
    # hand-made: an 11-byte varint, a 10th byte above 1, a group, field number 0
    cases += [
        tag(3, 2) + varint(11) + b"\xff" * 10 + b"\x01",
        tag(3, 2) + varint(10) + b"\xff" * 9 + b"\x02",
        tag(3, 0) + b"\xff" * 9 + b"\x7f",
        tag(9, 3) + tag(9, 4),
        b"\x00\x01",
        tag(2, 0) + varint(5),  # a string field sent as a varint
    ]
    refused = 0
    for raw in cases:
        try:
            expected = protobufs(raw)
        except DecodeError:
            with pytest.raises(DecodeError):
                ours(raw)
            refused += 1
        else:
            assert ours(raw) == expected, raw.hex()
    assert refused > 100  # the cases did reach protobuf's refusals


def test_an_invalid_utf8_id_is_refused_as_protobuf_refuses_it():
    raw = length_delimited(NUMBER["instance_id"], b"\xff\xfe")
    with pytest.raises(DecodeError):
        protobufs(raw)
    with pytest.raises(DecodeError):
        ours(raw)


def random_result(rng: random.Random) -> PackedQueryResult:
    n, slots = rng.randrange(0, 40), rng.randrange(1, 9)

    def column(size: int) -> np.ndarray:
        return np.array(random_values(rng, size), np.int64)

    return PackedQueryResult(
        block_size_tokens=rng.choice([0, 1, 16, 512, 2**40]),
        capacity_gb=tuple(rng.uniform(0, 1000) for _ in range(slots)),
        total_blocks=column(n),
        input_token_lens=column(n),
        hit_blocks=column(n * slots).reshape(n, slots),
        max_hit_blocks=column(n) if rng.random() < 0.7 else None,
        unique_blocks=column(n),
    )


def test_answers_are_the_bytes_protobuf_writes():
    rng = random.Random(11)
    for _ in range(500):
        result = random_result(rng)
        trace_id = rng.choice(["", "t-1", "é"])
        best = result.max_hit_blocks
        expected = pb2.TraceQueryPackedResponse(
            header={"status": {"code": pb2.OK}, "request_id": trace_id},
            block_size=result.block_size_tokens,
            capacity_gb=result.capacity_gb,
            total_blocks=result.total_blocks.tolist(),
            input_token_lens=result.input_token_lens.tolist(),
            cache_hit_counts=result.hit_blocks.ravel().tolist(),
            max_hit_counts=[] if best is None else best.tolist(),
            current_unique_keys=result.unique_blocks.tolist(),
        ).SerializeToString()
        assert pf.answer_bytes(result, trace_id) == expected
    back = wire.packed_result_from_pb(
        pb2.TraceQueryPackedResponse.FromString(pf.answer_bytes(result, "x"))
    )
    assert back.hit_blocks.tolist() == result.hit_blocks.tolist()


def test_a_refusal_is_the_header_protobuf_writes():
    expected = pb2.TraceQueryPackedResponse(
        header={"status": {"code": pb2.INVALID_ARGUMENT, "message": "query 3: bad"},
                "request_id": "t"}
    ).SerializeToString()  # fmt: skip
    assert pf.error_bytes("t", pb2.INVALID_ARGUMENT, "query 3: bad") == expected


def test_a_field_the_kernels_cannot_read_is_refused_at_import():
    """Deny by default, walking real descriptors: the request and answer as they are
    pass; messages with other fields, or arrays elsewhere, are refused by name."""
    assert pf.request_kinds().tolist()[1:] == [1, 1, 2, 3, 2, 2]
    assert pf.answer_first_field() == 4
    with pytest.raises(ValueError, match=r"TraceQueryRequest\.\w+ has no compiled decoding"):
        pf.request_kinds(pb2.TraceQueryRequest)
    with pytest.raises(ValueError, match="TraceQueryPackedRequest: total_blocks, "):
        pf.answer_first_field(pb2.TraceQueryPackedRequest)


def test_undecodable_arrays_end_the_stream_after_the_answers_before_them():
    """The ids scan passes (the loop starts the batch) but a key's varint is truncated:
    the batch before it is answered, then the call ends with INVALID_ARGUMENT naming the
    message, as for any undecodable message; the server serves on."""
    import grpc
    from conftest import LiveServer
    from test_manager import make_group, make_reg

    live = LiveServer()
    try:
        with live.client() as client:
            client.create_instance_group(make_group())
            client.register_instance(make_reg("i"))
        good = wire.packed_query_to_pb("i", [1, 2], [2], [8]).SerializeToString()
        bad = (length_delimited(NUMBER["instance_id"], b"i")
               + length_delimited(NUMBER["key_counts"], varint(1))
               + length_delimited(NUMBER["block_keys"], b"\xff"))  # fmt: skip
        with pytest.raises(DecodeError):
            protobufs(bad)
        assert pf.packed_frame(bad).instance_id == "i"  # the scan lets it through
        channel = grpc.insecure_channel(live.target)
        call = channel.stream_stream(f"/{pb2.SERVICE_NAME}/TraceQueryPackedStream")
        answers = []
        with pytest.raises(grpc.RpcError) as info:
            for raw in call(iter([good, good, bad, good]), timeout=10):
                answers.append(pb2.TraceQueryPackedResponse.FromString(raw))
        assert [list(a.cache_hit_counts) for a in answers] == [[0, 0], [2, 2]]
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == (
            "TraceQueryPackedStream: message 3 of the stream could not be decoded as "
            "TraceQueryPackedRequest"
        )
        channel.close()
        metric = ("litehit_undecodable_messages_total", (("method", "TraceQueryPackedStream"),))
        assert live.scrape()[metric] == 1
        with live.client() as client:
            (result,) = client.stream_packed([wire.packed_query_to_pb("i", [1, 2], [2], [8])])
            assert result.hit_blocks.tolist() == [[2, 2]]
    finally:
        live.stop()


def test_stream_batches_run_on_the_batch_threads_at_most_parallel_batches_at_once():
    """Catches the batch threads bypassed (batches of streams on the general work
    threads) or more batches running at once than ``parallel_batches``: two streams on
    two instances, one batch thread: the batches never overlap."""
    import threading
    import time

    from conftest import LiveServer
    from test_manager import make_group, make_reg

    from litehit_service.manager import OnlineOptimizerManager
    from litehit_service.server import ServerOptions, usable_cpus

    assert ServerOptions().parallel_batches == usable_cpus() >= 1
    with pytest.raises(ValueError, match="parallel_batches must be > 0, got 0"):
        ServerOptions(parallel_batches=0)
    manager = OnlineOptimizerManager()
    seen: list[tuple[str, float, float]] = []
    apply = manager.trace_query_packed

    def traced(*args):
        start = time.perf_counter()
        time.sleep(0.01)  # long enough for the other stream's batch to overlap
        out = apply(*args)
        seen.append((threading.current_thread().name, start, time.perf_counter()))
        return out

    manager.trace_query_packed = traced  # type: ignore[method-assign]
    live = LiveServer(manager, parallel_batches=1)
    try:
        with live.client() as client:
            client.create_instance_group(make_group())
            for iid in ("i", "j"):
                client.register_instance(make_reg(iid))

        def send(iid: str) -> None:
            with live.client() as client:
                batches = [wire.packed_query_to_pb(iid, [k, k + 1], [2], [8]) for k in range(8)]
                assert len(list(client.stream_packed(batches))) == 8

        threads = [threading.Thread(target=send, args=(iid,)) for iid in ("i", "j")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        live.stop()
    assert len(seen) == 16
    assert {name.rsplit("_", 1)[0] for name, _, _ in seen} == {"litehit-batch"}
    spans = sorted((start, end) for _, start, end in seen)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))  # one at a time


def test_decoded_arrays_do_not_share_the_threads_buffer():
    """Catches the arrays handed out as views of the per-thread decoding buffer: the next
    batch decoded on the same thread would overwrite the previous batch's keys."""
    first = wire.packed_query_to_pb("i", [1, 2, 3], [3], [12]).SerializeToString()
    second = wire.packed_query_to_pb("i", [7, 8, 9, 10], [4], [16]).SerializeToString()
    _, keys, counts, lens, _ = pf.frame_arrays(pf.packed_frame(first))
    pf.frame_arrays(pf.packed_frame(second))
    assert (keys.tolist(), counts.tolist(), lens.tolist()) == ([1, 2, 3], [3], [12])
