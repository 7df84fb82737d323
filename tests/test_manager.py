"""OnlineOptimizerManager: validation, error kinds, the worked example, TTL, persistence."""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import FrozenInstanceError, replace

import pytest

from litehit_core import RequestFact
from litehit_service.errors import (
    DuplicateEntity,
    InstanceNotExist,
    InvalidArgument,
    OptimizerError,
    ReachMaxEntityCapacity,
    RegistryIOError,
    ServiceNotReady,
    Unsupported,
)
from litehit_service.manager import THEORETICAL_OFF, ManagerLimits, OnlineOptimizerManager
from litehit_service.model import (
    CapacityResult,
    CapacitySummary,
    InstanceDebugInfo,
    InstanceGroup,
    InstanceRegistration,
    InstanceSummary,
    LocationSpec,
    LocationSpecGroup,
    RegistrationResult,
    TheoreticalResult,
    TraceQueryResult,
)
from litehit_service.policy import QueryPolicy
from litehit_service.registry import Registry

GIB = 1024**3
SLOT2 = 2048 / GIB  # 2 blocks of 1024 bytes
SLOT3 = 3072 / GIB  # 3 blocks of 1024 bytes
A, B, C, D, E = 1, 2, 3, 4, 5
# The worked example: (block keys, input_token_len) per request at block_size 4.
WORKED = [([A, B, C], 13), ([A, B, D], 12), ([A, B, C], 13), ([A, E], 8), ([A, E], 8)]


HYBRID: dict[str, object] = {
    "location_spec_infos": (LocationSpec("hbm", 1024), LocationSpec("st", 2048)),
    "location_spec_groups": (
        LocationSpecGroup("full", ("hbm",)),
        LocationSpecGroup("state", ("st",)),
    ),
    "full_location_spec_group_name": "full",
}


def make_group(name: str = "g", **kw: object) -> InstanceGroup:
    fields: dict[str, object] = {
        "capacity_gb": (SLOT3, SLOT2),
        "enable_theoretical_max_cache": True,
    }
    fields.update(kw)
    return InstanceGroup(name=name, **fields)  # type: ignore[arg-type]


def make_reg(instance_id: str = "i1", group: str = "g", **kw: object) -> InstanceRegistration:
    fields: dict[str, object] = {
        "block_size": 4,
        "location_spec_infos": (LocationSpec("hbm", 1024),),
        "location_spec_groups": (LocationSpecGroup("full", ("hbm",)),),
    }
    fields.update(kw)
    return InstanceRegistration(instance_id=instance_id, instance_group=group, **fields)  # type: ignore[arg-type]


def new_manager(**kw: object) -> OnlineOptimizerManager:
    m = OnlineOptimizerManager(**kw)  # type: ignore[arg-type]
    m.create_group(make_group())
    m.register_instance(make_reg())
    return m


def hits(result) -> list[int]:
    return [c.cache_hit_count for c in result.capacity_results]


def snapshot(m: OnlineOptimizerManager) -> tuple:
    """Everything observable about a manager's configuration and counters."""
    regs = [m.get_instance(i.instance_id) for i in m.instance_infos()]
    return (m.list_groups(), regs, m.list_instances())


# --------------------------------------------------------------------------- errors


def test_error_kinds_equal_wire_code_names() -> None:
    assert OptimizerError.kind == "INTERNAL_ERROR"
    assert InvalidArgument.kind == "INVALID_ARGUMENT"
    assert Unsupported.kind == "UNSUPPORTED"
    assert DuplicateEntity.kind == "DUPLICATE_ENTITY"
    assert InstanceNotExist.kind == "INSTANCE_NOT_EXIST"
    assert RegistryIOError.kind == "IO_ERROR"
    assert ServiceNotReady.kind == "SERVICE_NOT_READY"
    assert all(
        issubclass(k, OptimizerError)
        for k in (InvalidArgument, Unsupported, DuplicateEntity, InstanceNotExist, RegistryIOError)
    )


# --------------------------------------------------------------------------- groups


def test_group_capacities_sorted_ascending_with_duplicates_kept() -> None:
    m = OnlineOptimizerManager()
    m.create_group(make_group(capacity_gb=(8, 0.5, 8.0, 2)))
    g = m.get_group("g")
    assert g.capacity_gb == (0.5, 2.0, 8.0, 8.0)
    assert all(type(x) is float for x in g.capacity_gb)
    assert m.list_groups() == [g]


def test_list_groups_sorted_by_name() -> None:
    m = OnlineOptimizerManager()
    for name in ("zeta", "alpha", "mid"):
        m.create_group(make_group(name))
    assert [g.name for g in m.list_groups()] == ["alpha", "mid", "zeta"]


