"""``litehit optimize --max-workers N`` / ``--executor ray`` and ``--aggregate-window-s W``.

Groups replayed apart (forked processes, real Ray tasks) and merged give the sequential
run's files byte for byte, on seeded traces mixing get/write/request with a write delay
(pending writes land across other groups' reads), TTLs, a tiered group beside untiered
ones, four policies and every eviction mode; the merged rows equal one replay's rows
exactly. The aggregate CSV is checked literally on a hand-built trace and against sums
computed here from the per-instance CSVs. Bad flags exit 2 naming the value; a run killed
while its workers replay leaves no file and no worker behind."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import RAY_MISSING, cli_argv, require

from litehit_core.policy_replay import replay
from litehit_core.policy_replay.loop import TICK
from litehit_service.optimizer.optimize.config import load_optimize_config
from litehit_service.optimizer.optimize.outputs import AGGREGATE_HEADER, write_outputs
from litehit_service.optimizer.optimize.parallel import (
    Merger,
    part_trace,
    plan_parts,
    replay_part,
    run_parallel,
)
from litehit_service.optimizer.optimize.rows import format_csv
from litehit_service.optimizer.optimize.run import build_setup, run_optimize
from litehit_service.optimizer.optimize.trace import load_trace
from tests.conftest import run_cli
from tests.serve_process import serve_env

MIB = 65536  # block_size 16 x 65536 B = 1 MiB a block: quota C/1024 GiB holds C blocks


def inst(iid: str, policy: str, block_size: int = 16, **params: object) -> dict:
    per_token = MIB * 16 // block_size
    return {"instance_id": iid, "block_size": block_size, "bytes_per_token": per_token,
            "eviction_policy_type": policy, "eviction_policy_params": params}  # fmt: skip


def group(name: str, blocks: float, *instances: dict, **extra: object) -> dict:
    g = {"group_name": name, "quota_capacity": blocks / 1024 if blocks >= 0 else -1,
         "used_percentage": 1.0, "instances": list(instances)}  # fmt: skip
    g.update(extra)
    return g


def tiered(name: str, tiers: tuple[int, ...], *instances: dict, **strategy: object) -> dict:
    storages = [{"unique_name": f"t{i}", "priority": i, "capacity": c / 1024}
                for i, c in enumerate(tiers)]  # fmt: skip
    return group(name, -1, *instances, storages=storages,
                 tier_strategy={"hierarchical_eviction_enabled": True, **strategy})  # fmt: skip


def write_config(tmp: Path, groups: list[dict], records: list[dict], *, mode=3, batch=2,
                 delay=0) -> Path:  # fmt: skip
    (tmp / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = {
        "trace_file_path": "trace.jsonl",
        "output_result_path": "out",
        "eviction_params": {"eviction_mode": mode, "eviction_batch_size_per_instance": batch},
        "trace_replay": {"write_delay_ns": delay},
        "instance_groups": groups,
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def seeded_records(seed: int, n: int, ids: str, *, masks: bool = False) -> list[dict]:
    """Get/write/request records over shared prefixes, several at one timestamp, some
    writes with their own TTL (``ttl_us``); ``masks``: a block mask on some reads."""
    rng = random.Random(seed)
    out, t = [], 1000
    for _ in range(n):
        t += rng.choice((0, 0, 10, 30, 70))
        head = rng.randrange(5)
        keys = [100 * head + k for k in range(rng.randint(1, 6))]
        kind = rng.choice(("get", "write", "request", "request", "request"))
        rec = {"type": kind, "instance_id": rng.choice(ids), "timestamp_ns": t, "keys": keys}
        if kind != "write":
            rec["input_len"] = 16 * len(keys) + rng.randrange(16)
            if masks and rng.random() < 0.3:
                rec["block_mask"] = [rng.random() < 0.5 for _ in keys]
        elif rng.random() < 0.3:
            rec["ttl_us"] = rng.choice((-1, 1))
        out.append(rec)
    return out


def mixed_case(tmp: Path, seed: int, mode: int) -> Path:
    """Four groups: LRU + RandomLRU sharing a quota, TTL, a cascading tiered pair
    (leaf-aware and LRU, promotion on), an infinite leaf-aware one; delay 50 ns."""
    groups = [
        group("shared", 14, inst("a", "lru"), inst("b", "random_lru", sample_rate=0.5)),
        group("ttl", 10, inst("c", "ttl"), default_block_ttl_seconds=2e-7),
        tiered(
            "tiers",
            (4, 9),
            inst("d", "leaf_aware_lru"),
            inst("e", "lru"),
            write_mode="cascading",
            promote_enabled=True,
        ),  # fmt: skip
        group("inf", -1, inst("f", "leaf_aware_lru")),
    ]
    return write_config(tmp, groups, seeded_records(seed, 1500, "abcdef"), mode=mode, delay=50)


def loaded(path: Path):
    config = load_optimize_config(path)
    return config, load_trace(config, max_line_bytes=1 << 20)


def csv_texts(result) -> dict[str, str]:
    return {r.instance_id: format_csv(r.rows, r.tier_names) for r in result.instances}


def totals(result) -> list[tuple]:
    return [(r.peak_cached_blocks, r.cached_blocks, r.evicted_blocks, r.expired_blocks,
             r.written_blocks, r.tier_cached_blocks, r.tier_evicted_blocks)
            for r in result.instances]  # fmt: skip


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


@pytest.mark.parametrize(("seed", "mode", "workers"), [(1, 3, 2), (2, 1, 3), (3, 2, 4)])
def test_processes_give_the_sequential_run_byte_for_byte(tmp_path, seed, mode, workers) -> None:
    """Four groups in 2, 3 or 4 parts (two groups share a part below 4)."""
    config, trace = loaded(mixed_case(tmp_path, seed, mode))
    sequential = run_optimize(config, trace, check=True)
    reported: list[int] = []
    parallel = run_parallel(config, trace, workers=workers, progress=reported.append)
    assert csv_texts(parallel) == csv_texts(sequential)
    assert totals(parallel) == totals(sequential)
    assert sum(reported) == len(trace.records.kinds)
    # the case exercises what crosses groups: evictions, expiries, tiers, shared reads
    by_id = {r.instance_id: r for r in sequential.instances}
    assert by_id["c"].expired_blocks > 0 and by_id["a"].evicted_blocks > 0
    assert by_id["d"].rows.tier_hit_tokens[1] + by_id["e"].rows.tier_hit_tokens[1] > 0
    assert len(set(by_id["a"].rows.cached_all.tolist())) > 5


@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_merged_rows_are_one_replays_rows(tmp_path, parts) -> None:
    """In this process: the groups in parts, each over its sub-trace, merged in reverse
    order = one replay of every group, row for row and total for total."""
    config, trace = loaded(mixed_case(tmp_path, 4, 3))
    whole = replay(build_setup(config, trace), trace.records)
    tasks = plan_parts(config, trace, parts)
    assert len(tasks) == parts
    assert sorted(i for t in tasks for i in t.members) == list(range(6))
    merger = Merger(trace, 6, 2)
    for task in reversed(tasks):
        merger.add(replay_part(task, trace))
    merged = merger.result()
    np.testing.assert_array_equal(merged.rows, whole.rows)
    for name in ("cached", "peak", "evicted", "expired", "written", "tier_cached",
                 "tier_evicted"):  # fmt: skip
        np.testing.assert_array_equal(getattr(merged, name), getattr(whole, name))


def test_sub_trace_keeps_the_group_and_ticks_the_other_reads(tmp_path) -> None:
    records = [
        {"type": "request", "instance_id": "a", "timestamp_ns": 1, "keys": [1, 2], "input_len": 32},
        {"type": "write", "instance_id": "b", "timestamp_ns": 2, "keys": [5]},
        {"type": "get", "instance_id": "b", "timestamp_ns": 3, "keys": [5, 6], "input_len": 40},
        {"type": "write", "instance_id": "a", "timestamp_ns": 4, "keys": [3], "ttl_us": 7},
    ]
    groups = [group("g", -1, inst("a", "ttl")), group("h", -1, inst("b", "lru"))]
    _, trace = loaded(write_config(tmp_path, groups, records))
    sub = part_trace(trace, (0,)).records
    assert sub.kinds.tolist() == [2, TICK, 1]
    assert sub.times.tolist() == [1, 3, 4] and sub.insts.tolist() == [0, 0, 0]
    assert sub.key_off.tolist() == [0, 2, 2, 3] and sub.keys.tolist() == [1, 2, 3]
    assert sub.buckets.tolist() == [-1, -1, 0]
    other = part_trace(trace, (1,)).records
    assert other.kinds.tolist() == [TICK, 1, 0] and other.keys.tolist() == [5, 5, 6]


def test_cli_parallel_writes_the_same_files(tmp_path) -> None:
    path = mixed_case(tmp_path, 5, 3)
    outs = {}
    for name, extra in (("seq", ("--max-workers", "1")), ("par", ())):  # default: per CPU
        done = run_cli("optimize", str(path), "--draw-chart", "--aggregate-window-s", "1e-6",
                       "-o", str(tmp_path / name), *extra, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        outs[name] = (done.stdout, files(tmp_path / name))
    assert outs["par"] == outs["seq"]
    assert {"aggregate_hit_rates.csv", "aggregate_hit_rates.png", "d_hit_rates.csv",
            "timeseries/per_tier_timeseries.png"} <= set(outs["seq"][1])  # fmt: skip


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray for the module (the pool uses an initialised Ray as it is); one more
    attempt after a raylet start timeout, as ``test_ray_executor.py`` does."""
    import importlib.util

    require(importlib.util.find_spec("ray") is not None, RAY_MISSING)
    import ray

    def start() -> None:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)

    try:
        start()
    except Exception:  # Ray raises a bare Exception for the raylet timeout
        ray.shutdown()
        start()
    yield
    ray.shutdown()


