"""The reference optimizer's own example configurations run unchanged apart from the
trace path: its startup configuration (group-level ``tier_flows``, ``ttl_config``,
storages without ``priority``), its README's minimal configuration and its use cases 1-4
(infinite pool, finite pool, HBM + DRAM write-through, three tiers with per-edge flows in
``tier_strategy.tier_flows``), each through ``litehit optimize -c CONFIG`` with the
reference's flags, writing the files its README tells users to read. The configurations
are written out field for field as the reference documents them; only
``trace_file_path`` and ``output_result_path`` point into the test's folder, and the
trace's instance ids are the configurations'.

Each catches a field of the reference's the configuration loader refuses or misreads (a
run that exits 2), a file under another name, and (case 1, infinite pool) a hit count
other than the naive count of paths seen before.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from tests.conftest import run_cli

LRU_PARAMS = {"sample_rate": 1.0, "shard_count": 1, "sample_times": 32,
              "eviction_amplification_factor": 1.0}  # fmt: skip
FLAT_STRATEGY = {"hierarchical_eviction_enabled": False, "write_mode": "write_through",
                 "access_propagation_enabled": True, "promote_enabled": True,
                 "selective_write_threshold": 2}  # fmt: skip


def _instance(instance_id: str, block_size: int, bytes_per_token: int, **params) -> dict:
    return {"instance_id": instance_id, "block_size": block_size,
            "bytes_per_token": bytes_per_token, "eviction_policy_type": "lru",
            "eviction_policy_params": params or LRU_PARAMS}  # fmt: skip


def startup_group() -> dict:
    """The reference's optimizer_startup_config_load.json, its one group."""
    return {
        "group_name": "instance_group_01", "quota_capacity": 240, "used_percentage": 1.0,
        "tier_flows": [
            {"from_tier": "pace_00", "to_tier": "hf3fs_00", "write_mode": "write_through",
             "access_propagation_enabled": True, "write_propagation_enabled": False,
             "promote_enabled": True, "selective_write_threshold": 2}
        ],
        "ttl_config": {"default_block_ttl_seconds": 0, "refresh_on_read": True},
        "storages": [
            {"unique_name": "pace_00", "storage_type": "pace", "band_width_mbps": 20000,
             "capacity": 200},
            {"unique_name": "hf3fs_00", "storage_type": "hf3fs", "band_width_mbps": 20000,
             "capacity": 40},
        ],
        "instances": [_instance("instance", 64, 32768, sample_rate=0.1)],
    }  # fmt: skip


def minimal_group() -> dict:
    """The reference README's minimal non-tiered LRU configuration (step 3)."""
    return {"group_name": "instance_group_01", "quota_capacity": 12000, "used_percentage": 1.0,
            "tier_strategy": FLAT_STRATEGY, "default_block_ttl_seconds": 0,
            "ttl_refresh_on_read": True, "storages": [],
            "instances": [_instance("instance-a", 16, 512)]}  # fmt: skip


def case_1() -> dict:
    return {"group_name": "global_pool", "quota_capacity": -1, "used_percentage": 1.0,
            "tier_strategy": FLAT_STRATEGY, "storages": [],
            "instances": [_instance("global", 256, 512)]}  # fmt: skip


def case_2() -> dict:
    return {"group_name": "finite_pool", "quota_capacity": 742.18, "used_percentage": 1.0,
            "tier_strategy": FLAT_STRATEGY, "storages": [],
            "instances": [_instance("global", 256, 512)]}  # fmt: skip


TIER = {"storage_type": "hbm", "band_width_mbps": 20000}


def case_3() -> dict:
    return {
        "group_name": "tiered_pool", "quota_capacity": 1, "used_percentage": 1.0,
        "tier_strategy": {"hierarchical_eviction_enabled": True, "write_mode": "write_through",
                          "access_propagation_enabled": False, "promote_enabled": True,
                          "selective_write_threshold": 2},
        "storages": [
            {"unique_name": "hbm", **TIER, "priority": 0, "capacity": 1167},
            {"unique_name": "dram", **TIER, "storage_type": "dram", "priority": 1,
             "capacity": 1070.4},
        ],
        "instances": [_instance("global", 256, 512)],
    }  # fmt: skip