@pytest.mark.parametrize(
    ("group", "kind", "message"),
    [
        (make_group(""), InvalidArgument, "instance group name must not be empty, got ''"),
        (
            make_group(capacity_gb=()),
            InvalidArgument,
            "capacity_gb of instance group 'g' must not be empty, got []",
        ),
        (
            make_group(capacity_gb=(1.0, 0.0)),
            InvalidArgument,
            "capacity_gb[1] of instance group 'g' must be finite and > 0, got 0.0",
        ),
        (
            make_group(capacity_gb=(-2.0,)),
            InvalidArgument,
            "capacity_gb[0] of instance group 'g' must be finite and > 0, got -2.0",
        ),
        (
            make_group(capacity_gb=(float("nan"),)),
            InvalidArgument,
            "capacity_gb[0] of instance group 'g' must be finite and > 0, got nan",
        ),
        (
            make_group(capacity_gb=(1.0, float("inf"))),
            InvalidArgument,
            "capacity_gb[1] of instance group 'g' must be finite and > 0, got inf",
        ),
        (
            make_group(capacity_gb=("big",)),
            InvalidArgument,
            "capacity_gb[0] of instance group 'g' must be a number, got 'big'",
        ),
        (
            make_group(eviction_policy="unspecified"),
            InvalidArgument,
            "eviction_policy of instance group 'g' must be 'lru', got 'unspecified'",
        ),
        (
            make_group(eviction_policy="fifo"),
            InvalidArgument,
            "eviction_policy of instance group 'g' must be 'lru', got 'fifo'",
        ),
        (
            make_group(ttl_seconds=-1),
            InvalidArgument,
            "ttl_seconds of instance group 'g' must be an integer in 0..9223372036, got -1",
        ),
        (
            make_group(shared_group_quota=True),
            Unsupported,
            "shared_group_quota=True of instance group 'g' is not supported: every instance "
            "is simulated with its own capacity",
        ),
    ],
)
def test_group_validation(group: InstanceGroup, kind: type, message: str) -> None:
    m = new_manager()
    before = snapshot(m)
    with pytest.raises(kind) as info:
        m.create_group(replace(group, name=group.name and "other"))
    assert str(info.value) == message.replace("'g'", "'other'")
    # update runs the same rules against an existing (empty) group
    m.create_group(make_group("empty"))
    before = snapshot(m)
    with pytest.raises(kind) as info:
        m.update_group(replace(group, name=group.name and "empty"))
    assert str(info.value) == message.replace("'g'", "'empty'")
    assert snapshot(m) == before


def test_create_identical_group_is_idempotent() -> None:
    """An identical group (capacities in any order: compared as validated) is a no-op that
    keeps the group's instances and their state; a different one stays DuplicateEntity."""
    m = new_manager()
    m.trace_query("i1", [1, 2], 8)
    before = snapshot(m)
    assert m.create_group(make_group("g", capacity_gb=(SLOT2, SLOT3))) is False
    assert m.create_group(make_group("g")) is False
    assert snapshot(m) == before
    assert m.list_instances()[0].total_queries == 1
    with pytest.raises(DuplicateEntity, match="instance group 'g' already exists"):
        m.create_group(make_group("g", enable_theoretical_max_cache=False))
    assert snapshot(m) == before


def test_create_group_says_whether_it_created() -> None:
    m = OnlineOptimizerManager()
    assert m.create_group(make_group("g")) is True
    assert m.create_group(make_group("g")) is False


def test_create_duplicate_group() -> None:
    m = new_manager()
    before = snapshot(m)
    with pytest.raises(DuplicateEntity) as info:
        m.create_group(make_group("g", capacity_gb=(1.0,)))
    assert str(info.value) == "instance group 'g' already exists"
    assert snapshot(m) == before


@pytest.mark.parametrize("op", ["update", "remove", "get"])
def test_missing_group(op: str) -> None:
    m = new_manager()
    before = snapshot(m)
    with pytest.raises(InstanceNotExist) as info:
        if op == "update":
            m.update_group(make_group("nope"))
        elif op == "remove":
            m.remove_group("nope")
        else:
            m.get_group("nope")
    assert str(info.value) == "instance group 'nope' does not exist"
    assert snapshot(m) == before


def test_update_and_remove_refused_while_group_has_instances() -> None:
    m = new_manager()
    m.register_instance(make_reg("i2"))
    before = snapshot(m)
    with pytest.raises(InvalidArgument) as info:
        m.update_group(make_group(capacity_gb=(1.0,)))
    assert str(info.value) == (
        "instance group 'g' still has 2 registered instance(s) ('i1', 'i2'); "
        "remove them before updating the group"
    )
    with pytest.raises(InvalidArgument) as info:
        m.remove_group("g")
    assert str(info.value) == (
        "instance group 'g' still has 2 registered instance(s) ('i1', 'i2'); "
        "remove them before removing the group"
    )
    assert snapshot(m) == before


def test_update_then_remove_group_without_instances() -> None:
    m = OnlineOptimizerManager()
    m.create_group(make_group())
    m.update_group(make_group(capacity_gb=(4.0, 1.0), ttl_seconds=30))
    assert m.get_group("g") == make_group(capacity_gb=(1.0, 4.0), ttl_seconds=30)
    m.remove_group("g")
    assert m.list_groups() == []
    with pytest.raises(InstanceNotExist):
        m.get_group("g")


# -------------------------------------------------------------------- registration


