"""The engine against the naive multi-capacity LRU oracle (exactness), plus its invariants.

Every test runs on both implementations of model ``"lru"``: :class:`LiteHit` and
:class:`CompactLiteHit` (the module's ``LiteHit`` is rebound per run), except the tests in
:data:`LITE_HIT_INTERNALS`, which read the interpreter engine's own layout (the compact
engine's layout is checked by its ``_check()`` in every other test).
"""

from __future__ import annotations

import dataclasses
import random
import sys
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import NaiveLRU, oracle_hits, tree_trace

from litehit_core import (
    STATE_FORMAT_VERSION,
    EngineSpec,
    EngineState,
    HitCurveSegment,
    InvalidRequestError,
    LiteHit,
    ReplayEngine,
    create_engine,
    project_blocks,
    project_infinite,
)
from litehit_core.compact_lite_hit import CompactLiteHit

ENGINES = {"python": LiteHit, "compact": CompactLiteHit}
LITE_HIT_INTERNALS = {
    "test_compaction_keeps_every_key_and_bounds_positions": "position space and dict",
    "test_compaction_with_ttl_drops_expired_keys": "dict",
    "test_memory_usage_is_an_honest_estimate": "dict and int-object accounting",
    "test_flood_of_fresh_keys_stays_bounded": "dict and position space",
    "test_limit_with_hot_set_and_churn_keeps_hot_blocks": "dict",
    "test_restore_of_a_large_state_with_pending_drops": "position counter and dict",
    "test_export_needs_int64_keys": "dict, which takes keys beyond int64 when unbounded",
    "test_memory_estimate_counts_int_objects_at_their_allocated_size": "int objects",
    "test_a_bounded_engine_holds_only_what_it_tracks_and_its_estimate_is_flat": "dict",
    "test_memory_estimate_counts_the_bucket_masks_and_ttl_epochs": "bucket masks",
}
"""Tests skipped on the compact engine (tests/conftest.py): name -> the LiteHit internal
they read. tests/test_compact_lite_hit.py checks the same properties on its layout."""
LRU_ENGINE = "python"  # EngineSpec.lru_engine of the implementation under test


@pytest.fixture(autouse=True, scope="module", params=sorted(ENGINES))
def lite_hit_engine(request):
    """Rebinds the module's ``LiteHit`` (and ``LRU_ENGINE``) to each implementation."""
    global LiteHit, LRU_ENGINE
    saved = LiteHit
    LiteHit, LRU_ENGINE = ENGINES[request.param], request.param
    yield request.param
    LiteHit, LRU_ENGINE = saved, "python"


CAPS = [0, 1, 2, 4, 9, 100, None]
A, B, C, D, E = 1, 2, 3, 4, 5


def project(fact, cap):
    return project_infinite(fact) if cap is None else project_blocks(fact, cap)


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
        assert all(g <= e for g, e in zip(got, expect[i], strict=True)), (i, got, expect[i])
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
    for keys, now in zip(trace, times, strict=True):
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
    for prev, nxt in pairwise(fact.hit_curve):
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
        assert all(g <= e for g, e in zip(got, expect[i], strict=True)) and got[-1] == expect[i][-1]
        assert fact.total_blocks == len(set(trace[i]))


# ------------------------------------------------------------ max_tracked_blocks
LIMITS = [1, 2, 5, 17, 64]


def limited_times(rng: random.Random, n: int) -> list[int]:
    times, now = [], 0
    for _ in range(n):
        now += rng.choice([0, 0, 1, 3, 10, 25, 60])
        times.append(now)
    return times


