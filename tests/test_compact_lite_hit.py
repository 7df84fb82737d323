"""CompactLiteHit: the same facts and states as LiteHit, its own layout's bounds, and
seeded stress at millions of blocks against the naive oracle.

(tests/test_lite_hit.py runs every LiteHit oracle test on this engine too; here is what
is particular to it.)
"""

from __future__ import annotations

import random
import sys
import tracemalloc
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import NaiveLRU, tree_trace
from test_lite_hit import assert_states_equal

from litehit_core import InvalidRequestError, LiteHit, project_blocks, project_infinite
from litehit_core import compact_kernels as ck
from litehit_core.compact_kernels import CAP, MAX_LOAD_DEN, MAX_LOAD_NUM, SLACK, T
from litehit_core.compact_lite_hit import BatchFacts, CompactLiteHit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from synthetic import SyntheticTrace  # noqa: E402


def mixed_trace(rng: random.Random, requests: int, chains: int = 40):
    """Shared chains with cold tails, queue jumps (keys out of order) and duplicates."""
    pool = [[rng.randrange(1 << 62) for _ in range(rng.randrange(1, 30))] for _ in range(chains)]
    trace, times, now = [], [], 0
    for _ in range(requests):
        chain = rng.choice(pool)
        keys = chain[: rng.randrange(len(chain) + 1)]
        keys += [rng.randrange(1 << 62) for _ in range(rng.randrange(5))]
        if rng.random() < 0.05 and keys:
            keys.append(keys[0])
        if rng.random() < 0.05:
            keys = [rng.choice(chain) for _ in range(rng.randrange(6))]
        now += rng.randrange(3)
        trace.append(keys)
        times.append(now)
    return trace, times


def both(trace, times, ttl=0, limit=0, check_every=250):
    python, compact = LiteHit(ttl, limit), CompactLiteHit(ttl, limit)
    for i, (keys, now) in enumerate(zip(trace, times, strict=True)):
        assert compact.process_request(keys, now) == python.process_request(keys, now), i
        if i % check_every == 0:
            compact._check()
    compact._check()
    assert_states_equal(compact.export_state(), python.export_state())
    assert compact.current_unique_blocks() == python.current_unique_blocks()
    assert compact.expired_blocks == python.expired_blocks
    assert compact.dropped_blocks == python.dropped_blocks
    return python, compact


@pytest.mark.parametrize("ttl, limit", [(0, 0), (40, 0), (0, 200), (30, 150)])
@pytest.mark.parametrize("seed", range(6))
def test_same_facts_states_and_counters_as_lite_hit(seed, ttl, limit):
    trace, times = mixed_trace(random.Random(seed), 3000)
    both(trace, times, ttl, limit)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_hypothesis_same_facts_as_lite_hit(data):
    keys = st.lists(st.integers(0, 12), max_size=10)
    trace = data.draw(st.lists(keys, max_size=40))
    times = sorted(
        data.draw(st.lists(st.integers(0, 50), min_size=len(trace), max_size=len(trace)))
    )
    ttl = data.draw(st.sampled_from([0, 3, 20]))
    limit = data.draw(st.sampled_from([0, 1, 4, 9]))
    both(trace, times, ttl, limit, check_every=1)


def batch_of(trace, times):
    keys = np.array([k for r in trace for k in r], np.int64)
    offsets = np.zeros(len(trace) + 1, np.int64)
    offsets[1:] = np.cumsum([len(r) for r in trace])
    return keys, offsets, np.array(times, np.int64)


@pytest.mark.parametrize("ttl, limit", [(0, 0), (25, 0), (0, 120), (25, 120)])
def test_batch_gives_the_facts_of_one_call_per_request(ttl, limit):
    trace, times = mixed_trace(random.Random(5), 6000)
    python = LiteHit(ttl, limit)
    expected = [python.process_request(k, t) for k, t in zip(trace, times, strict=True)]
    compact = CompactLiteHit(ttl, limit)
    keys, offsets, stamps = batch_of(trace, times)
    kept = keys.copy()
    facts = compact.process_batch(keys, offsets, stamps)
    assert isinstance(facts, BatchFacts)
    assert facts.facts() == expected  # across many compactions and table rebuilds
    assert np.array_equal(keys, kept)  # the caller's keys are not deduplicated in place
    compact._check()
    assert_states_equal(compact.export_state(), python.export_state())


