"""Live exact hit-rate curves: the manager's per-instance curve and GetHitRateCurve, against
the naive per-capacity LRUs, the slot counters and the offline `litehit curve`."""

from __future__ import annotations

import csv
import json
import math
import random
import socket
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import LiveServer
from oracle import NaiveHybridLRU, NaiveLRU, tree_trace

from litehit_service import messages as pb2
from litehit_service.cli import main
from litehit_service.errors import InstanceNotExist, InvalidArgument
from litehit_service.litehit.curve import format_table
from litehit_service.live import fetch_live_curve
from litehit_service.manager import ManagerLimits, OnlineOptimizerManager
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.snapshots import SnapshotStore
from litehit_service.wire import hit_rate_curve_from_pb

GIB = 1024**3


def lru_reg(iid: str = "i", group: str = "g", bs: int = 4, block_bytes: int = 1024):
    return InstanceRegistration(
        iid, group, bs, (LocationSpec("kv", block_bytes),), (LocationSpecGroup("full", ("kv",)),)
    )


def hybrid_reg(iid: str = "h", group: str = "g", full: int = 1024, linear: int = 3072, step=2):
    return InstanceRegistration(
        iid,
        group,
        4,
        (LocationSpec("kv", full), LocationSpec("m", linear)),
        (LocationSpecGroup("full", ("kv",)), LocationSpecGroup("state", ("m",))),
        full_location_spec_group_name="full",
        linear_location_spec_group_name="state",
        linear_step=4 * step,
    )


def manager_with(*regs, slots=(2048 / GIB, 9000 / GIB), ttl: int = 0, **kw):
    m = OnlineOptimizerManager(**kw)
    m.create_group(InstanceGroup("g", slots, enable_theoretical_max_cache=True, ttl_seconds=ttl))
    for reg in regs:
        m.register_instance(reg)
    return m


# ---------------------------------------------------------------- exactness


@pytest.mark.parametrize("seed", range(3))
def test_lru_curve_equals_naive_lrus_at_random_capacities_and_around_every_corner(seed):
    rng = random.Random(seed)
    trace = tree_trace(rng, 300, max_new=6, min_new=1)
    m = manager_with(lru_reg())
    tokens = []
    for keys in trace:
        n = 4 * len(keys) + rng.randrange(4)  # trailing partial tokens stay in the denominator
        tokens.append(n)
        m.trace_query("i", keys, n)
    full = m.hit_rate_curve("i", max_points=100_000)
    assert full.corners_complete and full.corners == len(full.points) - 1
    corners = [p.capacity_blocks for p in full.points]
    caps = sorted({max(0, c + d) for c in corners for d in (-1, 0, 1)})
    caps += [rng.randrange(0, 2 * corners[-1] + 2) for _ in range(20)]
    answer = m.hit_rate_curve("i", capacity_gb=[c * 1024 / GIB for c in caps])
    assert not answer.corners_complete
    for cap, point in zip(caps, answer.points, strict=True):
        lru = NaiveLRU(cap)
        want = sum(lru.request(keys) for keys in trace) * 4
        assert (point.capacity_blocks, point.capacity_bytes) == (cap, cap * 1024)
        assert point.hit_tokens == want, cap
        assert point.hit_rate == want / sum(tokens)
    assert answer.total_input_tokens == sum(tokens)
    unbounded = NaiveLRU(None)
    assert answer.theoretical_hit_tokens == sum(unbounded.request(k) for k in trace) * 4
    # the corners themselves lie on the naive curve
    by_cap = dict(zip(caps, (p.hit_tokens for p in answer.points), strict=True))
    assert all(by_cap[p.capacity_blocks] == p.hit_tokens for p in full.points)


@pytest.mark.parametrize("ttl", [0, 3])
def test_hybrid_curve_equals_the_typed_byte_lru_on_and_around_every_threshold(ttl):
    rng = random.Random(4 + ttl)
    trace = tree_trace(rng, 200, max_new=7, min_new=1)
    m = manager_with(hybrid_reg(), ttl=ttl)
    times = []
    t = 10**9
    for keys in trace:
        t += rng.choice([0, 10**8, 2 * 10**9])
        times.append(t)
        m.trace_query("h", keys, 4 * len(keys), timestamp_ns=t)
    full = m.hit_rate_curve("h", max_points=100_000)
    assert full.corners_complete and full.resolution_bytes == 1024  # gcd(1024, 3072)
    assert all(p.capacity_blocks == 0 for p in full.points)
    thresholds = sorted({p.capacity_bytes for p in full.points})
    caps = sorted({max(0, b + d) for b in thresholds for d in (-1, 0, 1)})
    answer = m.hit_rate_curve("h", capacity_gb=[b / GIB for b in caps])
    for cap, point in zip(caps, answer.points, strict=True):
        lru = NaiveHybridLRU(cap, 1024, 3072, 2, ttl * 10**9)
        want = sum(lru.request(k, now) for k, now in zip(trace, times, strict=True)) * 4
        assert (point.capacity_bytes, point.hit_tokens) == (cap, want), cap


