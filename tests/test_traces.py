"""Trace readers: standard JSONL, Mooncake FAST'25 and LMCache lookup-hash logs."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from litehit_core import LocatedError
from litehit_service.traces.readers import (
    LMCacheTrace,
    ModelInfo,
    TraceEvent,
    dtype_size,
    format_standard_event,
    parse_mooncake_line,
    parse_standard_line,
    read_lmcache,
    read_mooncake,
    read_standard,
)


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def expect_error(func, *args, match_text: str, **kwargs) -> LocatedError:
    with pytest.raises(LocatedError) as info:
        func(*args, **kwargs)
    assert str(info.value) == match_text
    return info.value


# ----------------------------------------------------------------------------- errors


def test_trace_format_error_text_fields_and_pickle() -> None:
    exc = LocatedError("a/b.jsonl", 7, "field 'x' is bad")
    assert str(exc) == "a/b.jsonl:7: field 'x' is bad"
    assert (exc.path, exc.line_no, exc.reason) == ("a/b.jsonl", 7, "field 'x' is bad")
    assert isinstance(exc, ValueError)
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is LocatedError
    assert (str(copy), copy.path, copy.line_no, copy.reason) == (
        str(exc),
        "a/b.jsonl",
        7,
        exc.reason,
    )


# ----------------------------------------------------------------------------- Mooncake

MOONCAKE_SAMPLE = [
    '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]}',
    "",
    '{"timestamp": 5, "input_length": 8, "output_length": 1, "hash_ids": [7, 8]}',
    '{"timestamp": 12.5, "input_length": 3, "output_length": 1, "hash_ids": [-5]}',
    # The partial tail id is sliced away before validation.
    '{"timestamp": 13, "input_length": 5, "output_length": 2, "hash_ids": [11, "tail"]}',
]


def test_mooncake_reader_drops_partial_tail_and_converts_ms(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "mc.jsonl", MOONCAKE_SAMPLE)
    events = list(read_mooncake(path, block_size=4, instance_id="inst"))
    assert events == [
        TraceEvent(1, "request", "inst", "1", 0, [7, 8], 10),
        TraceEvent(3, "request", "inst", "3", 5_000_000, [7, 8], 8),
        TraceEvent(4, "request", "inst", "4", 12_500_000, [], 3),
        TraceEvent(5, "request", "inst", "5", 13_000_000, [11], 5),
    ]
    assert all(type(e) is TraceEvent for e in events)


def test_mooncake_default_block_size_512_and_instance(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "mc.jsonl",
        ['{"timestamp": 2, "input_length": 1025, "output_length": 9, "hash_ids": [4, 5, 6]}'],
    )
    assert list(read_mooncake(path)) == [
        TraceEvent(1, "request", "default", "1", 2_000_000, [4, 5], 1025)
    ]


def test_parse_mooncake_line_is_usable_alone() -> None:
    line = '{"timestamp": 3, "input_length": 9, "hash_ids": [1, 2, 3]}\n'
    assert parse_mooncake_line(line, 42, "x.jsonl", 4, "a") == TraceEvent(
        42, "request", "a", "42", 3_000_000, [1, 2], 9
    )
    assert parse_mooncake_line("  \n", 1, "x.jsonl") is None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            '{"timestamp": 0, "input_length": 12, "hash_ids": [1, 2]}',
            "field 'hash_ids' has 2 entries but input_length 12 with block_size 4 needs 3 "
            "complete blocks (at most 3 ids including the partial last block); "
            "is the block size right?",
        ),
        (
            '{"timestamp": 0, "input_length": 4, "hash_ids": [1, 2]}',
            "field 'hash_ids' has 2 entries but input_length 4 with block_size 4 needs 1 "
            "complete blocks (at most 1 ids including the partial last block); "
            "is the block size right?",
        ),
        (
            '{"timestamp": -1, "input_length": 4, "hash_ids": [1]}',
            "field 'timestamp' must be a number of milliseconds >= 0; got -1",
        ),
        (
            '{"timestamp": "0", "input_length": 4, "hash_ids": [1]}',
            "field 'timestamp' must be a number of milliseconds >= 0; got \"0\"",
        ),
        (
            '{"timestamp": true, "input_length": 4, "hash_ids": [1]}',
            "field 'timestamp' must be a number of milliseconds >= 0; got true",
        ),
        (
            '{"timestamp": 0, "input_length": 0, "hash_ids": []}',
            "field 'input_length' must be an integer > 0; got 0",
        ),
        (
            '{"timestamp": 0, "input_length": 4.0, "hash_ids": [1]}',
            "field 'input_length' must be an integer > 0; got 4.0",
        ),
        (
            '{"timestamp": 0, "input_length": 4, "hash_ids": "1"}',
            "field 'hash_ids' must be an array of int64 integers; got \"1\"",
        ),
        (
            '{"timestamp": 0, "input_length": 8, "hash_ids": [1, true]}',
            "hash_ids[1] must be an int64 integer; got true",
        ),
        (
            '{"timestamp": 0, "input_length": 8, "hash_ids": [1.0, 2]}',
            "hash_ids[0] must be an int64 integer; got 1.0",
        ),
        (
            '{"timestamp": 0, "input_length": 8, "hash_ids": [1, 9223372036854775808]}',
            "hash_ids[1] is outside the int64 range [-9223372036854775808, "
            "9223372036854775807]; got 9223372036854775808",
        ),
        (
            '{"timestamp": 0, "hash_ids": [1]}',
            "missing required field 'input_length'",
        ),
        ("[1, 2]", "expected a JSON object, got array [1, 2]"),
        (
            '{"timestamp": 0,',
            "invalid JSON: Expecting property name enclosed in double quotes at column 17",
        ),
    ],
)
def test_mooncake_reader_errors(tmp_path: Path, line: str, reason: str) -> None:
    good = '{"timestamp": 0, "input_length": 4, "hash_ids": [1]}'
    path = write_lines(tmp_path / "mc.jsonl", [good, line, good])
    reader = read_mooncake(path, block_size=4)
    assert next(reader).line_no == 1  # lazy: events before the bad line are delivered
    with pytest.raises(LocatedError) as info:
        next(reader)
    assert str(info.value) == f"{path}:2: {reason}"
    assert (info.value.line_no, info.value.reason) == (2, reason)


def test_mooncake_argument_errors_raise_at_call_time(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="block_size must be an integer > 0, got 0"):
        read_mooncake(tmp_path / "missing.jsonl", block_size=0)
    with pytest.raises(ValueError, match="instance_id must be a non-empty string, got ''"):
        read_mooncake(tmp_path / "missing.jsonl", instance_id="")


def test_reader_reports_invalid_utf8_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "mc.jsonl"
    good = b'{"timestamp": 0, "input_length": 4, "hash_ids": [1]}\n'
    path.write_bytes(good + good + b'{"timestamp": 0, "x": "\xff\xfe"}\n')
    expect_error(
        lambda: list(read_mooncake(path, block_size=4)),
        match_text=f"{path}:3: not valid UTF-8 (bad byte at column 24)",
    )


def test_real_mooncake_conversation_trace(mooncake: Path) -> None:
    events = list(read_mooncake(mooncake))
    assert len(events) == 12_031
    assert sum(len(e.keys) for e in events) == 276_491
    assert events[0] == TraceEvent(1, "request", "default", "1", 0, list(range(13)), 6758)
    assert [e.line_no for e in events] == list(range(1, 12_032))
    assert events[-1].timestamp_ns == 3_536_999_000_000


# ----------------------------------------------------------------------------- standard


def test_standard_reader_valid_sample(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "std.jsonl",
        [
            '{"type":"get","instance_id":"a","trace_id":"t1","timestamp_ns":5,'
            '"keys":[1,-2,9223372036854775807],"input_len":13}',
            "",
            '{"type":"request","instance_id":"b","timestamp_us":7,"keys":[],"input_len":3,'
            '"extra":"ignored"}',
            '  {"type":"write","instance_id":"a","timestamp_ns":9,"keys":[-9223372036854775808]}',
            '{"type":"write","instance_id":"a","timestamp_ns":10,"keys":[4],"input_len":0}',
        ],
    )
    assert list(read_standard(path)) == [
        TraceEvent(1, "get", "a", "t1", 5, [1, -2, 2**63 - 1], 13),
        TraceEvent(3, "request", "b", "3", 7000, [], 3),
        TraceEvent(4, "write", "a", "4", 9, [-(2**63)], 0),
        TraceEvent(5, "write", "a", "5", 10, [4], 0),
    ]


BASE = {"type": "get", "instance_id": "a", "timestamp_ns": 5, "keys": [1], "input_len": 4}


def variant(**changes: object) -> str:
    obj = dict(BASE)
    for key, value in changes.items():
        if value is _DROP:
            del obj[key]
        else:
            obj[key] = value
    return json.dumps(obj)


_DROP = object()


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            '{"type": "get",',
            "invalid JSON: Expecting property name enclosed in double quotes at column 16",
        ),
        ('{"type":"get"} {"x":1}', "invalid JSON: extra data at column 16"),
        ('"get"', 'expected a JSON object, got string "get"'),
        ("null", "expected a JSON object, got null null"),
        (variant(type=_DROP), "missing required field 'type'"),
        (
            variant(type="fetch"),
            "field 'type' must be one of 'get', 'request', 'write'; got \"fetch\"",
        ),
        (
            variant(type=["get"]),
            "field 'type' must be one of 'get', 'request', 'write'; got [\"get\"]",
        ),
        (variant(instance_id=_DROP), "missing required field 'instance_id'"),
        (variant(instance_id=3), "field 'instance_id' must be a non-empty string; got 3"),
        (variant(instance_id=""), "field 'instance_id' must be a non-empty string; got \"\""),
        (variant(trace_id=12), "field 'trace_id' must be a string; got 12"),
        (variant(trace_id=None), "field 'trace_id' must be a string; got null"),
        (variant(timestamp_ns=_DROP), "missing required field 'timestamp_ns' (or 'timestamp_us')"),
        (
            variant(timestamp_us=5),
            "give exactly one of 'timestamp_ns' and 'timestamp_us', not both",
        ),
        (variant(timestamp_ns=0), "field 'timestamp_ns' must be an integer in [1, 2**63-1]; got 0"),
        (
            variant(timestamp_ns=1.5),
            "field 'timestamp_ns' must be an integer in [1, 2**63-1]; got 1.5",
        ),
        (
            variant(timestamp_ns=True),
            "field 'timestamp_ns' must be an integer in [1, 2**63-1]; got true",
        ),
        (
            variant(timestamp_ns=2**63),
            "field 'timestamp_ns' must be an integer in [1, 2**63-1]; got 9223372036854775808",
        ),
        (
            variant(timestamp_ns=_DROP, timestamp_us=-1),
            "field 'timestamp_us' must be an integer in [1, (2**63-1) // 1000]; got -1",
        ),
        (
            variant(timestamp_ns=_DROP, timestamp_us=2**63 // 1000 + 1),
            "field 'timestamp_us' must be "
            "an integer in [1, (2**63-1) // 1000]; got 9223372036854776",
        ),
        (variant(keys=_DROP), "missing required field 'keys'"),
        (variant(keys={"0": 1}), "field 'keys' must be an array of int64 integers; got {\"0\": 1}"),
        (variant(keys=[1, False]), "keys[1] must be an int64 integer; got false"),
        (variant(keys=[1, "2"]), 'keys[1] must be an int64 integer; got "2"'),
        (variant(keys=[None]), "keys[0] must be an int64 integer; got null"),
        (
            variant(keys=[3, -(2**63) - 1]),
            "keys[1] is outside the int64 range "
            "[-9223372036854775808, 9223372036854775807]; got -9223372036854775809",
        ),
        (variant(input_len=_DROP), "missing required field 'input_len' (required for type 'get')"),
        (
            variant(type="request", input_len=_DROP),
            "missing required field 'input_len' (required for type 'request')",
        ),
        (variant(input_len=0), "field 'input_len' must be an integer > 0; got 0"),
        (variant(input_len="4"), "field 'input_len' must be an integer > 0; got \"4\""),
        (variant(type="write", input_len=-1), "field 'input_len' must be an integer >= 0; got -1"),
    ],
)
def test_standard_reader_errors(tmp_path: Path, line: str, reason: str) -> None:
    good = variant()
    path = write_lines(tmp_path / "std.jsonl", [good, "", line])
    reader = read_standard(path)
    assert next(reader) == TraceEvent(1, "get", "a", "1", 5, [1], 4)
    with pytest.raises(LocatedError) as info:
        next(reader)
    assert str(info.value) == f"{path}:3: {reason}"
    # The line-level parser gives the same verdict.
    with pytest.raises(LocatedError) as again:
        parse_standard_line(line, 3, path)
    assert str(again.value) == str(info.value)


def test_parse_standard_line_blank_and_long_value_shortened() -> None:
    assert parse_standard_line("", 1, "p") is None
    assert parse_standard_line(" \t\r\n", 1, "p") is None
    with pytest.raises(LocatedError) as info:
        parse_standard_line(variant(instance_id=["x" * 100]), 9, "p")
    assert str(info.value) == (
        "p:9: field 'instance_id' must be a non-empty string; got " + '["' + "x" * 75 + "..."
    )


def test_format_standard_event_matches_compact_json() -> None:
    event = TraceEvent(3, "get", 'inst "é"', "t\n1", 17, [1, -2, 2**63 - 1], 40)
    line = format_standard_event(event)
    expected = {
        "type": "get",
        "instance_id": 'inst "é"',
        "trace_id": "t\n1",
        "timestamp_ns": 17,
        "keys": [1, -2, 2**63 - 1],
        "input_len": 40,
    }
    assert line == json.dumps(expected, separators=(",", ":")) + "\n"
    assert format_standard_event(event, 99) == line.replace(
        '"timestamp_ns":17', '"timestamp_ns":99'
    )
    assert parse_standard_line(line, 3, "p") == event


# ----------------------------------------------------------------------------- LMCache

FP16_SHAPE = [2, 32, 256, 8, 128]  # K/V x layers x chunk tokens x KV heads x head dim


def lm(
    ts: float,
    rid: str,
    model: str = "m1",
    hashes: list[str] | None = None,
    seq_len: int = 600,
    chunk_size: int = 256,
    dtypes: list[str] | None = None,
    shapes: list[list[int]] | None = None,
    separators: tuple[str, str] = (", ", ": "),
    **extra: object,
) -> str:
    """One LMCache lookup line (LMCache's field order and, by default, ``json.dumps``
    separators); ``extra`` fields are added or replace."""
    obj = {
        "timestamp": ts,
        "request_id": rid,
        "model_name": model,
        "chunk_size": chunk_size,
        "seq_len": seq_len,
        "dtypes": dtypes if dtypes is not None else ["torch.float16"],
        "shapes": shapes if shapes is not None else [FP16_SHAPE],
        "chunk_hashes": hashes if hashes is not None else ["0x1", "0x2"],
    }
    obj.update(extra)
    return json.dumps(obj, separators=separators)


def test_lmcache_hex_parsing_low_64_bits_signed(tmp_path: Path) -> None:
    hashes = [
        "0x10",
        "ff",
        "0XAbC",
        "0xffffffffffffffff",
        "8000000000000000",
        "0x123456789abcdef0fedcba9876543210",
    ]
    path = write_lines(tmp_path / "log.jsonl", [lm(1.5, "r1", hashes=hashes, seq_len=1536)])
    trace = read_lmcache(path)
    assert isinstance(trace, LMCacheTrace)
    assert trace.events == [
        TraceEvent(
            1,
            "request",
            "m1",
            "r1",
            1_500_000_000,
            [16, 255, 0xABC, -1, -(2**63), -81985529216486896],
            1536,
        )
    ]
    assert trace.models == {"m1": ModelInfo(256, 33_554_432)}
    assert trace.files == [path]


@pytest.mark.parametrize(
    ("dtypes", "shapes", "expected"),
    [
        (["torch.float16"], [FP16_SHAPE], 33_554_432),
        (["torch.bfloat16"], [FP16_SHAPE], 33_554_432),
        (["bfloat16"], [[2, 32, 256, 8, 128]], 33_554_432),
        (["torch.float8_e4m3fn"], [FP16_SHAPE], 16_777_216),
        (["float8_e5m2"], [[3, 5]], 15),
        (["torch.float32"], [[2, 4, 16, 2, 8]], 8192),
        (["torch.bfloat16", "torch.float32", "uint8"], [[2, 3], [5], [7]], 6 * 2 + 5 * 4 + 7),
    ],
)
def test_lmcache_bytes_per_chunk(tmp_path: Path, dtypes, shapes, expected: int) -> None:
    path = write_lines(tmp_path / "log.jsonl", [lm(1.0, "r", dtypes=dtypes, shapes=shapes)])
    assert read_lmcache(path).models == {"m1": ModelInfo(256, expected)}


def test_dtype_size_table() -> None:
    assert [dtype_size(d) for d in ("float32", "torch.fp32", "half", "torch.bfloat16")] == [
        4,
        4,
        2,
        2,
    ]
    assert [dtype_size(d) for d in ("float8_e4m3fnuz", "torch.float8_e5m2", "int8")] == [1, 1, 1]
    assert dtype_size("complex64") is None
    assert dtype_size("torch.") is None


def test_lmcache_unknown_dtype_error_and_override(tmp_path: Path) -> None:
    lines = [
        lm(1.0, "r1"),
        lm(2.0, "r2", dtypes=["torch.float16", "torch.complex64"], shapes=[[2], [3]]),
    ]
    path = write_lines(tmp_path / "log.jsonl", lines)
    expect_error(
        read_lmcache,
        path,
        match_text=f"{path}:2: field 'dtypes[1]' is an unknown dtype \"torch.complex64\"; "
        "give the KV bytes per chunk explicitly (kv_bytes_per_chunk / --kv-bytes-per-chunk)",
    )
    trace = read_lmcache(path, kv_bytes_per_chunk=1000)
    assert trace.models == {"m1": ModelInfo(256, 1000)}
    assert [e.trace_id for e in trace.events] == ["r1", "r2"]
    # With the override, dtypes/shapes are not needed at all.
    bare = json.loads(lm(3.0, "r3"))
    del bare["dtypes"], bare["shapes"]
    path2 = write_lines(tmp_path / "bare.jsonl", [json.dumps(bare)])
    assert read_lmcache(path2, kv_bytes_per_chunk=7).models == {"m1": ModelInfo(256, 7)}
    expect_error(read_lmcache, path2, match_text=f"{path2}:1: missing required field 'dtypes'")
    with pytest.raises(ValueError, match="kv_bytes_per_chunk must be an integer > 0, got 0"):
        read_lmcache(path2, kv_bytes_per_chunk=0)


def test_lmcache_model_filter(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "log.jsonl",
        [
            lm(1.0, "a1", model="A"),
            # Model B has a dtype we do not know: irrelevant when filtering on A.
            lm(2.0, "b1", model="B", dtypes=["mystery"], shapes=[[4]]),
            lm(3.0, "a2", model="A", hashes=["0x3"], seq_len=300),
        ],
    )
    trace = read_lmcache(path, model="A")
    assert [(e.instance_id, e.trace_id, e.keys, e.input_len) for e in trace.events] == [
        ("A", "a1", [1, 2], 600),
        ("A", "a2", [3], 300),
    ]
    assert trace.models == {"A": ModelInfo(256, 33_554_432)}
    expect_error(
        read_lmcache,
        path,
        model="C",
        match_text=f"{path}:0: no events of model 'C'; models present: 'A', 'B'",
    )


def test_lmcache_directory_merge_and_stable_sort(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    write_lines(
        logs / "lookup_hashes_0.jsonl",
        [lm(1717000000.5, "x1"), lm(1717000002.0, "x2"), lm(1717000003.0, "x3")],
    )
    write_lines(
        logs / "lookup_hashes_1.jsonl",
        [lm(1717000002.0, "y1", model="m2"), lm(1717000000.25, "y2", model="m2")],
    )
    write_lines(logs / "other.jsonl", ["this file is not read"])
    trace = read_lmcache(logs)
    assert [(e.trace_id, e.timestamp_ns, e.line_no) for e in trace.events] == [
        ("y2", 1_717_000_000_250_000_000, 2),
        ("x1", 1_717_000_000_500_000_000, 1),
        ("x2", 1_717_000_002_000_000_000, 2),  # tie: the earlier file first
        ("y1", 1_717_000_002_000_000_000, 1),
        ("x3", 1_717_000_003_000_000_000, 3),
    ]
    assert trace.models == {"m1": ModelInfo(256, 33_554_432), "m2": ModelInfo(256, 33_554_432)}
    assert trace.files == [str(logs / "lookup_hashes_0.jsonl"), str(logs / "lookup_hashes_1.jsonl")]


def test_lmcache_timestamp_rounding_and_default_request_id(tmp_path: Path) -> None:
    no_id = json.loads(lm(1.0000000006, "unused"))
    del no_id["request_id"]
    path = write_lines(
        tmp_path / "lookup_hashes_7.jsonl",
        [lm(1717000000.123456, "r1"), lm(1.0000000004, "r2"), json.dumps(no_id), lm(3, "r4")],
    )
    events = read_lmcache(path).events
    assert [(e.trace_id, e.timestamp_ns) for e in events] == [
        ("r2", 1_000_000_000),
        ("lookup_hashes_7.jsonl:3", 1_000_000_001),
        ("r4", 3_000_000_000),
        ("r1", 1_717_000_000_123_456_000),
    ]


@pytest.mark.parametrize(
    ("line2", "reason"),
    [
        (
            lm(2.0, "r2", chunk_size=128, hashes=["1", "2", "3", "4"]),
            "model 'm1': chunk_size 128 differs from 256 first seen at {path}:1",
        ),
        (
            lm(2.0, "r2", dtypes=["float32"]),
            "model 'm1': bytes per chunk 67108864 differs from 33554432 first seen at {path}:1",
        ),
        (
            lm(2.0, "r2", hashes=["0x1"]),
            "field 'chunk_hashes' has 1 entries but seq_len 600 // chunk_size 256 = 2 complete "
            "chunks",
        ),
        (
            lm(2.0, "r2", hashes=["0x1", "0xzz"]),
            "field 'chunk_hashes[1]' must be a hex string (optional 0x); got \"0xzz\"",
        ),
        (
            lm(2.0, "r2", hashes=["-1", "2"]),
            "field 'chunk_hashes[0]' must be a hex string (optional 0x); got \"-1\"",
        ),
        (
            lm(2.0, "r2", hashes=["1_0", "2"]),
            "field 'chunk_hashes[0]' must be a hex string (optional 0x); got \"1_0\"",
        ),
        (
            lm(2.0, "r2", hashes=["1", 2]),
            "field 'chunk_hashes[1]' must be a hex string (optional 0x); got 2",
        ),
        (lm(-1, "r2"), "field 'timestamp' must be a number of seconds >= 0; got -1"),
        (lm(2.0, "r2", seq_len=0, hashes=[]), "field 'seq_len' must be an integer > 0; got 0"),
        (lm(2.0, "r2", chunk_size=0), "field 'chunk_size' must be an integer > 0; got 0"),
        (lm(2.0, "r2", model=""), "field 'model_name' must be a non-empty string; got \"\""),
        (lm(2.0, 17), "field 'request_id' must be a non-empty string; got 17"),
        (
            lm(2.0, "r2", shapes=[FP16_SHAPE, [1]]),
            "field 'shapes' must be an array of 1 shapes (one per dtype); got [[2, 32, 256, 8, "
            "128], [1]]",
        ),
        (
            lm(2.0, "r2", shapes=[[2, -1]]),
            "field 'shapes[0]' must be an array of integers >= 0; got [2, -1]",
        ),
        (
            lm(2.0, "r2", shapes=[[2, 0]]),
            'dtypes ["torch.float16"] and shapes [[2, 0]] give 0 bytes per chunk',
        ),
        (
            lm(2.0, "r2", dtypes="float16"),
            "field 'dtypes' must be a non-empty array of strings; got \"float16\"",
        ),
    ],
)
def test_lmcache_errors(tmp_path: Path, line2: str, reason: str) -> None:
    path = write_lines(tmp_path / "log.jsonl", [lm(1.0, "r1"), line2])
    expect_error(read_lmcache, path, match_text=f"{path}:2: " + reason.format(path=path))


def test_lmcache_empty_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "lookup_hashes.txt").write_text("", encoding="utf-8")
    expect_error(
        read_lmcache,
        tmp_path,
        match_text=f"{tmp_path}:0: directory holds no lookup_hashes_*.jsonl files",
    )


def test_integers_beyond_int64_are_reported_exactly_not_as_floats(tmp_path):
    path = tmp_path / "t.jsonl"
    for key in ("-9223372036854775809", "18446744073709551616", "123456789012345678901234"):
        path.write_text(
            '{"type": "get", "instance_id": "a", "timestamp_ns": 5, "keys": [1, ' + key + "], "
            '"input_len": 4}\n'
        )
        with pytest.raises(
            LocatedError, match=f"keys\\[1\\] is outside the int64 range .*got {key}$"
        ):
            list(read_standard(path))