def test_bad_batches_and_keys_are_refused_and_change_nothing():
    compact = CompactLiteHit(ttl_ns=10)
    compact.process_request([1, 2, 3], 5)
    before = compact.export_state()
    with pytest.raises(InvalidRequestError, match=r"block_keys must be int64 integers, got one"):
        compact.process_request([4, 2**63], 6)
    with pytest.raises(InvalidRequestError, match=r"describe 1 requests, got 2 times"):
        compact.process_batch(np.array([1]), np.array([0, 1]), np.array([1, 2]))
    with pytest.raises(InvalidRequestError, match="offsets must start at 0, not decrease"):
        compact.process_batch(np.array([1, 2]), np.array([0, 2, 1, 2]), np.array([1, 2, 3]))
    with pytest.raises(InvalidRequestError, match="ttl_ns must not be negative, got -1"):
        CompactLiteHit(ttl_ns=-1)
    with pytest.raises(
        InvalidRequestError, match="max_tracked_blocks must not be negative, got -2"
    ):
        CompactLiteHit(max_tracked_blocks=-2)
    compact._check()
    assert_states_equal(compact.export_state(), before)


@pytest.mark.parametrize("ttl, limit", [(0, 0), (30, 0), (0, 60), (30, 60)])
def test_snapshots_move_between_the_two_engines(ttl, limit):
    trace, times = mixed_trace(random.Random(8), 2400)
    python, compact = both(trace[:1200], times[:1200], ttl, limit)
    to_compact = CompactLiteHit.from_state(python.export_state(), ttl, limit)
    to_python = LiteHit.from_state(compact.export_state(), ttl, limit)
    to_compact._check()
    for keys, now in zip(trace[1200:], times[1200:], strict=True):
        fact = python.process_request(keys, now)
        assert to_compact.process_request(keys, now) == fact
        assert to_python.process_request(keys, now) == fact
    to_compact._check()
    assert_states_equal(to_compact.export_state(), python.export_state())


def test_restore_refuses_duplicate_keys_like_lite_hit():
    state = LiteHit().export_state()
    import dataclasses

    bad = dataclasses.replace(state, keys=np.array([5, 6, 5, 5], np.int64))
    for engine in (LiteHit, CompactLiteHit):
        with pytest.raises(InvalidRequestError, match=r"distinct, got 2 duplicate\(s\) in 4 keys"):
            engine.from_state(bad, 0, 0)