def test_curve_at_each_slot_equals_the_slot_counters_for_both_models():
    rng = random.Random(8)
    m = manager_with(lru_reg(), hybrid_reg(), slots=(2048 / GIB, 9000 / GIB, 50_000 / GIB))
    for keys in tree_trace(rng, 400, max_new=5):
        for iid in ("i", "h"):
            m.trace_query(iid, keys, 4 * len(keys) + 1)
    for summary in m.list_instances():
        caps = [c.capacity_gb for c in summary.capacity_summaries]
        curve = m.hit_rate_curve(summary.instance_id, capacity_gb=caps)
        assert [p.hit_tokens for p in curve.points] == [
            c.total_hits * 4 for c in summary.capacity_summaries
        ]
        assert [p.hit_rate for p in curve.points] == [
            c.hit_rate for c in summary.capacity_summaries
        ]
        assert curve.theoretical_hit_tokens == summary.total_max_hits * 4
        assert curve.total_queries == summary.total_queries == 400


# ---------------------------------------------------------------- targets and sampling


def test_capacity_for_targets_is_the_smallest_capacity_reaching_them():
    m = manager_with(lru_reg())
    fractions = [1e-9, 0.25, 0.5, 0.8, 0.9, 0.95, 0.99, 1.0]
    empty = m.hit_rate_curve("i", target_fractions=fractions)
    assert [t.capacity_bytes for t in empty.capacity_for_targets] == [0] * len(fractions)
    assert empty.theoretical_hit_tokens == 0 and [p.hit_tokens for p in empty.points] == [0]
    for keys in tree_trace(random.Random(2), 500, max_new=6):
        m.trace_query("i", keys, 4 * len(keys))
    result = m.hit_rate_curve("i", target_fractions=fractions, max_points=100_000)
    points = [(p.capacity_blocks, p.hit_tokens) for p in result.points]

    def hits(c: int) -> int:  # exact: linear between corners, flat after the last
        for (c0, h0), (c1, h1) in pairwise(points):
            if c0 <= c <= c1:
                return h0 + (h1 - h0) * (c - c0) // (c1 - c0)
        return points[-1][1]

    total = result.theoretical_hit_tokens // 4  # blocks
    for f, t in zip(fractions, result.capacity_for_targets, strict=True):
        target = math.ceil(Fraction(repr(f)) * total)  # the decimal the float prints as
        c = t.capacity_blocks
        assert t.target_fraction == f and t.capacity_bytes == c * 1024
        assert t.capacity_gb == c * 1024 / GIB
        assert hits(c) >= target * 4 and (c == 0 or hits(c - 1) < target * 4), f
    assert result.capacity_for_targets[-1].capacity_blocks == points[-1][0]  # saturation


def test_many_corners_are_sampled_log_spaced_with_exact_values():
    m = manager_with(lru_reg())
    for keys in tree_trace(random.Random(3), 2000, max_new=8):
        m.trace_query("i", keys, 4 * len(keys))
    full = m.hit_rate_curve("i", max_points=100_000)
    assert full.corners > 64
    sampled = m.hit_rate_curve("i", max_points=64)
    assert not sampled.corners_complete and sampled.corners == full.corners
    assert 30 <= len(sampled.points) <= 64
    caps = [p.capacity_blocks for p in sampled.points]
    assert caps == sorted(set(caps)) and caps[-1] == full.points[-1].capacity_blocks
    ratios = [b / a for a, b in pairwise(caps[5:])]
    assert max(ratios) / min(ratios) < 1.5  # log-spaced (rounded to whole blocks)
    exact = m.hit_rate_curve("i", capacity_gb=[c * 1024 / GIB for c in caps])
    assert [p.hit_tokens for p in sampled.points] == [p.hit_tokens for p in exact.points]
    default = m.hit_rate_curve("i")
    assert len(default.points) == min(512, full.corners + 1)


# ---------------------------------------------------------------- lifecycle


