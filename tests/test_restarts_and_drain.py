"""Behaviours that a restart, a drain or a reset must keep (issue 20's (a), (c)-(e) and the
snapshot mismatch path), each on a real server: ``litehit serve`` subprocesses with a data
dir (restarts, SIGTERM, kill -9) or an in-process server on port 0 where the test must hold
the drain open deterministically.

- (a) a live curve fed only through TraceQueryPackedStream survives a graceful restart;
- (c) unary calls during a drain (a stream still open) are answered UNAVAILABLE;
- (d) SIGTERM enters the graceful shutdown: health NOT_SERVING while the process drains;
- (e) ResetStats is durable: after kill -9 and a restart the old counters stay gone;
- a snapshot of another registration or group: the instance starts fresh, counted as
  ``mismatch`` and logged at ERROR (as the README says).
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import GIB, LiveServer, scrape
from grpc_health.v1 import health_pb2
from oracle import tree_trace
from serve_process import ServeProcess

from litehit_service import messages as pb2
from litehit_service import wire
from litehit_service.client import OptimizerClient
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.registry import Registry

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def group(blocks: tuple[int, ...] = (1, 3, 9), **kw: object) -> InstanceGroup:
    """Group ``g``: slots of ``blocks`` blocks of 1024 bytes, theoretical maximum on."""
    return InstanceGroup(
        "g", tuple(b * 1024 / GIB for b in blocks), enable_theoretical_max_cache=True, **kw
    )


def reg(instance_id: str = "i", block_size: int = 4) -> InstanceRegistration:
    return InstanceRegistration(
        instance_id,
        "g",
        block_size,
        (LocationSpec("kv", 1024),),
        (LocationSpecGroup("full", ("kv",)),),
    )


def query(keys: list[int], instance_id: str = "i") -> pb2.TraceQueryRequest:
    return pb2.TraceQueryRequest(
        instance_id=instance_id, block_keys=keys, input_token_len=4 * len(keys)
    )


def wait_for(predicate, what: str, timeout: float = 60.0) -> None:
    """Poll ``predicate`` until it holds (a bound on waiting, not an assertion on time)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout} s"
        time.sleep(0.01)


def stopped(server: ServeProcess) -> int:
    """SIGTERM ``server`` and return its exit code (the drain and final snapshots ran)."""
    code = server.terminate()
    assert code == 0, server.stderr()
    return code


# ------------------------------------------------------------------ (a) packed curve


def test_a_live_curve_fed_only_by_the_packed_stream_survives_a_graceful_restart(
    tmp_path: Path, serve
) -> None:
    """Every query arrives through TraceQueryPackedStream (the compact engine's batch
    path). Before the restart the curve equals a twin fed the same queries one by one; after
    a SIGTERM and a restart on the same data dir, GetHitRateCurve answers the same corners."""
    data = str(tmp_path / "d")
    trace = tree_trace(random.Random(20), 300, max_new=5, min_new=1)
    twin = OnlineOptimizerManager()
    twin.create_group(group())
    twin.register_instance(reg())
    for keys in trace:
        twin.trace_query("i", keys, 4 * len(keys))
    expected = twin.hit_rate_curve("i", target_fractions=[0.5, 0.9], max_points=100_000)
    assert expected.corners > 20 and expected.theoretical_hit_tokens > 0

    def curve(server: ServeProcess):
        with OptimizerClient(server.grpc) as c:
            answer = c.get_hit_rate_curve("i", target_fractions=[0.5, 0.9], max_points=100_000)
        return wire.hit_rate_curve_from_pb(answer)

    server = serve("--data-dir", data, "--snapshot-interval-seconds", "0")
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group())
        c.register_instance(reg())
        batches = []
        for start in range(0, len(trace), 37):
            chunk = trace[start : start + 37]
            keys = [k for q in chunk for k in q]
            batches.append(
                wire.packed_query_to_pb(
                    "i", keys, [len(q) for q in chunk], [4 * len(q) for q in chunk]
                )
            )
        assert sum(r.queries for r in c.stream_packed(batches)) == len(trace)
    before = curve(server)
    assert before == expected
    stopped(server)
    again = serve("--data-dir", data, "--snapshot-interval-seconds", "0")
    after = curve(again)
    assert after == expected
    assert (after.corners, after.total_queries) == (expected.corners, 300)
    stopped(again)


# ------------------------------------------------------------------ (c) unary in a drain


