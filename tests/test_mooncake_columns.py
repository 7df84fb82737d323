"""Mooncake traces read by columns (:mod:`~litehit_service.traces.readers.mooncake_columns`)
against the line parser alone, differentially: for every kind of odd or bad line -- JSON
pyarrow takes and the parser refuses, or the reverse; values out of range; float
timestamps and their rounding; id counts that do not fit the prompt; blank lines, CRLF, a
BOM, invalid UTF-8 -- the policy replay's batches and ``litehit replay``'s events are the
line parser's, array for array, or the error is its error, message for message. Then the
real traces (``../shared``): the same records either way, plain and compressed, and
``optimize`` / ``replay`` / ``export-tree`` outputs byte-identical to the line path's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import mooncake_trace

from litehit_core import LocatedError
from litehit_service.optimizer.optimize.columns import Routing, event_batch, trace_batches
from litehit_service.traces.readers.mooncake import read_mooncake
from litehit_service.traces.readers.records import TraceReader
from litehit_service.traces.readers.registry import get_reader

BLOCK = 16
MOONCAKE = get_reader("mooncake")
OPTIONS = {"block_size": BLOCK, "instance_id": "a"}


def line(ts: str = "5", tokens: str = "40", ids: str = "[1, 2, 3]", extra: str = "") -> str:
    return f'{{"timestamp": {ts}, "input_length": {tokens}, "hash_ids": {ids}{extra}}}'


def good(i: int) -> str:
    """A good line: 40 tokens (2 complete blocks + a partial one) with the partial id, or
    32 tokens (2 complete blocks) without one, in turns."""
    ids = f"[{3 * i}, {3 * i + 1}, {3 * i + 2}]" if i % 2 else f"[{3 * i}, {3 * i + 1}]"
    tokens = 40 if i % 2 else 32
    return line(ts=str(10 + i), tokens=str(tokens), ids=ids, extra=', "output_length": 5')


ODD = {
    # timestamps: floats, rounding to the nearest ns (half to even), range, type
    "ts float": line(ts="30.5"),
    "ts many decimals": line(ts="1234.567890123456"),
    "ts just over half a ns": line(ts="1.0000005"),
    "ts half ns, even below": line(ts="0.0000025"),
    "ts half ns, even above": line(ts="0.0000035"),
    "ts half ns at 0": line(ts="0.0000005"),
    "ts tiny": line(ts="0.0000004999"),
    "ts exponent": line(ts="3e1"),
    "ts negative exponent": line(ts="25e-7"),
    "ts 0": line(ts="0"),
    "ts -0": line(ts="-0"),
    "ts -0.0": line(ts="-0.0"),
    "ts negative": line(ts="-1"),
    "ts negative float": line(ts="-0.5"),
    "ts NaN": line(ts="NaN"),
    "ts Infinity": line(ts="Infinity"),
    "ts at the exact limit": line(ts="9007199254"),
    "ts past the exact limit": line(ts="9007199255"),
    "ts float past the exact limit": line(ts="9007199254740.993"),
    "ts largest": line(ts="9223372036854"),
    "ts past int64 ns": line(ts="9223372036855"),
    "ts past int64": line(ts="99999999999999999999999"),
    "ts huge float": line(ts="1e300"),
    "ts too big for a double": line(ts="1e400"),
    "ts string": line(ts='"5"'),
    "ts bool": line(ts="true"),
    "ts null": line(ts="null"),
    "ts list": line(ts="[5]"),
    "ts missing": '{"input_length": 40, "hash_ids": [1, 2, 3]}',
    # input_length
    "input float": line(tokens="40.0"),
    "input exponent": line(tokens="4e1"),
    "input 0": line(tokens="0", ids="[]"),
    "input -16": line(tokens="-16", ids="[]"),
    "input string": line(tokens='"40"'),
    "input bool": line(tokens="true"),
    "input null": line(tokens="null"),
    "input missing": '{"timestamp": 5, "hash_ids": [1, 2, 3]}',
    "input past int64": line(tokens="99999999999999999999"),
    "input huge": line(tokens="1099511627776"),
    "input below one block": line(tokens="10", ids="[7]"),
    "input below one block no id": line(tokens="10", ids="[]"),
    # hash_ids: counts, types, the partial last id (never checked by the line parser)
    "ids exact, no partial": line(tokens="32", ids="[1, 2]"),
    "ids one too many, no partial": line(tokens="32", ids="[1, 2, 3]"),
    "ids without the partial": line(ids="[1, 2]"),
    "ids too few": line(ids="[1]"),
    "ids too many": line(ids="[1, 2, 3, 4]"),
    "ids empty": line(ids="[]"),
    "ids null": line(ids="null"),
    "ids missing": '{"timestamp": 5, "input_length": 40}',
    "ids string": line(ids='"1,2,3"'),
    "ids object": line(ids='{"a": 1}'),
    "ids nested": line(ids="[[1], 2, 3]"),
    "null kept id": line(ids="[1, null, 3]"),
    "null partial id": line(ids="[1, 2, null]"),
    "string partial id": line(ids='[1, 2, "x"]'),
    "float partial id": line(ids="[1, 2, 3.5]"),
    "big partial id": line(ids="[1, 2, 18446744073709551616]"),
    "float kept id": line(ids="[1.0, 2, 3]"),
    "bool kept id": line(ids="[true, 2, 3]"),
    "string kept id": line(ids='["1", 2, 3]'),
    "kept id past int64": line(ids="[1, 9223372036854775808, 3]"),
    "kept id past uint64": line(ids="[1, 18446744073709551616, 3]"),
    "kept id below int64": line(ids="[-9223372036854775809, 2, 3]"),
    "int64 extremes": line(ids="[-9223372036854775808, 9223372036854775807, 3]"),
    "negative ids": line(ids="[-1, -2, -3]"),
    # other fields, JSON oddities, blank lines
    "output_length null": line(extra=', "output_length": null'),
    "output_length string": line(extra=', "output_length": "x"'),
    "output_length missing": line(),
    "NaN elsewhere": line(extra=', "x": NaN'),
    "big int elsewhere": line(extra=', "x": 999999999999999999999999999'),
    "nested extra": line(extra=', "x": {"y": [1, "z", {"w": null}]}'),
    "escaped quote in extra": line(extra=', "note": "a \\" b"'),
    "unicode escape key": line(extra=', "\\u0078": 1'),
    "escaped field name": '{"\\u0074imestamp": 5, "input_length": 40, "hash_ids": [1, 2, 3]}',
    "duplicate timestamp": line(extra=', "timestamp": 6'),
    "duplicate extra": line(extra=', "x": 1, "x": 2'),
    "compact": '{"timestamp":5,"input_length":40,"hash_ids":[1,2,3]}',
    "two objects": good(3) + " " + good(4),
    "blank": "",
    "spaces": "   \t ",
    "array line": "[1, 2]",
    "number line": "5",
    "truncated": '{"timestamp": 5, "input_length": 40, "hash_ids": [1, 2',
    "trailing comma": line(extra=","),
}
BYTES = {
    "non-UTF-8 in extra": line(extra=', "x": "\xff"').encode("latin-1"),
    "truncated UTF-8 in extra": line().encode()[:-1] + b', "x": "\xc3"}',
    "UTF-8 in extra": line(extra=', "x": "é"').encode(),
}


def _routing(path: Path) -> Routing:
    return Routing(path=str(path), index={"a": 0}, route="a", block_sizes=np.array([BLOCK]),
                   expires=np.array([False]), default_ttl=np.array([0]))  # fmt: skip


def _by_columns(path: Path):
    """The policy replay's batches by columns, or the error's text."""
    try:
        got = trace_batches(MOONCAKE, str(path), _routing(path), None, max_line_bytes=1 << 20,
                            options=OPTIONS)  # fmt: skip
        return [batch for batch, _ in got.batches]
    except LocatedError as exc:
        return str(exc)


def _by_lines(path: Path):
    """The line parser's records as one batch, or the error's text."""
    try:
        return [event_batch(read_mooncake(path, BLOCK, "a"), _routing(path))]
    except LocatedError as exc:
        return str(exc)


def _same(columns, lines) -> None:
    if isinstance(lines, str) or isinstance(columns, str):
        assert columns == lines
        return
    [whole] = lines
    for field in whole._fields:
        parts = [getattr(b, field) for b in columns]
        joined = np.concatenate(parts) if parts else np.zeros(0, getattr(whole, field).dtype)
        assert joined.dtype == getattr(whole, field).dtype, field
        assert np.array_equal(joined, getattr(whole, field)), field


def _replay_events(batches) -> tuple[list, str | None]:
    out: list = []
    for got, error, _ in batches:
        out += [tuple(e)[:7] for e in got]
        if error is not None:
            return out, str(error)
    return out, None


def _replay_by_columns(path: Path, chunk_bytes: int | None = 500):
    from litehit_service.litehit.parsing import column_batches

    try:
        source = MOONCAKE.column_source(str(path), max_line_bytes=1 << 20,
                                        chunk_bytes=chunk_bytes, **OPTIONS)  # fmt: skip
        return _replay_events(column_batches(source, str(path), False))
    except LocatedError as exc:
        return [], str(exc)


def _replay_by_lines(path: Path):
    from litehit_service.litehit.parsing import inline_batches

    try:
        return _replay_events(inline_batches(str(path), "mooncake", BLOCK, "a", False, 1 << 20))
    except LocatedError as exc:
        return [], str(exc)


@pytest.mark.parametrize("name", [*ODD, *BYTES])
@pytest.mark.parametrize("where", [0, 7, 29])
@pytest.mark.parametrize("crlf", [False, True])
def test_columns_equal_the_line_parser(tmp_path, monkeypatch, name, where, crlf) -> None:
    """Catches the fast path accepting what the line parser refuses (a float
    input_length, a negative or NaN timestamp, a wrong id count, a null id), refusing it
    with another message or at another line, reading a value differently (ms -> ns
    rounding, the partial id kept, a key cut at the wrong offset) or numbering lines wrong
    after a blank line: one odd line among 30 good ones, chunks of ~5 lines, LF and CRLF,
    a BOM before the first line. Both consumers: the policy replay's batches and ``litehit
    replay``'s events."""
    monkeypatch.setattr("litehit_service.traces.readers.columns.CHUNK_BYTES", 400)
    end = b"\r\n" if crlf else b"\n"
    lines = [good(i).encode() for i in range(30)]
    lines[where] = BYTES[name] if name in BYTES else ODD[name].encode()
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" * (where == 0) + end.join(lines) + end)
    _same(_by_columns(path), _by_lines(path))
    assert _replay_by_columns(path) == _replay_by_lines(path)


