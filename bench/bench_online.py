"""Online throughput: packed streams from a separate client process into a real server.

Usage: python bench/bench_online.py [TRACE.jsonl] [--copies 8] [--batch 4096] [--slots 3]
                                    [--engine compact|python] [--repeat 3]
                                    [--streams 1,2,4] [--servers 0]

Starts ``litehit serve`` (``--engine``, default compact) as its own process on 127.0.0.1,
registers an instance per stream (block_size 512, ``--slots`` capacity slots + theoretical)
and, from this process (the client), streams the trace through ``TraceQueryPackedStream``
in packed batches of ``--batch`` queries: the Mooncake conversation ``--copies`` times,
each copy with fresh keys (so the tracked blocks grow as in a longer trace). The client
sends pre-serialised batches through a raw gRPC stream (bytes in, bytes out) so that it
costs little CPU beside the server. Reported, best of ``--repeat`` interleaved rounds,
each on fresh instances:

- for each count k of ``--streams``: k streams on k instances at once (a client thread
  each): queries/s of all together, the ratio to one stream, the server's CPU per query
  and cores (``/proc/PID/stat``, user + system) and the client's CPU per query;
- with ``--servers N`` (N >= 2), the same k streams spread over N server processes
  (stream i to server i mod N; each its own data dir and port): one server process per
  core, the alternative to one process's threads, without what routing instances to
  processes would cost;
- exactness: every answer of the first one-stream run equals the in-process manager's
  answer to the same query sent alone (``trace_query``).

Targets (issue 38): one stream >= 300,000 queries/s (batches of 4,096, 3 slots); two
streams on two instances >= 1.7x one; four >= two. The default trace is
../shared/traces/mooncake/conversation_trace.jsonl.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, load_mooncake  # noqa: E402
from bench_service import CAPACITY_GB, GROUP, REG, cpu_seconds, start_server  # noqa: E402

from litehit_service import messages as pb2  # noqa: E402
from litehit_service import wire  # noqa: E402
from litehit_service.client import OptimizerClient  # noqa: E402
from litehit_service.manager import OnlineOptimizerManager  # noqa: E402
from litehit_service.model import InstanceGroup, InstanceRegistration  # noqa: E402

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


def group(slots: int) -> InstanceGroup:
    """The bench group with its first ``slots`` capacities."""
    return replace(GROUP, capacity_gb=CAPACITY_GB[:slots])


def fresh_instances(client: OptimizerClient, ids: list[str]) -> None:
    """Register ``ids`` (idempotent) and reset them: empty engines and counters."""
    for iid in ids:
        client.register_instance(_reg(iid))
        client.reset_stats(iid)


def _reg(iid: str) -> InstanceRegistration:
    return replace(REG, instance_id=iid)


def expected_answers(reqs, copies: int, slots: int) -> np.ndarray:
    """Hit blocks per slot of every query, sent alone to an in-process manager."""
    manager = OnlineOptimizerManager()
    manager.create_group(group(slots))
    manager.register_instance(_reg("a"))
    rows = [
        manager.trace_query("a", keys, tokens).hit_blocks for keys, tokens in copied(reqs, copies)
    ]
    return np.array(rows, np.int64)


def parallel_streams(
    addrs: list[str], streams: list[list[bytes]], pids: list[int]
) -> tuple[float, float, float]:
    """Send each batch list over its own stream at once (one client thread each; stream i
    to ``addrs[i % len(addrs)]``); returns (wall seconds until the last answer, CPU
    seconds of the servers ``pids``, client CPU seconds)."""
    cpu0, own0 = sum(map(cpu_seconds, pids)), time.process_time()
    threads = [threading.Thread(target=stream, args=(addrs[i % len(addrs)], b))
               for i, b in enumerate(streams)]  # fmt: skip
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return wall, sum(map(cpu_seconds, pids)) - cpu0, time.process_time() - own0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--slots", type=int, default=3, choices=range(1, len(CAPACITY_GB) + 1))
    ap.add_argument("--engine", choices=("compact", "python"), default="compact")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--streams", default="1,2,4", help="stream counts (one stream always runs)")
    ap.add_argument("--servers", type=int, default=0, help="also spread over N processes")
    args = ap.parse_args()
    counts = sorted({1, *(int(k) for k in args.streams.split(","))})
    reqs = load_mooncake(args.trace)
    n = len(reqs) * args.copies
    ids = [chr(ord("a") + i) for i in range(max(counts))]
    batches = {iid: packed_batches(reqs, args.copies, args.batch, iid) for iid in ids}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}; {n:,} queries a stream ({args.copies} copies of "
          f"{args.trace.name}), batches of {args.batch}, {args.slots} slots, engine "
          f"{args.engine}")  # fmt: skip
    setups = {"one process": 1}
    if args.servers >= 2:
        setups[f"{args.servers} processes"] = args.servers
    runs: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    first: list[bytes] = []
    with ExitStack() as stack:
        servers = []
        for _ in range(max(setups.values())):
            data_dir = stack.enter_context(tempfile.TemporaryDirectory())
            proc, addr = start_server(data_dir, ["--engine", args.engine])
            stack.callback(_stop, proc)
            client = stack.enter_context(OptimizerClient(addr, timeout=30))
            client.create_instance_group(group(args.slots))
            servers.append((proc, addr, client))
        for i, (_, addr, client) in enumerate(servers):  # compile and warm every server
            fresh_instances(client, ids)
            stream(addr, batches["a"], first if i == 0 else None)
        for _ in range(args.repeat):  # interleaved: every setup and count each round
            for name, size in setups.items():
                used = servers[:size]
                for k in counts:
                    for _, _, client in used:
                        fresh_instances(client, ids)
                    runs.setdefault((name, k), []).append(parallel_streams(
                        [a for _, a, _ in used], [batches[i] for i in ids[:k]],
                        [p.pid for p, _, _ in used]))  # fmt: skip
    got = np.concatenate([
        wire.packed_result_from_pb(pb2.TraceQueryPackedResponse.FromString(raw)).hit_blocks
        for raw in first
    ])  # fmt: skip
    exact = np.array_equal(got, expected_answers(reqs, args.copies, args.slots))
    for name in setups:
        one = n / min(w for w, _, _ in runs[(name, 1)])
        print(f"{name}:")
        for k in counts:
            rows = runs[(name, k)]
            wall = min(w for w, _, _ in rows)
            rate = k * n / wall
            server = min(c for _, c, _ in rows)
            own = min(o for _, _, o in rows)
            print(f"  {k} stream{'s' if k > 1 else ''} on {k} instance{'s' if k > 1 else ''}: "
                  f"{rate:,.0f} queries/s = {rate / one:.2f}x one stream (runs "
                  f"{', '.join(f'{k * n / w:,.0f}' for w, _, _ in rows)}); server CPU "
                  f"{server / (k * n) * 1e6:.2f} us/query, {server / wall:.2f} cores; "
                  f"client CPU {own / (k * n) * 1e6:.2f} us/query")  # fmt: skip
    print("targets: one stream >= 300,000 queries/s; two streams >= 1.7x one; four >= two")
    print(f"answers equal to queries sent alone: {exact} ({len(got):,} queries x "
          f"{got.shape[1]} slots)")  # fmt: skip
    return 0 if exact else 1


def _stop(proc) -> None:  # noqa: ANN001 - a subprocess.Popen
    proc.terminate()
    proc.wait(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