def test_register_returns_blocks_per_slot_and_block_bytes() -> None:
    m = OnlineOptimizerManager()
    m.create_group(make_group(capacity_gb=(1.0, SLOT2, SLOT3)))
    result = m.register_instance(
        make_reg(
            block_size=16,
            location_spec_infos=(
                LocationSpec("k", 1000),
                LocationSpec("v", 24),
                LocationSpec("x", 7),
            ),
            location_spec_groups=(
                LocationSpecGroup("full", ("k", "v")),
                LocationSpecGroup("lin", ("x",)),
            ),
            full_location_spec_group_name="full",
        )
    )
    # slots ascending: 2048 B, 3072 B, 1 GiB at 1024 B per block; no linear state
    assert result == RegistrationResult(
        estimated_capacity_blocks=(2, 3, GIB // 1024),
        size_full_only=1024,
        size_full_linear=1024,
    )
    assert m.get_instance("i1").block_size == 16


def test_single_spec_group_is_the_default_full_group() -> None:
    m = OnlineOptimizerManager()
    m.create_group(make_group(capacity_gb=(0.5,)))
    reg = make_reg(
        location_spec_infos=(LocationSpec("a", 3000), LocationSpec("b", 1)),
        location_spec_groups=(LocationSpecGroup("only", ("a", "b")),),
    )
    result = m.register_instance(reg)
    assert result == RegistrationResult((GIB // 2 // 3001,), 3001, 3001)
    assert m.get_instance("i1") == reg


TWO_GROUPS = {
    "location_spec_infos": (LocationSpec("a", 1), LocationSpec("b", 2)),
    "location_spec_groups": (LocationSpecGroup("ga", ("a",)), LocationSpecGroup("gb", ("b",))),
}


@pytest.mark.parametrize(
    ("reg", "kind", "message"),
    [
        (make_reg(""), InvalidArgument, "instance_id must not be empty, got ''"),
        (
            make_reg(group="nope"),
            InstanceNotExist,
            "instance_group 'nope' of instance_id 'i1' does not exist",
        ),
        (
            make_reg(block_size=0),
            InvalidArgument,
            "block_size of instance_id 'i1' must be an integer in 1..2147483647 (tokens), got 0",
        ),
        (
            make_reg(block_size=-4),
            InvalidArgument,
            "block_size of instance_id 'i1' must be an integer in 1..2147483647 (tokens), got -4",
        ),
        (
            make_reg(location_spec_infos=(LocationSpec("", 1024),)),
            InvalidArgument,
            "location_spec_infos[0].name of instance_id 'i1' must not be empty, got ''",
        ),
        (
            make_reg(location_spec_infos=(LocationSpec("hbm", 1024), LocationSpec("hbm", 8))),
            InvalidArgument,
            "location_spec_infos[1].name 'hbm' of instance_id 'i1' is duplicated",
        ),
        (
            make_reg(location_spec_infos=(LocationSpec("hbm", 0),)),
            InvalidArgument,
            "location_spec_infos[0].size of spec 'hbm' of instance_id 'i1' must be an integer "
            "in 1..9223372036854775807 (bytes), got 0",
        ),
        (
            make_reg(location_spec_infos=(LocationSpec("hbm", -5),)),
            InvalidArgument,
            "location_spec_infos[0].size of spec 'hbm' of instance_id 'i1' must be an integer "
            "in 1..9223372036854775807 (bytes), got -5",
        ),
        (
            make_reg(location_spec_groups=(LocationSpecGroup("", ("hbm",)),)),
            InvalidArgument,
            "location_spec_groups[0].name of instance_id 'i1' must not be empty, got ''",
        ),
        (
            make_reg(
                location_spec_groups=(
                    LocationSpecGroup("full", ("hbm",)),
                    LocationSpecGroup("full", ("hbm",)),
                )
            ),
            InvalidArgument,
            "location_spec_groups[1].name 'full' of instance_id 'i1' is duplicated",
        ),
        (
            make_reg(location_spec_groups=(LocationSpecGroup("full", ()),)),
            InvalidArgument,
            "location_spec_groups[0].spec_names of group 'full' of instance_id 'i1' must not "
            "be empty",
        ),
        (
            make_reg(location_spec_groups=(LocationSpecGroup("full", ("hbm", "ssd")),)),
            InvalidArgument,
            "location_spec_groups[0].spec_names of group 'full' of instance_id 'i1' names "
            "unknown spec 'ssd' (known: ['hbm'])",
        ),
        (
            make_reg(location_spec_groups=(LocationSpecGroup("full", ("hbm", "hbm")),)),
            InvalidArgument,
            "location_spec_groups[0].spec_names of group 'full' of instance_id 'i1' lists "
            "spec 'hbm' twice",
        ),
        (
            make_reg(linear_step=2),
            InvalidArgument,
            "linear_step of instance_id 'i1' is in tokens and must be a positive multiple of "
            "block_size 4 tokens, got 2; 2 blocks would be 8 tokens",
        ),
        (
            make_reg(linear_step=-4),
            InvalidArgument,
            "linear_step of instance_id 'i1' must be an integer in 0..2147483647 (tokens), got -4",
        ),
        (
            make_reg(linear_step=8),
            InvalidArgument,
            "linear_location_spec_group_name of instance_id 'i1' must name the "
            "location_spec_group of the linear/Mamba state when linear_step is 8, got ''",
        ),
        (
            make_reg(linear_step=8, **HYBRID, linear_location_spec_group_name="full"),
            InvalidArgument,
            "linear_location_spec_group_name of instance_id 'i1' must differ from the full "
            "group, both are 'full'",
        ),
        (
            make_reg(
                linear_step=8,
                location_spec_infos=(LocationSpec("hbm", 1024), LocationSpec("st", 2048)),
                location_spec_groups=(
                    LocationSpecGroup("full", ("hbm",)),
                    LocationSpecGroup("state", ("st", "hbm")),
                ),
                full_location_spec_group_name="full",
                linear_location_spec_group_name="state",
            ),
            InvalidArgument,
            "location_spec_groups 'full' (full) and 'state' (linear) of instance_id 'i1' share "
            "specs ['hbm']: a spec belongs to one of them",
        ),
        (
            make_reg(**HYBRID, linear_location_spec_group_name="state"),
            InvalidArgument,
            "linear_location_spec_group_name of instance_id 'i1' must be empty when "
            "linear_step is 0 (a full-attention instance), got 'state'",
        ),
        (
            make_reg(full_location_spec_group_name="nope"),
            InvalidArgument,
            "full_location_spec_group_name 'nope' of instance_id 'i1' is not one of the "
            "location_spec_groups ['full']",
        ),
        (
            make_reg(**TWO_GROUPS),
            InvalidArgument,
            "full_location_spec_group_name of instance_id 'i1' is empty and there are 2 "
            "location_spec_groups ['ga', 'gb']: name the full group (it may only be omitted "
            "when there is exactly one)",
        ),
        (
            make_reg(location_spec_infos=(), location_spec_groups=()),
            InvalidArgument,
            "full_location_spec_group_name of instance_id 'i1' is empty and there are 0 "
            "location_spec_groups []: name the full group (it may only be omitted when there "
            "is exactly one)",
        ),
        (
            make_reg(linear_step=8, linear_location_spec_group_name="lin"),
            InvalidArgument,
            "linear_location_spec_group_name 'lin' of instance_id 'i1' is not one of the "
            "location_spec_groups ['full']",
        ),
    ],
)
def test_registration_validation(reg: InstanceRegistration, kind: type, message: str) -> None:
    m = new_manager()
    before = snapshot(m)
    with pytest.raises(kind) as info:
        m.register_instance(replace(reg, instance_id=reg.instance_id and "new"))
    assert str(info.value) == message.replace("'i1'", "'new'")
    assert snapshot(m) == before


def test_failed_reregistration_keeps_previous_registration_and_state() -> None:
    m = new_manager()
    m.trace_query("i1", [A, B, C], 12)
    m.trace_query("i1", [A, B, C], 12)
    before = snapshot(m)
    info = m.instance_infos()[0]
    with pytest.raises(InvalidArgument):
        m.register_instance(make_reg(block_size=0))
    with pytest.raises(InvalidArgument):
        m.register_instance(make_reg(linear_step=1))
    with pytest.raises(InstanceNotExist):
        m.register_instance(make_reg(group="missing"))
    assert snapshot(m) == before
    assert m.instance_infos()[0] == info
    # the LRU state survived too: the same request still hits fully
    assert hits(m.trace_query("i1", [A, B, C], 12)) == [2, 3]


def test_reregistration_replaces_with_fresh_state() -> None:
    m = new_manager()
    m.create_group(make_group("h", capacity_gb=(1.0,)))
    m.trace_query("i1", [A, B], 8)
    assert hits(m.trace_query("i1", [A, B], 8)) == [2, 2]
    m.register_instance(make_reg(group="h", block_size=2))
    assert m.get_instance("i1").instance_group == "h"
    (summary,) = m.list_instances()
    assert (summary.instance_group, summary.total_queries, summary.debug_info.unique_keys) == (
        "h",
        0,
        0,
    )
    r = m.trace_query("i1", [A, B], 4)
    assert hits(r) == [0]
    assert r.block_size_tokens == 2


def test_identical_reregistration_keeps_state_and_counters(caplog) -> None:
    m = new_manager()
    first = m.register_instance(make_reg())  # identical to new_manager's
    m.trace_query("i1", [A, B], 8)
    before = snapshot(m)
    with caplog.at_level("WARNING"):
        again = m.register_instance(make_reg())
    assert again == first and again.outcome == "unchanged"
    assert snapshot(m) == before  # counters kept
    assert hits(m.trace_query("i1", [A, B], 8)) == [2, 2]  # LRU state kept
    assert m.instance_replacements == 0 and caplog.records == []
    changed = m.register_instance(make_reg(block_size=8))
    assert changed.outcome == "replaced" and m.instance_replacements == 1
    assert m.list_instances()[0].total_queries == 0
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "instance_id 'i1' re-registered with a different registration" in caplog.text


def test_max_instances_is_reach_max_entity_capacity() -> None:
    m = new_manager(limits=ManagerLimits(max_instances=2))
    m.register_instance(make_reg("i2"))
    before = snapshot(m)
    with pytest.raises(ReachMaxEntityCapacity) as info:
        m.register_instance(make_reg("i3"))
    assert str(info.value) == (
        "instance_id 'i3' cannot be registered: 2 instances are registered and max_instances is 2"
    )
    assert snapshot(m) == before
    m.register_instance(make_reg("i2", block_size=8))  # replacing an existing one is fine
    m.remove_instance("i2")
    m.register_instance(make_reg("i3"))
    with pytest.raises(ValueError, match="max_instances must be an integer >= 0, got -1"):
        ManagerLimits(max_instances=-1)


def test_slot_larger_than_max_tracked_blocks_is_refused() -> None:
    m = OnlineOptimizerManager(limits=ManagerLimits(max_tracked_blocks=3))
    m.create_group(make_group(capacity_gb=(SLOT2, 4096 / GIB)))
    with pytest.raises(InvalidArgument) as info:
        m.register_instance(make_reg())
    assert str(info.value) == (
        f"capacity_gb {4096 / GIB!r} of instance group 'g' holds 4 blocks of 1024 bytes for "
        "instance_id 'i1', more than max_tracked_blocks 3: raise --max-tracked-blocks or use a "
        "smaller slot"
    )
    m.create_group(make_group("fits", capacity_gb=(SLOT2, 3072 / GIB)))
    assert m.register_instance(make_reg(group="fits")).estimated_capacity_blocks == (2, 3)


def test_get_and_remove_missing_instance() -> None:
    m = new_manager()
    before = snapshot(m)
    for call in (m.get_instance, m.remove_instance, m.reset_stats):
        with pytest.raises(InstanceNotExist) as info:
            call("ghost")
        assert str(info.value) == "instance_id 'ghost' is not registered"
    assert snapshot(m) == before


def test_remove_instance_drops_it() -> None:
    m = new_manager()
    m.register_instance(make_reg("i2"))
    m.trace_query("i1", [A], 4)
    m.remove_instance("i1")
    assert [s.instance_id for s in m.instance_infos()] == ["i2"]
    assert [s.instance_id for s in m.list_instances()] == ["i2"]
    with pytest.raises(InstanceNotExist):
        m.get_instance("i1")
    with pytest.raises(InstanceNotExist) as info:
        m.trace_query("i1", [A], 4)
    assert str(info.value) == "instance_id 'i1' is not registered"
    # the group can now be removed once its last instance is gone
    m.remove_instance("i2")
    m.remove_group("g")
    assert m.list_groups() == []


# ------------------------------------------------------------------------- queries


def test_worked_example_per_request() -> None:
    m = new_manager()
    results = [m.trace_query("i1", keys, tokens) for keys, tokens in WORKED]
    assert [hits(r) for r in results] == [[0, 0], [2, 2], [2, 2], [1, 1], [2, 2]]
    assert [r.theoretical.max_hit_count for r in results] == [0, 2, 3, 1, 2]
    assert [r.total_blocks for r in results] == [3, 3, 3, 2, 2]
    assert [r.input_token_len for r in results] == [13, 12, 13, 8, 8]
    assert all((r.block_size_tokens, r.block_bytes) == (4, 1024) for r in results)
    assert all(isinstance(r.fact, RequestFact) for r in results)
    assert results[2].capacity_results == (
        CapacityResult(SLOT2, 2, 8 / 13, 2),
        CapacityResult(SLOT3, 2, 8 / 13, 3),
    )
    assert results[2].theoretical == TheoreticalResult(3, 4, 12 / 13)
    assert results[0].capacity_results[0] == CapacityResult(SLOT2, 0, 0.0, 2)
    assert results[4].theoretical == TheoreticalResult(2, 5, 1.0)
    # results are immutable values, equal to ones built by their constructors
    first = results[0]
    assert first == TraceQueryResult(
        3, 13, (SLOT2, SLOT3), (0, 0), (0.0, 0.0), (2, 3), first.theoretical, first.fact, 4, 1024
    )
    assert hash(first.capacity_results[1]) == hash(CapacityResult(SLOT3, 0, 0.0, 3))
    with pytest.raises(FrozenInstanceError):
        first.capacity_results[0].cache_hit_count = 9  # type: ignore[misc]


def test_worked_example_summary() -> None:
    m = new_manager()
    for keys, tokens in WORKED:
        m.trace_query("i1", keys, tokens)
    memory = m.list_instances()[0].debug_info.memory_usage_bytes
    assert memory > 0
    assert m.list_instances() == [
        InstanceSummary(
            instance_id="i1",
            instance_group="g",
            total_queries=5,
            total_blocks_queried=13,
            total_input_tokens=54,
            capacity_summaries=(
                CapacitySummary(SLOT2, 2, 7, 28 / 54),
                CapacitySummary(SLOT3, 3, 7, 28 / 54),
            ),
            theoretical_enabled=True,
            total_max_hits=8,
            max_hit_rate=32 / 54,
            debug_info=InstanceDebugInfo(
                block_size=4,
                unique_keys=5,
                linear_step=0,
                eviction_count=0,
                memory_usage_bytes=memory,
                kv_cache_usage_bytes=5 * 1024,
                ttl_eviction_count=0,
            ),
        )
    ]


def test_theoretical_off_reports_minus_one() -> None:
    m = OnlineOptimizerManager()
    m.create_group(make_group(enable_theoretical_max_cache=False))
    m.register_instance(make_reg())
    r = m.trace_query("i1", [A, B], 8)
    r = m.trace_query("i1", [A, B], 8)
    assert r.theoretical == THEORETICAL_OFF == TheoreticalResult(-1, -1, -1.0)
    (s,) = m.list_instances()
    assert (s.theoretical_enabled, s.total_max_hits, s.max_hit_rate) == (False, -1, -1.0)
    assert [c.total_hits for c in s.capacity_summaries] == [2, 2]


def test_tail_tokens_count_in_denominator_only() -> None:
    m = new_manager()
    first = m.trace_query("i1", [7, 8, 9], 13)
    second = m.trace_query("i1", [7, 8, 9], 13)
    assert hits(first) == [0, 0]
    assert hits(second) == [2, 3]
    assert second.capacity_results[1].hit_rate == 12 / 13
    assert second.capacity_results[0].hit_rate == 8 / 13
    assert second.theoretical.hit_rate == 12 / 13
    assert second.input_token_len == 13


def test_ttl_expiry_with_request_timestamps() -> None:
    m = OnlineOptimizerManager(
        policy=QueryPolicy(
            clock_ns=lambda: pytest.fail("clock must not be used"), max_clock_skew_ns=None
        )
    )
    m.create_group(make_group(ttl_seconds=10, capacity_gb=(1.0,)))
    m.register_instance(make_reg())
    s = 1_000_000_000
    keys = [A, B, C]
    r1 = m.trace_query("i1", keys, 12, timestamp_ns=1000 * s)
    r2 = m.trace_query("i1", keys, 12, timestamp_ns=1005 * s)
    r3 = m.trace_query("i1", keys, 12, timestamp_ns=1015 * s)
    assert [hits(r) for r in (r1, r2, r3)] == [[0], [3], [0]]
    assert [r.theoretical.max_hit_count for r in (r1, r2, r3)] == [0, 3, 0]
    (summary,) = m.list_instances()
    assert summary.debug_info.ttl_eviction_count == 3
    assert summary.debug_info.unique_keys == 3


def test_ttl_uses_clock_when_timestamp_is_zero() -> None:
    now = [1000 * 1_000_000_000]
    m = OnlineOptimizerManager(policy=QueryPolicy(clock_ns=lambda: now[0]))
    m.create_group(make_group(ttl_seconds=10, capacity_gb=(1.0,)))
    m.register_instance(make_reg())
    assert hits(m.trace_query("i1", [A, B], 8)) == [0]
    now[0] += 9_999_999_999
    assert hits(m.trace_query("i1", [A, B], 8)) == [2]
    now[0] += 10_000_000_000
    assert hits(m.trace_query("i1", [A, B], 8)) == [0]


def test_token_ids_len_is_the_fallback_denominator() -> None:
    m = new_manager()
    m.trace_query("i1", [A, B], 0, token_ids_len=10)
    r = m.trace_query("i1", [A, B], 0, token_ids_len=10)
    assert (r.input_token_len, hits(r)) == (10, [2, 2])
    assert r.capacity_results[0].hit_rate == 8 / 10
    # input_token_len wins over token_ids_len; without both it is keys * block_size
    assert m.trace_query("i1", [A, B], 9, token_ids_len=10).input_token_len == 9
    assert m.trace_query("i1", [A, B]).input_token_len == 8


def test_empty_query_counts_but_never_divides_by_zero() -> None:
    m = new_manager()
    r = m.trace_query("i1", [])
    assert (r.total_blocks, r.input_token_len) == (0, 0)
    assert r.capacity_results == (
        CapacityResult(SLOT2, 0, 0.0, 0),
        CapacityResult(SLOT3, 0, 0.0, 0),
    )
    assert r.theoretical == TheoreticalResult(0, 0, 0.0)
    (s,) = m.list_instances()
    assert (s.total_queries, s.total_input_tokens, s.max_hit_rate) == (1, 0, 0.0)
    assert [c.hit_rate for c in s.capacity_summaries] == [0.0, 0.0]


def test_prefix_hash_chains_keys() -> None:
    plain = new_manager()
    chained = OnlineOptimizerManager()
    chained.create_group(make_group(enable_prefix_hash=True))
    chained.register_instance(make_reg())
    for m in (plain, chained):
        m.trace_query("i1", [A, B], 8)
        m.trace_query("i1", [C, B], 8)
    # raw key B is shared; its chained key differs after a different head
    assert plain.list_instances()[0].debug_info.unique_keys == 3
    assert chained.list_instances()[0].debug_info.unique_keys == 4
    # stack (most recent first): C, CB, A, AB -> A is at depth 3, AB at depth 4
    r = chained.trace_query("i1", [A, B], 8)
    assert (hits(r), r.theoretical.max_hit_count) == ([0, 1], 2)


def test_trace_block_size_reblocks_to_instance_block_size() -> None:
    fine = new_manager(policy=QueryPolicy.offline(trace_block_size_tokens=2))
    r = fine.trace_query("i1", [10, 11, 12, 13, 14], 11)
    assert (r.total_blocks, r.input_token_len) == (2, 11)
    # the coarse keys are every second fine key: 11 and 13
    r = fine.trace_query("i1", [11, 13, 15, 17], 8)
    assert (r.total_blocks, hits(r)) == (2, [1, 1])  # 4 fine keys: coarse keys 13, 17
    coarse = new_manager()
    coarse.trace_query("i1", [11, 13], 8)
    assert hits(coarse.trace_query("i1", [11, 13], 8)) == [2, 2]


def test_trace_block_size_must_divide_the_instance_block_size() -> None:
    m = new_manager(policy=QueryPolicy.offline(trace_block_size_tokens=3))
    with pytest.raises(InvalidArgument) as info:
        m.trace_query("i1", [A, B, C, D], 0)
    assert str(info.value) == (
        "instance_id 'i1': block_size_tokens 4 must be a multiple of "
        "trace_block_size_tokens 3 (re-blocking only coarsens)"
    )
    with pytest.raises(ValueError, match="trace_block_size_tokens must be >= 0, got -2"):
        QueryPolicy.offline(trace_block_size_tokens=-2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_token_len": -1}, "input_token_len must not be negative, got -1"),
        ({"token_ids_len": -3}, "token_ids_len must not be negative, got -3"),
        ({"timestamp_ns": -5}, "timestamp_ns must not be negative, got -5"),
        (
            {"input_token_len": 16},
            "instance_id 'i1': len(block_keys) is 3 but input_token_len 16 // block size 4 is 4 "
            "(complete blocks only)",
        ),
    ],
)
def test_bad_query_changes_nothing(kwargs: dict, message: str) -> None:
    m = new_manager()
    m.trace_query("i1", [A, B, C], 12)
    before = snapshot(m)
    args = {"input_token_len": 12, **kwargs}
    with pytest.raises(InvalidArgument) as info:
        m.trace_query("i1", [A, B, C], **args)
    assert str(info.value) == message
    assert snapshot(m) == before
    assert hits(m.trace_query("i1", [A, B, C], 12)) == [2, 3]


def test_max_block_keys() -> None:
    m = new_manager(policy=QueryPolicy(max_block_keys=3))
    m.trace_query("i1", [A, B, C])
    before = snapshot(m)
    with pytest.raises(InvalidArgument) as info:
        m.trace_query("i1", [A, B, C, D])
    assert str(info.value) == "block_keys has 4 keys, more than max_block_keys 3"
    assert snapshot(m) == before
    assert m.policy.max_block_keys == 3
    with pytest.raises(ValueError, match="max_block_keys must be > 0, got 0"):
        QueryPolicy(max_block_keys=0)


def test_unknown_instance_query() -> None:
    m = new_manager()
    with pytest.raises(InstanceNotExist) as info:
        m.trace_query("nope", [A])
    assert str(info.value) == "instance_id 'nope' is not registered"


def test_reset_stats_zeroes_counters_and_state() -> None:
    m = new_manager()
    m.register_instance(make_reg("i2"))
    for keys, tokens in WORKED:
        m.trace_query("i1", keys, tokens)
        m.trace_query("i2", keys, tokens)
    m.reset_stats("i1")
    s1, s2 = m.list_instances()
    assert (s1.total_queries, s1.total_blocks_queried, s1.total_input_tokens) == (0, 0, 0)
    assert [c.total_hits for c in s1.capacity_summaries] == [0, 0]
    assert (s1.total_max_hits, s1.max_hit_rate, s1.debug_info.unique_keys) == (0, 0.0, 0)
    assert s1.debug_info.kv_cache_usage_bytes == 0
    assert (s2.total_queries, s2.total_max_hits) == (5, 8)  # the other instance is untouched
    assert hits(m.trace_query("i1", [A, B, C], 13)) == [0, 0]  # LRU state is cold again
    assert m.get_instance("i1") == make_reg()


def test_list_instances_filter_and_order() -> None:
    m = new_manager()
    m.create_group(make_group("h"))
    for iid, group in (("c", "h"), ("a", "g"), ("b", "h")):
        m.register_instance(make_reg(iid, group))
    assert [s.instance_id for s in m.list_instances()] == ["a", "b", "c", "i1"]
    assert [s.instance_id for s in m.list_instances("h")] == ["b", "c"]
    assert [s.instance_id for s in m.list_instances("g")] == ["a", "i1"]
    assert [s.instance_id for s in m.instance_infos()] == ["a", "b", "c", "i1"]
    with pytest.raises(InstanceNotExist) as info:
        m.list_instances("nope")
    assert str(info.value) == "instance group 'nope' does not exist"


def test_duplicate_capacities_are_separate_identical_slots() -> None:
    m = OnlineOptimizerManager()
    m.create_group(make_group(capacity_gb=(SLOT2, SLOT2)))
    assert m.register_instance(make_reg()).estimated_capacity_blocks == (2, 2)
    m.trace_query("i1", [A, B, C], 12)
    r = m.trace_query("i1", [A, B, C], 12)
    assert r.capacity_results == (CapacityResult(SLOT2, 2, 8 / 12, 2),) * 2
    (s,) = m.list_instances()
    assert s.capacity_summaries == (CapacitySummary(SLOT2, 2, 2, 8 / 24),) * 2


def test_concurrent_queries_on_different_instances_give_exact_totals() -> None:
    m = OnlineOptimizerManager()
    m.create_group(make_group())
    ids = [f"inst{k}" for k in range(6)]
    for iid in ids:
        m.register_instance(make_reg(iid))
    rounds = 200
    errors: list[BaseException] = []
    start = threading.Barrier(len(ids) + 1)

    def worker(iid: str) -> None:
        try:
            start.wait()
            for _ in range(rounds):
                for keys, tokens in WORKED:
                    m.trace_query(iid, keys, tokens)
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    def reader() -> None:
        try:
            start.wait()
            for _ in range(50):
                m.list_instances()
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(iid,)) for iid in ids]
    threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # Sequential reference: one instance replaying the same stream alone.
    ref = new_manager()
    for _ in range(rounds):
        for keys, tokens in WORKED:
            ref.trace_query("i1", keys, tokens)
    (expected,) = ref.list_instances()
    summaries = m.list_instances()
    assert [s.instance_id for s in summaries] == ids
    for s in summaries:
        assert s.total_queries == 5 * rounds
        assert s.total_input_tokens == 54 * rounds
        assert s.total_blocks_queried == 13 * rounds
        assert s.capacity_summaries == expected.capacity_summaries
        assert s.total_max_hits == expected.total_max_hits


