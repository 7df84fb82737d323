"""``--max-line-bytes N`` on every command that reads a trace or a facts file: a longer line
is refused with ``path:line: line is longer than N bytes (max_line_bytes)``, exit code 2 and
nothing published; a line of exactly N bytes is accepted; a bad N is a usage error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import lru_instance, write_replay_config
from long_lines import fact, fact_of, lmc, moon, padded, sparse_long_line, std, write

from litehit_core import FACTS_HEADER
from litehit_service.cli import main

MIB = 1024 * 1024
LIMIT = str(MIB)


def too_long(path: Path, line_no: int, limit: int = MIB) -> str:
    return f"{path}:{line_no}: line is longer than {limit} bytes (max_line_bytes)\n"


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- replay


def replay_config(tmp: Path, trace: Path, fmt: str, workers: int = 1) -> Path:
    iid = {"standard": "i", "mooncake": "moon", "lmcache": "m"}[fmt]
    return write_replay_config(
        tmp / "config.json",
        trace.name,
        instances=[lru_instance(iid)],
        trace_format=fmt,
        pipeline_worker_count=workers,
    )


REPLAYS = [
    ("standard", std, 1),
    ("standard", std, 2),
    ("mooncake", moon, 1),
    ("mooncake", moon, 2),
    ("lmcache", lmc, 1),
]


@pytest.mark.parametrize(("fmt", "line", "workers"), REPLAYS)
def test_replay_refuses_a_long_line_and_publishes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, line: Any, workers: int
) -> None:
    trace = write(tmp_path / "trace.jsonl", [line(1), line(2), line(3, 2 * MIB), line(4)])
    config = replay_config(tmp_path, trace, fmt, workers)
    out = tmp_path / "out"
    out.mkdir()
    (out / "litehit_facts.csv").write_text("previous ledger\n", encoding="utf-8")
    code, _, err = run(capsys, "replay", str(config), "--quiet", "--max-line-bytes", LIMIT)
    assert (code, err) == (2, too_long(trace, 3))
    assert files(out) == ["litehit_facts.csv"]  # no temporary left
    assert (out / "litehit_facts.csv").read_text(encoding="utf-8") == "previous ledger\n"


@pytest.mark.parametrize(("fmt", "line", "workers"), REPLAYS)
def test_replay_accepts_a_line_of_exactly_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, line: Any, workers: int
) -> None:
    trace = write(tmp_path / "trace.jsonl", [line(1), line(2, MIB), line(3)])
    config = replay_config(tmp_path, trace, fmt, workers)
    code, _, err = run(capsys, "replay", str(config), "--quiet", "--max-line-bytes", LIMIT)
    assert code == 0, err
    facts = (tmp_path / "out" / "litehit_facts.csv").read_text(encoding="utf-8")
    assert len(facts.splitlines()) == 4  # header + 3 requests


def test_replay_default_limit_is_64_mib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = sparse_long_line(tmp_path / "trace.jsonl", [std(1)], size=65 * MIB)
    config = replay_config(tmp_path, trace, "standard")
    code, _, err = run(capsys, "replay", str(config), "--quiet")
    assert (code, err) == (2, too_long(trace, 2, 64 * MIB))


# ----------------------------------------------------------------------------- convert

CONVERTS = [
    ("standard", std, []),
    ("mooncake", moon, ["--block-size", "4", "--instance", "moon"]),
    ("lmcache", lmc, ["--kv-bytes-per-chunk", "8"]),
]


@pytest.mark.parametrize(("fmt", "line", "extra"), CONVERTS)
def test_convert_refuses_a_long_line_and_publishes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, line: Any, extra: list[str]
) -> None:
    src = write(tmp_path / "in.jsonl", [line(1), line(2), line(3, 2 * MIB), line(4)])
    out, cfg = tmp_path / "trace.jsonl", tmp_path / "config.json"
    argv = ["convert", "--from", fmt, str(src), "-o", str(out), "--emit-config", str(cfg)]
    code, _, err = run(capsys, *argv, *extra, "--max-line-bytes", LIMIT)
    assert (code, err) == (2, too_long(src, 3))
    assert files(tmp_path) == ["in.jsonl"]


@pytest.mark.parametrize(("fmt", "line", "extra"), CONVERTS)
def test_convert_accepts_a_line_of_exactly_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, line: Any, extra: list[str]
) -> None:
    src = write(tmp_path / "in.jsonl", [line(1), line(2, MIB), line(3)])
    out = tmp_path / "trace.jsonl"
    argv = ["convert", "--from", fmt, str(src), "-o", str(out), *extra]
    code, _, err = run(capsys, *argv, "--max-line-bytes", LIMIT)
    assert code == 0, err
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3


# ----------------------------------------------------------------------------- query, curve


@pytest.fixture
def long_facts(tmp_path: Path) -> Path:
    return write(tmp_path / "facts.csv", [FACTS_HEADER, fact("a"), fact_of(2 * MIB), fact("c")])


@pytest.fixture
def limit_facts(tmp_path: Path) -> Path:
    return write(tmp_path / "facts.csv", [FACTS_HEADER, fact("a"), fact_of(MIB), fact("c")])


def test_query_refuses_a_long_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], long_facts: Path
) -> None:
    out = tmp_path / "hits.jsonl"
    out.write_text("previous\n", encoding="utf-8")
    argv = ["query", str(long_facts), "--capacity-gib", "1", "--max-line-bytes", LIMIT]
    assert run(capsys, *argv, "-o", str(out)) == (2, "", too_long(long_facts, 3))
    assert files(tmp_path) == ["facts.csv", "hits.jsonl"]
    assert out.read_text(encoding="utf-8") == "previous\n"
    assert run(capsys, *argv) == (2, "", too_long(long_facts, 3))  # stdout: nothing printed


def test_query_accepts_a_line_of_exactly_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limit_facts: Path
) -> None:
    code, out, err = run(
        capsys, "query", str(limit_facts), "--capacity-gib", "1", "--max-line-bytes", LIMIT
    )
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["requests"] == 3


def test_curve_refuses_a_long_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], long_facts: Path
) -> None:
    png, csv = tmp_path / "curve.png", tmp_path / "curve.csv"
    argv = ["curve", str(long_facts), "-o", str(png), "--csv", str(csv)]
    assert run(capsys, *argv, "--max-line-bytes", LIMIT) == (2, "", too_long(long_facts, 3))
    assert files(tmp_path) == ["facts.csv"]


def test_curve_accepts_a_line_of_exactly_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limit_facts: Path
) -> None:
    csv = tmp_path / "curve.csv"
    argv = ["curve", str(limit_facts), "--no-png", "--csv", str(csv), "--max-line-bytes", LIMIT]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    assert csv.exists()


# ----------------------------------------------------------------------------- usage


@pytest.mark.parametrize("command", ["replay", "convert", "query", "curve", "gen-dataset"])
@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", ""])
def test_a_bad_limit_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: str, value: str
) -> None:
    argv = {
        "replay": ["replay", "c.json"],
        "convert": ["convert", "--from", "standard", "in", "-o", "out"],
        "query": ["query", "f.csv", "--capacity-gib", "1"],
        "curve": ["curve", "f.csv", "--no-png"],
        "gen-dataset": ["gen-dataset", "-i", "in", "--tokenizer", "tok"],
    }[command]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--max-line-bytes", value])
    assert info.value.code == 2
    assert f"argument --max-line-bytes: must be an integer > 0, got {value!r}" in (
        capsys.readouterr().err
    )


def test_padded_lines_are_exactly_their_size() -> None:
    for size in (200, MIB):
        assert len(padded({"a": 1}, size).encode()) == size
        assert len(std(1, size).encode()) == len(fact_of(size).encode()) == size
