"""ServiceMetrics: scrape-time per-instance series, latency/error instruments, HTTP serving."""

from __future__ import annotations

import sys
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from litehit_service.manager import OnlineOptimizerManager
from litehit_service.metrics import ServiceMetrics, format_capacity_label
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

GIB = 1024**3
SLOT2, SLOT3 = 2048 / GIB, 3072 / GIB
L2, L3 = "1.9073486328125e-06", "2.86102294921875e-06"
WORKED = [([1, 2, 3], 13), ([1, 2, 4], 12), ([1, 2, 3], 13), ([1, 5], 8), ([1, 5], 8)]


def registration(instance_id: str, group: str = "g") -> InstanceRegistration:
    return InstanceRegistration(
        instance_id,
        group,
        4,
        (LocationSpec("hbm", 1024),),
        (LocationSpecGroup("full", ("hbm",)),),
    )


def setup(theoretical: bool = True, capacity_gb=(SLOT3, SLOT2), ttl: int = 0):
    manager = OnlineOptimizerManager()
    manager.create_group(
        InstanceGroup("g", capacity_gb, enable_theoretical_max_cache=theoretical, ttl_seconds=ttl)
    )
    manager.register_instance(registration("i1"))
    return manager, ServiceMetrics(manager, CollectorRegistry())


def samples(metrics: ServiceMetrics) -> dict[tuple, float]:
    """(sample name, sorted label items) -> value, parsed from the rendered text."""
    text = metrics.render().decode()
    out: dict[tuple, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def per_instance(values: dict[tuple, float]) -> dict[tuple, float]:
    """Only the series computed from instance state (drops histogram/error/instances)."""
    return {
        k: v
        for k, v in values.items()
        if any(name == "instance_id" for name, _ in k[1]) and k[0] != "litehit_memory_bytes"
    }


def lab(instance_id: str = "i1", group: str = "g", cap: str | None = None) -> tuple:
    items = {"instance_group": group, "instance_id": instance_id}
    if cap is not None:
        items["capacity_gb"] = cap
    return tuple(sorted(items.items()))


def test_format_capacity_label() -> None:
    assert format_capacity_label(8.0) == "8"
    assert format_capacity_label(8) == "8"
    assert format_capacity_label(0.5) == "0.5"
    assert format_capacity_label(1024.0) == "1024"
    assert format_capacity_label(SLOT2) == L2
    assert format_capacity_label(1e-06) == "1e-06"
    assert format_capacity_label(1e16) == "1e+16"


def test_values_after_worked_example() -> None:
    manager, metrics = setup()
    for keys, tokens in WORKED:
        manager.trace_query("i1", keys, tokens)
    manager.hit_rate_curve("i1")  # folds the curve's buffer: the memory figure is steady
    values = samples(metrics)
    memory = manager.list_instances()[0].debug_info.memory_usage_bytes
    assert values[("litehit_memory_bytes", lab())] == memory > 0
    assert values[("litehit_instances", ())] == 1
    assert per_instance(values) == {
        ("litehit_trace_queries_total", lab()): 5,
        ("litehit_input_tokens_total", lab()): 54,
        ("litehit_queried_blocks_total", lab()): 13,
        ("litehit_hit_tokens_total", lab(cap=L2)): 28,
        ("litehit_hit_tokens_total", lab(cap=L3)): 28,
        ("litehit_hit_blocks_total", lab(cap=L2)): 7,
        ("litehit_hit_blocks_total", lab(cap=L3)): 7,
        ("litehit_theoretical_hit_tokens_total", lab()): 32,
        ("litehit_capacity_blocks", lab(cap=L2)): 2,
        ("litehit_capacity_blocks", lab(cap=L3)): 3,
        ("litehit_unique_blocks", lab()): 5,
        ("litehit_kv_cache_usage_bytes", lab()): 5 * 1024,  # every tracked block
        ("litehit_ttl_expired_blocks_total", lab()): 0,
        ("litehit_dropped_blocks_total", lab()): 0,
        ("litehit_max_tracked_blocks", lab()): 0,
        **curve_series(),
    }


def curve_series(instance_id: str = "i1", hits=(16, 28, 28, 32), targets=None) -> dict:
    """The live-curve series of the worked example: 16 grid capacities from 1 block to 16x
    the largest slot (48 blocks), hit tokens there, capacities for the targets, 4 corners."""
    grid_blocks = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 17, 22, 29, 37, 48]
    out: dict[tuple, float] = {}
    base = {"instance_group": "g", "instance_id": instance_id}
    for c in grid_blocks:
        label = tuple(sorted({**base, "capacity_bytes": str(c * 1024)}.items()))
        out[("litehit_curve_hit_tokens_total", label)] = hits[min(c, len(hits)) - 1]
    # 8 theoretical blocks: 0.5 -> 4 blocks at 1 block; 0.8 -> 7 at 2; 0.9+ -> 8 at 4
    targets = targets or {"0.5": 1024, "0.8": 2048, "0.9": 4096, "0.95": 4096, "0.99": 4096}
    for target, nbytes in targets.items():
        label = tuple(sorted({**base, "target": target}.items()))
        out[("litehit_capacity_for_target_bytes", label)] = nbytes
    out[("litehit_curve_corners", lab(instance_id))] = 4 if hits[-1] else 0
    out[("litehit_curve_resolution_bytes", lab(instance_id))] = 1024
    return out