def test_concurrent_queries_on_one_instance_count_every_query() -> None:
    m = new_manager()
    per_thread = 300

    def worker() -> None:
        for _ in range(per_thread):
            m.trace_query("i1", [A, B], 8)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (s,) = m.list_instances()
    n = 4 * per_thread
    assert (s.total_queries, s.total_input_tokens, s.total_blocks_queried) == (n, 8 * n, 2 * n)
    # every query after the first hits both blocks, whatever the interleaving
    assert [c.total_hits for c in s.capacity_summaries] == [2 * (n - 1)] * 2


# ------------------------------------------------------------------ persistence


def test_restore_from_reopened_registry(tmp_path) -> None:
    path = tmp_path / "data" / "litehit.sqlite3"
    reg = Registry(path)
    m = OnlineOptimizerManager(registry=reg)
    m.create_group(make_group())
    m.create_group(make_group("h", capacity_gb=(2.0, 1.0), ttl_seconds=5))
    m.create_group(make_group("gone"))
    m.remove_group("gone")
    m.register_instance(make_reg())
    m.register_instance(make_reg("i2", "h", block_size=8))
    m.register_instance(make_reg("i3"))
    m.remove_instance("i3")
    for keys, tokens in WORKED:
        m.trace_query("i1", keys, tokens)
    groups, regs = m.list_groups(), [m.get_instance("i1"), m.get_instance("i2")]
    reg.close()

    reopened = Registry(path)
    restored = OnlineOptimizerManager(registry=reopened)
    restored.restore()
    assert restored.list_groups() == groups
    assert [restored.get_instance("i1"), restored.get_instance("i2")] == regs
    summaries = restored.list_instances()
    assert [s.instance_id for s in summaries] == ["i1", "i2"]
    assert all(s.total_queries == 0 and s.debug_info.unique_keys == 0 for s in summaries)
    assert [c.capacity_blocks for c in summaries[0].capacity_summaries] == [2, 3]
    # fresh LRU state: the worked example replays identically
    results = [restored.trace_query("i1", keys, tokens) for keys, tokens in WORKED]
    assert [hits(r) for r in results] == [[0, 0], [2, 2], [2, 2], [1, 1], [2, 2]]
    reopened.close()


