"""Facts ledger: exact file text, round trip, atomic publish, malformed rows with line numbers."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from litehit_core import LocatedError
from litehit_core.facts import (
    FACTS_HEADER,
    FACTS_HEADER_MODELS,
    FactRow,
    FactsWriter,
    read_facts,
)
from litehit_core.model import HitCurveSegment, InvalidRequestError

S = HitCurveSegment

# the worked example (block_size_tokens 4, block_bytes 1024)
WORKED_ROWS = [
    FactRow("r1", "gpu-0", 1000, 13, 4, 1024, ()),
    FactRow("r2", "gpu-0", 2000, 12, 4, 1024, (S(1, 2),)),
    FactRow("r3", "gpu-0", 3000, 13, 4, 1024, (S(1, 2), S(4, 1))),
    FactRow("r4", "gpu-0", 4000, 8, 4, 1024, (S(1, 1),)),
    FactRow("r5", "gpu-0", 5000, 8, 4, 1024, (S(1, 2),)),
]

WORKED_TEXT = (
    "trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes,hit_curve\n"
    'r1,gpu-0,1000,13,4,1024,"[]"\n'
    'r2,gpu-0,2000,12,4,1024,"[[1,2]]"\n'
    'r3,gpu-0,3000,13,4,1024,"[[1,2],[4,1]]"\n'
    'r4,gpu-0,4000,8,4,1024,"[[1,1]]"\n'
    'r5,gpu-0,5000,8,4,1024,"[[1,2]]"\n'
)

GOOD_LINE = 'ok,gpu-0,1,13,4,1024,"[[1,2]]"'


def write_rows(path: Path, rows: list[FactRow]) -> None:
    with FactsWriter(path) as writer:
        for row in rows:
            writer.write(row)


def test_header_constant() -> None:
    assert FACTS_HEADER == (
        "trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes,hit_curve"
    )
    assert FactRow._fields == (
        *FACTS_HEADER.split(","),
        "model",
        "sampled_blocks",
        "sample_reuse",
        "trunk_size",
        "trace_reuse",
    )
    assert FACTS_HEADER_MODELS == FACTS_HEADER.replace(",hit_curve", ",model,hit_curve")


def test_hybrid_rows_exact_file_text_and_read_back(tmp_path: Path) -> None:
    from litehit_core import HitCurveStep

    rows = [
        FactRow("1", "mamba-0", 5, 12, 4, 1024, (), "hybrid"),
        FactRow(
            "2", "mamba-0", 6, 13, 4, 1024, (HitCurveStep(4096, 2), HitCurveStep(7168, 3)), "hybrid"
        ),  # fmt: skip
        FactRow("3", "gpu-0", 7, 8, 4, 1024, (HitCurveSegment(1, 2),)),
    ]
    path = tmp_path / "f.csv"
    with FactsWriter(path, with_model=True) as writer:
        for row in rows:
            writer.write(row)
    assert path.read_text() == (
        FACTS_HEADER_MODELS + "\n"
        '1,mamba-0,5,12,4,1024,hybrid,"[]"\n'
        '2,mamba-0,6,13,4,1024,hybrid,"[[4096,2],[7168,3]]"\n'
        '3,gpu-0,7,8,4,1024,lru,"[[1,2]]"\n'
    )
    assert list(read_facts(path)) == rows
    with (
        pytest.raises(ValueError, match="needs a ledger with the model column"),
        FactsWriter(tmp_path / "g.csv") as plain,
    ):
        plain.write(rows[0])


@pytest.mark.parametrize(
    ("curve", "reason"),
    [
        ('"[[4096,2],[4096,3]]"', "corners must increase in threshold and hits"),
        ('"[[4096,3],[5000,3]]"', "corners must increase in threshold and hits"),
        ('"[[1,0]]"', "corners must increase in threshold and hits"),
        ('"[[1,2,3]]"', "corner must be [threshold,hits] integers"),
        ('"[[10,4]]"', "hit_curve covers 4 blocks of 4 tokens but input_token_len is 13"),
    ],
)
def test_hybrid_curve_errors_name_the_line(tmp_path: Path, curve: str, reason: str) -> None:
    path = tmp_path / "f.csv"
    path.write_text(FACTS_HEADER_MODELS + "\n" + f"1,m,5,13,4,1024,hybrid,{curve}\n")
    with pytest.raises(LocatedError, match=rf":2: .*{re.escape(reason)}"):
        list(read_facts(path))
    path.write_text(FACTS_HEADER_MODELS + "\n" + '1,m,5,13,4,1024,fifo,"[]"\n')
    models = r"\['hybrid', 'lru', 'lru-head-first'\]"
    with pytest.raises(LocatedError, match=rf":2: model must be one of {models}"):
        list(read_facts(path))


# ---------------------------------------------------------------- writing and reading


def test_worked_example_exact_file_text(tmp_path: Path) -> None:
    path = tmp_path / "litehit_facts.csv"
    write_rows(path, WORKED_ROWS)
    assert path.read_bytes() == WORKED_TEXT.encode()
    assert not list(tmp_path.glob("*.tmp"))


def test_worked_example_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "litehit_facts.csv"
    write_rows(path, WORKED_ROWS)
    back = list(read_facts(path))
    assert back == WORKED_ROWS
    for row in back:
        assert isinstance(row, FactRow)
        assert type(row.hit_curve) is tuple
        assert all(isinstance(seg, HitCurveSegment) for seg in row.hit_curve)
        assert type(row.timestamp_ns) is int and type(row.block_bytes) is int
    assert back[2].hit_curve[1].start_required_blocks == 4


def test_read_accepts_str_path(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text(WORKED_TEXT)
    assert list(read_facts(str(path))) == WORKED_ROWS


def test_rows_written_counter(tmp_path: Path) -> None:
    with FactsWriter(tmp_path / "f.csv") as writer:
        for row in WORKED_ROWS:
            writer.write(row)
        assert writer.rows_written == 5


def test_empty_ledger_is_header_only(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    write_rows(path, [])
    assert path.read_text() == FACTS_HEADER + "\n"
    assert list(read_facts(path)) == []


@pytest.mark.parametrize(
    ("trace_id", "instance_id", "line"),
    [
        ("plain-id_1.x", "gpu 0", 'plain-id_1.x,gpu 0,7,8,4,1024,"[[1,2]]"\n'),
        ("a,b", "gpu-0", '"a,b",gpu-0,7,8,4,1024,"[[1,2]]"\n'),
        ('say "hi"', "gpu-0", '"say ""hi""",gpu-0,7,8,4,1024,"[[1,2]]"\n'),
        ("t", 'node,"7"', 't,"node,""7""",7,8,4,1024,"[[1,2]]"\n'),
        ("", "", ',,7,8,4,1024,"[[1,2]]"\n'),
        ("two\nlines", "gpu-0", '"two\nlines",gpu-0,7,8,4,1024,"[[1,2]]"\n'),
    ],
)
def test_string_fields_quoted_only_when_needed(
    tmp_path: Path, trace_id: str, instance_id: str, line: str
) -> None:
    path = tmp_path / "f.csv"
    row = FactRow(trace_id, instance_id, 7, 8, 4, 1024, (S(1, 2),))
    write_rows(path, [row])
    assert path.read_bytes() == (FACTS_HEADER + "\n" + line).encode()
    assert list(read_facts(path)) == [row]


