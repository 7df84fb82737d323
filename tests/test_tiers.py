"""Tiered storage (spec §7): the compiled replay against the naive tiered oracle
(tests/tier_oracle.py) row for row -- hits per serving tier and blocks per tier included --
for every write mode x propagation x promotion, every policy and eviction mode, with every
invariant checked after each chunk; the spec's worked example 5 through ``litehit
optimize``; the per-tier CSV columns, summary and chart."""

from __future__ import annotations

import json
import math
import random

import pytest

from litehit_core.engine import POLICIES
from litehit_core.policy_replay import InstanceSetup, ReplaySetup, TierSetup, replay
from litehit_service.optimizer.optimize.tier_config import WRITE_MODES
from tests.test_optimize import req, run_cli, write_case
from tests.test_policy_replay import random_trace, to_arrays
from tests.tier_oracle import TieredOracle


def run_both(policies, tier_quotas, strategy, mode, batch, delay, records, groups=None):
    groups = groups or [0] * len(policies)
    ttl_values = sorted({r[5] for r in records if r[5]})
    instances = []
    for i, policy in enumerate(policies):
        p = POLICIES[policy]
        instances.append(
            dict(
                policy=policy,
                group=groups[i],
                bpb=1 + i % 2,
                sample=math.floor(batch / 0.5) if p.dense else 0,
                fallback=True,
                refresh=True,
            )
        )
    members = [
        tuple(i for i in range(len(policies)) if groups[i] == g) for g in range(len(tier_quotas))
    ]
    oracle = TieredOracle(instances, tier_quotas, members, mode, batch, delay, strategy)
    expected = oracle.run(records)
    tier = TierSetup(
        quotas=(),
        write_mode=WRITE_MODES.index(strategy["write_mode"]),
        propagate=strategy["propagate"],
        promote=strategy["promote"],
        threshold=strategy["threshold"],
    )
    setup = ReplaySetup(
        tuple(
            InstanceSetup(
                POLICIES[d["policy"]].kind,
                d["group"],
                d["bpb"],
                d["sample"],
                True,
                True,
                POLICIES[d["policy"]].dense,
            )
            for d in instances
        ),  # fmt: skip
        tuple(q[0] for q in tier_quotas),
        tuple(members),
        tuple(ttl_values),
        mode,
        batch,
        delay,
        tiers=tuple(tier._replace(quotas=tuple(q)) for q in tier_quotas),
    )
    result = replay(setup, to_arrays(records, ttl_values), check=True)
    return expected, [tuple(r) for r in result.rows.tolist()], result


STRATEGIES = [
    dict(write_mode=w, propagate=p, promote=pr, threshold=th)
    for w in WRITE_MODES
    for p in (True, False)
    for pr in (False, True)
    for th in ((2,) if w != "write_through_selective" else (1, 2, 3))
]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: "-".join(str(v) for v in s.values()))
@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_strategy_matches_the_oracle(strategy, policy):
    for seed in range(3):
        rng = random.Random(seed * 31 + len(policy))
        records = random_trace(rng, 2, 150, ("get", "write", "request"), (0, 0, 40))
        quotas = [[rng.randint(3, 8), rng.randint(4, 12), rng.choice((-1, 20))]]
        mode = rng.choice((1, 2, 3))
        batch = rng.choice((1, 2, 4))
        delay = rng.choice((0, 0, 5))
        expected, got, _ = run_both([policy, policy], quotas, strategy, mode, batch, delay, records)
        assert got == expected, (seed, quotas, mode, batch, delay)


def test_tiered_and_untiered_groups_share_a_run():
    """A group without tiers beside a tiered one: its rows report its hits as tier 0's,
    its quota is its own; CachedBlocksAllInstances sums every tier of every instance."""
    rng = random.Random(7)
    records = random_trace(rng, 3, 200, ("get", "write", "request"), (0,))
    strategy = dict(write_mode="cascading", propagate=True, promote=True, threshold=2)
    expected, got, _ = run_both(
        ["lru", "random_lru", "lru"], [[4, 9], [6]], strategy, 3, 1, 0, records,
        groups=[0, 0, 1],
    )  # fmt: skip
    # the oracle gives the untiered instance one tier: its columns line up with the kernel's
    # after padding the second tier with zeros
    padded = [row if len(row) == 10 else (*row[:6], row[6], 0, row[7], 0) for row in expected]
    assert got == padded


def test_one_tier_is_the_untiered_replay():
    """A tiered group with one storage replays exactly as the same quota untiered."""
    rng = random.Random(3)
    records = random_trace(rng, 2, 200, ("get", "write", "request"), (0, 30))
    strategy = dict(write_mode="write_through", propagate=True, promote=False, threshold=2)
    expected, got, _ = run_both(["leaf_aware_lru", "ttl"], [[5]], strategy, 1, 2, 0, records)
    assert got == expected


