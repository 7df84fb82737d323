"""Online throughput: packed streams from a separate client process into a real server.

Usage: python bench/bench_online.py [TRACE.jsonl] [--copies 8] [--batch 1024]
                                    [--engine compact|python] [--repeat 3] [--streams 2,4]

Starts ``litehit serve`` (``--engine``, default compact) as its own process on 127.0.0.1,
registers an instance per stream (block_size 512, 8 capacity slots + theoretical) and, from this
process (the client), streams the trace through ``TraceQueryPackedStream`` in packed
batches of ``--batch`` queries: the Mooncake conversation ``--copies`` times, each copy with
fresh keys (so the tracked blocks grow as in a longer trace). The client sends
pre-serialised batches through a raw gRPC stream (bytes in, bytes out) so that it costs
little CPU beside the server. Reported (best of ``--repeat``, each on fresh instances):

- one stream: queries/s (wall) and the server's CPU per query (``/proc/PID/stat``, user +
  system, over the stream);
- ``--streams`` (default 2,4) streams on as many instances at once (a client thread
  each): queries/s of all together and the ratio to one stream;
- exactness: every answer of the first run equals the in-process manager's answer to the
  same query sent alone (``trace_query``).

Targets (issue 14): >= 100,000 queries/s, <= 10 us of server CPU per query; issue 25:
>= 250,000 queries/s, two streams >= 1.7x one, four streams no slower than two. The
default trace is ../shared/traces/mooncake/conversation_trace.jsonl.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, load_mooncake  # noqa: E402
from bench_service import GROUP, REG, cpu_seconds, start_server  # noqa: E402

from litehit_service import messages as pb2  # noqa: E402
from litehit_service import wire  # noqa: E402
from litehit_service.client import OptimizerClient  # noqa: E402
from litehit_service.manager import OnlineOptimizerManager  # noqa: E402
from litehit_service.model import InstanceRegistration  # noqa: E402

METHOD = f"/{pb2.SERVICE_NAME}/TraceQueryPackedStream"


def copied(reqs, copies: int) -> list[tuple[list[int], int]]:
    """``copies`` copies of the (keys, tokens) requests, copy c with keys + (c + 1) x 2**40
    (fresh keys of one width, as bench_scale.py writes them)."""
    return [
        ([x + ((c + 1) << 40) for x in keys], tokens)
        for c in range(copies)
        for keys, tokens in reqs
    ]


def packed_batches(reqs, copies: int, batch: int, instance_id: str) -> list[bytes]:
    """Serialised TraceQueryPackedRequest messages for ``copies`` copies of ``reqs``."""
    out = []
    flat = copied(reqs, copies)
    for s in range(0, len(flat), batch):
        chunk = flat[s : s + batch]
        msg = wire.packed_query_to_pb(
            instance_id,
            [x for k, _ in chunk for x in k],
            [len(k) for k, _ in chunk],
            [t for _, t in chunk],
        )
        out.append(msg.SerializeToString())
    return out


def stream(target: str, batches: list[bytes], out: list | None = None) -> float:
    """Send every batch over one packed stream; returns wall seconds until the last answer."""
    with grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)]) as ch:
        call = ch.stream_stream(METHOD)  # bytes in, bytes out: no client-side protobuf
        t0 = time.perf_counter()
        answers = 0
        for raw in call(iter(batches)):
            answers += 1
            if out is not None:
                out.append(raw)
        elapsed = time.perf_counter() - t0
    assert answers == len(batches)
    return elapsed


def fresh_instances(client: OptimizerClient, ids: list[str]) -> None:
    """Register ``ids`` (idempotent) and reset them: empty engines and counters."""
    for iid in ids:
        client.register_instance(_reg(iid))
        client.reset_stats(iid)


def _reg(iid: str) -> InstanceRegistration:
    return replace(REG, instance_id=iid)


def expected_answers(reqs, copies: int) -> np.ndarray:
    """Hit blocks per slot of every query, sent alone to an in-process manager."""
    manager = OnlineOptimizerManager()
    manager.create_group(GROUP)
    manager.register_instance(_reg("a"))
    rows = [
        manager.trace_query("a", keys, tokens).hit_blocks for keys, tokens in copied(reqs, copies)
    ]
    return np.array(rows, np.int64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--engine", choices=("compact", "python"), default="compact")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--streams", default="2,4", help="stream counts beside one stream")
    args = ap.parse_args()
    counts = [int(k) for k in args.streams.split(",")]
    reqs = load_mooncake(args.trace)
    n = len(reqs) * args.copies
    ids = [chr(ord("a") + i) for i in range(max(counts + [1]))]
    batches = {iid: packed_batches(reqs, args.copies, args.batch, iid) for iid in ids}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}; {n:,} queries a stream ({args.copies} copies of "
          f"{args.trace.name}), batches of {args.batch}, engine {args.engine}")  # fmt: skip
    with tempfile.TemporaryDirectory() as data_dir:
        proc, addr = start_server(data_dir, ["--engine", args.engine])
        try:
            with OptimizerClient(addr, timeout=30) as client:
                client.create_instance_group(GROUP)
                singles, cpus, client_cpu = [], [], []
                many: dict[int, list[tuple[float, float, float]]] = {k: [] for k in counts}
                first: list[bytes] = []
                for run in range(args.repeat):
                    fresh_instances(client, ids)
                    cpu0, own0 = cpu_seconds(proc.pid), time.process_time()
                    singles.append(stream(addr, batches["a"], first if run == 0 else None))
                    cpus.append(cpu_seconds(proc.pid) - cpu0)
                    client_cpu.append(time.process_time() - own0)
                    for k in counts:
                        fresh_instances(client, ids)
                        many[k].append(parallel_streams(addr, [batches[i] for i in ids[:k]],
                                                        proc.pid))  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    got = np.concatenate([
        wire.packed_result_from_pb(pb2.TraceQueryPackedResponse.FromString(raw)).hit_blocks
        for raw in first
    ])  # fmt: skip
    expected = expected_answers(reqs, args.copies)
    exact = np.array_equal(got, expected)
    one = n / min(singles)
    per_query = min(cpus) / n * 1e6
    print(f"one stream: best {one:,.0f} queries/s (runs: "
          f"{', '.join(f'{n / s:,.0f}' for s in singles)}); server CPU {per_query:.2f} us/query "
          f"(target >= 250,000 queries/s)")  # fmt: skip
    print(f"  client CPU {min(client_cpu) / n * 1e6:.2f} us/query")
    for k in counts:
        wall_s = min(w for w, _, _ in many[k])
        server = min(c for _, c, _ in many[k])
        own = min(o for _, _, o in many[k])
        rate = k * n / wall_s
        print(f"{k} streams on {k} instances: {rate:,.0f} queries/s = {rate / one:.2f}x one "
              f"stream (target: two >= 1.7x, four no slower than two); server CPU "
              f"{server / (k * n) * 1e6:.2f} us/query, {server / wall_s:.2f} cores; client CPU "
              f"{own / (k * n) * 1e6:.2f} us/query")  # fmt: skip
    print(f"answers equal to queries sent alone: {exact} ({len(got):,} queries x "
          f"{got.shape[1]} slots)")  # fmt: skip
    return 0 if exact else 1


def parallel_streams(addr: str, streams: list[list[bytes]], pid: int) -> tuple[float, float, float]:
    """Send each batch list over its own stream at once (one client thread each); returns
    (wall seconds until the last answer, server CPU seconds, client CPU seconds)."""
    cpu0, own0 = cpu_seconds(pid), time.process_time()
    threads = [threading.Thread(target=stream, args=(addr, b)) for b in streams]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.perf_counter() - t0, cpu_seconds(pid) - cpu0, time.process_time() - own0)


if __name__ == "__main__":
    raise SystemExit(main())
