"""``litehit convert`` of a Mooncake trace to Parquet by columns
(:func:`~litehit_service.traces.convert.columnar.convert_columns` over the Mooncake
reader's column source) against the line path it replaced (the line parser's events as
standard JSONL, then transcoded), differentially: every column of the Parquet file read
back equal, on the real conversation trace and on a small trace with odd lines (chunks the
columns doubt, which go to the line parser); a bad line is the line path's error, naming
``path:line``, and leaves no output."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import mooncake_trace

from litehit_core import LocatedError
from litehit_service.cli import main
from litehit_service.traces.convert.pipeline import convert_trace
from litehit_service.traces.readers.records import TraceReader
from litehit_service.traces.readers.registry import get_reader

MOONCAKE = get_reader("mooncake")


def line(ts: str, tokens: int = 40, ids: str = "[1, 2, 3]", extra: str = "") -> str:
    return f'{{"timestamp": {ts}, "input_length": {tokens}, "hash_ids": {ids}{extra}}}'


def _odd_trace(path: Path, bad: str | None = None) -> Path:
    """300 lines, 16-token blocks, ~15 chunks of 400 bytes: good lines (with and without
    the partial id, float timestamps, a null ``output_length``) and, in a few chunks only,
    lines pyarrow refuses or the columns doubt but the line parser takes: a blank line, a
    partial id of another JSON type, a duplicate field, an integer timestamp beyond 2**53
    ns (the last line). ``bad``: a bad line put at line 151."""
    lines = []
    for i in range(300):
        ids = f"[{3 * i}, {3 * i + 1}, {3 * i + 2}]" if i % 2 else f"[{3 * i}, {3 * i + 1}]"
        ts = f"{10 + i}.25" if i % 3 == 0 else str(10 + i)
        lines.append(line(ts, 40 if i % 2 else 32, ids, ', "output_length": null'))
    lines[40] = ""
    lines[90] = line("100", ids='[7, 8, "partial"]')
    lines[200] = line("210", extra=', "timestamp": 210')
    lines[299] = line("200000000000")
    if bad is not None:
        lines[150] = bad
    path.write_text("\n".join(lines) + "\n")
    return path


def _columns_used(monkeypatch) -> list[bool]:
    """Whether each chunk's columns were taken (True) or doubted (False), as recorded."""
    import litehit_service.traces.readers.mooncake_columns as module

    taken: list[bool] = []
    columns = module.mooncake_columns

    def spy(table, block_size, instance_id):
        result = columns(table, block_size, instance_id)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(module, "mooncake_columns", spy)
    return taken


def _by_lines(monkeypatch, *args, **kwargs) -> Path:
    """The line path's Parquet file: the Mooncake reader without its column source."""
    with monkeypatch.context() as patch:
        patch.setattr(type(MOONCAKE), "column_source", TraceReader.column_source)
        convert_trace(*args, **kwargs)
    return Path(args[2])


def _same_values(got: Path, want: Path) -> None:
    a, b = pq.read_table(got), pq.read_table(want)
    assert a.schema == b.schema and a.num_rows == b.num_rows > 0
    for name in b.column_names:
        assert a.column(name).equals(b.column(name)), name
    groups = [pq.ParquetFile(p).metadata for p in (got, want)]
    sizes = [[m.row_group(i).num_rows for i in range(m.num_row_groups)] for m in groups]
    assert sizes[0] == sizes[1]


def test_the_conversation_trace_converts_to_the_same_parquet(tmp_path, monkeypatch) -> None:
    """Catches the columnar Mooncake convert writing another file than the line path on the
    real trace: the 1 ms offset for a clock starting at 0 left out, a key list cut at the
    wrong offset (a partial last id kept), trace ids not the line numbers, another row
    group size. Planted: ``_from_columns`` without the offset -> red."""
    trace = str(mooncake_trace())
    taken = _columns_used(monkeypatch)
    out = tmp_path / "c.parquet"
    convert_trace("mooncake", trace, str(out), instance_id="conv")
    assert taken and all(taken)  # every chunk by columns
    _same_values(out, _by_lines(monkeypatch, "mooncake", trace, str(tmp_path / "l.parquet"),
                                instance_id="conv"))  # fmt: skip