def test_ray_gives_the_sequential_run_byte_for_byte(tmp_path, ray_cluster) -> None:
    config, trace = loaded(mixed_case(tmp_path, 6, 1))
    sequential = run_optimize(config, trace)
    reported: list[int] = []
    remote = run_parallel(config, trace, workers=3, executor="ray", progress=reported.append)
    assert csv_texts(remote) == csv_texts(sequential)
    assert totals(remote) == totals(sequential)
    assert sum(reported) == len(trace.records.kinds)


def read(kind: str, iid: str, t: int, keys: list[int], input_len: int = 0) -> dict:
    rec = {"type": kind, "instance_id": iid, "timestamp_ns": t, "keys": keys}
    if kind != "write":
        rec["input_len"] = input_len
    return rec


def test_aggregate_csv_of_a_hand_built_trace(tmp_path) -> None:
    """a: 16-token blocks, b: 32-token blocks, each its own group; 100 ns windows from the
    first read at 1000; the windows 1100 and 1200 have no read and are left out."""
    records = [
        read("request", "a", 1000, [1, 2], 40),  # 0 hits
        read("request", "b", 1050, [7], 40),  # 0 hits
        read("request", "a", 1090, [1, 2, 3], 50),  # 2 blocks = 32 tokens
        read("get", "b", 1300, [7, 8], 64),  # 1 block = 32 tokens
        read("write", "a", 1350, [9]),
        read("get", "a", 1399, [9], 16),  # 1 block = 16 tokens
    ]
    groups = [group("g", -1, inst("a", "lru")), group("h", -1, inst("b", "lru", 32))]
    path = write_config(tmp_path, groups, records)
    done = run_cli("optimize", str(path), "--max-workers", "2", "--aggregate-window-s", "1e-7",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "aggregate_hit_rates.csv").read_text() == (
        AGGREGATE_HEADER + "\n"
        "1000,1100,3,6,2,130,32,0.246154,32,130,0.246154\n"
        "1300,1400,2,3,2,80,48,0.600000,80,210,0.380952\n"
    )
    assert (tmp_path / "out" / "aggregate_hit_rates.png").read_bytes()[:4] == b"\x89PNG"