def test_the_fast_path_takes_good_chunks(tmp_path, monkeypatch) -> None:
    """Catches a fast path that always falls back (correct but slow): good lines, with and
    without a partial id, float timestamps and unknown fields, come from pyarrow's
    tables, never the line parser."""
    import litehit_service.traces.readers.jsonl as jsonl

    def refuse(*args, **kwargs):
        raise AssertionError("a good chunk went to the line parser")

    lines = [good(i) for i in range(200)]
    lines[5] = line(ts="30.25", extra=', "x": {"y": [1, null]}, "output_length": null')
    lines[6] = line(tokens="10", ids="[]")
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    expected = _by_lines(path)
    monkeypatch.setattr(jsonl, "parse_numbered", refuse)
    _same(_by_columns(path), expected)


def test_float_timestamps_convert_exactly(tmp_path) -> None:
    """Catches ms -> ns done otherwise than the line parser's ``round(ms * 1e6)`` (a
    truncation, half away from zero, a float32 step, pyarrow's decimal parse differing
    from Python's): 3,000 random timestamps from 1e-7 ms to 1e9 ms, as repr'd floats,
    integers and exponents."""
    rng = np.random.default_rng(34)
    stamps = 10.0 ** rng.uniform(-7, 9, 3000)
    texts = [repr(float(v)) for v in stamps[:1000]]
    texts += [str(int(v)) for v in stamps[1000:2000]]
    texts += [f"{v:.17e}" for v in stamps[2000:]]
    texts += [f"{k}.5e-6" for k in range(40)]  # exact halves of a ns
    path = tmp_path / "t.jsonl"
    path.write_text("".join(line(ts=t) + "\n" for t in texts))
    by_columns, by_lines = _by_columns(path), _by_lines(path)
    assert not isinstance(by_columns, str)
    _same(by_columns, by_lines)