@pytest.mark.parametrize("ttl", [0, 40, 400])
@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("seed", range(3))
def test_limit_matches_an_lru_of_the_limit(seed, limit, ttl):
    """At c <= limit exact; beyond it (and at infinity) an LRU of the limit; counters too."""
    rng = random.Random(seed * 7919 + limit * 31 + ttl)
    trace = tree_trace(rng, 200, max_new=rng.choice([3, 6, 12]))
    times = limited_times(rng, len(trace))
    caps = sorted({1, 2, 3, 5, 8, limit})
    lh = LiteHit(ttl_ns=ttl, max_tracked_blocks=limit)
    free = LiteHit(ttl_ns=ttl)
    lrus = [NaiveLRU(min(c, limit), ttl) for c in caps]
    theoretical = NaiveLRU(limit, ttl)
    for i, keys in enumerate(trace):
        fact = lh.process_request(keys, times[i])
        unlimited = free.process_request(keys, times[i])
        lh._check()
        expect = [lru.request(keys, times[i]) for lru in lrus]
        assert [project_blocks(fact, c) for c in caps] == expect, f"request {i}"
        assert project_infinite(fact) == theoretical.request(keys, times[i]), f"request {i}"
        for c in caps:
            if c <= limit:
                assert project_blocks(fact, c) == project_blocks(unlimited, c)
        assert lh.current_unique_blocks() == len(theoretical.cache) <= limit
        assert lh.dropped_blocks == theoretical.evicted
        assert lh.expired_blocks == theoretical.expired
    assert lh.dropped_blocks > 0 or ttl  # (a TTL may keep fewer than the limit)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_hypothesis_limit_matches_an_lru_of_the_limit(data):
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    n = data.draw(st.integers(1, 80))
    limit = data.draw(st.integers(1, 40))
    ttl = data.draw(st.sampled_from([0, 0, 5, 30]))
    trace = tree_trace(rng, n, max_new=data.draw(st.integers(1, 10)))
    times = limited_times(rng, n)
    lh = LiteHit(ttl_ns=ttl, max_tracked_blocks=limit)
    caps = list(range(1, limit + 1))
    lrus = [NaiveLRU(c, ttl) for c in caps]
    theoretical = NaiveLRU(limit, ttl)
    for i, keys in enumerate(trace):
        fact = lh.process_request(keys, times[i])
        lh._check()
        assert [project_blocks(fact, c) for c in caps] == [
            lru.request(keys, times[i]) for lru in lrus
        ]
        assert project_infinite(fact) == theoretical.request(keys, times[i])
        assert lh.dropped_blocks == theoretical.evicted


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 12), max_size=8), max_size=40),
    st.integers(1, 6),
)
def test_limit_with_non_contract_input_infinite_exact(trace, limit):
    """Arbitrary keys under a limit: never optimistic, infinity is an LRU of the limit."""
    lh = LiteHit(max_tracked_blocks=limit)
    lrus = [NaiveLRU(c) for c in range(1, limit + 1)]
    for keys in trace:
        fact = lh.process_request(keys)
        lh._check()
        got = [project_blocks(fact, c) for c in range(1, limit + 1)]
        expect = [lru.request(keys) for lru in lrus]
        assert all(g <= e for g, e in zip(got, expect, strict=True))
        assert project_infinite(fact) == expect[-1]


def test_limit_drops_least_recent_and_misses_them_everywhere():
    lh = LiteHit(max_tracked_blocks=3)
    lh.process_request([A, B])
    lh.process_request([C, D])  # recency (most recent first): C D A B -> B dropped
    assert lh.current_unique_blocks() == 3 and lh.dropped_blocks == 1
    lh._check()
    fact = lh.process_request([A, B])  # A at depth 3 hits from 3, B is gone
    assert fact.hit_curve == (HitCurveSegment(3, 1),)
    assert project_infinite(fact) == 1
    assert lh.dropped_blocks == 2  # now A B C tracked, D dropped
    lh._check()


def test_create_engine_passes_the_limit():
    engine = create_engine(EngineSpec(ttl_ns=5, max_tracked_blocks=2, lru_engine=LRU_ENGINE))
    assert isinstance(engine, ReplayEngine) and isinstance(engine, LiteHit)
    engine.process_request([A, B, C])
    assert engine.current_unique_blocks() == 2 and engine.dropped_blocks == 1
    with pytest.raises(
        InvalidRequestError, match="max_tracked_blocks must not be negative, got -1"
    ):
        create_engine(EngineSpec(max_tracked_blocks=-1))


