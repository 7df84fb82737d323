"""The interpreter staircase engine (tail-first, no numba) against a naive LRU per capacity
and against the compiled BlockLRU; ramps to staircases by hand; which engine the registry
picks; ``litehit sweep --engine`` end to end."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from fresh import run_python
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle import oracle_hits, tree_trace

from litehit_core.block_lru import BlockLRU
from litehit_core.engine import AUTO_STAIRCASE_KEYS, staircase_batch_engine
from litehit_core.errors import InvalidRequestError
from litehit_core.prefix_hash import keys_name_their_prefix
from litehit_core.staircases import (
    BatchResult,
    HeadFirstStaircases,
    LiteHitStaircases,
    ramps_to_staircases,
)
from litehit_service.cli import main
from litehit_service.lmcache.simulator.simulate import load_workload, replay_workload, report

FIXTURE = Path(__file__).with_name("data") / "lookup_hashes_small.jsonl"
KV = 2 * 16 * 8  # the fixture's bytes per chunk (see test_simulate)


def flat(trace: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Keys (distinct within each request, head first) and offsets of a trace."""
    lists = [list(dict.fromkeys(keys)) for keys in trace]
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(k) for k in lists], out=offsets[1:])
    return np.array([k for keys in lists for k in keys], np.int64), offsets


def staircase(batch: BatchResult, r: int) -> list[tuple[int, int]]:
    a, c = int(batch.offsets[r]), int(batch.counts[r])
    return list(zip(batch.thr[a : a + c].tolist(), batch.hits[a : a + c].tolist(), strict=True))


def hits_at(steps: list[tuple[int, int]], capacity: int | None) -> int:
    """The hits of a staircase at ``capacity`` (None: infinite), read the naive way."""
    return max([h for t, h in steps if capacity is None or t <= capacity], default=0)


ORDERS = ("tail-first", "head-first")
ENGINES = {"tail-first": LiteHitStaircases, "head-first": HeadFirstStaircases}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("seed", range(4))
def test_every_capacity_equals_a_naive_lru(order: str, seed: int) -> None:
    rng = random.Random(seed)
    trace = tree_trace(rng, 300, max_new=7)
    keys, offsets = flat(trace)
    engine = ENGINES[order]()
    batch = engine.process_batch(keys, offsets)
    caps = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, None]
    naive = oracle_hits(trace, caps, order=order)
    for r, want in enumerate(naive):
        assert [hits_at(staircase(batch, r), c) for c in caps] == want, r
    assert sum(row[0] for row in naive) < sum(row[-1] for row in naive)  # capacities differ
    assert batch.depths is None and batch.touches is None
    assert engine.current_unique_blocks() == len({k for keys in trace for k in keys})


def _same_as_block_lru(trace: list[list[int]], order: str) -> bool:
    """Whether the trace was compared (keys naming their prefix: the interpreter engines'
    exactness contract; the registry never picks them otherwise); asserts the engines
    agree."""
    keys, offsets = flat(trace)
    if not keys_name_their_prefix(keys, offsets):
        return False
    ours = ENGINES[order](depths=True)
    theirs = BlockLRU(order)
    got, want = ours.process_batch(keys, offsets), theirs.process_batch(keys, offsets)
    assert np.array_equal(got.counts, want.counts)
    assert np.array_equal(got.depths, want.depths)  # snapshot depths of the cached prefix
    assert np.array_equal(got.touches, want.touches)  # each touch's depth, in touch order
    for r in range(len(trace)):
        assert staircase(got, r) == staircase(want, r), r
    assert ours.current_unique_blocks() == theirs.current_unique_blocks()
    return True


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("seed", range(3))
def test_corners_equal_the_compiled_engine_on_long_shared_prefixes(order: str, seed: int) -> None:
    rng = random.Random(100 + seed)
    assert _same_as_block_lru(tree_trace(rng, 2000, max_new=12, min_new=1), order)


