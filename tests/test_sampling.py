"""Sampled policy replays (issue 37): the sampler, the trunk rule, the scaling, the CLI.

Each test names the bug it catches; each was planted once and seen red.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from litehit_core.sampling import (
    TrunkLearner,
    kept,
    salt,
    sampling_keys,
    scaled_bytes,
    scaled_count,
    splitmix64,
)
from litehit_service.cli import main
from litehit_service.optimizer.optimize.config import load_optimize_config
from litehit_service.optimizer.optimize.trace import load_trace
from litehit_service.optimizer.sampling.scale import (
    Estimate,
    scaled_config,
    trunk_bytes,
    unscaled_bytes,
)
from litehit_service.optimizer.sampling.trace import SampleOptions, load_sampled, seed_trace

MIB_PER_TOKEN = 65536  # block_size 16: a block is 1 MiB
M64 = (1 << 64) - 1


def py_splitmix64(x: int) -> int:
    """The reference splitmix64 finaliser, in Python integers (the oracle)."""
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def req(t: int, keys: list[int], inst: str = "a") -> dict:
    return {"type": "request", "instance_id": inst, "timestamp_ns": t, "keys": keys,
            "input_len": 16 * len(keys) + 3}  # fmt: skip


def write_case(tmp: Path, records: list[dict], *, policy: str = "leaf_aware_lru",
               used: float = 1.0, quota: float = 0.004, mode: int = 2, batch: int = 2,
               tiers: bool = False) -> Path:  # fmt: skip
    """Two groups: g (instances a and b, quota GiB, ``used``) and h (instance c)."""
    (tmp / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def inst(i: str) -> dict:
        return {"instance_id": i, "block_size": 16, "bytes_per_token": MIB_PER_TOKEN,
                "eviction_policy_type": policy}  # fmt: skip

    groups = [
        {"group_name": "g", "quota_capacity": quota, "used_percentage": used,
         "instances": [inst("a"), inst("b")]},
        {"group_name": "h", "quota_capacity": quota / 2, "used_percentage": used,
         "instances": [inst("c")]},
    ]  # fmt: skip
    if tiers:
        groups[1]["tier_strategy"] = {"hierarchical_eviction_enabled": True}
        groups[1]["storages"] = [
            {"unique_name": "hbm", "priority": 0, "capacity": quota / 4},
            {"unique_name": "ssd", "priority": 1, "capacity": quota},
        ]
    config = {
        "trace_file_path": "trace.jsonl",
        "output_result_path": "out",
        "eviction_params": {"eviction_mode": mode, "eviction_batch_size_per_instance": batch},
        "instance_groups": groups,
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def shared_root_records(sessions: int, seed: int = 3, insts: str = "abc") -> list[dict]:
    """One shared root (key 1) under every request; each session grows its own prefix
    over a few turns (prefix-chained keys: one id per path). Timestamps tie in threes."""
    rng = random.Random(seed)
    out, next_id, t = [], 2, 0
    live: list[list[int]] = []
    for _ in range(sessions * 3):
        if not live or rng.random() < 0.35:
            live.append([1])
        path = live[rng.randrange(len(live))]
        grow = rng.randint(1, 3)
        path.extend(range(next_id, next_id + grow))
        next_id += grow
        out.append(req(1 + t // 3, list(path), rng.choice(insts)))
        t += 1
    return out


def rows_of(records) -> list[tuple[int, ...]]:
    """Each record's keys, in replay order."""
    off = records.key_off.tolist()
    return [tuple(records.keys[a:b].tolist()) for a, b in zip(off[:-1], off[1:], strict=True)]


def run(*args: str) -> int:
    return main(list(args))


def files(folder: Path, pattern: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob(pattern))}


# ------------------------------------------------------------------ the sampler


def test_hash_is_splitmix64_deterministic_per_seed_different_across_seeds():
    """Catches: a hash that is not splitmix64 (checked against the Python reference),
    a salt ignored (every seed the same sample), a non-deterministic sample."""
    rng = np.random.default_rng(1)
    keys = rng.integers(-(2**63), 2**63 - 1, 200_000, dtype=np.int64)
    got = splitmix64(keys[:50].view(np.uint64))
    assert [int(v) for v in got] == [py_splitmix64(int(k) & M64) for k in keys[:50]]
    a0, again, a1 = kept(keys, 0, 0.05), kept(keys, 0, 0.05), kept(keys, 1, 0.05)
    assert np.array_equal(a0, again)
    assert (a0 != a1).sum() > 1000
    oracle = [py_splitmix64((int(k) & M64) ^ int(salt(1))) < int(0.05 * 2**64) for k in keys[:500]]
    assert a1[:500].tolist() == oracle
    for keep in (a0, a1):  # rate R: 10,000 expected, sd ~97
        assert abs(int(keep.sum()) - 10_000) < 500
    assert kept(keys, 3, 1.0).all()