def test_limit_and_ttl_count_separately():
    lh = LiteHit(ttl_ns=10, max_tracked_blocks=2)
    lh.process_request([A], now_ns=0)
    lh.process_request([B, C], now_ns=5)  # B C A -> A dropped (limit)
    assert (lh.dropped_blocks, lh.expired_blocks) == (1, 0)
    lh.process_request([D], now_ns=15)  # B, C expire (age 10) before the request
    assert (lh.dropped_blocks, lh.expired_blocks) == (1, 2)
    assert lh.current_unique_blocks() == 1
    assert project_infinite(lh.process_request([A], now_ns=16)) == 0
    lh._check()


def test_request_larger_than_the_limit_keeps_its_head():
    lh = LiteHit(max_tracked_blocks=4)
    keys = list(range(100, 110))
    lh.process_request(keys)
    assert lh.current_unique_blocks() == 4 and lh.dropped_blocks == 6
    assert project_infinite(lh.process_request(keys)) == 4
    lh._check()


def test_limit_zero_is_unlimited_and_facts_are_identical():
    rng = random.Random(5)
    trace = tree_trace(rng, 400, max_new=8)
    a, b = LiteHit(), LiteHit(max_tracked_blocks=0)
    for keys in trace:
        assert a.process_request(keys) == b.process_request(keys)
    assert b.dropped_blocks == 0 and a.current_unique_blocks() == b.current_unique_blocks()
    b._check()


def test_negative_limit_rejected():
    with pytest.raises(InvalidRequestError, match="must not be negative, got -3"):
        LiteHit(max_tracked_blocks=-3)