def test_large_curve_is_compact_json(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    curve = (S(1, 3), S(5, 1), S(100, 20))
    write_rows(path, [FactRow("t", "i", 5, 10_000, 16, 65536, curve)])
    assert path.read_text().splitlines()[1] == 't,i,5,10000,16,65536,"[[1,3],[5,1],[100,20]]"'
    assert list(read_facts(path))[0].hit_curve == curve


# ---------------------------------------------------------------- atomic publish


def test_tmp_during_write_then_renamed(tmp_path: Path) -> None:
    path = tmp_path / "litehit_facts.csv"
    tmp = tmp_path / f"litehit_facts.csv.{os.getpid()}.tmp"  # this process's temporary
    with FactsWriter(path) as writer:
        writer.write(WORKED_ROWS[0])
        assert tmp.exists()
        assert not path.exists()
    assert path.exists()
    assert not tmp.exists()
    assert list(read_facts(path)) == WORKED_ROWS[:1]


def test_exception_inside_block_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "litehit_facts.csv"
    with pytest.raises(RuntimeError, match="boom"):
        with FactsWriter(path) as writer:
            writer.write(WORKED_ROWS[0])
            raise RuntimeError("boom")
    assert not path.exists()
    assert not list(tmp_path.glob("*.tmp"))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_failure_leaves_previous_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "litehit_facts.csv"
    write_rows(path, WORKED_ROWS)
    with pytest.raises(KeyboardInterrupt):
        with FactsWriter(path) as writer:
            writer.write(FactRow("new", "x", 1, 4, 4, 1024, ()))
            raise KeyboardInterrupt
    assert path.read_bytes() == WORKED_TEXT.encode()
    assert not list(tmp_path.glob("*.tmp"))


def test_success_replaces_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "litehit_facts.csv"
    write_rows(path, WORKED_ROWS)
    write_rows(path, WORKED_ROWS[3:])
    assert list(read_facts(path)) == WORKED_ROWS[3:]
    assert not list(tmp_path.glob("*.tmp"))


def test_abort_discards(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text("previous")
    with FactsWriter(path) as writer:
        writer.write(WORKED_ROWS[0])
        writer.abort()
    assert path.read_text() == "previous"
    assert not list(tmp_path.glob("*.tmp"))


# ---------------------------------------------------------------- malformed input


def read_error(path: Path) -> LocatedError:
    with pytest.raises(LocatedError) as info:
        list(read_facts(path))
    err = info.value
    assert isinstance(err, InvalidRequestError) and isinstance(err, ValueError)
    assert str(err) == f"{path}:{err.line_no}: {err.reason}"
    assert err.path == str(path)
    return err


@pytest.mark.parametrize(
    "content",
    [
        "",
        "trace_id,instance_id,timestamp,input_token_len,block_size_tokens,block_bytes,hit_curve\n",
        "hit_curve,trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes\n",
        "trace_id,instance_id,timestamp_ns,input_token_len,block_size_tokens,block_bytes\n",
        GOOD_LINE + "\n",
    ],
)
def test_bad_header_is_line_1(tmp_path: Path, content: str) -> None:
    path = tmp_path / "f.csv"
    path.write_text(content)
    err = read_error(path)
    assert err.line_no == 1
    assert "header" in err.reason
    assert FACTS_HEADER in err.reason


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('t,i,1,13,4,"[[1,2]]"', "expected 7 fields, got 6"),
        ('t,i,1,13,4,1024,"[[1,2]]",extra', "expected 7 fields, got 8"),
        ("t", "expected 7 fields, got 1"),
        (
            't,i,1,13,4,1024,"[[1,2]"',
            "hit_curve must look like [[start,run],...] (compact), got '[[1,2]'",
        ),
        (
            't,i,1,13,4,1024,"[1,2]"',
            "hit_curve must look like [[start,run],...] (compact), got '[1,2]'",
        ),
        ('t,i,1,13,4,1024,""', "hit_curve must look like [[start,run],...] (compact), got ''"),
        ('t,i,1,13,4,1024,"[[1,2,3]]"', "hit_curve segment must be [start,run], got [1,2,3]"),
        ('t,i,1,13,4,1024,"[[1,2],[3]]"', "hit_curve segment must be [start,run], got [3]"),
        (
            't,i,1,13,4,1024,"[[1,2],[2,1]]"',
            "hit_curve thresholds must increase: start 2 after threshold 2",
        ),
        (
            't,i,1,13,4,1024,"[[3,1],[2,1]]"',
            "hit_curve thresholds must increase: start 2 after threshold 3",
        ),
        ('t,i,1,13,4,1024,"[[0,1]]"', "hit_curve thresholds must increase: start 0"),
        ('t,i,1,13,4,1024,"[[1,0]]"', "hit_curve run_length must be >= 1, got 0"),
        (
            't,i,1,7,4,1024,"[[1,2]]"',
            "hit_curve covers 2 blocks of 4 tokens but input_token_len is 7",
        ),
        (
            't,i,1,-1,4,1024,"[]"',
            "input_token_len must be a non-negative decimal integer, got '-1'",
        ),
        ('t,i,-1,1,4,1024,"[]"', "timestamp_ns must be a non-negative decimal integer, got '-1'"),
        ('t,i,1_0,1,4,1024,"[]"', "timestamp_ns must be a non-negative decimal integer, got '1_0'"),
        ('t,i, 5,1,4,1024,"[]"', "timestamp_ns must be a non-negative decimal integer, got ' 5'"),
        ('t,i,1,13,4,1024,"[[1, 2]]"', "hit_curve must look like [[start,run],...] (compact)"),
        ('t,i,1,13,4,1024,"[[1,+2]]"', "hit_curve segment must hold decimal integers, got [1,+2]"),
        ('t,i,9223372036854775808,1,4,1024,"[]"', "timestamp_ns must fit in int64"),
        ('t,i,1,13,4,99999999999999999999999,"[]"', "block_bytes must fit in int64"),
        ('t,i,1,13,0,1024,"[]"', "block_size_tokens must be > 0, got 0"),
        ('t,i,1,13,-4,1024,"[]"', "block_size_tokens must be a non-negative decimal integer"),
        ('t,i,1,13,4,0,"[]"', "block_bytes must be > 0, got 0"),
    ],
)
def test_malformed_row_reports_physical_line(tmp_path: Path, line: str, reason: str) -> None:
    path = tmp_path / "f.csv"
    # header (1), good row (2), blank line (3), good row (4), bad row (5)
    path.write_text(FACTS_HEADER + "\n" + GOOD_LINE + "\n\n" + GOOD_LINE + "\n" + line + "\n")
    err = read_error(path)
    assert err.line_no == 5
    assert reason in err.reason


