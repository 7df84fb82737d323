"""OptimizerClient's two tokens against a real server started with both: ``query_token``
goes on the query RPCs (TraceQuery*), ``admin_token`` on everything else (and on queries
when no query token is given)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from conftest import LiveServer

from litehit_service import messages as pb2
from litehit_service.client import OptimizerClient
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.wire import packed_query_to_pb

ADMIN, QUERY = "admin-s3cret", "query-s3cret"
GROUP = InstanceGroup("g", (1.0,))
REG = InstanceRegistration(
    "inst", "g", 4, (LocationSpec("kv", 1024),), (LocationSpecGroup("full", ("kv",)),)
)


@pytest.fixture
def live() -> Iterator[LiveServer]:
    with LiveServer(admin_token=ADMIN, query_token=QUERY) as server:
        with server.client(admin_token=ADMIN) as admin:
            admin.create_instance_group(GROUP)
            admin.register_instance(REG)
        yield server


def run_queries(client: OptimizerClient) -> list[int]:
    """One query by each query RPC; the number of results each returned."""
    unary = client.trace_query("inst", [1, 2], 8)
    assert unary.header.status.code == pb2.OK
    request = pb2.TraceQueryRequest(instance_id="inst", block_keys=[1, 2], input_token_len=8)
    streamed = list(client.stream_trace_queries([request]))
    packed = list(client.stream_packed([packed_query_to_pb("inst", [1, 2], [2], [8])]))
    return [1, len(streamed), len(packed)]


def unauthenticated(call) -> bool:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code() is grpc.StatusCode.UNAUTHENTICATED
    return False


def test_query_token_alone_queries_and_reads_but_cannot_administer(live: LiveServer):
    with live.client(query_token=QUERY, retries=0) as client:
        assert run_queries(client) == [1, 1, 1]
        (summary,) = client.list_instances().instances
        assert summary.total_queries == 3
        assert unauthenticated(lambda: client.reset_stats("inst"))
    assert live.manager.list_instances()[0].total_queries == 3


def test_both_tokens_each_on_its_kind_of_call(live: LiveServer):
    with live.client(admin_token=ADMIN, query_token=QUERY, retries=0) as client:
        assert run_queries(client) == [1, 1, 1]
        assert client.reset_stats("inst").header.status.code == pb2.OK
    # the query token, not the admin token, is what a query carries when both are given
    with live.client(admin_token=ADMIN, query_token="wrong", retries=0) as client:
        assert unauthenticated(lambda: client.trace_query("inst", [1, 2], 8))
        request = pb2.TraceQueryRequest(instance_id="inst", block_keys=[1], input_token_len=4)
        assert unauthenticated(lambda: list(client.stream_trace_queries([request])))
        batch = packed_query_to_pb("inst", [1], [1], [4])
        assert unauthenticated(lambda: list(client.stream_packed([batch])))
        assert client.reset_stats("inst").header.status.code == pb2.OK
    assert live.manager.list_instances()[0].total_queries == 0


def test_admin_token_alone_still_queries(live: LiveServer):
    with live.client(admin_token=ADMIN, retries=0) as client:
        assert run_queries(client) == [1, 1, 1]