def test_position_space_and_table_stay_bounded_under_a_flood():
    """200k fresh keys through a limit of 500: the space and the table stay O(limit)."""
    limit = 500
    engine = CompactLiteHit(ttl_ns=1000, max_tracked_blocks=limit)
    biggest = 0
    for i in range(200_000 // 32):
        engine.process_request(list(range(10**12 + 32 * i, 10**12 + 32 * i + 32)), now_ns=i)
        biggest = max(biggest, engine.memory_usage_bytes())
        assert engine._meta[T] <= engine._meta[CAP] <= 2 * (limit + 32) + SLACK + 64
        if i % 1000 == 0:
            engine._check()
    engine._check()
    assert engine.current_unique_blocks() == limit
    assert engine.dropped_blocks == 200_000 - limit
    assert biggest <= 8 * (2 * (limit + 32) + SLACK + 64) + 4 * 4 * (1 << 14) + 4096
    last = list(range(10**12 + 200_000 - 32, 10**12 + 200_000))
    assert project_blocks(engine.process_request(last, 200_000 // 32), 32) == 32


def test_memory_estimate_matches_what_numpy_allocated():
    """memory_usage_bytes is the sum of the engine's arrays: tracemalloc (which numpy
    reports its buffers to) sees the same growth, and it is under 48 bytes a block."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        engine = CompactLiteHit()
        keys, offsets, times = next(SyntheticTrace(seed=3).chunks(60_000, 1))
        engine.process_batch(keys, offsets, times)
        traced = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    estimate = engine.memory_usage_bytes()
    blocks = engine.current_unique_blocks()
    assert blocks > 300_000
    assert 0.9 * traced <= estimate + keys.nbytes * 4 and estimate <= 1.1 * traced
    assert estimate / blocks < 48


def test_compaction_keeps_the_space_within_twice_the_live_blocks():
    engine = CompactLiteHit()
    hot = list(range(1, 41))
    cold = 10_000
    for i in range(4000):
        engine.process_request(hot)  # churn: 40 dead positions a request
        if i % 50 == 0:
            engine.process_request(list(range(cold, cold + 5)))
            cold += 10
    engine._check()
    live = engine.current_unique_blocks()
    assert engine._meta[CAP] <= 4 * (live + 40) + SLACK + 64
    entries = int(engine._meta[11])
    assert entries * MAX_LOAD_DEN <= engine._tv.shape[0] * MAX_LOAD_NUM


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_stress_at_millions_of_blocks_against_the_oracle(seed):
    """The synthetic trace (shared system prompts, Zipf sessions, lognormal lengths) to
    1.2 million blocks: every request's hits equal one naive LRU's at three sampled
    capacities, and at infinite capacity every cached prefix block is counted."""
    rng = random.Random(seed)
    trace = SyntheticTrace(seed=seed)
    chunks = list(trace.chunks(32_768, 1_200_000))
    assert trace.unique_blocks >= 1_200_000
    engine = CompactLiteHit()
    facts = []
    for chunk in chunks:
        facts += engine.process_batch(*chunk).facts()
    engine._check()
    capacities = sorted(rng.sample(range(1_000, 1_200_000), 3))
    oracles = [NaiveLRU(c) for c in capacities]
    infinite = set()
    i = 0
    for keys, offsets, _ in chunks:
        flat = keys.tolist()
        bounds = offsets.tolist()
        for a, b in pairwise(bounds):
            request = flat[a:b]
            fact = facts[i]
            for cap, oracle in zip(capacities, oracles, strict=True):
                assert project_blocks(fact, cap) == oracle.request(request), (i, cap)
            cached = 0
            for k in request:
                if k not in infinite:
                    break
                cached += 1
            assert project_infinite(fact) == cached, i
            infinite.update(request)
            i += 1


@pytest.mark.parametrize("ttl_s, limit", [(300, 0), (0, 150_000)])
def test_seeded_stress_with_ttl_or_limit_at_a_million_blocks(ttl_s, limit):
    """TTL or a limit at scale: the same facts as LiteHit (itself oracle-tested) for every
    request of a synthetic trace of a million blocks (20 requests/s)."""
    trace = SyntheticTrace(seed=7)
    python = LiteHit(ttl_ns=ttl_s * 10**9, max_tracked_blocks=limit)
    compact = CompactLiteHit(ttl_ns=ttl_s * 10**9, max_tracked_blocks=limit)
    for keys, offsets, times in trace.chunks(32_768, 1_000_000):
        flat = keys.tolist()
        bounds = offsets.tolist()
        got = compact.process_batch(keys, offsets, times).facts()
        for r, (a, b) in enumerate(pairwise(bounds)):
            assert got[r] == python.process_request(flat[a:b], int(times[r]))
    compact._check()
    assert compact.expired_blocks == python.expired_blocks
    assert compact.dropped_blocks == python.dropped_blocks
    assert (compact.expired_blocks > 0) == bool(ttl_s)
    assert (compact.dropped_blocks > 0) == bool(limit)
    assert_states_equal(compact.export_state(), python.export_state())


def test_tree_traces_through_both_paths():
    rng = random.Random(12)
    trace = tree_trace(rng, 3000, max_new=12)
    times = list(range(len(trace)))
    python = LiteHit()
    expected = [python.process_request(k) for k in trace]
    assert CompactLiteHit().process_batch(*batch_of(trace, times)).facts() == expected


@pytest.mark.parametrize(("n", "distinct"), [(1, 1), (300, 7), (50_000, 50_000), (200_000, 31_000)])
def test_distinct_estimate_is_close_and_never_above_the_count(n: int, distinct: int) -> None:
    """The batch's table is sized from this estimate (linear counting): within 5 % + 64 of
    the true count and at most the number of keys."""
    rng = np.random.default_rng(n)
    keys = rng.permutation(np.arange(n) % distinct).astype(np.int64) * 7919 - 10**12
    bits = np.zeros(max(n, 64) // 8 + 8, np.uint64)
    estimate = int(ck.distinct_estimate(keys, bits))
    true = len(np.unique(keys))
    assert estimate <= n
    assert abs(estimate - true) <= 0.05 * true + 64