def test_options_are_checked_as_the_line_reader_checks_them(tmp_path) -> None:
    """Catches the column source taking a block size or an instance id the line reader
    refuses (a block size of 0 would divide by zero on whole columns)."""
    path = tmp_path / "t.jsonl"
    path.write_text(good(0) + "\n")
    for options in ({"block_size": 0}, {"block_size": 1.5}, {"instance_id": ""}):
        with pytest.raises(ValueError) as by_lines:
            read_mooncake(path, **options)
        with pytest.raises(ValueError) as by_columns:
            MOONCAKE.column_source(str(path), **options)
        assert str(by_columns.value) == str(by_lines.value)


# ---------------------------------------------------------------- the real traces


def _real_slice(tmp_path: Path, name: str, lines: int | None) -> Path:
    trace = mooncake_trace(name)
    if lines is None:
        return trace
    path = tmp_path / name
    with open(trace, "rb") as src:
        path.write_bytes(b"".join(next(src) for _ in range(lines)))
    return path


@pytest.mark.parametrize(("name", "lines", "container"), [
    ("conversation_trace.jsonl", None, None),
    ("conversation_trace.jsonl", None, "gz"),
    ("conversation_trace.jsonl", None, "zst"),
    ("synthetic_trace.jsonl", 2500, None),
])  # fmt: skip
def test_real_traces_read_the_same_by_columns(tmp_path, name, lines, container) -> None:
    """Catches any difference between the two paths on real data (keys, times, input
    lengths, trace ids, line numbers), for plain, gzip'd and zstd'd files; and a fast path
    that falls back on real chunks."""
    path = _real_slice(tmp_path, name, lines)
    if container == "gz":
        packed = tmp_path / (path.name + ".gz")
        packed.write_bytes(gzip.compress(path.read_bytes()))
        path = packed
    elif container == "zst":
        zstandard = pytest.importorskip("zstandard")
        packed = tmp_path / (path.name + ".zst")
        packed.write_bytes(zstandard.ZstdCompressor().compress(path.read_bytes()))
        path = packed
    routing = Routing(path=str(path), index={"a": 0}, route="a", block_sizes=np.array([512]),
                      expires=np.array([False]), default_ttl=np.array([0]))  # fmt: skip
    source = MOONCAKE.column_source(str(path), max_line_bytes=1 << 26, instance_id="a")
    chunks = list(source.chunks)
    assert all(c.table is not None and source.columns(c.table) is not None for c in chunks)
    got = trace_batches(MOONCAKE, str(path), routing, None, max_line_bytes=1 << 26,
                        options={"block_size": 512, "instance_id": "a"})  # fmt: skip
    whole = event_batch(read_mooncake(path, 512, "a"), routing)
    _same([b for b, _ in got.batches], [whole])
    assert len(whole.kinds) == (12_031 if lines is None else lines)

    from litehit_service.litehit.parsing import column_batches, inline_batches

    source = MOONCAKE.column_source(str(path), max_line_bytes=1 << 26, chunk_bytes=1 << 20,
                                    block_size=512, instance_id="a")  # fmt: skip
    by_columns = _replay_events(column_batches(source, str(path), False))
    by_lines = _replay_events(inline_batches(str(path), "mooncake", 512, "a", False, 1 << 26))
    assert by_columns == by_lines


