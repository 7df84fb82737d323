"""Offline replay: config parsing, routing, facts ledger, fail-fast, workers, real traces."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from oracle import oracle_hits

from litehit_core import (
    FACTS_HEADER,
    FactRow,
    HitCurveSegment,
    LocatedError,
    apply_prefix_hash,
    format_fact_row,
    normalize_request,
    query_facts,
    read_facts,
)
from litehit_service.cli import main
from litehit_service.litehit.config import (
    ReplayConfig,
    group_from_dict,
    load_config,
    registration_from_dict,
    replay_config_from_dict,
)
from litehit_service.litehit.replay import run_replay
from litehit_service.manager import OnlineOptimizerManager
from litehit_service.model import (
    InstanceGroup,
    InstanceRegistration,
    LocationSpec,
    LocationSpecGroup,
)
from litehit_service.policy import QueryPolicy

ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3
SLOT2 = 2048 / GIB  # 2 blocks of 1024 bytes
SLOT3 = 3072 / GIB  # 3 blocks of 1024 bytes
A, B, C, D, E = 1, 2, 3, 4, 5


# ----------------------------------------------------------------------------- helpers


def group(name: str = "g", caps: tuple[float, ...] = (SLOT2, SLOT3), **kw: Any) -> dict[str, Any]:
    return {"name": name, "capacity_gb": list(caps), "enable_theoretical_max_cache": True, **kw}


def instance(iid: str = "i", grp: str = "g", block_size: int = 4, size: int = 1024) -> dict:
    return {
        "instance_id": iid,
        "instance_group": grp,
        "block_size": block_size,
        "location_spec_infos": [{"name": "hbm", "size": size}],
        "location_spec_groups": [{"name": "full", "spec_names": ["hbm"]}],
        "optimizer_state_info": {"full_location_spec_group_name": "full"},
        "linear_step": 0,
    }


def ev(iid: str, ts: int, keys: list[int], input_len: int, kind: str = "get", **kw: Any) -> str:
    obj = {"type": kind, "instance_id": iid, "timestamp_ns": ts, "keys": keys, **kw}
    if input_len:
        obj["input_len"] = input_len
    return json.dumps(obj)


def setup(
    tmp: Path,
    lines: list[str],
    groups: list[dict] | None = None,
    instances: list[dict] | None = None,
    trace_name: str = "trace.jsonl",
    **top: Any,
) -> Path:
    """Write the trace and a config (indent 2, one field per line) into ``tmp``."""
    (tmp / trace_name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    config = {
        "trace_file_path": trace_name,
        "output_result_path": "out",
        "block_size": 4,
        "instance_groups": groups if groups is not None else [group()],
        "instances": instances if instances is not None else [instance()],
        **top,
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(["replay", *argv])
    return rc, capsys.readouterr().err


def facts_text(tmp: Path) -> str:
    return (tmp / "out" / "litehit_facts.csv").read_text(encoding="utf-8")


def assert_nothing_published(tmp: Path) -> None:
    out = tmp / "out"
    assert not (out / "litehit_facts.csv").exists()
    assert not list(out.glob("*.tmp"))


WORKED = [
    ev("i", 1, [A, B, C], 13, trace_id="r1"),
    ev("i", 2, [A, B, D], 12, trace_id="r2"),
    ev("i", 3, [A, B, C], 13, trace_id="r3"),
    ev("i", 4, [A, E], 8, trace_id="r4"),
    ev("i", 5, [A, E], 8, trace_id="r5"),
]
WORKED_FACTS = (
    FACTS_HEADER + "\n"
    'r1,i,1,13,4,1024,"[]"\n'
    'r2,i,2,12,4,1024,"[[1,2]]"\n'
    'r3,i,3,13,4,1024,"[[1,2],[4,1]]"\n'
    'r4,i,4,8,4,1024,"[[1,1]]"\n'
    'r5,i,5,8,4,1024,"[[1,2]]"\n'
)


# ----------------------------------------------------------------------------- end to end


def test_json_summary_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = setup(tmp_path, WORKED)
    for extra in ([], ["--quiet"]):  # --quiet drops the bar and the text, not the object
        assert main(["replay", str(cfg), "--json", *extra]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        assert out.count("\n") == 1 and out.endswith("}\n")
        summary = json.loads(out)
        elapsed, rate = summary.pop("elapsed_s"), summary.pop("requests_per_s")
        assert type(elapsed) is float and elapsed > 0 and rate == pytest.approx(5 / elapsed)
        assert summary == {
            "requests": 5,
            "rows": 5,
            "writes_skipped": 0,
            "facts_path": str(tmp_path / "out" / "litehit_facts.csv"),
            "instances": [
                {
                    "instance_id": "i",
                    "instance_group": "g",
                    "block_size": 4,
                    "requests": 5,
                    "input_tokens": 54,
                    "capacities": [
                        {
                            "capacity_gb": SLOT2,
                            "capacity_blocks": 2,
                            "hit_blocks": 7,
                            "hit_tokens": 28,
                            "hit_rate": 28 / 54,
                        },
                        {
                            "capacity_gb": SLOT3,
                            "capacity_blocks": 3,
                            "hit_blocks": 7,
                            "hit_tokens": 28,
                            "hit_rate": 28 / 54,
                        },
                    ],
                    "theoretical_hit_tokens": 32,
                    "theoretical_hit_rate": 32 / 54,
                }
            ],
        }


def test_json_summary_of_several_instances_and_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [*WORKED, ev("i", 6, [A], 4, kind="write")]
    groups = [group(), {"name": "whole", "capacity_gb": [1, 0.5]}]  # no theoretical maximum
    instances = [instance("i"), instance("b", "whole", block_size=8, size=2048)]
    cfg = setup(tmp_path, lines, groups, instances, fanout_all_instances=True)
    assert main(["replay", str(cfg), "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert (summary["requests"], summary["rows"], summary["writes_skipped"]) == (5, 10, 1)
    b, i = summary["instances"]  # sorted by id
    assert (i["instance_id"], i["theoretical_hit_tokens"]) == ("i", 32)
    assert b == {
        "instance_id": "b",
        "instance_group": "whole",
        "block_size": 8,
        "requests": 5,
        "input_tokens": 54,
        "capacities": [  # ascending, a whole number of GiB as an int
            {
                "capacity_gb": 0.5,
                "capacity_blocks": 262144,
                "hit_blocks": 3,
                "hit_tokens": 24,
                "hit_rate": 24 / 54,
            },
            {
                "capacity_gb": 1,
                "capacity_blocks": 524288,
                "hit_blocks": 3,
                "hit_tokens": 24,
                "hit_rate": 24 / 54,
            },
        ],
        "theoretical_hit_tokens": None,
        "theoretical_hit_rate": None,
    }


def test_summary_on_stdout_as_a_program(tmp_path: Path) -> None:
    cfg = setup(tmp_path, WORKED)
    argv = [sys.executable, "-m", "litehit_service", "replay", str(cfg)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("  i (group g, block 4 tokens, 5 requests)")
    assert lines[1].startswith("replay: 5 requests, 1 instances, 5 rows, ")
    result = subprocess.run(argv + ["--json"], capture_output=True, text=True, env=env, timeout=120)
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout)["instances"][0]["theoretical_hit_tokens"] == 32


def test_worked_example_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = setup(tmp_path, WORKED)
    rc = main(["replay", str(cfg)])
    out, err = capsys.readouterr()
    assert (rc, err) == (0, "")  # the summary is on stdout; no bar (stderr is no terminal)
    assert facts_text(tmp_path) == WORKED_FACTS
    assert not list((tmp_path / "out").glob("*.tmp"))
    first, last = out.splitlines()
    assert first == (
        "  i (group g, block 4 tokens, 5 requests): token hit rate 1.90735e-06 GiB 51.85%, "
        "2.86102e-06 GiB 51.85%, inf 59.26%"
    )
    assert last.startswith("replay: 5 requests, 1 instances, 5 rows, ")
    assert last.endswith(f"requests/s -> {tmp_path / 'out' / 'litehit_facts.csv'}")

    rows = list(query_facts(read_facts(tmp_path / "out" / "litehit_facts.csv"), [SLOT2, SLOT3, -1]))
    assert [r["hit_blocks"] for r in rows[:5]] == [
        [0, 0, 0],
        [2, 2, 2],
        [2, 2, 3],
        [1, 1, 1],
        [2, 2, 2],
    ]
    summary = rows[5]
    assert summary["instance_id"] == "i"
    assert summary["total_input_tokens"] == 54
    assert summary["total_hit_tokens"] == [28, 28, 32]
    assert summary["hit_rates"] == [28 / 54, 28 / 54, 32 / 54]


def test_run_replay_summary_matches_manager_counters(tmp_path: Path) -> None:
    summary = run_replay(load_config(setup(tmp_path, WORKED)), progress=False)
    assert (summary.requests, summary.rows, summary.instances, summary.writes_skipped) == (
        5,
        5,
        1,
        0,
    )
    assert summary.facts_path == str(tmp_path / "out" / "litehit_facts.csv")
    (s,) = summary.instance_summaries
    assert s.total_queries == 5 and s.total_input_tokens == 54
    assert [(c.capacity_blocks, c.total_hits, c.hit_rate) for c in s.capacity_summaries] == [
        (2, 7, 28 / 54),
        (3, 7, 28 / 54),
    ]
    assert (s.total_max_hits, s.max_hit_rate) == (8, 32 / 54)
    assert summary.requests_per_s == pytest.approx(5 / summary.elapsed_s)


def test_rows_quote_ids_exactly_like_the_core_formatter(tmp_path: Path) -> None:
    lines = [
        ev("gpu,0", 7, [A, B], 9, trace_id='say "hi", twice'),
        ev("gpu,0", 8, [A, B], 8, trace_id="multi\nline"),
        ev("gpu,0", 9, [A], 4),
    ]
    cfg = setup(tmp_path, lines, instances=[instance("gpu,0")])
    summary = run_replay(load_config(cfg), progress=False)
    expected = [
        FactRow('say "hi", twice', "gpu,0", 7, 9, 4, 1024, ()),
        FactRow("multi\nline", "gpu,0", 8, 8, 4, 1024, (HitCurveSegment(1, 2),)),
        FactRow("3", "gpu,0", 9, 4, 4, 1024, (HitCurveSegment(1, 1),)),
    ]
    text = Path(summary.facts_path).read_text(encoding="utf-8")
    assert text == FACTS_HEADER + "\n" + "".join(map(format_fact_row, expected))
    assert list(read_facts(summary.facts_path)) == expected


# ----------------------------------------------------------------------------- reconciliation


def random_trace(seed: int, n: int) -> list[tuple[str, int, list[int], int, str]]:
    """(instance, ts, keys, input_len, kind): prefix-chained conversations sharing a system
    prompt, routed to a/b/c, with write events sprinkled in; timestamps non-decreasing."""
    rng = random.Random(seed)
    system = [rng.randrange(1 << 40) for _ in range(2)]
    convs = [
        system + [rng.randrange(1 << 40) for _ in range(rng.randrange(4, 40))] for _ in range(25)
    ]
    out = []
    ts = 1_000_000_000
    for _ in range(n):
        ts += rng.choice([0, 50_000_000, 400_000_000, 1_500_000_000])
        raw = rng.choice(convs)
        blocks = rng.randrange(1, len(raw) + 1)
        keys = apply_prefix_hash(raw[:blocks])
        if rng.random() < 0.1:
            out.append((rng.choice("abc"), ts, keys, 0, "write"))
            continue
        out.append((rng.choice("abc"), ts, keys, blocks * 4 + rng.randrange(4), "get"))
    return out


def test_offline_facts_reconcile_with_online_trace_query_and_naive_lru(tmp_path: Path) -> None:
    caps_blocks = (3, 17, 60)
    caps = tuple(c * 1024 / GIB for c in caps_blocks)
    trace = random_trace(7, 600)
    cfg = setup(
        tmp_path,
        [ev(i, ts, k, n, kind) for i, ts, k, n, kind in trace],
        groups=[group("g", caps), group("t", caps, ttl_seconds=2)],
        instances=[instance("a"), instance("b", block_size=8, size=2048), instance("c", "t")],
    )
    config = load_config(cfg)
    summary = run_replay(config, progress=False)
    requests = [t for t in trace if t[4] != "write"]
    assert summary.requests == len(requests) and summary.writes_skipped == len(trace) - len(
        requests
    )

    online = OnlineOptimizerManager(policy=QueryPolicy.offline(trace_block_size_tokens=4))
    for g in config.instance_groups:
        online.create_group(g)
    for reg in config.instances:
        online.register_instance(reg)
    expected = []
    for iid, ts, keys, n, _ in requests:
        r = online.trace_query(iid, keys, input_token_len=n, timestamp_ns=ts)
        expected.append(
            [c.cache_hit_count for c in r.capacity_results] + [r.theoretical.max_hit_count]
        )

    projected = list(query_facts(read_facts(summary.facts_path), [*caps, -1]))
    got = [row["hit_blocks"] for row in projected if "summary" not in row]
    assert got == expected
    assert [row["instance_id"] for row in projected[: len(requests)]] == [t[0] for t in requests]

    # ... and both equal a naive OrderedDict LRU per instance (exactness, not just agreement)
    lanes = {"a": (4, 0), "b": (8, 0), "c": (4, 2_000_000_000)}
    for iid, (bs, ttl) in lanes.items():
        mine = [i for i, t in enumerate(requests) if t[0] == iid]
        keys = [normalize_request(requests[i][2], requests[i][3], bs, False, 4)[0] for i in mine]
        times = [requests[i][1] for i in mine]
        block_bytes = 2048 if iid == "b" else 1024
        cap_blocks = [c * 1024 // block_bytes for c in caps_blocks]
        naive = oracle_hits(keys, [*cap_blocks, None], times, ttl)
        assert [got[i] for i in mine] == naive, iid
    assert sum(1 for g in got if g[-1]) > 100  # the trace really hits


def test_workers_1_and_4_write_byte_identical_facts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = random_trace(11, 3000)
    lines = [
        ev(i, ts, k, n, kind, trace_id=f"t{j},x") for j, (i, ts, k, n, kind) in enumerate(trace)
    ]
    lines.insert(1000, "")  # blank lines are skipped in both modes
    cfg = setup(
        tmp_path,
        lines,
        groups=[group("g", (3 * 1024 / GIB, 40 * 1024 / GIB))],
        instances=[instance("a"), instance("b", block_size=8), instance("c")],
    )
    rc, err = cli(capsys, str(cfg), "--quiet")
    assert rc == 0 and err == ""
    one = (tmp_path / "out" / "litehit_facts.csv").read_bytes()
    rc, err = cli(capsys, str(cfg), "--quiet", "--max-workers", "4")
    assert rc == 0 and err == ""
    four = (tmp_path / "out" / "litehit_facts.csv").read_bytes()
    assert one == four
    assert one.count(b"\n") == 1 + sum(1 for t in trace if t[4] != "write")


def test_workers_report_the_same_first_error_and_publish_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [ev("i", 10 + j, [j, j + 1], 8) for j in range(2000)]
    lines[1499] = ev("i", 5, [1], 4)  # line 1500 goes backwards ...
    lines[1799] = "{not json"  # ... before a malformed line in a later batch
    cfg = setup(tmp_path, lines)
    for workers in ("1", "3"):
        rc, err = cli(capsys, str(cfg), "--max-workers", workers)
        assert rc == 2
        trace = tmp_path / "trace.jsonl"
        assert (
            err == f"{trace}:1500: instance_id 'i': timestamp_ns 5 goes backwards (the "
            "instance's clock is at 1508); events must be in time order\n"
        )
        assert_nothing_published(tmp_path)


# ----------------------------------------------------------------------------- routing


def test_fanout_gives_independent_rows_per_block_size(tmp_path: Path) -> None:
    trace = [t for t in random_trace(3, 300) if t[4] == "get"]
    lines = [ev("anything", ts, k, n) for _, ts, k, n, _ in trace]
    insts = [instance("fine", block_size=4), instance("coarse", block_size=8)]
    summary = run_replay(
        load_config(setup(tmp_path, lines, instances=insts, fanout_all_instances=True)),
        progress=False,
    )
    assert (summary.requests, summary.rows) == (len(trace), 2 * len(trace))
    rows = Path(summary.facts_path).read_text(encoding="utf-8").splitlines()[1:]
    assert [r.split(",")[1] for r in rows] == ["fine", "coarse"] * len(trace)
    by_id = {s.instance_id: s for s in summary.instance_summaries}
    assert by_id["fine"].total_queries == by_id["coarse"].total_queries == len(trace)
    assert by_id["fine"].debug_info.block_size == 4 and by_id["coarse"].debug_info.block_size == 8
    assert by_id["fine"].total_blocks_queried == 2 * by_id["coarse"].total_blocks_queried + sum(
        (n // 4) % 2 for _, _, _, n, _ in trace
    )
    # each lane's rows are exactly what a replay of that instance alone writes
    for iid in ("fine", "coarse"):
        sub = tmp_path / iid
        sub.mkdir()
        alone = run_replay(
            load_config(setup(sub, lines, instances=insts, override_instance_id=iid)),
            progress=False,
        )
        assert Path(alone.facts_path).read_text(encoding="utf-8").splitlines()[1:] == [
            r for r in rows if r.split(",")[1] == iid
        ]
    fine_rates = [c.hit_rate for c in by_id["fine"].capacity_summaries]
    coarse_rates = [c.hit_rate for c in by_id["coarse"].capacity_summaries]
    assert fine_rates != coarse_rates


def test_override_routes_every_request(tmp_path: Path) -> None:
    lines = [ev("x", 1, [A, B], 8), ev("y", 2, [A, B], 8), ev("nobody", 3, [A], 4)]
    insts = [instance("a"), instance("b")]
    summary = run_replay(
        load_config(setup(tmp_path, lines, instances=insts, override_instance_id="b")),
        progress=False,
    )
    assert Path(summary.facts_path).read_text(encoding="utf-8") == (
        FACTS_HEADER + '\n1,b,1,8,4,1024,"[]"\n2,b,2,8,4,1024,"[[1,2]]"\n3,b,3,4,4,1024,"[[1,1]]"\n'
    )
    by_id = {s.instance_id: s.total_queries for s in summary.instance_summaries}
    assert by_id == {"a": 0, "b": 3}


def test_ttl_replay_uses_trace_timestamps(tmp_path: Path) -> None:
    s = 1_000_000_000
    lines = [
        ev("i", 1000 * s, [A, B, C], 12),
        ev("i", 1005 * s, [A, B, C], 12),
        ev("i", 1015 * s, [A, B, C], 12),  # 10 s after the last access: expired at TTL 10
        ev("i", 1024 * s, [A, B, C], 12, kind="write"),
        ev("i", 1024 * s, [A, B, C], 12),  # 9 s: still alive at TTL 10
    ]
    cfg = setup(
        tmp_path,
        lines,
        groups=[group("ttl10", ttl_seconds=10), group("ttl9", ttl_seconds=9), group("off")],
        instances=[instance("t10", "ttl10"), instance("t9", "ttl9"), instance("off", "off")],
        fanout_all_instances=True,
    )
    summary = run_replay(load_config(cfg), progress=False)
    curves: dict[str, list[str]] = {}
    for row in read_facts(summary.facts_path):
        curves.setdefault(row.instance_id, []).append(row.hit_curve)
    full = (HitCurveSegment(1, 3),)
    assert curves == {
        "t10": [(), full, (), full],
        "t9": [(), full, (), ()],
        "off": [(), full, full, full],
    }
    assert summary.writes_skipped == 1


def test_mooncake_sample_drops_partial_tail_and_accepts_time_zero(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}
        ),
        json.dumps(
            {"timestamp": 5000, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}
        ),
        json.dumps(
            {"timestamp": 20000, "input_length": 600, "output_length": 5, "hash_ids": [1, 9]}
        ),
    ]
    cfg = setup(
        tmp_path,
        lines,
        groups=[group("g", (4 * 1024 / GIB,), ttl_seconds=10)],
        instances=[instance("m", block_size=512)],
        block_size=512,
        trace_format="mooncake",
    )
    summary = run_replay(load_config(cfg), progress=False)
    assert Path(summary.facts_path).read_text(encoding="utf-8") == (
        FACTS_HEADER + "\n"
        '1,m,0,1100,512,1024,"[]"\n'
        '2,m,5000000000,1024,512,1024,"[[1,2]]"\n'
        '3,m,20000000000,600,512,1024,"[]"\n'  # 15 s after the last access: expired
    )


def test_lmcache_models_are_instances_sorted_by_time(tmp_path: Path) -> None:
    def lm(ts: float, rid: str, model: str, hashes: list[str], chunk: int = 256) -> str:
        return json.dumps(
            {
                "timestamp": ts,
                "request_id": rid,
                "model_name": model,
                "chunk_size": chunk,
                "seq_len": 256 * len(hashes) + 10,
                "dtypes": ["torch.float16"],
                "shapes": [[2, 4, 256, 2, 8]],
                "chunk_hashes": hashes,
            }
        )

    lines = [
        lm(2.5, "r2", "m1", ["0xa", "0xb"]),
        lm(1.0, "r1", "m1", ["0xa"]),
        lm(2.0, "r3", "m2", ["0xa"]),
    ]
    # an exotic dtype is no obstacle: block bytes come from the config's location specs
    lines[2] = lines[2].replace("torch.float16", "torch.int4")
    cfg = setup(
        tmp_path,
        lines,
        instances=[instance("m1", block_size=256), instance("m2", block_size=512)],
        block_size=256,
        trace_format="lmcache",
    )
    summary = run_replay(load_config(cfg), progress=False)
    assert Path(summary.facts_path).read_text(encoding="utf-8") == (
        FACTS_HEADER + "\n"
        'r1,m1,1000000000,266,256,1024,"[]"\n'
        'r3,m2,2000000000,266,512,1024,"[]"\n'
        'r2,m1,2500000000,522,256,1024,"[[1,1]]"\n'
    )
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg = setup(
        bad,
        lines,
        instances=[instance("m1", block_size=512)],
        block_size=512,
        trace_format="lmcache",
    )
    with pytest.raises(LocatedError) as info:
        run_replay(load_config(cfg), progress=False)
    assert str(info.value) == (
        f"{bad / 'trace.jsonl'}:0: model 'm1' has chunk_size 256 but the config's trace "
        "block_size is 512"
    )
    assert_nothing_published(bad)


# ----------------------------------------------------------------------------- fail fast

FAIL_CASES = {
    "backwards timestamp on a get": (
        [ev("i", 10, [A], 4), ev("i", 20, [A], 4), ev("i", 15, [A], 0, kind="write")]
        + [ev("i", 19, [A], 4)],
        4,
        "instance_id 'i': timestamp_ns 19 goes backwards (the instance's clock is at 20); "
        "events must be in time order",
    ),
    "unknown instance": (
        [ev("i", 10, [A], 4), ev("gpu-9", 20, [A], 4)],
        2,
        "instance_id 'gpu-9' is not a configured instance ['i']; set override_instance_id or "
        "fanout_all_instances to route every request",
    ),
    "length rule": (
        [ev("i", 10, [A], 4), ev("i", 20, [A, B, C], 20)],
        2,
        "instance_id 'i': len(block_keys) is 3 but input_token_len 20 // block size 4 is 5 "
        "(complete blocks only)",
    ),
    "zero valid rows": (
        [ev("i", 10, [A], 0, kind="write"), "", ev("i", 20, [B], 0, kind="write")],
        0,
        "no valid rows: the trace holds no get/request events (only 2 write events)",
    ),
    "empty trace": ([], 0, "no valid rows: the trace holds no get/request events (it is empty)"),
    "malformed JSON line": (
        [ev("i", 10, [A], 4), '{"type": "get", "instance_id": "i",'],
        2,
        "invalid JSON: Expecting property name enclosed in double quotes at column 36",
    ),
    "bad field": (
        [ev("i", 10, [A], 4), ev("i", 20, [A], -4)],
        2,
        "field 'input_len' must be an integer > 0; got -4",
    ),
}


@pytest.mark.parametrize("case", sorted(FAIL_CASES))
def test_trace_errors_fail_fast_with_path_and_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines, line_no, reason = FAIL_CASES[case]
    cfg = setup(tmp_path, lines)
    rc, err = cli(capsys, str(cfg))
    assert rc == 2
    assert err == f"{tmp_path / 'trace.jsonl'}:{line_no}: {reason}\n"
    assert_nothing_published(tmp_path)


def test_missing_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = setup(tmp_path, WORKED)
    (tmp_path / "trace.jsonl").unlink()
    rc, err = cli(capsys, str(cfg))
    assert rc == 2
    assert (
        err == f"{tmp_path / 'trace.jsonl'}:0: cannot read the trace: No such file or directory\n"
    )
    assert_nothing_published(tmp_path)


def test_failed_replay_keeps_the_previous_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = setup(tmp_path, WORKED)
    assert cli(capsys, str(cfg))[0] == 0
    setup(tmp_path, [*WORKED, ev("i", 1, [A], 4)])
    rc, err = cli(capsys, str(cfg))
    assert rc == 2
    assert err.startswith(f"{tmp_path / 'trace.jsonl'}:6: instance_id 'i': timestamp_ns 1 goes")
    assert facts_text(tmp_path) == WORKED_FACTS
    assert not list((tmp_path / "out").glob("*.tmp"))


def config_line(path: Path, needle: str) -> int:
    """1-based line of the first config line containing ``needle``."""
    for no, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in text:
            return no
    raise AssertionError(needle)


def test_unknown_config_field_names_path_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = instance()
    bad["blok_size"] = bad.pop("block_size")
    cfg = setup(tmp_path, WORKED, instances=[bad])
    rc, err = cli(capsys, str(cfg))
    assert rc == 2
    assert err == (
        f"{cfg}:{config_line(cfg, 'blok_size')}: instances[0].blok_size: unknown field "
        "'blok_size' (allowed: instance_id, instance_group, block_size, location_spec_infos, "
        "location_spec_groups, optimizer_state_info, linear_step); did you mean 'block_size'?\n"
    )
    assert_nothing_published(tmp_path)


def test_instance_block_size_must_coarsen_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = setup(tmp_path, WORKED, instances=[instance(block_size=6)])
    rc, err = cli(capsys, str(cfg))
    assert rc == 2
    line = config_line(cfg, '"block_size": 6')
    assert err == (
        f"{cfg}:{line}: instances[0].block_size: 6 must be a "
        "positive multiple of the trace block_size 4 (re-blocking only coarsens)\n"
    )
    assert_nothing_published(tmp_path)


def test_manager_rules_are_reported_at_the_config_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = setup(tmp_path, WORKED, groups=[group(caps=(SLOT2, 0))])
    rc, err = cli(capsys, str(cfg))
    assert rc == 2
    line = config_line(cfg, '"instance_groups"') + 1  # the group object's opening brace
    assert err == (
        f"{cfg}:{line}: instance_groups[0]: capacity_gb[1] of instance group 'g' must be "
        "finite and > 0, got 0.0\n"
    )
    assert_nothing_published(tmp_path)


# ----------------------------------------------------------------------------- config


def test_config_defaults_and_relative_paths(tmp_path: Path) -> None:
    data = {
        "trace_file_path": "t.jsonl",
        "output_result_path": "res",
        "instance_groups": [{"name": "g", "capacity_gb": [1, 2.5]}],
        "instances": [instance(block_size=512)],
    }
    cfg = replay_config_from_dict(data, base_dir=tmp_path)
    assert cfg == ReplayConfig(
        trace_file_path=str(tmp_path / "t.jsonl"),
        output_result_path=str(tmp_path / "res"),
        instance_groups=(InstanceGroup("g", (1.0, 2.5)),),
        instances=(
            InstanceRegistration(
                "i",
                "g",
                512,
                (LocationSpec("hbm", 1024),),
                (LocationSpecGroup("full", ("hbm",)),),
                full_location_spec_group_name="full",
            ),
        ),
    )
    assert (cfg.block_size, cfg.pipeline_worker_count, cfg.trace_format) == (256, 1, "standard")
    assert (cfg.override_instance_id, cfg.fanout_all_instances) == ("", False)


BASE = {
    "trace_file_path": "t.jsonl",
    "output_result_path": "out",
    "instance_groups": [group()],
    "instances": [instance()],
    "block_size": 4,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"instances": [{**instance(), "block_size": "4"}]},
            'instances[0].block_size: must be an integer, got string "4"',
        ),
        (
            {"instances": [{**instance(), "location_spec_infos": [{"name": "hbm", "sise": 1}]}]},
            "instances[0].location_spec_infos[0].sise: unknown field 'sise' (allowed: name, size); "
            "did you mean 'size'?",
        ),
        (
            {"instance_groups": [{**group(), "enable_prefix_hash": 1}]},
            "instance_groups[0].enable_prefix_hash: must be true or false, got number 1",
        ),
        (
            {"instance_groups": [{**group(), "capacity_gb": [1, "2"]}]},
            'instance_groups[0].capacity_gb[1]: must be a number of GiB, got string "2"',
        ),
        (
            {"instance_groups": [{**group(), "eviction_policy": "fifo"}]},
            "instance_groups[0].eviction_policy: must be 'lru' (or 'unspecified'), got 'fifo'",
        ),
        (
            {"instances": [{**instance(), "optimizer_state_info": {"full": "x"}}]},
            "instances[0].optimizer_state_info.full: unknown field 'full' (allowed: "
            "full_location_spec_group_name, linear_location_spec_group_name)",
        ),
        (
            {"trace_fromat": "standard"},
            "trace_fromat: unknown field 'trace_fromat' (allowed: trace_file_path, "
            "output_result_path, instance_groups, instances, block_size, override_instance_id, "
            "fanout_all_instances, pipeline_worker_count, trace_format); did you mean "
            "'trace_format'?",
        ),
        (
            {"trace_format": "csv"},
            "trace_format: must be one of ['standard', 'mooncake', 'lmcache'], got 'csv'",
        ),
        ({"block_size": 0}, "block_size: must be an integer > 0 (tokens per trace key), got 0"),
        ({"pipeline_worker_count": 0}, "pipeline_worker_count: must be an integer >= 1, got 0"),
        ({"instances": []}, "instances: must list at least one instance"),
        (
            {"instances": [instance(), instance()]},
            "instances[1].instance_id: 'i' is already used by instances[0]",
        ),
        (
            {"override_instance_id": "i", "fanout_all_instances": True},
            "override_instance_id: override_instance_id and fanout_all_instances are mutually "
            "exclusive",
        ),
        (
            {"override_instance_id": "j"},
            "override_instance_id: 'j' is not one of the configured instances ['i']",
        ),
        (
            {"trace_format": "mooncake", "instances": [instance("a"), instance("b")]},
            "trace_format: a mooncake trace has no instance ids but 2 instances are configured: "
            "set override_instance_id or fanout_all_instances",
        ),
        (
            {"instances": [{k: v for k, v in instance().items() if k != "instance_group"}]},
            "instances[0].instance_group: missing required field",
        ),
    ],
)
def test_config_errors_name_the_field(change: dict[str, Any], message: str, tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**BASE, **change}, indent=2), encoding="utf-8")
    with pytest.raises(LocatedError) as info:
        load_config(path)
    text = str(info.value)
    assert text.startswith(f"{path}:") and text.endswith(": " + message)
    assert int(text[len(str(path)) + 1 :].split(":")[0]) > 0  # located on a real line


def test_config_duplicate_field_and_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{\n "block_size": 4,\n "block_size": 8\n}\n', encoding="utf-8")
    with pytest.raises(LocatedError, match=r"c\.json:3: block_size: duplicate field"):
        load_config(path)
    path.write_text('{\n "block_size": 4,\n}\n', encoding="utf-8")
    with pytest.raises(LocatedError, match=r"c\.json:3: invalid JSON: Expecting property name"):
        load_config(path)
    with pytest.raises(LocatedError, match=r"missing\.json:0: cannot read the config"):
        load_config(tmp_path / "missing.json")


def test_entry_parsers_are_reusable_with_a_prefix() -> None:
    g = group_from_dict(
        {"name": "g", "capacity_gb": [8], "eviction_policy": "LRU"}, "groups.yaml: x"
    )
    assert g == InstanceGroup("g", (8.0,))
    with pytest.raises(LocatedError) as info:
        group_from_dict(
            {"name": "g", "capacity_gb": [8], "ttl": 3}, "groups.yaml: instance_groups[2]"
        )
    assert str(info.value).startswith("groups.yaml: instance_groups[2].ttl: unknown field 'ttl'")
    reg = registration_from_dict(instance("x", block_size=16), "instances[0]")
    assert (reg.instance_id, reg.block_size, reg.full_location_spec_group_name) == ("x", 16, "full")
    with pytest.raises(LocatedError, match=r"^instances\[0\]: must be an object, got array \[\]$"):
        registration_from_dict([], "instances[0]")


# ----------------------------------------------------------------------------- real trace


def test_mooncake_conversation_trace_hit_rates(mooncake: Path, tmp_path: Path) -> None:
    # 1 MiB blocks: capacity_gb = blocks / 1024 is exact, so the slots are 1708/17089/85449.
    caps = [1708 / 1024, 17089 / 1024, 85449 / 1024]
    config = replay_config_from_dict(
        {
            "trace_file_path": str(mooncake),
            "output_result_path": "out",
            "block_size": 512,
            "trace_format": "mooncake",
            "instance_groups": [group("g", tuple(caps))],
            "instances": [instance("mooncake", block_size=512, size=1 << 20)],
        },
        base_dir=tmp_path,
    )
    summary = run_replay(config, progress=False)
    assert summary.requests == 12031
    (s,) = summary.instance_summaries
    assert [c.capacity_blocks for c in s.capacity_summaries] == [1708, 17089, 85449]
    rates = [round(c.hit_rate, 6) for c in s.capacity_summaries] + [round(s.max_hit_rate, 6)]
    assert rates == [0.053172, 0.281799, 0.370017, 0.373380]
    total = list(query_facts(read_facts(summary.facts_path), [*caps, -1]))[-1]
    assert [round(r, 6) for r in total["hit_rates"]] == rates


def test_unwritable_output_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = setup(tmp_path, WORKED)
    (tmp_path / "out").write_text("not a folder", encoding="utf-8")
    rc, err = cli(capsys, str(cfg))
    assert rc == 2  # the user's path to fix, as for every command
    assert err == (
        f"litehit replay: error: {tmp_path / 'out'}: is a file, not a folder (outputs go into "
        "a folder)\n"
    )
    assert (tmp_path / "out").read_text(encoding="utf-8") == "not a folder"