def test_family_types() -> None:
    manager, metrics = setup()
    text = metrics.render().decode()
    # prometheus_client also exposes *_created gauges for its own counters/histograms
    types = {
        f.name: f.type
        for f in text_string_to_metric_families(text)
        if not f.name.endswith("_created") and f.name.startswith("litehit_")
    }
    assert types == {
        "litehit_trace_queries": "counter",
        "litehit_input_tokens": "counter",
        "litehit_queried_blocks": "counter",
        "litehit_hit_tokens": "counter",
        "litehit_hit_blocks": "counter",
        "litehit_theoretical_hit_tokens": "counter",
        "litehit_capacity_blocks": "gauge",
        "litehit_unique_blocks": "gauge",
        "litehit_memory_bytes": "gauge",
        "litehit_kv_cache_usage_bytes": "gauge",
        "litehit_ttl_expired_blocks": "counter",
        "litehit_dropped_blocks": "counter",
        "litehit_max_tracked_blocks": "gauge",
        "litehit_instances": "gauge",
        "litehit_curve_hit_tokens": "counter",
        "litehit_capacity_for_target_bytes": "gauge",
        "litehit_curve_corners": "gauge",
        "litehit_curve_resolution_bytes": "gauge",
        "litehit_trace_query_duration_seconds": "histogram",
        "litehit_errors": "counter",
        "litehit_instance_replacements": "counter",
        "litehit_snapshot_failures": "counter",
        "litehit_snapshots_written": "counter",
        "litehit_snapshot_last_write_seconds": "gauge",
        "litehit_snapshot_last_success_timestamp_seconds": "gauge",
        "litehit_snapshot_restored_instances": "gauge",
        "litehit_active_streams": "gauge",
        "litehit_streams_rejected": "counter",
        "litehit_streams_idle_closed": "counter",
        "litehit_unauthenticated": "counter",
        "litehit_undecodable_messages": "counter",
    }


def test_removed_instance_series_disappear() -> None:
    manager, metrics = setup()
    manager.register_instance(registration("i2"))
    for keys, tokens in WORKED:
        manager.trace_query("i1", keys, tokens)
        manager.trace_query("i2", keys, tokens)
    before = samples(metrics)
    assert before[("litehit_trace_queries_total", lab("i2"))] == 5
    assert before[("litehit_instances", ())] == 2
    manager.remove_instance("i1")
    after = samples(metrics)
    assert not any(("instance_id", "i1") in labels for _, labels in after)
    assert after[("litehit_instances", ())] == 1
    kept = {k: v for k, v in per_instance(before).items() if ("instance_id", "i2") in k[1]}
    assert per_instance(after) == kept


