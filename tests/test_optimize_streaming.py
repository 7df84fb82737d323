"""``litehit optimize`` streamed (:mod:`litehit_service.optimizer.optimize.stream`): the
files of a run read in many small batches equal, byte for byte, those of the whole-trace
replay (every record kind, delays, TTLs, tiers, shared groups, pictures); a trace out of
time order within the reorder window replays as sorted, beyond it is refused naming the
record; a bad record late in the trace leaves nothing; and the peak RSS of a run does not
follow the trace (a subprocess, measured with ``wait4``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from litehit_service.cli import main
from litehit_service.optimizer.optimize.config import load_optimize_config
from litehit_service.optimizer.optimize.outputs import write_outputs
from litehit_service.optimizer.optimize.run import run_optimize
from litehit_service.optimizer.optimize.trace import load_trace
from tests.test_lmcache_reader import load_bench_trace
from tests.test_optimize_parallel import files, group, inst, mixed_case, write_config

_COLUMNS = "litehit_service.traces.readers.columns"


def _whole(
    config_path: Path, out: Path, draw_chart: bool = False, aggregate_window_ns: int | None = None
) -> dict[str, bytes]:
    """The files of the whole-trace path (load, sort stably, one replay, write)."""
    config = load_optimize_config(config_path)
    result = run_optimize(config, load_trace(config, max_line_bytes=1 << 20))
    write_outputs(result, str(out), draw_chart=draw_chart, aggregate_window_ns=aggregate_window_ns)
    return files(out)


@pytest.mark.parametrize(("seed", "mode", "chunk"), [(1, 3, 700), (2, 1, 3000), (3, 2, 40)])
def test_small_batches_give_the_whole_replays_files(tmp_path, monkeypatch, seed, mode,
                                                    chunk) -> None:  # fmt: skip
    """Catches a batch boundary that loses or repeats a pending write or a row, Acc*
    columns restarting per batch, a TTL bucket renumbered when a new TTL appears, and
    pictures drawn from one batch only: chunks of ``chunk`` bytes of JSON (one line each
    at 40) against the whole-trace path, chart and aggregate included."""
    path = mixed_case(tmp_path, seed, mode)
    want = _whole(path, tmp_path / "whole", draw_chart=True, aggregate_window_ns=1000)
    monkeypatch.setattr(f"{_COLUMNS}.CHUNK_BYTES", chunk)
    code = main(["optimize", str(path), "--max-workers", "1", "-o", str(tmp_path / "s"),
                 "--draw-chart", "--aggregate-window-s", "1e-6"])  # fmt: skip
    assert code == 0
    got = files(tmp_path / "s")
    csvs = [n for n in want if n.endswith(".csv")]
    assert len(csvs) == 7  # six instances and the aggregate
    assert {n: got[n] for n in csvs} == {n: want[n] for n in csvs}
    copies = {"global_duplicate_blocks.csv", "global_duplicate_blocks.png"}  # the CLI's own
    assert copies <= set(got)  # several instances: the fleet's duplicates (test_global_copies)
    assert sorted(set(got) - copies) == sorted(want)  # the charts too (not compared bytewise)


def _shuffled_within(records: list[dict], window_ns: int, seed: int) -> list[dict]:
    """``records`` moved out of order, each by less than ``window_ns`` of trace time."""
    import random

    rng = random.Random(seed)
    keyed = [(r["timestamp_ns"] + rng.randrange(window_ns), i, r) for i, r in enumerate(records)]
    return [r for _, _, r in sorted(keyed)]


def test_a_trace_out_of_order_within_the_window_replays_as_sorted(tmp_path, monkeypatch):
    """Catches a stream that replays records in file order (or sorts only within a
    batch): the shuffled trace's files equal those of the whole trace sorted stably (spec
    §2), batches of ~10 lines."""
    sorted_path = mixed_case(tmp_path, 7, 3)
    trace = tmp_path / "trace.jsonl"
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    trace.write_text("".join(json.dumps(r) + "\n" for r in _shuffled_within(records, 300, 1)))
    assert [json.loads(x) for x in trace.read_text().splitlines()] != records  # shuffled
    want = _whole(sorted_path, tmp_path / "sorted")
    monkeypatch.setattr(f"{_COLUMNS}.CHUNK_BYTES", 1000)
    assert main(["optimize", str(sorted_path), "--max-workers", "1", "--reorder-window-ms",
                 "1", "-o", str(tmp_path / "s")]) == 0  # fmt: skip
    assert files(tmp_path / "s") == want


def test_a_record_beyond_the_window_is_refused_and_nothing_is_written(tmp_path, monkeypatch,
                                                                       capsys) -> None:  # fmt: skip
    """Catches a late record replayed out of order silently, or files left behind: the
    record 5 ms early under a 1 ms window is named with its line and both ways out."""
    records = [{"type": "request", "instance_id": "a", "timestamp_ns": 1_000_000 * (i + 10),
                "keys": [i % 3, i], "input_len": 40} for i in range(400)]  # fmt: skip
    records[300]["timestamp_ns"] = records[299]["timestamp_ns"] - 5_000_000
    path = write_config(tmp_path, [group("g", 4, inst("a", "lru"))], records)
    monkeypatch.setattr(f"{_COLUMNS}.CHUNK_BYTES", 2000)
    assert main(["optimize", str(path), "--max-workers", "1", "--reorder-window-ms", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{tmp_path / 'trace.jsonl'}:301: timestamp_ns: timestamp_ns "
                          "304000000 is more than the reorder window (1 ms) before an earlier "
                          "line's 309000000: the trace is out of time order"), err  # fmt: skip
    assert "widen --reorder-window-ms, or sort the trace by timestamp_ns first" in err
    assert not (tmp_path / "out").exists()
    # the default window (1 s) takes it, as sorting the whole trace would
    assert main(["optimize", str(path), "--max-workers", "1"]) == 0
    assert (tmp_path / "out" / "a_hit_rates.csv").exists()


def test_a_bad_record_late_in_the_trace_leaves_no_file(tmp_path, monkeypatch, capsys) -> None:
    """Catches CSVs published (or temporaries left) when the error comes after batches were
    replayed and written: the existing output folder keeps its old file, no new ones."""
    records = [{"type": "request", "instance_id": "a", "timestamp_ns": 10 + i,
                "keys": [i % 3, i], "input_len": 40} for i in range(300)]  # fmt: skip
    records[280]["input_len"] = 5
    path = write_config(tmp_path, [group("g", 4, inst("a", "lru"))], records)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("old")
    monkeypatch.setattr(f"{_COLUMNS}.CHUNK_BYTES", 1500)
    assert main(["optimize", str(path), "--max-workers", "1"]) == 2
    assert capsys.readouterr().err.startswith(f"{tmp_path / 'trace.jsonl'}:281: keys: 2 keys")
    assert sorted(os.listdir(tmp_path / "out")) == ["keep.txt"]


def _fresh_key_trace(path: Path, requests: int, keys_per: int) -> None:
    """``requests`` requests of ``keys_per`` fresh keys each (nothing ever hits twice)."""
    import numpy as np

    base = np.arange(requests * keys_per, dtype=np.int64).reshape(requests, keys_per)
    with open(path, "w") as fh:
        for i in range(0, requests, 10_000):
            rows = base[i : i + 10_000] + (1 << 40)
            fh.write("".join(
                f'{{"type":"request","instance_id":"a","timestamp_ns":{1000 + i + j},'
                f'"keys":[{",".join(map(str, row))}],"input_len":{16 * keys_per}}}\n'
                for j, row in enumerate(rows.tolist())
            ))  # fmt: skip


def _peak_mib(tmp: Path, requests: int) -> float:
    trace = tmp / f"t{requests}.jsonl"
    _fresh_key_trace(trace, requests, 40)
    config = write_config(tmp, [group("g", 2000, inst("a", "lru"))], [])
    data = json.loads(config.read_text())
    data["trace_file_path"] = str(trace)
    config.write_text(json.dumps(data))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = ["optimize", str(config), "-o", str(tmp / f"o{requests}"), "--max-workers", "1"]
    _, peak, done = load_bench_trace().peak_run(argv, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return peak / 2**20


def test_peak_memory_follows_the_cache_not_the_trace(tmp_path) -> None:
    """Catches a command that holds the trace (its keys alone: 8 bytes each, plus ~50 per
    record and the rows): 120,000 then 360,000 requests of 40 fresh keys (4.8 M then
    14.4 M keys; ~160 MB of JSON) at a 2,000-block quota. Holding the trace would add
    ~350 MiB; streaming, the larger run's peak may exceed the smaller's by at most 16 MiB
    (measured: within 3 MiB once the allocator has warmed up, ~100 k requests)."""
    small = _peak_mib(tmp_path, 120_000)
    large = _peak_mib(tmp_path, 360_000)
    assert large - small < 16, (small, large)


def test_the_window_holds_a_bounded_number_of_keys() -> None:
    """Catches a reorder window that holds a dense trace whole (a second of a synthetic
    trace with nanosecond steps is all of it): with room for 50 keys and records, at most
    that stays held, and a record out of order past the narrowed window is refused with a
    message saying the window was narrowed."""
    import numpy as np

    from litehit_service.optimizer.optimize.columns import Batch
    from litehit_service.optimizer.optimize.stream import Reorder

    def batch(times: list[int], first_line: int) -> Batch:
        n = len(times)
        return Batch(np.full(n, 2, np.int8), np.zeros(n, np.int32), np.array(times, np.int64),
                     np.full(n, 4, np.int64), np.full(n, 64, np.int64),
                     np.arange(4 * n, dtype=np.int64), np.zeros(4 * n, np.uint8),
                     np.full(n, -1, np.int32),
                     np.arange(first_line, first_line + n, dtype=np.int64))  # fmt: skip

    reorder = Reorder(window_ns=10**9, path="t.jsonl", held_keys=50)
    released = []
    for k in range(10):
        out = reorder.push(batch(list(range(100 * k, 100 * k + 100, 5)), 20 * k + 1))
        released += out.times.tolist()
        assert (
            reorder.held is not None and int(reorder.held.lens.sum() + len(reorder.held.lens)) <= 50
        )
    assert released == sorted(released) and len(released) == 200 - 10
    with pytest.raises(Exception) as err:
        reorder.push(batch([500], 999))
    assert str(err.value) == (
        "t.jsonl:999: timestamp_ns: timestamp_ns 500 is more than the reorder window "
        "(1000 ms) before a record already replayed (at 945 ns): the window holds at most 50 "
        "keys and records: the trace is out of time order; widen --reorder-window-ms, or sort "
        "the trace by timestamp_ns first"
    )
    rest = reorder.finish()
    assert rest is not None and rest.times.tolist() == list(range(950, 1000, 5))


def test_a_long_run_says_its_plan_first(tmp_path, monkeypatch, capsys) -> None:
    """Catches a long run that starts silently (or a plan that misstates the size or the
    destination): with the threshold lowered to the test trace's size, optimize, replay and
    convert print the plan as their first stderr line; under it, nothing."""
    from litehit_service.offline import outputs

    records = [{"type": "request", "instance_id": "a", "timestamp_ns": 10 + i,
                "keys": [i % 3, i], "input_len": 40} for i in range(3000)]  # fmt: skip
    path = write_config(tmp_path, [group("g", 4, inst("a", "lru"))], records)
    trace = tmp_path / "trace.jsonl"
    size = trace.stat().st_size
    assert main(["optimize", str(path), "--max-workers", "1"]) == 0
    assert not capsys.readouterr().err.startswith("optimize: " + str(trace))
    monkeypatch.setattr(outputs, "PLAN_BYTES", size)
    assert main(["optimize", str(path), "--max-workers", "1"]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first == (f"optimize: {trace}: {size} bytes; about 0 s at ~45 MB/s of JSONL "
                     f"on a 2-core machine -> {tmp_path / 'out'}")  # fmt: skip
    parquet = tmp_path / "t.parquet"
    assert main(["convert", str(trace), "-o", str(parquet)]) == 0
    assert capsys.readouterr().err.startswith(f"convert: {trace}: {size} bytes; ")
    monkeypatch.setattr(outputs, "PLAN_BYTES", 1)
    jsonl = parquet.stat().st_size * 8
    assert main(["convert", str(parquet), "-o", str(tmp_path / "back.jsonl")]) == 0
    assert capsys.readouterr().err.startswith(
        f"convert: {parquet}: {parquet.stat().st_size} bytes (about {jsonl} bytes of JSONL); "
        "about 0 s at ~60 MB/s"
    )


def test_parquet_tables_hold_the_csvs_values(tmp_path) -> None:
    """Catches a Parquet table with other columns, types or values than the CSV (the rates
    unrounded there), or one written from the first batch only; and the refusal where it
    cannot stream."""
    import pyarrow.parquet as pq

    path = mixed_case(tmp_path, 11, 3)
    assert main(["optimize", str(path), "--max-workers", "1", "-o", str(tmp_path / "c")]) == 0
    assert main(["optimize", str(path), "--max-workers", "1", "-o", str(tmp_path / "p"),
                 "--output-format", "parquet"]) == 0  # fmt: skip
    for iid in "abcdef":
        table = pq.read_table(tmp_path / "p" / f"{iid}_hit_rates.parquet")
        text = (tmp_path / "c" / f"{iid}_hit_rates.csv").read_text().splitlines()
        assert table.column_names == text[0].split(",")
        assert table.num_rows == len(text) - 1 > 10
        for row, line in zip(table.to_pylist(), text[1:], strict=True):
            for (name, value), cell in zip(row.items(), line.split(","), strict=True):
                if isinstance(value, float):
                    assert f"{value:.6f}" == cell, name
                else:
                    assert str(value) == cell, name
    whole = tmp_path / "w"  # several groups in parallel: the whole-trace path, same tables
    assert main(["optimize", str(path), "--max-workers", "2", "--output-format", "parquet",
                 "-o", str(whole)]) == 0  # fmt: skip
    for iid in "abcdef":
        name = f"{iid}_hit_rates.parquet"
        assert pq.read_table(whole / name).equals(pq.read_table(tmp_path / "p" / name))


def test_a_big_trace_streams_by_default(tmp_path, monkeypatch) -> None:
    """Catches the per-CPU default decoding a big multi-group trace whole: from the plan
    threshold on, no --max-workers means one streamed replay."""
    from litehit_service.offline import outputs
    from litehit_service.optimizer.optimize import stream

    streamed = []
    real = stream.stream_optimize
    monkeypatch.setattr(stream, "stream_optimize",
                        lambda *a, **k: streamed.append(1) or real(*a, **k))  # fmt: skip
    monkeypatch.setattr("litehit_service.offline.pool.default_workers", lambda: 2)
    path = mixed_case(tmp_path, 12, 3)  # four groups: several workers by default
    assert main(["optimize", str(path), "-o", str(tmp_path / "a")]) == 0
    assert streamed == []  # small: the groups in parallel, the whole trace
    monkeypatch.setattr(outputs, "PLAN_BYTES", 1)
    assert main(["optimize", str(path), "-o", str(tmp_path / "b")]) == 0
    assert streamed == [1]
    assert files(tmp_path / "a") == files(tmp_path / "b")
