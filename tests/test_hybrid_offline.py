"""Hybrid linear/Mamba instances offline: replay config -> facts ledger v2 -> query and curve
in bytes, against the typed byte-LRU oracle and the online manager."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pytest
from oracle import NaiveHybridLRU, tree_trace

from litehit_core import FACTS_HEADER_MODELS, normalize_request, query_facts, read_facts
from litehit_service.cli import main
from litehit_service.litehit.config import load_config
from litehit_service.litehit.curve import build_curves
from litehit_service.litehit.replay import run_replay
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.policy import QueryPolicy

GIB = 1024**3
WORKED = [[1, 2, 3], [1, 2, 3], [1, 2, 4, 5], [1, 2, 3], [1, 6], [1, 2, 4, 5, 7]]


def hybrid_instance(
    iid: str,
    group: str = "g",
    block_size: int = 4,
    full: int = 1024,
    linear: int = 2048,
    step_tokens: int = 8,
) -> dict[str, Any]:
    return {
        "instance_id": iid,
        "instance_group": group,
        "block_size": block_size,
        "location_spec_infos": [{"name": "kv", "size": full}, {"name": "state", "size": linear}],
        "location_spec_groups": [
            {"name": "full", "spec_names": ["kv"]},
            {"name": "lin", "spec_names": ["state"]},
        ],
        "optimizer_state_info": {
            "full_location_spec_group_name": "full",
            "linear_location_spec_group_name": "lin",
        },
        "linear_step": step_tokens,
    }


def lru_instance(iid: str, group: str = "g", block_size: int = 4, size: int = 1024) -> dict:
    return {
        "instance_id": iid,
        "instance_group": group,
        "block_size": block_size,
        "location_spec_infos": [{"name": "kv", "size": size}],
        "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}],
        "optimizer_state_info": {"full_location_spec_group_name": "full"},
        "linear_step": 0,
    }


def write_config(
    tmp: Path, events: list[dict], groups: list[dict], instances: list[dict], **top: Any
) -> Path:
    (tmp / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events), "utf-8")
    config = {
        "trace_file_path": "trace.jsonl",
        "output_result_path": "out",
        "block_size": 4,
        "instance_groups": groups,
        "instances": instances,
        **top,
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def get(iid: str, ts: int, keys: list[int], input_len: int, trace_id: str) -> dict:
    return {
        "type": "get",
        "instance_id": iid,
        "timestamp_ns": ts,
        "keys": keys,
        "input_len": input_len,
        "trace_id": trace_id,
    }


WORKED_LEDGER = (
    FACTS_HEADER_MODELS + "\n"
    'r1,h,1,12,4,1024,hybrid,"[]"\n'
    'r2,h,2,12,4,1024,hybrid,"[[4096,2],[7168,3]]"\n'
    'r3,h,3,16,4,1024,hybrid,"[[4096,2]]"\n'
    'r4,h,4,12,4,1024,hybrid,"[[4096,2],[11264,3]]"\n'
    'r5,h,5,8,4,1024,hybrid,"[]"\n'
    'r6,h,6,20,4,1024,hybrid,"[[7168,2],[14336,4]]"\n'
)

WORKED_TABLE = """\
instance h: 6 requests, 80 input tokens, blocks of 4 tokens = 1024 bytes \
(model hybrid: capacities in bytes)
theoretical max (infinite capacity): hit rate 0.600000 (48 hit tokens), \
first reached at 14336 bytes = 1.33514e-05 GiB
  capacity_gib  capacity_bytes  hit_rate  of_max  mark
    3.8147e-06            4096  0.300000   50.0%
   6.67572e-06            7168  0.450000   75.0%
   1.04904e-05           11264  0.500000   83.3%
   1.33514e-05           14336  0.600000  100.0%  90%, 95%, 99% of max; max