def test_reset_zeroes_series() -> None:
    manager, metrics = setup()
    for keys, tokens in WORKED:
        manager.trace_query("i1", keys, tokens)
    manager.reset_stats("i1")
    values = per_instance(samples(metrics))
    assert values == {
        ("litehit_trace_queries_total", lab()): 0,
        ("litehit_input_tokens_total", lab()): 0,
        ("litehit_queried_blocks_total", lab()): 0,
        ("litehit_hit_tokens_total", lab(cap=L2)): 0,
        ("litehit_hit_tokens_total", lab(cap=L3)): 0,
        ("litehit_hit_blocks_total", lab(cap=L2)): 0,
        ("litehit_hit_blocks_total", lab(cap=L3)): 0,
        ("litehit_theoretical_hit_tokens_total", lab()): 0,
        ("litehit_capacity_blocks", lab(cap=L2)): 2,
        ("litehit_capacity_blocks", lab(cap=L3)): 3,
        ("litehit_unique_blocks", lab()): 0,
        ("litehit_kv_cache_usage_bytes", lab()): 0,
        ("litehit_ttl_expired_blocks_total", lab()): 0,
        ("litehit_dropped_blocks_total", lab()): 0,
        ("litehit_max_tracked_blocks", lab()): 0,
        **curve_series(
            hits=(0, 0, 0, 0), targets=dict.fromkeys(("0.5", "0.8", "0.9", "0.95", "0.99"), 0)
        ),
    }


def test_duplicate_capacity_gives_one_series() -> None:
    manager, metrics = setup(capacity_gb=(SLOT2, 8.0, SLOT2))
    manager.trace_query("i1", [1, 2, 3], 12)
    manager.trace_query("i1", [1, 2, 3], 12)
    values = samples(metrics)
    hit_series = {k: v for k, v in values.items() if k[0] == "litehit_hit_blocks_total"}
    assert hit_series == {
        ("litehit_hit_blocks_total", lab(cap=L2)): 2,
        ("litehit_hit_blocks_total", lab(cap="8")): 3,
    }
    assert values[("litehit_capacity_blocks", lab(cap="8"))] == 8 * GIB // 1024


def test_theoretical_series_only_when_enabled() -> None:
    manager, metrics = setup(theoretical=False)
    manager.trace_query("i1", [1], 4)
    assert not any(k[0] == "litehit_theoretical_hit_tokens_total" for k in samples(metrics))


def test_ttl_expired_blocks_counter() -> None:
    manager, metrics = setup(ttl=10)
    s = 1_000_000_000
    manager.trace_query("i1", [1, 2, 3], 12, timestamp_ns=1000 * s)
    manager.trace_query("i1", [1, 2], 8, timestamp_ns=1015 * s)
    values = samples(metrics)
    assert values[("litehit_ttl_expired_blocks_total", lab())] == 3
    assert values[("litehit_unique_blocks", lab())] == 2


def test_latency_histogram_and_error_counter() -> None:
    manager, metrics = setup()
    metrics.observe_query("TraceQuery", 0.0002, "i1")
    metrics.observe_query("TraceQuery", 0.003, "i1")
    metrics.observe_queries("TraceQueryStream", [0.00001, 0.5], ["i1", ""])
    metrics.observe_query("Other", 2.0)
    metrics.observe_query("TraceQuery", 0.1, "removed-long-ago")  # pruned at scrape
    metrics.count_error("TraceQuery", "INVALID_ARGUMENT")
    metrics.count_error("TraceQuery", "INVALID_ARGUMENT")
    metrics.count_error("RegisterInstance", "INSTANCE_NOT_EXIST")
    values = samples(metrics)
    h = "litehit_trace_query_duration_seconds"

    def key(suffix: str, method: str, iid: str = "i1", le: str | None = None) -> tuple:
        labels = {"method": method, "instance_group": "g" if iid else "", "instance_id": iid}
        if le is not None:
            labels["le"] = le
        return (h + suffix, tuple(sorted(labels.items())))

    assert values[key("_count", "TraceQuery")] == 2
    assert values[key("_sum", "TraceQuery")] == pytest.approx(0.0032)
    assert values[key("_bucket", "TraceQuery", le="0.00025")] == 1
    assert values[key("_bucket", "TraceQuery", le="0.005")] == 2
    assert values[key("_bucket", "TraceQueryStream", le="5e-05")] == 1
    assert values[key("_count", "TraceQueryStream", iid="")] == 1  # an unknown instance
    assert values[key("_bucket", "Other", iid="", le="1.0")] == 0
    assert values[key("_bucket", "Other", iid="", le="+Inf")] == 1
    assert not [k for k in values if ("instance_id", "removed-long-ago") in k[1]]
    # a removed (or reset, or re-registered) instance's latency series are dropped
    metrics.forget_instance("i1")
    assert not [k for k in samples(metrics) if k[0].startswith(h) and ("instance_id", "i1") in k[1]]
    errors = {k: v for k, v in values.items() if k[0] == "litehit_errors_total"}
    assert errors == {
        ("litehit_errors_total", (("code", "INVALID_ARGUMENT"), ("method", "TraceQuery"))): 2,
        (
            "litehit_errors_total",
            (("code", "INSTANCE_NOT_EXIST"), ("method", "RegisterInstance")),
        ): 1,
    }