def test_reset_and_replacing_registration_start_the_curve_over_identical_keeps_it():
    m = manager_with(lru_reg())
    for keys in ([1, 2], [1, 2], [1, 2, 3]):
        m.trace_query("i", keys, 4 * len(keys))
    assert m.hit_rate_curve("i").theoretical_hit_tokens == 16
    m.register_instance(lru_reg())  # identical: kept
    assert m.hit_rate_curve("i").theoretical_hit_tokens == 16
    m.reset_stats("i")
    assert m.hit_rate_curve("i").theoretical_hit_tokens == 0
    m.trace_query("i", [1], 4)
    m.trace_query("i", [1], 4)
    m.register_instance(lru_reg(block_bytes=2048))  # different: replaced, fresh
    again = m.hit_rate_curve("i")
    assert (again.theoretical_hit_tokens, again.total_queries, again.block_bytes) == (0, 0, 2048)


def test_snapshot_keeps_the_curve_across_a_restart(tmp_path: Path):
    regs = (lru_reg(), hybrid_reg())
    limits = ManagerLimits(max_tracked_blocks=10_000)
    store = SnapshotStore(tmp_path / "state")
    twin = manager_with(*regs, limits=limits)
    first = manager_with(*regs, limits=limits, state_store=store)
    trace = tree_trace(random.Random(6), 300, max_new=5)
    for keys in trace[:200]:
        for m in (first, twin):
            for iid in ("i", "h"):
                m.trace_query(iid, keys, 4 * len(keys))
    assert first.save_all_states() == 2
    second = manager_with(*regs, limits=limits)  # registered first, as a restart restores
    second.state_store = SnapshotStore(tmp_path / "state")
    assert second.restore_states() == 2
    for keys in trace[200:]:
        for m in (second, twin):
            for iid in ("i", "h"):
                m.trace_query(iid, keys, 4 * len(keys))
    for iid in ("i", "h"):
        assert second.hit_rate_curve(iid, max_points=100_000) == twin.hit_rate_curve(
            iid, max_points=100_000
        )


def test_curve_memory_counts_in_the_instance_memory():
    m = manager_with(lru_reg())
    before = m.list_instances()[0].debug_info.memory_usage_bytes
    for d in range(3, 3000):
        m.trace_query("i", [d - 2, d - 1, d], 12)
        m.trace_query("i", [d - 2, d - 1, d], 12)
    with_curve = m.list_instances()[0].debug_info.memory_usage_bytes
    assert with_curve > before


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity_gb": [1.0, float("nan")]}, "capacity_gb[1] must be finite and in [0, "),
        ({"capacity_gb": [float("inf")]}, "capacity_gb[0] must be finite and in [0, "),
        ({"capacity_gb": [-1.0]}, "capacity_gb[0] must be finite and in [0, "),
        ({"capacity_gb": [0.0] * 100_001}, "capacity_gb has 100001 values, at most 100000"),
        ({"target_fractions": [0.0]}, "target_fractions[0] must be in (0, 1], got 0.0"),
        ({"target_fractions": [0.5, 1.5]}, "target_fractions[1] must be in (0, 1], got 1.5"),
        ({"target_fractions": [float("nan")]}, "target_fractions[0] must be in (0, 1], got nan"),
        ({"target_fractions": [0.5] * 1001}, "target_fractions has 1001 values, at most 1000"),
        ({"max_points": -1}, "max_points must be in 0..100000, got -1"),
        ({"max_points": 100_001}, "max_points must be in 0..100000, got 100001"),
    ],
)
def test_bad_arguments_name_the_field_and_value(kwargs, message):
    m = manager_with(lru_reg())
    with pytest.raises(InvalidArgument) as info:
        m.hit_rate_curve("i", **kwargs)
    assert message in str(info.value)


def test_unknown_instance():
    with pytest.raises(InstanceNotExist, match="instance_id 'nope' is not registered"):
        manager_with().hit_rate_curve("nope")


# ---------------------------------------------------------------- the RPC and offline


@pytest.fixture
def live():
    manager = manager_with(lru_reg(), hybrid_reg())
    server = LiveServer(manager)
    client = server.client(timeout=5.0)
    client.address = server.target  # for the CLI
    try:
        yield manager, client
    finally:
        client.close()
        server.stop()


