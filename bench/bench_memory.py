"""Memory benchmark: ``LiteHit.memory_usage_bytes()`` against the memory it accounts for.

Usage: python bench/bench_memory.py [TRACE.jsonl] [--cases NAME ...]

Each case runs in a fresh interpreter: it records the process's memory after the imports,
builds one engine from requests of 32 fresh random signed 64-bit keys (or replays the
trace, saved by the parent as an int64 array, each request's keys as fresh int objects
as the service parses them), collects
garbage and records the memory again. Two growths are compared with the estimate:

- ``RSS``: resident set size (``/proc/self/statm``);
- ``in use``: bytes the allocators have handed out and not taken back: CPython's small
  object allocator (``sys._debugmallocstats``: bytes in allocated blocks) plus glibc's
  malloc (``mallinfo2``: in-use heap chunks and mmapped chunks). RSS minus in-use is memory
  the allocators keep free for reuse (freed dict tables below glibc's mmap threshold,
  partly used pymalloc arenas).

``--serve-allocator`` first tunes glibc as ``litehit serve`` does
(:func:`litehit_service.service.tune_allocator`: allocations of 1 MiB and more mapped
directly, one malloc arena), so freed dict tables go back to the system.

Flood cases (a ``max_tracked_blocks`` far below the number of keys) also sample the ratio
estimate / RSS growth 40 times over the second half of the flood, because a bounded
engine's memory cycles between compactions (``min``/``max``). Linux with glibc >= 2.33.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES: dict[str, tuple[int, int, int]] = {
    # name: (fresh keys, ttl_ns, max_tracked_blocks)
    "1M": (1_000_000, 0, 0),
    "4M": (4_000_000, 0, 0),
    "4M, ttl": (4_000_000, 10**18, 0),  # a distinct timestamp per request, nothing expires
    "flood 4M, limit 1M": (4_000_000, 0, 1_000_000),
    "flood 4M, limit 300k": (4_000_000, 0, 300_000),
    "flood 4M, limit 100k": (4_000_000, 0, 100_000),
    "flood 4M, limit 100k, ttl": (4_000_000, 10**18, 100_000),
    "flood 4M, limit 1k": (4_000_000, 0, 1_000),
}
TRACE_CASE = "mooncake trace"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
        )
    ]


def rss_bytes() -> int:
    """Resident set size of this process in bytes."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def in_use_bytes() -> int:
    """Bytes allocated and not freed: pymalloc blocks plus glibc heap and mmapped chunks."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    read_fd, write_fd = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(write_fd, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_fd)
    with os.fdopen(read_fd, encoding="ascii") as f:
        text = f.read()
    match = re.search(r"# bytes in allocated blocks\s*=\s*([\d,]+)", text)
    assert match, "sys._debugmallocstats() output changed"
    return int(match.group(1).replace(",", "")) + info.uordblks + info.hblkhd


def run_case(name: str, trace_path: str, serve_allocator: bool) -> dict[str, object]:
    """Build the case's engine in this (fresh) process; its growths and estimate."""
    import numpy as np

    from litehit_core import LiteHit

    if serve_allocator:
        from litehit_service.service import tune_allocator

        tune_allocator()

    samples: list[float] = []
    if name == TRACE_CASE:
        # the parent parsed the trace: loading it here would leave freed int objects and
        # lists behind that the engine then reuses, hiding its growth from RSS
        with np.load(trace_path) as arrays:
            flat, ends = arrays["keys"], arrays["ends"].tolist()
        gc.collect()
        base, base_used = rss_bytes(), in_use_bytes()
        engine = LiteHit()
        start = 0
        for end in ends:  # fresh int objects per request, as parsed from the wire
            engine.process_request(flat[start:end].tolist())
            start = end
        keys_total = len(flat)
    else:
        n, ttl, limit = CASES[name]
        bits = random.Random(1).getrandbits
        offset = 1 << 63
        requests = n // 32
        every = max(requests // 80, 1)
        gc.collect()
        base, base_used = rss_bytes(), in_use_bytes()
        engine = LiteHit(ttl_ns=ttl, max_tracked_blocks=limit)
        for i in range(requests):
            engine.process_request([bits(64) - offset for _ in range(32)], i)
            if limit and i >= requests // 2 and i % every == 0:
                samples.append(engine.memory_usage_bytes() / (rss_bytes() - base))
        keys_total = requests * 32
    gc.collect()
    return {
        "keys": keys_total,
        "tracked": engine.current_unique_blocks(),
        "dict": len(engine._pos),
        "rss": rss_bytes() - base,
        "in_use": in_use_bytes() - base_used,
        "estimate": engine.memory_usage_bytes(),
        "min": min(samples, default=None),
        "max": max(samples, default=None),
    }


def save_trace(trace: Path, folder: str) -> str:
    """The trace's keys as one int64 array plus request ends, in ``folder``; the file path."""
    import numpy as np
    from _trace import load_mooncake

    requests = [keys for keys, _ in load_mooncake(trace)]
    path = os.path.join(folder, "trace.npz")
    np.savez(
        path,
        keys=np.array([k for keys in requests for k in keys], np.int64),
        ends=np.cumsum([len(keys) for keys in requests], dtype=np.int64),
    )
    return path


def main() -> int:
    from _trace import DEFAULT_TRACE

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--cases", nargs="*", default=[*CASES, TRACE_CASE])
    ap.add_argument("--serve-allocator", action="store_true", help="tune glibc as serve does")
    ap.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case, print JSON
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, str(args.trace), args.serve_allocator)))
        return 0
    mib = 1 / 2**20
    print(
        f"{'case':<26} {'keys':>9} {'tracked':>9} {'dict':>9} {'RSS':>8} {'in use':>8}"
        f" {'estimate':>8}  {'est/RSS':>7} {'est/use':>7}  {'est/RSS over the flood':>22}"
    )
    folder = tempfile.mkdtemp(prefix="bench_memory_")
    for name in args.cases:
        source = str(args.trace)
        if name == TRACE_CASE:
            if not args.trace.exists():
                print(f"{name:<26} (trace not found: {args.trace})")
                continue
            source = save_trace(args.trace, folder)
        out = subprocess.run(
            [sys.executable, __file__, source, "--case", name]
            + (["--serve-allocator"] if args.serve_allocator else []),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        r = json.loads(out)
        spread = "" if r["min"] is None else f"{r['min']:.2f} .. {r['max']:.2f}"
        print(
            f"{name:<26} {r['keys']:>9,} {r['tracked']:>9,} {r['dict']:>9,}"
            f" {r['rss'] * mib:>8.1f} {r['in_use'] * mib:>8.1f} {r['estimate'] * mib:>8.1f}"
            f"  {r['estimate'] / r['rss']:>7.3f} {r['estimate'] / r['in_use']:>7.3f}"
            f"  {spread:>22}"
        )
    shutil.rmtree(folder)
    print("(MiB; growth from after the imports to after the build)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