def test_restore_rejects_invalid_stored_entries(tmp_path) -> None:
    reg = Registry(tmp_path / "r.sqlite3")
    m = OnlineOptimizerManager(registry=reg)
    m.create_group(make_group())
    m.register_instance(make_reg())
    # written behind the manager's back: a group the manager would refuse
    reg.save_group(make_group("bad", shared_group_quota=True))
    fresh = OnlineOptimizerManager(registry=reg)
    with pytest.raises(RegistryIOError) as info:
        fresh.restore()
    assert str(info.value) == (
        f"registry {reg.path!r}: stored instance group 'bad' is invalid: shared_group_quota=True "
        "of instance group 'bad' is not supported: every instance is simulated with its own "
        "capacity"
    )
    assert fresh.list_groups() == [] and fresh.instance_infos() == []
    reg.delete_group("bad")
    reg.save_instance(make_reg("orphan", "missing"))
    with pytest.raises(RegistryIOError) as info:
        fresh.restore()
    assert "stored instance 'orphan' is invalid: instance_group 'missing'" in str(info.value)
    assert fresh.list_groups() == []
    reg.delete_instance("orphan")
    fresh.restore()
    assert [s.instance_id for s in fresh.instance_infos()] == ["i1"]
    reg.close()


def test_restore_without_registry_is_a_noop() -> None:
    m = new_manager()
    before = snapshot(m)
    m.restore()
    assert snapshot(m) == before


