"""A flood of fresh block keys against ``litehit serve``: the RSS must reach a plateau.

One ``litehit serve`` subprocess with its default ``--max-tracked-blocks`` (8,388,608) or
``--limit``; one instance; a client streams ``--keys`` fresh keys (default 20 million) in
queries of 256 keys, batches of 64. Every million keys it samples the server's RSS and the
instance's ``litehit_memory_bytes`` (its engine estimate), and prints the table.

    python bench/bench_flood.py [--keys 20000000] [--limit 8388608]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from litehit_service import messages as pb2  # noqa: E402
from litehit_service.client import OptimizerClient  # noqa: E402
from litehit_service.model import (  # noqa: E402
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_metric_mib(address: str) -> float:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as response:
        text = response.read().decode()
    match = re.search(r'^litehit_memory_bytes\{[^}]*instance_id="i"\} (\S+)$', text, re.M)
    assert match, "litehit_memory_bytes missing"
    return float(match.group(1)) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20_000_000)
    parser.add_argument("--limit", type=int, default=8_388_608)
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="litehit-flood-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "litehit_service", "serve", "--listen", "127.0.0.1:0",
         "--metrics-listen", "127.0.0.1:0", "--data-dir", data,
         "--max-tracked-blocks", str(args.limit), "--snapshot-interval-seconds", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    line = proc.stdout.readline()  # type: ignore[union-attr]
    fields = dict(part.split("=", 1) for part in line.split()[2:])
    try:
        with OptimizerClient(fields["grpc"], timeout=120) as c:
            c.create_instance_group(InstanceGroup("g", (0.5,), enable_theoretical_max_cache=True))
            c.register_instance(
                InstanceRegistration(
                    "i", "g", 16, (LocationSpec("kv", 4096),), (LocationSpecGroup("f", ("kv",)),)
                )
            )
            base = rss_mib(proc.pid)
            print(f"limit {args.limit:,} blocks; server RSS before the flood {base:.0f} MiB")
            print(f"{'keys':>12} {'tracked':>10} {'RSS MiB':>8} {'growth':>7} {'memory':>7} "
                  f"{'mem/growth':>10} {'keys/s':>9}")  # fmt: skip
            key = 1 << 40
            step = 1_000_000
            started = time.monotonic()
            for done in range(step, args.keys + 1, step):
                queries = []
                for _ in range(step // 256):
                    queries.append(
                        pb2.TraceQueryRequest(
                            instance_id="i",
                            block_keys=range(key, key + 256),
                            input_token_len=16 * 256,
                        )
                    )
                    key += 256
                for _ in c.stream_trace_queries(queries, batch_size=64):
                    pass
                rss = rss_mib(proc.pid)
                memory = memory_metric_mib(fields["metrics"])
                tracked = min(done, args.limit)
                rate = done / (time.monotonic() - started)
                print(f"{done:>12,} {tracked:>10,} {rss:>8.0f} {rss - base:>7.0f} {memory:>7.0f} "
                      f"{memory / (rss - base):>10.2f} {rate:>9,.0f}", flush=True)  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