@pytest.mark.parametrize("order", ORDERS)
def test_seeded_stress_over_a_million_blocks_equals_the_compiled_engine(order: str) -> None:
    """70,000 prefix-chained requests, ~2.1 M keys over ~1.1 M distinct blocks: corners,
    depths, touches and the tracked count equal the compiled engine's, array for array."""
    trace = tree_trace(random.Random(11), 70_000, max_new=30, min_new=1)
    assert len({k for keys in trace for k in keys}) > 1_000_000
    assert _same_as_block_lru(trace, order)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_property_prefix_chained_traces_equal_the_compiled_engine(data: st.DataObject) -> None:
    seed = data.draw(st.integers(0, 2**32 - 1))
    n = data.draw(st.integers(0, 60))
    fresh = data.draw(st.integers(1, 6))
    order = data.draw(st.sampled_from(ORDERS))
    assert _same_as_block_lru(tree_trace(random.Random(seed), n, max_new=fresh), order)


def test_a_head_first_engine_replays_one_batch() -> None:
    engine = HeadFirstStaircases()
    keys, offsets = flat([[1, 2], [1, 3]])
    first = engine.process_batch(keys, offsets)
    assert staircase(first, 1) == [(2, 1)]  # 1 is under 2 (touched after it): depth 2
    with pytest.raises(ValueError, match="replays one batch"):
        engine.process_batch(keys, offsets)


def test_ramps_to_staircases_by_hand() -> None:
    # request 0: ramps (1, 2), (2, 1) -> block thresholds 1, 2, 2 -> corners (1, 1), (2, 3)
    # request 1: no ramps (2 keys); request 2: ramps (5, 1), (3, 2) -> thresholds 5, 3, 4,
    # counted in order: (3, 1), (4, 2), (5, 3)
    thr, hits, counts = ramps_to_staircases(
        np.array([1, 2, 5, 3], np.int64),
        np.array([2, 1, 1, 2], np.int64),
        np.array([2, 0, 2], np.int64),
        np.array([0, 3, 5, 9], np.int64),
    )
    assert thr.tolist() == [1, 2, 0, 0, 0, 3, 4, 5, 0]
    assert hits.tolist() == [1, 3, 0, 0, 0, 1, 2, 3, 0]
    assert counts.tolist() == [2, 0, 3]
    thr, hits, counts = ramps_to_staircases(
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(2, np.int64),
        np.array([0, 1, 1], np.int64),
    )  # fmt: skip
    assert (thr.tolist(), hits.tolist(), counts.tolist()) == ([0], [0], [0, 0])


def test_the_registry_picks_the_interpreter_only_where_it_answers() -> None:
    chained = flat(tree_trace(random.Random(5), 50))
    reordered = flat([[1, 2], [2, 1]])  # key 1 starts a request, then follows 2

    def picked(order: str, workload=chained, **kw: object) -> str:
        keys, offsets = workload
        engine = staircase_batch_engine(order, keys=keys, offsets=offsets, **kw)[0]
        return type(engine).__name__

    assert picked("tail-first", depths=False) == "LiteHitStaircases"
    assert picked("tail-first", reordered, depths=False) == "BlockLRU"  # not exact there
    assert picked("tail-first") == "LiteHitStaircases"  # depths derived
    assert picked("head-first", depths=False) == "HeadFirstStaircases"
    assert picked("head-first") == "HeadFirstStaircases"
    assert picked("head-first", reordered) == "BlockLRU"
    assert picked("tail-first", depths=False, engine="compact") == "BlockLRU"
    assert picked("tail-first", depths=False, engine="python") == "LiteHitStaircases"
    assert type(staircase_batch_engine("tail-first", depths=False)[0]).__name__ == "BlockLRU"
    n = AUTO_STAIRCASE_KEYS
    below = np.arange(n - 1, dtype=np.int64), np.array([0, n - 1], np.int64)
    assert picked("tail-first", below, depths=False) == "LiteHitStaircases"
    big = np.arange(n, dtype=np.int64), np.array([0, n], np.int64)
    assert picked("tail-first", big, depths=False) == "BlockLRU"
    with pytest.raises(InvalidRequestError, match="exact only when every key always follows"):
        staircase_batch_engine(
            "tail-first", keys=reordered[0], offsets=reordered[1], depths=False, engine="python"
        )
    with pytest.raises(InvalidRequestError, match=r"engine must be one of \['auto', 'python', "):
        staircase_batch_engine("tail-first", engine="numba")
    with pytest.raises(InvalidRequestError, match="touch_order must be one of"):
        staircase_batch_engine("sideways")


