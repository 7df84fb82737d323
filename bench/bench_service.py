"""Service benchmark: stream a real trace through a real ``litehit serve`` over gRPC.

Usage: python bench/bench_service.py [TRACE.jsonl] [--batch 256] [--unary-rate 500]

Starts ``litehit serve`` as a separate process on 127.0.0.1 (ephemeral ports), registers
one instance (block_size 512, 8 capacity slots + theoretical), and from this process:
(1) streams every request of the trace through TraceQueryStream in batches (once to warm
the server up, then measured after ResetStats) and reports queries/s and the server's
CPU time per query (host CPU steal excluded); (2) replays the same trace through an
in-process OnlineOptimizerManager, and through the servicer without sockets (CPU time),
for the ratios; (3) sends unary TraceQuery calls
at a fixed rate and reports p50/p99 latency.
The default trace is ../shared/traces/mooncake/conversation_trace.jsonl (Mooncake
FAST'25, kvcache-ai/Mooncake, FAST25-release/traces/).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, load_mooncake  # noqa: E402

from litehit_core import HitCurveAccumulator, InstanceCurve  # noqa: E402
from litehit_service import messages as pb2  # noqa: E402
from litehit_service.client import OptimizerClient  # noqa: E402
from litehit_service.manager import InstanceState, OnlineOptimizerManager  # noqa: E402
from litehit_service.metrics import ServiceMetrics  # noqa: E402
from litehit_service.model import (  # noqa: E402
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.servicer import OptimizerServicer  # noqa: E402

T = TypeVar("T")
CAPACITY_GB = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
GROUP = InstanceGroup("bench", CAPACITY_GB, enable_theoretical_max_cache=True)
REG = InstanceRegistration(
    "bench-0",
    "bench",
    block_size=512,
    location_spec_infos=(LocationSpec("hbm", 64 * 1024**2 // 512 * 512),),
    location_spec_groups=(LocationSpecGroup("full", ("hbm",)),),
    full_location_spec_group_name="full",
)


def start_server(data_dir: str, extra: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    """``litehit serve`` on ephemeral ports (plus ``extra`` options); (process, address)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "litehit_service", "serve", "--listen", "127.0.0.1:0",
         "--metrics-listen", "127.0.0.1:0", "--data-dir", data_dir, *(extra or [])],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline()
    if not line.startswith("litehit serving "):
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    fields = dict(part.split("=", 1) for part in line.split()[2:])
    return proc, fields["grpc"]


