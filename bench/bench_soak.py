"""A mixed soak of ``litehit serve``: streams, unary queries, ListInstances, registration
churn and restarts, for ten minutes (``--seconds``).

One ``litehit serve`` subprocess on a fixed local port with a data dir; clients in this
process:

- 3 streams, one per instance, replaying the Mooncake conversation trace (or a synthetic
  one) in batches of 256, reconnecting when the server restarts;
- unary TraceQuery calls at ~100/s on a fourth instance;
- ListInstances once a second;
- registration churn every 2 s: an identical re-registration (state kept), a temporary
  instance registered, queried and removed;
- a restart (SIGTERM, then the same command) every ``--restart-every`` seconds.

Every 5 s the server's RSS is sampled. At the end, for every streamed instance, the server's
``total_queries`` must equal the answers the client received, across all the restarts.

    python bench/bench_soak.py [--seconds 600] [--restart-every 120] [TRACE]
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402
from _trace import DEFAULT_TRACE  # noqa: E402

from litehit_service import messages as pb2  # noqa: E402
from litehit_service.client import OptimizerClient  # noqa: E402
from litehit_service.errors import OptimizerError  # noqa: E402
from litehit_service.model import (  # noqa: E402
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.traces.readers import read_mooncake  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STREAMS = ("s0", "s1", "s2")
GROUP = InstanceGroup("g", (16.0, 64.0, 256.0, 1024.0), enable_theoretical_max_cache=True)


def reg(instance_id: str) -> InstanceRegistration:
    return InstanceRegistration(
        instance_id,
        "g",
        512,
        (LocationSpec("kv", 64 * 1024 * 1024),),
        (LocationSpecGroup("f", ("kv",)),),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``litehit serve`` on fixed ports; restartable."""

    def __init__(self, data_dir: str) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self.data_dir = data_dir
        self.target = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None
        self.log = open(Path(data_dir) / "server.log", "a")  # noqa: SIM115

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "litehit_service", "serve", "--listen", self.target,
             "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--data-dir", self.data_dir,
             "--snapshot-interval-seconds", "10", "--grace-seconds", "5"],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
        )  # fmt: skip
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("litehit serving"), line

    def stop(self) -> tuple[int, float]:
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        return code, time.monotonic() - started

    def rss_mib(self) -> float:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--restart-every", type=float, default=120.0)
    args = parser.parse_args()
    if Path(args.trace).exists():
        requests = [e.keys for e in read_mooncake(args.trace, 512, "x")]
    else:
        requests = [[i, i + 1, i + 2] for i in range(12_000)]
    tmp = tempfile.mkdtemp(prefix="litehit-soak-")
    server = Server(tmp)
    server.start()
    with OptimizerClient(server.target) as c:
        c.create_instance_group(GROUP)
        for iid in (*STREAMS, "u"):
            c.register_instance(reg(iid))
    answered = collections.Counter()
    errors = collections.Counter()
    stop = threading.Event()
    lock = threading.Lock()

    def count_error(kind: str) -> None:
        with lock:
            errors[kind] += 1

    def streamer(iid: str) -> None:
        i = 0
        while not stop.is_set():
            try:
                with OptimizerClient(server.target, timeout=30) as c:

                    def queries():
                        nonlocal i
                        while not stop.is_set():
                            keys = requests[i % len(requests)]
                            i += 1
                            yield pb2.TraceQueryRequest(
                                instance_id=iid, block_keys=keys, input_token_len=512 * len(keys)
                            )

                    for _ in c.stream_trace_queries(queries(), batch_size=256):
                        answered[iid] += 1
            except grpc.RpcError as exc:
                count_error(f"stream {exc.code().name}")  # type: ignore[attr-defined]
                time.sleep(0.2)

    def unary() -> None:
        k = 0
        with OptimizerClient(server.target, timeout=10, retries=20) as c:
            while not stop.is_set():
                try:
                    c.trace_query("u", [k % 5000, k % 5000 + 1], 1024)
                    answered["u"] += 1
                except grpc.RpcError as exc:
                    count_error(f"unary {exc.code().name}")  # type: ignore[attr-defined]
                k += 1
                time.sleep(0.01)

    def lister() -> None:
        with OptimizerClient(server.target, timeout=10, retries=20) as c:
            while not stop.wait(1.0):
                try:
                    c.list_instances()
                    answered["list"] += 1
                except grpc.RpcError as exc:
                    count_error(f"list {exc.code().name}")  # type: ignore[attr-defined]

    def churner() -> None:
        n = 0
        with OptimizerClient(server.target, timeout=10, retries=20) as c:
            while not stop.wait(2.0):
                try:
                    assert c.register_instance(reg("s0")).header.status.code == pb2.OK
                    temp = f"temp-{n}"
                    c.register_instance(reg(temp))
                    c.trace_query(temp, [1, 2, 3], 1536)
                    c.remove_instance(temp)
                    answered["churn"] += 1
                except (grpc.RpcError, OptimizerError) as exc:
                    count_error(f"churn {type(exc).__name__}")
                n += 1

    threads = [threading.Thread(target=streamer, args=(iid,)) for iid in STREAMS]
    threads += [threading.Thread(target=f) for f in (unary, lister, churner)]
    started = time.monotonic()
    for t in threads:
        t.start()
    rss: list[tuple[float, float]] = []
    restarts: list[tuple[int, float]] = []
    next_restart = started + args.restart_every
    while time.monotonic() - started < args.seconds:
        time.sleep(5.0)
        now = time.monotonic()
        rss.append((now - started, server.rss_mib()))
        if now >= next_restart and now - started < args.seconds - 10:
            restarts.append(server.stop())
            server.start()
            next_restart = time.monotonic() + args.restart_every
    stop.set()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - started
    with OptimizerClient(server.target) as c:
        totals = {i.instance_id: i.total_queries for i in c.list_instances().instances}
    final = server.stop()
    queries = sum(answered[i] for i in (*STREAMS, "u"))
    exact = all(totals[i] == answered[i] for i in STREAMS)
    print(f"soak: {elapsed:.0f} s, {len(restarts)} restarts (exit codes and drain times "
          f"{[(c, round(t, 2)) for c, t in restarts]}), final stop {final[0]}")  # fmt: skip
    print(f"answered: {queries:,} queries = {queries / elapsed:,.0f} queries/s "
          f"(streams {[answered[i] for i in STREAMS]}, unary {answered['u']}), "
          f"{answered['list']} ListInstances, {answered['churn']} churn rounds")  # fmt: skip
    print(f"errors: {dict(errors) or 'none'}")
    values = [m for _, m in rss]
    print(f"RSS MiB: min {min(values):.0f}, max {max(values):.0f}; over time: "
          + ", ".join(f"{t:.0f}s {m:.0f}" for t, m in rss[:: max(1, len(rss) // 12)]))  # fmt: skip
    print(f"exactness across restarts: server total_queries == answers received for every "
          f"stream: {exact} ({[(i, totals[i], answered[i]) for i in STREAMS]})")  # fmt: skip
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
