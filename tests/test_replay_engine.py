"""`litehit replay --engine`: the compact engine writes the python engine's ledger byte for
byte (every routing, TTL, prefix hash, limits), "auto" picks by trace size, and a manager
of either engine restores the other's snapshots."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import RAY_MISSING, require
from test_manager import make_reg, new_manager
from test_ray_executor import HAVE_RAY, random_trace
from test_replay import FAIL_CASES, assert_nothing_published, cli, ev, group, instance, setup

from litehit_core.compact_lite_hit import CompactLiteHit
from litehit_core.engine import AUTO_COMPACT_BYTES
from litehit_core.lite_hit import LiteHit
from litehit_service.litehit.config import load_config
from litehit_service.litehit.replay import lru_engine_for, run_replay
from litehit_service.manager import OnlineOptimizerManager


def engines_ledgers(config: Path, **kw) -> dict[str, tuple[str, object]]:
    loaded = load_config(config)
    out = {}
    for engine in ("python", "compact"):
        summary = run_replay(loaded, engine=engine, **kw)
        out[engine] = (Path(summary.facts_path).read_text(), summary)
    return out


@pytest.mark.parametrize("routing", [{}, {"fanout_all_instances": True}])
def test_compact_ledger_is_byte_identical(tmp_path: Path, routing) -> None:
    rng = random.Random(21)
    ids = ["a", "b", "c"]
    groups = [group("g"), group("h", ttl_seconds=2), group("p", enable_prefix_hash=True)]
    insts = [instance("a", "g"), instance("b", "h"), instance("c", "p")]
    config = setup(tmp_path, random_trace(rng, 1500, ids), groups, insts, **routing)
    out = engines_ledgers(config)
    (python_text, python), (compact_text, compact) = out["python"], out["compact"]
    assert compact_text == python_text and python_text.count("\n") > 1500
    assert without_memory(compact) == without_memory(python)
    assert compact.instance_lines() == python.instance_lines()


def without_memory(summary) -> list:
    """The instance summaries with the engines' own memory estimate (which differs by
    design: ~25 vs ~95 bytes a block) zeroed."""
    return [
        replace(s, debug_info=replace(s.debug_info, memory_usage_bytes=0))
        for s in summary.instance_summaries
    ]


def test_ray_lanes_use_the_chosen_engine(tmp_path: Path) -> None:
    require(HAVE_RAY, RAY_MISSING)
    from litehit_service.litehit.lanes import LaneSpec, replay_lane

    loaded = load_config(
        setup(tmp_path, random_trace(random.Random(3), 50, ["a"]), [group("g")], [instance("a")])
    )
    reg = loaded.instances[0]
    spec = LaneSpec(loaded.block_size, loaded.instance_groups[0], reg, ("a", 4, 1024, None))
    requests = [(0, 1, "t", 1, [1, 2, 3], 12), (1, 2, "t", 2, [1, 2, 9], 12)]
    python = replay_lane(spec, requests)
    compact = replay_lane(spec._replace(lru_engine="compact"), requests)
    assert compact.rows == python.rows and compact.rows[1][1].count(",") > 3


def test_auto_picks_compact_for_big_traces_only(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    small.write_text("{}\n")
    big = tmp_path / "big.jsonl"
    with big.open("wb") as fh:  # sparse: no disk used
        fh.truncate(AUTO_COMPACT_BYTES)
    assert os.path.getsize(big) == AUTO_COMPACT_BYTES
    assert lru_engine_for("auto", str(small)) == "python"
    assert lru_engine_for("auto", str(big)) == "compact"
    assert lru_engine_for("auto", str(tmp_path / "missing")) == "python"
    assert lru_engine_for("python", str(big)) == "python"
    assert lru_engine_for("compact", str(small)) == "compact"
    with pytest.raises(ValueError, match=r"engine must be one of \['auto', 'python', 'compact'\]"):
        lru_engine_for("fast", str(small))
    # a gzip'd trace counts by the JSONL it holds (EXPANSION x its size), not its size
    from litehit_service.traces.readers.compressed import EXPANSION

    packed = tmp_path / "packed.jsonl.gz"
    with packed.open("wb") as fh:
        fh.write(b"\x1f\x8b")
        fh.truncate(AUTO_COMPACT_BYTES // EXPANSION + 1)
    assert lru_engine_for("auto", str(packed)) == "compact"
    with packed.open("r+b") as fh:
        fh.truncate(AUTO_COMPACT_BYTES // EXPANSION - 1)
    assert lru_engine_for("auto", str(packed)) == "python"


def test_cli_engine_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = setup(tmp_path, random_trace(random.Random(5), 80, ["i"]), [group()], [instance()])
    outputs = {}
    for engine in ("python", "compact", "auto"):
        code, out = cli(capsys, str(config), "--engine", engine)
        assert code == 0
        outputs[engine] = (Path(tmp_path / "out" / "litehit_facts.csv").read_text(), out)
    assert outputs["python"][0] == outputs["compact"][0] == outputs["auto"][0]
    with pytest.raises(SystemExit) as exc:
        cli(capsys, str(config), "--engine", "fast")
    assert exc.value.code == 2
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_manager_engine_choice_and_snapshots_across_engines() -> None:
    with pytest.raises(ValueError, match=r"lru_engine must be one of \['python', 'compact'\]"):
        OnlineOptimizerManager(lru_engine="fast")
    for engine, cls in (("python", LiteHit), ("compact", CompactLiteHit)):
        manager = new_manager(lru_engine=engine)
        manager.register_instance(make_reg("i"))
        assert manager.lru_engine == engine
        assert type(manager._instances["i"].engine) is cls


@pytest.mark.parametrize("case", sorted(FAIL_CASES))
def test_compact_engine_fails_like_the_one_by_one_loop(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The compact engine's batched replay reports the same first bad line and reason."""
    lines, line_no, reason = FAIL_CASES[case]
    cfg = setup(tmp_path, lines)
    rc, err = cli(capsys, str(cfg), "--engine", "compact")
    assert rc == 2
    assert err == f"{tmp_path / 'trace.jsonl'}:{line_no}: {reason}\n"
    assert_nothing_published(tmp_path)