@pytest.mark.parametrize("ttl", [0, 1000])
def test_flood_of_fresh_keys_stays_bounded(ttl):
    """200k fresh keys through a limit of 500: dict and position space stay O(limit)."""
    limit = 500
    slack = 1 << 14
    lh = LiteHit(ttl_ns=ttl, max_tracked_blocks=limit)
    biggest_dict = biggest_space = 0
    for i in range(200_000 // 32):
        lh.process_request(list(range(10**12 + 32 * i, 10**12 + 32 * i + 32)), now_ns=i)
        biggest_dict = max(biggest_dict, len(lh._pos))
        biggest_space = max(biggest_space, lh._next)
        if i % 1000 == 0:
            lh._check()
    lh._check()
    assert lh.current_unique_blocks() == limit
    assert biggest_dict <= 3 * limit + slack + 32
    assert biggest_space <= 3 * limit + slack + 32
    assert lh._cap <= 2 * (3 * limit + slack + 64) + slack + (1 << 15)
    assert lh.dropped_blocks == 200_000 - limit
    assert lh.expired_blocks == 0
    # the newest blocks are still there: the last request hits at every capacity >= 32
    last = list(range(10**12 + 200_000 - 32, 10**12 + 200_000))
    assert project_blocks(lh.process_request(last), 32) == 32


def test_limit_with_hot_set_and_churn_keeps_hot_blocks():
    """A hot chain re-touched between floods stays tracked (it is never least recent)."""
    limit = 200
    lh = LiteHit(max_tracked_blocks=limit)
    hot = list(range(1, 51))
    lru = NaiveLRU(limit)
    fresh = 10**9
    for i in range(3000):
        keys = hot if i % 3 == 0 else list(range(fresh, fresh + 40))
        fresh += 40
        fact = lh.process_request(keys)
        assert project_infinite(fact) == lru.request(keys)
        if keys is hot and i:
            assert fact.hit_curve == (HitCurveSegment(81, 50),)  # behind two floods of 40
    lh._check()
    assert lh.dropped_blocks == lru.evicted
    assert len(lh._pos) <= 3 * limit + (1 << 14) + 40


def test_boundary_crosses_long_dead_runs():
    """The boundary's bucket holds a long run of dead markers (fixed point does not settle)."""
    limit = 1000
    lh = LiteHit(max_tracked_blocks=limit)
    lru = NaiveLRU(limit)
    trace = [list(range(1000)), list(range(1, 999))]
    trace += [[10_000 + i] for i in range(30)]
    trace += [list(range(20_000 + 50 * i, 20_000 + 50 * i + 50)) for i in range(200)]
    for keys in trace:
        fact = lh.process_request(keys)
        lh._check()
        assert project_infinite(fact) == lru.request(keys)
        assert lh.dropped_blocks == lru.evicted
    assert lh.current_unique_blocks() == limit


@pytest.mark.parametrize("limit", [700, 5000])
def test_limit_on_a_long_trace_across_buckets(limit):
    """Many buckets of dead and live markers below and above a moving boundary."""
    rng = random.Random(limit)
    trace = tree_trace(rng, 3000, max_new=12)
    lh = LiteHit(max_tracked_blocks=limit)
    free = LiteHit()
    caps = [1, 50, limit // 2, limit]
    lrus = [NaiveLRU(c) for c in caps]
    for i, keys in enumerate(trace):
        fact = lh.process_request(keys)
        unlimited = free.process_request(keys)
        assert [project_blocks(fact, c) for c in caps] == [lru.request(keys) for lru in lrus]
        assert [project_blocks(fact, c) for c in caps] == [
            project_blocks(unlimited, c) for c in caps
        ]
        assert project_infinite(fact) == project_blocks(fact, limit)
        if i % 300 == 0:
            lh._check()
    lh._check()
    assert lh.dropped_blocks == lrus[-1].evicted > 0


# ------------------------------------------------------------ export / restore
def assert_states_equal(a: EngineState, b: EngineState) -> None:
    for field in dataclasses.fields(EngineState):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype == np.int64 and np.array_equal(x, y), field.name
        else:
            assert x == y, field.name


def continue_both(original: LiteHit, restored: LiteHit, trace, times) -> None:
    for keys, now in zip(trace, times, strict=True):
        assert restored.process_request(keys, now) == original.process_request(keys, now)
        restored._check()
        assert restored.current_unique_blocks() == original.current_unique_blocks()
        assert restored.expired_blocks == original.expired_blocks
        assert restored.dropped_blocks == original.dropped_blocks
    assert_states_equal(restored.export_state(), original.export_state())


@pytest.mark.parametrize("limit", [0, 3, 40])
@pytest.mark.parametrize("ttl", [0, 30, 400])
@pytest.mark.parametrize("seed", range(3))
def test_restored_engine_continues_exactly(seed, ttl, limit):
    rng = random.Random(seed * 101 + ttl + limit)
    trace = tree_trace(rng, 300, max_new=8)
    times = limited_times(rng, len(trace))
    cut = rng.randint(0, len(trace))
    original = LiteHit(ttl_ns=ttl, max_tracked_blocks=limit)
    for keys, now in zip(trace[:cut], times[:cut], strict=True):
        original.process_request(keys, now)
    state = original.export_state()
    restored = LiteHit.from_state(state, ttl_ns=ttl, max_tracked_blocks=limit)
    restored._check()
    assert restored.current_unique_blocks() == original.current_unique_blocks() == len(state.keys)
    assert_states_equal(restored.export_state(), state)
    continue_both(original, restored, trace[cut:], times[cut:])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_hypothesis_restore_round_trip(data):
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    n = data.draw(st.integers(1, 80))
    ttl = data.draw(st.sampled_from([0, 5, 40]))
    limit = data.draw(st.sampled_from([0, 1, 4, 30]))
    trace = tree_trace(rng, n, max_new=data.draw(st.integers(1, 10)))
    times = limited_times(rng, n)
    cut = data.draw(st.integers(0, n))
    original = LiteHit(ttl_ns=ttl, max_tracked_blocks=limit)
    for keys, now in zip(trace[:cut], times[:cut], strict=True):
        original.process_request(keys, now)
    restored = LiteHit.from_state(original.export_state(), ttl, limit)
    restored._check()
    continue_both(original, restored, trace[cut:], times[cut:])


@pytest.mark.parametrize("ttl, limit", [(0, 0), (100, 0), (0, 500), (100, 500)])
def test_restore_of_a_large_state_with_pending_drops(ttl, limit):
    """Exported with sparse positions (dead markers, a boundary far from 0)."""
    rng = random.Random(11)
    trace = tree_trace(rng, 4000, max_new=10)
    times = [i // 4 for i in range(len(trace))]
    original = LiteHit(ttl_ns=ttl, max_tracked_blocks=limit)
    for keys, now in zip(trace[:3000], times[:3000], strict=True):
        original.process_request(keys, now)
    assert original._next > original.current_unique_blocks()  # not compacted
    state = original.export_state()
    assert len(state.keys) == original.current_unique_blocks()
    assert not any(a.flags.writeable for a in (state.keys, state.epoch_starts, state.epoch_times))
    restored = LiteHit.from_state(state, ttl, limit)
    restored._check()
    assert len(restored._pos) == len(state.keys)  # restored compacted
    continue_both(original, restored, trace[3000:], times[3000:])


def test_export_order_and_epochs():
    lh = LiteHit(ttl_ns=100)
    lh.process_request([A, B, C], now_ns=10)
    lh.process_request([D], now_ns=10)
    lh.process_request([E, A], now_ns=20)
    state = lh.export_state()
    assert state.model == "lru" and state.format_version == STATE_FORMAT_VERSION == 1
    assert state.keys.tolist() == [C, B, D, A, E]  # least recent first
    assert state.epoch_starts.tolist() == [0, 3] and state.epoch_times.tolist() == [10, 20]
    assert (state.now_ns, state.expired_blocks, state.dropped_blocks) == (20, 0, 0)
    plain = LiteHit()
    plain.process_request([A, B])
    state = plain.export_state()
    assert state.keys.tolist() == [B, A] and len(state.epoch_starts) == 0
    assert len(state.epoch_times) == 0 and state.now_ns == -(2**63)
    empty = LiteHit(ttl_ns=5).export_state()
    assert len(empty.keys) == 0 and LiteHit.from_state(empty, 5, 0).current_unique_blocks() == 0


def test_restore_with_a_smaller_limit_drops_the_least_recent():
    lh = LiteHit()
    lh.process_request(list(range(100, 110)))
    restored = LiteHit.from_state(lh.export_state(), ttl_ns=0, max_tracked_blocks=4)
    restored._check()
    assert restored.current_unique_blocks() == 4 and restored.dropped_blocks == 6
    assert restored.export_state().keys.tolist() == [103, 102, 101, 100]


def test_create_engine_restores_a_state_of_its_model():
    spec = EngineSpec(ttl_ns=50, max_tracked_blocks=10, lru_engine=LRU_ENGINE)
    engine = create_engine(spec)
    engine.process_request([A, B, C], 7)
    restored = create_engine(spec, engine.export_state())
    assert isinstance(restored, LiteHit)
    assert restored.process_request([A, B], 8) == engine.process_request([A, B], 8)
    foreign = dataclasses.replace(engine.export_state(), model="swa")
    with pytest.raises(
        InvalidRequestError, match="state.model must be the spec's 'lru', got 'swa'"
    ):
        create_engine(spec, foreign)


def test_export_needs_int64_keys():
    lh = LiteHit()
    lh.process_request([2**64])
    with pytest.raises(InvalidRequestError, match="int64 block keys"):
        lh.export_state()


def _state(**changes):
    lh = LiteHit(ttl_ns=100)
    lh.process_request([A, B, C], now_ns=10)
    lh.process_request([D], now_ns=20)
    return dataclasses.replace(lh.export_state(), **changes)


def i64(*values):
    return np.array(values, np.int64)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"model": "swa"}, "state.model must be 'lru', got 'swa'"),
        ({"format_version": 2}, "state.format_version must be 1, got 2"),
        ({"keys": [3, 2, 1, 4]}, "state.keys must be a 1-d int64 array, got a list"),
        ({"keys": i64(3, 2, 1, 4).astype(np.int32)}, "1-d int64 array, got a 1-d int32"),
        ({"keys": i64(3, 2, 1, 4).reshape(2, 2)}, "got a 2-d int64 array"),
        ({"keys": i64(3, 2, 3, 4)}, "state.keys must be distinct, got 1 duplicate"),
        ({"epoch_times": i64(10)}, "must have one length, got 2 and 1"),
        ({"epoch_starts": i64(1, 3)}, r"state.epoch_starts\[0\] must be 0, got 1"),
        ({"epoch_starts": i64(0, 4)}, "must lie below len\\(keys\\) 4, got 4"),
        ({"epoch_starts": i64(0, 0)}, "must strictly increase"),
        ({"epoch_times": i64(20, 10)}, "must strictly increase"),
        ({"epoch_times": i64(10, 30)}, "must not pass now_ns 20, got 30"),
        ({"epoch_starts": i64(), "epoch_times": i64()}, "4 keys but no access times"),
        ({"keys": i64(), "epoch_starts": i64(0)}, "must have one length"),
        ({"keys": i64()}, "2 epoch\\(s\\) but no keys"),
        ({"expired_blocks": -1}, "state.expired_blocks must be in \\[0, "),
        ({"dropped_blocks": 1.5}, "state.dropped_blocks must be an integer, got 1.5"),
        ({"now_ns": True}, "state.now_ns must be an integer, got True"),
        ({"now_ns": 2**63}, "state.now_ns must be in"),
    ],
)
def test_inconsistent_state_is_rejected(changes, message):
    state = _state(**changes)
    with pytest.raises(InvalidRequestError, match=message):
        LiteHit.from_state(state, ttl_ns=100, max_tracked_blocks=0)


