"""``litehit replay --sample-rate R`` against the exact replay (issue 37): peak RSS, wall
time and the curve's error at every capacity above 1 % of the unique blocks. Not in CI.

Usage: python bench/bench_replay_sampling.py [--copies 200] [--rate 0.01] [--seeds 1 4]
       [--points 40] [--low 0.01] [--touch-order tail-first|head-first] [--hybrid]

``--touch-order head-first`` replays the group head first (LMCache's order), which a
sampled replay samples by subtree (whole requests below the learned trunk, the estimate
corrected by the block-sampled reuse) instead of by block. ``--hybrid`` makes the
instance hybrid (a 4 MiB state every 4 blocks of 1 MiB; sampled by subtree, no reuse
correction): capacities are then bytes, read at the same block counts times 2 MiB.

The Mooncake conversation trace ``copies`` times over (``_trace.write_mooncake_copies``:
fresh ids per copy, copies one after the other; 512-token blocks, Mooncake's own format
read by columns), one instance, one group with 8 capacities. Each run is ``litehit replay``
in a fresh process under a small parent that reads its peak RSS from ``wait4``
(``_trace.peak_run``): the exact replay, then ``--sample-rate R --sample-seeds K`` for each
K of ``--seeds``. A one-request trace's replay gives the start-up's RSS and wall (the
interpreter, numpy, pyarrow, the compiled engine's load), reported beside.

Errors: the exact ledger's curve and each sampled ledger's estimate
(``litehit_service.litehit.curve.ledger_curves``, the code ``litehit curve`` runs) at
``--points`` log-spaced capacities from ``--low`` (1 %) of the unique blocks U to 2 U (a
copy's own blocks are 1/copies of U, so at 40 copies and more the curve is flat from 1 %
on: ``--low 0.0005`` reads its rise too); per seed and
for the pool of K seeds (hit tokens over input tokens summed over the seeds) the largest
and the mean |sampled - exact| in points of hit rate, and the coverage of the band
``replay`` prints (a 90 % t-interval from the seeds' spread).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _trace import DEFAULT_TRACE, peak_run, write_mooncake_copies  # noqa: E402

from litehit_core.facts import read_facts  # noqa: E402
from litehit_core.sampled_facts import Estimate, SampleCounts, count_rows  # noqa: E402
from litehit_service.litehit.curve import (  # noqa: E402
    build_curves,
    ledger_curves,
    read_sample,
    sampled_curves,
)
from litehit_service.litehit.replay import sample_dir  # noqa: E402

GIB = 1 << 30
BLOCK_BYTES = 1 << 20
"""Bytes per 512-token block in the config (any value: the errors are read in blocks)."""


def unique_ids(trace: Path) -> int:
    """Distinct hash ids of one copy of the trace."""
    ids: set[int] = set()
    with open(trace, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                ids.update(json.loads(line)["hash_ids"])
    return len(ids)


HYBRID = {
    "location_spec_infos": [{"name": "hbm", "size": BLOCK_BYTES},
                            {"name": "st", "size": 4 * BLOCK_BYTES}],
    "location_spec_groups": [{"name": "full", "spec_names": ["hbm"]},
                             {"name": "lin", "spec_names": ["st"]}],
    "optimizer_state_info": {"full_location_spec_group_name": "full",
                             "linear_location_spec_group_name": "lin"},
    "linear_step": 2048,
}  # fmt: skip
"""A hybrid instance: 1 MiB blocks, a 4 MiB state every 4 blocks (2,048 tokens; 2 MiB a
block)."""
HYBRID_BYTES_PER_BLOCK = 2 * BLOCK_BYTES


def config(
    path: Path, trace: Path, unique: int, order: str = "tail-first", hybrid: bool = False
) -> Path:
    """A replay config of ``trace`` (Mooncake) with 8 capacities from 1 % of ``unique``
    blocks to all of them, touched in ``order`` (a :data:`HYBRID` instance with
    ``hybrid``)."""
    caps = np.geomspace(unique / 100, unique, 8).astype(np.int64) * BLOCK_BYTES / GIB
    path.write_text(json.dumps({
        "trace_file_path": str(trace), "trace_format": "mooncake",
        "output_result_path": str(path.parent / "out"), "block_size": 512,
        "instance_groups": [{"name": "g", "capacity_gb": [float(c) for c in caps],
                             "enable_theoretical_max_cache": True, "touch_order": order}],
        "instances": [{"instance_id": "mooncake", "instance_group": "g", "block_size": 512,
                       "location_spec_infos": [{"name": "hbm", "size": BLOCK_BYTES}],
                       "location_spec_groups": [{"name": "full", "spec_names": ["hbm"]}],
                       "optimizer_state_info": {"full_location_spec_group_name": "full"},
                       "linear_step": 0}],
    }))  # fmt: skip
    if hybrid:
        data = json.loads(path.read_text())
        data["instances"][0].update(HYBRID)
        path.write_text(json.dumps(data))
    return path


def run(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS bytes of ``litehit ARGV`` (fails loudly)."""
    wall, rss, done = peak_run(argv)
    if done.returncode != 0:
        raise SystemExit(f"litehit {' '.join(argv)} failed:\n{done.stderr}")
    return wall, rss