@pytest.mark.parametrize("first_bad", ["a", "b"])
@pytest.mark.parametrize("routing", [{}, {"fanout_all_instances": True}])
def test_the_earliest_bad_line_of_any_instance_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first_bad: str, routing
) -> None:
    """Two instances, each with a bad request, in one parse batch: both engines stop at the
    earlier of the two lines with its own reason."""
    rng = random.Random(2)
    lines = random_trace(rng, 300, ["a", "b"])
    other = "b" if first_bad == "a" else "a"
    lines[120] = ev(first_bad, 5, [1, 2], 8)  # backwards in time for that instance
    lines[200] = ev(other, 10**18, [1, 2, 3], 5)  # 3 keys but 5 tokens: 1 block
    cfg = setup(tmp_path, lines, [group("g")], [instance("a"), instance("b")], **routing)
    errors = []
    for engine in ("python", "compact"):
        rc, err = cli(capsys, str(cfg), "--engine", engine)
        assert rc == 2
        errors.append(err)
    assert errors[0] == errors[1]
    assert errors[0].startswith(f"{tmp_path / 'trace.jsonl'}:121: ")
    assert "goes backwards" in errors[0]
    assert_nothing_published(tmp_path)


def test_record_batch_equals_record_query_and_names_the_failing_request() -> None:
    from litehit_service.manager import BatchQueryError

    rng = random.Random(4)
    for engine in ("python", "compact"):
        batch, single = new_manager(lru_engine=engine), new_manager(lru_engine="python")
        for m in (batch, single):
            m.register_instance(make_reg("i"))
        requests = []
        t = 0
        for _ in range(500):
            keys = [rng.randrange(30) for _ in range(rng.randrange(6))]
            t += rng.randrange(3)
            requests.append((keys, 4 * len(keys) + rng.randrange(4), t))
        facts, tokens = batch.record_batch("i", requests)
        expected = [single.record_query("i", k, n, ts) for k, n, ts in requests]
        assert facts == [f for f, _ in expected] and tokens == [n for _, n in expected]
        assert batch.list_instances()[0].total_queries == 500
        before = batch.list_instances()[0]
        bad = [([1, 2], 8, t + 1), ([1, 2, 3], 5, t + 2)]
        with pytest.raises(BatchQueryError) as caught:
            batch.record_batch("i", bad)
        assert caught.value.index == 1
        assert "len(block_keys) is 3 but input_token_len 5" in str(caught.value.error)
        assert batch.list_instances()[0] == before  # nothing of the batch was applied


@pytest.mark.parametrize("bad_at", [None, 0, 13, 29])
def test_compact_lanes_give_the_python_lanes_rows_and_error(
    tmp_path: Path, monkeypatch, bad_at
) -> None:
    """A Ray lane's work (replay_lane, plain Python) on the compact engine, in chunks of 7
    compiled replays: the same rows, first error and summary as the one-by-one lane."""
    from litehit_service.litehit import lanes

    monkeypatch.setattr(lanes, "LANE_CHUNK", 7)
    loaded = load_config(
        setup(tmp_path, random_trace(random.Random(3), 5, ["a"]), [group("g")], [instance("a")])
    )
    spec = lanes.LaneSpec(loaded.block_size, loaded.instance_groups[0], loaded.instances[0],
                          ("a", 4, 1024, None))  # fmt: skip
    rng = random.Random(8)
    requests = []
    for i in range(40):
        keys = [rng.randrange(12) for _ in range(rng.randrange(1, 5))]
        keys = list(dict.fromkeys(keys))
        tokens = 4 * len(keys) + (5 if i == bad_at else 1)  # 5 extra tokens: a bad count
        requests.append((i, i + 1, f"t{i}", 100 + i, keys, tokens))
    python = lanes.replay_lane(spec, requests)
    compact = lanes.replay_lane(spec._replace(lru_engine="compact"), requests)
    assert compact.rows == python.rows and compact.error == python.error
    assert len(python.rows) == (40 if bad_at is None else bad_at)
    assert (python.error is None) == (bad_at is None)
    strip = [replace(s, debug_info=replace(s.debug_info, memory_usage_bytes=0))
             for s in (python.summary, compact.summary)]  # fmt: skip
    assert strip[0] == strip[1]