def test_c_unary_calls_during_a_drain_with_an_open_stream_are_unavailable() -> None:
    """A stream's batch waits for its instance (the test holds the instance's gate, as a
    snapshot would), so the drain cannot finish; meanwhile health is NOT_SERVING and every
    new unary call (read, query, admin) is answered UNAVAILABLE "server shutting down".
    Released, the batch is applied and answered, and the stream ends UNAVAILABLE."""
    live = LiveServer()
    try:
        with live.client() as c:
            c.create_instance_group(group())
            c.register_instance(reg())
            c.trace_query("i", [1, 2], 8)
        transport = live.server.transport
        held, release = threading.Event(), threading.Event()

        def hold_the_gate() -> None:
            def work() -> None:
                held.set()
                release.wait(60)

            live.server.call(
                lambda: transport.gates.run({"i"}, lambda: transport.in_executor(work))
            )

        holder = threading.Thread(target=hold_the_gate)
        holder.start()
        assert held.wait(30)
        answers: list[pb2.TraceQueryBatchResponse] = []
        ended: list[grpc.RpcError] = []

        def stream() -> None:
            channel = grpc.insecure_channel(live.target)
            call = pb2.OptimizerServiceStub(channel).TraceQueryStream(
                iter([pb2.TraceQueryBatchRequest(queries=[query([1, 2, 3])])]), timeout=60
            )
            try:
                answers.extend(call)
            except grpc.RpcError as exc:
                ended.append(exc)
            channel.close()

        streamer = threading.Thread(target=stream)
        streamer.start()
        wait_for(
            lambda: [r.state for r in list(transport.streams.values())] == ["applying"],
            "the stream's batch waiting for its instance",
        )
        reports = []
        drainer = threading.Thread(target=lambda: reports.append(live.server.drain(60)))
        drainer.start()
        wait_for(lambda: transport.draining, "the drain")
        try:
            with live.client(retries=0, timeout=10) as late:
                assert late.health() == NOT_SERVING
                calls = {
                    "ListInstances": late.list_instances,
                    "TraceQuery": lambda: late.trace_query("i", [1, 2], 8),
                    "ResetStats": lambda: late.reset_stats("i"),
                }
                for name, call in calls.items():
                    with pytest.raises(grpc.RpcError) as info:
                        call()
                    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, name
                    assert info.value.details() == "server shutting down", name
            assert len(transport.streams) == 1  # the drain is still waiting for the stream
        finally:
            release.set()
            holder.join(30)
        streamer.join(30)
        drainer.join(30)
        (answer,) = answers
        assert [r.capacity_results[0].cache_hit_count for r in answer.results] == [1]
        (exc,) = ended
        assert (exc.code(), exc.details()) == (grpc.StatusCode.UNAVAILABLE, "server shutting down")
        (report,) = reports
        assert report.clean
        assert live.manager.list_instances()[0].total_queries == 2  # the batch was applied
    finally:
        live.stop()


# ------------------------------------------------------------------ (d) SIGTERM


def test_d_sigterm_enters_the_graceful_shutdown_health_not_serving_before_exit(
    tmp_path: Path, serve
) -> None:
    """A client sends big batches and never reads: the server's answers block in flow
    control and the stream holds the drain open (grace 60 s). After SIGTERM the real health
    check of the still-running process says NOT_SERVING; cancelling the stream lets it exit."""
    server = serve("--data-dir", str(tmp_path / "d"), "--grace-seconds", "60")
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group(blocks=tuple(range(1, 33))))
        c.register_instance(reg())
        assert c.health() == SERVING
    channel = grpc.insecure_channel(server.grpc)
    big = pb2.TraceQueryBatchRequest(queries=[query([k, k + 1]) for k in range(2000)])
    sent = [0]

    def forever() -> Iterator[pb2.TraceQueryBatchRequest]:
        while True:
            sent[0] += 1
            yield big

    call = pb2.OptimizerServiceStub(channel).TraceQueryStream(forever())  # never read
    try:
        # stuck: the server stopped reading (its answers cannot be written), so the
        # client's sending stalls, for good
        def stalled() -> bool:
            before = sent[0]
            time.sleep(1.5)
            return before == sent[0] > 1

        wait_for(stalled, "the stream stuck in flow control")
        server.proc.send_signal(signal.SIGTERM)
        seen = []
        with OptimizerClient(server.grpc, retries=0, timeout=5) as probe:

            def not_serving() -> bool:
                assert server.proc.poll() is None, f"exited before NOT_SERVING: {server.stderr()}"
                seen.append(probe.health())
                return seen[-1] == NOT_SERVING

            wait_for(not_serving, "health NOT_SERVING after SIGTERM", timeout=30)
        assert server.proc.poll() is None  # still draining: the stream holds it open
    finally:
        call.cancel()
        channel.close()
    code = server.proc.wait(timeout=60)
    assert code in (0, 1), server.stderr()  # 1: the stuck stream was abandoned
    assert "stopping: draining for up to 60 s" in server.stderr()