def test_curve_exactly_filling_input_tokens_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text(FACTS_HEADER + '\nt,i,1,8,4,1024,"[[1,2]]"\n')
    assert list(read_facts(path)) == [FactRow("t", "i", 1, 8, 4, 1024, (S(1, 2),))]


def test_line_number_counts_physical_lines_of_multiline_fields(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text(
        FACTS_HEADER
        + '\n"multi\nline\nid",gpu-0,1,13,4,1024,"[]"\n'  # lines 2-4
        + 't,i,1,13,4,1024,"[[1,0]]"\n'  # line 5
    )
    err = read_error(path)
    assert err.line_no == 5


def test_reader_streams_rows_before_the_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text(WORKED_TEXT + 'r6,gpu-0,6000,8,4,1024,"[[1,0]]"\n')
    it = read_facts(path)
    assert [next(it) for _ in range(5)] == WORKED_ROWS
    with pytest.raises(LocatedError) as info:
        next(it)
    assert info.value.line_no == 7


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        ('t,i,abc,13,4,1024,"[]"', "timestamp_ns", "abc"),
        ('t,i,1,1.5,4,1024,"[]"', "input_token_len", "1.5"),
        ('t,i,1,13,four,1024,"[]"', "block_size_tokens", "four"),
        ('t,i,1,13,4,,"[]"', "block_bytes", "''"),
        ('t,i,1,13,4,1024,"[[1,x]]"', "hit_curve", "x"),
    ],
)
def test_non_integer_field_error_names_the_field(
    tmp_path: Path, line: str, field: str, value: str
) -> None:
    # every bad-input error names the column and the value as written
    path = tmp_path / "f.csv"
    path.write_text(FACTS_HEADER + "\n" + line + "\n")
    err = read_error(path)
    assert err.line_no == 2
    assert field in err.reason
    assert value in err.reason


