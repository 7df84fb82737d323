"""Sampled policy replays against the exact ones (issue 37): error tables, band coverage,
the trade-off's wall time. Not in CI (minutes on 2 cores).

Usage: python bench/bench_sampling.py [--copies 10] [--bailian-requests 150000]
       [--rates 0.05 0.01] [--seeds 4] [--thetas 0.01 0.05] [--no-cli]
       [--workers 2] [--only mooncake|bailian] [--policies lru ...]

Two traces, one instance, 512-token blocks, eviction mode 3, batch 100, no delay:

- **Mooncake x copies**: the conversation trace ``copies`` times over, each copy with
  fresh keys and after the one before (``_trace.write_standard_copies``): one shared
  root per copy;
- **Bailian-like**: ``synthetic.SyntheticTrace`` (seed 7) with 4,096 sessions, Zipf
  (1.1) popular shared system prompts, multi-turn sessions growing their own prefixes,
  40 % of sessions ending after each turn (a long tail of one-off prompts).

Per trace, U = its unique blocks; per policy (lru, leaf_aware_lru, random_lru with
sample_rate 0.1, ttl with fallback_on_pressure and a 300 s default TTL) x quota (0.5 %,
2 %, 8 %, 25 % of U): the exact replay's hit rate, and per R the estimate of seed 0
alone (what ``--sample-seeds 1`` prints) with its own 90 % band, the estimate of
``--seeds`` seeds with theirs, whether each band holds the exact value, and a summary of
the uncorrected estimates (hit tokens / input tokens of the sample) for comparison
(before them, the spread of one seed's estimate at infinite quota over
``--spread-seeds`` seeds, uncorrected and corrected, with the sampled units a seed
holds). Then the same
at R = 5 % with the other trunk shares (``--thetas``) and with the plain scaling R x Q
(no trunk term), as summaries. Then (``--no-cli`` skips it) the wall time of ``litehit
tradeoff --num-points 12 --eviction-policies leaf_aware_lru`` exact and with
``--sample-rate 0.05`` on Mooncake x copies, each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import peak_run, write_standard_copies  # noqa: E402
from synthetic import Shape, SyntheticTrace  # noqa: E402

from litehit_service.offline.pool import TracePool  # noqa: E402
from litehit_service.optimizer.optimize.config import load_optimize_config  # noqa: E402
from litehit_service.optimizer.optimize.trace import load_trace  # noqa: E402
from litehit_service.optimizer.sampling.estimate import (  # noqa: E402
    SeedTask,
    combine,
    replay_point,
    seed_sample,
)
from litehit_service.optimizer.sampling.scale import (  # noqa: E402
    Estimate,
    scaled_config,
    trunk_bytes,
)
from litehit_service.optimizer.sampling.trace import (  # noqa: E402
    SampleOptions,
    load_sampled,
)
from litehit_service.optimizer.tradeoff.points import at_capacity  # noqa: E402
from litehit_service.optimizer.tradeoff.pool import ReplayTask, TradeoffPool  # noqa: E402

BLOCK = 512
BYTES_PER_TOKEN = 1024  # a block is 512 KiB: every quota here is a whole number of blocks
POLICIES = {
    "lru": ("lru", {}),
    "leaf_aware_lru": ("leaf_aware_lru", {}),
    "random_lru": ("random_lru", {"sample_rate": 0.1}),
    "ttl": ("ttl", {"fallback_on_pressure": True}),
}
QUOTAS = (0.005, 0.02, 0.08, 0.25)
TTL_S = 300


def config_json(trace: Path, policy: str, out: Path) -> dict:
    kind, params = POLICIES[policy]
    inst = {"instance_id": "conv", "block_size": BLOCK, "bytes_per_token": BYTES_PER_TOKEN,
            "eviction_policy_type": kind}  # fmt: skip
    if params:
        inst["eviction_policy_params"] = params
    return {
        "trace_file_path": str(trace),
        "output_result_path": str(out),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 100},
        "trace_replay": {"write_delay_ns": 0},
        "instance_groups": [{
            "group_name": "g", "quota_capacity": -1, "used_percentage": 1.0,
            "default_block_ttl_seconds": TTL_S if policy == "ttl" else 0,
            "instances": [inst],
        }],
    }  # fmt: skip


def write_bailian(path: Path, requests: int) -> None:
    """The Bailian-like trace (module docstring) as standard JSONL requests."""
    gen = SyntheticTrace(seed=7, shape=Shape(slots=4096, system_zipf=1.1, end_probability=0.4))
    with open(path, "w", encoding="utf-8") as out:
        done = 0
        while done < requests:
            keys, off, times = gen.chunk(min(8192, requests - done))
            lines = []
            for r in range(len(times)):
                k = keys[off[r] : off[r + 1]]
                listed = ",".join(map(str, k.tolist()))
                lines.append(
                    f'{{"type":"request","instance_id":"conv","timestamp_ns":{int(times[r])},'
                    f'"keys":[{listed}],"input_len":{len(k) * BLOCK + 100}}}\n'
                )
            out.write("".join(lines))
            done += len(times)


def run_cells(tasks: list[tuple[str, ReplayTask]], traces: dict, workers: int) -> list:
    """Every task's Point, over a pool of ``workers`` forked processes."""
    with TradeoffPool(traces, workers=workers) as pool:
        futs = [pool.submit(t) for _, t in tasks]
        return [f.result() for f in futs]


