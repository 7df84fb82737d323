"""Durable state: snapshot time, and the pause it causes, at 1 M and 8 M tracked blocks.

For each size, a real server (in process, 127.0.0.1, ephemeral port) holds instance A with
that many tracked blocks and a small instance B. A client streams queries to B without a
pause while the server's snapshotter writes A's snapshot (captured under A's query gate,
written outside it). Reported: A's capture time (the only time A's queries wait), the write
time and size, B's per-batch latency during the snapshot against its latency before, and
the restore time of A's snapshot at start-up.

    python bench/bench_snapshot.py [--sizes 1000000 8000000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from litehit_service import messages as pb2  # noqa: E402
from litehit_service.client import OptimizerClient  # noqa: E402
from litehit_service.manager import ManagerLimits, OnlineOptimizerManager  # noqa: E402
from litehit_service.model import (  # noqa: E402
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.server import create_server  # noqa: E402
from litehit_service.service import Snapshotter, tune_allocator  # noqa: E402
from litehit_service.snapshots import SnapshotStore  # noqa: E402

GIB = 1024**3


def registration(instance_id: str) -> InstanceRegistration:
    return InstanceRegistration(
        instance_id, "g", 512, (LocationSpec("kv", 1 << 20),), (LocationSpecGroup("f", ("kv",)),)
    )


def fill(manager: OnlineOptimizerManager, instance_id: str, blocks: int) -> None:
    """Track ``blocks`` fresh blocks on ``instance_id`` (requests of 512 keys)."""
    base = 10**12
    for start in range(0, blocks, 512):
        keys = list(range(base + start, base + min(start + 512, blocks)))
        manager.record_query(instance_id, keys, 512 * len(keys))


def measure(blocks: int, folder: Path) -> dict[str, float]:
    store = SnapshotStore(folder / "state")
    manager = OnlineOptimizerManager(
        limits=ManagerLimits(max_tracked_blocks=8_388_608), state_store=store
    )
    manager.create_group(InstanceGroup("g", (1.0, 64.0), enable_theoretical_max_cache=True))
    for iid in ("A", "B"):
        manager.register_instance(registration(iid))
    fill(manager, "A", blocks)
    server = create_server(manager, None, "127.0.0.1:0").start()
    latencies: list[tuple[float, float]] = []  # (start, seconds) per batch on B
    stop = threading.Event()

    def stream_b() -> None:
        batch = [
            pb2.TraceQueryRequest(instance_id="B", block_keys=[k, k + 1], input_token_len=1024)
            for k in range(64)
        ]
        with OptimizerClient(server.address, timeout=60) as c:

            def batches():
                while not stop.is_set():
                    yield pb2.TraceQueryBatchRequest(queries=batch)

            call = c._stub.TraceQueryStream(batches())  # raw batches: one latency each
            last = time.perf_counter()
            for _ in call:
                now = time.perf_counter()
                latencies.append((last, now - last))
                last = now

    streamer = threading.Thread(target=stream_b)
    streamer.start()
    time.sleep(2.0)
    snapshotter = Snapshotter(manager, server, 0)
    started = time.perf_counter()
    snapshotter.run_once()  # writes A then B
    finished = time.perf_counter()
    time.sleep(1.0)
    stop.set()
    streamer.join()
    server.stop()
    before = [d for t, d in latencies if t < started - 0.2]
    during = [d for t, d in latencies if started <= t <= finished]
    capture = time.perf_counter()
    captured = manager.capture_state("A")
    capture = time.perf_counter() - capture
    assert captured is not None
    write = time.perf_counter()
    manager.write_state(captured)
    write = time.perf_counter() - write
    size = store.path("A").stat().st_size
    restored = OnlineOptimizerManager(
        limits=ManagerLimits(max_tracked_blocks=8_388_608), state_store=store
    )
    restored.create_group(InstanceGroup("g", (1.0, 64.0), enable_theoretical_max_cache=True))
    for iid in ("A", "B"):
        restored.register_instance(registration(iid))
    # registering again removed the files: write them back from the live manager first
    manager.save_all_states()
    t0 = time.perf_counter()
    restored.restore_states()
    restore = time.perf_counter() - t0
    assert restored.list_instances()[0].debug_info.unique_keys == blocks
    return {
        "blocks": blocks,
        "round_s": finished - started,
        "capture_s": capture,
        "write_s": write,
        "size_mib": size / 2**20,
        "b_before_p50_ms": statistics.median(before) * 1e3,
        "b_before_max_ms": max(before) * 1e3,
        "b_during_max_ms": max(during, default=0.0) * 1e3,
        "b_batches_during": len(during),
        "restore_s": restore,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 8_000_000])
    args = parser.parse_args()
    tune_allocator()
    for blocks in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            r = measure(blocks, Path(tmp))
        print(
            f"{r['blocks']:>9,} blocks: snapshot round {r['round_s']:.3f} s "
            f"(capture, A's only pause: {r['capture_s'] * 1e3:.0f} ms; write "
            f"{r['write_s'] * 1e3:.0f} ms, {r['size_mib']:.1f} MiB); "
            f"B's batches before p50 {r['b_before_p50_ms']:.2f} ms max "
            f"{r['b_before_max_ms']:.1f} ms, during max {r['b_during_max_ms']:.1f} ms "
            f"({r['b_batches_during']} batches); restore {r['restore_s']:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