def test_keys_name_their_prefix() -> None:
    assert keys_name_their_prefix(*flat([[1, 2, 3], [1, 2, 4], [1, 5], []]))
    assert not keys_name_their_prefix(*flat([[1, 2], [2, 1]]))  # 1 starts a read, then not
    assert not keys_name_their_prefix(*flat([[1, 2], [3, 2]]))  # 2 follows 1, then 3
    assert not keys_name_their_prefix(*flat([[1, 2], [2]]))  # 2 follows 1, then starts
    assert keys_name_their_prefix(*flat([[7]]))


def test_report_refuses_a_replay_without_depths() -> None:
    replay = replay_workload(load_workload([FIXTURE]), "tail-first", depths=False)
    with pytest.raises(ValueError, match=r"report\(\) needs a replay with per-block depths"):
        report(replay, 2**30)


@pytest.mark.parametrize("order", ORDERS)
def test_sweep_engines_print_the_same_sweep(order: str, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = {}
    for engine in ("auto", "python", "compact"):
        argv = ["sweep", "-i", str(FIXTURE), "--json", "--no-plot", "--engine", engine,
                "--min-capacity-gib", repr(2 * KV / 2**30), "--max-capacity-gib",
                repr(300 * KV / 2**30), "--points", "9", "--touch-order", order]  # fmt: skip
        assert main(argv) == 0
        data = json.loads(capsys.readouterr().out)
        outputs[engine] = data
    assert outputs["auto"] == outputs["python"] == outputs["compact"]
    assert len({p["hit_rate"] for p in outputs["auto"]["points"]}) > 3  # the curve rises


def test_the_python_engine_refuses_keys_that_do_not_name_their_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = {"timestamp": 1.0, "request_id": "r", "model_name": "m", "chunk_size": 4,
            "seq_len": 8, "dtypes": ["bfloat16"], "shapes": [[1, 4, 8]]}  # fmt: skip
    rows = [{**line, "chunk_hashes": h} for h in (["0x1", "0x2"], ["0x2", "0x1"])]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    argv = ["sweep", "-i", str(log), "--json", "--no-plot"]
    assert main([*argv, "--engine", "auto"]) == 0  # auto takes the compiled engine
    capsys.readouterr()
    assert main([*argv, "--engine", "python"]) == 2
    assert capsys.readouterr().err.strip() == (
        "litehit sweep: error: engine 'python' is exact only when every key always follows "
        "the same parent (prefix-chained keys); these keys do not: use 'compact'"
    )


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "words", [["sweep"], ["simulate", "--capacity-gib", "0.001"]], ids=["sweep", "simulate"]
)
def test_small_commands_import_no_numba_and_no_matplotlib(
    tmp_path: Path, words: list[str], order: str
) -> None:
    """The point of the interpreter engines: ``litehit sweep`` and report-only ``litehit
    simulate`` on a small log start no numba (its import and kernel load cost more than
    half of such a command), nor matplotlib without a figure."""
    argv = [*words, "-i", str(FIXTURE), "--json", "--no-plot", "--touch-order", order]
    code = (
        "import sys\n"
        "from litehit_service.cli import main\n"
        f"assert main({argv!r}) == 0\n"
        "print([m for m in ('numba', 'matplotlib', 'grpc') if m in sys.modules], "
        "file=sys.stderr)\n"
    )
    proc = run_python(tmp_path, code=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == "[]"
    assert json.loads(proc.stdout)["input"]["touch_order"] == order


@pytest.mark.parametrize("order", ORDERS)
def test_simulate_engines_print_the_same_report(
    order: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole report (Stats 1-7: positions at hit and evictions read the per-block
    depths) is the same from the interpreter engine as from the compiled one."""
    reports = {}
    for engine in ("auto", "python", "compact"):
        for gib in ("-1", repr(40 * KV / 2**30), repr(3 * KV / 2**30)):
            argv = ["simulate", "-i", str(FIXTURE), "--json", "--no-plot", "--engine", engine,
                    "--capacity-gib", gib, "--touch-order", order]  # fmt: skip
            assert main(argv) == 0
            reports[engine, gib] = json.loads(capsys.readouterr().out)
    for (engine, gib), data in reports.items():
        assert data == reports["compact", gib], (engine, gib)
    small = reports["compact", repr(3 * KV / 2**30)]
    assert small["aggregate"]["evictions"] > 0  # the touch depths at work
    assert small["cache_position"]["max"] == 2  # positions at hit < 3 chunks: the depths