def _every_admin_call(m: OnlineOptimizerManager) -> list:
    return [
        lambda: m.create_group(make_group("new")),
        lambda: m.update_group(make_group("empty", capacity_gb=(9.0,))),
        lambda: m.remove_group("empty"),
        lambda: m.register_instance(make_reg("i2")),
        lambda: m.register_instance(make_reg("i1", block_size=8)),
        lambda: m.remove_instance("i1"),
    ]


def test_registry_write_failure_leaves_memory_unchanged_closed(tmp_path) -> None:
    reg = Registry(tmp_path / "r.sqlite3")
    m = OnlineOptimizerManager(registry=reg)
    m.create_group(make_group())
    m.create_group(make_group("empty"))
    m.register_instance(make_reg())
    m.trace_query("i1", [A, B], 8)
    before = snapshot(m)
    info = m.instance_infos()[0]
    stored = reg.load()
    reg.close()
    for call in _every_admin_call(m):
        with pytest.raises(RegistryIOError, match="registry is closed"):
            call()
        assert snapshot(m) == before
        assert m.instance_infos()[0] == info
    reopened = Registry(tmp_path / "r.sqlite3")
    assert reopened.load() == stored
    reopened.close()


def test_registry_write_failure_leaves_memory_unchanged_locked(tmp_path) -> None:
    path = tmp_path / "r.sqlite3"
    reg = Registry(path, busy_timeout_s=0)
    m = OnlineOptimizerManager(registry=reg)
    m.create_group(make_group())
    m.create_group(make_group("empty"))
    m.register_instance(make_reg())
    before = snapshot(m)
    stored = reg.load()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        for call in _every_admin_call(m):
            with pytest.raises(RegistryIOError, match="database is locked"):
                call()
            assert snapshot(m) == before
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert reg.load() == stored
    # once the lock is gone, writes work again and are persisted
    m.create_group(make_group("new"))
    assert [g.name for g in reg.load()[0]] == ["empty", "g", "new"]
    reg.close()


