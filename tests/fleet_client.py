"""One gateway of the fleet test (``tests/test_fleet.py``), run as its own process:
``python fleet_client.py TARGET INSTANCE SEED FLOOD``.

Streams a seeded synthetic trace (conversations sharing prefixes: a query's keys are its
conversation's first 1-24 blocks) to ``INSTANCE``, alternating TraceQueryStream and
TraceQueryPackedStream, :data:`STREAMS` streams of :data:`BATCHES` batches; every third
stream is cancelled mid-stream (after :data:`CANCEL_AFTER` batches answered, with the
sender waiting, so every batch it sent was answered). Then sends ``FLOOD`` queries for an
instance that is not registered (``nope``) over a TraceQueryStream. Prints one JSON line:
``{"answered": queries acknowledged OK, "rejected": bad queries answered
INSTANCE_NOT_EXIST, "cancelled": streams cancelled}``. Every wait is bounded
(:data:`TIMEOUT` per call).
"""

from __future__ import annotations

import json
import random
import sys
import threading

import grpc

from litehit_service import messages as pb2
from litehit_service import wire
from litehit_service.client import OptimizerClient

STREAMS = 6
BATCHES = 4
BATCH = 50
CANCEL_AFTER = 2
TIMEOUT = 60.0
BLOCK_TOKENS = 4


def synthetic_queries(rng: random.Random, n: int) -> list[list[int]]:
    """``n`` queries' block keys: conversations of up to 24 blocks, 40 of them, Zipf-ish."""
    queries = []
    for _ in range(n):
        conversation = int(rng.paretovariate(1.2)) % 40
        length = rng.randint(1, 24)
        queries.append([conversation * 1000 + j for j in range(length)])
    return queries


def _bytes(message) -> bytes:
    return message.SerializeToString()


def batch_message(instance: str, keys: list[list[int]], packed: bool):
    if packed:
        flat = [k for q in keys for k in q]
        lengths = [len(q) for q in keys]
        return wire.packed_query_to_pb(instance, flat, lengths, [n * BLOCK_TOKENS for n in lengths])
    return pb2.TraceQueryBatchRequest(
        queries=[
            pb2.TraceQueryRequest(
                instance_id=instance, block_keys=q, input_token_len=len(q) * BLOCK_TOKENS
            )
            for q in keys
        ]
    )


def one_stream(channel: grpc.Channel, instance: str, batches: list, packed: bool, cancel: bool):
    """Stream ``batches``; with ``cancel``, send :data:`CANCEL_AFTER` batches, read their
    answers and cancel while the sender waits. Returns the queries answered OK."""
    method = "TraceQueryPackedStream" if packed else "TraceQueryStream"
    release = threading.Event()
    sent = batches[:CANCEL_AFTER] if cancel else batches

    def requests():
        for keys in sent:
            yield batch_message(instance, keys, packed)
        if cancel:
            release.wait(TIMEOUT)  # the stream stays open, the server waiting for more

    call = channel.stream_stream(
        f"/{pb2.SERVICE_NAME}/{method}",
        request_serializer=_bytes,
        response_deserializer=(
            pb2.TraceQueryPackedResponse if packed else pb2.TraceQueryBatchResponse
        ).FromString,
    )(requests(), timeout=TIMEOUT)
    answered = 0
    try:
        for n, response in enumerate(call, 1):
            if packed:
                assert response.header.status.code == pb2.OK, response.header
                answered += len(sent[n - 1])
            else:
                codes = [r.header.status.code for r in response.results]
                assert codes == [pb2.OK] * len(sent[n - 1]), codes
                answered += len(codes)
            if n == len(sent):
                break
    finally:
        if cancel:
            call.cancel()
        release.set()
    if not cancel:
        for _ in call:  # the end of the stream (bounded by TIMEOUT)
            pass
    return answered


def main(target: str, instance: str, seed: int, flood: int) -> dict[str, int]:
    rng = random.Random(seed)
    answered = cancelled = rejected = 0
    with grpc.insecure_channel(target) as channel:
        for s in range(STREAMS):
            batches = [synthetic_queries(rng, BATCH) for _ in range(BATCHES)]
            cancel = s % 3 == 2
            answered += one_stream(channel, instance, batches, s % 2 == 1, cancel)
            cancelled += cancel
    if flood:
        bad = (
            pb2.TraceQueryRequest(instance_id="nope", block_keys=[k, k + 1], input_token_len=8)
            for k in range(flood)
        )
        with OptimizerClient(target, timeout=TIMEOUT) as client:
            for answer in client.stream_trace_queries(bad, batch_size=100, check=False):
                assert answer.header.status.code == pb2.INSTANCE_NOT_EXIST, answer.header
                rejected += 1
    return {"answered": answered, "rejected": rejected, "cancelled": cancelled}


if __name__ == "__main__":
    target, instance, seed, flood = sys.argv[1:5]
    print(json.dumps(main(target, instance, int(seed), int(flood))), flush=True)
