"""The real gRPC server on 127.0.0.1 (ephemeral ports), the client, the CLI and `litehit serve`."""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from conftest import LiveServer, require_binary, reserved_port, run_cli
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from serve_process import ServeProcess

from litehit_core import LocatedError
from litehit_service import messages as pb2
from litehit_service.cli import main as litehit_main
from litehit_service.client import OptimizerClient
from litehit_service.commands import UsageError
from litehit_service.commands import instances as instances_cmd
from litehit_service.commands import serve as serve_cmd
from litehit_service.entries import load_groups_file
from litehit_service.errors import InvalidArgument
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.policy import QueryPolicy
from litehit_service.registry import Registry
from litehit_service.server import create_server
from litehit_service.service import apply_groups
from litehit_service.servicer import OptimizerServicer

GIB = 1024**3
CAP1, CAP2 = 1024 / GIB, 2048 / GIB  # 1 and 2 blocks of 1024 bytes: different hits
LRU = pb2.OPTIMIZER_EVICTION_POLICY_LRU
WORKED_EXAMPLE = [([1, 2, 3], 13), ([1, 2, 4], 12), ([1, 2, 3], 13), ([1, 5], 8), ([1, 5], 8)]
EXAMPLE_GROUP = InstanceGroup("g", (CAP1, CAP2), enable_theoretical_max_cache=True)
OTHER_G = InstanceGroup("g", (CAP1,), enable_theoretical_max_cache=True)
EXAMPLE_REG = InstanceRegistration(
    "inst", "g", 4, (LocationSpec("kv", 1024),), (LocationSpecGroup("full", ("kv",)),)
)


