"""The query policy: each field where online and offline differ, tested on both paths.

Online = the manager under ``QueryPolicy.online`` (what ``litehit serve`` builds); offline
= ``run_replay`` over a trace file (which builds ``QueryPolicy.offline``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from litehit_core import LocatedError, read_facts
from litehit_service.errors import InvalidArgument
from litehit_service.litehit.config import ReplayConfig
from litehit_service.litehit.replay import run_replay
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.model import InstanceGroup, InstanceRegistration, LocationSpec
from litehit_service.model import LocationSpecGroup as SpecGroup
from litehit_service.policy import QueryPolicy

S = 1_000_000_000
NOW = 1_700_000_000 * S
GROUP = InstanceGroup("g", (1.0,), ttl_seconds=10, enable_theoretical_max_cache=True)
REG = InstanceRegistration("i", "g", 4, (LocationSpec("kv", 1024),), (SpecGroup("f", ("kv",)),))


def online(**kw: object) -> OnlineOptimizerManager:
    m = OnlineOptimizerManager(policy=QueryPolicy.online(clock_ns=lambda: NOW, **kw))  # type: ignore[arg-type]
    m.create_group(GROUP)
    m.register_instance(REG)
    return m


def offline(tmp_path: Path, events: list[tuple[int, list[int], int]], block_size: int = 4):
    """Replay (timestamp_ns, keys, input_len) events; returns the facts rows."""
    trace = tmp_path / "trace.jsonl"
    lines = [
        {"type": "get", "instance_id": "i", "timestamp_ns": ts, "keys": keys, "input_len": n}
        for ts, keys, n in events
    ]
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = ReplayConfig(str(trace), str(tmp_path / "out"), (GROUP,), (REG,), block_size)
    summary = run_replay(config, progress=False)
    return [row.hit_curve for row in read_facts(summary.facts_path)]


def test_the_two_policies_name_every_difference() -> None:
    on, off = QueryPolicy.online(), QueryPolicy.offline(trace_block_size_tokens=2)
    assert (on.backwards, off.backwards) == ("clamp", "reject")
    assert (on.max_block_keys, off.max_block_keys > 2**62) == (1_000_000, True)
    assert (on.max_clock_skew_ns, off.max_clock_skew_ns) == (300 * S, None)
    assert on.clock_ns is not None and off.clock_ns is None
    assert (on.trace_block_size_tokens, off.trace_block_size_tokens) == (0, 2)


def test_backwards_timestamps_clamped_online_rejected_offline(tmp_path: Path) -> None:
    m = online()
    m.trace_query("i", [1, 2], 8, timestamp_ns=NOW)
    # 20 s earlier: clamped to the instance clock, so the blocks (touched at NOW) are fresh
    back = m.trace_query("i", [1, 2], 8, timestamp_ns=NOW - 20 * S)
    assert back.theoretical.max_hit_count == 2
    # the clock stayed at NOW: 9.9 s later everything is still alive
    assert m.trace_query("i", [1, 2], 8, timestamp_ns=NOW + 9 * S).theoretical.max_hit_count == 2
    with pytest.raises(LocatedError) as info:
        offline(tmp_path, [(100 * S, [1, 2], 8), (80 * S, [1, 2], 8)])
    assert str(info.value).endswith(
        f":2: instance_id 'i': timestamp_ns {80 * S} goes backwards (the instance's clock is at "
        f"{100 * S}); events must be in time order"
    )


def test_timestamp_zero_is_now_online_and_zero_offline(tmp_path: Path) -> None:
    m = online()
    m.trace_query("i", [1], 4, timestamp_ns=NOW - 11 * S)
    # timestamp 0 = NOW: the block touched 11 s before has expired (ttl 10 s)
    assert m.trace_query("i", [1], 4).theoretical.max_hit_count == 0
    # offline, 0 is the trace's own time (a Mooncake trace starts at 0 ms): a block touched
    # at 0 is alive at 9 s, and expired at 19 s, 10 s after its last touch at 9 s
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": ms, "input_length": 4, "hash_ids": [1]}) + "\n"
            for ms in (0, 0, 9000, 19000)
        )
    )
    config = ReplayConfig(
        str(trace), str(tmp_path / "out"), (GROUP,), (REG,), 4, trace_format="mooncake"
    )
    rows = list(read_facts(run_replay(config, progress=False).facts_path))
    assert [(r.timestamp_ns, r.hit_curve) for r in rows] == [
        (0, ()),
        (0, ((1, 1),)),
        (9 * S, ((1, 1),)),
        (19 * S, ()),
    ]


def test_key_limit_online_only(tmp_path: Path) -> None:
    m = online(max_block_keys=3)
    with pytest.raises(InvalidArgument, match="block_keys has 4 keys, more than max_block_keys 3"):
        m.trace_query("i", [1, 2, 3, 4], 16, timestamp_ns=NOW)
    assert len(offline(tmp_path, [(1, list(range(5000)), 20000)])) == 1


def test_clock_skew_online_only(tmp_path: Path) -> None:
    m = online(max_clock_skew_seconds=300)
    m.trace_query("i", [1], 4, timestamp_ns=NOW + 300 * S)  # at the limit: accepted
    with pytest.raises(InvalidArgument) as info:
        m.trace_query("i", [2], 4, timestamp_ns=2**63 - 1)
    assert str(info.value).startswith(f"timestamp_ns {2**63 - 1} is ")
    assert "ahead of the server clock" in str(info.value) and "300 s are allowed" in str(info.value)
    assert m.list_instances()[0].total_queries == 1  # the refused query changed nothing
    # offline traces have no wall clock: any int64 time is the trace's own
    assert offline(tmp_path, [(2**63 - 2, [1], 4), (2**63 - 1, [1], 4)]) == [(), ((1, 1),)]


def test_key_granularity_is_the_instances_online_and_the_configs_offline(tmp_path: Path) -> None:
    m = online()
    with pytest.raises(InvalidArgument, match=r"len\(block_keys\) is 4 but input_token_len 8"):
        m.trace_query("i", [10, 11, 12, 13], 8, timestamp_ns=NOW)
    # offline at 2 tokens per key: keys 11 and 13 end the two 4-token blocks
    curves = offline(tmp_path, [(1, [10, 11, 12, 13], 8), (2, [20, 11, 22, 13], 8)], block_size=2)
    assert curves == [(), ((1, 2),)]
