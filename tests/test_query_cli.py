"""`litehit query`: exact JSON lines from a replayed facts file, slots, atomic output, errors."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import run_on_terminal

from litehit_core import FactRow, FactsWriter, HitCurveSegment, LiteHit, query_facts, read_facts
from litehit_service.cli import main

S = HitCurveSegment
ROOT = Path(__file__).resolve().parents[1]
GB_2048_BYTES = "1.9073486328125e-6"  # 2048 / 2**30 exactly: 2 blocks of 1024 bytes
A, B, C, D, E = 1, 2, 3, 4, 5
WORKED_REQUESTS = [([A, B, C], 13), ([A, B, D], 12), ([A, B, C], 13), ([A, E], 8), ([A, E], 8)]

WORKED_LINES = [
    '{"trace_id":"r1","instance_id":"gpu-0","timestamp_ns":1000,"input_token_len":13,'
    '"hit_blocks":[0,0],"hit_rates":[0.0,0.0]}',
    '{"trace_id":"r2","instance_id":"gpu-0","timestamp_ns":2000,"input_token_len":12,'
    '"hit_blocks":[2,2],"hit_rates":[0.6666666666666666,0.6666666666666666]}',
    '{"trace_id":"r3","instance_id":"gpu-0","timestamp_ns":3000,"input_token_len":13,'
    '"hit_blocks":[2,3],"hit_rates":[0.6153846153846154,0.9230769230769231]}',
    '{"trace_id":"r4","instance_id":"gpu-0","timestamp_ns":4000,"input_token_len":8,'
    '"hit_blocks":[1,1],"hit_rates":[0.5,0.5]}',
    '{"trace_id":"r5","instance_id":"gpu-0","timestamp_ns":5000,"input_token_len":8,'
    '"hit_blocks":[2,2],"hit_rates":[1.0,1.0]}',
    '{"summary":true,"instance_id":"gpu-0","requests":5,"total_input_tokens":54,'
    '"capacity_gb":[1.9073486328125e-6,-1],"total_hit_blocks":[7,8],'
    '"total_hit_tokens":[28,32],"hit_rates":[0.5185185185185185,0.5925925925925926]}',
    '{"summary":true,"requests":5,"total_input_tokens":54,'
    '"capacity_gb":[1.9073486328125e-6,-1],"total_hit_blocks":[7,8],'
    '"total_hit_tokens":[28,32],"hit_rates":[0.5185185185185185,0.5925925925925926]}',
]


def replay_worked(path: Path, instance_id: str = "gpu-0") -> list[FactRow]:
    """Replay the core's worked example with LiteHit (block 4 tokens, 1024 bytes)."""
    engine = LiteHit()
    rows = []
    for i, (keys, tokens) in enumerate(WORKED_REQUESTS, 1):
        fact = engine.process_request(keys)
        rows.append(FactRow(f"r{i}", instance_id, 1000 * i, tokens, 4, 1024, fact.hit_curve))
    with FactsWriter(path) as writer:
        for row in rows:
            writer.write(row)
    return rows