def test_rpc_answers_and_errors_travel_in_the_header(live):
    manager, client = live
    for keys in tree_trace(random.Random(1), 100, max_new=5):
        client.trace_query("i", keys, 4 * len(keys))
    response = client.get_hit_rate_curve("i", target_fractions=[0.9], max_points=100_000)
    result = hit_rate_curve_from_pb(response)
    assert result == manager.hit_rate_curve("i", target_fractions=[0.9], max_points=100_000)
    assert response.header.status.code == pb2.OK and result.corners_complete
    bad = client.get_hit_rate_curve("i", capacity_gb=[float("nan")], check=False)
    assert bad.header.status.code == pb2.INVALID_ARGUMENT
    assert bad.header.status.message.startswith("capacity_gb[0] must be finite and in [0, ")
    missing = client.get_hit_rate_curve("zz", check=False)
    assert missing.header.status.code == pb2.INSTANCE_NOT_EXIST
    frac = client.get_hit_rate_curve("i", target_fractions=[0], check=False)
    assert frac.header.status.message == "target_fractions[0] must be in (0, 1], got 0.0"
    points = client.get_hit_rate_curve("i", max_points=-5, check=False)
    assert points.header.status.message == "max_points must be in 0..100000, got -5"


def test_online_curve_equals_offline_replay_and_curve(live, tmp_path: Path, capsys):
    """The RPC's corners equal `litehit replay` + `litehit curve` of the same queries, and
    `litehit curve --server` prints the very table and CSV the ledger gives (also when the
    curve arrives as samples: every printed number is fetched exactly)."""
    manager, client = live
    rng = random.Random(12)
    trace = tree_trace(rng, 400, max_new=6, min_new=1)
    events = []
    for n, keys in enumerate(trace):
        tokens = 4 * len(keys) + rng.randrange(4)
        client.trace_query("i", keys, tokens)
        events.append({"type": "get", "instance_id": "i", "timestamp_ns": n + 1, "keys": keys,
                       "input_len": tokens})  # fmt: skip
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    config = {
        "trace_file_path": "t.jsonl",
        "output_result_path": "out",
        "block_size": 4,
        "instance_groups": [{"name": "g", "capacity_gb": [2048 / GIB]}],
        "instances": [
            {
                "instance_id": "i",
                "instance_group": "g",
                "block_size": 4,
                "location_spec_infos": [{"name": "kv", "size": 1024}],
                "location_spec_groups": [{"name": "full", "spec_names": ["kv"]}],
            }
        ],
    }
    (tmp_path / "c.json").write_text(json.dumps(config))
    assert main(["replay", str(tmp_path / "c.json")]) == 0
    out_csv = tmp_path / "curve.csv"
    facts = str(tmp_path / "out" / "litehit_facts.csv")
    assert main(["curve", facts, "--no-png", "--csv", str(out_csv)]) == 0
    capsys.readouterr()
    with open(out_csv, newline="") as fh:
        offline = [(int(r["capacity_bytes"]), int(r["hit_tokens"])) for r in csv.DictReader(fh)]
    online = hit_rate_curve_from_pb(client.get_hit_rate_curve("i", max_points=100_000))
    assert online.corners_complete
    assert [(p.capacity_bytes, p.hit_tokens) for p in online.points] == offline
    assert len(offline) > 50

    assert main(["curve", facts, "--no-png"]) == 0
    offline_table = capsys.readouterr().out
    address = client.address
    live_csv = tmp_path / "live.csv"
    live_png = tmp_path / "live.png"
    code = main(["curve", "--server", address, "--instance", "i", "--csv", str(live_csv),
                 "-o", str(live_png)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == offline_table
    assert live_csv.read_text() == out_csv.read_text()
    assert live_png.stat().st_size > 10_000
    assert err.startswith("curve: 400 requests, 1 instances, ")
    # a curve longer than the points asked for: samples plus exact values where it is read
    sampled = fetch_live_curve(client, "i", max_points=20)
    assert not sampled.exact_everywhere and len(sampled.answer.points) == 20
    assert format_table([sampled.curve]) == offline_table


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["curve", "--server", "127.0.0.1:1", "--no-png"], "--server needs --instance ID"),
        (["curve", "f.csv", "--server", "h:1", "--instance", "i", "--no-png"], "not both"),
        (["curve", "--no-png"], "FACTS.csv is required (or --server HOST:PORT --instance ID"),
        (["curve", "f.csv", "--no-png", "--timeout", "3"], "only apply with --server"),
    ],
)
def test_curve_server_usage_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("litehit curve: error: ") and message in err


def test_curve_server_unknown_instance_and_unreachable_server(live, tmp_path: Path, capsys):
    _, client = live
    png = tmp_path / "x.png"
    assert main(["curve", "--server", client.address, "--instance", "zz", "-o", str(png)]) == 2
    assert "instance_id 'zz' is not registered" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
        code = main(["curve", "--server", dead, "--instance", "i", "--timeout", "0.5",
                     "--no-png"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and f"litehit curve: error: {dead} unreachable" in err
    assert not png.exists() and not list(tmp_path.iterdir())
