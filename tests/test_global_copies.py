"""``global_duplicate_blocks.csv`` (``optimize --draw-chart`` with several instances): the
sweep on hand-made lives, literal rows end to end, and a seeded differential against the
naive policy oracle's caches read after every record."""

from __future__ import annotations

import csv
import json
import random

import numpy as np
import pytest

from litehit_service.optimizer.analysis.copies import COPIES_HEADER, CopyCounter
from tests.conftest import run_cli
from tests.policy_oracle import Oracle
from tests.test_export_tree import PNG, rec, write_config
from tests.test_policy_replay import random_trace


def _rows(counter: CopyCounter) -> list[tuple[int, int, int, int]]:
    t = counter.table()
    return list(zip(t.timestamp_us.tolist(), t.unique_keys.tolist(), t.copies.tolist(),
                    t.duplicates.tolist(), strict=True))  # fmt: skip


def test_the_sweep_counts_instances_not_tier_copies_and_ends_each_microsecond():
    """Catches: a block in two tiers of one instance counted as two copies; a row per
    change instead of per µs (the 5000 ns death and birth of key 1 in instance 0 are one
    row); a key dropped from the unique count while another instance still holds it."""
    c = CopyCounter()
    # instance 0: key 1 in tier 0 (1000..5000 ns) and tier 1 (2000.. alive), key 2 alive
    c.add(np.array([1, 1, 2]), 0, np.array([1000, 2000, 3000]), np.array([5000, -1, -1]))
    # instance 1: key 1 (4000..9000 ns), key 3 (5000..5500 ns), born and dead in one µs
    c.add(np.array([1, 3]), 1, np.array([4000, 5000]), np.array([9000, 5500]))
    assert _rows(c) == [
        (1, 1, 1, 0),  # key 1 in instance 0; at 2 us its second tier: still one copy, no row
        (3, 2, 2, 0),  # key 2
        (4, 2, 3, 1),  # instance 1 holds key 1 too: a duplicate
        (5, 2, 3, 1),  # tier 0's copy of 1 dies (tier 1 keeps it); key 3 comes and goes
        (9, 2, 2, 0),
    ]
    assert CopyCounter().table().csv_text() == COPIES_HEADER + "\n"


def test_two_instances_end_to_end(tmp_path):
    """Catches: the file missing, misnamed, or written for one instance; lives of one
    instance only gathered; the columns out of the reference's order."""
    records = [
        rec(1000, [1, 2], inst="a"),
        rec(2000, [1, 2, 3], inst="b"),  # 1 and 2 now twice
        rec(3000, [7], inst="a"),
        rec(4000, [1, 2], "get", inst="b"),  # nothing changes: no row
    ]
    config = write_config(tmp_path, records, instances=("a", "b"))
    done = run_cli("optimize", str(config), "--draw-chart", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    text = (out / "global_duplicate_blocks.csv").read_text()
    assert (out / "global_duplicate_blocks.png").read_bytes()[:8] == PNG
    rows = list(csv.reader(text.splitlines()))
    assert (
        ",".join(rows[0])
        == COPIES_HEADER
        == ("TimestampUs,TotalUniqueKeys,TotalBlockCopies,DuplicateBlockCopies")
    )
    assert [tuple(map(int, r)) for r in rows[1:]] == [(1, 2, 2, 0), (2, 3, 5, 2), (3, 4, 6, 2)]
    one = write_config(tmp_path, [r for r in records if r["instance_id"] == "a"])
    done = run_cli("optimize", str(one), "--draw-chart", "-o", str(tmp_path / "one"),
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "one" / "global_duplicate_blocks.csv").exists()


@pytest.mark.parametrize("seed", range(12))
def test_against_the_oracles_caches_after_every_record(tmp_path, seed):
    """Seeded: 2-3 instances, each its own group, lru / leaf-aware / random_lru, requests,
    writes and gets with ties in time. After the last record of each µs, the oracle's
    caches give the copies (instances holding a raw key) and the unique keys; the file's
    step curve must equal them at every record's µs, and change at no other µs. Catches
    a life's birth or death misplaced in time, and per-path instead of per-key counting
    (raw keys repeat under different parents here)."""
    rng = random.Random(seed)
    n = rng.randint(2, 3)
    policies = [rng.choice(("lru", "leaf_aware_lru", "random_lru")) for _ in range(n)]
    quotas = [rng.choice((3, 5, 9)) for _ in range(n)]
    raw = random_trace(rng, n, rng.randint(40, 120), ("get", "request", "request", "write"),
                       (0,))  # fmt: skip
    records = [(k, i, t * 1000, keys, [0] * len(keys), 0) for k, i, t, keys, _, _ in raw]
    lines = []
    for kind, i, t, keys, _, _ in records:
        r = {"type": kind, "instance_id": f"i{i}", "timestamp_ns": t, "keys": keys}
        if kind != "write":
            r["input_len"] = 16 * len(keys) + 1
        lines.append(json.dumps(r) + "\n")
    (tmp_path / "trace.jsonl").write_text("".join(lines))
    config = {
        "trace_file_path": "trace.jsonl",
        "output_result_path": "out",
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 1},
        "trace_replay": {"write_delay_ns": 0},
        "instance_groups": [
            {"group_name": f"g{i}", "quota_capacity": quotas[i] / 1024,
             "instances": [{"instance_id": f"i{i}", "block_size": 16, "bytes_per_token": 65536,
                            "eviction_policy_type": policies[i],
                            "eviction_policy_params": {"sample_rate": 0.5}
                            if policies[i] == "random_lru" else {}}]}
            for i in range(n)
        ],
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = run_cli("optimize", "config.json", "--draw-chart", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "out" / "global_duplicate_blocks.csv").read_text().splitlines()
    got = [tuple(map(int, r)) for r in csv.reader(table[1:])]
    instances = [dict(policy=p, group=i, bpb=1, sample=2 if p == "random_lru" else 0)
                 for i, p in enumerate(policies)]  # fmt: skip
    oracle = Oracle(instances, quotas, [(i,) for i in range(n)], 3, 1, 0)
    want: dict[int, tuple[int, int]] = {}
    for record in records:
        oracle.run([record])  # delay 0: a request's write lands at its own time
        held = [{path[-1] for path in inst.cached} for inst in oracle.insts]
        want[record[2] // 1000] = (len(set().union(*held)), sum(len(h) for h in held))
    assert {us for us, *_ in got} <= set(want), "a change at a time without a record"
    step, state = iter(got), (0, 0)
    row = next(step, None)
    for us in sorted(want):
        while row is not None and row[0] <= us:
            state, row = (row[1], row[2]), next(step, None)
        assert state == want[us], f"at {us} us"
    assert all(r[3] == r[2] - r[1] for r in got)
