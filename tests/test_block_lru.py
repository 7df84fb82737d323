"""BlockLRU: either touch order, exact at every capacity against one naive LRU per capacity;
the depths a per-capacity report reads; states; the seam's head-first model."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import NaiveLRU, SequentialLRU, oracle_hits, tree_trace

from litehit_core import apply_prefix_hash, project_steps
from litehit_core.block_lru import BlockLRU
from litehit_core.engine import EngineSpec, create_engine, touch_order_model
from litehit_core.errors import InvalidRequestError

ORDERS = ("head-first", "tail-first")


def replay(engine: BlockLRU, trace, times=None):
    return [engine.process_request(k, times[i] if times else 0) for i, k in enumerate(trace)]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("seed", range(3))
def test_every_capacity_equals_a_naive_lru_in_that_order(order, seed):
    rng = random.Random(seed)
    trace = tree_trace(rng, 250, max_new=7)
    engine = BlockLRU(order)
    facts = replay(engine, trace)
    engine._check()
    caps = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, None]
    naive = oracle_hits(trace, caps, order=order)
    for fact, want in zip(facts, naive, strict=True):
        got = [project_steps(fact.hit_curve, c if c is not None else 1 << 62) for c in caps]
        assert got == want
    assert sum(row[0] for row in naive) < sum(row[-1] for row in naive)  # capacities differ


@pytest.mark.parametrize("order", ORDERS)
def test_ttl_and_prefix_hash_in_both_orders(order):
    rng = random.Random(7)
    trace = [apply_prefix_hash(keys) for keys in tree_trace(rng, 300, max_new=6)]
    times, t = [], 0
    for _ in trace:
        t += rng.choice([0, 1, 5, 40])
        times.append(t)
    engine = BlockLRU(order, ttl_ns=60)
    facts = replay(engine, trace, times)
    engine._check()
    caps = [1, 4, 16, 64, None]
    naive = oracle_hits(trace, caps, times, ttl=60, order=order)
    for fact, want in zip(facts, naive, strict=True):
        assert [project_steps(fact.hit_curve, c or 1 << 62) for c in caps] == want
    assert engine.expired_blocks > 0


def test_tracking_limit_is_an_lru_of_that_many_blocks():
    trace = tree_trace(random.Random(2), 400, max_new=6)
    engine = BlockLRU("head-first", max_tracked_blocks=40)
    facts = replay(engine, trace)
    engine._check()
    naive = oracle_hits(trace, [10, 40], order="head-first")
    assert [[project_steps(f.hit_curve, c) for c in (10, 1 << 62)] for f in facts] == naive
    assert engine.current_unique_blocks() == 40 and engine.dropped_blocks > 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(1, 12), min_size=0, max_size=7), max_size=40))
def test_property_head_first_small_alphabets(trace):
    engine = BlockLRU("head-first")
    caps = [1, 2, 3, 4, 6, 9, None]
    naive = oracle_hits(trace, caps, order="head-first")
    for keys, want in zip(trace, naive, strict=True):
        fact = engine.process_request(keys)
        assert [project_steps(fact.hit_curve, c or 1 << 62) for c in caps] == want
    engine._check()


@pytest.mark.parametrize("order", ORDERS)
def test_depths_give_positions_at_hit_and_sequential_evictions(order):
    """At any capacity C: the snapshot depths of the hit prefix are the positions a
    one-chunk-at-a-time LRU reports (depth - 1), and touches deeper than C (or of
    untracked blocks) minus the final occupancy are its evictions."""
    trace = tree_trace(random.Random(5), 300, max_new=9)
    engine = BlockLRU(order)
    records = [engine.process_with_depths(keys) for keys in trace]
    for capacity in (1, 3, 7, 20, 60, 500):
        lru = SequentialLRU(capacity, order)
        misses = 0
        for keys, (fact, depths, touches) in zip(trace, records, strict=True):
            prefix, positions = lru.request(keys)
            hits = project_steps(fact.hit_curve, capacity)
            assert hits == prefix
            assert [d - 1 for d in depths[:hits].tolist()] == positions
            misses += sum(1 for d in touches.tolist() if d < 0 or d > capacity)
        occupancy = min(capacity, engine.current_unique_blocks())
        assert misses - occupancy == lru.evictions, capacity
        assert len(lru.cache) == occupancy


def test_states_round_trip_and_the_seam():
    trace = tree_trace(random.Random(9), 200, max_new=5)
    engine = create_engine(EngineSpec(model="lru-head-first", ttl_ns=0, max_tracked_blocks=50))
    twin = BlockLRU("head-first", max_tracked_blocks=50)
    for keys in trace[:120]:
        assert engine.process_request(keys) == twin.process_request(keys)
    state = engine.export_state()
    assert state.model == "lru-head-first" and state.kinds is None
    back = create_engine(EngineSpec(model="lru-head-first", max_tracked_blocks=50), state)
    for keys in trace[120:]:
        assert back.process_request(keys) == twin.process_request(keys)
    back._check()
    assert touch_order_model("tail-first") == "lru"
    assert touch_order_model("head-first") == "lru-head-first"
    with pytest.raises(InvalidRequestError, match="touch_order must be one of"):
        touch_order_model("middle-out")
    with pytest.raises(InvalidRequestError, match="touch_order must be one of"):
        BlockLRU("sideways")
    naive = NaiveLRU(3, order="head-first")
    assert naive.request([1, 2, 3]) == 0 and naive.request([1, 2, 3]) == 3