def expected_windows(folder: Path, window_ns: int) -> list[list[str]]:
    """The aggregate rows computed from the per-instance CSVs alone (plain Python)."""
    reads = []
    for p in sorted(folder.glob("*_hit_rates.csv")):
        if p.name == "aggregate_hit_rates.csv":
            continue
        for row in csv.DictReader(io.StringIO(p.read_text())):
            reads.append([int(row[k]) for k in ("TimestampNs", "ReadBlocks", "HitBlocks",
                                                "InputTokens", "HitTokens")])  # fmt: skip
    first = min(r[0] for r in reads)
    sums: dict[int, list[int]] = {}
    for t, *values in reads:
        acc = sums.setdefault((t - first) // window_ns, [0, 0, 0, 0, 0])
        acc[0] += 1
        for i, v in enumerate(values):
            acc[i + 1] += v
    out, acc_hit, acc_in = [], 0, 0
    for w in sorted(sums):
        n, blocks, hits, inp, hit_t = sums[w]
        acc_hit, acc_in = acc_hit + hit_t, acc_in + inp
        start = first + w * window_ns
        out.append([str(v) for v in (start, start + window_ns, n, blocks, hits, inp, hit_t)]
                   + [f"{hit_t / inp if inp else 0:.6f}", str(acc_hit), str(acc_in),
                      f"{acc_hit / acc_in if acc_in else 0:.6f}"])  # fmt: skip
    return out


@pytest.mark.parametrize("window_ns", [1, 70, 1000, 10**12])
def test_aggregate_csv_sums_the_instance_csvs(tmp_path, window_ns) -> None:
    config, trace = loaded(mixed_case(tmp_path, 7, 3))
    result = run_optimize(config, trace)
    out = tmp_path / "agg"
    write_outputs(result, str(out), draw_chart=False, aggregate_window_ns=window_ns)
    lines = (out / "aggregate_hit_rates.csv").read_text().splitlines()
    assert lines[0] == AGGREGATE_HEADER
    got = [line.split(",") for line in lines[1:]]
    assert got == expected_windows(out, window_ns)
    if window_ns == 10**12:
        assert len(got) == 1
    assert sum(int(row[2]) for row in got) == sum(r.rows.reads for r in result.instances)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--max-workers", "0"), "--max-workers: must be an integer >= 1, got '0'"),
        (("--max-workers", "two"), "--max-workers: must be an integer >= 1, got 'two'"),
        (("--executor", "dask"), "--executor: invalid choice: 'dask'"),
        (("--aggregate-window-s", "0"), "must be a number of seconds > 0, got '0'"),
        (("--aggregate-window-s", "-5"), "must be a number of seconds > 0, got '-5'"),
        (("--aggregate-window-s", "nan"), "must be a number of seconds > 0, got 'nan'"),
        (("--aggregate-window-s", "inf"), "must be a number of seconds > 0, got 'inf'"),
        (("--aggregate-window-s", "soon"), "must be a number of seconds > 0, got 'soon'"),
        (("--aggregate-window-s", "1e-12"), "must be at least 1 ns (1e-9), got '1e-12'"),
        (("--ray-address", "auto"), "--ray-address needs --executor ray"),
    ],
)
def test_bad_flags_exit_2_naming_the_value(tmp_path, args, message) -> None:
    path = write_config(tmp_path, [group("g", -1, inst("a", "lru"))],
                        [read("request", "a", 1, [1], 16)])  # fmt: skip
    done = run_cli("optimize", str(path), *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def _children(pid: int) -> set[int]:
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except FileNotFoundError:
        return set()


def test_a_run_stopped_while_workers_replay_writes_nothing_and_ends_them(tmp_path) -> None:
    """SIGTERM while two workers replay: exit 143 at once (the workers are killed, not
    waited for), no output folder, no temporary, no worker left."""
    rng = random.Random(9)  # ~7 s a group on one core: RandomLRU drawing 10^4 per victim
    records = [read("request", "ab"[i % 2], i + 1, [rng.randrange(50_000)
                    for _ in range(rng.randint(1, 30))], 480) for i in range(40_000)]  # fmt: skip
    groups = [group("g", 20_000, inst("a", "random_lru", sample_rate=1e-4)),
              group("h", 20_000, inst("b", "random_lru", sample_rate=1e-4))]  # fmt: skip
    path = write_config(tmp_path, groups, records, mode=1, batch=1, delay=5)
    proc = subprocess.Popen(cli_argv("optimize", str(path), "--max-workers", "2",
                                     "--aggregate-window-s", "1"), cwd=tmp_path, env=serve_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        workers = _children(proc.pid)
        time.sleep(0.05)
    assert len(workers) >= 2, "the workers never started"
    time.sleep(0.3)
    assert proc.poll() is None, "the run ended before it could be stopped: make it longer"
    stopped = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert time.monotonic() - stopped < 2.5, err
    assert not (tmp_path / "out").exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(
            f"/proc/{pid}/status").read_text()  # fmt: skip