def test_sampling_key_is_the_first_block_below_the_trunk():
    """Catches: sampling by the root (the whole tree all or nothing), by the last key,
    or records entirely inside the trunk sampled together by their trunk key (measured:
    1.2 points low on Mooncake x 10, whose root-only requests went all or nothing)."""
    off = np.array([0, 3, 4, 4, 6])
    keys = np.array([1, 7, 8, 1, 1, 9], dtype=np.int64)
    trunk = np.array([1], dtype=np.int64)
    got = sampling_keys(off, keys, trunk, np.array([10, 11, 12, 13]))
    assert got[0] == 7 and got[3] == 9

    def mixed(position: int) -> int:
        return int(splitmix64(np.array([position ^ 0x5A5A], np.uint64)).view(np.int64)[0])

    assert got[1] == mixed(11) and got[2] == mixed(12)  # inside the trunk, no keys: alone


def test_trunk_learned_level_by_level_and_only_above_theta():
    """Catches: a trunk that stops at the root (its hot child left as a sampling unit
    carrying most of the traffic), or keys below the share let in."""
    recs = [[1, 2, 100 + i] for i in range(900)] + [[1, 3, 5000 + i] for i in range(100)]
    off = np.cumsum([0] + [len(r) for r in recs])
    keys = np.array([k for r in recs for k in r], dtype=np.int64)
    learner = TrunkLearner(theta=0.2)
    learner.learn(off, keys, np.arange(len(recs)))
    assert learner.trunk.tolist() == [1, 2]  # 3 carries 10 % < 20 %


def test_trunk_rule_on_one_shared_root(tmp_path):
    """Every request hangs off key 1. Catches: per-block sampling (a sampled request
    losing its trunk blocks), sampling whole trees by the root (all or nothing), a
    session split between kept and dropped, the seeds' bits sorted apart from their
    records (the timestamps tie in threes). Oracle: the Python splitmix64 of each
    request's first key below the root."""
    records = shared_root_records(1500)
    path = write_case(tmp_path, records)
    config = load_optimize_config(path)
    rate = 0.2
    sampled = load_sampled(config, SampleOptions(rate, 2, theta=0.02), max_line_bytes=1 << 20)
    assert 1 in sampled.trunk.tolist()
    whole = load_trace(config, max_line_bytes=1 << 20)
    every = rows_of(whole.records)
    trunk = set(sampled.trunk.tolist())
    for seed in (0, 1):
        st = seed_trace(sampled, seed)
        got = rows_of(st.records)
        bound = int(rate * 2**64)
        h = int(salt(seed))

        def unit(keys: tuple) -> int:
            return next(k for k in keys if k not in trunk)

        want = [r for r in every if py_splitmix64((unit(r) & M64) ^ h) < bound]
        assert got == want  # whole requests, in replay order, trunk blocks included
        assert all(r[0] == 1 for r in got)
        units = {unit(r) for r in every}
        kept_units = {unit(r) for r in got}
        n = len(units)  # sessions kept at about R (binomial, 4 sd)
        assert abs(len(kept_units) - rate * n) < 4 * (n * rate * (1 - rate)) ** 0.5
    assert sampled.records == len(records)


# ------------------------------------------------------------------ the scaling


def test_quota_scaling_formula_and_its_inverse(tmp_path):
    """Catches: the trunk scaled with the rest (plain R x Q), the trunk term exceeding a
    quota smaller than it, an infinite quota scaled, tiers or the batch left unscaled,
    used_percentage applied twice."""
    mib = 1 << 20
    assert scaled_bytes(1000 * mib, 10 * mib, 0.05) == 10 * mib + int(0.05 * 990 * mib)
    assert scaled_bytes(5 * mib, 10 * mib, 0.05) == 5 * mib  # Q < T: the quota whole
    assert scaled_bytes(-1, 10 * mib, 0.05) == -1
    assert scaled_bytes(1000, 0, 1.0) == 1000
    assert unscaled_bytes(scaled_bytes(1000 * mib, 10 * mib, 0.25), 10 * mib, 0.25) == 1000 * mib
    assert scaled_count(100, 0.05) == 5 and scaled_count(100, 0.001) == 1
    path = write_case(tmp_path, [req(1, [1, 2])], used=0.5, quota=1.0, tiers=True, batch=100)
    config = load_optimize_config(path)
    g, h = config.groups
    out = scaled_config(config, [3 * mib, 2 * mib], 0.1)
    assert out.groups[0].quota_bytes == 3 * mib + int(0.1 * (g.quota_bytes - 3 * mib))
    assert g.quota_bytes == (1 << 29)  # used_percentage 0.5, folded in once
    for t in range(2):
        q = h.tier_quota_bytes(t)
        assert out.groups[1].tier_quota_bytes(t) == 2 * mib + int(0.1 * (q - 2 * mib))
    assert out.batch_size == 10
    assert scaled_config(config, [3 * mib, 2 * mib], 1.0).groups[0].quota_bytes == g.quota_bytes