@pytest.fixture
def worked(tmp_path: Path) -> Path:
    path = tmp_path / "litehit_facts.csv"
    rows = replay_worked(path)
    # the replay reproduces the worked example's curves
    assert [r.hit_curve for r in rows] == [
        (),
        (S(1, 2),),
        (S(1, 2), S(4, 1)),
        (S(1, 1),),
        (S(1, 2),),
    ]
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["query", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def summaries(out: str) -> list[dict]:
    return [row for row in map(json.loads, out.splitlines()) if "summary" in row]


# ---------------------------------------------------------------- exact output


def test_worked_example_exact_lines(worked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(worked), "--capacity-gib", GB_2048_BYTES, "-1")
    assert code == 0
    assert out == "\n".join(WORKED_LINES) + "\n"
    # summaries: 28/54 at 2048 bytes, 32/54 at infinite capacity
    total = summaries(out)[-1]
    assert total["total_hit_tokens"] == [28, 32] and total["total_input_tokens"] == 54
    assert total["hit_rates"] == [28 / 54, 32 / 54]
    # one summary line on stderr, no progress bar (stderr is not a terminal)
    assert err.count("\n") == 1
    assert err.startswith("query: 5 requests, 1 instances, ")
    assert err.endswith(" requests/s -> stdout\n")


def test_slots_keep_caller_order_duplicates_and_zero(
    worked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, str(worked), "--capacity-gib", "-1", "0", GB_2048_BYTES, "-1", "0")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 7
    r3 = json.loads(lines[2])
    assert r3["hit_blocks"] == [3, 0, 2, 3, 0]
    assert r3["hit_rates"] == [12 / 13, 0.0, 8 / 13, 12 / 13, 0.0]
    assert lines[-1] == (
        '{"summary":true,"requests":5,"total_input_tokens":54,'
        '"capacity_gb":[-1,0,1.9073486328125e-6,-1,0],"total_hit_blocks":[8,0,7,8,0],'
        '"total_hit_tokens":[32,0,28,32,0],"hit_rates":[0.5925925925925926,0.0,'
        "0.5185185185185185,0.5925925925925926,0.0]}"
    )


def test_negative_values_parse_as_capacities(
    worked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -1 first, -1 as a float, and options after the list
    code, out, _ = run(capsys, "--capacity-gib", "-1", "-1.0", "8", "--summary-only", str(worked))
    assert code == 0
    rows = summaries(out)
    assert len(out.splitlines()) == 2
    # ints stay ints in the echo, floats stay floats
    assert '"capacity_gb":[-1,-1.0,8]' in out.splitlines()[1]
    assert rows[1]["total_hit_tokens"] == [32, 32, 32]


def test_summary_only(worked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, str(worked), "--capacity-gib", GB_2048_BYTES, "-1", "--summary-only"
    )
    assert code == 0
    assert out == "\n".join(WORKED_LINES[5:]) + "\n"
    assert err.startswith("query: 5 requests, 1 instances, ")


def test_instances_sorted_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "facts.csv"
    rows = replay_worked(tmp_path / "b.csv", "gpu-b") + replay_worked(tmp_path / "a.csv", "gpu-a")
    with FactsWriter(path) as writer:
        for row in rows:
            writer.write(row)
    code, out, err = run(capsys, str(path), "--capacity-gib", "-1", "--summary-only")
    assert code == 0
    got = [(r.get("instance_id"), r["requests"], r["total_hit_tokens"]) for r in summaries(out)]
    assert got == [("gpu-a", 5, [32]), ("gpu-b", 5, [32]), (None, 10, [64])]
    assert err.startswith("query: 10 requests, 2 instances, ")


# ---------------------------------------------------------------- output file


def test_output_file_written_atomically(worked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = worked.parent / "hits.jsonl"
    out_path.write_text("old\n")
    code, out, err = run(
        capsys, str(worked), "--capacity-gib", GB_2048_BYTES, "-1", "-o", str(out_path)
    )
    assert code == 0
    assert out == ""
    assert out_path.read_text() == "\n".join(WORKED_LINES) + "\n"
    assert not list(out_path.parent.glob("*.tmp"))
    assert err.endswith(f" requests/s -> {out_path}\n")


def test_output_same_as_facts_rejected(worked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = worked.read_bytes()
    code, out, err = run(capsys, str(worked), "--capacity-gib", "1", "-o", str(worked))
    assert code == 2
    assert err == f"litehit query: error: -o {str(worked)!r} is the facts file\n"
    assert worked.read_bytes() == before


# ---------------------------------------------------------------- errors


def broken_facts(tmp_path: Path) -> Path:
    path = tmp_path / "broken.csv"
    worked = tmp_path / "w.csv"
    replay_worked(worked)
    lines = worked.read_text().splitlines(keepends=True)
    lines[3] = 'r3,gpu-0,3000,13,4,1024,"[[1,0]]"\n'  # line 4: run_length 0
    path.write_text("".join(lines))
    return path


def test_malformed_row_fails_whole_query_to_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = broken_facts(tmp_path)
    out_path = tmp_path / "hits.jsonl"
    code, out, err = run(capsys, str(path), "--capacity-gib", "1", "-o", str(out_path))
    assert code == 2
    assert out == ""
    assert err == f"{path}:4: hit_curve run_length must be >= 1, got 0\n"
    assert not out_path.exists()
    assert not list(out_path.parent.glob("*.tmp"))


def test_malformed_row_keeps_previous_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = broken_facts(tmp_path)
    out_path = tmp_path / "hits.jsonl"
    out_path.write_text("previous\n")
    code, _, _ = run(capsys, str(path), "--capacity-gib", "1", "-o", str(out_path))
    assert code == 2
    assert out_path.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.csv", "hits.jsonl", "w.csv"]


def test_malformed_row_prints_nothing_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = broken_facts(tmp_path)
    code, out, err = run(capsys, str(path), "--capacity-gib", "1")
    assert code == 2
    assert out == ""  # rows 1-2 were fine but nothing is published
    assert err == f"{path}:4: hit_curve run_length must be >= 1, got 0\n"


def test_missing_facts_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.csv"
    code, out, err = run(capsys, str(missing), "--capacity-gib", "1", "-o", str(tmp_path / "o"))
    assert code == 2
    assert err == f"{missing}:0: cannot read the facts: No such file or directory\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "value", ["abc", "inf", "nan", "1e300", "8589934592", "-5", "-0.5", "-2", "-1.5"]
)
def test_bad_capacity_rejected(
    worked: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["query", str(worked), "--capacity-gib", "1", value])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[-1] == (
        "litehit query: error: argument --capacity-gib: must be -1 (infinite) or a finite "
        f"number of GiB in [0, 8589934591], got {value!r}"
    )


@pytest.mark.parametrize("value", ["-inf", "-1e-9"])
def test_negative_values_argparse_reads_as_options(
    worked: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    # argparse takes "-inf" / "-1e-9" for an option; either way: exit 2 naming the value
    with pytest.raises(SystemExit) as info:
        main(["query", str(worked), "--capacity-gib", "1", value])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"litehit: error: unrecognized arguments: {value}"
    )
    with pytest.raises(SystemExit) as info:
        main(["query", str(worked), f"--capacity-gib={value}"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "litehit query: error: argument --capacity-gib: must be -1 (infinite) or a finite "
        f"number of GiB in [0, 8589934591], got {value!r}"
    )


def test_bad_capacity_exit_code_as_a_program(worked: Path) -> None:
    argv = [sys.executable, "-m", "litehit_service", "query", str(worked), "--capacity-gib", "-5"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.endswith(
        "argument --capacity-gib: must be -1 (infinite) or a finite number of GiB in "
        "[0, 8589934591], got '-5'\n"
    )


def test_zero_capacity_is_valid_and_hits_nothing(
    worked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, str(worked), "--capacity-gib", "0", "0.0", "--summary-only")
    assert code == 0
    total = summaries(out)[-1]
    assert total["capacity_gb"] == [0, 0.0]
    assert total["total_hit_tokens"] == [0, 0] and total["hit_rates"] == [0.0, 0.0]


def test_capacity_list_required(worked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["query", str(worked), "--capacity-gib"])
    assert "--capacity-gib: expected at least one argument" in capsys.readouterr().err


# ---------------------------------------------------------------- formatting


def random_rows(seed: int) -> list[FactRow]:
    """Replay random traffic on three instances; odd trace ids exercise JSON escaping."""
    rng = random.Random(seed)
    engines = {"a": LiteHit(), 'b "quoted", é': LiteHit(), "c": LiteHit()}
    rows = []
    for i in range(400):
        iid = rng.choice(list(engines))
        n = rng.randint(0, 12)
        keys = [rng.randint(1, 40) for _ in range(n)]
        fact = engines[iid].process_request(keys)
        tid = rng.choice([str(i), f"t\n{i}", f"ü-{i}", f'"{i}"'])
        rows.append(FactRow(tid, iid, i + 1, n * 4 + rng.randint(0, 3), 4, 1024, fact.hit_curve))
    return rows


def test_json_lines_format_is_compact_and_parses_back_exactly() -> None:
    """The one JSON-lines formatter: exact bytes of a known chunk, and every line of random
    chunks parses back to the dict query_facts yields."""
    from litehit_core import FactsQuery
    from litehit_core.query import format_chunk_lines, format_summary_lines

    known = [FactRow('a"b', "gpu-0", 5, 13, 4, 1024, ((1, 2), (4, 1)))]
    query = FactsQuery([-1, 0, 1024 * 3 / 1024**3])
    (chunk,) = query.chunks(known)
    assert format_chunk_lines(chunk) == (
        b'{"trace_id":"a\\"b","instance_id":"gpu-0","timestamp_ns":5,"input_token_len":13,'
        b'"hit_blocks":[3,0,2],"hit_rates":[0.9230769230769231,0.0,0.6153846153846154]}\n'
    )
    assert format_summary_lines(query.summaries()).splitlines()[-1] == (
        b'{"summary":true,"requests":1,"total_input_tokens":13,"capacity_gb":[-1,0,'
        b'2.86102294921875e-6],"total_hit_blocks":[3,0,2],"total_hit_tokens":[12,0,8],'
        b'"hit_rates":[0.9230769230769231,0.0,0.6153846153846154]}'
    )
    caps = [-1, 0, 1e-6, 2 / 1024**2, 3.5e-6, 2 / 1024**2, 0.5]
    rows = random_rows(7)
    query = FactsQuery(caps, chunk_rows=64)
    text = b"".join(format_chunk_lines(c) for c in query.chunks(rows))
    text += format_summary_lines(query.summaries())
    lines = text.decode().splitlines(keepends=True)
    assert [json.loads(line) for line in lines] == list(query_facts(rows, caps))
    assert all(line.endswith("}\n") for line in lines)
    assert b'":[' in text and b'", "' not in text and b"], [" not in text  # compact


def test_cli_output_equals_core_query(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "facts.csv"
    with FactsWriter(path) as writer:
        for row in random_rows(11):
            writer.write(row)
    caps = ["-1", "0", "1e-6", "3.5e-6", "0.5"]
    code, out, _ = run(capsys, str(path), "--capacity-gib", *caps)
    assert code == 0
    parsed = [-1, 0, 1e-6, 3.5e-6, 0.5]
    expected = [json.loads(json.dumps(r)) for r in query_facts(read_facts(path), parsed)]
    assert [json.loads(line) for line in out.splitlines()] == expected
    assert len(expected) == 400 + 3 + 1


# ---------------------------------------------------------------- as a program


def test_progress_bar_only_on_a_terminal(worked: Path) -> None:
    argv = [sys.executable, "-m", "litehit_service", "query", str(worked), "--capacity-gib", "1"]
    argv += ["-o", str(worked.parent / "out.jsonl")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert plain.returncode == 0
    assert plain.stderr.count("\n") == 1 and "\r" not in plain.stderr
    assert plain.stderr.startswith("query: 5 requests, 1 instances, ")

    code, tty_err = run_on_terminal(argv, env)
    assert code == 0
    assert "req [" in tty_err  # tqdm's bar: "0req [00:00, ?req/s]"
    assert "query: 5 requests, 1 instances, " in tty_err
