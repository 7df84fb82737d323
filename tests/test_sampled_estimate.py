"""The reuse-corrected estimate of a sampled replay and its 90 % band (issue 37).

Oracles: the reuse of a trace counted with Python sets, the regression estimator's
closed form on hand-made units, and the exact replay of a seeded trace. Each test names
the bug it catches; each was planted once and seen red.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from test_sampling import shared_root_records, write_case

from litehit_core.sampled_estimate import (
    Reuse,
    ReuseSketch,
    pair_ids,
    regression_estimate,
    sample_reuse,
    t90,
)
from litehit_core.sampled_facts import Estimate
from litehit_service.optimizer.optimize.config import load_optimize_config
from litehit_service.optimizer.optimize.run import run_optimize
from litehit_service.optimizer.optimize.trace import load_trace
from litehit_service.optimizer.sampling.optimize import run_sampled
from litehit_service.optimizer.sampling.trace import SampleOptions, load_sampled


def random_reads(seed: int, n: int = 400) -> tuple[list[list[int]], list[int], list[bool]]:
    """Records (keys head first, prefix-chained by construction), instances, is-read."""
    rng = random.Random(seed)
    paths: list[list[int]] = [[1]]
    keys, insts, reads = [], [], []
    next_id = 2
    for _ in range(n):
        base = list(rng.choice(paths)) if rng.random() < 0.7 else [1]
        base = base[: rng.randint(1, len(base))]
        for _ in range(rng.randint(0, 3)):
            base.append(next_id)
            next_id += 1
        paths.append(base)
        keys.append(base)
        insts.append(rng.randrange(3))
        reads.append(rng.random() < 0.8)
    return keys, insts, reads


def oracle_reuse(keys, insts, reads) -> list[int]:
    """Per record: its keys already read on its instance by an earlier read (or earlier in
    itself); writes 0. The literal definition, with a set."""
    seen: set[tuple[int, int]] = set()
    out = []
    for ks, i, r in zip(keys, insts, reads, strict=True):
        n = 0
        if r:
            for k in ks:
                n += (i, k) in seen
                seen.add((i, k))
        out.append(n)
    return out


def test_t90_is_students_t():
    """Catches: a one-sided quantile (1.2816), a normal quantile for few seeds, a table
    read off by one degree of freedom."""
    assert t90(1) == pytest.approx(6.3138, abs=1e-4)
    assert t90(3) == pytest.approx(2.3534, abs=1e-4)
    assert t90(10) == pytest.approx(1.8125, abs=1e-4)
    assert t90(30) == pytest.approx(1.6973, abs=0.002)
    assert t90(1000) == pytest.approx(1.6464, abs=0.001)
    with pytest.raises(ValueError, match="got 0"):
        t90(0)


def test_pair_ids_tell_instances_apart():
    """Catches: the same block on two instances counted as one pair (an instance's reuse
    credited with another's reads)."""
    ids = pair_ids(np.array([5, 5, 5, 6], np.int64), np.array([0, 1, 0, 0]))
    assert ids[0] == ids[2] and len(set(ids.tolist())) == 3


def test_sample_reuse_matches_the_literal_definition():
    """Catches: writes counted as reads, the first read of a pair counted as reuse, pairs
    shared across instances, a record's own repeated key missed."""
    keys, insts, reads = random_reads(11)
    keys[5] = [1, 1]  # a key twice in one record: the second is reuse
    reads[5] = True
    off = np.cumsum([0] + [len(k) for k in keys])
    flat = np.array([k for ks in keys for k in ks], np.int64)
    got = sample_reuse(off, flat, np.array(insts), np.array(reads), np.array([16, 32, 64]))
    reuse = oracle_reuse(keys, insts, reads)
    want = [n * (16, 32, 64)[i] for n, i in zip(reuse, insts, strict=True)]
    assert got.tolist() == want


INPUTS = [1000, 1000, 1000]  # the reads' input tokens per instance (the caller's count)


def sketch_of(keys, insts, reads, rate, seeds) -> ReuseSketch:
    sketch = ReuseSketch(rate, seeds, 3)
    half = len(keys) // 2
    for part in (slice(0, half), slice(half, None)):  # two batches: dedup across them
        ks, ins, rs = keys[part], insts[part], reads[part]
        flat = np.array([k for kk, r in zip(ks, rs, strict=True) for k in kk if r], np.int64)
        per = np.array([i for kk, i, r in zip(ks, ins, rs, strict=True) for _ in kk if r])
        sketch.add(flat, per)
    return sketch


def test_reuse_sketch_is_exact_at_rate_one_and_unbiased_below():
    """Catches: distinct pairs not deduplicated across batches, the 1/R scaling missing
    or applied to N, a variance off by a factor (the z-scores' spread would not be ~1),
    a seed whose sample is not its own."""
    keys, insts, reads = random_reads(5, 600)
    oracle = oracle_reuse(keys, insts, reads)
    exact = [sum(n for n, i in zip(oracle, insts, strict=True) if i == j) * 16 for j in range(3)]
    whole = sketch_of(keys, insts, reads, 1.0, 1).reuse(0, [16, 16, 16], INPUTS)
    assert [w.tokens for w in whole] == exact and all(w.variance == 0 for w in whole)
    sketch = sketch_of(keys, insts, reads, 0.3, 64)
    z = []
    for seed in range(64):
        est = sketch.reuse(seed, [16, 16, 16], INPUTS)
        total = est[0] + est[1] + est[2]
        z.append((total.tokens - sum(exact)) / total.variance**0.5)
    assert abs(statistics.mean(z)) < 3 / 8  # unbiased: mean of 64 z-scores
    assert 0.6 < statistics.stdev(z) < 1.4  # the variance formula is the spread's
    again = sketch_of(keys, insts, reads, 0.3, 64).reuse(7, [16, 16, 16], INPUTS)
    assert again == sketch.reuse(7, [16, 16, 16], INPUTS)


def test_regression_estimate_closed_forms():
    """Catches: the whole trace's reuse ignored (β = 0 always), β of the wrong sign, the
    variance missing the reuse estimate's term or the finite-population factor, rate 1
    not giving the sample's own ratio exactly."""
    x = np.array([100.0, 200.0, 300.0, 400.0])
    z = np.array([10.0, 80.0, 30.0, 120.0])
    h = 0.5 * z  # hits exactly half the reuse: β = 0.5, no residual
    whole = Reuse(tokens=300.0, variance=400.0, input_tokens=1000)
    est, var = regression_estimate(h, x, z, whole, 0.1)
    assert est == pytest.approx(0.5 * 0.3) and var == pytest.approx(0.25 * 400 / 1000**2)
    # rate 1: the whole is the sample; the estimate is the sample's own ratio, exactly
    h2 = np.array([3.0, 50.0, 7.0, 90.0])
    same = Reuse(tokens=float(z.sum()), variance=0.0, input_tokens=1000)
    assert regression_estimate(h2, x, z, same, 1.0) == (h2.sum() / x.sum(), 0.0)
    # an independent computation of the general case
    est, var = regression_estimate(h2, x, z, whole, 0.2)
    t = x.sum()
    a, b = (h2 - h2.sum() / t * x) / t, (z - z.sum() / t * x) / t
    beta = (a @ b) / (b @ b)
    assert est == pytest.approx(h2.sum() / t + beta * (0.3 - z.sum() / t))
    resid = a - beta * b
    assert var == pytest.approx(0.8 * 4 / 3 * (resid @ resid) + beta**2 * 400 / 1000**2)


def test_estimate_band_from_variances_and_spread():
    """Catches: the seeds' own variances ignored (one seed without a band), the spread's
    t quantile replaced by the normal one, the mean of rates replaced by pooled tokens
    when rates are given."""
    one = Estimate((10,), (100,), (0.2,), (0.0004,))
    assert one.low == pytest.approx(0.2 - 1.6448536 * 0.02)
    assert one.high == pytest.approx(0.2 + 1.6448536 * 0.02)
    two = Estimate((10, 40), (100, 100), (0.2, 0.3), (1e-8, 1e-8))
    assert two.rate == pytest.approx(0.25)  # the mean of the rates, not 50 / 200
    sd = statistics.stdev([0.2, 0.3])
    assert two.high == pytest.approx(0.25 + 6.3138 * sd / 2**0.5, abs=1e-4)


def quota_case(tmp: Path, sessions: int) -> Path:
    """A quota (100 GiB) above the trace's blocks: no scaled-cache bias, only sampling."""
    return write_case(tmp, shared_root_records(sessions, seed=9, insts="a"), policy="lru",
                      quota=100.0, mode=3)  # fmt: skip


def test_corrected_estimate_is_sharper_and_its_band_holds_the_exact_rate(tmp_path):
    """Catches: the correction making the estimate worse than the plain ratio (β or the
    sketch wrong), a band narrower than the estimate's real spread (the seeds' 1-seed
    bands would miss the exact value often)."""
    config = load_optimize_config(quota_case(tmp_path, 900))
    exact = run_optimize(config, load_trace(config, max_line_bytes=1 << 20)).instances[0].rows
    want = exact.hit_tokens / exact.total_input_tokens
    sampled = load_sampled(config, SampleOptions(0.3, 24), max_line_bytes=1 << 20)
    run = run_sampled(config, sampled, workers=1)
    est = run.estimate(0)
    plain = [h / n for h, n in zip(est.hits, est.inputs, strict=True)]
    corrected = est.per_seed
    err_plain = statistics.mean(abs(p - want) for p in plain)
    err_corrected = statistics.mean(abs(c - want) for c in corrected)
    assert err_corrected < 0.6 * err_plain, (err_corrected, err_plain)
    held = sum(
        Estimate((h,), (n,), (r,), (v,)).low <= want <= Estimate((h,), (n,), (r,), (v,)).high
        for h, n, r, v in zip(est.hits, est.inputs, est.rates, est.variances, strict=True)
    )
    assert held >= 16, held  # a 90 % band: ~21.6 of 24 expected
    assert est.low <= want <= est.high


def test_small_scaled_caches_are_flagged_coarse(tmp_path, capsys):
    """Catches: the coarse flag missing from an output, inverted, or measured against the
    sample's own requests instead of the whole trace's average read."""
    from litehit_service.cli import main

    records = shared_root_records(300, seed=4, insts="a")
    mean_blocks = statistics.mean(len(r["keys"]) for r in records)
    for quota, want in ((0.2, True), (2.0, True), (100.0, False)):
        path = write_case(tmp_path, records, policy="lru", quota=quota, mode=3)
        assert main(["optimize", str(path), "-o", str(tmp_path / "o"), "--sample-rate", "0.3",
                     "--json"]) == 0  # fmt: skip
        a = json.loads(capsys.readouterr().out)["instances"][0]
        assert a["coarse"] is want
        held = min(a["sampled_capacity_blocks"]) / mean_blocks
        assert a["scaled_cache_requests"] == pytest.approx(held)
        assert main(["optimize", str(path), "-o", str(tmp_path / "o"), "--sample-rate", "0.3"]) == 0
        text = capsys.readouterr().out
        assert ("coarse: the scaled cache holds" in text) is want
        if want:  # the rate that would hold 200 requests: 0.3 x 200 / held
            enough = re.search(r"--sample-rate (\S+) or more holds 200", text)
            assert enough and float(enough[1]) == pytest.approx(min(1, 60 / held), rel=0.05)
        assert main(["optimize", str(path), "-o", str(tmp_path / "o"), "--sample-rate", "1",
                     "--json"]) == 0  # fmt: skip
        exact = json.loads(capsys.readouterr().out)["instances"][0]  # rate 1 scales nothing
        assert exact["coarse"] is False and exact["scaled_cache_requests"] is None
    big = shared_root_records(1500, seed=4, insts="a")
    path = write_case(tmp_path, big, policy="lru", quota=1.0, mode=3)
    out = tmp_path / "t"
    assert main(["tradeoff", str(path), "-o", str(out), "--num-points", "6", "--sample-rate",
                 "0.3"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO((out / "pareto/sampled_curve_total.csv").read_text())))
    flags = [r["coarse"] for r in rows if r["kind"] == "point"]
    assert flags[0] == "true" and flags[-1] == "false", flags  # small capacities first
    assert "coarse points (scaled cache under 200 average requests) read low" in text
    assert main(["tradeoff", str(path), "-o", str(out), "--num-points", "6", "--sample-rate",
                 "1"]) == 0  # fmt: skip
    assert "coarse" not in capsys.readouterr().out  # rate 1 scales nothing