def test_trunk_bytes_count_each_instance_copy(tmp_path):
    """Catches: the trunk counted once per group when two instances each cache a copy,
    or counted per record instead of per distinct block."""
    recs = [req(1, [1, 2, 3], "a"), req(2, [1, 2, 4], "b"), req(3, [1, 5], "a"), req(4, [1], "c")]
    config = load_optimize_config(write_case(tmp_path, recs))
    trace = load_trace(config, max_line_bytes=1 << 20)
    mib = 1 << 20
    assert trunk_bytes(config, trace, np.array([1, 2], np.int64)) == [4 * mib, 1 * mib]


def test_estimate_pools_integers_and_bands_the_seeds():
    """Catches: an estimate that averages the seeds' rates instead of pooling tokens (no
    corrected rates given), a band that is not the 90 % t interval of the seeds."""
    e = Estimate((10, 30), (100, 100))
    # seeds 0.1 and 0.3: sd 0.1414, se 0.1; t(1 df, 90 %) = 6.3138
    assert e.rate == 0.2 and e.low == 0.0 and e.high == pytest.approx(0.2 + 0.63138)
    assert Estimate((1, 50), (10, 100)).rate == 51 / 110  # pooled, not (0.1 + 0.5) / 2
    assert e.text() == "≈ 20.00% (90% band 0.00..83.14%, 2 seeds)"
    assert Estimate((10,), (100,)).text() == "≈ 10.00% (1 seed, no band)"


# ------------------------------------------------------------------ the commands


def test_rate_one_equals_the_exact_replay_byte_for_byte(tmp_path, capsys):
    """optimize: every seed folder's CSVs at R = 1 are the exact run's. tradeoff: the
    sampled curve at R = 1 is the exact sweep's points. Catches: the quota changed at R =
    1 (used_percentage applied twice, the eviction batch rounded down), records dropped."""
    records = shared_root_records(400)
    path = write_case(tmp_path, records, used=0.7, quota=0.04)
    assert run("optimize", str(path), "-o", str(tmp_path / "exact"), "--max-workers", "1") == 0
    assert run("optimize", str(path), "-o", str(tmp_path / "s"), "--sample-rate", "1",
               "--sample-seeds", "2") == 0  # fmt: skip
    exact = files(tmp_path / "exact", "*_hit_rates.csv")
    assert len(exact) == 3
    hits = [float(line.rsplit(b",", 2)[-2]) for line in exact.values()]  # final AccHitRate
    assert min(hits) > 0.05  # hits that evictions decide: a quota 30 % off shows
    for seed in (0, 1):
        assert files(tmp_path / "s" / f"sample-r1-seed{seed}", "*_hit_rates.csv") == exact
    capsys.readouterr()
    assert run("tradeoff", str(path), "-o", str(tmp_path / "te"), "--num-points", "6",
               "--max-workers", "1", "--json") == 0  # fmt: skip
    ex = json.loads(capsys.readouterr().out)["policies"][0]
    assert run("tradeoff", str(path), "-o", str(tmp_path / "ts"), "--num-points", "6",
               "--max-workers", "1", "--json", "--sample-rate", "1") == 0  # fmt: skip
    sa = json.loads(capsys.readouterr().out)["policies"][0]
    assert sa["theoretical_hit_rate"] == ex["theoretical_hit_rate"]
    assert sa["peak_cached_bytes"] == ex["peak_cached_bytes"]
    assert [(p["capacity_bytes"], p["hit_rate"]) for p in sa["points"]] == [
        (p["capacity_bytes"], p["hit_rate"]) for p in ex["points"]
    ]


def test_tiered_group_at_rate_one_and_its_tier_estimates(tmp_path, capsys):
    """A tiered group (h: hbm and ssd) at R = 1 gives the exact tables byte for byte, and
    a sample labels each tier's share as an estimate with its band. Catches: a tier's
    capacity scaled without used_percentage (folded into the group's, then set to 1),
    tier estimates printed as exact figures."""
    path = write_case(tmp_path, shared_root_records(300), used=0.6, quota=0.04, tiers=True)
    assert run("optimize", str(path), "-o", str(tmp_path / "exact"), "--max-workers", "1") == 0
    assert run("optimize", str(path), "-o", str(tmp_path / "s"), "--sample-rate", "1") == 0
    exact = files(tmp_path / "exact", "*_hit_rates.csv")
    assert b"Tier1(ssd)_HitTokens" in exact["c_hit_rates.csv"]
    assert files(tmp_path / "s" / "sample-r1-seed0", "*_hit_rates.csv") == exact
    capsys.readouterr()
    assert run("optimize", str(path), "-o", str(tmp_path / "s"), "--sample-rate", "0.5",
               "--sample-seeds", "2") == 0  # fmt: skip
    text = capsys.readouterr().out
    assert re.search(r"tier 0 \(hbm\): served ≈ \d+\.\d\d% \(90% band .*, 2 seeds\)", text), text
    assert re.search(r"tier 1 \(ssd\): served ≈ ", text)