def test_standard_process_and_gc_families_are_exported() -> None:
    """client_python's defaults, on the service's own registry: process_* (Linux),
    python_gc_* and python_info."""
    _, metrics = setup()
    types = {f.name: f.type for f in text_string_to_metric_families(metrics.render().decode())}
    assert types["python_gc_objects_collected"] == "counter"
    assert types["python_info"] == "gauge"
    if sys.platform.startswith("linux"):
        for name in ("process_resident_memory_bytes", "process_open_fds"):
            assert types[name] == "gauge"
        assert types["process_start_time_seconds"] == "gauge"
        assert types["process_cpu_seconds"] == "counter"


def test_a_registry_that_holds_the_standard_collectors_gets_them_once() -> None:
    """Like the process-global registry (auto_describe, so duplicates are refused):
    ServiceMetrics does not register them again."""
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

    manager, _ = setup()
    registry = CollectorRegistry(auto_describe=True)
    for standard in (ProcessCollector, GCCollector, PlatformCollector):
        standard(registry=registry)
    metrics = ServiceMetrics(manager, registry=registry)
    assert metrics.render().count(b"# TYPE python_gc_objects_collected_total counter") == 1


def test_memory_help_names_engine_state_not_the_process() -> None:
    _, metrics = setup()
    (family,) = [
        f
        for f in text_string_to_metric_families(metrics.render().decode())
        if f.name == "litehit_memory_bytes"
    ]
    assert "engine state" in family.documentation
    assert "process_resident_memory_bytes" in family.documentation


def test_error_counts_round_trip() -> None:
    manager, first = setup()
    first.count_error("TraceQuery", "INVALID_ARGUMENT")
    first.count_error("TraceQuery", "INVALID_ARGUMENT")
    first.count_error("RegisterInstance", "INSTANCE_NOT_EXIST")
    counts = first.error_counts()
    assert counts == {
        ("TraceQuery", "INVALID_ARGUMENT"): 2,
        ("RegisterInstance", "INSTANCE_NOT_EXIST"): 1,
    }
    second = ServiceMetrics(manager)
    second.restore_error_counts(counts)
    second.count_error("TraceQuery", "INVALID_ARGUMENT")
    assert second.error_counts()[("TraceQuery", "INVALID_ARGUMENT")] == 3


def test_default_registry_is_private() -> None:
    manager, _ = setup()
    first = ServiceMetrics(manager)
    second = ServiceMetrics(manager)  # would raise on a shared registry (duplicate names)
    assert first.registry is not second.registry
    first.count_error("TraceQuery", "INVALID_ARGUMENT")
    assert not any(k[0] == "litehit_errors_total" for k in samples(second))


def test_http_server_serves_metrics() -> None:
    manager, metrics = setup()
    for keys, tokens in WORKED:
        manager.trace_query("i1", keys, tokens)
    server, port = metrics.start_http_server("127.0.0.1", 0)
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            body = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    (queries,) = families["litehit_trace_queries"].samples
    assert (queries.labels, queries.value) == ({"instance_group": "g", "instance_id": "i1"}, 5)
    hit_tokens = {s.labels["capacity_gb"]: s.value for s in families["litehit_hit_tokens"].samples}
    assert hit_tokens == {L2: 28, L3: 28}