def _tiered_case(tmp_path, records, storages, **strategy):
    config = write_case(tmp_path, records)
    data = json.loads(config.read_text())
    group = data["instance_groups"][0]
    group["tier_strategy"] = {"hierarchical_eviction_enabled": True, **strategy}
    group["storages"] = storages
    config.write_text(json.dumps(data))
    return config


def test_worked_example_5_cascading_with_promotion(tmp_path):
    """Spec §11 example 5: hbm (2 blocks) then ssd (10 blocks), request [1,2,3] twice:
    the first write puts 3 blocks into hbm, which demotes [1] to ssd; the second read hits
    all 3: Tier0(hbm) 32 tokens, Tier1(ssd) 16."""
    config = _tiered_case(
        tmp_path,
        [req(1, [1, 2, 3], input_len=48), req(2, [1, 2, 3], input_len=48)],
        [
            {"unique_name": "ssd", "priority": 1, "capacity": 10 / 1024},
            {"unique_name": "hbm", "priority": 0, "capacity": 2 / 1024},
        ],
        write_mode="cascading",
        promote_enabled=True,
    )
    done = run_cli("optimize", str(config), "--draw-chart", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "out" / "a_hit_rates.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert header[-8:] == [  # spec section 6: four groups, each over the tiers
        "Tier0(hbm)_HitTokens", "Tier1(ssd)_HitTokens",
        "Tier0(hbm)_HitRate", "Tier1(ssd)_HitRate",
        "AccTier0(hbm)_HitRate", "AccTier1(ssd)_HitRate",
        "Tier0(hbm)_BlockNum", "Tier1(ssd)_BlockNum",
    ]  # fmt: skip
    second = dict(zip(header, lines[2].split(","), strict=True))
    # after it: hbm holds [1,2] and [1,2,3] (2 blocks, its capacity), ssd [1]
    assert (second["Tier0(hbm)_BlockNum"], second["Tier1(ssd)_BlockNum"]) == ("2", "1")
    assert second["HitTokens"] == "48"
    assert (second["Tier0(hbm)_HitTokens"], second["Tier1(ssd)_HitTokens"]) == ("32", "16")
    assert (second["Tier0(hbm)_HitRate"], second["AccTier1(ssd)_HitRate"]) == (
        "0.666667",
        "0.166667",
    )
    # after the second read: the promotion of [1] into hbm made hbm evict down to 2 again,
    # demoting its oldest ([1] itself: promoted before [1,2] and [1,2,3] were touched) to
    # ssd, which already held it
    assert (second["CachedBlocks"], second["CachedBlocksAllInstances"]) == ("3", "3")
    assert (tmp_path / "out" / "timeseries" / "per_tier_timeseries.png").stat().st_size > 10_000
    assert "tier 0 (hbm): served 33.33% of input tokens" in done.stdout
    assert "tier 1 (ssd): served 16.67% of input tokens" in done.stdout