class Live(LiveServer):
    """A :class:`LiveServer` around a manager with a SQLite registry in ``tmp_path``."""

    def __init__(self, tmp_path: Path, max_block_keys: int = 1_000_000, **options) -> None:
        registry = Registry(tmp_path / "litehit.sqlite3")
        manager = OnlineOptimizerManager(registry, QueryPolicy(max_block_keys=max_block_keys))
        super().__init__(manager, registry=registry, **options)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    server = Live(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def client(live: Live) -> Iterator[OptimizerClient]:
    with live.client() as c:
        yield c


def setup_example(client: OptimizerClient) -> None:
    assert client.create_instance_group(EXAMPLE_GROUP).header.status.code == pb2.OK
    assert client.register_instance(EXAMPLE_REG).header.status.code == pb2.OK


# ------------------------------------------------------------------------------- every RPC


def test_every_rpc_over_a_socket(client: OptimizerClient):
    created = client.create_instance_group(
        pb2.OptimizerInstanceGroupProto(name="tmp", eviction_policy=LRU, capacity_gb=[4.0, 1.0]),
        trace_id="c1",
    )
    assert (created.header.status.code, created.header.request_id) == (pb2.OK, "c1")
    updated = client.update_instance_group(
        InstanceGroup("tmp", (2.0,), ttl_seconds=5), trace_id="u1"
    )
    assert updated.header.status.code == pb2.OK
    got = client.get_instance_group("tmp")
    assert got.instance_group == pb2.OptimizerInstanceGroupProto(
        name="tmp", eviction_policy=LRU, capacity_gb=[2.0], ttl_seconds=5
    )
    setup_example(client)
    assert [g.name for g in client.list_instance_groups().instance_groups] == ["g", "tmp"]
    inst = client.get_instance("inst", trace_id="gi")
    assert (inst.header.request_id, inst.instance_group, inst.block_size) == ("gi", "g", 4)

    hits, theoretical = [], []
    for keys, tokens in WORKED_EXAMPLE:
        r = client.trace_query("inst", keys, tokens, trace_id="tq")
        assert r.header.status.code == pb2.OK and r.header.request_id == "tq"
        hits.append([c.cache_hit_count for c in r.capacity_results])
        theoretical.append(r.theoretical_result.max_hit_count)
    assert hits == [[0, 0], [1, 2], [1, 2], [1, 1], [1, 2]]
    assert theoretical == [0, 2, 3, 1, 2]

    listed = client.list_instances()
    (summary,) = listed.instances
    assert [c.hit_rate for c in summary.capacity_summaries] == [16 / 54, 28 / 54]
    assert [c.capacity_blocks for c in summary.capacity_summaries] == [1, 2]
    assert summary.theoretical_summary.max_hit_rate == 32 / 54
    assert list(client.list_instances("tmp").instances) == []

    assert client.reset_stats("inst").header.status.code == pb2.OK
    assert client.list_instances().instances[0].total_queries == 0
    assert client.remove_instance("inst").header.status.code == pb2.OK
    assert client.remove_instance_group("g").header.status.code == pb2.OK
    assert client.remove_instance_group("tmp").header.status.code == pb2.OK
    assert list(client.list_instance_groups().instance_groups) == []


def test_every_error_code_over_a_socket(live: Live, client: OptimizerClient):
    setup_example(client)
    # an identical group is created idempotently (what a restarting gateway does)
    assert client.create_instance_group(EXAMPLE_GROUP).header.status.code == pb2.OK
    status = client.create_instance_group(OTHER_G, check=False).header.status
    assert (status.code, status.message) == (
        pb2.DUPLICATE_ENTITY,
        "instance group 'g' already exists",
    )
    status = client.get_instance_group("nope", check=False).header.status
    assert (status.code, status.message) == (
        pb2.INSTANCE_NOT_EXIST,
        "instance group 'nope' does not exist",
    )
    status = client.remove_instance_group("g", check=False).header.status
    assert status.code == pb2.INVALID_ARGUMENT and "still has 1 registered" in status.message
    status = client.create_instance_group(
        InstanceGroup("s", (1.0,), shared_group_quota=True), check=False
    ).header.status
    assert status.code == pb2.UNSUPPORTED
    status = client.trace_query("ghost", [1], 4, check=False).header.status
    assert (status.code, status.message) == (
        pb2.INSTANCE_NOT_EXIST,
        "instance_id 'ghost' is not registered",
    )
    status = client.trace_query("inst", [1, 2], 4, check=False).header.status
    assert status.code == pb2.INVALID_ARGUMENT and "len(block_keys) is 2" in status.message
    live.registry.close()
    status = client.remove_instance("inst", check=False).header.status
    assert (status.code, status.message) == (
        pb2.IO_ERROR,
        f"registry {str(live.registry.path)!r}: delete_instance 'inst' failed: registry is closed",
    )
    assert client.get_instance("inst", check=False).header.status.code == pb2.OK  # still registered


def test_client_raises_one_typed_error_per_error_code(live: Live, client: OptimizerClient):
    from litehit_service.errors import (
        DuplicateEntity,
        InstanceNotExist,
        InvalidArgument,
        RegistryIOError,
        Unsupported,
    )
    from litehit_service.wire import ERROR_TABLE

    setup_example(client)
    cases = [
        (lambda: client.create_instance_group(OTHER_G, trace_id="t1"), DuplicateEntity),
        (lambda: client.get_instance_group("nope", trace_id="t2"), InstanceNotExist),
        (lambda: client.remove_instance_group("g", trace_id="t3"), InvalidArgument),
        (
            lambda: client.create_instance_group(
                InstanceGroup("s", (1.0,), shared_group_quota=True), trace_id="t4"
            ),
            Unsupported,
        ),
        (lambda: client.trace_query("ghost", [1], 4, trace_id="t5"), InstanceNotExist),
        (lambda: client.trace_query("inst", [1, 2], 4, trace_id="t6"), InvalidArgument),
    ]
    for i, (call, cls) in enumerate(cases, 1):
        with pytest.raises(cls) as info:
            call()
        assert type(info.value) is cls
        assert (info.value.code, info.value.trace_id) == (ERROR_TABLE[cls], f"t{i}")
        assert info.value.message == str(info.value) and info.value.message
    # the stream helper raises at the failing query, after yielding the ones before it
    queries = [
        pb2.TraceQueryRequest(instance_id="inst", block_keys=[1], input_token_len=4),
        pb2.TraceQueryRequest(instance_id="ghost", block_keys=[1], input_token_len=4, trace_id="q"),
    ]
    got = []
    with pytest.raises(InstanceNotExist) as info:
        for r in client.stream_trace_queries(queries):
            got.append(r)
    assert len(got) == 1 and info.value.trace_id == "q"
    assert [r.header.status.code for r in client.stream_trace_queries(queries, check=False)] == [
        pb2.OK,
        pb2.INSTANCE_NOT_EXIST,
    ]
    live.registry.close()
    with pytest.raises(RegistryIOError):
        client.remove_instance("inst")


def test_max_block_keys_limit(tmp_path: Path):
    live = Live(tmp_path, max_block_keys=3)
    try:
        with live.client() as client:
            setup_example(client)
            assert client.trace_query("inst", [1, 2, 3], 12).header.status.code == pb2.OK
            status = client.trace_query("inst", [1, 2, 3, 4], 16, check=False).header.status
            assert (status.code, status.message) == (
                pb2.INVALID_ARGUMENT,
                "block_keys has 4 keys, more than max_block_keys 3",
            )
    finally:
        live.stop()


def test_max_message_bytes_is_a_grpc_error(tmp_path: Path):
    live = Live(tmp_path, max_message_bytes=1024)
    try:
        with live.client() as client:
            setup_example(client)
            with pytest.raises(grpc.RpcError) as info:
                client.trace_query("inst", list(range(10**12, 10**12 + 400)), 1600)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert client.trace_query("inst", [1, 2], 8).header.status.code == pb2.OK
            assert client.list_instances().instances[0].total_queries == 1
    finally:
        live.stop()


def test_port_in_use_raises_oserror(live: Live):
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{live.port}"):
        create_server(live.manager, None, f"127.0.0.1:{live.port}").start()


# ------------------------------------------------------------------------------- streaming


def _q(trace_id: str, keys, tokens: int, instance_id: str = "inst") -> pb2.TraceQueryRequest:
    return pb2.TraceQueryRequest(
        trace_id=trace_id, instance_id=instance_id, block_keys=keys, input_token_len=tokens
    )


def test_stream_helper_with_a_bad_query_inside_a_batch(client: OptimizerClient):
    setup_example(client)
    requests = [_q(f"w{i}", k, t) for i, (k, t) in enumerate(WORKED_EXAMPLE)]
    requests.insert(2, _q("bad", [1], 4, instance_id="ghost"))
    requests.insert(4, _q("neg", [1], -3))
    results = list(client.stream_trace_queries(iter(requests), batch_size=3, check=False))
    assert [r.header.request_id for r in results] == ["w0", "w1", "bad", "w2", "neg", "w3", "w4"]
    assert [pb2.ErrorCode.Name(r.header.status.code) for r in results] == [
        "OK",
        "OK",
        "INSTANCE_NOT_EXIST",
        "OK",
        "INVALID_ARGUMENT",
        "OK",
        "OK",
    ]
    good = [r for r in results if r.header.status.code == pb2.OK]
    assert [[c.cache_hit_count for c in r.capacity_results] for r in good] == [
        [0, 0],
        [1, 2],
        [1, 2],
        [1, 1],
        [1, 2],
    ]
    assert [r.theoretical_result.max_hit_count for r in good] == [0, 2, 3, 1, 2]
    summary = client.list_instances().instances[0]
    assert summary.total_queries == 5
    assert [c.hit_rate for c in summary.capacity_summaries] == [16 / 54, 28 / 54]
    assert summary.theoretical_summary.max_hit_rate == 32 / 54


def test_stream_helper_batches_many_queries_in_order(live: Live, client: OptimizerClient):
    client.create_instance_group(InstanceGroup("big", (1.0,)))
    reg = InstanceRegistration(
        "b", "big", 4, (LocationSpec("kv", 1024),), (LocationSpecGroup("full", ("kv",)),)
    )
    client.register_instance(reg)
    n = 600  # batches of 256, 256, 88
    requests = (_q(str(i), [i % 7, 100 + i % 3], 8, instance_id="b") for i in range(n))
    results = list(client.stream_trace_queries(requests))
    assert [r.header.request_id for r in results] == [str(i) for i in range(n)]
    assert all(r.header.status.code == pb2.OK for r in results)
    # raw keys (no prefix hash): key i%7 is cold only on its first use (i < 7), key 100+i%3
    # only for i < 3, so from query 7 on both blocks hit
    assert [r.capacity_results[0].cache_hit_count for r in results] == [0] * 7 + [2] * (n - 7)
    assert live.manager.list_instances("big")[0].total_queries == n
    with pytest.raises(ValueError, match="batch_size must be > 0, got 0"):
        next(client.stream_trace_queries([], batch_size=0))


# ------------------------------------------------------------------------------- admin token


def _call_every_method(channel: grpc.Channel, metadata: tuple) -> dict[str, grpc.StatusCode]:
    """Call every method of the OptimizerService descriptor with an empty (but valid)
    request; returns each method's gRPC status code (OK when it answered)."""
    service = pb2.FILE_DESCRIPTOR.services_by_name["OptimizerService"]
    codes = {}
    for method in service.methods:
        path = f"/{service.full_name}/{method.name}"
        empty = getattr(pb2, method.input_type.name)().SerializeToString()
        try:
            if method.client_streaming:
                call = channel.stream_stream(path)
                list(call(iter([empty]), metadata=metadata, timeout=10))
            else:
                channel.unary_unary(path)(empty, metadata=metadata, timeout=10)
            codes[method.name] = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            codes[method.name] = exc.code()
    return codes


@pytest.mark.parametrize("query_token", [None, "q-token"])
def test_every_method_is_guarded_by_its_kind(tmp_path: Path, query_token: str | None):
    """Walks the service descriptor (never a hand list): reads are open, queries need the
    query token (or the admin token), everything else the admin token; a refused call is
    UNAUTHENTICATED and changes nothing."""
    from litehit_service.access import Access, method_access

    live = Live(tmp_path, admin_token="s3cret", query_token=query_token)
    try:
        with live.client(admin_token="s3cret") as admin:
            setup_example(admin)
            admin.trace_query("inst", [1, 2], 8)
        before = (live.manager.list_groups(), live.manager.list_instances())
        kinds = {
            m.name: method_access(m.name)
            for m in pb2.FILE_DESCRIPTOR.services_by_name["OptimizerService"].methods
        }
        assert kinds["ListInstances"] is Access.READ and kinds["TraceQueryStream"] is Access.QUERY
        assert kinds["ResetStats"] is Access.ADMIN and kinds["RegisterInstance"] is Access.ADMIN
        channel = grpc.insecure_channel(live.target)
        for token in (None, "wrong", "s3cret", query_token):
            metadata = (("authorization", f"Bearer {token}"),) if token else ()
            codes = _call_every_method(channel, metadata)
            for name, kind in kinds.items():
                if kind is Access.READ:
                    allowed = True
                elif kind is Access.QUERY:
                    allowed = query_token is None or token in ("s3cret", query_token)
                else:
                    allowed = token == "s3cret"
                if allowed:
                    assert codes[name] is not grpc.StatusCode.UNAUTHENTICATED, (name, token)
                else:
                    assert codes[name] is grpc.StatusCode.UNAUTHENTICATED, (name, token)
            if token != "s3cret":
                assert (live.manager.list_groups(), live.manager.list_instances()) == before
        channel.close()
        with live.client(admin_token="s3cret", retries=0) as admin:
            with pytest.raises(grpc.RpcError) as info:
                admin.health("missing")  # health stays open: NOT_FOUND, not UNAUTHENTICATED
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        live.stop()


def test_a_method_added_later_is_admin_by_default():
    from litehit_service.access import Access, method_access

    assert method_access("DeleteEverything") is Access.ADMIN
    assert method_access("CompactInstance") is Access.ADMIN
    assert method_access("GetHitRateCurve") is Access.READ
    assert method_access("TraceQueryPacked") is Access.QUERY


# ------------------------------------------------------------------------------- health, reflection


def test_health_and_reflection(live: Live, client: OptimizerClient):
    assert client.health() == health_pb2.HealthCheckResponse.SERVING
    assert client.health(pb2.SERVICE_NAME) == (health_pb2.HealthCheckResponse.SERVING)
    with pytest.raises(grpc.RpcError) as info:
        client.health("no.such.Service")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND

    database = ProtoReflectionDescriptorDatabase(client.channel)
    services = set(database.get_services())
    assert {
        "kv_cache_manager.proto.optimizer.OptimizerService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= services
    from google.protobuf.descriptor_pool import DescriptorPool

    pool = DescriptorPool(database)
    remote = pool.FindMessageTypeByName("kv_cache_manager.proto.optimizer.TraceQueryRequest")
    assert remote.fields_by_name["timestamp_ns"].number == 6
    method = pool.FindServiceByName(
        "kv_cache_manager.proto.optimizer.OptimizerService"
    ).methods_by_name["TraceQueryStream"]
    assert method.client_streaming and method.server_streaming


# ------------------------------------------------------------------------------- client retries


def test_client_retries_until_a_late_server_is_up(tmp_path: Path):
    with reserved_port() as port:  # refused until the late server listens on it
        _retry_until_a_late_server_is_up(port)


def _retry_until_a_late_server_is_up(port: int) -> None:
    manager = OnlineOptimizerManager()
    manager.create_group(InstanceGroup("late", (1.0,)))
    started = threading.Event()
    holder: dict[str, grpc.Server] = {}

    def start_late() -> None:
        time.sleep(0.5)
        holder["server"] = create_server(manager, None, f"127.0.0.1:{port}").start()
        started.set()

    with OptimizerClient(f"127.0.0.1:{port}", timeout=2.0, retries=0) as impatient:
        with pytest.raises(grpc.RpcError) as info:
            impatient.list_instance_groups()
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE

    thread = threading.Thread(target=start_late)
    thread.start()
    try:
        with OptimizerClient(
            f"127.0.0.1:{port}", timeout=2.0, retries=12, backoff_initial=0.05, backoff_max=0.5
        ) as patient:
            assert patient.backoff_delays() == [0.05, 0.1, 0.2, 0.4] + [0.5] * 8
            response = patient.list_instance_groups()
        assert started.is_set()
        assert [g.name for g in response.instance_groups] == ["late"]
    finally:
        thread.join()
        holder["server"].stop()


class _StallingServicer(OptimizerServicer):
    """The real servicer, but ListInstanceGroups sleeps past the client's deadline on its
    first ``stalls`` calls (a server that is up but too slow)."""

    def __init__(self, manager: OnlineOptimizerManager, stalls: int) -> None:
        super().__init__(manager)
        self.calls = 0
        self.stalls = stalls

    def ListInstanceGroups(self, request, context):  # noqa: N802 - gRPC method name
        self.calls += 1
        if self.calls <= self.stalls:
            time.sleep(0.6)
        return super().ListInstanceGroups(request, context)


@pytest.mark.parametrize(("stalls", "retries"), [(2, 2), (3, 2)])
def test_client_retries_deadline_exceeded(stalls: int, retries: int) -> None:
    manager = OnlineOptimizerManager()
    manager.create_group(InstanceGroup("slow", (1.0,)))
    servicer = _StallingServicer(manager, stalls)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb2.add_OptimizerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with OptimizerClient(
            f"127.0.0.1:{port}", timeout=0.2, retries=retries, backoff_initial=0.01
        ) as client:
            if stalls <= retries:  # the attempt after the last stall answers
                response = client.list_instance_groups()
                assert [g.name for g in response.instance_groups] == ["slow"]
            else:  # every attempt timed out: the last DEADLINE_EXCEEDED is raised
                with pytest.raises(grpc.RpcError) as info:
                    client.list_instance_groups()
                assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert servicer.calls == min(stalls, retries + 1) + (stalls <= retries)
    finally:
        server.stop(0).wait()


def test_client_does_not_retry_other_errors(live: Live):
    with live.client(retries=5) as c:
        with pytest.raises(grpc.RpcError) as info:
            c.health("missing")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(ValueError, match="retries must be >= 0, got -1"):
        OptimizerClient("127.0.0.1:1", retries=-1)


# ------------------------------------------------------------------------------- TLS


def test_tls(tmp_path: Path):
    openssl = require_binary("openssl")  # .ci/run installs it
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    live = Live(tmp_path, tls_cert=cert, tls_key=key)
    try:
        with live.client(tls_ca=cert) as secure:
            assert secure.list_instance_groups().header.status.code == pb2.OK
        with live.client(retries=0, timeout=2.0) as plain:
            with pytest.raises(grpc.RpcError):
                plain.list_instance_groups()
    finally:
        live.stop()
    with pytest.raises(ValueError, match="TLS needs both a certificate and a key"):
        create_server(OnlineOptimizerManager(), None, tls_cert=cert)  # refused before binding


# ------------------------------------------------------------------------------- groups file


GROUPS_YAML = """\
instance_groups:
  - name: g
    eviction_policy: lru
    capacity_gb: [0.0000019073486328125, 0.00000095367431640625]
    enable_theoretical_max_cache: true
instances:
  - instance_id: inst
    instance_group: g
    block_size: 4
    location_spec_infos: [{name: kv, size: 1024}]
    location_spec_groups: [{name: full, spec_names: [kv]}]
"""


def test_load_groups_file_yaml_and_json(tmp_path: Path):
    yaml_file = tmp_path / "groups.yaml"
    yaml_file.write_text(GROUPS_YAML)
    groups, regs = load_groups_file(yaml_file)
    assert groups == [InstanceGroup("g", (CAP2, CAP1), enable_theoretical_max_cache=True)]
    assert regs == [EXAMPLE_REG]
    json_file = tmp_path / "groups.json"
    json_file.write_text(
        json.dumps(
            {
                "instance_groups": [{"name": "j", "capacity_gb": [1], "ttl_seconds": 30}],
                "instances": [
                    {
                        "instance_id": "i",
                        "instance_group": "j",
                        "block_size": 16,
                        "location_spec_infos": [
                            {"name": "k", "size": 10},
                            {"name": "v", "size": 20},
                        ],
                        "location_spec_groups": [{"name": "f", "spec_names": ["k", "v"]}],
                        "optimizer_state_info": {"full_location_spec_group_name": "f"},
                    }
                ],
            }
        )
    )
    groups, regs = load_groups_file(json_file)
    assert groups == [InstanceGroup("j", (1.0,), eviction_policy="lru", ttl_seconds=30)]
    assert regs[0].full_location_spec_group_name == "f"
    assert regs[0].location_spec_infos == (LocationSpec("k", 10), LocationSpec("v", 20))
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_groups_file(empty) == ([], [])


def test_groups_file_errors_name_the_file_entry_and_field(tmp_path: Path):
    bad = tmp_path / "bad.yaml"

    def error(text: str, name: str = "bad.yaml") -> str:
        (tmp_path / name).write_text(text)
        with pytest.raises(LocatedError) as info:
            load_groups_file(tmp_path / name)
        return str(info.value)

    where = f"{bad}:0"
    assert error("instance_groups:\n  - name: g\n    capacity: [1]\n").startswith(
        f"{where}: instance_groups[0].capacity: unknown field 'capacity'"
    )
    assert error("instance_groups: {}\n") == (
        f"{where}: instance_groups: must be an array, got object {{}}"
    )
    assert error("groups: []\n") == (
        f"{where}: groups: unknown field 'groups' (allowed: instance_groups, instances)"
    )
    assert error("instances: [{instance_id: i, instance_group: g, block_size: many}]\n") == (
        f'{where}: instances[0].block_size: must be an integer, got string "many"'
    )
    assert error("{", "broken.json") == (
        f"{tmp_path / 'broken.json'}:1: invalid JSON: Expecting property name enclosed in "
        "double quotes at column 2"
    )
    assert error("instance_groups: [\n", "broken.yaml").startswith(
        f"{tmp_path / 'broken.yaml'}:2: invalid YAML: "
    )
    with pytest.raises(LocatedError, match="missing.yaml:0: cannot read the groups file: No such"):
        load_groups_file(tmp_path / "missing.yaml")
    assert load_groups_file(_empty(tmp_path)) == ([], [])


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("instance_groups:\ninstances:\n")
    return path


def test_apply_groups_is_idempotent_and_all_or_nothing():
    manager = OnlineOptimizerManager(Registry.in_memory())
    assert apply_groups(manager, [EXAMPLE_GROUP], [EXAMPLE_REG]) == [
        "created group g",
        "registered instance inst",
    ]
    manager.trace_query("inst", [1, 2], 8)
    assert apply_groups(manager, [EXAMPLE_GROUP], [EXAMPLE_REG]) == []
    assert manager.list_instances()[0].total_queries == 1  # untouched

    bigger = InstanceGroup("g", (1.0,), enable_theoretical_max_cache=True)
    assert apply_groups(manager, [bigger], [EXAMPLE_REG]) == ["updated group g"]
    assert manager.get_group("g").capacity_gb == (1.0,)
    assert manager.get_instance("inst") == EXAMPLE_REG

    broken = InstanceRegistration(
        "new", "g", 0, EXAMPLE_REG.location_spec_infos, EXAMPLE_REG.location_spec_groups
    )
    with pytest.raises(InvalidArgument, match="block_size of instance_id 'new'"):
        apply_groups(manager, [InstanceGroup("other", (2.0,))], [broken])
    assert [g.name for g in manager.list_groups()] == ["g"]  # the valid group was not created


# ------------------------------------------------------------------------------- CLI pieces


def test_serve_options_flag_beats_env_beats_default():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    serve_cmd.register(sub)
    args = parser.parse_args(["serve", "--listen", "0.0.0.0:1"])
    values = serve_cmd.resolve(args, {"LITEHIT_LISTEN": "1.2.3.4:5", "LITEHIT_MAX_BLOCK_KEYS": "7"})
    assert values["listen"] == "0.0.0.0:1"
    assert values["max_block_keys"] == 7
    assert values["metrics_listen"] == "127.0.0.1:9464"
    assert values["data_dir"] == "./litehit-data"
    assert values["grace_seconds"] == 10.0
    with pytest.raises(UsageError, match=r"LITEHIT_MAX_MESSAGE_BYTES: invalid value 'lots'"):
        serve_cmd.resolve(args, {"LITEHIT_MAX_MESSAGE_BYTES": "lots"})
    args = parser.parse_args(["serve", "--max-block-keys", "0"])
    with pytest.raises(UsageError, match=r"--max-block-keys: invalid value '0' \(must be > 0\)"):
        serve_cmd.resolve(args, {})


def test_instances_table_and_json(live: Live, client: OptimizerClient, capsys):
    setup_example(client)
    for keys, tokens in WORKED_EXAMPLE:
        client.trace_query("inst", keys, tokens)
    live.manager.hit_rate_curve("inst")  # folds the curve's buffer: memory stays as printed
    args = argparse.Namespace(server=live.target, group="", json=False, timeout=5.0, tls_ca=None)
    assert instances_cmd.run(args) == 0
    memory = instances_cmd.format_bytes(
        live.manager.list_instances()[0].debug_info.memory_usage_bytes
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(instances_cmd.COLUMNS)
    assert lines[1].split() == [
        "inst",
        "g",
        "5",
        "9.53674e-07",
        "1",
        "29.63%",
        "59.26%",
        "4.0",  # 90 % of the 8 theoretical blocks needs all 8: 4 blocks = 4.0 KiB
        "KiB",
        "5",
        *memory.split(),
    ]
    assert lines[2].split() == ["1.90735e-06", "2", "51.85%"]
    assert len(lines) == 3

    args.json = True
    assert instances_cmd.run(args) == 0
    data = json.loads(capsys.readouterr().out)
    (inst,) = data["instances"]
    assert inst["capacities"] == [
        {"capacity_gb": CAP1, "capacity_blocks": 1, "total_hits": 4, "hit_rate": 16 / 54},
        {"capacity_gb": CAP2, "capacity_blocks": 2, "total_hits": 7, "hit_rate": 28 / 54},
    ]
    assert inst["theoretical"] == {"total_max_hits": 8, "max_hit_rate": 32 / 54}
    assert (inst["total_queries"], inst["total_input_tokens"], inst["unique_blocks"]) == (5, 54, 5)
    assert (inst["block_size"], inst["linear_step"]) == (4, 0)
    assert inst["capacity_for_90_percent_bytes"] == 4096

    assert litehit_main(["instances", "--server", live.target, "--group", "nope"]) == 2
    assert capsys.readouterr().err == (
        "litehit instances: error: instance group 'nope' does not exist\n"
    )


def test_format_helpers():
    assert instances_cmd.format_bytes(512) == "512 B"
    assert instances_cmd.format_bytes(1536) == "1.5 KiB"
    assert instances_cmd.format_bytes(3 * GIB) == "3.0 GiB"
    assert instances_cmd.format_percent(28 / 54) == "51.85%"
    assert instances_cmd.format_percent(-1.0) == "-"


# ------------------------------------------------------------------------------- litehit serve


def test_litehit_serve_process_stops_on_sigterm_and_restores_on_restart(tmp_path: Path):
    data_dir = tmp_path / "data"
    groups_file = tmp_path / "groups.yaml"
    groups_file.write_text(GROUPS_YAML)
    server = ServeProcess(
        "--data-dir",
        str(data_dir),
        "--groups",
        str(groups_file),
        "--admin-token",
        "tok",
        "--grace-seconds",
        "1",
    )
    try:
        assert server.data_dir == data_dir.resolve()
        with OptimizerClient(server.grpc, admin_token="tok") as client:
            extra = InstanceGroup("extra", (1.0,))
            assert client.create_instance_group(extra).header.status.code == pb2.OK
            for keys, tokens in WORKED_EXAMPLE:
                assert client.trace_query("inst", keys, tokens).header.status.code == pb2.OK
            assert client.list_instances().instances[0].total_queries == 5
        with urllib.request.urlopen(f"http://{server.metrics}/metrics", timeout=10) as response:
            metrics_text = response.read().decode()
        assert "litehit_instances 1.0" in metrics_text
        assert (
            'litehit_trace_queries_total{instance_group="g",instance_id="inst"} 5.0' in metrics_text
        )
        health = run_cli("health", "--server", server.grpc)
        assert (health.returncode, health.stdout) == (0, "SERVING\n")
        table = run_cli("instances", "--server", server.grpc)
        assert table.returncode == 0
        assert table.stdout.splitlines()[1].split()[:6] == [
            "inst",
            "g",
            "5",
            "9.53674e-07",
            "1",
            "29.63%",
        ]
    finally:
        code = server.terminate() if server.proc.poll() is None else server.proc.returncode
        server.kill()
    assert code == 0, server.stderr()
    assert list(server.lines.queue) == ["litehit stopped\n", None]
    down = run_cli("health", "--server", server.grpc, "--timeout", "1")
    assert down.returncode == 1
    assert "unreachable" in down.stderr

    # restart on the same data dir, without the groups file: configuration, LRU state and
    # counters restored; the next query is answered as by a server that never stopped
    twin = OnlineOptimizerManager()
    twin.create_group(EXAMPLE_GROUP)
    twin.register_instance(EXAMPLE_REG)
    for keys, tokens in WORKED_EXAMPLE:
        twin.trace_query("inst", keys, tokens)
    again = ServeProcess("--data-dir", str(data_dir))
    try:
        with OptimizerClient(again.grpc) as client:
            groups = client.list_instance_groups().instance_groups
            assert [g.name for g in groups] == ["extra", "g"]
            assert list(groups[1].capacity_gb) == [CAP1, CAP2]
            (inst,) = client.list_instances().instances
            assert (inst.instance_id, inst.total_queries, inst.debug_info.unique_keys) == (
                "inst",
                5,
                5,
            )
            assert [c.total_hits for c in inst.capacity_summaries] == [4, 7]
            got = client.get_instance("inst")
            assert [(s.name, s.size) for s in got.location_spec_infos] == [("kv", 1024)]
            first = client.trace_query("inst", [1, 2, 3], 13)
            expected = twin.trace_query("inst", [1, 2, 3], 13)
            assert [c.cache_hit_count for c in first.capacity_results] == list(expected.hit_blocks)
            assert first.theoretical_result.max_hit_count == 3
    finally:
        assert again.terminate() == 0
        again.kill()


def test_litehit_serve_reports_start_up_errors(tmp_path: Path):
    bad = tmp_path / "groups.yaml"
    bad.write_text("instance_groups:\n  - name: g\n    capacity_gb: []\n    eviction_policy: lru\n")
    result = run_cli(
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "d"),
        "--groups",
        str(bad),
    )
    assert result.returncode == 2  # bad input
    assert result.stdout == ""
    assert "litehit serve: error: capacity_gb of instance group 'g' must not be empty" in (
        result.stderr
    )