def configs(folder: Path, trace: Path) -> dict:
    out = {}
    for policy in POLICIES:
        path = folder / f"{trace.stem}_{policy}.json"
        path.write_text(json.dumps(config_json(trace, policy, folder / "out")))
        out[policy] = load_optimize_config(path)
    return out


def quota_bytes(unique: int, share: float) -> int:
    return max(1, round(unique * share)) * BLOCK * BYTES_PER_TOKEN


def exact_table(cfgs: dict, unique: int, workers: int) -> dict:
    traces = {"plain": load_trace(next(iter(cfgs.values())), max_line_bytes=1 << 26)}
    if "ttl" in cfgs:
        traces["ttl"] = load_trace(cfgs["ttl"], max_line_bytes=1 << 26)
    tasks = []
    for policy, cfg in cfgs.items():
        for share in QUOTAS:
            key = "ttl" if policy == "ttl" else "plain"
            c = at_capacity(cfg, [quota_bytes(unique, share)])
            tasks.append(((policy, share), ReplayTask(key, policy, 0, c)))
    points = run_cells(tasks, traces, workers)
    return {cell: p.hit_rate for (cell, _), p in zip(tasks, points, strict=True)}


def sampled_table(
    cfgs: dict, unique: int, rate: float, seeds: int, theta: float, plain: bool, workers: int
) -> dict:
    """(policy, share) -> Estimate over the seeds (corrected by the trace's reuse, as the
    commands report it); ``RAW[(policy, share)]``: the uncorrected one."""
    opts = SampleOptions(rate, seeds, theta)
    start = time.perf_counter()
    first = next(iter(cfgs.values()))
    samples = {"plain": load_sampled(first, opts, max_line_bytes=1 << 26)}
    if "ttl" in cfgs:
        samples["ttl"] = load_sampled(cfgs["ttl"], opts, max_line_bytes=1 << 26)
    read_s = time.perf_counter() - start
    traces, trunks = {}, {}
    for key, s in samples.items():
        for k in range(seeds):
            t = seed_sample(s, k, cfgs["ttl" if key == "ttl" else next(iter(cfgs))])
            traces[f"{key}#{k}"] = t
            trunks[f"{key}#{k}"] = [0] if plain else trunk_bytes(first, t.trace, s.trunk)
    tasks = []
    for policy, cfg in cfgs.items():
        key = "ttl" if policy == "ttl" else "plain"
        for share in QUOTAS:
            placed = at_capacity(cfg, [quota_bytes(unique, share)])
            for k in range(seeds):
                name = f"{key}#{k}"
                c = scaled_config(placed, trunks[name], rate)
                tasks.append(((policy, share, k), SeedTask(name, policy, 0, c)))
    start = time.perf_counter()
    with TracePool(traces, workers=workers) as pool:
        futs = [pool.submit(replay_point, t, t.key) for _, t in tasks]
        points = [f.result().estimate for f in futs]
    replay_s = time.perf_counter() - start
    by_cell: dict = {}
    for ((policy, share, _k), _), p in zip(tasks, points, strict=True):
        by_cell.setdefault((policy, share), []).append(p)
    out = {}
    for cell, ps in by_cell.items():
        out[cell] = combine(ps)
        RAW[cell] = Estimate(out[cell].hits, out[cell].inputs)
    trunk = len(samples["plain"].trunk)
    print(f"  sample R={rate:g} K={seeds} theta={theta:g}{' plain' if plain else ''}: trunk "
          f"{trunk} blocks, read {read_s:.1f} s, {len(tasks)} replays {replay_s:.1f} s",
          flush=True)  # fmt: skip
    return out


