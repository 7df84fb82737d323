"""The compiled policy replay against the naive oracle (tests/policy_oracle.py), row for
row, with every invariant checked after each chunk: every policy x every eviction mode x
get/write/request mixes with delays, masks and TTLs, on seeded random traces with shared
prefixes and raw (not chained) keys, so block identity is the path."""

from __future__ import annotations

import importlib
import math
import random

import numpy as np
import pytest

from litehit_core.engine import POLICIES
from litehit_core.policy_replay import InstanceSetup, ReplayRecords, ReplaySetup, replay
from litehit_core.policy_replay.loop import GET, REQUEST, WRITE
from tests.policy_oracle import Oracle

replay_module = importlib.import_module("litehit_core.policy_replay.replay")
state_module = importlib.import_module("litehit_core.policy_replay.state")
_KINDS = {"get": GET, "write": WRITE, "request": REQUEST}


def to_arrays(records, ttl_values):
    kinds, insts, times, off, keys, local, buckets = [], [], [], [0], [], [], []
    for kind, inst, t, ks, mask, ttl in records:
        kinds.append(_KINDS[kind])
        insts.append(inst)
        times.append(t)
        keys += ks
        local += mask
        off.append(len(keys))
        buckets.append(ttl_values.index(ttl) if ttl else -1)
    return ReplayRecords(
        np.array(kinds, np.int8),
        np.array(insts, np.int32),
        np.array(times, np.int64),
        np.array(off, np.int64),
        np.array(keys, np.int64),
        np.array(local, np.uint8),
        np.array(buckets, np.int32),
    )


def random_trace(
    rng: random.Random, n_inst: int, n: int, kinds: tuple[str, ...], ttl_choices: tuple[int, ...]
):
    """Records over a few shared prefix families: raw small keys (the same key under
    different parents is a different block), nondecreasing times with ties."""
    families = [[rng.randrange(6) for _ in range(rng.randint(1, 4))] for _ in range(5)]
    t = 1000
    records = []
    for _ in range(n):
        t += rng.choice((0, 0, 1, 3, 7, 20))
        keys = list(rng.choice(families)) + [rng.randrange(6) for _ in range(rng.randint(0, 4))]
        keys = keys[: rng.randint(0, len(keys))] if rng.random() < 0.2 else keys
        kind = rng.choice(kinds)
        mask = [0] * len(keys)
        if kind != "write" and keys and rng.random() < 0.25:
            mask = [int(rng.random() < 0.4) for _ in keys]
        ttl = rng.choice(ttl_choices) if kind != "get" else 0
        records.append((kind, rng.randrange(n_inst), t, keys, mask, ttl))
    return records


