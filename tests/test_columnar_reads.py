"""The standard trace read by columns (pyarrow's JSON reader, :mod:`~litehit_service.traces.
readers.columns`) against the line parser alone, differentially: for every kind of odd or
bad line -- JSON pyarrow takes and the parser refuses, or the reverse; values out of range;
blank lines, CRLF, a BOM, invalid UTF-8 -- the batches are the line parser's, array for
array, or the error is its error, message for message."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from litehit_core import LocatedError
from litehit_service.optimizer.optimize.columns import Routing, event_batch, trace_batches
from litehit_service.traces.readers.registry import get_reader
from litehit_service.traces.readers.standard import read_standard

GOOD = '{"type":"request","instance_id":"a","timestamp_ns":%d,"keys":[1,%d],"input_len":40}'
ODD = {
    "null key": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1,null],"input_len":40}',
    "NaN elsewhere": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],"input_len":40,'
    '"x":NaN}',
    "Infinity elsewhere": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],'
    '"input_len":40,"x":-Infinity}',
    "two objects": GOOD % (5, 7) + " " + GOOD % (6, 8),
    "blank": "",
    "spaces": "   \t ",
    "unicode escape": '{"type":"get","instance_id":"\\u0061","timestamp_ns":5,"keys":[1],'
    '"input_len":40}',
    "escaped quote in extra": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],'
    '"input_len":40,"note":"a \\" b"}',
    "big key": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[9223372036854775808],'
    '"input_len":40}',
    "min key": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[-9223372036854775808],'
    '"input_len":40}',
    "float key": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1.0],"input_len":40}',
    "bool key": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[true],"input_len":40}',
    "keys null": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":null,"input_len":40}',
    "keys missing": '{"type":"get","instance_id":"a","timestamp_ns":5,"input_len":40}',
    "keys empty": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[],"input_len":40}',
    "timestamp_us": '{"type":"get","instance_id":"a","timestamp_us":5,"keys":[1],"input_len":40}',
    "both stamps": '{"type":"get","instance_id":"a","timestamp_us":5,"timestamp_ns":5,"keys":[1],'
    '"input_len":40}',
    "stamp 0": '{"type":"get","instance_id":"a","timestamp_ns":0,"keys":[1],"input_len":40}',
    "stamp -0": '{"type":"get","instance_id":"a","timestamp_ns":-0,"keys":[1],"input_len":40}',
    "stamp float": '{"type":"get","instance_id":"a","timestamp_ns":5.0,"keys":[1],"input_len":40}',
    "input float": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],"input_len":4e1}',
    "input 0": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],"input_len":0}',
    "input missing": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1]}',
    "write no input": '{"type":"write","instance_id":"a","timestamp_ns":5,"keys":[1]}',
    "write input -1": '{"type":"write","instance_id":"a","timestamp_ns":5,"keys":[1],'
    '"input_len":-1}',
    "too many keys": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1,2,3],'
    '"input_len":40}',
    "int mask": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1,2],"input_len":40,'
    '"block_mask":1}',
    "list mask": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1,2],"input_len":40,'
    '"block_mask":[true,false]}',
    "short mask": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1,2],"input_len":40,'
    '"block_mask":[true]}',
    "null in mask": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1,2],'
    '"input_len":40,"block_mask":[true,null]}',
    "mask on write": '{"type":"write","instance_id":"a","timestamp_ns":5,"keys":[1],'
    '"block_mask":[true]}',
    "ttl on get": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],"input_len":40,'
    '"ttl_us":5}',
    "ttl -2": '{"type":"write","instance_id":"a","timestamp_ns":5,"keys":[1],"ttl_us":-2}',
    "ttl": '{"type":"write","instance_id":"a","timestamp_ns":5,"keys":[1],"ttl_us":7}',
    "ttl never": '{"type":"request","instance_id":"a","timestamp_ns":5,"keys":[1],'
    '"input_len":40,"ttl_us":-1}',
    "duplicate field": '{"type":"get","instance_id":"a","instance_id":"a","timestamp_ns":5,'
    '"keys":[1],"input_len":40}',
    "trace_id number": '{"type":"get","instance_id":"a","trace_id":5,"timestamp_ns":5,"keys":[1],'
    '"input_len":40}',
    "ttl null": '{"type":"write","instance_id":"a","timestamp_ns":5,"keys":[1],"ttl_us":null}',
    "input null on a write": '{"type":"write","instance_id":"a","timestamp_ns":5,"keys":[1],'
    '"input_len":null}',
    "timestamp_us null": '{"type":"get","instance_id":"a","timestamp_ns":5,"timestamp_us":null,'
    '"keys":[1],"input_len":40}',
    "mask null": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],"input_len":40,'
    '"block_mask":null}',
    "trace_id null": '{"type":"get","instance_id":"a","trace_id":null,"timestamp_ns":5,'
    '"keys":[1],"input_len":40}',
    "nested extra": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],"input_len":40,'
    '"x":{"y":[1,"z",{"w":null}]}}',
    "unknown type": '{"type":"put","instance_id":"a","timestamp_ns":5,"keys":[1],"input_len":40}',
    "empty instance": '{"type":"get","instance_id":"","timestamp_ns":5,"keys":[1],"input_len":40}',
    "other instance": '{"type":"get","instance_id":"zz","timestamp_ns":5,"keys":[1],'
    '"input_len":40}',
    "instance number": '{"type":"get","instance_id":7,"timestamp_ns":5,"keys":[1],"input_len":40}',
    "array line": "[1,2]",
    "truncated": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],',
    "trailing comma": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],'
    '"input_len":40,}',
}
BYTES = {
    "non-UTF-8 in instance": b'{"type":"get","instance_id":"\xff","timestamp_ns":5,"keys":[1],'
    b'"input_len":40}',
    "non-UTF-8 in extra": b'{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],'
    b'"input_len":40,"x":"\xc3"}',
    "UTF-8 in extra": '{"type":"get","instance_id":"a","timestamp_ns":5,"keys":[1],'
    '"input_len":40,"x":"é"}'.encode(),
}


def _routing(path: Path) -> Routing:
    return Routing(path=str(path), index={"a": 0, "b": 1}, route=None,
                   block_sizes=np.array([16, 16]), expires=np.array([False, True]),
                   default_ttl=np.array([0, 10**9]))  # fmt: skip


def _columns(path: Path):
    routing = _routing(path)
    try:
        got = trace_batches(get_reader("standard"), str(path), routing, None,
                            max_line_bytes=1 << 20)  # fmt: skip
        return [b for b, _ in got.batches], routing.ttl_values
    except LocatedError as exc:
        return str(exc)


def _lines(path: Path):
    routing = _routing(path)
    try:
        return [event_batch(read_standard(path), routing)], routing.ttl_values
    except LocatedError as exc:
        return str(exc)


def _same(columns, lines) -> None:
    if isinstance(lines, str) or isinstance(columns, str):
        assert columns == lines
        return
    (batches, ttl_c), ([whole], ttl_l) = columns, lines
    assert ttl_c == ttl_l
    for field in whole._fields:
        joined = np.concatenate([getattr(b, field) for b in batches]) if batches else None
        want = getattr(whole, field)
        assert joined is not None or len(want) == 0
        if joined is not None:
            assert np.array_equal(joined, want), field


@pytest.mark.parametrize("name", [*ODD, *BYTES])
@pytest.mark.parametrize("where", [0, 7, 29])
@pytest.mark.parametrize("crlf", [False, True])
def test_columns_equal_the_line_parser(tmp_path, monkeypatch, name, where, crlf) -> None:
    """Catches the fast path accepting what the line parser refuses (or refusing it with
    another message, or at another line), reading a value differently, or numbering lines
    wrong after a blank line: one odd line among 30 good ones, chunks of ~6 lines."""
    monkeypatch.setattr("litehit_service.traces.readers.columns.CHUNK_BYTES", 400)
    end = b"\r\n" if crlf else b"\n"
    lines = [(GOOD % (10 + i, i)).encode() for i in range(30)]
    lines[where] = BYTES[name] if name in BYTES else ODD[name].encode()
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" * (where == 0) + end.join(lines) + end)
    _same(_columns(path), _lines(path))


def test_the_fast_path_takes_good_chunks(tmp_path, monkeypatch) -> None:
    """Catches a fast path that always falls back (correct but slow): good lines with list
    masks, TTLs, trace ids and unknown fields come back from pyarrow's tables."""
    from litehit_service.optimizer.optimize import columns as module

    calls = []
    monkeypatch.setattr(module, "event_batch", lambda *a: calls.append(a))
    records = [{"type": "request", "instance_id": "ab"[i % 2], "timestamp_ns": 10 + i,
                "keys": [1, i], "input_len": 40, "trace_id": f"r{i}", "extra": {"x": [i]},
                **({"ttl_us": 5} if i % 3 else {})} for i in range(200)]  # fmt: skip
    records[5] = {"type": "get", "instance_id": "a", "timestamp_ns": 15, "keys": [1, 2],
                  "input_len": 40, "block_mask": [True, False]}  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    batches, ttl = _columns(path)
    assert calls == [] and ttl == (5000, 10**9)  # b's own TTL, then its group's default
    _same((batches, ttl), _lines(path))


@pytest.mark.parametrize("name", ["list mask", "int mask", "ttl", "blank", "big key", "truncated"])
def test_replay_reads_the_same_events_by_columns(tmp_path, name) -> None:
    """Catches ``litehit replay``'s column path giving other events than the line path
    (a default trace id from the row instead of the line, a key list cut at the wrong
    offset, a write's input_len) or another error: 60 lines in chunks of ~8."""
    from litehit_service.litehit.parsing import column_batches, inline_batches

    lines = [(GOOD % (10 + i, i)).encode() for i in range(60)]
    lines[17] = ODD[name].encode()
    lines[40] = b'{"type":"write","instance_id":"b","timestamp_ns":70,"keys":[4,5,6]}'
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    def events(batches) -> tuple[list, str | None]:
        out: list = []
        for got, error, _ in batches:
            out += [tuple(e)[:7] for e in got]
            if error is not None:
                return out, str(error)
        return out, None

    by_lines = events(inline_batches(str(path), "standard", 16, "a", False, 1 << 20))
    source = get_reader("standard").column_source(str(path), max_line_bytes=1 << 20,
                                                  chunk_bytes=500)  # fmt: skip
    assert events(column_batches(source, str(path), False)) == by_lines
    assert len(by_lines[0]) >= 17