def test_state_without_times_restores_without_ttl_only():
    lh = LiteHit()
    lh.process_request([A, B])
    state = lh.export_state()
    assert LiteHit.from_state(state, 0, 0).current_unique_blocks() == 2
    with pytest.raises(InvalidRequestError, match="an engine with ttl_ns 9 needs them"):
        LiteHit.from_state(state, 9, 0)
    with pytest.raises(InvalidRequestError, match="state must be an EngineState, got dict"):
        LiteHit.from_state({}, 0, 0)  # type: ignore[arg-type]


# ------------------------------------------------------------ memory estimate
def test_memory_estimate_counts_int_objects_at_their_allocated_size():
    """A key of 64 bits takes 48 bytes (36 rounded up to 16), one below 2**30 takes 32."""
    n = 20_000
    small, big = LiteHit(), LiteHit()
    for i in range(0, n, 50):
        small.process_request(list(range(10**6 + i, 10**6 + i + 50)))
        big.process_request(list(range(2**62 + i, 2**62 + i + 50)))
    assert sys.getsizeof(small._pos) == sys.getsizeof(big._pos)
    assert big.memory_usage_bytes() - small.memory_usage_bytes() == n * (48 - 32)
    empty = LiteHit().memory_usage_bytes()
    # table (>= 24-byte entry + index slot) + key int + position int per block
    assert big.memory_usage_bytes() - empty >= n * (24 + 4 + 48 + 32)


