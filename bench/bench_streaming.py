"""Production-size traces (issue 34): commands as users run them, wall and peak RSS, beside
ONE tuned libCacheSim LRU pass over the same block accesses at the same capacity.

Usage: python bench/bench_streaming.py [--copies 10 40] [--repeat 3] [--quota-blocks 100000]
                                      [--commands optimize,replay] [--formats standard,mooncake]

For each K in ``--copies`` the Mooncake conversation trace (``../shared``) is written K
times over as standard JSONL (``_trace.write_standard_copies``: fresh keys and trace ids
per copy, copies one after another in time) and converted to Parquet with ``litehit
convert`` (timed: MB/s of JSONL in). Then, as fresh processes taking turns, best of
``--repeat``:

- ``litehit optimize`` (one ``lru`` instance, eviction mode 3, batch 100, quota
  ``--quota-blocks`` blocks of 512 tokens x 4096 B/token) from the JSONL and from the
  Parquet file;
- ``litehit replay`` (the converted trace's ``--emit-config``: 30 capacities) from each;
- libCacheSim 0.3.5 (``pip install libcachesim``): ``LRU(quota, hashpower fitted)
  .process_trace`` over an oracleGeneral binary file of every key of every request, head
  first (what the replay's ``lru`` touches), process CPU time in this process.

With ``mooncake`` in ``--formats`` the same K copies are also written as a Mooncake trace
(``_trace.write_mooncake_copies``: the records above in Mooncake's own form) and each
command reads it twice, taking turns with the rest: by columns and line by line
(``_mooncake_path.py``: the column source forced, also for ``replay``, which reads Mooncake
line by line; or the Mooncake reader without its column source, the line loop every
command used before). ``standard`` measures the standard JSONL and Parquet
files.

Printed per command: wall, wall minus start-up (the same command on a one-record trace),
the ratio of the latter to libCacheSim's pass, and the peak RSS (``wait4``). Targets: see
issue 34 (optimize <= 1.5x from Parquet, <= 3x from JSONL; replay <= 2x / 3x; optimize
peak RSS <= 350 MB at 40x and RSS(40x) <= 1.25 x RSS(10x); convert >= 100 MB/s).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import peak_run, write_mooncake_copies, write_standard_copies  # noqa: E402
from bench_peers import write_oracle_general  # noqa: E402

BLOCK_TOKENS, BYTES_PER_TOKEN = 512, 4096


MOONCAKE_PATH = str(Path(__file__).resolve().parent / "_mooncake_path.py")
"""The launcher of ``litehit`` reading Mooncake one way (``columns`` or ``lines``)."""


def run(
    argv: list[str], launcher: tuple[str, ...] = ("-m", "litehit_service")
) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of ``litehit ARGV`` as a fresh process
    (:func:`_trace.peak_run`; ``launcher``: how the interpreter starts it)."""
    wall, peak, done = peak_run(argv, launcher=launcher)
    if done.returncode:
        raise SystemExit(f"litehit {' '.join(argv)} failed:\n{done.stderr}")
    return wall, peak


def policy_config(path: Path, trace: Path, out: Path, quota_blocks: int) -> Path:
    path.write_text(json.dumps({
        "trace_file_path": str(trace), "output_result_path": str(out),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 100},
        "instance_groups": [{
            "group_name": "g",
            "quota_capacity": quota_blocks * BLOCK_TOKENS * BYTES_PER_TOKEN / 2**30,
            "instances": [{"instance_id": "conv", "block_size": BLOCK_TOKENS,
                           "bytes_per_token": BYTES_PER_TOKEN, "eviction_policy_type": "lru"}],
        }],
    }))  # fmt: skip
    return path


def lcs_seconds(jsonl: Path, capacity: int, repeat: int, work: Path) -> tuple[float, int]:
    """Best process CPU seconds of one tuned libCacheSim LRU pass, and the accesses."""
    import libcachesim as lcs

    keys = []
    with open(jsonl, "rb") as fh:
        for line in fh:
            keys.append(np.asarray(json.loads(line)["keys"], dtype=np.int64))
    flat = np.concatenate(keys)
    unique = len(np.unique(flat))
    trace_file = work / "trace.oracleGeneral"
    write_oracle_general(flat, trace_file)
    power = math.ceil(math.log2(unique)) + 1
    best = math.inf
    for _ in range(repeat):
        reader = lcs.TraceReader(str(trace_file), lcs.TraceType.ORACLE_GENERAL_TRACE)
        started = time.process_time()
        lcs.LRU(capacity, hashpower=power).process_trace(reader)
        best = min(best, time.process_time() - started)
    trace_file.unlink()
    return best, len(flat)


CLI = ("-m", "litehit_service")