RAW: dict = {}
"""The last :func:`sampled_table`'s uncorrected estimates (hit tokens / input tokens)."""


def first_seed(e: Estimate) -> Estimate:
    """Seed 0 alone, as ``--sample-seeds 1`` reports it."""
    rates = None if e.rates is None else e.rates[:1]
    variances = None if e.variances is None else e.variances[:1]
    return Estimate(e.hits[:1], e.inputs[:1], rates, variances)


def table(name: str, exact: dict, est: dict, rate: float) -> tuple[list[float], list[float], int]:
    """Print one markdown table; the seed-0 errors, the pooled errors and the cells whose
    band holds the exact value."""
    k = len(next(iter(est.values())).hits)
    print(f"\n{name}, R = {rate:g} (hit rates in %; err in points)\n")
    print(f"| policy | quota | exact | seed 0 | err | its band | in | K={k} | err | band | in |")
    print("|---|---:|---:|---:|---:|---|---|---:|---:|---|---|")
    e1, ek, inside, inside1 = [], [], 0, 0
    for (policy, share), h in exact.items():
        e = est[(policy, share)]
        one = first_seed(e)
        holds, holds1 = e.low <= h <= e.high, one.low <= h <= one.high
        inside += holds
        inside1 += holds1
        e1.append(abs(one.rate - h) * 100)
        ek.append(abs(e.rate - h) * 100)
        print(f"| {policy} | {share * 100:g} % | {h * 100:.2f} | {one.rate * 100:.2f} | "
              f"{e1[-1]:.2f} | {one.low * 100:.2f}..{one.high * 100:.2f} | "
              f"{'yes' if holds1 else 'no'} | {e.rate * 100:.2f} | {ek[-1]:.2f} | "
              f"{e.low * 100:.2f}..{e.high * 100:.2f} | {'yes' if holds else 'no'} |")  # fmt: skip
    print(f"\nseed 0: max {max(e1):.2f}, mean {statistics.mean(e1):.2f}, its band holds exact "
          f"in {inside1} of {len(exact)}; K={k}: max {max(ek):.2f}, mean "
          f"{statistics.mean(ek):.2f}, band holds exact in {inside} of {len(exact)}")  # fmt: skip
    if RAW:
        print(f"uncorrected (hit tokens / input tokens of the sample): {summary(exact, RAW)}")
    return e1, ek, inside


def summary(exact: dict, est: dict) -> str:
    e1 = [abs(est[c].per_seed[0] - h) * 100 for c, h in exact.items()]
    ek = [abs(est[c].rate - h) * 100 for c, h in exact.items()]
    inside = sum(est[c].low <= h <= est[c].high for c, h in exact.items())
    return (
        f"seed 0 max {max(e1):.2f} mean {statistics.mean(e1):.2f}; pooled max "
        f"{max(ek):.2f} mean {statistics.mean(ek):.2f}; band {inside}/{len(exact)}"
    )


def spread(cfg, rates: list[float], seeds: int, workers: int) -> None:
    """The spread of one seed's estimate at infinite quota (lru): over ``seeds`` seeds, the
    mean and sd of the estimate against the exact value, and the sampled units (distinct
    sampling keys kept) per seed: what the README's rule for R rests on."""
    whole = load_trace(cfg, max_line_bytes=1 << 26)
    inf = at_capacity(cfg, [-1])
    exact = run_cells([("x", ReplayTask("w", "lru", -1, inf))], {"w": whole}, 1)[0].hit_rate
    del whole
    for rate in rates:
        s = load_sampled(cfg, SampleOptions(rate, seeds), max_line_bytes=1 << 26)
        traces = {f"s{k}": seed_sample(s, k, cfg) for k in range(seeds)}
        units = [t.n_units for t in traces.values()]
        with TracePool(traces, workers=workers) as pool:
            futs = [pool.submit(replay_point, SeedTask(k, "lru", -1, inf), k) for k in traces]
            got = [f.result().estimate for f in futs]
        plain = [p.hit_tokens / p.input_tokens * 100 for p in got]
        fixed = [p.rate * 100 for p in got]
        sd, sd_fixed = statistics.stdev(plain), statistics.stdev(fixed)
        u = statistics.mean(units)
        print(f"  R={rate:g}: exact {exact * 100:.2f} %, {seeds} seeds: uncorrected mean "
              f"{statistics.mean(plain):.2f} % sd {sd:.2f} points, corrected mean "
              f"{statistics.mean(fixed):.2f} % sd {sd_fixed:.2f} (mean one-seed se "
              f"{statistics.mean(p.variance**0.5 for p in got) * 100:.2f}); sampled units "
              f"{u:,.0f} a seed; uncorrected sd x sqrt(units) = {sd * u**0.5:.0f}",
              flush=True)  # fmt: skip


