"""The engine against the naive multi-capacity LRU oracle (exactness), plus its invariants."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import NaiveLRU, oracle_hits

from litehit_core import (
    HitCurveSegment,
    InvalidRequestError,
    LiteHit,
    project_blocks,
    project_infinite,
)

CAPS = [0, 1, 2, 4, 9, 100, None]
A, B, C, D, E = 1, 2, 3, 4, 5


def project(fact, cap):
    return project_infinite(fact) if cap is None else project_blocks(fact, cap)


def tree_trace(rng: random.Random, n_requests: int, max_new: int = 6) -> list[list[int]]:
    """Prefix-chained requests: each extends a random existing prefix with fresh blocks."""
    paths: list[list[int]] = [[]]
    next_key = 1
    out = []
    for _ in range(n_requests):
        base = rng.choice(paths)
        cut = rng.randint(0, len(base))
        path = base[:cut] + list(range(next_key, next_key + rng.randint(0, max_new)))
        next_key += len(path) - cut
        paths.append(path)
        out.append(path)
    return out


def replay(trace, times=None, ttl=0, check=True):
    lh = LiteHit(ttl_ns=ttl)
    facts = []
    for i, keys in enumerate(trace):
        facts.append(lh.process_request(keys, times[i] if times else 0))
        if check:
            lh._check()
    return lh, facts


def test_worked_example_exact():
    trace = [[A, B, C], [A, B, D], [A, B, C], [A, E], [A, E]]
    tokens = [13, 12, 13, 8, 8]
    lh, facts = replay(trace)
    assert [[tuple(s) for s in f.hit_curve] for f in facts] == [
        [],
        [(1, 2)],
        [(1, 2), (4, 1)],
        [(1, 1)],
        [(1, 2)],
    ]
    assert [f.total_blocks for f in facts] == [3, 3, 3, 2, 2]
    for cap, expect_blocks, expect_tokens in ((2, [0, 2, 2, 1, 2], 28), (3, [0, 2, 2, 1, 2], 28)):
        got = [project_blocks(f, cap) for f in facts]
        assert got == expect_blocks
        assert sum(got) * 4 == expect_tokens
    inf = [project_infinite(f) for f in facts]
    assert inf == [0, 2, 3, 1, 2]
    assert sum(inf) * 4 == 32 and sum(tokens) == 54
    assert lh.current_unique_blocks() == 5


def test_forward_order_would_lose_value():
    """The oracle with forward submission gives only 2 hit blocks at capacity 2."""
    trace = [[A, B, C], [A, B, D], [A, B, C], [A, E], [A, E]]
    cache: dict[int, None] = {}
    hits = 0
    for keys in trace:
        h = 0
        for k in keys:
            if k not in cache:
                break
            h += 1
        hits += h
        for k in keys:  # forward order: the head ends least recent
            cache.pop(k, None)
            cache[k] = None
            while len(cache) > 2:
                del cache[next(iter(cache))]
    assert hits == 2
    _, facts = replay(trace)
    assert sum(project_blocks(f, 2) for f in facts) == 7


@pytest.mark.parametrize("seed", range(12))
def test_tree_traces_match_oracle(seed):
    rng = random.Random(seed)
    trace = tree_trace(rng, 120)
    _, facts = replay(trace)
    expect = oracle_hits(trace, CAPS)
    for i, fact in enumerate(facts):
        assert [project(fact, c) for c in CAPS] == expect[i], f"request {i}: {trace[i]}"


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_hypothesis_tree_traces_match_oracle(data):
    seed = data.draw(st.integers(0, 2**32 - 1))
    n = data.draw(st.integers(1, 60))
    trace = tree_trace(random.Random(seed), n, max_new=data.draw(st.integers(1, 8)))
    _, facts = replay(trace)
    expect = oracle_hits(trace, CAPS)
    for i, fact in enumerate(facts):
        assert [project(fact, c) for c in CAPS] == expect[i]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 12), max_size=8), max_size=40))
def test_non_contract_input_is_pessimistic_and_infinite_exact(trace):
    """Arbitrary keys (duplicates, reordered, not prefix-chained): never optimistic."""
    _, facts = replay(trace)
    expect = oracle_hits(trace, CAPS)
    for i, fact in enumerate(facts):
        got = [project(fact, c) for c in CAPS]
        assert all(g <= e for g, e in zip(got, expect[i])), (i, got, expect[i])
        assert got[-1] == expect[i][-1]
        thresholds = [s + k for s, r in fact.hit_curve for k in range(r)]
        assert thresholds == sorted(set(thresholds)), "thresholds must strictly increase"


def test_duplicates_dropped_after_first_occurrence():
    lh = LiteHit()
    assert lh.process_request([A, B, A, C, B]).total_blocks == 3
    assert lh.current_unique_blocks() == 3
    fact = lh.process_request([A, B, C])
    assert [tuple(s) for s in fact.hit_curve] == [(1, 3)]
    lh._check()


@pytest.mark.parametrize("ttl", [1, 17, 50, 120, 1000])
@pytest.mark.parametrize("seed", range(4))
def test_ttl_matches_oracle(ttl, seed):
    rng = random.Random(seed * 1000 + ttl)
    trace = tree_trace(rng, 150, max_new=5)
    times = []
    now = 0
    for _ in trace:
        now += rng.choice([0, 0, 1, 3, 10, 25, 60])
        times.append(now)
    caps = [1, 2, 3, 5, 8, 10**6]
    lh, facts = replay(trace, times, ttl=ttl)
    lrus = [NaiveLRU(c, ttl) for c in caps]
    inf = NaiveLRU(None, ttl)
    for i, fact in enumerate(facts):
        expect = [lru.request(trace[i], times[i]) for lru in lrus]
        assert [project_blocks(fact, c) for c in caps] == expect, f"request {i}"
        assert project_infinite(fact) == inf.request(trace[i], times[i])
    # the unbounded oracle purged exactly what expired before its last request
    assert lh.current_unique_blocks() == len(inf.cache)


def test_ttl_unique_blocks_and_expired_count_match_oracle():
    rng = random.Random(7)
    trace = tree_trace(rng, 300, max_new=4)
    times = [i * 3 for i in range(len(trace))]
    lh = LiteHit(ttl_ns=40)
    inf = NaiveLRU(None, 40)
    for keys, now in zip(trace, times):
        lh.process_request(keys, now)
        inf.request(keys, now)
        lh._check()
        # the oracle purges lazily at its next request; compare after both processed `now`
        live = sum(1 for ts in inf.cache.values() if now - ts < 40)
        assert lh.current_unique_blocks() == live
    # everything the oracle purged, the engine counted as expired (plus what is stale now)
    stale = sum(1 for ts in inf.cache.values() if times[-1] - ts >= 40)
    assert lh.expired_blocks == inf.expired + stale


def test_age_equal_to_ttl_expires():
    lh = LiteHit(ttl_ns=10)
    lh.process_request([A, B], now_ns=100)
    assert project_infinite(lh.process_request([A, B], now_ns=109)) == 2  # age 9 < 10
    assert project_infinite(lh.process_request([A, B], now_ns=119)) == 0  # age 10 == ttl
    assert lh.expired_blocks == 2
    lh._check()


def test_ttl_scenario_from_service_issue():
    ttl = 10 * 10**9
    lh = LiteHit(ttl_ns=ttl)
    keys = [A, B, C]
    hits = [project_infinite(lh.process_request(keys, s * 10**9)) for s in (1000, 1005, 1015)]
    assert hits == [0, 3, 0]


def test_time_going_backwards_is_clamped():
    lh = LiteHit(ttl_ns=10)
    lh.process_request([A, B], now_ns=100)
    fact = lh.process_request([A, B], now_ns=50)  # clamped to 100: age 0
    assert project_infinite(fact) == 2
    assert project_infinite(lh.process_request([A, B], now_ns=109)) == 2
    lh._check()


def test_expired_block_truncates_prefix_like_a_cold_one():
    lh = LiteHit(ttl_ns=10)
    lh.process_request([B], now_ns=0)
    lh.process_request([A], now_ns=5)
    fact = lh.process_request([A, B], now_ns=12)  # B (age 12) expired, A (age 7) alive
    assert [tuple(s) for s in fact.hit_curve] == [(1, 1)]
    lh._check()


def test_whole_chain_replay_is_one_segment():
    lh = LiteHit()
    chain = list(range(100, 150))
    lh.process_request(chain)
    assert lh.process_request(chain).hit_curve == (HitCurveSegment(1, 50),)


def test_queue_jump_splits_segments_and_they_never_merge():
    lh = LiteHit()
    lh.process_request([A, B, C, D])
    lh.process_request([A, E])  # A jumps the queue: B, C, D now sit behind A and E
    fact = lh.process_request([A, B, C, D])
    assert fact.hit_curve == (HitCurveSegment(1, 1), HitCurveSegment(3, 3))
    for prev, nxt in zip(fact.hit_curve, fact.hit_curve[1:]):
        assert nxt.start_required_blocks > prev.start_required_blocks + prev.run_length


def test_compaction_keeps_every_key_and_bounds_positions():
    rng = random.Random(3)
    lh = LiteHit()
    hot = list(range(1, 41))
    cold_key = 10_000
    for i in range(4000):
        lh.process_request(hot)  # churn: 40 stale positions per request
        if i % 50 == 0:
            lh.process_request(list(range(cold_key, cold_key + rng.randint(1, 5))))
            cold_key += 10
    lh._check()
    live = lh.current_unique_blocks()
    assert lh._next <= 3 * live + (1 << 14) + 40
    assert lh._cap <= 2 * (3 * live + (1 << 14)) + (1 << 16)
    # the oldest cold chain is still resident at a large enough capacity
    fact = lh.process_request([10_000])
    assert project_infinite(fact) == 1
    assert project_blocks(fact, live) == 1
    assert project_blocks(fact, 40) == 0


def test_compaction_with_ttl_drops_expired_keys():
    lh = LiteHit(ttl_ns=100)
    for i in range(3000):
        lh.process_request(list(range(i * 10, i * 10 + 10)), now_ns=i)
        if i % 500 == 0:
            lh._check()
    lh._check()
    assert lh.current_unique_blocks() == 100 * 10
    # 30,000 distinct keys were touched; compaction physically dropped the expired ones
    assert len(lh._pos) <= 3 * 1000 + (1 << 14) + 10 < 30_000
    assert lh.expired_blocks == (3000 - 100) * 10


def test_reset_forgets_everything():
    lh = LiteHit(ttl_ns=5)
    lh.process_request([A, B], 0)
    lh.process_request([A, B], 10)
    lh.reset()
    assert lh.current_unique_blocks() == 0 and lh.expired_blocks == 0
    assert project_infinite(lh.process_request([A, B], 11)) == 0
    lh._check()


def test_empty_request_and_iterables():
    lh = LiteHit()
    fact = lh.process_request([])
    assert fact.hit_curve == () and fact.total_blocks == 0
    lh.process_request((A, B))
    assert project_infinite(lh.process_request(iter([A, B]))) == 2


def test_negative_ttl_rejected():
    with pytest.raises(InvalidRequestError, match="ttl_ns must not be negative, got -1"):
        LiteHit(ttl_ns=-1)


def test_memory_usage_is_an_honest_estimate():
    lh = LiteHit()
    empty = lh.memory_usage_bytes()
    lh.process_request(list(range(10**6, 10**6 + 5000)))
    grown = lh.memory_usage_bytes() - empty
    assert 5000 * 60 <= grown <= 5000 * 200  # dict slot + key int + position int per block


def test_seeded_stress_with_invariants():
    rng = random.Random(99)
    trace = tree_trace(rng, 2500, max_new=12)
    lh = LiteHit()
    lrus = {c: NaiveLRU(c) for c in (3, 17, 64)}
    for i, keys in enumerate(trace):
        fact = lh.process_request(keys)
        for c, lru in lrus.items():
            assert project_blocks(fact, c) == lru.request(keys)
        if i % 250 == 0:
            lh._check()
    lh._check()


@pytest.mark.parametrize(
    "trace, exact",
    [
        ([[0], [0, 0]], True),  # a repeated head inside the head+run fast path
        ([[1, 2, 3], [1, 2, 1, 3]], True),
        ([[1, 2, 3], [1, 2, 3, 3, 4, 4]], True),
        ([[1, 2, 3], [3, 2, 1, 2]], False),  # reordered: pessimistic, infinity exact
        ([[5], [6, 5, 6, 7, 7]], False),
    ],
)
def test_duplicates_against_oracle(trace, exact):
    lh, facts = replay(trace)
    expect = oracle_hits(trace, CAPS)
    for i, fact in enumerate(facts):
        got = [project(fact, c) for c in CAPS]
        if exact:
            assert got == expect[i]
        assert all(g <= e for g, e in zip(got, expect[i])) and got[-1] == expect[i][-1]
        assert fact.total_blocks == len(set(trace[i]))