def case_4() -> dict:
    edge = {"access_propagation_enabled": False, "promote_enabled": True}
    return {
        "group_name": "tiered_pool", "quota_capacity": 1, "used_percentage": 1.0,
        "tier_strategy": {
            "hierarchical_eviction_enabled": True, "write_mode": "write_through",
            "access_propagation_enabled": False, "promote_enabled": True,
            "selective_write_threshold": 2,
            "tier_flows": [
                {"from_tier": "hbm", "to_tier": "dram", "write_mode": "write_through", **edge},
                {"from_tier": "dram", "to_tier": "l3", "write_mode": "cascading", **edge},
            ],
        },
        "storages": [
            {"unique_name": "hbm", **TIER, "priority": 0, "capacity": 1167},
            {"unique_name": "dram", **TIER, "storage_type": "dram", "priority": 1,
             "capacity": 960},
            {"unique_name": "l3", **TIER, "storage_type": "ssd", "priority": 2,
             "capacity": 2048},
        ],
        "instances": [_instance("global", 256, 512)],
    }  # fmt: skip


CASES = {
    "startup": (startup_group, ["pace_00", "hf3fs_00"]),
    "minimal": (minimal_group, []),
    "case_1": (case_1, []),
    "case_2": (case_2, []),
    "case_3": (case_3, ["hbm", "dram"]),
    "case_4": (case_4, ["hbm", "dram", "l3"]),
}


def _trace(path: Path, instance_id: str, block_size: int, seed: int) -> list[list[int]]:
    """Requests over a few shared prefixes, prefix-chained keys; the reads' keys."""
    rng = random.Random(seed)
    ids: dict[tuple[int, ...], int] = {}
    reads, lines = [], []
    for t in range(1, 201):
        tokens = [rng.randrange(3)] + [rng.randrange(8) for _ in range(rng.randint(0, 6))]
        keys = [ids.setdefault(tuple(tokens[: j + 1]), len(ids) + 1) for j in range(len(tokens))]
        reads.append(keys)
        lines.append(json.dumps({"type": "request", "instance_id": instance_id,
                                 "timestamp_ns": t * 1000, "keys": keys,
                                 "input_len": block_size * len(keys) + 7}) + "\n")  # fmt: skip
    path.write_text("".join(lines))
    return reads


@pytest.mark.parametrize("name", list(CASES))
def test_the_references_example_configuration_runs_unchanged(tmp_path, name):
    make, tiers = CASES[name]
    group = make()
    inst = group["instances"][0]
    reads = _trace(tmp_path / "trace.jsonl", inst["instance_id"], inst["block_size"], 3)
    config = {
        "trace_file_path": str(tmp_path / "trace.jsonl"),
        "output_result_path": str(tmp_path / "result"),
        "eviction_params": {"eviction_mode": 1, "eviction_batch_size_per_instance": 100},
        "instance_groups": [group],
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config, indent=4))
    done = run_cli("optimize", "-c", str(path), "--draw-chart", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "result"
    rows = list(
        csv.DictReader((out / f"{inst['instance_id']}_hit_rates.csv").read_text().splitlines())
    )
    assert len(rows) == len(reads)
    header = list(rows[0])
    for i, tier in enumerate(tiers):  # the columns the reference's README says to read
        for column in (f"Tier{i}({tier})_HitTokens", f"AccTier{i}({tier})_HitRate",
                       f"Tier{i}({tier})_BlockNum"):  # fmt: skip
            assert column in header
    chart = "per_tier_timeseries.png" if tiers else "multi_instance_cache_analysis.png"
    assert (out / "timeseries" / chart).stat().st_size > 10_000
    if name == "case_1":  # infinite pool: a block hits iff its path was written before
        seen: set[tuple[int, ...]] = set()
        hits = 0
        for keys in reads:
            for j in range(len(keys)):
                if tuple(keys[: j + 1]) not in seen:
                    break
                hits += 1
            seen.update(tuple(keys[: j + 1]) for j in range(len(keys)))
        tokens = sum(256 * len(k) + 7 for k in reads)
        assert int(rows[-1]["AccHitTokens"]) == hits * 256
        assert int(rows[-1]["AccInputTokens"]) == tokens