def cli_walls(folder: Path, trace: Path) -> None:
    cfg = folder / "cli.json"
    cfg.write_text(json.dumps(config_json(trace, "leaf_aware_lru", folder / "cli_out")))
    base = ["tradeoff", str(cfg), "--num-points", "12", "--eviction-policies", "leaf_aware_lru"]
    env = dict(os.environ)
    for name, extra in (
        ("exact", []),
        ("sampled R=0.05", ["--sample-rate", "0.05"]),
        ("sampled R=0.05 K=4", ["--sample-rate", "0.05", "--sample-seeds", "4"]),
    ):
        wall, rss, done = peak_run([*base, *extra, "-o", str(folder / name.replace(" ", "_"))],
                                   env=env)  # fmt: skip
        if done.returncode:
            print(done.stderr)
        print(f"tradeoff {name}: {wall:.1f} s wall, peak RSS {rss / 2**20:.0f} MiB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--bailian-requests", type=int, default=150_000)
    ap.add_argument("--rates", type=float, nargs="+", default=[0.05, 0.01])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--thetas", type=float, nargs="*", default=[0.01, 0.05])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--only", choices=("mooncake", "bailian"), default=None)
    ap.add_argument("--policies", nargs="+", choices=list(POLICIES), default=list(POLICIES))
    ap.add_argument("--spread-seeds", type=int, default=30)
    ap.add_argument("--no-errors", action="store_true", help="only the spread and the CLI")
    args = ap.parse_args()
    for name in [p for p in POLICIES if p not in args.policies]:
        del POLICIES[name]
    print(f"bench_sampling: {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        traces = {}
        if args.only in (None, "mooncake"):
            moon = folder / f"mooncake_x{args.copies}.jsonl"
            write_standard_copies(moon, args.copies, block_size=BLOCK)
            traces[f"Mooncake x{args.copies}"] = moon
        if args.only in (None, "bailian"):
            bail = folder / "bailian_like.jsonl"
            write_bailian(bail, args.bailian_requests)
            traces["Bailian-like"] = bail
        for name, path in traces.items():
            cfgs = configs(folder, path)
            whole = load_trace(next(iter(cfgs.values())), max_line_bytes=1 << 26)
            unique = len(np.unique(whole.records.keys))
            n_req, n_keys = len(whole.records.kinds), len(whole.records.keys)
            print(f"\n## {name}: {n_req:,} requests, {n_keys:,} keys, {unique:,} unique blocks",
                  flush=True)  # fmt: skip
            del whole
            spread(next(iter(cfgs.values())), args.rates, args.spread_seeds, args.workers)
            if args.no_errors:
                continue
            start = time.perf_counter()
            exact = exact_table(cfgs, unique, args.workers)
            print(f"  exact: {len(exact)} replays {time.perf_counter() - start:.1f} s", flush=True)
            for rate in args.rates:
                est = sampled_table(cfgs, unique, rate, args.seeds, 0.02, False, args.workers)
                table(name, exact, est, rate)
            rate = args.rates[0]
            for theta in args.thetas:
                est = sampled_table(cfgs, unique, rate, args.seeds, theta, False, args.workers)
                print(f"  theta {theta:g}: {summary(exact, est)}")
            est = sampled_table(cfgs, unique, rate, args.seeds, 0.02, True, args.workers)
            print(f"  plain scaling R x Q: {summary(exact, est)}")
        if not args.no_cli and args.only in (None, "mooncake"):
            print()
            cli_walls(folder, traces[f"Mooncake x{args.copies}"])


if __name__ == "__main__":
    main()
