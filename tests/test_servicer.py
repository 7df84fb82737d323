"""OptimizerServicer through grpc_testing (no sockets): every RPC and every error path."""

from __future__ import annotations

import logging

import grpc
import grpc_testing
import pytest
from prometheus_client.parser import text_string_to_metric_families

from litehit_core import InvalidRequestError
from litehit_service import messages as pb2
from litehit_service import wire
from litehit_service.errors import (
    DuplicateEntity,
    InstanceNotExist,
    InvalidArgument,
    OptimizerError,
    RegistryIOError,
    ServiceNotReady,
    Unsupported,
)
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.metrics import ServiceMetrics
from litehit_service.policy import QueryPolicy
from litehit_service.registry import Registry
from litehit_service.servicer import OptimizerServicer

SERVICE = pb2.FILE_DESCRIPTOR.services_by_name["OptimizerService"]
GIB = 1024**3
CAP1, CAP2 = 1024 / GIB, 2048 / GIB  # 1 and 2 blocks of 1024 bytes: different hits
CLOCK_NS = 5_000 * 10**9


class Harness:
    """A grpc_testing server around a real manager, registry and metrics."""

    def __init__(self, manager: OnlineOptimizerManager) -> None:
        self.manager = manager
        self.metrics = ServiceMetrics(manager)
        self.server = grpc_testing.server_from_dictionary(
            {SERVICE: OptimizerServicer(manager, self.metrics)}, grpc_testing.strict_real_time()
        )

    def call(self, method: str, request):
        rpc = self.server.invoke_unary_unary(SERVICE.methods_by_name[method], (), request, None)
        response, _trailing, code, details = rpc.termination()
        assert code == grpc.StatusCode.OK, details
        return response

    def stream(self, batches: list[list[pb2.TraceQueryRequest]]):
        rpc = self.server.invoke_stream_stream(
            SERVICE.methods_by_name["TraceQueryStream"], (), None
        )
        responses = []
        for batch in batches:
            rpc.send_request(pb2.TraceQueryBatchRequest(queries=batch))
            responses.append(rpc.take_response())
        rpc.requests_closed()
        _trailing, code, details = rpc.termination()
        assert code == grpc.StatusCode.OK, details
        return responses

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = {}
        for family in text_string_to_metric_families(self.metrics.render().decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def error_count(self, method: str, code: str) -> float:
        key = ("litehit_errors_total", (("code", code), ("method", method)))
        return self.samples().get(key, 0.0)

    # ---- shorthands
    def create_group(self, **fields) -> pb2.CommonResponse:
        return self.call(
            "CreateInstanceGroup",
            pb2.CreateInstanceGroupRequest(
                trace_id="t-create", instance_group=pb2.OptimizerInstanceGroupProto(**fields)
            ),
        )

    def register(self, instance_id="inst", group="g", block_size=4, **extra):
        request = pb2.OptimizerRegisterInstanceRequest(
            trace_id="t-reg",
            instance_group=group,
            instance_id=instance_id,
            block_size=block_size,
            location_spec_infos=[pb2.LocationSpecInfo(name="kv", size=1024)],
            location_spec_groups=[pb2.LocationSpecGroup(name="full", spec_names=["kv"])],
            **extra,
        )
        return self.call("RegisterInstance", request)

    def query(self, keys, tokens=0, instance_id="inst", **extra) -> pb2.TraceQueryResponse:
        return self.call(
            "TraceQuery",
            pb2.TraceQueryRequest(
                trace_id="q",
                instance_id=instance_id,
                block_keys=keys,
                input_token_len=tokens,
                **extra,
            ),
        )


LRU = pb2.OPTIMIZER_EVICTION_POLICY_LRU


def code_of(response) -> int:
    return response.header.status.code


@pytest.fixture
def h() -> Harness:
    return Harness(
        OnlineOptimizerManager(Registry.in_memory(), QueryPolicy(clock_ns=lambda: CLOCK_NS))
    )


@pytest.fixture
def example(h: Harness) -> Harness:
    """The core issue's worked example set-up: slots of 2 and 3 blocks, theoretical on."""
    assert (
        code_of(
            h.create_group(
                name="g",
                eviction_policy=LRU,
                capacity_gb=[CAP2, CAP1],
                enable_theoretical_max_cache=True,
            )
        )
        == pb2.OK
    )
    assert code_of(h.register()) == pb2.OK
    return h


WORKED_EXAMPLE = [([1, 2, 3], 13), ([1, 2, 4], 12), ([1, 2, 3], 13), ([1, 5], 8), ([1, 5], 8)]


# ------------------------------------------------------------------------------- error table


def test_error_table_maps_every_domain_error_to_its_named_code():
    for cls in (
        InvalidArgument,
        Unsupported,
        DuplicateEntity,
        InstanceNotExist,
        RegistryIOError,
        ServiceNotReady,
    ):
        assert wire.ERROR_TABLE[cls] == pb2.ErrorCode.Value(cls.kind)
        assert wire.error_code_for(cls("x")) == pb2.ErrorCode.Value(cls.kind)
    assert wire.error_code_for(InvalidRequestError("bad")) == pb2.INVALID_ARGUMENT
    assert wire.error_code_for(RuntimeError("bug")) == pb2.INTERNAL_ERROR
    assert wire.error_code_for(OptimizerError("base")) == pb2.INTERNAL_ERROR
    assert wire.error_message(RuntimeError("bug")) == "internal error: RuntimeError: bug"
    assert wire.error_message(InvalidArgument("field x is 3")) == "field x is 3"


# ------------------------------------------------------------------------------- groups


def test_create_get_list_groups(h: Harness):
    response = h.create_group(
        name="b",
        eviction_policy=LRU,
        capacity_gb=[8.0, 0.5, 8.0],
        ttl_seconds=30,
        enable_prefix_hash=True,
    )
    assert response.header.status.code == pb2.OK
    assert response.header.request_id == "t-create"
    h.create_group(name="a", eviction_policy=LRU, capacity_gb=[1.0])
    got = h.call("GetInstanceGroup", pb2.GetInstanceGroupRequest(trace_id="t2", name="b"))
    assert got.header.status.code == pb2.OK and got.header.request_id == "t2"
    assert got.instance_group == pb2.OptimizerInstanceGroupProto(
        name="b",
        eviction_policy=LRU,
        capacity_gb=[0.5, 8.0, 8.0],
        ttl_seconds=30,
        enable_prefix_hash=True,
    )
    listed = h.call("ListInstanceGroups", pb2.ListInstanceGroupsRequest(trace_id="t3"))
    assert listed.header.status.code == pb2.OK
    assert [g.name for g in listed.instance_groups] == ["a", "b"]


def test_an_identical_create_is_logged_as_unchanged(h: Harness, caplog):
    """The admin log line of CreateInstanceGroup says what happened: created the first
    time, unchanged for an identical group again (capacities in any order)."""
    caplog.set_level(logging.INFO, logger="litehit_service.servicer")
    first = h.create_group(name="g", eviction_policy=LRU, capacity_gb=[2.0, 1.0])
    again = h.create_group(name="g", eviction_policy=LRU, capacity_gb=[1.0, 2.0])
    assert first.header.status.code == again.header.status.code == pb2.OK
    lines = [r.getMessage() for r in caplog.records if r.name == "litehit_service.servicer"]
    assert len(lines) == 2, lines
    assert "instance group created: 'g'" in lines[0]
    assert "instance group unchanged: 'g'" in lines[1]


def test_create_group_errors(h: Harness):
    h.create_group(name="g", eviction_policy=LRU, capacity_gb=[1.0])
    dup = h.create_group(name="g", eviction_policy=LRU, capacity_gb=[2.0])
    assert dup.header.status.code == pb2.DUPLICATE_ENTITY
    assert dup.header.status.message == "instance group 'g' already exists"
    assert dup.header.request_id == "t-create"

    empty = h.create_group(name="e", eviction_policy=LRU)
    assert empty.header.status.code == pb2.INVALID_ARGUMENT
    assert "capacity_gb" in empty.header.status.message

    unspecified = h.create_group(name="u", capacity_gb=[1.0])
    assert unspecified.header.status.code == pb2.INVALID_ARGUMENT
    assert "eviction_policy" in unspecified.header.status.message
    assert "'unspecified'" in unspecified.header.status.message

    unknown_enum = h.create_group(name="u", eviction_policy=7, capacity_gb=[1.0])
    assert unknown_enum.header.status.code == pb2.INVALID_ARGUMENT
    assert unknown_enum.header.status.message == (
        "instance_group.eviction_policy: unknown value 7 (expected OPTIMIZER_EVICTION_POLICY_LRU)"
    )

    shared = h.create_group(
        name="s", eviction_policy=LRU, capacity_gb=[1.0], shared_group_quota=True
    )
    assert shared.header.status.code == pb2.UNSUPPORTED
    assert "shared_group_quota" in shared.header.status.message

    negative = h.create_group(name="n", eviction_policy=LRU, capacity_gb=[-1.0])
    assert negative.header.status.code == pb2.INVALID_ARGUMENT
    assert "-1.0" in negative.header.status.message

    # nothing but the first group was created
    listed = h.call("ListInstanceGroups", pb2.ListInstanceGroupsRequest())
    assert [(g.name, list(g.capacity_gb)) for g in listed.instance_groups] == [("g", [1.0])]
    assert h.error_count("CreateInstanceGroup", "INVALID_ARGUMENT") == 4
    assert h.error_count("CreateInstanceGroup", "DUPLICATE_ENTITY") == 1
    assert h.error_count("CreateInstanceGroup", "UNSUPPORTED") == 1


def test_update_and_remove_group(example: Harness):
    h = example
    new = pb2.OptimizerInstanceGroupProto(name="g", eviction_policy=LRU, capacity_gb=[1.0])
    busy = h.call("UpdateInstanceGroup", pb2.UpdateInstanceGroupRequest(instance_group=new))
    assert busy.header.status.code == pb2.INVALID_ARGUMENT
    assert busy.header.status.message == (
        "instance group 'g' still has 1 registered instance(s) ('inst'); "
        "remove them before updating the group"
    )
    busy = h.call("RemoveInstanceGroup", pb2.RemoveInstanceGroupRequest(name="g"))
    assert busy.header.status.code == pb2.INVALID_ARGUMENT
    assert "remove them before removing the group" in busy.header.status.message

    missing = pb2.OptimizerInstanceGroupProto(name="nope", eviction_policy=LRU, capacity_gb=[1.0])
    r = h.call("UpdateInstanceGroup", pb2.UpdateInstanceGroupRequest(instance_group=missing))
    assert r.header.status.code == pb2.INSTANCE_NOT_EXIST
    assert r.header.status.message == "instance group 'nope' does not exist"
    r = h.call("RemoveInstanceGroup", pb2.RemoveInstanceGroupRequest(trace_id="x", name="nope"))
    assert r.header.status.code == pb2.INSTANCE_NOT_EXIST and r.header.request_id == "x"

    removed = h.call("RemoveInstance", pb2.OptimizerRemoveInstanceRequest(instance_id="inst"))
    assert removed.header.status.code == pb2.OK
    ok = h.call("UpdateInstanceGroup", pb2.UpdateInstanceGroupRequest(instance_group=new))
    assert ok.header.status.code == pb2.OK
    got = h.call("GetInstanceGroup", pb2.GetInstanceGroupRequest(name="g"))
    assert list(got.instance_group.capacity_gb) == [1.0]
    assert not got.instance_group.enable_theoretical_max_cache
    ok = h.call("RemoveInstanceGroup", pb2.RemoveInstanceGroupRequest(name="g"))
    assert ok.header.status.code == pb2.OK
    gone = h.call("GetInstanceGroup", pb2.GetInstanceGroupRequest(name="g"))
    assert gone.header.status.code == pb2.INSTANCE_NOT_EXIST
    assert not gone.HasField("instance_group")


# ------------------------------------------------------------------------------- instances


def test_register_get_remove_instance(example: Harness):
    h = example
    reg = h.register(instance_id="other")
    assert reg.header.request_id == "t-reg"
    assert list(reg.estimated_capacity_blocks) == [1, 2]
    assert reg.size_full_only == 1024 and reg.size_full_linear == 1024

    got = h.call("GetInstance", pb2.OptimizerGetInstanceRequest(trace_id="g1", instance_id="other"))
    assert got.header.status.code == pb2.OK and got.header.request_id == "g1"
    assert (got.instance_group, got.instance_id, got.block_size, got.linear_step) == (
        "g",
        "other",
        4,
        0,
    )
    assert [(s.name, s.size) for s in got.location_spec_infos] == [("kv", 1024)]
    assert [(g.name, list(g.spec_names)) for g in got.location_spec_groups] == [("full", ["kv"])]

    r = h.call("RemoveInstance", pb2.OptimizerRemoveInstanceRequest(instance_id="other"))
    assert r.header.status.code == pb2.OK
    r = h.call("RemoveInstance", pb2.OptimizerRemoveInstanceRequest(instance_id="other"))
    assert r.header.status.code == pb2.INSTANCE_NOT_EXIST
    assert r.header.status.message == "instance_id 'other' is not registered"
    r = h.call("GetInstance", pb2.OptimizerGetInstanceRequest(instance_id="other"))
    assert r.header.status.code == pb2.INSTANCE_NOT_EXIST


def test_register_errors_leave_the_previous_registration(example: Harness):
    h = example
    no_group = h.register(group="missing")
    assert no_group.header.status.code == pb2.INSTANCE_NOT_EXIST
    assert no_group.header.status.message == (
        "instance_group 'missing' of instance_id 'inst' does not exist"
    )
    bad_block = h.register(block_size=0)
    assert bad_block.header.status.code == pb2.INVALID_ARGUMENT
    assert (
        "block_size" in bad_block.header.status.message and "0" in bad_block.header.status.message
    )
    assert list(bad_block.estimated_capacity_blocks) == []
    linear = h.register(linear_step=6)
    assert linear.header.status.code == pb2.INVALID_ARGUMENT
    assert "linear_step of instance_id 'inst' is in tokens" in linear.header.status.message
    no_id = h.register(instance_id="")
    assert no_id.header.status.code == pb2.INVALID_ARGUMENT
    got = h.call("GetInstance", pb2.OptimizerGetInstanceRequest(instance_id="inst"))
    assert got.block_size == 4


# ------------------------------------------------------------------------------- queries


def test_worked_example_through_trace_query(example: Harness):
    h = example
    hits, theoretical, rates, uniques = [], [], [], []
    for keys, tokens in WORKED_EXAMPLE:
        r = h.query(keys, tokens)
        assert r.header.status.code == pb2.OK and r.header.request_id == "q"
        assert r.input_token_len == tokens and r.total_blocks == len(keys)
        assert [c.capacity_gb for c in r.capacity_results] == [CAP1, CAP2]
        hits.append([c.cache_hit_count for c in r.capacity_results])
        rates.append([c.hit_rate for c in r.capacity_results])
        uniques.append([c.current_unique_keys for c in r.capacity_results])
        theoretical.append(
            (r.theoretical_result.max_hit_count, r.theoretical_result.current_unique_keys)
        )
    assert hits == [[0, 0], [1, 2], [1, 2], [1, 1], [1, 2]]
    assert theoretical == [(0, 3), (2, 4), (3, 4), (1, 5), (2, 5)]
    assert rates == [[0.0, 0.0], [4 / 12, 8 / 12], [4 / 13, 8 / 13], [4 / 8] * 2, [4 / 8, 8 / 8]]
    assert uniques == [[1, 2]] * 5  # min(unique blocks, slot blocks): 3, 4, 4, 5, 5 unique

    listed = h.call("ListInstances", pb2.OptimizerListInstancesRequest(trace_id="l"))
    assert listed.header.status.code == pb2.OK and listed.header.request_id == "l"
    (inst,) = listed.instances
    assert (inst.instance_id, inst.instance_group) == ("inst", "g")
    assert (inst.total_queries, inst.total_blocks_queried, inst.total_input_tokens) == (5, 13, 54)
    assert [
        (c.capacity_gb, c.capacity_blocks, c.total_hits, c.hit_rate)
        for c in inst.capacity_summaries
    ] == [(CAP1, 1, 4, 16 / 54), (CAP2, 2, 7, 28 / 54)]
    assert inst.theoretical_summary.total_max_hits == 8
    assert inst.theoretical_summary.max_hit_rate == 32 / 54
    d = inst.debug_info
    assert (d.block_size, d.unique_keys, d.linear_step, d.eviction_count) == (4, 5, 0, 0)
    assert d.kv_cache_usage_bytes == 5 * 1024  # every tracked block x block bytes
    assert d.memory_usage_bytes > 0


def test_tail_tokens_count_in_the_denominator_only(example: Harness):
    h = example
    assert h.query([1, 2, 3], 13).capacity_results[1].cache_hit_count == 0
    second = h.query([1, 2, 3], 13)
    assert second.capacity_results[1].cache_hit_count == 2
    assert second.capacity_results[1].hit_rate == 8 / 13
    assert second.theoretical_result.max_hit_count == 3
    assert second.theoretical_result.hit_rate == 12 / 13


def test_token_ids_give_the_length_when_input_token_len_is_zero(example: Harness):
    r = example.query([1, 2], 0, token_ids=list(range(9)))
    assert r.header.status.code == pb2.OK
    assert r.input_token_len == 9 and r.total_blocks == 2


def test_ttl_expiry_uses_request_timestamps(h: Harness):
    h.create_group(
        name="g",
        eviction_policy=LRU,
        capacity_gb=[1.0],
        ttl_seconds=10,
        enable_theoretical_max_cache=True,
    )
    h.register()
    s = 10**9
    got = [
        h.query([7, 8, 9], 12, timestamp_ns=t * s).capacity_results[0].cache_hit_count
        for t in (1000, 1005, 1015)
    ]
    assert got == [0, 3, 0]
    listed = h.call("ListInstances", pb2.OptimizerListInstancesRequest())
    assert listed.instances[0].debug_info.ttl_eviction_count == 3


def test_theoretical_off_is_minus_one(h: Harness):
    h.create_group(name="g", eviction_policy=LRU, capacity_gb=[1.0])
    h.register()
    r = h.query([1, 2], 8)
    t = r.theoretical_result
    assert (t.max_hit_count, t.current_unique_keys, t.hit_rate) == (-1, -1, -1.0)
    inst = h.call("ListInstances", pb2.OptimizerListInstancesRequest()).instances[0]
    assert inst.theoretical_summary.total_max_hits == -1
    assert inst.theoretical_summary.max_hit_rate == -1.0


def test_trace_query_errors_change_nothing(example: Harness):
    h = example
    unknown = h.query([1], 4, instance_id="ghost")
    assert unknown.header.status.code == pb2.INSTANCE_NOT_EXIST
    assert unknown.header.status.message == "instance_id 'ghost' is not registered"
    assert unknown.header.request_id == "q"
    assert len(unknown.capacity_results) == 0

    negative = h.query([1], -4)
    assert negative.header.status.code == pb2.INVALID_ARGUMENT
    assert negative.header.status.message == "input_token_len must not be negative, got -4"

    mismatch = h.query([1, 2, 3], 8)
    assert mismatch.header.status.code == pb2.INVALID_ARGUMENT
    assert "len(block_keys) is 3" in mismatch.header.status.message

    inst = h.call("ListInstances", pb2.OptimizerListInstancesRequest()).instances[0]
    assert (inst.total_queries, inst.debug_info.unique_keys) == (0, 0)
    assert h.error_count("TraceQuery", "INVALID_ARGUMENT") == 2
    assert h.error_count("TraceQuery", "INSTANCE_NOT_EXIST") == 1


def test_max_block_keys_limit():
    h = Harness(
        OnlineOptimizerManager(policy=QueryPolicy(max_block_keys=4, clock_ns=lambda: CLOCK_NS))
    )
    h.create_group(name="g", eviction_policy=LRU, capacity_gb=[1.0])
    h.register()
    assert h.query([1, 2, 3, 4], 16).header.status.code == pb2.OK
    over = h.query([1, 2, 3, 4, 5], 20)
    assert over.header.status.code == pb2.INVALID_ARGUMENT
    assert over.header.status.message == ("block_keys has 5 keys, more than max_block_keys 4")


def test_list_instances_filter_and_reset_stats(example: Harness):
    h = example
    h.create_group(name="h2", eviction_policy=LRU, capacity_gb=[1.0])
    h.register(instance_id="a-first", group="h2")
    h.query([1, 2], 8)
    both = h.call("ListInstances", pb2.OptimizerListInstancesRequest())
    assert [i.instance_id for i in both.instances] == ["a-first", "inst"]
    only = h.call("ListInstances", pb2.OptimizerListInstancesRequest(instance_group="g"))
    assert [i.instance_id for i in only.instances] == ["inst"]
    missing = h.call("ListInstances", pb2.OptimizerListInstancesRequest(instance_group="zz"))
    assert missing.header.status.code == pb2.INSTANCE_NOT_EXIST
    assert list(missing.instances) == []

    reset = h.call("ResetStats", pb2.OptimizerResetStatsRequest(trace_id="r", instance_id="inst"))
    assert reset.header.status.code == pb2.OK and reset.header.request_id == "r"
    inst = h.call("ListInstances", pb2.OptimizerListInstancesRequest(instance_group="g")).instances[
        0
    ]
    assert (inst.total_queries, inst.total_input_tokens, inst.debug_info.unique_keys) == (0, 0, 0)
    assert h.query([1, 2], 8).capacity_results[0].cache_hit_count == 0  # LRU state is fresh too
    r = h.call("ResetStats", pb2.OptimizerResetStatsRequest(instance_id="ghost"))
    assert r.header.status.code == pb2.INSTANCE_NOT_EXIST


# ------------------------------------------------------------------------------- stream


def _q(trace_id, keys, tokens, instance_id="inst"):
    return pb2.TraceQueryRequest(
        trace_id=trace_id, instance_id=instance_id, block_keys=keys, input_token_len=tokens
    )


def test_stream_answers_in_order_and_survives_bad_queries(example: Harness):
    h = example
    first = [_q(f"w{i}", keys, tokens) for i, (keys, tokens) in enumerate(WORKED_EXAMPLE[:3])]
    bad = [_q("ghost", [1], 4, instance_id="ghost"), _q("neg", [1], -1)]
    rest = [_q(f"w{i + 3}", keys, tokens) for i, (keys, tokens) in enumerate(WORKED_EXAMPLE[3:])]
    responses = h.stream([first, bad + rest[:1], rest[1:], []])
    assert [len(r.results) for r in responses] == [3, 3, 1, 0]
    results = [res for r in responses for res in r.results]
    assert [res.header.request_id for res in results] == [
        "w0",
        "w1",
        "w2",
        "ghost",
        "neg",
        "w3",
        "w4",
    ]
    assert [res.header.status.code for res in results] == [
        pb2.OK,
        pb2.OK,
        pb2.OK,
        pb2.INSTANCE_NOT_EXIST,
        pb2.INVALID_ARGUMENT,
        pb2.OK,
        pb2.OK,
    ]
    assert results[4].header.status.message == "input_token_len must not be negative, got -1"
    good = [res for res in results if res.header.status.code == pb2.OK]
    assert [[c.cache_hit_count for c in res.capacity_results] for res in good] == [
        [0, 0],
        [1, 2],
        [1, 2],
        [1, 1],
        [1, 2],
    ]
    assert [res.theoretical_result.max_hit_count for res in good] == [0, 2, 3, 1, 2]
    inst = h.call("ListInstances", pb2.OptimizerListInstancesRequest()).instances[0]
    assert [c.hit_rate for c in inst.capacity_summaries] == [16 / 54, 28 / 54]
    assert inst.theoretical_summary.max_hit_rate == 32 / 54
    assert h.error_count("TraceQueryStream", "INSTANCE_NOT_EXIST") == 1
    assert h.error_count("TraceQueryStream", "INVALID_ARGUMENT") == 1
    samples = h.samples()
    counts = {
        dict(labels)["instance_id"]: value
        for (name, labels), value in samples.items()
        if name == "litehit_trace_query_duration_seconds_count"
        and dict(labels)["method"] == "TraceQueryStream"
    }
    assert counts == {"inst": 6, "": 1}  # the query for an unknown instance has empty labels


# ------------------------------------------------------------------------------- failures


def test_registry_failure_is_io_error_and_changes_nothing():
    registry = Registry.in_memory()
    h = Harness(OnlineOptimizerManager(registry))
    h.create_group(name="g", eviction_policy=LRU, capacity_gb=[1.0])
    registry.close()
    r = h.create_group(name="h", eviction_policy=LRU, capacity_gb=[1.0])
    assert r.header.status.code == pb2.IO_ERROR
    assert r.header.status.message == (
        "registry ':memory:': save_group 'h' failed: registry is closed"
    )
    reg = h.register()
    assert reg.header.status.code == pb2.IO_ERROR
    listed = h.call("ListInstanceGroups", pb2.ListInstanceGroupsRequest())
    assert [g.name for g in listed.instance_groups] == ["g"]
    assert list(h.call("ListInstances", pb2.OptimizerListInstancesRequest()).instances) == []
    assert h.error_count("RegisterInstance", "IO_ERROR") == 1


class _BrokenManager(OnlineOptimizerManager):
    """A manager with a bug: the only way to reach INTERNAL_ERROR (no real path raises)."""

    def list_groups(self):
        raise RuntimeError("boom")

    def trace_query(self, *args, **kwargs):
        raise KeyError("lost")


def test_unexpected_exceptions_become_internal_error(caplog):
    h = Harness(_BrokenManager())
    r = h.call("ListInstanceGroups", pb2.ListInstanceGroupsRequest(trace_id="b"))
    assert r.header.status.code == pb2.INTERNAL_ERROR
    assert r.header.status.message == "internal error: RuntimeError: boom"
    assert r.header.request_id == "b"
    q = h.query([1], 4)
    assert q.header.status.code == pb2.INTERNAL_ERROR
    assert q.header.status.message == "internal error: KeyError: 'lost'"
    (streamed,) = h.stream([[_q("s", [1], 4)]])
    assert streamed.results[0].header.status.code == pb2.INTERNAL_ERROR
    assert "ListInstanceGroups failed unexpectedly" in caplog.text
    assert h.error_count("TraceQuery", "INTERNAL_ERROR") == 1