def test_write_through_fills_every_tier_and_summary_json(tmp_path):
    config = _tiered_case(
        tmp_path,
        [req(1, [1, 2, 3], input_len=48), req(2, [1, 2, 3, 4], input_len=64)],
        [
            {"unique_name": "hbm", "priority": 0, "capacity": 2 / 1024},
            {"unique_name": "dram", "priority": 5, "capacity": -1},
        ],
    )
    done = run_cli("optimize", str(config), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (inst,) = json.loads(done.stdout)["instances"]
    assert inst["cached_blocks"] == 2 + 4
    assert inst["tiers"] == [
        {"name": "hbm", "hit_tokens": 32, "cached_blocks": 2, "evicted_blocks": 2},
        {"name": "dram", "hit_tokens": 16, "cached_blocks": 4, "evicted_blocks": 0},
    ]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_analysis_mode_changes_no_row(policy):
    """Keeping every node and recording lives (``analyse``) gives the same rows, and the
    lives agree with the cache at every check (tiers, demotions and TTLs included)."""
    rng = random.Random(11)
    records = random_trace(rng, 2, 300, ("get", "write", "request"), (0, 25))
    strategy = dict(write_mode="cascading", propagate=False, promote=True, threshold=2)
    expected, got, result = run_both([policy, policy], [[4, 7]], strategy, 3, 2, 0, records)
    assert got == expected
    ttl_values = sorted({r[5] for r in records if r[5]})
    setup = result_setup(policy, ttl_values)
    kept = replay(setup._replace(analyse=True), to_arrays(records, ttl_values), check=True)
    assert kept.rows.tolist() == result.rows.tolist()
    lives = kept.arrays.lives
    assert len(lives) == int((lives[:, 6] == 0).sum() + (lives[:, 3] >= 0).sum())
    assert int((lives[:, 6] == 0).sum()) == int(kept.cached.sum())


def result_setup(policy, ttl_values):
    p = POLICIES[policy]
    return ReplaySetup(
        tuple(
            InstanceSetup(
                p.kind, 0, 1 + i, math.floor(2 / 0.5) if p.dense else 0, True, True, p.dense
            )
            for i in range(2)
        ),  # fmt: skip
        (4,),
        ((0, 1),),
        tuple(ttl_values),
        3,
        2,
        0,
        tiers=(TierSetup((4, 7), WRITE_MODES.index("cascading"), False, True, 2),),
    )


def test_readme_tiered_walkthrough(tmp_path, mooncake):
    """The README's tiered example (docs/tiered.json, which reads the shared Mooncake
    trace beside the checkout) prints the lines the README shows, and every command of
    the walkthrough runs on it (tradeoff refuses it, saying why)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # docs/tiered.json reads traces/conversation_trace.jsonl of the clone: the same
    # configuration with the shared trace's path, writing under tmp_path
    shipped = json.loads((root / "docs" / "tiered.json").read_text())
    assert shipped["trace_file_path"] == "../traces/conversation_trace.jsonl"
    assert shipped["output_result_path"].startswith("../out/")  # ignored by git
    config = tmp_path / "tiered.json"
    config.write_text(json.dumps({**shipped, "trace_file_path": str(mooncake)}))
    from doc_pages import section

    text = section("Tiered storage: HBM, DRAM, SSD")
    shown = text[text.index("$ litehit optimize docs/tiered.json") :].splitlines()[1:6]
    done = run_cli("optimize", str(config), "--draw-chart", "-o", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == shown
    assert (tmp_path / "o" / "timeseries" / "per_tier_timeseries.png").is_file()
    for command in ("lifecycle", "export-tree"):
        ran = run_cli(command, str(config), "-o", str(tmp_path / "o"))
        assert ran.returncode == 0, ran.stderr
    refused = run_cli("tradeoff", str(config), "-o", str(tmp_path / "t"))
    assert refused.returncode == 2 and "is tiered" in refused.stderr


@pytest.mark.parametrize("where", ["group", "tier_strategy"])
def test_per_edge_flows_end_to_end_against_the_oracle(tmp_path, where):
    """Spec section 7a through ``litehit optimize`` (the reference's README case 4 shape):
    storages listed without priorities (ordered as listed), write_through hbm -> dram
    without write or access propagation (a rewrite or a hit refreshes hbm's copy only)
    and with promotion,
    cascading dram -> l3 without access or write propagation;
    every CSV row's hits, cached blocks and per-tier columns against the tier oracle's."""
    rng = random.Random(4)
    raw = random_trace(rng, 1, 300, ("request", "get", "write"), (0,))
    records = [(k, i, t * 1000, keys, [0] * len(keys), 0) for k, i, t, keys, _m, _ttl in raw]
    flows = [
        {"from_tier": "hbm", "to_tier": "dram", "write_mode": "write_through",
         "promote_enabled": True, "write_propagation_enabled": False,
         "access_propagation_enabled": False},
        {"from_tier": "dram", "to_tier": "l3", "write_mode": "cascading",
         "write_propagation_enabled": False, "access_propagation_enabled": False},
    ]  # fmt: skip
    storages = [
        {"unique_name": "hbm", "capacity": 3 / 1024},
        {"unique_name": "dram", "capacity": 6 / 1024},
        {"unique_name": "l3", "capacity": 10 / 1024},
    ]
    extra = {"storages": storages}
    if where == "group":
        extra["tier_flows"] = flows
    else:
        extra["tier_strategy"] = {"tier_flows": flows}
    path = write_case(tmp_path, [req(t, keys, kind=k) for k, _i, t, keys, _m, _ttl in records],
                      mode=2, batch=2, group_extra=extra)  # fmt: skip
    done = run_cli("optimize", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "out" / "a_hit_rates.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert header[-3:] == ["Tier0(hbm)_BlockNum", "Tier1(dram)_BlockNum", "Tier2(l3)_BlockNum"]
    edges = [
        dict(write_mode="write_through", access=False, write=False, promote=True),
        dict(write_mode="cascading", access=False, write=False, promote=False),
    ]
    strategy = dict(write_mode="write_through", propagate=True, promote=False, threshold=2,
                    edges=edges)  # fmt: skip
    inst = dict(policy="lru", group=0, bpb=1, sample=0, fallback=True, refresh=True)
    expected = TieredOracle([inst], [[3, 6, 10]], [(0,)], 2, 2, 0, strategy).run(records)
    assert len(expected) == len(lines) - 1 > 100
    for row, line in zip(expected, lines[1:], strict=True):
        got = dict(zip(header, line.split(","), strict=True))
        _r, local, remote, cached, _all, _acc, *tiers = row
        assert int(got["HitBlocks"]) == local + remote
        assert int(got["CachedBlocks"]) == cached
        assert [int(got[f"Tier{t}({n})_HitTokens"]) for t, n in
                enumerate(("hbm", "dram", "l3"))] == [16 * h for h in tiers[:3]]  # fmt: skip
        assert [int(got[f"Tier{t}({n})_BlockNum"]) for t, n in
                enumerate(("hbm", "dram", "l3"))] == tiers[3:]  # fmt: skip
    assert sum(int(line.split(",")[header.index("Tier2(l3)_HitTokens")])
               for line in lines[1:]) > 0  # the cascading edge did put blocks in l3  # fmt: skip
