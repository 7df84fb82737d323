"""``litehit optimize`` end to end: the spec's worked examples as literal asserts (through a
configuration file and a trace file), the CSV's header and values, the summary and JSON,
the chart, LiteHit's head-first identity (spec §7b) on the real Mooncake trace and on
seeded traces, and bad input (exit code 2, a message naming field and value, nothing
written)."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

from litehit_core.engine import EngineSpec, create_engine, touch_order_model
from litehit_core.projector import Projection
from litehit_service.optimizer.optimize.config import load_optimize_config
from litehit_service.optimizer.optimize.rows import HEADER
from litehit_service.optimizer.optimize.run import run_optimize
from litehit_service.optimizer.optimize.trace import load_trace
from tests.conftest import mooncake_trace, run_cli

MIB_PER_TOKEN = 65536  # block_size 16 x 65536 B = 1 MiB a block: quota C/1024 GiB = C blocks


THREE_TIERS = [  # listed in priority order without priorities: tier_flows orders them so
    {"unique_name": "hbm", "capacity": 2 / 1024},
    {"unique_name": "dram", "capacity": 4 / 1024},
    {"unique_name": "ssd", "capacity": 8 / 1024},
]


def write_case(
    tmp: Path,
    records: list[dict],
    *,
    policy="lru",
    blocks=-1,
    mode=3,
    batch=1,
    delay=0,
    group_extra=None,
    instances=("a",),
    params=None,
) -> Path:
    trace = tmp / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    group = {
        "group_name": "g",
        "quota_capacity": blocks / 1024 if blocks >= 0 else -1,
        "used_percentage": 1.0,
        "instances": [
            {
                "instance_id": i,
                "block_size": 16,
                "bytes_per_token": MIB_PER_TOKEN,
                "eviction_policy_type": policy,
                "eviction_policy_params": params or {},
            }
            for i in instances
        ],
    }
    group.update(group_extra or {})
    config = {
        "trace_file_path": "trace.jsonl",
        "output_result_path": "out",
        "eviction_params": {"eviction_mode": mode, "eviction_batch_size_per_instance": batch},
        "trace_replay": {"write_delay_ns": delay},
        "instance_groups": [group],
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def req(t, keys, inst="a", kind="request", **extra):
    rec = {"type": kind, "instance_id": inst, "timestamp_ns": t, "keys": keys}
    if kind != "write":
        rec["input_len"] = 16 * len(keys) + 5  # a trailing partial block stays in the denominator
    rec.update(extra)
    return rec


def hits(config_path: Path) -> dict[str, list[int]]:
    config = load_optimize_config(config_path)
    result = run_optimize(config, load_trace(config, max_line_bytes=1 << 20), check=True)
    return {
        r.instance_id: (r.rows.local_hits + r.rows.remote_hits).tolist() for r in result.instances
    }


def test_example_1_lru_versus_leaf_aware(tmp_path):
    records = [
        req(1, [1, 2, 3], kind="write"),
        req(2, [7], kind="write"),
        req(3, [1, 2, 3], kind="get"),
    ]
    assert hits(write_case(tmp_path, records, policy="lru", blocks=3)) == {"a": [0]}
    assert hits(write_case(tmp_path, records, policy="leaf_aware_lru", blocks=3)) == {"a": [2]}


def test_example_2_delayed_write(tmp_path):
    records = [req(100, [1, 2]), req(105, [1, 2]), req(130, [1, 2])]
    assert hits(write_case(tmp_path, records, delay=10)) == {"a": [0, 0, 2]}
    assert hits(write_case(tmp_path, records, delay=0)) == {"a": [0, 2, 2]}


def test_example_3_group_modes(tmp_path):
    records = [
        req(1, [1, 2, 3], "a"),
        req(2, [9, 8], "b"),
        req(3, [1, 2, 3], "a"),
        req(4, [9, 8], "b"),
    ]
    case = {"blocks": 4, "instances": ("a", "b")}
    assert hits(write_case(tmp_path, records, mode=3, **case)) == {"a": [0, 3], "b": [0, 0]}
    assert hits(write_case(tmp_path, records, mode=1, **case)) == {"a": [0, 0], "b": [0, 0]}


def test_example_4_ttl(tmp_path):
    records = [req(t, [1, 2]) for t in (1000, 1050, 1200, 1290, 1500)]
    for refresh in (True, False):
        extra = {"default_block_ttl_seconds": 1e-7, "ttl_refresh_on_read": refresh}
        path = write_case(tmp_path, records, policy="ttl", group_extra=extra)
        assert hits(path) == {"a": [0, 2, 0, 2, 0]}


def test_masks_and_write_ttls(tmp_path):
    """A get's mask skips local misses and splits local from remote hits; a write's
    ttl_us overrides the group default (-1: never expires)."""
    records = [
        req(10, [1, 2, 3], kind="write", ttl_us=-1),
        req(20, [5], kind="write"),
        req(30, [1, 2, 3], kind="get", block_mask=1),
        req(40, [4, 9], kind="get", block_mask=[True, False]),
        req(5000, [1, 2, 3], kind="get", block_mask=[False, True, False]),
        req(5001, [5], kind="get"),
    ]
    path = write_case(
        tmp_path, records, policy="ttl", group_extra={"default_block_ttl_seconds": 1e-6}
    )
    config = load_optimize_config(path)
    result = run_optimize(config, load_trace(config, max_line_bytes=1 << 20), check=True)
    rows = result.instances[0].rows
    assert rows.local_hits.tolist() == [1, 0, 1, 0]
    assert rows.remote_hits.tolist() == [2, 0, 2, 0]
    assert result.instances[0].expired_blocks == 1  # [5] lived 1 us; [1, 2, 3] never expire


def test_csv_header_values_and_summary(tmp_path):
    records = [req(100, [1, 2]), req(105, [1, 2]), req(130, [1, 2], inst="a")]
    path = write_case(tmp_path, records, delay=10)
    done = run_cli("optimize", str(path), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out" / "a_hit_rates.csv").read_text()
    lines = text.splitlines()
    assert lines[0] == HEADER
    # 2 blocks of 16 tokens + 5 = 37 input tokens per read; the third read hits 32
    assert lines[1:] == [
        "100,0,0,2,0,0,0,37,0,0,0,0.000000,0.000000,0.000000,2,0,37,0,0,0,0.000000,0.000000,0.000000,0",
        "105,0,0,2,0,0,0,37,0,0,0,0.000000,0.000000,0.000000,4,0,74,0,0,0,0.000000,0.000000,0.000000,0",
        "130,2,2,2,0,2,2,37,0,32,32,0.000000,0.864865,0.864865,6,2,111,0,32,32,0.000000,0.288288,0.288288,4",
    ]
    summary = json.loads(done.stdout)
    (inst,) = summary["instances"]
    assert (
        inst["reads"],
        inst["hit_tokens"],
        inst["input_tokens"],
        inst["peak_cached_blocks"],
    ) == (3, 32, 111, 2)
    assert inst["hit_rate"] == pytest.approx(32 / 111)


def test_chart_and_text_summary(tmp_path):
    rng = random.Random(5)
    records = [
        req(t, [rng.randrange(4) for _ in range(rng.randint(1, 5))], inst=rng.choice("ab"))
        for t in range(1, 400)
    ]
    path = write_case(
        tmp_path,
        records,
        blocks=6,
        instances=("a", "b"),
        policy="random_lru",
        params={"sample_rate": 0.5},
    )
    done = run_cli(
        "optimize", str(path), "--draw-chart", "-o", str(tmp_path / "elsewhere"), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    png = tmp_path / "elsewhere" / "timeseries" / "multi_instance_cache_analysis.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "elsewhere").glob("*.csv")) == [
        "a_hit_rates.csv",
        "b_hit_rates.csv",
        "global_duplicate_blocks.csv",  # two instances: the reference's duplicate table
    ]
    head, a, b = done.stdout.splitlines()[:3]
    assert head.split()[:4] == ["instance", "policy", "reads", "hit"]
    assert a.split()[:2] == ["a", "random_lru"] and b.split()[:2] == ["b", "random_lru"]
    assert not (tmp_path / "out").exists()


def _head_first_hits(reads, capacity_blocks, block_bytes):
    spec = EngineSpec(model=touch_order_model("head-first"))
    engine = create_engine(spec)
    projection = Projection(spec, block_bytes)
    units = projection.units(capacity_blocks * block_bytes)
    return [projection.hits(engine.process_request(keys, t), units) for t, keys in reads]


def _identity(tmp_path: Path, trace: Path, block_size: int, capacity_blocks: int, fmt: str):
    config = {
        "trace_file_path": str(trace),
        "output_result_path": str(tmp_path / "out"),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 7},
        "instance_groups": [
            {
                "group_name": "g",
                "quota_capacity": capacity_blocks / 1024,
                "used_percentage": 1.0,
                "instances": [
                    {
                        "instance_id": "x",
                        "block_size": block_size,
                        "bytes_per_token": (1 << 20) // block_size,
                        "eviction_policy_type": "lru",
                    }
                ],
            }
        ],
    }
    path = tmp_path / "identity.json"
    path.write_text(json.dumps(config))
    loaded_config = load_optimize_config(path)
    trace_data = load_trace(loaded_config, trace_format=fmt, max_line_bytes=1 << 26)
    result = run_optimize(loaded_config, trace_data)
    records = trace_data.records
    reads = [
        (int(records.times[r]), records.keys[records.key_off[r] : records.key_off[r + 1]].tolist())
        for r in range(len(records.kinds))
    ]
    rows = result.instances[0].rows
    return (rows.local_hits + rows.remote_hits).tolist(), _head_first_hits(
        reads, capacity_blocks, 1 << 20
    )


def test_lru_is_litehit_head_first_on_mooncake(tmp_path):
    """Spec §7b on the real trace at a tenth of its unique blocks: request for request."""
    trace = mooncake_trace("conversation_trace.jsonl")
    unique = len(
        {
            k
            for line in trace.read_text().splitlines()
            for k in json.loads(line)["hash_ids"][: json.loads(line)["input_length"] // 512]
        }
    )
    replayed, exact = _identity(tmp_path, trace, 512, unique // 10, "mooncake")
    assert len(replayed) == 12031
    assert sum(exact) > 1000
    assert replayed == exact


@pytest.mark.parametrize("seed", range(4))
def test_lru_is_litehit_head_first_on_seeded_traces(tmp_path, seed):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(10**6) for _ in range(rng.randint(1, 6))] for _ in range(12)]
    lines = []
    for t in range(1, 1500):
        keys = list(rng.choice(prefixes)) + [rng.randrange(10**6) for _ in range(rng.randint(0, 6))]
        # prefix-chained keys, as LiteHit's engines take them
        chained, h = [], 17
        for k in keys:
            h = (h * 1_000_003 + k) % (1 << 62)
            chained.append(h)
        lines.append(
            json.dumps(
                {
                    "type": "request",
                    "instance_id": "x",
                    "timestamp_ns": t * 10,
                    "keys": chained,
                    "input_len": 16 * len(keys) + 3,
                }
            )
        )
    trace = tmp_path / "seeded.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    replayed, exact = _identity(tmp_path, trace, 16, rng.randint(5, 60), "standard")
    assert sum(exact) > 100
    assert replayed == exact


def _fails(tmp_path: Path, config: Path, *message: str) -> None:
    done = run_cli("optimize", str(config), "--draw-chart", cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    for part in message:
        assert part in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_output_path_that_is_a_file_and_a_trace_that_is_a_folder(tmp_path):
    """Paths of the wrong kind are the user's to fix: exit 2 naming the path, nothing
    written (before: exit 1 'File exists', and 'cannot read the trace: Is a directory')."""
    path = write_case(tmp_path, [req(1, [1])])
    (tmp_path / "taken").write_text("mine")
    for command, out in (("optimize", "taken"), ("lifecycle", "taken/sub"),
                         ("export-tree", "taken")):  # fmt: skip
        done = run_cli(command, str(path), "-o", str(tmp_path / out), cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            f"litehit {command}: error: {tmp_path / 'taken'}: is a file, not a folder "
            "(outputs go into a folder)"
        )
    assert (tmp_path / "taken").read_text() == "mine"
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "part-1.jsonl").write_text(json.dumps(req(1, [1])) + "\n")
    data = json.loads(path.read_text())
    data["trace_file_path"] = "traces"
    path.write_text(json.dumps(data))
    done = run_cli("optimize", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"{tmp_path / 'traces'}:0: is a folder, and a trace is one file: name one trace file "
        "(a folder of traces is not merged: join its records into one file, in timestamp order)"
    )
    assert not (tmp_path / "out").exists()


def test_fast_chart_draws_each_line_through_2000_reads(tmp_path):
    """--fast-chart (the reference's flag, implies --draw-chart): the chart's lines go
    through at most 2,000 evenly spaced reads per instance, the first and the last among
    them, and the dot per read is left out; the rates are those of every read."""
    from litehit_service.optimizer.optimize.config import load_optimize_config
    from litehit_service.optimizer.optimize.outputs import FAST_CHART_POINTS, timeseries_figure
    from litehit_service.optimizer.optimize.run import run_optimize
    from litehit_service.optimizer.optimize.trace import load_trace

    records = [req(t, [t % 5, t % 13, t]) for t in range(1, 5001)]
    path = write_case(tmp_path, records, blocks=30)
    done = run_cli("optimize", str(path), "--fast-chart", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    png = tmp_path / "out" / "timeseries" / "multi_instance_cache_analysis.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = load_optimize_config(path)
    result = run_optimize(config, load_trace(config, max_line_bytes=1 << 20))
    full, fast = timeseries_figure(result), timeseries_figure(result, fast=True)
    full_top, full_bottom = full.axes[0], full.axes[1]
    fast_top, fast_bottom = fast.axes[0], fast.axes[1]
    assert len(full_top.lines[0].get_xdata()) == 5000
    x, y = fast_top.lines[0].get_xdata(), fast_top.lines[0].get_ydata()
    assert len(x) == FAST_CHART_POINTS and x[0] == 0 and x[-1] == full_top.lines[0].get_xdata()[-1]
    assert y[-1] == full_top.lines[0].get_ydata()[-1]  # the rate over every read
    assert full_bottom.collections and not fast_bottom.collections  # no dot per read


def test_an_older_reference_configuration_says_what_to_change(tmp_path):
    """The reference's older configurations name the trace's source (trace_type) and give
    quotas in blocks without bytes_per_token: both refused with the fix, exit 2."""
    path = write_case(tmp_path, [req(1, [1])])
    data = json.loads(path.read_text())
    data["trace_type"] = "publisher_log"
    del data["instance_groups"][0]["instances"][0]["bytes_per_token"]
    path.write_text(json.dumps(data))
    done = run_cli("optimize", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert sorted(line.split(": ", 1)[1] for line in done.stderr.splitlines()) == [
        "instance_groups[0].instances[0].bytes_per_token: missing required field: the KV "
        "cache bytes per token, which turns blocks into bytes (a block is block_size x "
        "bytes_per_token bytes). quota_capacity is GiB here (x used_percentage), where the "
        "reference's older configurations gave it in blocks: quota_capacity = blocks x "
        "block_size x bytes_per_token / 2^30",
        "trace_type: the reference's older configurations name the trace's source here "
        "('publisher_log'); litehit reads a standard trace (JSONL or Parquet) whatever its "
        "source: convert it first (litehit convert --from publisher-log LOG -o trace.jsonl "
        "for a publisher log; --from qwen-bailian, mooncake or lmcache likewise), point "
        "trace_file_path at the result and delete trace_type",
    ]
    assert not (tmp_path / "out").exists()


def test_warnings_for_a_zero_quota_and_a_cache_without_bound(tmp_path):
    """Valid but likely unmeant configurations run and say so on stderr: a zero quota
    (every read misses), a ttl instance that neither falls back nor has a default TTL
    (spec section 5: warn once at start that its cache can grow without bound)."""
    records = [req(1, [1, 2]), req(2, [1, 2])]
    path = write_case(tmp_path, records, blocks=0)
    done = run_cli("optimize", str(path), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        "WARNING: group 'g': quota_capacity is 0 bytes: it caches nothing and every read misses"
    )
    assert json.loads(done.stdout)["instances"][0]["hit_rate"] == 0
    path = write_case(tmp_path, records, blocks=1, policy="ttl",
                      params={"fallback_on_pressure": False})  # fmt: skip
    for command in ("optimize", "export-tree", "tradeoff"):
        done = run_cli(command, str(path), "-o", str(tmp_path / command), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[0] == (
            "WARNING: instance 'a' (ttl, fallback_on_pressure false, default_block_ttl_seconds "
            "0): a block written without a ttl_us never expires and is never evicted, so its "
            "cache can grow past the quota without bound"
        ), command
    path = write_case(tmp_path, records, blocks=1, policy="ttl",
                      group_extra={"default_block_ttl_seconds": 1})  # fmt: skip
    assert "WARNING" not in run_cli("optimize", str(path), cwd=tmp_path).stderr


def test_a_batch_far_beyond_the_cache_evicts_as_the_whole_cache(tmp_path):
    """eviction_batch_size_per_instance 10^12 (RandomLRU: 10^13 draws a call) replays in
    the memory of the cache, and evicts as a batch of a million does: every call takes
    the whole instance. Catches scratch arrays sized by the batch (a MemoryError)."""
    records = [req(t, [t % 7, t % 11, t]) for t in range(1, 400)]
    texts = []
    for batch in (10**12, 10**6):
        folder = tmp_path / str(batch)
        folder.mkdir()
        path = write_case(folder, records, policy="random_lru", blocks=20, mode=2,
                          batch=batch, params={"sample_rate": 0.1})  # fmt: skip
        done = run_cli("optimize", str(path), cwd=folder)
        assert done.returncode == 0, done.stderr
        texts.append((folder / "out" / "a_hit_rates.csv").read_text())
    assert texts[0] == texts[1] and len(texts[0].splitlines()) == 400


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"policy": "lfu"}, ("eviction_policy_type: must be one of", "'lfu'")),
        (
            {"policy": "random_lru", "params": {"sample_rate": 0}},
            ("sample_rate: must be a number in (0, 1], got 0",),
        ),
        ({"policy": "random_lru", "params": {"sample_rate": 1.5}}, ("got 1.5",)),
        (
            {"group_extra": {"used_percentage": 0}},
            ("used_percentage: must be a number in (0, 1], got 0",),
        ),
        ({"group_extra": {"used_percentage": 1.2}}, ("got 1.2",)),
        ({"instances": ("a", "a")}, ("instance 'a' is already configured",)),
        (
            {"group_extra": {"tier_strategy": {"hierarchical_eviction_enabled": True}}},
            ("instance_groups[0].storages: must be at least one storage (a tier)",),
        ),
        (
            {"group_extra": {"tier_strategy": {"write_mode": "write_back"}}},
            (
                "tier_strategy.write_mode: must be one of ['write_through', "
                "'write_through_selective', 'cascading'], got 'write_back'",
            ),
        ),
        (
            {"group_extra": {"tier_strategy": {"selective_write_threshold": 0}}},
            ("selective_write_threshold: must be an integer >= 1, got 0",),
        ),
        (
            {"group_extra": {"tier_flows": [{"from": "hbm", "to_tier": "ssd"}]}},
            (
                "instance_groups[0].tier_flows[0].from: unknown field 'from' (allowed: "
                "from_tier, to_tier, write_mode, access_propagation_enabled, "
                "write_propagation_enabled, promote_enabled, selective_write_threshold); did "
                "you mean 'from_tier'?",
            ),
        ),
        *[
            ({"group_extra": {"storages": THREE_TIERS, "tier_flows": flows}}, (message,))
            for flows, message in [
                (
                    [{"from_tier": "hbm", "to_tier": "ssd"}],
                    "tier_flows[0].to_tier: must be the tier right after from_tier 'hbm' (an "
                    "edge joins adjacent tiers, in priority order: ['hbm', 'dram', 'ssd']), "
                    "got 'ssd'",
                ),
                (
                    [{"from_tier": "hbm", "to_tier": "l3"}],
                    "tier_flows[0].to_tier: must be one of the group's storages ['hbm', "
                    "'dram', 'ssd'], got 'l3'",
                ),
                (
                    [
                        {"from_tier": "dram", "to_tier": "ssd"},
                        {"from_tier": "dram", "to_tier": "ssd", "write_mode": "cascading"},
                    ],
                    "tier_flows[1].from_tier: must be one edge per pair of tiers (edge 0 joins "
                    "the same ones), got 'dram'",
                ),
                (
                    [
                        {
                            "from_tier": "dram",
                            "to_tier": "ssd",
                            "write_mode": "write_through_selective",
                        }
                    ],
                    "tier_flows[0].write_mode: must be write_through or cascading on an edge "
                    "after the first",
                ),
                (
                    [{"from_tier": "hbm", "to_tier": "dram", "write_mode": "copy"}],
                    "tier_flows[0].write_mode: must be one of ['write_through', "
                    "'write_through_selective', 'cascading'], got 'copy'",
                ),
            ]
        ],  # fmt: skip
        (
            {
                "group_extra": {
                    "hierarchical_eviction_enabled": True,
                    "storages": [
                        {"unique_name": "hbm", "priority": 0, "capacity": 1},
                        {"unique_name": "hbm", "priority": 0, "capacity": 2},
                    ],
                }
            },
            (
                "storages[1].unique_name: must be unique, got 'hbm'",
                "storages[1].priority: must be distinct in its group, got 0",
            ),
        ),
        (
            {
                "group_extra": {
                    "hierarchical_eviction_enabled": True,
                    "storages": [{"unique_name": "hbm", "capacity": 1}],
                }
            },
            ("storages[0].priority: missing required field",),
        ),
        (
            {"group_extra": {"colour": "red"}},
            ("instance_groups[0].colour: unknown field 'colour'",),
        ),
        ({"mode": 0}, ("eviction_mode: must be 1, 2 or 3, got 0",)),
        (
            {"batch": 1 << 63},
            (
                "eviction_params.eviction_batch_size_per_instance: must be an integer in "
                "[1, 4611686018427387904] (2^62), got 9223372036854775808",
            ),
        ),
        (  # another policy's parameter: a typo'd policy type must not pass silently
            {"policy": "ttl", "params": {"sample_rate": 0.5}},
            (
                "instance_groups[0].instances[0].eviction_policy_params.sample_rate: unknown "
                "field 'sample_rate' (allowed: fallback_on_pressure)",
            ),
        ),
        (
            {"policy": "random_lru", "params": {"fallback_on_pressure": False}},
            ("eviction_policy_params.fallback_on_pressure: unknown field",),
        ),
    ],
)
def test_bad_configuration(tmp_path, change, message):
    _fails(tmp_path, write_case(tmp_path, [req(1, [1])], **change), "config.json:", *message)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            req(5, [1], inst="nobody"),
            "trace.jsonl:2: instance_id: instance 'nobody' is not configured",
        ),
        (
            {**req(5, [1, 2]), "input_len": 31},
            "trace.jsonl:2: keys: 2 keys but input_len 31 holds 1",
        ),
        (req(5, [1], kind="get", ttl_us=5), "trace.jsonl:2: field 'ttl_us'"),
        (req(5, [1, 2], kind="get", block_mask=3), "trace.jsonl:2: field 'block_mask'"),
        (req(5, [1], kind="write", block_mask=1), "trace.jsonl:2: field 'block_mask'"),
    ],
)
def test_bad_record(tmp_path, record, message):
    _fails(tmp_path, write_case(tmp_path, [req(1, [1]), record]), message)


def test_unsorted_trace_is_sorted_stably(tmp_path):
    records = [req(30, [1, 2], kind="get"), req(10, [1, 2], kind="write"), req(30, [1], kind="get")]
    assert hits(write_case(tmp_path, records)) == {"a": [2, 1]}


def test_lmcache_log_replays_as_requests(tmp_path):
    """An LMCache lookup log (the reader's own example) replays as request records of the
    configuration's only instance; a block size other than the log's chunk size is an
    error naming both."""
    from litehit_service.traces.readers.registry import get_reader

    reader = get_reader("lmcache")
    (tmp_path / "trace.jsonl").write_bytes(reader.example)
    events, sizes = reader.read_sized(tmp_path / "trace.jsonl")
    (chunk,) = {tokens for tokens, _ in sizes.values()}
    config = json.loads(write_case(tmp_path, []).read_text())
    (tmp_path / "trace.jsonl").write_bytes(reader.example)
    config["instance_groups"][0]["instances"][0]["block_size"] = chunk
    config["instance_groups"][0]["instances"][0]["instance_id"] = "m"  # the log's model name
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = load_optimize_config(tmp_path / "config.json")
    result = run_optimize(loaded, load_trace(loaded, max_line_bytes=1 << 20), check=True)
    assert result.instances[0].rows.reads == len(events)
    assert result.instances[0].rows.total_input_tokens == sum(e.input_len for e in events)
    config["instance_groups"][0]["instances"][0]["block_size"] = chunk + 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    _fails(
        tmp_path,
        tmp_path / "config.json",
        f"tokens per key, but instance 'm' has block_size {chunk + 1}: set it to {chunk}",
    )


def test_progress_bar_on_a_terminal_only(tmp_path):
    from terminal import run_on_terminal

    from tests.serve_process import serve_env

    path = write_case(tmp_path, [req(t, [t % 7, t % 5]) for t in range(1, 3000)], blocks=4)
    env = serve_env()
    plain = run_cli("optimize", str(path), cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.count("\n") == 1 and "\r" not in plain.stderr  # the run line only
    assert plain.stderr.startswith("optimize: 2999 reads, 1 instances, ")
    code, tty_err = run_on_terminal(
        [sys.executable, "-m", "litehit_service", "optimize", str(path), "-o", str(tmp_path / "t")],
        env,
    )
    assert code == 0
    total = (tmp_path / "trace.jsonl").stat().st_size  # the bar counts the trace's bytes
    assert re.search(rf"\roptimize:\s+0%\|\s*\| 0/{total} \[.*bytes/s", tty_err), tty_err
    assert "optimize: 2999 reads, 1 instances, " in tty_err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--trace-format", "nope"), "unknown trace format 'nope'; known formats: 'standard'"),
        (("--instance", "zz"), "--instance 'zz' is not a configured instance (configured: a)"),
    ],
)
def test_bad_options(tmp_path, args, message):
    path = write_case(tmp_path, [req(1, [1])])
    done = run_cli("optimize", str(path), *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_charts_window_rate_is_token_weighted() -> None:
    """Catches the chart's window line as a mean of per-read rates (a 1-token read that
    hit counting as much as a 1000-token read that missed: 50 % instead of 0.1 %), checked
    against the naive definition over every window."""
    import numpy as np

    from litehit_service.optimizer.optimize.outputs import window_rate

    rng = np.random.default_rng(7)
    inputs = rng.integers(0, 2000, 300)
    hits = (inputs * rng.random(300)).astype(np.int64)
    got = window_rate(hits, inputs, 100)
    for i in range(300):
        lo = max(0, i - 99)
        total = inputs[lo : i + 1].sum()
        expected = hits[lo : i + 1].sum() / total if total else 0.0
        assert got[i] == pytest.approx(expected, abs=1e-12), i
    assert window_rate(np.array([1, 0]), np.array([1, 1000]), 2)[1] == pytest.approx(1 / 1001)
