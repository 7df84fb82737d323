"""``litehit convert --from F`` on a line of another known format says which ``--from``
to use (the readers' own ``sniff``, never a format name tested by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from litehit_core import LocatedError
from litehit_service.cli import main
from litehit_service.traces.convert.pipeline import with_format_hint
from litehit_service.traces.readers import formats_of_line

MOONCAKE = {"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}
STANDARD = {
    "type": "get",
    "instance_id": "i",
    "trace_id": "r",
    "timestamp_ns": 5,
    "keys": [1],
    "input_len": 4,
}


def write(path: Path, *objs: dict) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


def convert(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(["convert", *argv])
    return rc, capsys.readouterr().err


def test_a_mooncake_file_as_standard_names_the_from_to_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write(tmp_path / "m.jsonl", MOONCAKE, MOONCAKE)
    out = tmp_path / "o.jsonl"
    rc, err = convert(capsys, "--from", "standard", str(trace), "-o", str(out))
    assert rc == 2
    assert err == (
        f"{trace}:1: missing required field 'type' "
        "(this line looks like a mooncake trace: use --from mooncake)\n"
    )
    assert not out.exists()


def test_a_standard_file_as_mooncake_names_the_from_to_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write(tmp_path / "s.jsonl", STANDARD)
    rc, err = convert(capsys, "--from", "mooncake", str(trace), "-o", str(tmp_path / "o.jsonl"))
    assert rc == 2
    assert err.endswith("(this line looks like a standard trace: use --from standard)\n")


def test_no_hint_for_a_bad_line_of_the_chosen_format_or_of_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write(tmp_path / "s.jsonl", STANDARD, {**STANDARD, "timestamp_ns": -5})
    rc, err = convert(capsys, "--from", "standard", str(trace), "-o", str(tmp_path / "o.jsonl"))
    assert rc == 2 and err.startswith(f"{trace}:2: ") and "looks like" not in err
    odd = write(tmp_path / "x.jsonl", {"foo": 1})
    rc, err = convert(capsys, "--from", "standard", str(odd), "-o", str(tmp_path / "o.jsonl"))
    assert rc == 2 and err == f"{odd}:1: missing required field 'type'\n"


def test_the_hint_looks_at_the_failing_line(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.jsonl", STANDARD, MOONCAKE)
    assert [r.name for r in formats_of_line(trace, 1)] == ["standard"]
    assert [r.name for r in formats_of_line(trace, 2)] == ["mooncake"]
    assert formats_of_line(trace, 3) == () and formats_of_line(tmp_path / "none", 1) == ()
    error = LocatedError(str(trace), 2, "missing required field 'type'")
    assert str(with_format_hint(error, "standard")).endswith("use --from mooncake)")
    assert with_format_hint(error, "mooncake") is error
    assert with_format_hint(LocatedError(str(trace), 0, "empty"), "standard").line_no == 0