@pytest.mark.parametrize("offset", [None, 7])
def test_odd_lines_go_to_the_line_parser_and_every_value_matches(
    tmp_path, monkeypatch, offset
) -> None:
    """Catches a doubted chunk written otherwise than its neighbours (rows numbered from
    the chunk, not the file, after a blank line; the offset or the ``--instance`` left out
    of the line parser's rows), and a chunk whose columns were doubted written from them
    anyway (a huge timestamp rounded). Planted: ``trace_id`` from the row index within the
    chunk (``lines - chunk.first_line + 1``) -> red."""
    monkeypatch.setattr("litehit_service.traces.readers.columns.CHUNK_BYTES", 400)
    trace = str(_odd_trace(tmp_path / "t.jsonl"))
    taken = _columns_used(monkeypatch)
    out = tmp_path / "c.parquet"
    options = {"block_size": 16, "instance_id": "a", "time_offset_ns": offset}
    convert_trace("mooncake", trace, str(out), **options)
    assert True in taken and False in taken  # both paths ran
    _same_values(out, _by_lines(monkeypatch, "mooncake", trace, str(tmp_path / "l.parquet"),
                                **options))  # fmt: skip


def test_a_detected_mooncake_trace_goes_by_columns(tmp_path, monkeypatch) -> None:
    """Catches ``litehit convert x.jsonl -o y.parquet`` (format detected) still going line
    by line, or by columns with another instance than ``--instance``'s. Planted:
    ``columns`` false for a non-standard reader in ``convert_trace`` -> red."""
    monkeypatch.setattr("litehit_service.traces.readers.columns.CHUNK_BYTES", 400)
    trace = str(_odd_trace(tmp_path / "t.jsonl"))
    taken = _columns_used(monkeypatch)
    out = tmp_path / "c.parquet"
    args = ["--block-size", "16", "--instance", "b"]
    assert main(["convert", trace, "-o", str(out), *args]) == 0
    assert True in taken
    _same_values(out, _by_lines(monkeypatch, "mooncake", trace, str(tmp_path / "l.parquet"),
                                block_size=16, instance_id="b"))  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "chunk"),
    [(line("160", tokens=0), 400), (line("160", ids="[1]"), 1 << 20), ('{"timestamp": 1', 400)],
)
def test_a_bad_line_is_the_line_paths_error_and_nothing_is_written(
    tmp_path, monkeypatch, bad, chunk
) -> None:
    """Catches a bad line the columns doubt turned into another error, another line, or
    none (the good lines before it written and the rest dropped), and an output (or its
    tmp file) left behind. Planted: the parser's ``error`` not raised in
    ``convert_columns`` -> red."""
    monkeypatch.setattr("litehit_service.traces.readers.columns.CHUNK_BYTES", chunk)
    trace = str(_odd_trace(tmp_path / "t.jsonl", bad))
    out = tmp_path / "c.parquet"
    with pytest.raises(LocatedError) as by_columns:
        convert_trace("mooncake", trace, str(out), block_size=16)
    with pytest.raises(LocatedError) as by_lines:
        _by_lines(monkeypatch, "mooncake", trace, str(tmp_path / "l.parquet"), block_size=16)
    assert str(by_columns.value) == str(by_lines.value)
    assert str(by_columns.value).startswith(f"{trace}:151: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_time_going_backwards_is_refused_at_its_line(tmp_path, monkeypatch) -> None:
    """Catches an unsorted Mooncake trace written as it is by the columnar path (its
    check skipped for rows built from columns). Planted: ``_in_order`` not called -> red."""
    trace = str(_odd_trace(tmp_path / "t.jsonl", line("3")))
    with pytest.raises(LocatedError) as exc:
        convert_trace("mooncake", trace, str(tmp_path / "c.parquet"), block_size=16)
    assert str(exc.value).startswith(
        f"{trace}:151: timestamp goes backwards: 3000000 ns is before the previous event's "
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