def _mooncake_sides(
    work: Path, copies: int, moon: Path, commands: list[str], quota_blocks: int
) -> dict[str, tuple[str, list[str], tuple[str, ...]]]:
    """The commands on the Mooncake trace ``moon`` (format detected, as users run them),
    each by columns and line by line (:data:`MOONCAKE_PATH`)."""
    sides = {}
    for how, launcher in (("by columns", (MOONCAKE_PATH, "columns")),
                          ("line by line", (MOONCAKE_PATH, "lines"))):  # fmt: skip
        if "optimize" in commands:
            cfg = policy_config(work / f"pm{copies}.json", moon, work / "o", quota_blocks)
            sides[f"optimize from Mooncake, {how}"] = ("optimize", ["optimize", str(cfg)],
                                                       launcher)  # fmt: skip
        if "replay" in commands:
            replay_cfg = json.loads((work / f"r{copies}.json").read_text())
            replay_cfg["trace_file_path"] = str(moon)
            replay_cfg["trace_format"] = "mooncake"
            cfg = work / f"rm{copies}.json"
            cfg.write_text(json.dumps(replay_cfg))
            argv = ["replay", str(cfg), "-o", str(work / "r")]
            sides[f"replay from Mooncake, {how}"] = ("replay", argv, launcher)
    return sides


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, nargs="+", default=[10, 40])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quota-blocks", type=int, default=100_000)
    ap.add_argument("--commands", default="optimize,replay")
    ap.add_argument("--formats", default="standard,mooncake")
    args = ap.parse_args()
    commands = args.commands.split(",")
    formats = args.formats.split(",")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="bench_streaming_"))
    tiny = work / "tiny.jsonl"
    write_standard_copies(tiny, 1)
    tiny.write_text(tiny.read_text().splitlines()[0] + "\n")
    startup = {
        "optimize": min(run(["optimize", str(policy_config(work / "tiny.json", tiny,
                                                           work / "o", args.quota_blocks))])[0]
                        for _ in range(args.repeat)),
    }  # fmt: skip
    run(["convert", str(tiny), "-o", str(work / "tiny.parquet"),
         "--emit-config", str(work / "tiny_replay.json"), "--block-size", "512"])  # fmt: skip
    startup["replay"] = min(run(["replay", str(work / "tiny_replay.json"), "-o",
                                 str(work / "r")])[0] for _ in range(args.repeat))  # fmt: skip
    print(f"start-up (one-record trace): optimize {startup['optimize']:.2f} s, replay "
          f"{startup['replay']:.2f} s")  # fmt: skip
    for copies in args.copies:
        jsonl = work / f"t{copies}.jsonl"
        records, accesses = write_standard_copies(jsonl, copies)
        parquet = work / f"t{copies}.parquet"
        size = jsonl.stat().st_size
        conv = min(run(["convert", str(jsonl), "-o", str(parquet),
                        "--emit-config", str(work / f"r{copies}.json"), "--block-size", "512"])[0]
                   for _ in range(args.repeat if "standard" in formats else 1))  # fmt: skip
        base, n = lcs_seconds(jsonl, args.quota_blocks, args.repeat, work)
        print(f"\n{copies}x: {records:,} requests, {accesses:,} block accesses, JSONL "
              f"{size / 1e6:.0f} MB, Parquet {parquet.stat().st_size / 1e6:.1f} MB; convert "
              f"to Parquet {conv:.2f} s = {size / 1e6 / conv:.0f} MB/s of JSONL; "
              f"libCacheSim LRU at {args.quota_blocks:,} blocks: {base:.2f} s")  # fmt: skip
        sides: dict[str, tuple[str, list[str], tuple[str, ...]]] = {}
        moon = work / f"m{copies}.jsonl"
        if "mooncake" in formats:
            write_mooncake_copies(moon, copies)
            print(f"  Mooncake JSONL {moon.stat().st_size / 1e6:.0f} MB")
            sides.update(_mooncake_sides(work, copies, moon, commands, args.quota_blocks))
        for source in (jsonl, parquet) if "standard" in formats else ():
            tag = "Parquet" if source == parquet else "JSONL"
            if "optimize" in commands:
                cfg = policy_config(work / f"p{copies}{tag}.json", source, work / "o",
                                    args.quota_blocks)  # fmt: skip
                sides[f"optimize from {tag}"] = ("optimize", ["optimize", str(cfg)], CLI)
            if "replay" in commands:
                replay_cfg = json.loads((work / f"r{copies}.json").read_text())
                replay_cfg["trace_file_path"] = str(source)
                cfg = work / f"rc{copies}{tag}.json"
                cfg.write_text(json.dumps(replay_cfg))
                sides[f"replay from {tag}"] = ("replay", ["replay", str(cfg), "-o",
                                                          str(work / "r")], CLI)  # fmt: skip
        results: dict[str, list[tuple[float, int]]] = {name: [] for name in sides}
        for _ in range(args.repeat):
            for name, (_, argv, launcher) in sides.items():
                results[name].append(run(argv, launcher))
        for name, (command, _, _) in sides.items():
            wall = min(w for w, _ in results[name])
            rss = max(r for _, r in results[name])
            net = wall - startup[command]
            print(f"  {name:36s} wall {wall:6.2f} s, minus start-up {net:6.2f} s = "
                  f"{net / base:4.2f}x libCacheSim; peak RSS {rss / 2**20:6.0f} MiB")  # fmt: skip
        for name in sides:
            if name.endswith("by columns"):
                before = name.replace("by columns", "line by line")
                ratio = min(w for w, _ in results[before]) / min(w for w, _ in results[name])
                print(f"  {name}: line by line / by columns, wall = {ratio:.2f}")
        for path in (jsonl, parquet, moon):
            path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