def best_of(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The fastest of ``repeat`` runs in process CPU seconds (host CPU steal excluded)
    and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.process_time()
        result = fn()
        best = min(best, time.process_time() - t0)
    return best, result  # type: ignore[return-value]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--unary-rate", type=float, default=500.0, help="unary calls per second")
    ap.add_argument("--unary-count", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5, help="in-process runs (best is kept)")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (see bench/README.md)", file=sys.stderr)
        return 2
    reqs = load_mooncake(args.trace)
    n = len(reqs)
    queries = [pb2.TraceQueryRequest(instance_id="bench-0", block_keys=k, input_token_len=t)
               for k, t in reqs]  # fmt: skip

    wire_batches = [
        pb2.TraceQueryBatchRequest(queries=queries[i : i + args.batch]).SerializeToString()
        for i in range(0, n, args.batch)
    ]

    def fresh_manager() -> OnlineOptimizerManager:
        manager = OnlineOptimizerManager()
        manager.create_group(GROUP)
        manager.register_instance(REG)
        return manager

    def run_manager() -> list[int]:
        """The same code without gRPC: every query through the manager."""
        manager = fresh_manager()
        for keys, tokens in reqs:
            manager.trace_query("bench-0", keys, tokens)
        return [s.total_hits for s in manager.list_instances()[0].capacity_summaries]

    def run_servicer() -> None:
        """Request parsing + manager + response building + serialising, no sockets."""
        manager = fresh_manager()
        servicer = OptimizerServicer(manager, ServiceMetrics(manager))
        parsed = map(pb2.TraceQueryBatchRequest.FromString, wire_batches)
        for response in servicer.TraceQueryStream(parsed, None):
            response.SerializeToString()

    manager_s, expect = best_of(run_manager, args.repeat)
    servicer_s, _ = best_of(run_servicer, args.repeat)
    in_process, in_servicer = n / manager_s, n / servicer_s
    curve = live_curve_cost(run_manager, fresh_manager, reqs, args.repeat)

    with tempfile.TemporaryDirectory() as data_dir:
        proc, addr = start_server(data_dir)
        try:
            with OptimizerClient(addr) as client:
                client.wait_until_ready(10)
                client.create_instance_group(GROUP)
                client.register_instance(REG)
                # warm the long-running server up once (as in steady state), then measure
                for _ in client.stream_trace_queries(queries, args.batch):
                    pass
                client.reset_stats("bench-0")
                cpu0 = cpu_seconds(proc.pid)
                t0 = time.perf_counter()
                got = sum(1 for _ in client.stream_trace_queries(queries, args.batch))
                streamed_s = time.perf_counter() - t0
                server_cpu_s = cpu_seconds(proc.pid) - cpu0
                assert got == n, (got, n)
                summary = client.list_instances().instances[0]
                totals = [c.total_hits for c in summary.capacity_summaries]
                assert totals == expect, (totals, expect)

                client.reset_stats("bench-0")
                lat = []
                period = 1.0 / args.unary_rate
                next_at = time.perf_counter()
                for i in range(min(args.unary_count, n)):
                    now = time.perf_counter()
                    if now < next_at:
                        time.sleep(next_at - now)
                    next_at += period
                    t1 = time.perf_counter()
                    client.trace_query("bench-0", reqs[i][0], reqs[i][1])
                    lat.append(time.perf_counter() - t1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    streamed = n / streamed_s
    lat.sort()
    p50 = statistics.median(lat) * 1e3
    p99 = lat[int(0.99 * (len(lat) - 1))] * 1e3
    print(f"trace: {args.trace.name}: {n} requests; 8 slots + theoretical, block 512")
    print(
        f"in-process manager:         {in_process:,.0f} queries/s (CPU time, best of {args.repeat})"
    )
    print(f"in-process servicer:        {in_servicer:,.0f} queries/s (parse, manager, response)")
    print(f"server CPU during the stream: {server_cpu_s * 1e6 / n:.1f} us/query -> "
          f"{n / server_cpu_s:,.0f} queries/s per server core, CPU steal excluded")  # fmt: skip
    print(f"TraceQueryStream (batch {args.batch}): {streamed:,.0f} queries/s "
          f"({streamed / in_process:.0%} of in-process); totals equal in-process: yes")  # fmt: skip
    print(f"unary TraceQuery at {args.unary_rate:.0f}/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
          f"({len(lat)} calls)")  # fmt: skip
    print(curve)
    print(large_curve_memory())
    return 0


def large_curve_memory(segments: int = 3_000_000, depth: int = 8_388_608) -> str:
    """Bytes per corner of a curve with millions of corners (random ramps at depths up to
    the default --max-tracked-blocks): the largest ratio seen while adding (the append
    buffer at its fullest included, over the positions merged so far) and after the last
    merge."""
    import random

    rng = random.Random(1)
    acc = HitCurveAccumulator()
    worst = 0.0
    t0 = time.process_time()
    for i in range(segments):
        start = rng.randrange(1, depth)
        acc.add_curve(((start, rng.randrange(1, 64)),))
        if i % 50_000 == 49_999:  # merged positions so far (no merge forced): an upper bound
            worst = max(worst, acc.memory_bytes() / max(len(acc._pos), 1))
    elapsed = time.process_time() - t0
    corners = acc.corners()
    return (
        f"large curve: {corners:,} corners after {segments:,} random ramps "
        f"({elapsed * 1e6 / segments:.2f} us per add): "
        f"{acc.memory_bytes() / corners:.1f} B/corner merged, at most {worst:.1f} B/corner "
        "with the buffer"
    )


def live_curve_cost(
    run_manager: Callable[[], list[int]],
    fresh_manager: Callable[[], OnlineOptimizerManager],
    reqs: list[tuple[list[int], int]],
    repeat: int,
) -> str:
    """What keeping the live curve costs: the in-process manager with the curve and with
    each instance's curve add made a no-op (runs interleaved, best of ``repeat`` each), and the
    curve's bytes per corner after the trace (merged arrays; the append buffer adds at most
    1/8 of the arrays' size between merges)."""
    with_curve, without = [], []
    real = InstanceState.set_curve

    def no_curve(state: InstanceState, curve: InstanceCurve) -> None:
        real(state, curve)
        state.add_to_curve = lambda hit_curve: None

    for _ in range(repeat):
        with_curve.append(best_of(run_manager, 1)[0])
        InstanceState.set_curve = no_curve  # type: ignore[method-assign]
        try:
            without.append(best_of(run_manager, 1)[0])
        finally:
            InstanceState.set_curve = real  # type: ignore[method-assign]
    n = len(reqs)
    on, off = min(with_curve), min(without)
    manager = fresh_manager()
    for keys, tokens in reqs:
        manager.trace_query("bench-0", keys, tokens)
    ((_, view),) = manager.curve_views()
    corners = view.corners()
    return (
        f"live curve: {on * 1e6 / n:.2f} us/query with it, {off * 1e6 / n:.2f} without "
        f"(+{(on - off) * 1e6 / n:.2f} us = {on / off - 1:+.1%} CPU, best of {repeat} each); "
        f"{corners:,} corners in {view.memory_bytes():,} bytes = "
        f"{view.memory_bytes() / max(corners, 1):.1f} B/corner"
    )


if __name__ == "__main__":
    sys.exit(main())