def test_invalid_utf8_in_an_id_names_field_and_line(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_bytes(
        (FACTS_HEADER + "\n" + 'ok,i,1,13,4,1024,"[]"\n').encode() + b'b\xffd,i,1,13,4,1024,"[]"\n'
    )
    rows = read_facts(path)
    assert next(rows).trace_id == "ok"
    with pytest.raises(LocatedError, match=r"f\.csv:3: trace_id is not valid UTF-8"):
        next(rows)


def test_fast_and_csv_paths_read_the_same_rows(tmp_path: Path) -> None:
    """Quoted ids (commas, quotes, newlines) read back exactly; line numbers stay physical."""
    rows = [
        FactRow("plain", "i", 1, 13, 4, 1024, (S(1, 2),)),
        FactRow('q"uo,te', "i", 2, 13, 4, 1024, ()),
        FactRow("multi\nline", "i,2", 3, 13, 4, 1024, (S(1, 1), S(3, 2))),
        FactRow("plain-again", "i", 4, 13, 4, 1024, (S(1, 3),)),
    ]
    path = tmp_path / "f.csv"
    write_rows(path, rows)
    assert list(read_facts(path)) == rows
    # an error after the switch still names the physical line
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('x,i,5,13,4,0,"[]"\n')
    with pytest.raises(LocatedError, match=r"f\.csv:7: block_bytes must be > 0, got 0"):
        list(read_facts(path))
