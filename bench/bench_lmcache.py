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
- ``simulate``: LMCache's ``simulate`` at 64 GiB (report and its PNG: it always draws one)
  vs ``litehit simulate --touch-order head-first`` with ``--json --no-plot`` (target 10x)
  and with its PNG (target 3x); first checks that both give the same hit tokens.
- ``sweep``: LMCache's 30-point ``sweep`` with its defaults (0.5-500 GiB; 30 simulations
  and a PNG) vs ``litehit sweep`` (one replay, the table, the exact curve's PNG); first
  checks the 30 hit rates are equal.

``simulate`` and ``sweep`` are timed twice: in process (CPU of the command's function,
LMCache's ``run_simulate``/``run_sweep`` and LiteHit's ``cli.main``, after one untimed
call: imports, numba's cached kernels and matplotlib's font cache loaded, as in a warm
process) and as commands (wall of a fresh process each: interpreter start, imports and
loading the compiled kernels included).

LMCache's simulator needs only the standard library (and ``sortedcontainers``): it is
imported from an unpacked wheel (``--lmcache-dir``, default ``../lmc/wheel`` next to the
shared folder), else from ``pip download lmcache==0.5.6 --no-deps`` unzipped into a
temporary directory; without either the LMCache side is skipped with a message.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import (  # noqa: E402
    DEFAULT_TRACE,
    SHARED,
    interleaved,
    mooncake_requests,
    show,
    write_lmcache_log,
)

import litehit_service.traces.readers  # noqa: E402
from litehit_service.traces.readers import read_lmcache  # noqa: E402

LMCACHE_VERSION = "0.5.6"
CAPACITY_GIB = 64
GIB = 1 << 30
SIMULATOR = "lmcache.tools.cache_simulator.simulator"


@dataclass
class Context:
    """What every part gets: the LMCache log, LMCache's simulator module (or ``None``) and
    the number of timed repeats."""

    log: Path
    n_requests: int
    simulator: ModuleType | None
    repeat: int


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


def _quiet(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with its stdout and stderr thrown away (both sides print reports)."""

    def call() -> Any:
        with open(os.devnull, "w") as sink, redirect_stdout(sink), redirect_stderr(sink):
            return fn()

    return call


def _lmcache_args(ctx: Context, out: Path, **options: Any) -> argparse.Namespace:
    """The namespace LMCache's own parser would give for the log and ``options``."""
    return argparse.Namespace(
        input=[str(ctx.log)], max_samples=None, kv_bytes_per_chunk=None, model=None,
        output=str(out), **options,
    )  # fmt: skip


def _walls(argvs: dict[str, list[str]], repeat: int, env: dict[str, str]) -> dict[str, list[float]]:
    """Wall seconds of each command line run as a fresh process, interleaved, ``repeat``
    rounds (each command run once before, untimed, so both read warm caches)."""
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for round_no in range(repeat + 1):
        for name, argv in argvs.items():
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, env=env, capture_output=True)
            if round_no:
                times[name].append(time.perf_counter() - t0)
    return times


def _compare(
    label: str, times: dict[str, list[float]], ours: str, theirs: str, target: float
) -> None:
    for name, t in times.items():
        print(f"  {name:44s} {show(t)}")
    if ours in times and theirs in times:
        ratio = min(times[theirs]) / min(times[ours])
        verdict = "met" if ratio >= target else "MISSED"
        print(f"  {label}: LiteHit {ratio:.1f}x faster (target >= {target:g}x: {verdict})")


Targets = dict[str, tuple[str, str, float]]


def _side_by_side(
    ctx: Context,
    what: str,
    ours: dict[str, list[str]],
    theirs: dict[str, Any],
    cli: dict[str, list[str]],
    targets: Targets,
) -> None:
    """In-process CPU (warm: every import and compiled kernel loaded by a first call) and
    fresh-process wall times of the same commands, LMCache's and ours, interleaved."""
    from litehit_service.cli import main as litehit_main

    fns: dict[str, Callable[[], Any]] = {}
    if ctx.simulator is not None:
        fns.update({name: _quiet(fn) for name, fn in theirs.items()})
    fns.update({name: _quiet(lambda argv=argv: litehit_main(argv)) for name, argv in ours.items()})
    for fn in fns.values():
        fn()  # warm-up: imports, numba's cache, matplotlib's font cache
    print(f"{what}, in process (CPU, best of {ctx.repeat}, warm):")
    cpu = interleaved(fns, ctx.repeat)
    for label, (mine, other, target) in targets.items():
        _compare(label, {k: cpu[k] for k in (other, mine) if k in cpu}, mine, other, target)
    print(f"{what}, as commands (wall, fresh process each, best of {ctx.repeat}):")
    paths = [os.environ.get("PYTHONPATH", "")]
    if ctx.simulator is not None:  # python -m lmcache...: the unpacked wheel's folder
        paths.insert(0, str(Path(ctx.simulator.__file__).parents[3]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    argvs = {k: v for k, v in cli.items() if ctx.simulator is not None or "lmcache" not in k}
    wall = _walls(argvs, ctx.repeat, env)
    for label, (mine, other, target) in targets.items():
        _compare(label, {k: wall[k] for k in (other, mine) if k in wall}, mine, other, target)


def part_simulate(ctx: Context) -> None:
    """LMCache's ``simulate`` (report and its PNG: it always draws one) vs ``litehit
    simulate --touch-order head-first`` at 64 GiB, report alone and with the PNG; the two
    reports' numbers are checked equal first."""
    tmp = ctx.log.parent
    common = ["simulate", "-i", str(ctx.log), "--capacity-gib", str(CAPACITY_GIB),
              "--touch-order", "head-first"]  # fmt: skip
    ours = {
        "litehit simulate --json --no-plot": [*common, "--json", "--no-plot"],
        "litehit simulate (PNG)": [*common, "-o", str(tmp / "litehit_stats.png")],
    }
    theirs: dict[str, Any] = {}
    cli: dict[str, list[str]] = {name: ["litehit", *argv] for name, argv in ours.items()}
    if ctx.simulator is not None:
        _check_report(ctx)
        args = _lmcache_args(ctx, tmp / "lmcache_stats.png", cache_capacity_gib=CAPACITY_GIB)
        theirs["lmcache simulate (PNG)"] = lambda: ctx.simulator.run_simulate(args)
        cli["lmcache simulate (PNG)"] = [
            *(sys.executable, "-m", SIMULATOR, "-i", str(ctx.log)),
            *("--cache-capacity-gib", str(CAPACITY_GIB), "-o", str(tmp / "lmcache_cli.png")),
        ]
    lm = "lmcache simulate (PNG)"
    targets = {
        "report alone": ("litehit simulate --json --no-plot", lm, 10.0),
        "with the PNG": ("litehit simulate (PNG)", lm, 3.0),
    }
    _side_by_side(ctx, f"simulate at {CAPACITY_GIB} GiB", ours, theirs, cli, targets)


def _check_report(ctx: Context) -> None:
    """LMCache's simulate and ``litehit simulate --touch-order head-first`` agree on the
    aggregate numbers at the benchmark's capacity (the tests check every statistic)."""
    from litehit_service.lmcache.simulator.simulate import load_workload, replay_workload, report

    sim = ctx.simulator
    events = sim.load_lookup_events([ctx.log])
    theirs = sim.simulate(events, CAPACITY_GIB * GIB, sim.compute_kv_bytes_per_chunk(events[0]))
    ours = report(replay_workload(load_workload([str(ctx.log)]), "head-first"), CAPACITY_GIB * GIB)
    got = ours["aggregate"]
    pairs = [
        (got["hit_tokens"], theirs["total_hit_tokens"]),
        (got["total_tokens"], theirs["total_tokens"]),
        (got["evictions"], theirs["eviction_count"]),
    ]
    if any(a != b for a, b in pairs):
        raise SystemExit(f"reports differ: litehit {got} vs lmcache {theirs}")
    print(f"simulate: same hit tokens as LMCache at {CAPACITY_GIB} GiB ({got['hit_tokens']:,})")


def part_sweep(ctx: Context) -> None:
    """LMCache's 30-point ``sweep`` (30 simulations and a PNG) vs ``litehit sweep`` (one
    replay, the table, the exact curve's PNG); the two tables are checked equal first."""
    tmp = ctx.log.parent
    argv = ["sweep", "-i", str(ctx.log), "--touch-order", "head-first"]
    ours = {"litehit sweep (PNG)": [*argv, "-o", str(tmp / "litehit_sweep.png")]}
    theirs: dict[str, Any] = {}
    cli: dict[str, list[str]] = {name: ["litehit", *a] for name, a in ours.items()}
    if ctx.simulator is not None:
        plot_mod = importlib.import_module("lmcache.tools.cache_simulator.plot_hit_rate")
        _check_sweep(ctx, plot_mod)
        args = _lmcache_args(ctx, tmp / "lmcache_sweep.png", min_capacity_gib=0.5,
                             max_capacity_gib=500.0, points=30, linear=False)  # fmt: skip
        theirs["lmcache sweep (PNG)"] = lambda: plot_mod.run_sweep(args)
        cli["lmcache sweep (PNG)"] = [
            *(sys.executable, "-m", plot_mod.__name__, "-i", str(ctx.log)),
            *("-o", str(tmp / "lmcache_sweep_cli.png")),
        ]
    targets = {"sweep, 30 points": ("litehit sweep (PNG)", "lmcache sweep (PNG)", 1.0)}
    _side_by_side(ctx, "sweep 0.5-500 GiB (the defaults), 30 points", ours, theirs, cli, targets)


def _check_sweep(ctx: Context, plot_mod: ModuleType) -> None:
    """Both sweeps give the same hit rate at each of the 30 capacities."""
    from litehit_service.lmcache.simulator.simulate import load_workload, replay_workload, sweep

    sim = ctx.simulator
    events = sim.load_lookup_events([ctx.log])
    kv = sim.compute_kv_bytes_per_chunk(events[0])
    caps = plot_mod.capacity_range_bytes(0.5, 500.0, 30)
    ours = sweep(replay_workload(load_workload([str(ctx.log)]), "head-first"), caps)["points"]
    theirs = [sim.simulate(events, c, kv, fast=True)["token_hit_rate"] for c in caps]
    same = sum(p["hit_rate"] == t for p, t in zip(ours, theirs, strict=True))
    if same != len(caps):
        raise SystemExit(f"sweeps differ at {len(caps) - same} of {len(caps)} capacities")
    print(f"sweep: same hit rate as LMCache at {same}/{len(caps)} capacities")


PARTS: dict[str, Callable[[Context], None]] = {
    "reader": part_reader,
    "simulate": part_simulate,
    "sweep": part_sweep,
}


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
    print(f"litehit from {Path(litehit_service.__file__).parents[1]}")
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