"""

WORKED_CSV = """\
instance_id,capacity_blocks,capacity_bytes,capacity_gb,hit_tokens,hit_rate
h,0,0,0.0,0,0.0
h,0,4095,3.8137659430503845e-06,0,0.0
h,0,4096,3.814697265625e-06,24,0.3
h,0,7167,6.6747888922691345e-06,24,0.3
h,0,7168,6.67572021484375e-06,36,0.45
h,0,11263,1.0489486157894135e-05,36,0.45
h,0,11264,1.049041748046875e-05,40,0.5
h,0,14335,1.3350509107112885e-05,40,0.5
h,0,14336,1.33514404296875e-05,48,0.6
"""


def test_worked_example_replay_query_curve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [get("h", i + 1, k, 4 * len(k), f"r{i + 1}") for i, k in enumerate(WORKED)]
    group = {
        "name": "g",
        "capacity_gb": [4096 / GIB, 8192 / GIB],
        "enable_theoretical_max_cache": True,
    }
    cfg = write_config(tmp_path, events, [group], [hybrid_instance("h")])
    assert main(["replay", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "h (group g, block 4 tokens, 6 requests): token hit rate" in out
    assert "30.00%" in out and "45.00%" in out and "inf 60.00%" in out
    ledger = tmp_path / "out" / "litehit_facts.csv"
    assert ledger.read_text(encoding="utf-8") == WORKED_LEDGER

    gbs = [repr(4096 / GIB), repr(8192 / GIB), "-1"]
    assert main(["query", str(ledger), "--capacity-gib", *gbs]) == 0
    lines = [json.loads(s) for s in capsys.readouterr().out.splitlines()]
    assert [r["hit_blocks"] for r in lines[:6]] == [
        [0, 0, 0],
        [2, 3, 3],
        [2, 2, 2],
        [2, 2, 3],
        [0, 0, 0],
        [0, 2, 4],
    ]
    assert lines[6]["instance_id"] == "h"
    assert lines[6]["total_hit_tokens"] == [24, 36, 48]
    assert lines[6]["hit_rates"] == [24 / 80, 36 / 80, 48 / 80]
    # one byte short of a threshold is the step below: projection never floors to blocks
    assert main(["query", str(ledger), "--summary-only", "--capacity-gib", repr(7167 / GIB)]) == 0
    (summary, _) = [json.loads(s) for s in capsys.readouterr().out.splitlines()]
    assert summary["total_hit_tokens"] == [24]

    csv_path, png = tmp_path / "curve.csv", tmp_path / "curve.png"
    assert main(["curve", str(ledger), "--csv", str(csv_path), "-o", str(png)]) == 0
    assert capsys.readouterr().out == WORKED_TABLE
    assert csv_path.read_text(encoding="utf-8") == WORKED_CSV
    assert png.stat().st_size > 10_000


def test_random_traces_offline_equal_online_and_the_byte_lru_oracle(tmp_path: Path) -> None:
    """A ledger mixing hybrid instances (s in 1, 2, 3, 7; L from F/2 to 30F; a coarser
    block; TTL) with a full-attention one; every request to every instance. Each hybrid
    instance is queried on and one byte around every threshold its facts name and compared
    with one naive byte LRU per capacity; the group's slots also with the online manager."""
    rng = random.Random(11)
    paths = tree_trace(rng, 160, max_new=7, min_new=1)
    events, t = [], 1_000_000_000
    for i, keys in enumerate(paths):
        t += rng.choice([0, 10**8, 7 * 10**8, 3 * 10**9])
        events.append(get("x", t, keys, 4 * len(keys) + rng.randrange(4), f"q{i}"))
    slots = [3000 / GIB, 20000 / GIB, 90000 / GIB]
    groups = [
        {"name": "g", "capacity_gb": slots, "enable_theoretical_max_cache": True},
        {"name": "t", "capacity_gb": slots, "ttl_seconds": 2},
    ]
    lanes = {  # iid: (block tokens, F, L, s, ttl ns)
        "s1": (4, 1024, 512, 1, 0),
        "s2": (4, 1024, 8192, 2, 0),
        "s3": (4, 1000, 30000, 3, 0),
        "s7": (4, 1024, 3072, 7, 0),
        "b8": (8, 2048, 4096, 2, 0),
        "tt": (4, 1024, 4096, 2, 2 * 10**9),
    }
    instances = [
        hybrid_instance(iid, "t" if ttl else "g", bs, f, lin, s * bs)
        for iid, (bs, f, lin, s, ttl) in lanes.items()
    ] + [lru_instance("full")]
    cfg = write_config(tmp_path, events, groups, instances, fanout_all_instances=True)
    config = load_config(cfg)
    summary = run_replay(config, progress=False)
    rows = list(read_facts(summary.facts_path))
    assert len(rows) == len(paths) * len(instances)
    assert {r.model for r in rows} == {"hybrid", "lru"}

    online = OnlineOptimizerManager(policy=QueryPolicy.offline(trace_block_size_tokens=4))
    for g in config.instance_groups:
        online.create_group(g)
    for reg in config.instances:
        online.register_instance(reg)

    for iid, (bs, f, lin, s, ttl) in lanes.items():
        mine = [r for r in rows if r.instance_id == iid]
        keys = [normalize_request(e["keys"], e["input_len"], bs, False, 4)[0] for e in events]
        times = [e["timestamp_ns"] for e in events]
        thresholds = sorted({c for r in mine for c, _ in r.hit_curve})
        assert len(thresholds) > 5, iid  # the trace really hits at several capacities
        caps = sorted({max(0, c + d) for c in thresholds for d in (-1, 0, 1)})
        caps = caps[:: max(1, len(caps) // 40)] + [caps[-1]]  # bounded work per lane
        oracles = [NaiveHybridLRU(c, f, lin, s, ttl) for c in caps]
        expected = [
            [o.request(k, now) for o in oracles] for k, now in zip(keys, times, strict=True)
        ]
        projected = query_facts(mine, [c / GIB for c in caps])
        got = [p["hit_blocks"] for p in projected if "summary" not in p]
        assert got == expected, iid
        # the group's slots online (same manager, same policy) agree row by row
        on = [
            list(online.trace_query(iid, e["keys"], e["input_len"], timestamp_ns=now).hit_blocks)
            for e, now in zip(events, times, strict=True)
        ]
        at_slots = query_facts(mine, slots)
        assert [p["hit_blocks"] for p in at_slots if "summary" not in p] == on, iid

    # the curve of each hybrid instance is a staircase in bytes equal to the query
    for curve in build_curves(rows):
        if curve.instance_id == "full":
            assert curve.unit == "blocks"
            continue
        assert curve.unit == "bytes" and curve.unit_bytes == 1
        for c, h in curve.breakpoints()[::7]:
            (s_row,) = [
                p
                for p in query_facts(rows, [c / GIB])
                if p.get("summary") and p.get("instance_id") == curve.instance_id
            ]
            assert s_row["total_hit_tokens"] == [h]


def test_hybrid_rules_are_reported_at_the_config_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = hybrid_instance("h", step_tokens=6)
    cfg = write_config(
        tmp_path, [get("h", 1, [1], 4, "r")], [{"name": "g", "capacity_gb": [1]}], [bad]
    )
    assert main(["replay", str(cfg)]) == 2
    err = capsys.readouterr().err
    line = cfg.read_text().splitlines().index('  "instances": [') + 2  # the entry's brace
    assert err == (
        f"{cfg}:{line}: instances[0]: linear_step of instance_id 'h' is in tokens and must be "
        "a positive multiple of block_size 4 tokens, got 6; 6 blocks would be 24 tokens\n"
    )
    assert not (tmp_path / "out" / "litehit_facts.csv").exists()


def test_curve_csv_of_a_mixed_ledger_names_units(tmp_path: Path) -> None:
    events = [get("h", i + 1, k, 4 * len(k), f"r{i + 1}") for i, k in enumerate(WORKED)]
    group = {"name": "g", "capacity_gb": [4096 / GIB]}
    cfg = write_config(
        tmp_path, events, [group], [hybrid_instance("h"), lru_instance("f")],
        fanout_all_instances=True,
    )  # fmt: skip
    assert main(["replay", str(cfg)]) == 0
    out = tmp_path / "c.csv"
    assert (
        main(["curve", str(tmp_path / "out" / "litehit_facts.csv"), "--no-png", "--csv", str(out)])
        == 0
    )
    with open(out, newline="") as fh:
        recs = list(csv.DictReader(fh))
    f_rows = [r for r in recs if r["instance_id"] == "f"]
    h_rows = [r for r in recs if r["instance_id"] == "h"]
    # blocks for the full-attention instance, bytes for the hybrid one
    assert all(int(r["capacity_bytes"]) == 1024 * int(r["capacity_blocks"]) for r in f_rows)
    assert all(r["capacity_blocks"] == "0" for r in h_rows)
    assert [int(r["capacity_bytes"]) for r in h_rows][-1] == 14336