def _outputs(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _trace(tmp_path: Path, which: str) -> tuple[Path, int]:
    """``(trace, tokens per id)``: the real conversation trace (512), or 3,000 small good
    lines in ~90 chunks (16: a block size no default gives)."""
    if which == "conversation":
        return mooncake_trace(), 512
    path = tmp_path / "small.jsonl"
    lines = []
    for i in range(3000):
        k = i % 400  # ids seen again: hits
        ids = f"[{k}, {k + 1}, {k + 2}]" if i % 2 else f"[{k}, {k + 1}]"
        lines.append(line(ts=f"{10 + i}.25", tokens="40" if i % 2 else "32", ids=ids))
    path.write_text("\n".join(lines) + "\n")
    return path, BLOCK


def _optimize_config(tmp_path: Path, trace: Path, out: Path, block: int) -> Path:
    config = tmp_path / f"{out.name}.json"
    config.write_text(json.dumps({
        "trace_file_path": str(trace), "output_result_path": str(out),
        "eviction_params": {"eviction_mode": 3, "eviction_batch_size_per_instance": 100},
        "instance_groups": [{
            "group_name": "g", "quota_capacity": 20_000 * 512 * 4096 / 2**30,
            "instances": [{"instance_id": "conv", "block_size": block,
                           "bytes_per_token": 512 * 4096 // block,
                           "eviction_policy_type": "lru"}],
        }],
    }))  # fmt: skip
    return config


def _line_path_forced(monkeypatch) -> None:
    """The Mooncake reader without its column source: every consumer reads line by line."""
    monkeypatch.setattr(type(MOONCAKE), "column_source", TraceReader.column_source)


@pytest.mark.parametrize("which", ["conversation", "small"])
@pytest.mark.parametrize("fmt", [["--trace-format", "mooncake"], []])
def test_optimize_and_export_tree_are_byte_identical_by_columns(tmp_path, monkeypatch, fmt, which):
    """Catches the columnar path changing what ``optimize`` and ``export-tree`` write from
    a Mooncake trace, given ``--trace-format mooncake`` or detected (a key, a time, a line
    number off, or the trace read with the reader's default block size instead of the
    instance's): every output file equals the line path's, byte for byte."""
    from litehit_service.cli import main

    trace, block = _trace(tmp_path, which)

    def run(tag: str) -> dict[str, bytes]:
        out = tmp_path / tag
        config = _optimize_config(tmp_path, trace, out / "optimize", block)
        assert main(["optimize", str(config), *fmt]) == 0
        tree = _optimize_config(tmp_path, trace, out / "tree", block)
        assert main(["export-tree", str(tree), *fmt]) == 0
        return _outputs(out)

    by_columns = run("columns")
    with monkeypatch.context() as patch:
        _line_path_forced(patch)
        by_lines = run("lines")
    assert by_columns.keys() == by_lines.keys() and len(by_columns) > 2
    for name, data in by_lines.items():
        assert by_columns[name] == data, name


@pytest.mark.parametrize("which", ["conversation", "small"])
def test_replay_is_byte_identical_by_columns(tmp_path, monkeypatch, capsys, which) -> None:
    """Catches ``litehit replay``'s columnar Mooncake path changing the facts ledger (a
    trace id that is not the line number, a key list cut at the wrong offset, another
    instance or block size than the config's). ``replay`` reads Mooncake line by line
    (``events_by_columns`` is False: faster so); the columnar path is forced here, so it
    stays right for the day the balance turns."""
    from conftest import lru_instance, write_replay_config

    from litehit_service.cli import main

    trace, block = _trace(tmp_path, which)

    def run(tag: str) -> dict[str, bytes]:
        config = write_replay_config(
            tmp_path / f"{tag}.json", trace, output=tmp_path / tag, block_size=block,
            trace_format="mooncake", instances=[lru_instance("x", block_size=block)],
        )  # fmt: skip
        assert main(["replay", str(config), "--quiet"]) == 0
        return _outputs(tmp_path / tag)

    with monkeypatch.context() as patch:
        patch.setattr(type(MOONCAKE), "events_by_columns", True)
        by_columns = run("columns")
    with monkeypatch.context() as patch:
        _line_path_forced(patch)
        by_lines = run("lines")
    assert by_columns.keys() == by_lines.keys() and by_lines
    for name, data in by_lines.items():
        assert by_columns[name] == data, name
