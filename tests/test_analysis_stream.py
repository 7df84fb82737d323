"""The analyses streamed (``litehit export-tree``, ``litehit lifecycle``): the hits per
compressed node gathered batch by batch (:class:`~litehit_service.optimizer.analysis.tree.
PathHits`) against a naive per-get count, the lives drained out of the replay while it
runs (:meth:`~litehit_core.policy_replay.Replayer.drain_lives`), and both commands' files
from a trace read in tiny chunks against the same trace read in one."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import pytest

from litehit_core.engine import POLICIES
from litehit_core.policy_replay import Replayer
from litehit_core.policy_replay.state import HIGH, LIFE_FIELDS, NOW, STRIDE
from litehit_service.optimizer.analysis import lifecycle as lifecycle_module
from litehit_service.optimizer.analysis.lifecycle import HEADER, LifecycleWriter, lifecycle_stats
from litehit_service.optimizer.analysis.replay import instance_infos, run_analysis
from litehit_service.optimizer.analysis.tree import PathHits, build_trees, tree_json
from litehit_service.optimizer.optimize.config import load_optimize_config
from litehit_service.optimizer.optimize.stream import Fed
from litehit_service.optimizer.optimize.trace import open_trace_batches
from litehit_service.traces.readers import columns as columns_module
from tests.test_export_tree import rec, write_config
from tests.test_policy_replay import random_trace, to_arrays
from tests.test_replay_stream import _instances, _part, _setup


def _random_case(seed: int):
    rng = random.Random(seed)
    policies = [rng.choice(list(POLICIES)) for _ in range(rng.randint(1, 3))]
    groups = [rng.randrange(2) for _ in policies]
    quotas = [rng.choice((-1, 3, 6, 11)) for _ in range(2)]
    members = [tuple(i for i in range(len(policies)) if groups[i] == g) for g in range(2)]
    mode, batch, delay = rng.choice((1, 2, 3)), rng.choice((1, 2, 4)), rng.choice((0, 1, 5))
    records = random_trace(rng, len(policies), rng.randint(1, 200),
                           ("get", "request", "request", "write"), (0, 9, 30))  # fmt: skip
    ttl_values = list(dict.fromkeys(r[5] for r in records if r[5]))
    setup = _setup(_instances(policies, groups, batch, 0.25), quotas, members, mode, batch,
                   delay)._replace(ttl_values=tuple(ttl_values), analyse=True)  # fmt: skip
    return rng, setup, records, to_arrays(records, ttl_values)


def _naive_nodes(arrays) -> tuple[list[int], list[bool]]:
    """Per path (base slot // stride) its compressed node and whether it heads it, read
    off the parent pointers one path at a time (spec section 9)."""
    stride = int(arrays.scalars[STRIDE])
    n = int(arrays.scalars[HIGH]) // stride
    parent = [int(arrays.parent[b * stride]) // stride if arrays.parent[b * stride] >= 0
              else -1 for b in range(n)]  # fmt: skip
    children = [0] * n
    for p in parent:
        if p >= 0:
            children[p] += 1
    head = [p < 0 or children[p] != 1 for p in parent]
    ids = {b: i for i, b in enumerate(b for b in range(n) if head[b])}
    node_of = []
    for b in range(n):
        while not head[b]:
            b = parent[b]
        node_of.append(ids[b])
    return node_of, head


@pytest.mark.parametrize("seed", range(30))
def test_hits_per_node_over_any_split_equal_a_naive_count_per_get(seed: int) -> None:
    """Catches a get counted twice in a node it hits twice (block masks skip uncached
    blocks, so a get's hits need not be consecutive), a get lost at a batch boundary, hits
    read from the wrong batch's keys (a carry of pending writes shifts them), and the
    latest hit's time taken from the wrong record."""
    rng, setup, records, arrays = _random_case(seed)
    whole = Replayer(setup, analyse_keys=0)
    whole.feed(arrays)
    per_key = whole.key_hits.copy()
    final = whole.finish().arrays
    stride = int(final.scalars[STRIDE])
    node_of, head = _naive_nodes(final)
    n_nodes = max(node_of, default=-1) + 1
    expected_access, expected_last = [0] * n_nodes, [-1] * n_nodes
    for r, (_kind, _inst, t, _keys, _mask, _ttl) in enumerate(records):
        lo, hi = int(arrays.key_off[r]), int(arrays.key_off[r + 1])
        for node in {node_of[int(s) // stride] for s in per_key[lo:hi] if s >= 0}:
            expected_access[node] += 1
            expected_last[node] = max(expected_last[node], t)

    streamed = Replayer(setup, analyse_keys=0, check=True)
    hits = PathHits()
    start = 0
    while start < len(records):
        stop = min(len(records), start + rng.choice((0, 1, 2, 7, 30)))
        part = _part(arrays, start, stop)
        rows = streamed.feed(part)
        hits.add(streamed, Fed(None, part, rows, 0, 0))  # type: ignore[arg-type]
        start = stop
    end = streamed.finish().arrays
    high = int(final.scalars[HIGH])
    assert int(end.scalars[HIGH]) == high  # the same slots, the same paths
    assert np.array_equal(end.key[:high], final.key[:high])
    assert np.array_equal(end.parent[:high], final.parent[:high])
    access, last = hits.per_node(np.array(node_of, dtype=np.int64),
                                 np.array(head, dtype=bool), n_nodes)  # fmt: skip
    assert access.tolist() == expected_access
    assert last.tolist() == expected_last


@pytest.mark.parametrize("seed", range(30))
def test_drained_lives_are_the_lives_of_one_replay(seed: int) -> None:
    """Catches a drain that loses a life, keeps an ended one, or leaves a cached block
    pointing at another block's life row (its hits and death then land on the wrong
    row): ``check`` verifies every cached block's life after each chunk."""
    rng, setup, records, arrays = _random_case(seed)
    whole = Replayer(setup, analyse_keys=0)
    whole.feed(arrays)
    expected = whole.finish().arrays.lives
    streamed = Replayer(setup, analyse_keys=0, check=True)
    drained = []
    start = 0
    while start < len(records):
        stop = min(len(records), start + rng.choice((1, 2, 7, 30)))
        streamed.feed(_part(arrays, start, stop))
        if rng.random() < 0.7:  # all that ended, or those before the replay's time
            now = int(streamed.arrays.scalars[NOW])
            drained.append(streamed.drain_lives(rng.choice((None, now))))
        start = stop
    drained.append(streamed.finish().arrays.lives)
    got = np.concatenate(drained)
    assert len(got) == len(expected)
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, expected.tolist()))


def _trace(rng: random.Random, n: int, ttl: bool) -> list[dict]:
    families = [[rng.randrange(1, 40) for _ in range(rng.randint(1, 5))] for _ in range(6)]
    t, out = 1_000, []
    for _ in range(n):
        t += rng.choice((0, 1_000, 50_000, 400_000))
        keys = rng.choice(families) + [rng.randrange(1, 40) for _ in range(rng.randint(0, 4))]
        kind = rng.choice(("request", "request", "get", "write"))
        extra = {}
        if kind != "write" and rng.random() < 0.2:
            extra["block_mask"] = [rng.random() < 0.5 for _ in keys]
        if ttl and kind != "get" and rng.random() < 0.5:
            extra["ttl_us"] = rng.choice((300, 2_000))
        out.append(rec(t, keys, kind, rng.choice("ab"), **extra))
    return out


def _stream(config_path: Path, on_batch):
    config = load_optimize_config(str(config_path))
    routing, batches, _ = open_trace_batches(config, max_line_bytes=1 << 20)
    analysis = run_analysis(config, routing, batches, window_ns=0, on_batch=on_batch)
    return config, analysis


@pytest.mark.parametrize("seed", range(6))
def test_lifecycle_rows_from_tiny_chunks_are_every_life_in_the_order_they_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The CSVs written while the trace streams in ~400-byte chunks, lives drained at
    every batch, against every life of one unstreamed replay formatted here line by line
    (ended lives by death time, ties by birth order; then the alive by birth). Catches
    a life written twice or never, rows out of that order, a revival counted as a new
    path, and statistics that differ from the whole replay's."""
    rng = random.Random(seed)
    policy = rng.choice(("lru", "random_lru", "leaf_aware_lru", "ttl"))
    extra = {"default_block_ttl_seconds": 0.001} if policy == "ttl" else {}
    path = write_config(tmp_path, _trace(rng, 400, policy == "ttl"), policy=policy,
                        blocks=rng.choice((4, 9, 30)), instances=("a", "b"),
                        group_extra=extra)  # fmt: skip
    config = load_optimize_config(str(path))
    infos = instance_infos(config)

    _, whole = _stream(path, None)  # one chunk, nothing drained: every life at the end
    lives = whole.result.arrays.lives
    keys = whole.result.arrays.key
    f = {name: i for i, name in enumerate(LIFE_FIELDS)}
    users = len(infos)
    ended = [r for r in lives.tolist() if r[f["cause"]] != 0]
    alive = [r for r in lives.tolist() if r[f["cause"]] == 0]
    ended.sort(key=lambda r: r[f["death"]])  # stable: ties stay in birth order
    expected = {info.instance_id: [HEADER] for info in infos}
    for r in ended + alive:
        dead = r[f["cause"]] != 0
        end = r[f["death"]] if dead else whole.end_ns
        last = r[f["last_hit"]]
        expected[infos[r[f["inst"]] % users].instance_id].append(
            f"{int(keys[r[f['node']]])},{r[f['birth']] // 1000},"
            f"{r[f['death']] // 1000 if dead else ''},{(end - r[f['birth']]) // 1000},"
            f"{r[f['hits']]},{last // 1000 if last >= 0 else ''},{'false' if dead else 'true'}"
        )
    whole_files = [io.StringIO() for _ in infos]
    whole_writer = LifecycleWriter(infos, whole_files)
    whole_stats = [lifecycle_stats(s) for s in whole_writer.finish(whole)]

    monkeypatch.setattr(columns_module, "CHUNK_BYTES", 400)
    monkeypatch.setattr(lifecycle_module, "DRAIN_LIVES", 1)
    files = [io.StringIO() for _ in infos]
    writer = LifecycleWriter(infos, files)
    batches = []

    def on_batch(replayer, fed):
        batches.append(len(fed.batch.kinds))
        writer.on_batch(replayer, fed)

    _, streamed = _stream(path, on_batch)
    assert len(batches) > 20  # the trace did stream in many batches
    stats = [lifecycle_stats(s) for s in writer.finish(streamed)]
    for info, fh in zip(infos, files, strict=True):
        assert fh.getvalue().splitlines() == expected[info.instance_id]
    assert [fh.getvalue() for fh in whole_files] == [fh.getvalue() for fh in files]
    assert stats == whole_stats
    for s in stats:
        rows = expected[s["instance_id"]][1:]
        assert s["paths"] + s["revivals"] == s["lives"] == len(rows)
        assert s["alive"] == sum(row.endswith("true") for row in rows)


@pytest.mark.parametrize("seed", range(4))
def test_trees_from_tiny_chunks_equal_the_trees_from_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The tree files of a trace read in ~400-byte chunks equal those of one chunk (masks
    and two instances included). Catches hits counted per batch instead of per get, or
    nodes whose gets straddle a batch boundary counted twice."""
    rng = random.Random(100 + seed)
    path = write_config(tmp_path, _trace(rng, 300, False), policy="lru",
                        blocks=rng.choice((5, 20)), instances=("a", "b"))  # fmt: skip

    def trees() -> list[str]:
        hits = PathHits()
        _, analysis = _stream(path, hits.add)
        return [tree_json(t, end_ns=analysis.end_ns) for t in build_trees(analysis, hits)]

    whole = trees()
    monkeypatch.setattr(columns_module, "CHUNK_BYTES", 400)
    assert trees() == whole
    gets = [n["access_count"] for text in whole for tree in json.loads(text).values()
            for n in tree["nodes"]]  # fmt: skip
    assert sum(gets) > 10  # the reads did hit


def test_an_analysis_holds_nothing_per_record(tmp_path: Path) -> None:
    """Catches an analysis that keeps the decoded trace or a per-key array: after a
    replay of 20,000 reads of one path, what it holds is the path's few nodes."""
    records = [rec(1_000 * (t + 1), [1, 2, 3], "request") for t in range(20_000)]
    path = write_config(tmp_path, records)
    hits = PathHits()
    _, analysis = _stream(path, hits.add)
    assert analysis.records == 20_000 and analysis.nodes == 3
    assert len(hits.hits) < 64 and not hits.pairs
    assert analysis.result.arrays.key_node.nbytes < 1 << 20  # one batch's keys at most


def test_a_get_that_skips_an_evicted_block_counts_once_in_its_node(tmp_path: Path) -> None:
    """Quota 3 blocks, lru: [1,2,3] is written, a get of [1] makes [1] the most recent,
    writing [5] evicts [2]; a get of [1,2,3] whose mask marks every block local skips the
    missing [2] (spec section 3) and hits [1] and [3], both in the one node [1,2,3]. Catches
    a node counted once per hit block instead of once per get (exported: 2 gets, not 3)."""
    records = [
        rec(1_000, [1, 2, 3]),
        rec(2_000, [1], "get"),
        rec(3_000, [5]),
        rec(4_000, [1, 2, 3], "get", block_mask=[True, True, True]),
    ]
    path = write_config(tmp_path, records, blocks=3)
    hits = PathHits()
    _, analysis = _stream(path, hits.add)
    (tree,) = build_trees(analysis, hits)
    assert len(hits.pairs) == 1  # [1] -> [3], past the evicted [2]
    assert tree.first_key.tolist() == [1, 5]
    assert tree.total_blocks.tolist() == [3, 1]
    assert tree.access_count.tolist() == [2, 0]
    assert tree.last_access.tolist() == [4_000, -1]