def test_record_query_is_trace_query_without_the_answer() -> None:
    """The offline entry point changes state and counters exactly as TraceQuery does."""
    online, offline = new_manager(), new_manager()
    for i, (keys, tokens) in enumerate(WORKED * 3):
        result = online.trace_query("i1", keys, tokens, timestamp_ns=1000 + i)
        fact, denominator = offline.record_query("i1", keys, tokens, timestamp_ns=1000 + i)
        assert (fact, denominator) == (result.fact, result.input_token_len)
    assert offline.list_instances() == online.list_instances()
    with pytest.raises(InstanceNotExist):
        offline.record_query("nope", [A], 4)
    with pytest.raises(InvalidArgument, match="input_token_len must not be negative, got -1"):
        offline.record_query("i1", [A], -1)
    assert offline.list_instances() == online.list_instances()


def test_values_beyond_the_wire_types_are_rejected_before_anything_is_stored() -> None:
    """block_size is int32 and sizes/capacities int64 on the wire: reject, never publish."""
    m = new_manager()
    before = snapshot(m)
    with pytest.raises(
        InvalidArgument,
        match=r"capacity_gb\[0\] of instance group 'big' must "
        r"be at most 8589934591 GiB \(bytes must fit in int64\), got 1e\+300",
    ):
        m.create_group(make_group("big", capacity_gb=(1e300,)))
    with pytest.raises(
        InvalidArgument,
        match=r"block_size of instance_id 'i2' must be an "
        r"integer in 1\.\.2147483647 \(tokens\), got 4294967296",
    ):
        m.register_instance(make_reg("i2", block_size=2**32))
    with pytest.raises(
        InvalidArgument,
        match=r"size of spec 'hbm' of instance_id 'i2' must be "
        r"an integer in 1\.\.9223372036854775807 \(bytes\), got 9223372036854775808",
    ):
        m.register_instance(make_reg("i2", location_spec_infos=(LocationSpec("hbm", 2**63),)))
    two = (LocationSpec("a", 2**62), LocationSpec("b", 2**62))
    with pytest.raises(InvalidArgument, match=r"add up to 9223372036854775808 bytes per block"):
        m.register_instance(
            make_reg(
                "i2",
                location_spec_infos=two,
                location_spec_groups=(LocationSpecGroup("full", ("a", "b")),),
            )
        )
    assert snapshot(m) == before
