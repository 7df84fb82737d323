"""LiteHit beside LMCache's cache simulator, on the same LMCache lookup-hash log.

Usage: python bench/bench_lmcache.py [TRACE.jsonl] [--repeat N] [--parts reader,...]
       [--lmcache-dir DIR]

(It imports the installed ``litehit``; from a checkout that is not installed, run it as
``PYTHONPATH=. python bench/bench_lmcache.py``. The first line printed names the folder.)

TRACE defaults to ../shared/traces/mooncake/conversation_trace.jsonl (Mooncake FAST'25,
512-token blocks). It is written once, into a temporary directory, as an LMCache log
(``_trace.write_lmcache_log``: 12,031 lines, chunk_size 512, bf16 [32, 512, 2048] = 64 MiB
per chunk, ``"0x"`` + 16 hex digits per complete chunk), and every part reads that file.

Parts (``PARTS``; each is ``part_<name>(ctx)``, printing its own lines; more parts can be
added without touching the others):

- ``reader``: LMCache's ``load_lookup_events`` (``lmcache==0.5.6``,
  ``tools/cache_simulator/simulator.py``: ``json.loads`` per line, hashes left as strings)
  vs LiteHit's ``read_lmcache`` (validated events with int64 keys), best and median of N
  process CPU times each, the two interleaved run by run so drifts of the host's speed hit
  both alike; the ratio of the bests. Target: LiteHit <= LMCache (ratio <= 1).

LMCache's simulator needs only the standard library (and ``sortedcontainers``): it is
imported from an unpacked wheel (``--lmcache-dir``, default ``../lmc/wheel`` next to the
shared folder), else from ``pip download lmcache==0.5.6 --no-deps`` unzipped into a
temporary directory; without either the LMCache side is skipped with a message.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, SHARED, mooncake_requests, write_lmcache_log  # noqa: E402

import litehit_service.offline.traces  # noqa: E402
from litehit_service.offline.traces import read_lmcache  # noqa: E402

LMCACHE_VERSION = "0.5.6"
SIMULATOR = "lmcache.tools.cache_simulator.simulator"


@dataclass
class Context:
    """What every part gets: the LMCache log, LMCache's simulator module (or ``None``) and
    the number of timed repeats."""

    log: Path
    n_requests: int
    simulator: ModuleType | None
    repeat: int


def cpu_times(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Process CPU seconds of ``repeat`` calls of ``fn`` (a full collection before each)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return times


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, list[float]]:
    """CPU seconds of each function, ``repeat`` rounds of one call each, in turn."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            times[name] += cpu_times(fn, 1)
    return times


def show(times: list[float]) -> str:
    return f"best {min(times) * 1e3:7.1f} ms  median {statistics.median(times) * 1e3:7.1f} ms"


# --------------------------------------------------------------------------- LMCache


def _download_wheel(into: Path) -> Path | None:
    """``pip download lmcache==0.5.6 --no-deps`` into ``into`` and unzip it; the folder
    holding the ``lmcache`` package, or ``None``."""
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"lmcache=={LMCACHE_VERSION}"]
            + ["--no-deps", "--quiet", "-d", str(into)],
            check=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"LMCache: pip download failed ({exc})")
        return None
    wheels = sorted(into.glob("lmcache-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(into / "wheel")
    return into / "wheel"


def load_simulator(wheel_dir: Path, scratch: Path) -> ModuleType | None:
    """LMCache's ``simulator`` module from the unpacked wheel at ``wheel_dir`` (or a
    downloaded one), or ``None`` with a message."""
    if not (wheel_dir / "lmcache/tools/cache_simulator/simulator.py").is_file():
        print(f"LMCache: no unpacked wheel at {wheel_dir}; trying pip download")
        found = _download_wheel(scratch)
        if found is None:
            print("LMCache: not available; its side is skipped")
            return None
        wheel_dir = found
    sys.path.insert(0, str(wheel_dir))
    logging.disable(logging.WARNING)  # lmcache/__init__ warns that torch is absent
    try:
        return importlib.import_module(SIMULATOR)
    except ImportError as exc:
        print(f"LMCache: cannot import {SIMULATOR} ({exc}); its side is skipped")
        return None
    finally:
        logging.disable(logging.NOTSET)


# --------------------------------------------------------------------------- parts


def part_reader(ctx: Context) -> None:
    """LMCache's loader vs LiteHit's reader on the same log, interleaved."""
    log = ctx.log
    events = read_lmcache(log).events
    n_keys = sum(len(e.keys) for e in events)
    print(f"reader: {ctx.n_requests:,} lines, {n_keys:,} hashes, {log.stat().st_size:,} bytes")
    fns: dict[str, Callable[[], Any]] = {"litehit read_lmcache": lambda: read_lmcache(log)}
    if ctx.simulator is not None:
        loaded = ctx.simulator.load_lookup_events([log])
        assert len(loaded) == len(events) == ctx.n_requests
        fns = {"lmcache load_lookup_events": lambda: ctx.simulator.load_lookup_events([log])}
        fns["litehit read_lmcache"] = lambda: read_lmcache(log)
    times = interleaved(fns, ctx.repeat)
    for name, t in times.items():
        print(f"  {name:27s} {show(t)}  ({min(t) / ctx.n_requests * 1e6:.2f} us/line)")
    if len(times) == 2:
        ours, theirs = min(times["litehit read_lmcache"]), min(times["lmcache load_lookup_events"])
        verdict = "met" if ours <= theirs else "MISSED"
        print(f"  ratio litehit / lmcache: {ours / theirs:.2f} (target <= 1: {verdict})")


PARTS: dict[str, Callable[[Context], None]] = {"reader": part_reader}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per side (best of N)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {list(PARTS)}")
    ap.add_argument(
        "--lmcache-dir",
        type=Path,
        default=Path(os.environ.get("LMCACHE_WHEEL_DIR", SHARED.resolve().parent / "lmc/wheel")),
        help="folder holding an unpacked lmcache wheel (default ../lmc/wheel; "
        "env LMCACHE_WHEEL_DIR)",
    )
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"unknown parts {unknown}; known: {list(PARTS)}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; trace {args.trace}")
    print(f"litehit from {Path(litehit_service.offline.traces.__file__).parents[2]}")
    with tempfile.TemporaryDirectory(prefix="bench_lmcache_") as tmp:
        scratch = Path(tmp)
        log = scratch / "lookup_hashes_mooncake.jsonl"
        n_requests = write_lmcache_log(log, mooncake_requests(args.trace))
        simulator = load_simulator(args.lmcache_dir, scratch)
        ctx = Context(log, n_requests, simulator, args.repeat)
        for name in parts:
            PARTS[name](ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
