"""``litehit serve`` operated for months: limits, streams, the drain, durable state.

Every test runs the real server: in process (``create_server`` on 127.0.0.1:0) where the
test needs its internals, or as a ``litehit serve`` subprocess where it needs signals,
restarts and the process's own memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import LiveServer, scrape
from grpc_health.v1 import health_pb2
from oracle import NaiveLRU, tree_trace
from serve_process import ServeProcess

from litehit_service import messages as pb2
from litehit_service.client import OptimizerClient
from litehit_service.errors import InvalidArgument
from litehit_service.manager import ManagerLimits, OnlineOptimizerManager
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

GIB = 1024**3
S = 1_000_000_000


def group(name: str = "g", blocks: tuple[int, ...] = (1, 2, 4), **kw: object) -> InstanceGroup:
    """A group whose slots hold ``blocks`` blocks of 1024 bytes."""
    return InstanceGroup(
        name, tuple(b * 1024 / GIB for b in blocks), enable_theoretical_max_cache=True, **kw
    )


def reg(instance_id: str = "i", grp: str = "g", block_size: int = 4) -> InstanceRegistration:
    return InstanceRegistration(
        instance_id,
        grp,
        block_size,
        (LocationSpec("kv", 1024),),
        (LocationSpecGroup("full", ("kv",)),),
    )


def query(keys: list[int], instance_id: str = "i", **kw: object) -> pb2.TraceQueryRequest:
    return pb2.TraceQueryRequest(
        instance_id=instance_id, block_keys=keys, input_token_len=4 * len(keys), **kw
    )


def Running(limits: ManagerLimits | None = None, **options: object) -> LiveServer:  # noqa: N802
    """A started in-process server (port 0) around a fresh manager with ``limits``."""
    return LiveServer(OnlineOptimizerManager(limits=limits), **options)


@pytest.fixture
def running() -> Iterator[LiveServer]:
    r = Running()
    yield r
    r.stop()


# ------------------------------------------------------------------ 1. many clients


class IdleStreams:
    """``n`` TraceQueryStream calls that connect and send nothing, held by an asyncio client
    on its own thread (no thread per stream on this side either)."""

    def __init__(self, target: str, n: int) -> None:
        self.codes: list[grpc.StatusCode] = []
        self.details: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._calls = asyncio.run_coroutine_threadsafe(self._open(target, n), self._loop).result(60)

    async def _open(self, target: str, n: int) -> list:
        self._channels = [grpc.aio.insecure_channel(target) for _ in range(max(1, n // 100))]
        calls = []
        for i in range(n):
            stub = pb2.OptimizerServiceStub(self._channels[i % len(self._channels)])
            call = stub.TraceQueryStream()
            calls.append(call)
            asyncio.ensure_future(self._watch(call))
        await asyncio.sleep(0)
        return calls

    async def _watch(self, call: object) -> None:
        code = await call.code()  # type: ignore[attr-defined]
        self.codes.append(code)
        self.details.append(await call.details())  # type: ignore[attr-defined]

    def close(self) -> None:
        async def shut() -> None:
            for call in self._calls:
                call.cancel()
            for channel in self._channels:
                await channel.close()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_idle_streams_do_not_starve_health_or_unary_calls() -> None:
    r = Running(max_streams=1000)
    try:
        with r.client() as c:
            c.create_instance_group(group())
            c.register_instance(reg())
        idle = IdleStreams(r.target, 1000)
        try:
            _wait(lambda: len(r.server.transport.streams) == 1000)
            # answered at all, within the call's deadline (a thread-per-stream server with
            # its threads held by the idle streams would answer neither)
            with r.client(retries=0, timeout=5.0) as other:
                assert other.health() == health_pb2.HealthCheckResponse.SERVING
                answer = other.trace_query("i", [1, 2], 8)
                assert answer.total_blocks == 2
                # the 1001st stream is refused, naming the limit
                with pytest.raises(grpc.RpcError) as info:
                    list(other.stream_trace_queries([query([1])]))
                assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "the limit is 1000 (--max-streams)" in info.value.details()
            values = r.scrape()
            assert values[("litehit_active_streams", ())] == 1000
            assert values[("litehit_streams_rejected_total", ())] == 1
        finally:
            idle.close()
        _wait(lambda: not r.server.transport.streams)
    finally:
        r.server.stop()


def test_a_silent_stream_is_closed_after_the_idle_time() -> None:
    r = Running(stream_idle_seconds=0.4)
    try:
        with r.client() as c:
            c.create_instance_group(group())
            c.register_instance(reg())
        channel = grpc.insecure_channel(r.target)
        stub = pb2.OptimizerServiceStub(channel)
        sent = threading.Event()

        def one_batch_then_silence() -> Iterator[pb2.TraceQueryBatchRequest]:
            yield pb2.TraceQueryBatchRequest(queries=[query([1, 2])])
            sent.set()
            time.sleep(3)  # longer than the idle time

        call = stub.TraceQueryStream(one_batch_then_silence(), timeout=10)
        answers = []
        # not closed by the idle rule, the stream would end OK after the silence
        with pytest.raises(grpc.RpcError) as info:
            for response in call:
                answers.append(response)
        assert len(answers) == 1 and answers[0].results[0].total_blocks == 2
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "sent nothing for 0.4 s (--stream-idle-seconds)" in info.value.details()
        assert r.scrape()[("litehit_streams_idle_closed_total", ())] == 1
        channel.close()
    finally:
        r.server.stop()


def test_an_undecodable_message_ends_that_stream_only(running: Running, caplog) -> None:
    with running.client() as c:
        c.create_instance_group(group())
        c.register_instance(reg())
    channel = grpc.insecure_channel(running.target)
    path = f"/{pb2.SERVICE_NAME}/TraceQueryStream"
    raw = channel.stream_stream(path)  # bytes in, bytes out
    good = pb2.TraceQueryBatchRequest(queries=[query([1, 2])]).SerializeToString()
    with caplog.at_level("INFO"):
        with pytest.raises(grpc.RpcError) as info:
            list(raw(iter([good, b"\xff\xff\xff garbage"]), timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "message 2 of the stream could not be decoded as TraceQueryBatchRequest" in (
        info.value.details()
    )
    assert "Traceback" not in caplog.text
    assert any("could not be decoded" in r.getMessage() for r in caplog.records)
    # the server and other streams carry on
    with running.client() as c:
        (answer,) = c.stream_trace_queries([query([1, 2])])
        assert [x.cache_hit_count for x in answer.capacity_results] == [1, 2, 2]
    values = running.scrape()
    assert values[("litehit_undecodable_messages_total", (("method", "TraceQueryStream"),))] == 1
    channel.close()


# ------------------------------------------------------------------ 2. bounded memory


@pytest.mark.parametrize("ttl", [0, 5])
def test_tracking_limit_keeps_slots_exact_and_theoretical_an_lru_of_the_limit(ttl: int) -> None:
    limit = 6
    r = Running(limits=ManagerLimits(max_tracked_blocks=limit))
    try:
        trace = tree_trace(random.Random(7), 300, max_new=5, min_new=1)
        slots = (1, 2, 4, 6)
        with r.client() as c:
            c.create_instance_group(group(blocks=slots, ttl_seconds=ttl))
            c.register_instance(reg())
            oracles = [NaiveLRU(b, ttl * S) for b in slots]
            theoretical = NaiveLRU(limit, ttl * S)
            now = time.time_ns() - 3600 * S
            requests = []
            for i, keys in enumerate(trace):
                requests.append(query(keys, timestamp_ns=now + i * S // 3))
            answers = list(c.stream_trace_queries(requests, batch_size=17))
            for i, (keys, answer) in enumerate(zip(trace, answers, strict=True)):
                ts = now + i * S // 3
                expect = [o.request(keys, ts) for o in oracles]
                assert [x.cache_hit_count for x in answer.capacity_results] == expect, i
                assert answer.theoretical_result.max_hit_count == theoretical.request(keys, ts)
            (summary,) = c.list_instances().instances
        d = summary.debug_info
        assert d.max_tracked_blocks == limit and d.unique_keys <= limit
        assert d.dropped_blocks == theoretical.evicted > 0
        assert d.eviction_count == d.dropped_blocks + d.ttl_eviction_count
        assert d.kv_cache_usage_bytes == d.unique_keys * 1024
    finally:
        r.server.stop()


def test_registration_beyond_the_tracking_limit_is_refused() -> None:
    r = Running(limits=ManagerLimits(max_tracked_blocks=3, max_instances=1))
    try:
        with r.client() as c:
            c.create_instance_group(group(blocks=(2, 4)))
            with pytest.raises(InvalidArgument, match="holds 4 blocks .* max_tracked_blocks 3"):
                c.register_instance(reg())
            c.create_instance_group(group("small", blocks=(1, 3)))
            c.register_instance(reg(grp="small"))
            from litehit_service.errors import ReachMaxEntityCapacity

            with pytest.raises(ReachMaxEntityCapacity, match="max_instances is 1"):
                c.register_instance(reg("other", grp="small"))
    finally:
        r.server.stop()


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_fresh_key_flood_reaches_a_memory_plateau(tmp_path: Path) -> None:
    """A subprocess server with a tracking limit, flooded with 4M fresh keys: its RSS stops
    growing once the limit is reached, and litehit_memory_bytes is within 15 % of the RSS
    the instance accounts for (RSS growth after a warm-up of the transport). The limit is
    large enough (600k blocks, ~90 MiB) that the interpreter's own fixed costs do not
    dominate; bench/README.md has the table down to small limits."""
    limit = 600_000
    server = ServeProcess(
        "--data-dir", str(tmp_path / "d"), "--max-tracked-blocks", str(limit),
        "--snapshot-interval-seconds", "0",
    )  # fmt: skip
    try:
        with OptimizerClient(server.grpc, timeout=30) as c:
            c.create_instance_group(group(blocks=(1024,)))
            c.register_instance(reg())
            # warm up the transport (threads, buffers) on keys that do not grow the engine
            for _ in c.stream_trace_queries([query(list(range(256)))] * 2000, batch_size=64):
                pass
            base = _rss_bytes(server.proc.pid)
            rss = []
            key = first = 10**9

            def flood(n_keys: int) -> None:
                nonlocal key
                requests = []
                for _ in range(n_keys // 256):
                    requests.append(query(list(range(key, key + 256))))
                    key += 256
                for _ in c.stream_trace_queries(requests, batch_size=64):
                    pass

            for _ in range(10):
                flood(400_000)
                rss.append(_rss_bytes(server.proc.pid))
            (summary,) = c.list_instances().instances
        assert summary.debug_info.unique_keys == limit
        assert summary.debug_info.dropped_blocks == 256 + key - first - limit
        # plateau: once the limit is reached (after 1.2M keys), 2.8M more fresh keys move
        # RSS only within the dict's sawtooth (its entry table fills with the entries of
        # dropped keys until the next resize rebuilds it): < 25 % of what the instance took
        assert max(rss[3:]) - rss[3] < 0.25 * (rss[3] - base), rss
        memory = summary.debug_info.memory_usage_bytes
        grown = rss[-1] - base
        assert abs(memory - grown) < 0.15 * grown, (memory, grown)
    finally:
        server.terminate()


# ------------------------------------------------------------------ 3. the clock


def test_a_far_future_timestamp_is_refused_and_changes_nothing(running: Running) -> None:
    with running.client() as c:
        c.create_instance_group(group(ttl_seconds=10))
        c.register_instance(reg())
        now = time.time_ns()
        c.trace_query("i", [1, 2], 8, timestamp_ns=now)
        with pytest.raises(InvalidArgument) as info:
            c.trace_query("i", [1, 2], 8, timestamp_ns=2**63 - 1)
        assert "ahead of the server clock" in info.value.message
        assert "300 s are allowed" in info.value.message
        (summary,) = c.list_instances().instances
        assert summary.total_queries == 1
        # the instance clock was not poisoned: TTL still expires blocks 11 s later
        late = c.trace_query("i", [1, 2], 8, timestamp_ns=now + 11 * S)
        assert late.theoretical_result.max_hit_count == 0


# ------------------------------------------------------------------ 5. the drain


def _stream_until_stopped(
    target: str, answered: list[int], stopped: list[BaseException], instance_id: str = "i"
) -> None:
    """Stream batches of 32 queries until the server ends the stream; counts the answers."""
    rng = random.Random(3)

    def requests() -> Iterator[pb2.TraceQueryRequest]:
        while True:
            base = rng.randrange(1, 10**9)
            yield query([base, base + 1, base + 2], instance_id)

    try:
        with OptimizerClient(target, timeout=30) as c:
            for _ in c.stream_trace_queries(requests(), batch_size=32):
                answered[0] += 1
    except grpc.RpcError as exc:
        stopped.append(exc)


def test_sigterm_drains_a_saturating_stream_and_keeps_exactly_what_was_answered(
    tmp_path: Path,
) -> None:
    data = str(tmp_path / "d")
    server = ServeProcess("--data-dir", data, "--grace-seconds", "5")
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group())
        c.register_instance(reg())
    answered = [0]
    stopped: list[BaseException] = []
    streamer = threading.Thread(target=_stream_until_stopped, args=(server.grpc, answered, stopped))
    streamer.start()
    _wait(lambda: answered[0] > 3000)
    started = time.monotonic()
    code = server.terminate()
    took = time.monotonic() - started
    streamer.join(30)
    assert code == 0, server.stderr()
    assert took < 5 + 5
    (exc,) = stopped
    assert exc.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert "server shutting down" in exc.details()  # type: ignore[attr-defined]
    again = ServeProcess("--data-dir", data)
    try:
        with OptimizerClient(again.grpc) as c:
            (summary,) = c.list_instances().instances
            assert summary.total_queries == answered[0]
    except BaseException:
        again.kill()
        raise
    finally:
        if again.proc.poll() is None:
            assert again.terminate() == 0


def test_new_calls_during_the_drain_are_unavailable_and_health_not_serving() -> None:
    r = Running()
    try:
        with r.client() as c:
            c.create_instance_group(group())
            c.register_instance(reg())
        idle = IdleStreams(r.target, 3)
        _wait(lambda: len(r.server.transport.streams) == 3)
        report = r.server.drain(2.0)
        assert report.clean  # idle streams end at once on the drain
        _wait(lambda: len(idle.codes) == 3)
        assert idle.codes == [grpc.StatusCode.UNAVAILABLE] * 3
        assert idle.details == ["server shutting down"] * 3
        idle.close()
        with OptimizerClient(r.target, retries=0, timeout=2) as late:
            with pytest.raises(grpc.RpcError) as info:
                late.list_instances()
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        r.server.stop()


def test_a_stream_stuck_in_the_transport_cannot_hold_the_exit(tmp_path: Path) -> None:
    """A client that sends big batches and never reads: the server's answers block in flow
    control. SIGTERM still ends the process within grace + 5 s, exit 1, naming what it
    abandoned."""
    server = ServeProcess("--data-dir", str(tmp_path / "d"), "--grace-seconds", "1")
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group(blocks=tuple(range(1, 33))))
        c.register_instance(reg())
    channel = grpc.insecure_channel(server.grpc)
    stub = pb2.OptimizerServiceStub(channel)
    big = pb2.TraceQueryBatchRequest(queries=[query([k, k + 1]) for k in range(2000)])

    def forever() -> Iterator[pb2.TraceQueryBatchRequest]:
        while True:
            yield big

    call = stub.TraceQueryStream(forever())  # never read: answers pile up in the server
    time.sleep(2.0)
    started = time.monotonic()
    code = server.terminate()
    took = time.monotonic() - started
    call.cancel()
    channel.close()
    assert code == 1, server.stderr()
    assert took < 1 + 5 + 1
    assert "abandoned" in server.stderr()


# ------------------------------------------------------------------ 6. restarts


def _twin_trace(n: int, ttl: int) -> list[pb2.TraceQueryRequest]:
    base = time.time_ns() - 3600 * S
    return [
        query(keys, timestamp_ns=base + i * (S // 2) if ttl else 0)
        for i, keys in enumerate(tree_trace(random.Random(11), n, max_new=5, min_new=1))
    ]


@pytest.mark.parametrize("ttl", [0, 7])
@pytest.mark.parametrize("model", ["full", "hybrid", "full-engine-switch"])
def test_restart_twins_give_equal_answers_and_lists(tmp_path: Path, ttl: int, model: str) -> None:
    """Two servers fed the same trace; one is stopped and restarted halfway (with
    ``full-engine-switch``: restarted on the python engine, loading the compact engine's
    snapshot)."""
    trace = _twin_trace(400, ttl)
    plain = ServeProcess("--data-dir", str(tmp_path / "plain"))
    twin = ServeProcess("--data-dir", str(tmp_path / "twin"))
    registration = _hybrid_reg() if model == "hybrid" else reg()
    restart = ["--engine", "python"] if model == "full-engine-switch" else []
    try:
        for s in (plain, twin):
            with OptimizerClient(s.grpc) as c:
                c.create_instance_group(group(ttl_seconds=ttl, blocks=(1, 3, 9)))
                c.register_instance(registration)
        with OptimizerClient(plain.grpc) as c:
            expected = [r.SerializeToString() for r in c.stream_trace_queries(trace)]
            expected_list = _comparable(c.list_instances())
        with OptimizerClient(twin.grpc) as c:
            first = [r.SerializeToString() for r in c.stream_trace_queries(trace[:200])]
        assert twin.terminate() == 0
        twin = ServeProcess("--data-dir", str(tmp_path / "twin"), *restart)
        with OptimizerClient(twin.grpc) as c:
            rest = [r.SerializeToString() for r in c.stream_trace_queries(trace[200:])]
            got_list = _comparable(c.list_instances())
        assert first + rest == expected
        assert got_list == expected_list
    finally:
        for s in (plain, twin):
            if s.proc.poll() is None:
                s.terminate()


def _hybrid_reg() -> InstanceRegistration:
    """Blocks of 1024 bytes with a 2048-byte state every 2 blocks (8 tokens)."""
    return InstanceRegistration(
        "i",
        "g",
        4,
        (LocationSpec("kv", 1024), LocationSpec("state", 2048)),
        (LocationSpecGroup("full", ("kv",)), LocationSpecGroup("linear", ("state",))),
        full_location_spec_group_name="full",
        linear_location_spec_group_name="linear",
        linear_step=8,
    )


def _comparable(response: pb2.OptimizerListInstancesResponse) -> list[bytes]:
    """ListInstances without the memory estimate (a new process lays memory out anew)."""
    out = []
    for inst in response.instances:
        copy = pb2.OptimizerInstanceSummary()
        copy.CopyFrom(inst)
        copy.debug_info.memory_usage_bytes = 0
        out.append(copy.SerializeToString())
    return out


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "other-instance"])
def test_an_unusable_snapshot_starts_only_that_instance_fresh(tmp_path: Path, damage: str) -> None:
    data = tmp_path / "d"
    server = ServeProcess("--data-dir", str(data))
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group())
        for iid in ("a", "b"):
            c.register_instance(reg(iid))
            list(c.stream_trace_queries([query([1, 2], iid), query([1, 2], iid)]))
    assert server.terminate() == 0
    from litehit_service.snapshots import SnapshotStore

    store = SnapshotStore(data / "state")
    path = store.path("a")
    blob = bytearray(path.read_bytes())
    if damage == "flip":
        blob[len(blob) // 2] ^= 0x40
        path.write_bytes(bytes(blob))
    elif damage == "truncate":
        path.write_bytes(bytes(blob[: len(blob) // 3]))
    elif damage == "foreign":
        path.write_bytes(b"PK\x03\x04 this is a zip, not a snapshot" * 10)
    else:
        path.write_bytes(store.path("b").read_bytes())  # b's valid snapshot under a's name
    again = ServeProcess("--data-dir", str(data))
    try:
        with OptimizerClient(again.grpc) as c:
            totals = {i.instance_id: i.total_queries for i in c.list_instances().instances}
        assert totals == {"a": 0, "b": 2}
        values = scrape(again.metrics)
        assert values[("litehit_snapshot_failures_total", (("reason", "corrupt"),))] == 1
        assert values[("litehit_snapshot_restored_instances", ())] == 1
    finally:
        assert again.terminate() == 0
    err = again.stderr()
    assert "ERROR" in err and "snapshot of instance 'a' is unusable" in err
    assert "Traceback" not in err


def test_a_crash_brings_back_the_last_periodic_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "d"
    server = ServeProcess("--data-dir", str(data), "--snapshot-interval-seconds", "0.3")
    try:
        with OptimizerClient(server.grpc) as c:
            c.create_instance_group(group())
            c.register_instance(reg())
            list(c.stream_trace_queries([query([k, k + 1]) for k in range(50)]))
        written = scrape(server.metrics)[("litehit_snapshots_written_total", ())]
        _wait(lambda: scrape(server.metrics)[("litehit_snapshots_written_total", ())] > written)
    finally:
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(30)
    again = ServeProcess("--data-dir", str(data))
    try:
        with OptimizerClient(again.grpc) as c:
            (summary,) = c.list_instances().instances
            assert summary.total_queries == 50
            assert summary.debug_info.unique_keys == 51
    finally:
        assert again.terminate() == 0


# ------------------------------------------------------------------ 7. registration


def test_identical_reregistration_keeps_state_and_a_changed_one_is_counted(
    running: Running,
) -> None:
    with running.client() as c:
        c.create_instance_group(group())
        first = c.register_instance(reg())
        list(c.stream_trace_queries([query([1, 2]), query([1, 2])]))
        again = c.register_instance(reg())
        assert again == first
        (summary,) = c.list_instances().instances
        assert summary.total_queries == 2
        changed = c.register_instance(reg(block_size=8))
        assert list(changed.estimated_capacity_blocks) == [1, 2, 4]
        (summary,) = c.list_instances().instances
        assert summary.total_queries == 0
    assert running.scrape()[("litehit_instance_replacements_total", ())] == 1


# ------------------------------------------------------------------ 8.-9. operators


def test_json_logs_name_every_rejected_request(tmp_path: Path) -> None:
    server = ServeProcess("--data-dir", str(tmp_path / "d"), "--log-format", "json")
    try:
        with OptimizerClient(server.grpc) as c:
            c.trace_query("ghost", [1], 4, trace_id="t-1", check=False)
    finally:
        assert server.terminate() == 0
    records = [json.loads(line) for line in server.stderr().splitlines() if line.startswith("{")]
    (rejected,) = [r for r in records if r.get("code") == "INSTANCE_NOT_EXIST"]
    assert rejected["level"] == "INFO" and rejected["trace_id"] == "t-1"
    assert rejected["instance_id"] == "ghost" and rejected["method"] == "TraceQuery"
    assert "instance_id 'ghost' is not registered" in rejected["message"]
    assert all("exception" not in r for r in records)


def test_tokens_from_files_and_one_server_per_data_dir(tmp_path: Path) -> None:
    token = tmp_path / "admin.token"
    token.write_text("from-a-file\n")
    data = str(tmp_path / "d")
    server = ServeProcess("--data-dir", data, "--admin-token-file", str(token))
    try:
        with OptimizerClient(server.grpc, retries=0) as anonymous:
            with pytest.raises(grpc.RpcError) as info:
                anonymous.create_instance_group(group())
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with OptimizerClient(server.grpc, admin_token="from-a-file") as admin:
            admin.create_instance_group(group())
        with pytest.raises(AssertionError, match="is in use by another litehit serve"):
            ServeProcess("--data-dir", data)
    finally:
        assert server.terminate() == 0


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    """With a stream stuck in the transport and a long grace, the first SIGTERM starts the
    drain; a second one ends the process at once (exit 1)."""
    server = ServeProcess("--data-dir", str(tmp_path / "d"), "--grace-seconds", "60")
    with OptimizerClient(server.grpc) as c:
        c.create_instance_group(group(blocks=tuple(range(1, 33))))
        c.register_instance(reg())
    channel = grpc.insecure_channel(server.grpc)
    big = pb2.TraceQueryBatchRequest(queries=[query([k, k + 1]) for k in range(2000)])
    call = pb2.OptimizerServiceStub(channel).TraceQueryStream(iter([big] * 10_000))
    time.sleep(2.0)  # answers pile up: the drain will wait for the grace period
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert server.proc.poll() is None  # still draining
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(timeout=10)
    call.cancel()
    channel.close()
    assert code == 1 and time.monotonic() - started < 3
    assert "second SIGTERM: exiting at once" in server.stderr()