# ------------------------------------------------------------------ (e) ResetStats


def test_e_reset_stats_is_durable_across_kill_9(tmp_path: Path, serve) -> None:
    """A snapshot with counters > 0 on disk (written at a graceful stop and restored), then
    ResetStats, then kill -9 (no snapshot written after the reset: interval 0): the restart
    shows zeroed counters, not the snapshot's."""
    data = str(tmp_path / "d")
    server = serve("--data-dir", data, "--snapshot-interval-seconds", "0")
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group())
        c.register_instance(reg())
        list(c.stream_trace_queries([query([1, 2]), query([1, 2]), query([1, 2, 3])]))
    stopped(server)
    server = serve("--data-dir", data, "--snapshot-interval-seconds", "0")
    with OptimizerClient(server.grpc) as c:
        (restored,) = c.list_instances().instances
        assert (restored.total_queries, restored.debug_info.unique_keys) == (3, 3)
        assert [s.total_hits for s in restored.capacity_summaries] == [2, 4, 4]
        assert scrape(server.metrics)[("litehit_snapshot_restored_instances", ())] == 1
        c.reset_stats("i")
        (reset,) = c.list_instances().instances
        assert (reset.total_queries, reset.debug_info.unique_keys) == (0, 0)
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(30)
    again = serve("--data-dir", data, "--snapshot-interval-seconds", "0")
    with OptimizerClient(again.grpc) as c:
        (summary,) = c.list_instances().instances
        assert (summary.total_queries, summary.total_input_tokens) == (0, 0)
        assert summary.debug_info.unique_keys == 0
        assert [s.total_hits for s in summary.capacity_summaries] == [0, 0, 0]
        assert summary.theoretical_summary.total_max_hits == 0
        # and the next query is a cold one: the engine forgot the keys too
        answer = c.trace_query("i", [1, 2], 8)
        assert [r.cache_hit_count for r in answer.capacity_results] == [0, 0, 0]
    stopped(again)


# ------------------------------------------------------------------ snapshot mismatch


@pytest.mark.parametrize("change", ["registration", "group"])
def test_a_snapshot_of_another_registration_starts_fresh_counted_and_logged_at_error(
    tmp_path: Path, serve, change: str
) -> None:
    """While the server is down, instance ``a`` is registered anew with another block size
    (or its group gets other capacities) in the registry. At the restart ``a``'s snapshot
    (valid, of the old registration) is not used: ``a`` starts fresh, ``b`` restores, the
    metrics count one ``mismatch`` and the log has one ERROR record naming ``a``."""
    data = tmp_path / "d"
    server = serve("--data-dir", str(data))
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group())
        for iid in ("a", "b"):
            c.register_instance(reg(iid))
            list(c.stream_trace_queries([query([1, 2], iid), query([1, 2], iid)]))
    stopped(server)
    registry = Registry(data / "litehit.sqlite3")
    try:
        if change == "registration":
            registry.save_instance(reg("a", block_size=8))
        else:
            registry.save_group(group(blocks=(1, 3, 10)))
    finally:
        registry.close()
    again = serve("--data-dir", str(data), "--log-format", "json")
    with OptimizerClient(again.grpc) as c:
        totals = {i.instance_id: i.total_queries for i in c.list_instances().instances}
        block_sizes = {i: c.get_instance(i).block_size for i in ("a", "b")}
    values = scrape(again.metrics)
    stopped(again)
    if change == "registration":
        assert (totals, block_sizes) == ({"a": 0, "b": 2}, {"a": 8, "b": 4})
        reason = "the registration changed since it was written"
        fresh = ["a"]
    else:  # both instances are of group g: both start fresh
        assert totals == {"a": 0, "b": 0}
        reason = "its instance group changed since it was written"
        fresh = ["a", "b"]
    assert values[("litehit_snapshot_failures_total", (("reason", "mismatch"),))] == len(fresh)
    assert values[("litehit_snapshot_failures_total", (("reason", "corrupt"),))] == 0
    assert values[("litehit_snapshot_restored_instances", ())] == 2 - len(fresh)
    records = [json.loads(line) for line in again.stderr().splitlines() if line.startswith("{")]
    mismatches = [r for r in records if "does not match its registration" in r["message"]]
    assert [(r["level"], r["instance_id"]) for r in mismatches] == [("ERROR", i) for i in fresh]
    assert mismatches[0]["message"] == (
        f"snapshot of instance {fresh[0]!r} does not match its registration, starting it "
        f"fresh: {reason}"
    )
    assert all("exception" not in r for r in records)