def test_a_bounded_engine_holds_only_what_it_tracks_and_its_estimate_is_flat():
    limit = 20_000
    lh = LiteHit(max_tracked_blocks=limit)
    seen = []
    for i in range(10_000):
        lh.process_request(list(range(2**62 + 20 * i, 2**62 + 20 * i + 20)))
        seen.append((len(lh._pos), lh.memory_usage_bytes()))
    lh._check()
    assert lh.current_unique_blocks() == limit and lh.dropped_blocks == 200_000 - limit
    # dropped keys leave the dict at once: it never holds more than it tracks
    assert max(size for size, _ in seen) == limit
    # under the flood the estimate stays bounded across compactions: the dict holds
    # `limit` keys (its table grows with deletions until a compaction rebuilds it) and the
    # key-by-position array keeps its high-water size
    late = [memory for _, memory in seen[5000:]]
    assert limit * (48 + 32 + 24) <= min(late) <= max(late) < 200 * limit


def test_memory_estimate_counts_the_bucket_masks_and_ttl_epochs():
    lh = LiteHit(ttl_ns=10**12)
    lh.process_request(list(range(2**62, 2**62 + 5000)), now_ns=1)
    clean = lh.memory_usage_bytes()
    for i in range(2, 200):  # re-touches leave dead markers (dirty buckets), new epochs
        lh.process_request(list(range(2**62, 2**62 + 25)), now_ns=i)
    assert lh._ep_pos and lh._mask.count(0) < len(lh._mask)
    assert lh.memory_usage_bytes() > clean + 198 * (32 + 48)