def test_estimates_and_bands_labelled_in_every_output(tmp_path, capsys):
    """Catches: an estimate printed like an exact figure (no ≈, no band), JSON without
    sample_rate / hit_rate_low / hit_rate_high, sampled tables written where an exact
    run's readers look (the output folder's *_hit_rates.csv, pareto_curve_total.csv)."""
    path = write_case(tmp_path, shared_root_records(600))
    out = tmp_path / "o"
    assert run("optimize", str(path), "-o", str(out), "--sample-rate", "0.3",
               "--sample-seeds", "3") == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "R = 0.3, 3 seeds" in text and "≈ " in text and "3 seeds)" in text and "90% band" in text
    assert not list(out.glob("*_hit_rates.csv"))
    assert sorted(p.name for p in out.iterdir()) == [f"sample-r0.3-seed{k}" for k in range(3)]
    assert run("optimize", str(path), "-o", str(out), "--sample-rate", "0.3",
               "--sample-seeds", "3", "--json") == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["sample_rate"] == 0.3 and data["sample_seeds"] == 3
    for inst in data["instances"]:
        assert inst["estimate"] is True
        assert inst["hit_rate_low"] <= inst["hit_rate"] <= inst["hit_rate_high"]
    t = tmp_path / "t"
    assert run("tradeoff", str(path), "-o", str(t), "--num-points", "5", "--sample-rate", "0.3",
               "--sample-seeds", "2", "--eviction-policies", "lru", "ttl") == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "every hit rate is an estimate" in text and "2 seeds)" in text and "90% band" in text
    assert sorted(p.name for p in (t / "pareto").iterdir()) == [
        "sampled_curve_total.csv", "sampled_curve_total.png", "sampled_multi_policy_total.png",
    ]  # fmt: skip
    rows = list(csv.DictReader(io.StringIO((t / "pareto/sampled_curve_total.csv").read_text())))
    points = [r for r in rows if r["kind"] == "point"]
    assert points and {r["policy"] for r in rows} == {"lru", "ttl"}
    for r in points:
        assert r["sample_rate"] == "0.3" and r["sample_seeds"] == "2"
        assert float(r["hit_rate_low"]) <= float(r["hit_rate"]) <= float(r["hit_rate_high"])
    assert run("tradeoff", str(path), "-o", str(t), "--num-points", "5", "--sample-rate", "0.3",
               "--json") == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["sample_rate"] == 0.3 and data["sample_seeds"] == 1
    for p in data["policies"][0]["points"]:  # one seed: a band from its own variance
        assert p["estimate"] and p["hit_rate_low"] < p["hit_rate"] < p["hit_rate_high"]


@pytest.mark.parametrize("command", ["optimize", "tradeoff"])
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--sample-rate", "0"], "'0'"),
        (["--sample-rate", "1.5"], "'1.5'"),
        (["--sample-rate", "nan"], "'nan'"),
        (["--sample-rate", "five"], "'five'"),
        (["--sample-rate", "0.1", "--sample-seeds", "0"], "'0'"),
        (["--sample-rate", "0.1", "--sample-seeds", "65"], "'65'"),
        (["--sample-seeds", "2"], "--sample-seeds 2 needs --sample-rate"),
    ],
)
def test_bad_flags_exit_2_naming_the_value(tmp_path, capsys, command, flags, named):
    """Catches: a rate of 0 or above 1 accepted (an empty or impossible sample), seeds
    outside [1, 64] (the per-record bit mask), seeds silently ignored without a rate."""
    path = write_case(tmp_path, [req(1, [1, 2])])
    try:
        code = run(command, str(path), *flags)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("command", "flag"),
    [("optimize", "--draw-chart"), ("optimize", "--compare-exact"),
     ("tradeoff", "--skip-run"), ("tradeoff", "--hit-rate-type=local")],
)  # fmt: skip
def test_options_a_sample_cannot_serve_are_refused(tmp_path, capsys, command, flag):
    """Catches: a chart or a comparison silently drawn from the exact path's missing rows."""
    path = write_case(tmp_path, [req(1, [1, 2])])
    assert run(command, str(path), "--sample-rate", "0.5", flag) == 2
    assert "--sample-rate" in capsys.readouterr().err
