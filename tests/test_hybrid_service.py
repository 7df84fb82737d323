"""Hybrid linear/Mamba instances through the manager and a real server, against the oracle."""

from __future__ import annotations

import random
import time

import pytest
from oracle import NaiveHybridLRU, tree_trace
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from litehit_core.curve import log_spaced
from litehit_service import messages as pb2
from litehit_service.client import OptimizerClient
from litehit_service.manager import ManagerLimits, OnlineOptimizerManager
from litehit_service.metrics import ServiceMetrics
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
    RegistrationResult,
)
from litehit_service.server import create_server

GIB = 1024**3
CURVE_FAMILIES = ("litehit_curve_", "litehit_capacity_for_target")
WORKED = [[1, 2, 3], [1, 2, 3], [1, 2, 4, 5], [1, 2, 3], [1, 6], [1, 2, 4, 5, 7]]


def hybrid_reg(
    instance_id: str = "h",
    group: str = "g",
    block_size: int = 4,
    full: int = 1024,
    linear: int = 2048,
    step_tokens: int = 8,
) -> InstanceRegistration:
    return InstanceRegistration(
        instance_id,
        group,
        block_size,
        (
            LocationSpec("k", full // 2),
            LocationSpec("v", full - full // 2),
            LocationSpec("m", linear),
        ),
        (LocationSpecGroup("full", ("k", "v")), LocationSpecGroup("state", ("m",))),
        full_location_spec_group_name="full",
        linear_location_spec_group_name="state",
        linear_step=step_tokens,
    )


def test_worked_example_of_the_issue_through_the_manager():
    m = OnlineOptimizerManager()
    m.create_group(InstanceGroup("g", (4096 / GIB, 8192 / GIB), enable_theoretical_max_cache=True))
    result = m.register_instance(hybrid_reg())
    assert result == RegistrationResult((2, 4), size_full_only=1024, size_full_linear=3072)
    oracles = [NaiveHybridLRU(c, 1024, 2048, 2) for c in (4096, 8192, None)]
    hits, theoretical = [], []
    for keys in WORKED:
        r = m.trace_query("h", keys, 4 * len(keys))
        hits.append(list(r.hit_blocks))
        theoretical.append(r.theoretical.max_hit_count)
        expected = [o.request(keys) for o in oracles]
        assert [*r.hit_blocks, r.theoretical.max_hit_count] == expected
        assert list(r.unique_keys) == [o.full_objects() for o in oracles[:2]]
        assert r.theoretical.current_unique_keys == oracles[2].full_objects()
        assert r.hit_rates == tuple(h * 4 / (4 * len(keys)) for h in r.hit_blocks)
    assert hits == [[0, 0], [2, 3], [2, 2], [2, 2], [0, 0], [0, 2]]
    assert theoretical == [0, 3, 2, 3, 0, 4]
    (summary,) = m.list_instances()
    assert summary.total_input_tokens == 80
    assert [c.total_hits for c in summary.capacity_summaries] == [6, 9]
    assert [c.hit_rate for c in summary.capacity_summaries] == [24 / 80, 36 / 80]
    assert [c.capacity_blocks for c in summary.capacity_summaries] == [2, 4]
    assert summary.max_hit_rate == 48 / 80
    d = summary.debug_info
    assert (d.linear_step, d.unique_keys) == (8, 7)
    assert d.kv_cache_usage_bytes == oracles[2].used  # every tracked object's bytes


def test_metrics_of_a_hybrid_instance():
    m = OnlineOptimizerManager()
    m.create_group(InstanceGroup("g", (4096 / GIB, 8192 / GIB), enable_theoretical_max_cache=True))
    m.register_instance(hybrid_reg())
    for keys in WORKED:
        m.trace_query("h", keys, 4 * len(keys))
    text = ServiceMetrics(m, CollectorRegistry()).render().decode()
    got = {
        (s.name, s.labels.get("capacity_gb")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.labels.get("instance_id") == "h" and not s.name.startswith(CURVE_FAMILIES)
    }
    curve = {
        (s.name, s.labels.get("capacity_bytes") or s.labels.get("target")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.labels.get("instance_id") == "h" and s.name.startswith(CURVE_FAMILIES)
    }
    # the staircase 4096 -> 24, 7168 -> 36, 11264 -> 40, 14336 -> 48 hit tokens, at 16
    # grid capacities from a block and a state (3 KiB) to 16x the largest slot, in KiB
    grid_kib = log_spaced(3, 128, 16).tolist()
    steps = [(4096, 24), (7168, 36), (11264, 40), (14336, 48)]
    expected_curve = {
        ("litehit_curve_hit_tokens_total", str(k * 1024)): max(
            [h for t, h in steps if t <= k * 1024], default=0
        )
        for k in grid_kib
    }
    # 12 theoretical blocks: 0.5 -> 6 (24 tokens), 0.8 -> 10 (40), 0.9 -> 11 and up -> 12
    for target, nbytes in (("0.5", 4096), ("0.8", 11264), ("0.9", 14336), ("0.95", 14336)):
        expected_curve[("litehit_capacity_for_target_bytes", target)] = nbytes
    expected_curve[("litehit_capacity_for_target_bytes", "0.99")] = 14336
    expected_curve[("litehit_curve_corners", None)] = 8
    expected_curve[("litehit_curve_resolution_bytes", None)] = 1024
    assert curve == expected_curve
    c1, c2 = "3.814697265625e-06", "7.62939453125e-06"
    assert got == {
        ("litehit_trace_queries_total", None): 6,
        ("litehit_input_tokens_total", None): 80,
        ("litehit_queried_blocks_total", None): 20,
        ("litehit_hit_tokens_total", c1): 24,
        ("litehit_hit_tokens_total", c2): 36,
        ("litehit_hit_blocks_total", c1): 6,
        ("litehit_hit_blocks_total", c2): 9,
        ("litehit_theoretical_hit_tokens_total", None): 48,
        ("litehit_capacity_blocks", c1): 2,
        ("litehit_capacity_blocks", c2): 4,
        ("litehit_unique_blocks", None): 7,
        ("litehit_memory_bytes", None): got[("litehit_memory_bytes", None)],
        # 7 blocks of 1024 bytes and 5 saved states of 2048 bytes
        ("litehit_kv_cache_usage_bytes", None): 7 * 1024 + 5 * 2048,
        ("litehit_ttl_expired_blocks_total", None): 0,
        ("litehit_dropped_blocks_total", None): 0,
        ("litehit_max_tracked_blocks", None): 0,
    }
    assert got[("litehit_memory_bytes", None)] > 0


def test_hybrid_limit_is_in_bytes_of_blocks_with_their_states():
    m = OnlineOptimizerManager(limits=ManagerLimits(max_tracked_blocks=4))
    # 4 blocks with their states at a step of 2: 4 * (2 * 1024 + 2048) / 2 = 8192 bytes
    m.create_group(InstanceGroup("ok", (8192 / GIB,), enable_theoretical_max_cache=True))
    m.create_group(InstanceGroup("big", (8193 / GIB,)))
    m.register_instance(hybrid_reg(group="ok"))
    from litehit_service.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="more than max_tracked_blocks 4"):
        m.register_instance(hybrid_reg("x", group="big"))
    theoretical = NaiveHybridLRU(8192, 1024, 2048, 2)
    for keys in tree_trace(random.Random(3), 200, max_new=5):
        r = m.trace_query("h", keys, 4 * len(keys))
        assert r.theoretical.max_hit_count == theoretical.request(keys)
    assert m.list_instances()[0].debug_info.max_tracked_blocks == 4


@pytest.mark.parametrize("seed", range(3))
def test_many_hybrid_instances_streamed_through_a_real_server(seed):
    rng = random.Random(seed)
    manager = OnlineOptimizerManager()
    server = create_server(manager, None, "127.0.0.1:0").start()
    try:
        instances = {}
        with OptimizerClient(server.address) as c:
            capacities = (3000, 9000, 40000)
            c.create_instance_group(
                InstanceGroup(
                    "g", tuple(b / GIB for b in capacities), enable_theoretical_max_cache=True
                )
            )
            c.create_instance_group(
                InstanceGroup(
                    "ttl",
                    tuple(b / GIB for b in capacities),
                    ttl_seconds=2,
                    enable_theoretical_max_cache=True,
                )  # fmt: skip
            )
            for i, (step, full, linear) in enumerate([(1, 512, 256), (2, 512, 512), (3, 256, 2048),
                                                      (7, 256, 7680)]):  # fmt: skip
                group = "ttl" if i % 2 else "g"
                iid = f"h{i}"
                c.register_instance(hybrid_reg(iid, group, 4, full, linear, 4 * step))
                ttl = 2 * 10**9 if group == "ttl" else 0
                instances[iid] = [NaiveHybridLRU(b, full, linear, step, ttl) for b in capacities]
                instances[iid].append(NaiveHybridLRU(None, full, linear, step, ttl))
            trace = tree_trace(rng, 400, max_new=8)
            base = time.time_ns() - 3600 * 10**9
            requests = []
            for j, keys in enumerate(trace):
                iid = f"h{rng.randrange(4)}"
                ts = base + j * 10**8
                requests.append((iid, keys, ts))
            queries = [
                pb2.TraceQueryRequest(
                    instance_id=iid, block_keys=keys, input_token_len=4 * len(keys) + 1,
                    timestamp_ns=ts,
                )
                for iid, keys, ts in requests
            ]  # fmt: skip
            answers = list(c.stream_trace_queries(queries, batch_size=37))
            for (iid, keys, ts), answer in zip(requests, answers, strict=True):
                expected = [o.request(keys, ts) for o in instances[iid]]
                got = [x.cache_hit_count for x in answer.capacity_results]
                assert got + [answer.theoretical_result.max_hit_count] == expected
                assert [x.current_unique_keys for x in answer.capacity_results] == [
                    o.full_objects() for o in instances[iid][:3]
                ]
    finally:
        server.stop()
