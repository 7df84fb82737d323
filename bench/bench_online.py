"""Online throughput: packed streams from a separate client process into a real server.

Usage: python bench/bench_online.py [TRACE.jsonl] [--copies 8] [--batch 1024]
                                    [--engine compact|python] [--repeat 3]

Starts ``litehit serve`` (``--engine``, default compact) as its own process on 127.0.0.1,
registers two instances (block_size 512, 8 capacity slots + theoretical) and, from this
process (the client), streams the trace through ``TraceQueryPackedStream`` in packed
batches of ``--batch`` queries: the Mooncake conversation ``--copies`` times, each copy with
fresh keys (so the tracked blocks grow as in a longer trace). The client sends
pre-serialised batches through a raw gRPC stream (bytes in, bytes out) so that it costs
little CPU beside the server. Reported (best of ``--repeat``, each on fresh instances):

- one stream: queries/s (wall) and the server's CPU per query (``/proc/PID/stat``, user +
  system, over the stream);
- two streams on two instances at once (two client threads): queries/s of both together
  and the ratio to one stream;
- exactness: every answer of the first run equals the in-process manager's answer to the
  same query sent alone (``trace_query``).

Targets (issue 14): >= 100,000 queries/s, <= 10 us of server CPU per query, two streams
>= 1.7x one. The default trace is ../shared/traces/mooncake/conversation_trace.jsonl.
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
    args = ap.parse_args()
    reqs = load_mooncake(args.trace)
    n = len(reqs) * args.copies
    batches = {iid: packed_batches(reqs, args.copies, args.batch, iid) for iid in ("a", "b")}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {n:,} queries a stream "
          f"({args.copies} copies of {args.trace.name}), batches of {args.batch}, "
          f"engine {args.engine}")  # fmt: skip
    with tempfile.TemporaryDirectory() as data_dir:
        proc, addr = start_server(data_dir, ["--engine", args.engine])
        try:
            with OptimizerClient(addr, timeout=30) as client:
                client.create_instance_group(GROUP)
                singles, cpus, doubles = [], [], []
                client_cpu, double_cpu, double_client = [], [], []
                first: list[bytes] = []
                for run in range(args.repeat):
                    fresh_instances(client, ["a", "b"])
                    cpu0, own0 = cpu_seconds(proc.pid), time.process_time()
                    singles.append(stream(addr, batches["a"], first if run == 0 else None))
                    cpus.append(cpu_seconds(proc.pid) - cpu0)
                    client_cpu.append(time.process_time() - own0)
                    fresh_instances(client, ["a", "b"])
                    cpu0, own0 = cpu_seconds(proc.pid), time.process_time()
                    walls = [0.0, 0.0]

                    def go(i: int, iid: str, walls: list[float] = walls) -> None:
                        walls[i] = stream(addr, batches[iid])

                    threads = [threading.Thread(target=go, args=(i, iid))
                               for i, iid in enumerate(("a", "b"))]  # fmt: skip
                    t0 = time.perf_counter()
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    doubles.append(time.perf_counter() - t0)
                    double_cpu.append(cpu_seconds(proc.pid) - cpu0)
                    double_client.append(time.process_time() - own0)
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
    two = 2 * n / min(doubles)
    per_query = min(cpus) / n * 1e6
    print(f"one stream: best {one:,.0f} queries/s (runs: "
          f"{', '.join(f'{n / s:,.0f}' for s in singles)}); server CPU {per_query:.2f} us/query "
          f"(target >= 100,000 queries/s, <= 10 us)")  # fmt: skip
    print(f"  client CPU {min(client_cpu) / n * 1e6:.2f} us/query")
    print(f"two streams on two instances: {two:,.0f} queries/s = {two / one:.2f}x one stream "
          f"(target >= 1.7x); server CPU {min(double_cpu) / (2 * n) * 1e6:.2f} us/query, "
          f"{min(double_cpu) / min(doubles):.2f} cores; client CPU "
          f"{min(double_client) / (2 * n) * 1e6:.2f} us/query")  # fmt: skip
    print(f"answers equal to queries sent alone: {exact} ({len(got):,} queries x "
          f"{got.shape[1]} slots)")  # fmt: skip
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
