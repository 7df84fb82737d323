"""The hybrid (linear-attention / Mamba) engine against a naive byte LRU of typed objects."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import NaiveHybridLRU, tree_trace

from litehit_core import InvalidRequestError
from litehit_core.hybrid import MAX_OBJECT_BYTES, HybridLRU
from litehit_core.model import HitCurveStep

INF = 1 << 62
WORKED = [[1, 2, 3], [1, 2, 3], [1, 2, 4, 5], [1, 2, 3], [1, 6], [1, 2, 4, 5, 7]]


def project(curve, capacity: int) -> int:
    """Hit blocks of a staircase at ``capacity`` bytes (the definition, step by step)."""
    hits = 0
    for threshold, hit_blocks in curve:
        if threshold > capacity:
            break
        hits = hit_blocks
    return hits


def replay(engine: HybridLRU, trace, times=None, check_every: int = 1):
    facts = []
    for i, keys in enumerate(trace):
        facts.append(engine.process_request(keys, times[i] if times else 0))
        if check_every and i % check_every == 0:
            engine._check()
    engine._check()
    return facts


def test_worked_example_of_the_issue():
    facts = replay(HybridLRU(1024, 2048, 2), WORKED)
    assert [project(f.hit_curve, 4096) for f in facts] == [0, 2, 2, 2, 0, 0]
    assert [project(f.hit_curve, 8192) for f in facts] == [0, 3, 2, 2, 0, 2]
    assert [project(f.hit_curve, INF) for f in facts] == [0, 3, 2, 3, 0, 4]
    assert all(isinstance(s, HitCurveStep) for f in facts for s in f.hit_curve)
    assert [f.total_blocks for f in facts] == [3, 3, 4, 3, 2, 5]
    # request 2: request 1 left (most recent first) Full(1) Full(2) Linear(2) Full(3)
    # Linear(3): the state after 2 blocks needs 1024+1024+2048 bytes, after 3 blocks 7168
    assert facts[1].hit_curve == (HitCurveStep(4096, 2), HitCurveStep(7168, 3))


def _check_against_oracle(trace, times, full, linear, step, ttl, capacities, limit=0):
    engine = HybridLRU(full, linear, step, ttl, limit)
    facts = replay(engine, trace, times, check_every=7)
    for capacity in capacities:
        oracle = NaiveHybridLRU(capacity if capacity is not None else (limit or None),
                                full, linear, step, ttl)  # fmt: skip
        at = INF if capacity is None else capacity
        for i, (keys, fact) in enumerate(zip(trace, facts, strict=True)):
            want = oracle.request(keys, times[i])
            assert project(fact.hit_curve, at) == want, (i, capacity)
    return engine, facts


@pytest.mark.parametrize("seed", range(16))
def test_exact_at_every_threshold_and_one_byte_around(seed):
    rng = random.Random(seed)
    trace = tree_trace(rng, 160, max_new=rng.randint(1, 9))
    step = [1, 2, 3, 7][seed % 4]
    full = rng.choice([64, 1000])
    linear = rng.choice([full // 2, full, 3 * full, 30 * full])
    ttl = [0, 0, 7, 30][seed % 4 // 2 * 2 + seed % 2]
    now = 0
    times = []
    for _ in trace:
        now += rng.choice([0, 1, 2, 5])
        times.append(now)
    engine = HybridLRU(full, linear, step, ttl)
    facts = replay(engine, trace, times, check_every=11)
    thresholds = sorted({t for f in facts for t, _ in f.hit_curve})
    sample = thresholds if len(thresholds) <= 40 else rng.sample(thresholds, 40)
    capacities = {0, full - 1, full, linear, full + linear, 50 * full + 7}
    capacities |= {t + d for t in sample for d in (-1, 0, 1) if t + d >= 0}
    _check_against_oracle(trace, times, full, linear, step, ttl, [*sorted(capacities), None])


@pytest.mark.parametrize("limit_objects", [3, 40, 300])
@pytest.mark.parametrize("ttl", [0, 25])
def test_byte_limit_is_an_lru_of_that_many_bytes(limit_objects, ttl):
    rng = random.Random(limit_objects + ttl)
    trace = tree_trace(rng, 800, max_new=8)
    times = [i // 2 for i in range(len(trace))]
    full, linear, step = 64, 200, 3
    limit = limit_objects * full
    capacities = [c for c in (full, 2 * full + linear, limit // 2, limit) if c <= limit]
    engine, _ = _check_against_oracle(
        trace, times, full, linear, step, ttl, [*capacities, None], limit
    )
    assert engine.tracked_bytes() <= limit and engine.dropped_blocks > 0


@pytest.mark.parametrize(("ttl", "limit"), [(0, 0), (30, 0), (0, 5000), (30, 5000)])
def test_export_and_restore_continue_exactly(ttl, limit):
    rng = random.Random(5)
    trace = tree_trace(rng, 1200, max_new=10)
    times = [i // 4 for i in range(len(trace))]
    original = HybridLRU(100, 250, 4, ttl, limit)
    replay(original, trace[:700], times[:700], check_every=0)
    state = original.export_state()
    assert state.model == "hybrid" and state.kinds is not None
    assert len(state.keys) == original.current_unique_blocks() + original.current_states()
    restored = HybridLRU.from_state(state, 100, 250, 4, ttl, limit)
    restored._check()
    again = restored.export_state()
    for name in ("keys", "kinds", "epoch_starts", "epoch_times"):
        assert np.array_equal(getattr(again, name), getattr(state, name)), name
    for i in range(700, len(trace)):
        a = original.process_request(trace[i], times[i])
        b = restored.process_request(trace[i], times[i])
        assert a == b, i
    restored._check()
    for attr in ("current_unique_blocks", "current_states", "tracked_bytes"):
        assert getattr(original, attr)() == getattr(restored, attr)()
    assert (original.expired_blocks, original.dropped_blocks) == (
        restored.expired_blocks,
        restored.dropped_blocks,
    )


def test_long_trace_grows_and_compacts_the_position_space():
    rng = random.Random(9)
    trace = tree_trace(rng, 6000, max_new=20)
    engine = HybridLRU(8, 24, 2, max_tracked_bytes=8 * 3000)
    replay(engine, trace, check_every=250)
    assert engine.current_unique_blocks() <= 3000
    before = engine.memory_usage_bytes()
    replay(engine, trace, check_every=500)
    assert engine.memory_usage_bytes() <= 2 * before  # bounded by the limit, not the trace


def test_invalid_arguments_name_the_field():
    with pytest.raises(
        InvalidRequestError, match=r"full_bytes must be in 1\.\.\d+ \(bytes\), got 0"
    ):
        HybridLRU(0, 10, 1)
    with pytest.raises(InvalidRequestError, match="linear_bytes must be in"):
        HybridLRU(10, MAX_OBJECT_BYTES + 1, 1)
    with pytest.raises(InvalidRequestError, match="step_blocks must be >= 1, got 0"):
        HybridLRU(10, 10, 0)
    with pytest.raises(InvalidRequestError, match="ttl_ns must not be negative"):
        HybridLRU(10, 10, 1, ttl_ns=-1)
    engine = HybridLRU(10, 10, 1)
    with pytest.raises(InvalidRequestError, match="int64"):
        engine.process_request([1, 2**64])
    assert engine.current_unique_blocks() == 0  # nothing applied


def test_duplicates_keep_their_first_occurrence():
    engine = HybridLRU(10, 10, 1)
    engine.process_request([1, 2, 1, 3])
    assert engine.current_unique_blocks() == 3
    assert project(engine.process_request([1, 2, 3]).hit_curve, INF) == 3


def test_inconsistent_states_are_refused():
    engine = HybridLRU(10, 20, 2, ttl_ns=5)
    replay(engine, [[1, 2, 3], [1, 4]], [1, 2])
    state = engine.export_state()
    from dataclasses import replace

    with pytest.raises(InvalidRequestError, match="kinds"):
        HybridLRU.from_state(replace(state, kinds=np.zeros(1, np.int64)), 10, 20, 2, 5)
    doubled = replace(
        state,
        keys=np.concatenate((state.keys, state.keys[:1])),
        kinds=np.concatenate((state.kinds, state.kinds[:1])),
    )
    with pytest.raises(InvalidRequestError, match="repeat"):
        HybridLRU.from_state(doubled, 10, 20, 2, 5)
    with pytest.raises(InvalidRequestError, match="epoch"):
        HybridLRU.from_state(replace(state, epoch_starts=state.epoch_starts + 1), 10, 20, 2, 5)
    with pytest.raises(InvalidRequestError, match="model"):
        HybridLRU.from_state(replace(state, model="lru"), 10, 20, 2, 5)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**16),
    st.integers(1, 5),
    st.sampled_from([(16, 8), (16, 16), (16, 48), (16, 400)]),
    st.lists(st.integers(0, 3000), min_size=1, max_size=6),
)
def test_property_exact_and_monotone(seed, step, charges, capacities):
    rng = random.Random(seed)
    trace = tree_trace(rng, 60, max_new=6)
    full, linear = charges
    engine = HybridLRU(full, linear, step)
    facts = replay(engine, trace, check_every=0)
    for fact in facts:  # a staircase: thresholds and hits strictly increase
        thresholds = [t for t, _ in fact.hit_curve]
        hits = [h for _, h in fact.hit_curve]
        assert thresholds == sorted(set(thresholds)) and hits == sorted(set(hits))
        assert not hits or hits[-1] <= fact.total_blocks
    for capacity in capacities:
        oracle = NaiveHybridLRU(capacity, full, linear, step)
        for keys, fact in zip(trace, facts, strict=True):
            assert project(fact.hit_curve, capacity) == oracle.request(keys)


@pytest.mark.parametrize("seed", range(8))
def test_exact_on_keys_that_are_not_prefix_chained(seed):
    """Nothing in the engine relies on the input contract: random keys from a small
    alphabet (shared in any order, repeated within a request) are exact too."""
    rng = random.Random(1000 + seed)
    trace = [[rng.randint(1, 12) for _ in range(rng.randint(0, 7))] for _ in range(300)]
    step = [1, 2, 3][seed % 3]
    capacities = [16, 40, 64, 100, 160, 256, 400, None]
    _check_against_oracle(trace, [0] * len(trace), 16, [8, 24, 48][seed % 3], step, 0, capacities)


@pytest.mark.parametrize(("ttl", "limit"), [(0, 0), (6, 0), (0, 2000)])
def test_resident_full_blocks_at_each_capacity_after_every_request(ttl, limit):
    rng = random.Random(77 + ttl)
    trace = tree_trace(rng, 300, max_new=7)
    full, linear, step = 16, 40, 3
    capacities = [0, 15, 16, 56, 57, 200, 999, 2000]
    engine = HybridLRU(full, linear, step, ttl, limit)
    oracles = [NaiveHybridLRU(c, full, linear, step, ttl) for c in capacities]
    unbounded = NaiveHybridLRU(limit or None, full, linear, step, ttl)
    for i, keys in enumerate(trace):
        engine.process_request(keys, i)
        for o in (*oracles, unbounded):
            o.request(keys, i)
        assert engine.resident_blocks(capacities) == tuple(o.full_objects() for o in oracles)
        assert engine.current_unique_blocks() == unbounded.full_objects()
        assert engine.tracked_bytes() == unbounded.used