def run_both(
    policies,
    groups,
    quotas,
    mode,
    batch,
    delay,
    records,
    sample_rate=0.25,
    fallback=True,
    refresh=True,
):
    ttl_values = sorted({r[5] for r in records if r[5]})
    instances = []
    for i, policy in enumerate(policies):
        p = POLICIES[policy]
        sample = math.floor(batch / sample_rate) if p.dense else 0
        instances.append(
            dict(
                policy=policy,
                group=groups[i],
                bpb=1 + i % 2,
                sample=sample,
                fallback=fallback,
                refresh=refresh,
            )
        )
    members = [tuple(i for i in range(len(policies)) if groups[i] == g) for g in range(len(quotas))]
    rows = Oracle(instances, quotas, members, mode, batch, delay).run(records)
    setup = ReplaySetup(
        tuple(
            InstanceSetup(
                POLICIES[d["policy"]].kind,
                d["group"],
                d["bpb"],
                d["sample"],
                d["fallback"],
                d["refresh"],
                POLICIES[d["policy"]].dense,
            )
            for d in instances
        ),
        tuple(quotas),
        tuple(members),
        tuple(ttl_values),
        mode,
        batch,
        delay,
    )
    result = replay(setup, to_arrays(records, ttl_values), check=True)
    return rows, [tuple(r) for r in result.rows.tolist()], result


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("mode", [1, 2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_each_policy_matches_the_oracle(policy, mode, seed):
    rng = random.Random(seed * 31 + mode)
    kinds = (("request",), ("get", "write"), ("get", "write", "request"))[seed % 3]
    ttl = (0, 15, 40) if policy == "ttl" else (0,)
    n_inst = 1 + seed % 3
    records = random_trace(rng, n_inst, 160, kinds, ttl)
    groups = [i % 2 if n_inst == 3 else 0 for i in range(n_inst)]
    quotas = [rng.randint(3, 14), rng.randint(3, 9)][: max(groups) + 1]
    expected, got, _ = run_both(
        [policy] * n_inst,
        groups,
        quotas,
        mode,
        rng.randint(1, 3),
        rng.choice((0, 0, 5, 30)),
        records,
    )
    assert got == expected


@pytest.mark.parametrize("seed", range(8))
def test_mixed_policies_share_a_group(seed):
    rng = random.Random(1000 + seed)
    policies = ["lru", "random_lru", "leaf_aware_lru", "ttl"]
    rng.shuffle(policies)
    records = random_trace(rng, 4, 250, ("get", "write", "request"), (0, 25))
    for mode in (1, 2, 3):
        expected, got, _ = run_both(
            policies,
            [0, 0, 1, 1],
            [rng.randint(4, 12), rng.randint(4, 12)],
            mode,
            2,
            rng.choice((0, 9)),
            records,
        )
        assert got == expected, mode


@pytest.mark.parametrize("fallback", [True, False])
@pytest.mark.parametrize("refresh", [True, False])
def test_ttl_options(fallback, refresh):
    rng = random.Random(7)
    records = random_trace(rng, 2, 300, ("get", "write", "request"), (0, 10, 35))
    for mode in (1, 3):
        expected, got, result = run_both(
            ["ttl", "ttl"], [0, 0], [6], mode, 1, 4, records, fallback=fallback, refresh=refresh
        )
        assert got == expected
        assert result.expired.sum() > 0


def test_infinite_quota_never_evicts():
    rng = random.Random(3)
    records = random_trace(rng, 2, 200, ("request",), (0,))
    expected, got, result = run_both(
        ["random_lru", "leaf_aware_lru"], [0, 0], [-1], 1, 1, 0, records
    )
    assert got == expected
    assert result.evicted.sum() == 0


def test_growth_across_many_chunks(monkeypatch):
    """Two node slots to start with and tiny chunks: the node arrays, the index and the
    dense segments grow many times mid-replay, with pending writes across the stops."""
    monkeypatch.setattr(replay_module, "CHUNK_RECORDS", 7)
    monkeypatch.setattr(state_module, "MIN_NODES", 2)
    rng = random.Random(11)
    records = random_trace(rng, 3, 400, ("get", "write", "request"), (0, 30))
    expected, got, _ = run_both(
        ["random_lru", "ttl", "leaf_aware_lru"], [0, 0, 1], [40, 25], 3, 2, 13, records
    )
    assert got == expected


def test_memory_follows_the_cache_not_the_trace():
    """30,000 requests writing ~150,000 distinct blocks through a 64-block cache: the
    arrays stay near the cached blocks (a bug that reserved room for every key written
    so far passed every exactness test)."""
    rng = random.Random(2)
    records = [("request", 0, t, [rng.randrange(1 << 40) for _ in range(5)], [0] * 5, 0)
               for t in range(30_000)]  # fmt: skip
    for policy in ("lru", "random_lru", "leaf_aware_lru"):
        p = POLICIES[policy]
        setup = ReplaySetup(
            (InstanceSetup(p.kind, 0, 1, 10 if p.dense else 0, True, True, p.dense),),
            (64,), ((0,),), (), 3, 1, 0,
        )  # fmt: skip
        result = replay(setup, to_arrays(records, []))
        assert result.peak[0] == 64
        assert result.memory_bytes < 40_000, (policy, result.memory_bytes)


def test_the_kernels_struct_takes_every_array_in_order():
    """``as_struct`` lists ReplayArrays' fields by hand (a structref constructor is
    positional): a field left out fails to compile, but two arrays of one dtype swapped
    would compile and corrupt the replay -- the source must list them in field order."""
    import ast
    import inspect

    from litehit_core.policy_replay import state

    tree = ast.parse(inspect.getsource(state.as_struct))
    (call,) = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "_State"
    ]
    assert [arg.attr for arg in call.args] == list(state.ReplayArrays._fields)
