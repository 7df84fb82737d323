"""An operator's log stays readable: a client cancelling a stream mid-batch is normal life
(no ERROR, no "Task exception was never retrieved"), and a flood of bad queries yields a
bounded number of lines while ``litehit_errors_total`` counts every one (issue 21)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import scrape
from served import Served

from litehit_service import messages as pb2
from litehit_service import wire
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

REG = InstanceRegistration(
    "inst", "g", 4, (LocationSpec("kv", 1024),), (LocationSpecGroup("full", ("kv",)),)
)
STREAMS = 4
ROUNDS = 3


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served("127.0.0.1", "--data-dir", str(tmp_path / "d"), "--open-admin")
    try:
        with server.client() as client:
            client.create_instance_group(InstanceGroup("g", (1.0,)))
            client.register_instance(REG)
        yield server
    finally:
        server.kill()


def _batch(n: int, size: int = 64) -> pb2.TraceQueryBatchRequest:
    return pb2.TraceQueryBatchRequest(
        queries=[
            pb2.TraceQueryRequest(
                instance_id="inst", block_keys=[n * 1000 + i, i + 1], input_token_len=8
            )
            for i in range(size)
        ]
    )


def _packed(n: int, size: int = 64) -> pb2.TraceQueryPackedRequest:
    keys = [k for i in range(size) for k in (n * 1000 + i, i + 1)]
    return wire.packed_query_to_pb("inst", keys, [2] * size, [8] * size)


def _bytes(message) -> bytes:
    return message.SerializeToString()


def _cancel_mid_stream(channel: grpc.Channel, method: str, make, stall: bool) -> None:
    """Open ``method``, read two answers, then cancel: with ``stall`` the sender waits
    (the server is reading), otherwise it keeps sending (the server is mid-batch)."""
    release = threading.Event()

    def requests():
        n = 0
        while not release.is_set():
            n += 1
            if stall and n > 2:
                release.wait(30)
                return
            yield make(n)

    call = channel.stream_stream(f"/{pb2.SERVICE_NAME}/{method}", request_serializer=_bytes)(
        requests()
    )
    try:
        for answered, _ in enumerate(call, 1):
            if answered == 2:
                break
    finally:
        call.cancel()
        release.set()


def test_cancelled_streams_log_no_error(served: Served):
    """Several streams of both kinds, cancelled mid-stream several times over: the server
    logs no ERROR and goes on answering."""
    with grpc.insecure_channel(served.target) as channel:
        for _ in range(ROUNDS):
            threads = [
                threading.Thread(
                    target=_cancel_mid_stream,
                    args=(channel, method, make, k % 2 == 0),
                )
                for k in range(STREAMS)
                for method, make in (
                    ("TraceQueryStream", _batch),
                    ("TraceQueryPackedStream", _packed),
                )
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
    with served.client() as client:
        assert client.trace_query("inst", [1, 2], 8).header.status.code == pb2.OK
        summaries = client.list_instances()
    assert summaries.instances[0].total_queries > 0
    served.stop()
    assert served.code == 0, served.log
    assert "Task exception was never retrieved" not in served.log, served.log
    assert " ERROR " not in served.log, served.log
    assert "TraceQueryPackedStream from ipv" in served.log, served.log


FLOOD = 3000
"""Bad queries of the flood (an instance that is not registered)."""


def test_a_flood_of_bad_queries_is_a_few_log_lines(served: Served):
    """Every bad query is counted in ``litehit_errors_total``; the log gets one line per
    kind, instance and peer and a summary of the rest (written at the latest when the
    server stops)."""
    queries = (
        pb2.TraceQueryRequest(instance_id="nope", block_keys=[k, k + 1], input_token_len=8)
        for k in range(FLOOD)
    )
    with served.client() as client:
        answers = list(client.stream_trace_queries(queries, batch_size=100, check=False))
        assert [a.header.status.code for a in answers] == [pb2.INSTANCE_NOT_EXIST] * FLOOD
        for _ in range(FLOOD // 100):
            with pytest.raises(Exception, match="nope"):
                list(client.stream_packed([wire.packed_query_to_pb("nope", [1], [1], [4])]))
        for k in range(FLOOD // 10):
            assert client.trace_query("nope", [k], 4, check=False).header.status.code == (
                pb2.INSTANCE_NOT_EXIST
            )
    samples = scrape(served.metrics)
    errors = {
        dict(labels)["method"]: value
        for (name, labels), value in samples.items()
        if name == "litehit_errors_total" and dict(labels)["code"] == "INSTANCE_NOT_EXIST"
    }
    assert errors == {
        "TraceQueryStream": FLOOD,
        "TraceQueryPackedStream": FLOOD // 100,
        "TraceQuery": FLOOD // 10,
    }
    served.stop()
    rejected = [line for line in served.log.splitlines() if "nope" in line]
    assert 3 <= len(rejected) <= 6, served.log  # 3 kinds: a line each and its summary
    assert f"… {FLOOD - 1:,} more like this (TraceQueryStream INSTANCE_NOT_EXIST" in served.log


def test_admin_actions_are_logged_with_the_peer(served: Served):
    with served.client() as client:
        client.reset_stats("inst")
        client.remove_instance("inst")
        client.update_instance_group(InstanceGroup("g", (2.0, 1.0)))
        client.remove_instance_group("g")
    served.stop()
    peer = r"by ipv4:127\.0\.0\.1:\d+: "
    for line in (
        "CreateInstanceGroup " + peer + "instance group created: 'g', capacity_gb \\[1\\]",
        "RegisterInstance " + peer + "instance 'inst' of group 'g' registered \\(created\\)",
        "UpdateInstanceGroup " + peer + "instance group updated: 'g', capacity_gb \\[2, 1\\]",
        "ResetStats " + peer + "statistics of instance 'inst' reset",
        "RemoveInstance " + peer + "instance 'inst' removed",
        "RemoveInstanceGroup " + peer + "instance group 'g' removed",
    ):
        assert re.search(line, served.log), (line, served.log)


def test_refused_tokens_are_a_warning_with_the_peer(tmp_path: Path):
    server = Served("127.0.0.1", "--data-dir", str(tmp_path / "d"), "--admin-token", "s3")
    try:
        for _ in range(20):
            assert server.admin_code(None, "g") == grpc.StatusCode.UNAUTHENTICATED
        assert server.admin_code("wrong", "g") == grpc.StatusCode.UNAUTHENTICATED
        server.stop()
    finally:
        server.kill()
    refused = [line for line in server.log.splitlines() if "refused" in line]
    assert len(refused) == 2, server.log
    assert re.search(
        r"WARNING .*CreateInstanceGroup from ipv4:127\.0\.0\.1:\d+ refused: missing or wrong",
        refused[0],
    )
    assert "WARNING" in refused[1], server.log
    assert (
        "… 20 more like this (refused: missing or wrong authorization token) from ipv4:"
        in (refused[1])
    )


SUMMARY = re.compile(
    r"… ([\d,]+) more like this \(TraceQuery INSTANCE_NOT_EXIST, instance 'nope'\)"
)


def test_a_flood_that_stopped_is_summarised_without_another_event(start_server, caplog):
    """The server flushes its limiters periodically: the summary of the last repeats comes
    within a bounded wait, with no further event and no stop; full lines and summaries
    account for every bad query (however the flood fell across intervals)."""
    caplog.set_level(logging.INFO)
    server = start_server(log_summary_seconds=0.5)
    with server.client() as client:
        for k in range(FLOOD // 10):
            client.trace_query("nope", [k], 4, check=False)

    def accounted() -> tuple[int, bool]:
        total, last_is_summary = 0, False
        for record in list(caplog.records):
            text = record.getMessage()
            if "'nope'" not in text:
                continue
            match = SUMMARY.search(text)
            total += int(match[1].replace(",", "")) if match else 1
            last_is_summary = match is not None
        return total, last_is_summary

    for _ in range(200):  # bounded: 20 s at most
        if accounted() == (FLOOD // 10, True):
            break
        time.sleep(0.1)
    assert accounted() == (FLOOD // 10, True), caplog.text