def hits_and_tokens(ledger: Path, caps: np.ndarray) -> tuple[np.ndarray, int]:
    """Hit tokens at ``caps`` blocks and input tokens of a ledger's (estimated) curve."""
    _, (cur,) = ledger_curves(ledger)
    return cur.hit_tokens_at_many(caps), cur.input_tokens


def uncorrected_hits(ledger: Path, caps: np.ndarray) -> np.ndarray | None:
    """A ledger sampled by subtree: hit tokens at ``caps`` of its estimate without the
    reuse correction (the plain ratio), for comparison; None for a block sample."""
    sample = read_sample(ledger)
    if sample is None or sample.unit != "subtree":
        return None
    counts = SampleCounts()
    (cur,) = build_curves(count_rows(read_facts(ledger), counts))
    counts.controls.clear()
    return counts.curve(cur, sample.rate, sample.unit).hit_tokens_at_many(caps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=200)
    ap.add_argument("--rate", type=float, default=0.01)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--points", type=int, default=40)
    ap.add_argument("--low", type=float, default=0.01)
    ap.add_argument("--touch-order", choices=("tail-first", "head-first"), default="tail-first")
    ap.add_argument("--hybrid", action="store_true")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="bench_replay_sampling_"))
    try:
        unique = unique_ids(DEFAULT_TRACE) * args.copies
        moon = work / f"m{args.copies}.jsonl"
        records, accesses = write_mooncake_copies(moon, args.copies)
        print(f"Mooncake x{args.copies}: {records:,} requests, {accesses:,} block accesses, "
              f"U = {unique:,} unique blocks, {moon.stat().st_size / 1e6:.0f} MB")  # fmt: skip
        tiny = work / "tiny.jsonl"
        tiny.write_text(DEFAULT_TRACE.read_text().splitlines()[0] + "\n")
        order = args.touch_order
        tiny_cfg = config(work / "tiny.json", tiny, unique, order, args.hybrid)
        t_wall, t_rss = run(["replay", str(tiny_cfg), "--quiet"])
        print(f"start-up (one request): wall {t_wall:.2f} s, peak RSS {t_rss / 1e6:.0f} MB")
        cfg = config(work / "c.json", moon, unique, order, args.hybrid)
        print(f"touch order {order}{', hybrid instance' if args.hybrid else ''}")
        e_wall, e_rss = run(["replay", str(cfg), "--quiet", "-o", str(work / "exact")])
        print(f"exact: wall {e_wall:.1f} s, peak RSS {e_rss / 1e6:.0f} MB")
        caps = np.unique(np.geomspace(unique * args.low, 2 * unique, args.points).astype(np.int64))
        per = HYBRID_BYTES_PER_BLOCK if args.hybrid else 1  # a hybrid curve is in bytes
        caps = caps * per
        exact_hits, tokens = hits_and_tokens(work / "exact" / "litehit_facts.csv", caps)
        shutil.rmtree(work / "exact")
        want = exact_hits / tokens
        print(f"exact hit rate at {args.low:.2%} of U {want[0]:.2%}, at U "
              f"{np.interp(unique * per, caps, want):.2%}")  # fmt: skip
        for k in args.seeds:
            out = work / f"s{k}"
            argv = ["replay", str(cfg), "--quiet", "-o", str(out),
                    "--sample-rate", str(args.rate), "--sample-seeds", str(k)]  # fmt: skip
            s_wall, s_rss = run(argv)
            per_seed = [hits_and_tokens(out / sample_dir(args.rate, s) / "litehit_facts.csv",
                                        caps)[0] for s in range(k)]  # fmt: skip
            errs = (np.array(per_seed) / tokens - want) * 100
            pooled = errs.mean(axis=0)
            bands = [Estimate(tuple(int(h[i]) for h in per_seed), (tokens,) * k)
                     for i in range(len(caps))]  # the band replay prints  # fmt: skip
            inside = [b.low <= w <= b.high for b, w in zip(bands, want, strict=True)]
            covered = float(np.mean(inside))
            print(f"R = {args.rate:g}, K = {k}: wall {s_wall:.1f} s ({s_wall / e_wall:.2f} of "
                  f"exact), peak RSS {s_rss / 1e6:.0f} MB ({e_rss / s_rss:.1f}x less; above "
                  f"start-up: {(e_rss - t_rss) / max(s_rss - t_rss, 1):.0f}x less)")  # fmt: skip
            for s in range(k):
                path = out / sample_dir(args.rate, s) / "litehit_facts.csv"
                plain = uncorrected_hits(path, caps)
                extra = ""
                if plain is not None:
                    perr = (plain / tokens - want) * 100
                    extra = (f" (uncorrected: max {np.abs(perr).max():.2f}, mean "
                             f"{np.abs(perr).mean():.2f})")  # fmt: skip
                print(f"  seed {s}: max |err| {np.abs(errs[s]).max():.2f} points, mean "
                      f"{np.abs(errs[s]).mean():.2f}, at the lowest {errs[s][0]:+.2f}"
                      f"{extra}")  # fmt: skip
            if k > 1:
                print(f"  pool of {k}: max |err| {np.abs(pooled).max():.2f} points, mean "
                      f"{np.abs(pooled).mean():.2f}; band holds the exact value at "
                      f"{covered:.0%} of {len(caps)} capacities")  # fmt: skip
            below = max(sampled_curves(out / sample_dir(args.rate, s) / "litehit_facts.csv")[2]
                        .get("mooncake", 0) for s in range(k))  # fmt: skip
            if below:
                fine = caps >= below
                held = sum(i for i, f in zip(inside, fine, strict=True) if f) if k > 1 else "-"
                print(f"  not coarse (from {below // per:,} blocks, {below // per / unique:.2%} "
                      f"of U; {int(fine.sum())} of {len(caps)} capacities): seeds' max |err| "
                      f"{np.abs(errs[:, fine]).max(initial=0):.2f}, mean "
                      f"{np.abs(errs[:, fine]).mean() if fine.any() else 0:.2f}; band holds "
                      f"{held} of them")  # fmt: skip
            worst = int(np.argmax(np.abs(errs).max(axis=0)))
            print(
                f"  worst capacity {caps[worst] // per:,} blocks "
                f"({caps[worst] // per / unique:.2%} of U): "
                f"exact {want[worst]:.2%}, seeds {np.round(errs[:, worst], 2).tolist()}"
            )
            shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
