"""Touch order through the replay: the configuration's `touch_order`, `--touch-order`,
the ledger's model column, queries and curves in blocks, and the online refusal."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from oracle import oracle_hits, tree_trace

from litehit_core import FACTS_HEADER, FACTS_HEADER_MODELS, query_facts, read_facts
from litehit_service.cli import main
from litehit_service.errors import InvalidArgument
from litehit_service.litehit.curve import build_curves
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.model import InstanceGroup
from litehit_service.policy import QueryPolicy

GIB = 1024**3


def write_setup(tmp: Path, trace, touch_order: str | None, **instance) -> Path:
    events = [
        {"type": "get", "instance_id": "i", "timestamp_ns": n + 1, "keys": keys,
         "input_len": 4 * len(keys) + 1}
        for n, keys in enumerate(trace)
    ]  # fmt: skip
    (tmp / "t.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    group = {"name": "g", "capacity_gb": [3 * 1024 / GIB], "enable_theoretical_max_cache": True}
    if touch_order is not None:
        group["touch_order"] = touch_order
    config = {
        "trace_file_path": "t.jsonl",
        "output_result_path": "out",
        "block_size": 4,
        "instance_groups": [group],
        "instances": [
            {
                "instance_id": "i",
                "instance_group": "g",
                "block_size": 4,
                "location_spec_infos": [{"name": "kv", "size": 1024}],
                "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}],
                **instance,
            }
        ],
    }
    (tmp / "c.json").write_text(json.dumps(config, indent=2))
    return tmp / "c.json"


TRACE = tree_trace(random.Random(3), 300, max_new=6, min_new=1)
CAPS = [1, 2, 3, 5, 9, 17, 40, 100]


def projected(ledger: Path) -> list[list[int]]:
    rows = query_facts(read_facts(ledger), [c * 1024 / GIB for c in CAPS] + [-1])
    return [r["hit_blocks"] for r in rows if "summary" not in r]


def test_head_first_group_replays_exactly_and_writes_its_model(tmp_path, capsys):
    config = write_setup(tmp_path, TRACE, "head-first")
    assert main(["replay", str(config)]) == 0
    ledger = tmp_path / "out" / "litehit_facts.csv"
    lines = ledger.read_text().splitlines()
    assert lines[0] == FACTS_HEADER_MODELS
    assert all(",lru-head-first," in line for line in lines[1:])
    assert projected(ledger) == oracle_hits(TRACE, [*CAPS, None], order="head-first")
    (curve,) = build_curves(read_facts(ledger))
    assert curve.unit == "blocks" and curve.unit_bytes == 1024
    assert [curve.hit_tokens_at(c) // 4 for c in CAPS] == [
        sum(row[i] for row in oracle_hits(TRACE, CAPS, order="head-first")) for i in range(8)
    ]
    capsys.readouterr()
    assert main(["curve", str(ledger), "--no-png"]) == 0
    assert "capacity_blocks" in capsys.readouterr().out


def test_flag_overrides_the_configuration_for_the_whole_run(tmp_path):
    config = write_setup(tmp_path, TRACE, "head-first")
    ledger = tmp_path / "out" / "litehit_facts.csv"
    assert main(["replay", str(config), "--touch-order", "tail-first", "--quiet"]) == 0
    assert ledger.read_text().splitlines()[0] == FACTS_HEADER  # full-attention, tail first
    tail = projected(ledger)
    assert tail == oracle_hits(TRACE, [*CAPS, None], order="tail-first")
    config = write_setup(tmp_path, TRACE, None)
    assert main(["replay", str(config), "--touch-order", "head-first", "--quiet"]) == 0
    head = projected(ledger)
    assert head == oracle_hits(TRACE, [*CAPS, None], order="head-first")
    assert head != tail  # the orders differ on this trace
    assert [row[-1] for row in head] == [row[-1] for row in tail]  # but not at infinity


@pytest.mark.parametrize(
    ("order", "instance", "message"),
    [
        ("sideways", {}, "touch_order of instance group 'g' must be one of "
                         "['tail-first', 'head-first'], got 'sideways'"),
        ("head-first",
         {"location_spec_infos": [{"name": "kv", "size": 1024}, {"name": "m", "size": 64}],
          "location_spec_groups": [{"name": "full", "spec_names": ["kv"]},
                                   {"name": "st", "spec_names": ["m"]}],
          "optimizer_state_info": {"full_location_spec_group_name": "full",
                                   "linear_location_spec_group_name": "st"},
          "linear_step": 8},
         "touch_order 'head-first' of instance group 'g' is for full-attention instances"),
    ],
)  # fmt: skip
def test_bad_touch_orders_are_reported_at_the_config_entry(tmp_path, capsys, order, instance,
                                                           message):  # fmt: skip
    config = write_setup(tmp_path, TRACE[:5], order, **instance)
    assert main(["replay", str(config)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(config) in err
    assert not (tmp_path / "out" / "litehit_facts.csv").exists()


def test_online_instances_stay_tail_first():
    manager = OnlineOptimizerManager(policy=QueryPolicy.online())
    with pytest.raises(InvalidArgument) as info:
        manager.create_group(InstanceGroup("g", (1.0,), touch_order="head-first"))
    assert str(info.value) == (
        "touch_order 'head-first' of instance group 'g' is for offline replays only: online "
        "instances touch tail first (the wire has no field for it)"
    )
    assert manager.list_groups() == []
    offline = OnlineOptimizerManager(policy=QueryPolicy.offline())
    offline.create_group(InstanceGroup("g", (1.0,), touch_order="head-first"))
    assert offline.get_group("g").touch_order == "head-first"
