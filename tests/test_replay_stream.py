"""The policy replay fed in batches (:class:`~litehit_core.policy_replay.Replayer`, what
``litehit optimize`` streams) against the spec oracles: any split of a trace into batches
gives the oracle's rows, with delayed writes pending across batch boundaries, TTL buckets
that appear batch by batch, records longer than any before, tiers and shared groups."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from litehit_core.engine import POLICIES
from litehit_core.policy_replay import InstanceSetup, Replayer, ReplaySetup, TierSetup
from litehit_service.optimizer.optimize.tier_config import WRITE_MODES
from tests.policy_oracle import Oracle
from tests.test_policy_replay import random_trace, to_arrays
from tests.tier_oracle import TieredOracle


def _fed(setup: ReplaySetup, records: list, ttl_values: list, rng: random.Random):
    """Rows and result of ``records`` fed in random batches (1 to 40 records, empty ones
    too), the TTLs known so far given with each."""
    arrays = to_arrays(records, ttl_values)
    replayer = Replayer(setup._replace(ttl_values=()), check=True)
    rows, start, n = [], 0, len(records)
    while start < n or not rows:
        stop = min(n, start + rng.choice((0, 1, 2, 5, 13, 40)))
        seen = {r[5] for r in records[:stop] if r[5]}
        known = tuple(v for v in ttl_values if v in seen)  # first-seen order: a prefix
        part = _part(arrays, start, stop)
        got = replayer.feed(part, ttl_values=known)
        got[:, 0] += start
        rows += [tuple(r) for r in got.tolist()]
        start = stop
        if n == 0:
            break
    return rows, replayer.finish()


def _part(records, lo: int, hi: int):
    return records._replace(
        kinds=records.kinds[lo:hi], insts=records.insts[lo:hi], times=records.times[lo:hi],
        key_off=records.key_off[lo : hi + 1], keys=records.keys, local=records.local,
        buckets=records.buckets[lo:hi],
    )  # fmt: skip  # key_off keeps the batch's absolute offsets: feed() takes them so


def _first_seen(records) -> list[int]:
    return list(dict.fromkeys(r[5] for r in records if r[5]))


def _instances(policies, groups, batch, rate):
    out = []
    for i, policy in enumerate(policies):
        p = POLICIES[policy]
        out.append(dict(policy=policy, group=groups[i], bpb=1 + i % 2,
                        sample=math.floor(batch / rate) if p.dense else 0, fallback=True,
                        refresh=True))  # fmt: skip
    return out


def _setup(instances, quotas, members, mode, batch, delay, tiers=()):
    return ReplaySetup(
        tuple(InstanceSetup(POLICIES[d["policy"]].kind, d["group"], d["bpb"], d["sample"],
                            d["fallback"], d["refresh"], POLICIES[d["policy"]].dense)
              for d in instances),
        tuple(quotas), tuple(members), (), mode, batch, delay, tiers=tiers,
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(24))
def test_any_split_gives_the_oracle_rows(seed: int) -> None:
    """Catches a pending write lost or applied twice at a batch boundary, rows numbered
    from the wrong record, a TTL bucket that moves when a new TTL appears, a record longer
    than the path buffer, and totals that miss the writes still pending at the end."""
    rng = random.Random(seed)
    policies = [rng.choice(list(POLICIES)) for _ in range(rng.randint(1, 3))]
    groups = [rng.randrange(2) for _ in policies]
    quotas = [rng.choice((-1, 3, 6, 11)) for _ in range(2)]
    members = [tuple(i for i in range(len(policies)) if groups[i] == g) for g in range(2)]
    mode, batch = rng.choice((1, 2, 3)), rng.choice((1, 2, 4))
    delay = rng.choice((0, 0, 1, 5, 40))
    records = random_trace(rng, len(policies), rng.randint(0, 160),
                           ("get", "request", "request", "write"), (0, 9, 30, 200))  # fmt: skip
    ttl_values = _first_seen(records)
    instances = _instances(policies, groups, batch, 0.25)
    expected = Oracle(instances, quotas, members, mode, batch, delay).run(records)
    rows, result = _fed(_setup(instances, quotas, members, mode, batch, delay), records,
                        ttl_values, rng)  # fmt: skip
    assert rows == expected
    assert int(result.written.sum()) == sum(
        len(r[3]) for r in records if r[0] != "get"
    )  # every write applied once, the pending ones at the end


@pytest.mark.parametrize("seed", range(12))
def test_any_split_of_a_tiered_trace_gives_the_tier_oracle_rows(seed: int) -> None:
    """Catches the same faults under tiers (promotions and demotions between batches)."""
    rng = random.Random(1000 + seed)
    policies = [rng.choice(list(POLICIES)) for _ in range(rng.randint(1, 2))]
    strategy = dict(write_mode=rng.choice(WRITE_MODES), propagate=rng.random() < 0.5,
                    promote=rng.random() < 0.5, threshold=2)  # fmt: skip
    tier_quotas = [[rng.choice((2, 4, 7)), rng.choice((3, 8))]]
    mode, batch, delay = rng.choice((1, 3)), rng.choice((1, 2)), rng.choice((0, 3))
    records = random_trace(rng, len(policies), rng.randint(1, 120),
                           ("get", "request", "write"), (0, 9, 30))  # fmt: skip
    instances = _instances(policies, [0] * len(policies), batch, 0.5)
    members = [tuple(range(len(policies)))]
    expected = TieredOracle(instances, tier_quotas, members, mode, batch, delay,
                            strategy).run(records)  # fmt: skip
    tier = TierSetup(quotas=tuple(tier_quotas[0]),
                     write_mode=WRITE_MODES.index(strategy["write_mode"]),
                     propagate=strategy["propagate"], promote=strategy["promote"],
                     threshold=strategy["threshold"])  # fmt: skip
    setup = _setup(instances, [tier_quotas[0][0]], members, mode, batch, delay, (tier,))
    rows, _ = _fed(setup, records, _first_seen(records), rng)
    assert rows == expected


def test_the_carry_is_bounded_by_the_delay() -> None:
    """Catches a replayer that keeps every record it was fed (memory following the trace):
    with a delay of 10 ns and records 1 ns apart, at most the last 11 records stay."""
    records = [("request", 0, 1000 + t, [t % 7, t], [0, 0], 0) for t in range(5000)]
    setup = _setup(_instances(["lru"], [0], 1, 1.0), [50], [(0,)], 3, 1, 10)
    replayer = Replayer(setup)
    arrays = to_arrays(records, [])
    for lo in range(0, 5000, 500):
        replayer.feed(_part(arrays, lo, lo + 500))
        assert len(replayer.carry.kinds) <= 11
    assert np.all(replayer.finish().written == 10000)
