"""``litehit convert --from publisher-log`` and ``--from qwen-bailian``: speed and memory.

Usage: python bench/bench_convert_logs.py [TRACE.jsonl] [--copies 1 8] [--repeat 3]

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl. From it two inputs are
made, ``--copies K`` times the trace one after the other (fresh ids per copy):

- a KVCacheManager event-publisher log: per request a ``GetCacheLocation`` (prefix-chained
  keys, as KVCacheManager logs them, with 16 token ids each as the real events carry), a
  ``StartWriteCache`` 1 ms later and its ``FinishWriteCache`` 20 ms later, every 50th
  session unfinished, the instance one of four by request; lines jittered by up to 5 ms
  (a multi-threaded publisher's order);
- a Qwen Bailian file: per request ``chat_id``, ``parent_chat_id``, ``timestamp`` (s),
  ``input_length``, ``hash_ids`` (512-token blocks given as 32 ids of 16 tokens).

Each conversion runs as a command in a fresh process (imports included), best of
``--repeat``; peak RSS is the child's ``ru_maxrss``. Memory must not grow with the input:
the ratio of peak RSS between the largest and smallest copies is printed. Prints CPUs and
load (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE  # noqa: E402

from litehit_core.prefix_hash import apply_prefix_hash  # noqa: E402
from litehit_service.traces.readers import read_mooncake  # noqa: E402

SUB = 32  # 16-token Bailian ids per 512-token Mooncake block


def write_inputs(folder: Path, trace: Path, copies: int) -> tuple[Path, Path]:
    """The publisher log and the Bailian file made from ``trace`` ``copies`` times."""
    requests = list(read_mooncake(trace, 512))
    span = requests[-1].timestamp_ns + 1_000_000
    rng = random.Random(7)
    pub, bai = folder / f"pub{copies}.log", folder / f"bailian{copies}.jsonl"
    with open(pub, "w") as p, open(bai, "w") as b:
        lines: list[tuple[int, str]] = []
        for c in range(copies):
            for n, r in enumerate(requests):
                us = (c * span + r.timestamp_ns) // 1000 + 1
                raw = [k + c * (1 << 40) for k in r.keys]
                keys = apply_prefix_hash(raw)
                src = f"pod-{n % 4}"
                sid = f"{c}-{n}"
                tokens = list(range(16))
                lines.append(
                    (
                        us,
                        json.dumps(
                            {
                                "id": f"g{c}-{n}",
                                "source": src,
                                "component": "cache_manager",
                                "type": "GetCacheLocation",
                                "trigger_time_us": us,
                                "query_type": "prefix_match",
                                "keys": keys,
                                "tokens": tokens,
                                "block_mask": [],
                                "sw_size": 0,
                                "location_spec_names": [],
                            }
                        ),
                    )
                )
                lines.append(
                    (
                        us + 1000,
                        json.dumps(
                            {
                                "id": f"s{c}-{n}",
                                "source": src,
                                "type": "StartWriteCache",
                                "trigger_time_us": us + 1000,
                                "write_session_id": sid,
                                "keys": keys,
                                "tokens": tokens,
                                "block_mask": [],
                                "write_timeout_seconds": 30,
                            }
                        ),
                    )
                )
                if n % 50:
                    lines.append(
                        (
                            us + 20000,
                            json.dumps(
                                {
                                    "id": f"f{c}-{n}",
                                    "source": src,
                                    "type": "FinishWriteCache",
                                    "trigger_time_us": us + 20000,
                                    "write_session_id": sid,
                                    "success_block": [],
                                }
                            ),
                        )
                    )
                ids = [x * SUB + j for x in raw for j in range(SUB)]
                b.write(
                    json.dumps(
                        {
                            "chat_id": c * len(requests) + n,
                            "parent_chat_id": -1,
                            "timestamp": (c * span + r.timestamp_ns) / 1e9,
                            "input_length": r.input_len,
                            "output_length": 10,
                            "type": "text",
                            "turn": 1,
                            "hash_ids": ids,
                        }
                    )
                    + "\n"
                )
            lines.sort(key=lambda pair: pair[0] + rng.randint(0, 5000))
            p.writelines(line + "\n" for _, line in lines)
            lines.clear()
    return pub, bai


def run(argv: list[str]) -> float:
    """Wall seconds of ``litehit ARGV`` in a fresh process."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "litehit_service", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.decode())
    return time.perf_counter() - started


def measure(argv: list[str], repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` runs and the peak RSS of one more run measured alone
    (``ru_maxrss`` of children is a high-water mark, so each size runs in its own child)."""
    best = min(run(argv) for _ in range(repeat))
    code = (
        "import resource, subprocess, sys;"
        f"subprocess.run([sys.executable, '-m', 'litehit_service', *{argv!r}], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True);"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    rss = int(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    return best, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    ap.add_argument("--copies", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = []
        for copies in args.copies:
            pub, bai = write_inputs(folder, Path(args.trace), copies)
            out = str(folder / "out.jsonl")
            for name, argv, path in (
                (
                    "publisher-log",
                    [
                        "convert",
                        "--from",
                        "publisher-log",
                        str(pub),
                        "-o",
                        out,
                        "--block-size",
                        "512",
                    ],
                    pub,
                ),
                (
                    "qwen-bailian",
                    ["convert", "--from", "qwen-bailian", str(bai), "-o", out, "--instance", "q"],
                    bai,
                ),
            ):
                events = sum(1 for _ in open(path))
                best, rss = measure(argv, args.repeat)
                mib = path.stat().st_size / 2**20
                rows.append((name, copies, mib, rss))
                print(
                    f"{name:14s} x{copies}: {mib:7.1f} MiB, {events:8d} lines, best {best:6.2f} s "
                    f"({mib / best:5.1f} MiB/s, {events / best:9,.0f} lines/s), "
                    f"peak RSS {rss / 1024:6.1f} MiB"
                )
        for name in ("publisher-log", "qwen-bailian"):
            mine = [r for r in rows if r[0] == name]
            lo, hi = min(mine, key=lambda r: r[1]), max(mine, key=lambda r: r[1])
            print(f"{name}: input x{hi[2] / lo[2]:.1f} -> peak RSS x{hi[3] / lo[3]:.2f}")
        print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
