"""TraceQueryPackedStream: a packed batch gives exactly the answers of the same queries sent
one by one (every engine, TTL, prefix hash, limits), is applied whole or not at all with
errors naming the query, and works over a real server."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from conftest import LiveServer
from hypothesis import given, settings
from hypothesis import strategies as st
from test_manager import make_group, make_reg

from litehit_core import HitCurveAccumulator, HitCurveSegment, project_curve_slots
from litehit_core.projector import project_segments, segment_sums
from litehit_service import messages as pb2
from litehit_service import packed_frames, wire
from litehit_service.errors import InstanceNotExist, InvalidArgument
from litehit_service.manager import ManagerLimits, OnlineOptimizerManager
from litehit_service.policy import QueryPolicy

NOW = 10**18


def manager(engine: str, **group_kw) -> OnlineOptimizerManager:
    m = OnlineOptimizerManager(
        policy=QueryPolicy.online(clock_ns=lambda: NOW),
        limits=ManagerLimits(max_tracked_blocks=group_kw.pop("limit", 0)),
        lru_engine=engine,
    )
    m.create_group(replace(make_group(), **group_kw))
    m.register_instance(make_reg("i", block_size=4))
    return m


def random_queries(rng: random.Random, n: int):
    chains = [[rng.randrange(1 << 60) for _ in range(rng.randrange(1, 12))] for _ in range(25)]
    queries, t = [], NOW - 10**12
    for _ in range(n):
        keys = rng.choice(chains)[: rng.randrange(13)] + [rng.randrange(1 << 60)] * rng.randrange(2)
        tokens = 4 * len(keys) + rng.randrange(4) if rng.random() < 0.8 else 0
        t += rng.randrange(0, 3 * 10**8)
        queries.append((keys, tokens, t if rng.random() < 0.9 else 0))
    return queries


def packed(queries):
    keys = [k for q in queries for k in q[0]]
    return (
        np.array(keys, np.int64),
        np.array([len(q[0]) for q in queries], np.int64),
        np.array([q[1] for q in queries], np.int64),
        np.array([q[2] for q in queries], np.int64),
    )


def one_by_one(m: OnlineOptimizerManager, queries):
    rows = []
    for keys, tokens, ts in queries:
        r = m.trace_query("i", keys, tokens, 0, ts)
        rows.append((r.total_blocks, r.input_token_len, r.hit_blocks, r.theoretical))
    return rows


def packed_rows(result):
    rows = []
    for i in range(result.queries):
        rows.append(
            (
                int(result.total_blocks[i]),
                int(result.input_token_lens[i]),
                tuple(result.hit_blocks[i].tolist()),
                int(result.max_hit_blocks[i]) if result.max_hit_blocks is not None else -1,
                int(result.unique_blocks[i]),
            )
        )
    return rows


CASES = [
    {},
    {"ttl_seconds": 1},
    {"enable_prefix_hash": True},
    {"limit": 30},
    {"enable_theoretical_max_cache": False},
]


@pytest.mark.parametrize("engine", ["compact", "python"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(c) or "plain")
def test_packed_batches_answer_like_queries_one_by_one(engine, case):
    rng = random.Random(1000 + CASES.index(case))  # a fixed seed per case
    queries = random_queries(rng, 900)
    single, batched = manager("python", **case), manager(engine, **case)
    expected = one_by_one(single, queries)
    got = []
    start = 0
    while start < len(queries):
        size = rng.choice([1, 7, 64, 250])
        result = batched.trace_query_packed("i", *packed(queries[start : start + size]))
        got += packed_rows(result)
        start += size
    for i, (row, exp) in enumerate(zip(got, expected, strict=True)):
        total, tokens, hits, theoretical = exp
        assert row[:3] == (total, tokens, hits), i
        assert row[3] == theoretical.max_hit_count, i
        if theoretical.current_unique_keys >= 0:
            assert row[4] == theoretical.current_unique_keys, i
    a, b = single.list_instances()[0], batched.list_instances()[0]
    assert replace(a, debug_info=None) == replace(b, debug_info=None)
    assert single.hit_rate_curve("i") == batched.hit_rate_curve("i")


def test_errors_refuse_the_whole_batch_and_name_the_query():
    m = manager("compact")
    good = [([1, 2, 3], 12, NOW - 10), ([1, 2], 8, NOW - 5)]
    m.trace_query_packed("i", *packed(good))
    before = m.list_instances()[0]
    keys, counts, lens, ts = packed(good + [([5, 6], 13, NOW - 4)])
    cases = [
        ((keys, counts, lens[:2], ts), r"input_token_lens has 2 values but key_counts has 3"),
        ((keys, counts, lens, ts[:1]), r"timestamps_ns has 1 values but key_counts has 3"),
        ((keys, counts - 9, lens, ts), r"key_counts\[0\] must not be negative, got -6"),
        ((keys[:-1], counts, lens, ts), r"key_counts add up to 7 but block_keys has 6 keys"),
        ((keys, counts, lens, ts), r"instance_id 'i': query 2: len\(block_keys\) is 2 but"),
        ((keys, counts, lens * 0 - 1, ts), r"input_token_lens\[0\] must not be negative"),
        ((keys, counts, lens, ts + 10**15), r"query 0: timestamp_ns \d+ is .* ahead"),
    ]
    for args, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            m.trace_query_packed("i", *args)
    with pytest.raises(InstanceNotExist, match="instance_id 'x' is not registered"):
        m.trace_query_packed("x", *packed(good))
    assert m.list_instances()[0] == before  # nothing of any refused batch was applied
    small = OnlineOptimizerManager(policy=QueryPolicy.online(max_block_keys=2))
    small.create_group(make_group())
    small.register_instance(make_reg("i"))
    with pytest.raises(InvalidArgument, match=r"query 0: block_keys has 3 keys, more than"):
        small.trace_query_packed("i", *packed(good))


def test_offline_policy_rejects_backwards_time_naming_the_query():
    m = OnlineOptimizerManager(policy=QueryPolicy.offline())
    m.create_group(make_group())
    m.register_instance(make_reg("i"))
    queries = [([1], 4, 50), ([2], 4, 60), ([3], 4, 55)]
    with pytest.raises(InvalidArgument, match=r"query 2: instance_id 'i': timestamp_ns 55 goes"):
        m.trace_query_packed("i", *packed(queries))
    assert m.list_instances()[0].total_queries == 0


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_project_segments_equals_the_per_fact_projection(data):
    facts = data.draw(
        st.lists(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 6)), max_size=4), max_size=8)
    )
    curves = []
    for segments in facts:  # thresholds strictly increasing, as facts are
        curve, last = [], 0
        for gap, run in segments:
            curve.append(HitCurveSegment(last + gap, run))
            last += gap + run
        curves.append(curve)
    caps = data.draw(st.lists(st.integers(0, 200), min_size=1, max_size=5))
    starts = np.array([s for c in curves for s, _ in c] or [0], np.int64)
    runs = np.array([r for c in curves for _, r in c] or [0], np.int64)
    offsets = np.zeros(len(curves) + 1, np.int64)
    offsets[1:] = np.cumsum([len(c) for c in curves])
    hits = project_segments(starts, runs, offsets, caps)
    assert hits.tolist() == [project_curve_slots(c, caps) for c in curves]
    assert segment_sums(runs, offsets).tolist() == [sum(r for _, r in c) for c in curves]


def test_accumulator_add_ramps_equals_add_curve():
    rng = random.Random(3)
    one, many = HitCurveAccumulator(), HitCurveAccumulator()
    starts, runs = [], []
    for _ in range(3000):
        s = rng.randrange(1, 500)
        r = rng.randrange(1, 9)
        one.add_curve([HitCurveSegment(s, r)])
        starts.append(s)
        runs.append(r)
    many.add_ramps(np.array(starts, np.int64), np.array(runs, np.int64))
    assert [a.tolist() for a in one.arrays()] == [a.tolist() for a in many.arrays()]


def test_wire_round_trip():
    from litehit_service.model import PackedQueryResult

    result = PackedQueryResult(
        4, (1.0, 2.0), np.array([3, 1]), np.array([12, 5]), np.array([[1, 2], [0, 1]]),
        np.array([3, 1]), np.array([3, 4]),
    )  # fmt: skip
    answer = pb2.TraceQueryPackedResponse.FromString(packed_frames.answer_bytes(result, "t"))
    back = wire.packed_result_from_pb(answer)
    assert back.capacity_gb == (1.0, 2.0) and back.block_size_tokens == 4
    for name in ("total_blocks", "input_token_lens", "hit_blocks", "max_hit_blocks"):
        assert np.array_equal(getattr(back, name), getattr(result, name)), name
    msg = wire.packed_query_to_pb("i", [1, 2], [2], [8], [5], trace_id="x")
    frame = packed_frames.packed_frame(msg.SerializeToString())
    iid, keys, counts, lens, ts = packed_frames.frame_arrays(frame)
    assert (iid, keys.tolist(), counts.tolist(), lens.tolist(), ts.tolist()) == (
        "i", [1, 2], [2], [8], [5],
    )  # fmt: skip


def test_packed_stream_over_a_real_server():
    live = LiveServer()
    try:
        with live.client() as client:
            client.create_instance_group(make_group())
            client.register_instance(make_reg("i"))
            client.register_instance(make_reg("j"))
            queries = random_queries(random.Random(9), 400)
            streamed = list(
                client.stream_trace_queries(
                    (
                        pb2.TraceQueryRequest(
                            instance_id="j", block_keys=k, input_token_len=t, timestamp_ns=0
                        )
                        for k, t, _ in queries
                    ),
                    batch_size=64,
                )
            )
            batches = [
                wire.packed_query_to_pb("i", *packed(queries[s : s + 64])[:3])
                for s in range(0, len(queries), 64)
            ]
            results = list(client.stream_packed(batches))
            rows = [r for result in results for r in packed_rows(result)]
            assert len(rows) == len(queries)
            for row, answer in zip(rows, streamed, strict=True):
                assert row[2] == tuple(c.cache_hit_count for c in answer.capacity_results)
                assert row[3] == answer.theoretical_result.max_hit_count
            bad = wire.packed_query_to_pb("nope", [1], [1], [4])
            with pytest.raises(InstanceNotExist, match="instance_id 'nope' is not registered"):
                list(client.stream_packed([bad]))
    finally:
        live.stop()


def test_packed_stream_honours_the_prefix_hash_rule_over_a_real_server():
    """With ``enable_prefix_hash`` a key stands for its whole prefix: after ``[7, 8]`` the
    query ``[8]`` hits nothing (block 8 after 7 is not block 8 at the start). Through
    TraceQueryPackedStream (one batch, and one batch per query) the answers are those of
    unary TraceQuery calls: 0 hits for ``[8]`` in every slot, never 1."""
    live = LiveServer()
    try:
        with live.client() as client:
            client.create_instance_group(replace(make_group(), enable_prefix_hash=True))
            for iid in ("unary", "one-batch", "batches"):
                client.register_instance(make_reg(iid, block_size=4))
            queries = [([7, 8], 8, 0), ([8], 4, 0), ([7, 8], 8, 0)]
            unary = []
            for keys, tokens, _ in queries:
                r = client.trace_query("unary", keys, tokens)
                unary.append(
                    (tuple(c.cache_hit_count for c in r.capacity_results),
                     r.theoretical_result.max_hit_count)
                )  # fmt: skip
            # slots of 2 and 3 blocks; [7, 8] again: its head (touched last) stayed in the
            # 2-block slot beside [8]'s block, both blocks in the 3-block slot
            assert unary == [((0, 0), 0), ((0, 0), 0), ((1, 2), 2)]
            one = wire.packed_query_to_pb("one-batch", *packed(queries)[:3])
            each = [wire.packed_query_to_pb("batches", *packed([q])[:3]) for q in queries]
            for batches in ([one], each):
                rows = [r for result in client.stream_packed(batches) for r in packed_rows(result)]
                assert [(row[2], row[3]) for row in rows] == unary
            totals = {
                s.instance_id: [c.total_hits for c in s.capacity_summaries]
                for s in client.list_instances().instances
            }
            assert totals == {"unary": [1, 2], "one-batch": [1, 2], "batches": [1, 2]}
    finally:
        live.stop()


def test_every_streaming_method_has_a_stream_kind(monkeypatch):
    """Walks the service descriptor: the transport knows how to drive every streaming
    method, and refuses to serve one it does not know (deny by default)."""
    from litehit_service import transport
    from litehit_service.servicer import OptimizerServicer

    service = pb2.FILE_DESCRIPTOR.services_by_name["OptimizerService"]
    streaming = {m.name for m in service.methods if m.client_streaming or m.server_streaming}
    assert streaming == set(transport.STREAM_KINDS)
    for kind in transport.STREAM_KINDS.values():
        assert callable(getattr(OptimizerServicer, kind.answer))
    m = manager("compact")
    t = transport.Transport(
        OptimizerServicer(m), None, lambda iid: True,  # type: ignore[arg-type]
        tokens=transport.TokenCheck(None, None), max_streams=1, stream_idle_seconds=1.0,
    )  # fmt: skip
    assert t.generic_handler() is not None
    monkeypatch.delitem(transport.STREAM_KINDS, "TraceQueryPackedStream")
    with pytest.raises(ValueError, match="streaming method TraceQueryPackedStream has no"):
        t.generic_handler()


def test_packed_batches_of_a_hybrid_instance_answer_like_queries_one_by_one():
    """Hybrid instances take the one-by-one path inside the batch: the same answers."""
    from test_hybrid_service import hybrid_reg

    from litehit_service.model import InstanceGroup

    group = InstanceGroup("g", (4096 / 1024**3, 65536 / 1024**3), enable_theoretical_max_cache=True)
    single, batched = OnlineOptimizerManager(), OnlineOptimizerManager(lru_engine="compact")
    for m in (single, batched):
        m.create_group(group)
        m.register_instance(hybrid_reg())
    rng = random.Random(6)
    queries = []
    for _ in range(300):
        keys = [rng.randrange(40) for _ in range(rng.randrange(1, 9))]
        queries.append((list(dict.fromkeys(keys)), 0, 0))
    expected = []
    for keys, _, _ in queries:
        r = single.trace_query("h", keys, 4 * len(keys))
        expected.append((r.hit_blocks, r.theoretical.max_hit_count))
    got = []
    for s in range(0, len(queries), 37):
        result = batched.trace_query_packed("h", *packed(queries[s : s + 37]))
        got += [
            (tuple(result.hit_blocks[i].tolist()), int(result.max_hit_blocks[i]))
            for i in range(result.queries)
        ]
    assert got == expected
    a, b = single.list_instances()[0], batched.list_instances()[0]
    assert replace(a, debug_info=None) == replace(b, debug_info=None)
