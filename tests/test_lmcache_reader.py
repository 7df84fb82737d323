"""read_lmcache's column-wise path against its reference parser, the LMCache-log writer
(``bench/_trace.py``, loaded by path: the one writer, shared with the benchmarks), the int64
key mapping of the reader before the column-wise path, and the partial tail chunk's hash."""

from __future__ import annotations

import gc
import importlib.util
import json
import random
from itertools import chain
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_traces import lm

from litehit_core import DEFAULT_MAX_LINE_BYTES, LocatedError
from litehit_service.traces.readers import (
    INT64_MAX,
    LMCacheTrace,
    ModelInfo,
    TraceEvent,
    read_lmcache,
    read_mooncake,
    trace_lines,
)
from litehit_service.traces.readers.lmcache import LMCacheLoader
from litehit_service.traces.readers.lmcache_columns import hex_records_to_keys, many_seconds_to_ns
from litehit_service.traces.readers.lmcache_fields import seconds_to_ns

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
FP16 = (["torch.float16"], [[2, 32, 256, 8, 128]])  # 32 MiB per 256-token chunk


def load_bench_trace() -> ModuleType:
    """``bench/_trace.py`` as a module (the benchmarks' helpers; not a package)."""
    spec = importlib.util.spec_from_file_location("litehit_bench_trace", ROOT / "bench/_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench_trace = load_bench_trace()
write_lmcache_log = bench_trace.write_lmcache_log


def old_key(text: str) -> int:
    """The key the reader gave a hash before the column-wise path (kept as the oracle):
    ``int(text, 16)``, low 64 bits, as a signed int64."""
    value = int(text, 16) & (2**64 - 1)
    return value - 2**64 if value > INT64_MAX else value


def reference(path: Path, model: str | None = None, kv: int | None = None) -> Any:
    """Every line through the reference parser (``LMCacheLoader.line``), then
    read_lmcache's last steps; the result's (events, models), or the error text."""
    reader = LMCacheLoader(model, kv)
    try:
        with open(path, "rb") as fh:
            lines = chain.from_iterable(trace_lines(fh, str(path), DEFAULT_MAX_LINE_BYTES))
            for line_no, text in enumerate(lines, 1):
                reader.line(text, line_no, str(path))
    except LocatedError as exc:
        return str(exc)
    if model is not None and not reader.events:
        present = ", ".join(repr(m) for m in sorted(reader.all_models)) or "none"
        return f"{path}:0: no events of model {model!r}; models present: {present}"
    return sorted(reader.events, key=lambda e: e.timestamp_ns), reader.models


def fast(path: Path, model: str | None = None, kv: int | None = None) -> Any:
    """read_lmcache's (events, models), or the error text."""
    try:
        trace = read_lmcache(path, model, kv)
    except LocatedError as exc:
        return str(exc)
    return trace.events, trace.models


def column_lines(path: Path, model: str | None = None, kv: int | None = None) -> int:
    """How many lines of ``path`` the reader takes column-wise."""
    reader = LMCacheLoader(model, kv)
    with open(path, "rb") as fh:
        reader.read(fh, str(path), DEFAULT_MAX_LINE_BYTES)
    return reader.column_lines


def line(ts: float = 1.5, rid: str = "r", **fields: Any) -> str:
    """One LMCache lookup line (:func:`test_traces.lm`, ts and rid defaulted)."""
    return lm(ts, rid, **fields)


def h16(value: int) -> str:
    return f"0x{value & (2**64 - 1):016x}"


# ----------------------------------------------------------------------------- writer


def test_writer_lines_are_lmcache_lookup_lines(tmp_path: Path) -> None:
    path = tmp_path / "lookup_hashes_0.jsonl"
    requests = [(0.0, [0, 1, 2], 1100), (1.234, [0, -1, 7], 1024), (2, [5], 100)]
    assert write_lmcache_log(path, requests) == 3
    assert path.read_text().splitlines() == [
        '{"timestamp": 0.0, "request_id": "req-0", "model_name": "mooncake", "chunk_size": '
        '512, "seq_len": 1100, "dtypes": ["bfloat16"], "shapes": [[32, 512, 2048]], '
        '"chunk_hashes": ["0x0000000000000000", "0x0000000000000001"]}',
        '{"timestamp": 1.234, "request_id": "req-1", "model_name": "mooncake", "chunk_size": '
        '512, "seq_len": 1024, "dtypes": ["bfloat16"], "shapes": [[32, 512, 2048]], '
        '"chunk_hashes": ["0x0000000000000000", "0xffffffffffffffff"]}',
        '{"timestamp": 2, "request_id": "req-2", "model_name": "mooncake", "chunk_size": '
        '512, "seq_len": 100, "dtypes": ["bfloat16"], "shapes": [[32, 512, 2048]], '
        '"chunk_hashes": []}',
    ]
    trace = read_lmcache(path)
    assert trace.models == {"mooncake": ModelInfo(512, 64 * MIB)}
    assert [(e.trace_id, e.timestamp_ns, e.keys, e.input_len) for e in trace.events] == [
        ("req-0", 0, [0, 1], 1100),
        ("req-1", 1_234_000_000, [0, -1], 1024),
        ("req-2", 2_000_000_000, [], 100),
    ]
    assert column_lines(path) == 3


def test_writer_options_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write_lmcache_log(path, [(1.0, [3, 4, 5], 1100)], 512, "m", 8 * MIB, tail_hash=True)
    obj = json.loads(path.read_text())
    assert (obj["model_name"], obj["shapes"], obj["chunk_hashes"][-1]) == (
        "m",
        [[32, 512, 256]],
        "0x0000000000000005",
    )
    # The partial tail chunk's hash is read and dropped.
    assert read_lmcache(path).events[0].keys == [3, 4]
    assert read_lmcache(path).models == {"m": ModelInfo(512, 8 * MIB)}
    write_lmcache_log(path, [(1.0, [3, 4], 1024)], tail_hash=True)  # no partial chunk
    assert json.loads(path.read_text())["chunk_hashes"] == [h16(3), h16(4)]
    assert bench_trace.lmcache_shape(64 * MIB, 512) == [32, 512, 2048]
    assert bench_trace.lmcache_shape(6, 3) == [1, 3, 1]
    with pytest.raises(ValueError, match="request 0: 1 keys for seq_len 1024 .needs 2 chunks"):
        write_lmcache_log(path, [(1.0, [3], 1024)])
    with pytest.raises(ValueError, match="bytes_per_chunk 1000 is not a positive multiple"):
        write_lmcache_log(path, [(1.0, [3], 512)], bytes_per_chunk=1000)
    with pytest.raises(ValueError, match="chunk_size must be an integer > 0, got 0"):
        write_lmcache_log(path, [], chunk_size=0)


def test_mooncake_as_lmcache_log_round_trip(mooncake: Path, tmp_path: Path) -> None:
    path = tmp_path / "lookup_hashes_mooncake.jsonl"
    assert write_lmcache_log(path, bench_trace.mooncake_requests(mooncake)) == 12_031
    trace = read_lmcache(path)
    assert column_lines(path) == 12_031  # every line column-wise
    moon = list(read_mooncake(mooncake, 512))
    by_id = {e.trace_id: e for e in trace.events}
    assert len(by_id) == len(moon) == 12_031
    for i, m in enumerate(moon):
        e = by_id[f"req-{i}"]
        assert (e.timestamp_ns, e.keys, e.input_len) == (m.timestamp_ns, m.keys, m.input_len)
    assert trace.models == {"mooncake": ModelInfo(512, 64 * MIB)}
    assert [e.timestamp_ns for e in trace.events] == sorted(m.timestamp_ns for m in moon)
    # The keys are the old reader's, hash by hash, and the reference parser's.
    for text in path.read_text().splitlines()[::97]:
        obj = json.loads(text)
        assert by_id[obj["request_id"]].keys == [old_key(h) for h in obj["chunk_hashes"]]
    assert fast(path) == reference(path)


# ----------------------------------------------------------------------------- keys


@pytest.mark.parametrize("digits", [2, 4, 8, 14, 16, 18, 32, 64])
def test_fixed_width_hashes_give_the_old_keys(tmp_path: Path, digits: int) -> None:
    rng = random.Random(digits)
    lines = []
    for i in range(80):
        hashes = ["0x" + "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(digits))]
        hashes += [f"0x{'f' * digits}", f"0x{'0' * digits}"]
        lines.append(line(ts=i * 0.25, rid=f"r{i}", hashes=hashes, seq_len=768))
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    events = read_lmcache(path).events
    assert column_lines(path) == 80
    assert [e.keys for e in events] == [
        [old_key(h) for h in json.loads(text)["chunk_hashes"]] for text in lines
    ]
    assert fast(path) == reference(path)


def test_any_width_or_prefix_gives_the_old_keys(tmp_path: Path) -> None:
    rng = random.Random(7)
    lines = []
    for i in range(100):
        hashes = []
        for _ in range(3):
            digits = "".join(
                rng.choice("0123456789abcdefABCDEF") for _ in range(rng.randint(1, 40))
            )
            hashes.append(rng.choice(["0x", "0X", ""]) + digits)
        lines.append(line(ts=float(i), rid=f"r{i}", hashes=hashes, seq_len=800))
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert [e.keys for e in read_lmcache(path).events] == [
        [old_key(h) for h in json.loads(text)["chunk_hashes"]] for text in lines
    ]
    assert column_lines(path) == 0  # mixed widths: the reference parser, line by line


def test_hex_records_decoder() -> None:
    rec = b'"0x00000000000000ff", "0xffffffffffffffff", '
    assert hex_records_to_keys(rec, 2, 18, b", ") == [255, -1]
    assert hex_records_to_keys(b'"0x0102",', 1, 6, b",") == [0x0102]
    wide = b'"0x' + b"ab" * 8 + b"8000000000000001" + b'",'
    assert hex_records_to_keys(wide, 1, 34, b",") == [-(2**63) + 1]
    assert hex_records_to_keys(b'"0x012",', 1, 5, b",") is None  # odd digit count
    assert hex_records_to_keys(b'"0x01 2",', 1, 6, b",") is None  # fromhex skips spaces
    assert hex_records_to_keys(b'"0X0102","0X00fF",', 2, 6, b",") == [0x0102, 0xFF]
    assert hex_records_to_keys(b'"0102","00fF",', 2, 4, b",") == [0x0102, 0xFF]
    assert hex_records_to_keys(b'"0x0102","0X00ff",', 2, 6, b",") is None  # mixed prefixes
    assert hex_records_to_keys(b'"0x0102","000fff",', 2, 6, b",") is None
    assert hex_records_to_keys(b'"000fff","0x0102",', 2, 6, b",") is None
    assert hex_records_to_keys(b'"0x01g2",', 1, 6, b",") is None
    assert hex_records_to_keys(b'"0x",', 1, 2, b",") is None
    assert hex_records_to_keys(b"", 0, 6, b",") is None
    assert hex_records_to_keys(b'"0x0102";', 1, 6, b",") is None
    assert hex_records_to_keys(b'"0x0102",', 2, 6, b",") is None  # wrong count


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(0, 9.3e9, allow_nan=False),
            st.floats(0, 1e-3),
            st.integers(0, 2**53).map(lambda k: k / 1000),
            st.integers(0, 10**15).map(lambda k: k / 10**6),
        ),
        max_size=50,
    )
)
def test_many_seconds_to_ns_is_exact(seconds: list[float]) -> None:
    assert many_seconds_to_ns(seconds) == [seconds_to_ns(s) for s in seconds]


# ------------------------------------------------------------------ fast path = reference

GOOD = [h16(k) for k in range(40)]


def good_line(i: int) -> dict[str, Any]:
    return {
        "timestamp": 1717000000 + i * 0.001,
        "request_id": f"r{i}",
        "model_name": "m1" if i % 3 else "m2",
        "chunk_size": 256,
        "seq_len": 256 * (i % 5) + 100,
        "dtypes": FP16[0],
        "shapes": FP16[1],
        "chunk_hashes": GOOD[i % 7 : i % 7 + i % 5],
    }


def dumps(obj: Any) -> str:
    return json.dumps(obj)


# Each mutation turns a good line (as a dict) into a line of text; some stay valid, some
# take the reference path, some are errors.
MUTATIONS: dict[str, Any] = {
    "tail hash": lambda o: dumps({**o, "chunk_hashes": o["chunk_hashes"] + [h16(99)]}),
    "one hash too many": lambda o: dumps(
        {**o, "seq_len": 256 * len(o["chunk_hashes"]), "chunk_hashes": o["chunk_hashes"] + ["0x1"]}
    ),
    "one hash too few": lambda o: dumps({**o, "chunk_hashes": o["chunk_hashes"][1:]}),
    "bad hex": lambda o: dumps({**o, "seq_len": 300, "chunk_hashes": ["0x00000000000000zz"]}),
    "space in hash": lambda o: dumps({**o, "seq_len": 300, "chunk_hashes": ["0x0000000 00000001"]}),
    "upper 0X": lambda o: dumps({**o, "seq_len": 300, "chunk_hashes": ["0X00000000000000AB"]}),
    "no 0x": lambda o: dumps({**o, "seq_len": 300, "chunk_hashes": ["00000000000000ab"]}),
    "wide hash": lambda o: dumps({**o, "seq_len": 300, "chunk_hashes": ["0x" + "9a" * 32]}),
    "short hash": lambda o: dumps({**o, "seq_len": 300, "chunk_hashes": ["0x1"]}),
    "int hash": lambda o: dumps({**o, "seq_len": 300, "chunk_hashes": [5]}),
    "compact": lambda o: json.dumps(o, separators=(",", ":")),
    "hashes first": lambda o: dumps({"chunk_hashes": o["chunk_hashes"], **o}),
    "nested key": lambda o: dumps({**o, "extra": {"chunk_hashes": ["0x1"]}}),
    "key in a string": lambda o: dumps({**o, "request_id": '", "chunk_hashes": ["0x1"]}'}),
    "int timestamp": lambda o: dumps({**o, "timestamp": 1717000000}),
    "many decimals": lambda o: dumps({**o, "timestamp": 1.0000000006}),
    "tiny timestamp": lambda o: dumps({**o, "timestamp": 1e-7}),
    "huge timestamp": lambda o: dumps({**o, "timestamp": 9.3e9}),
    "negative timestamp": lambda o: dumps({**o, "timestamp": -1.0}),
    "bool timestamp": lambda o: dumps({**o, "timestamp": True}),
    "no request_id": lambda o: dumps({k: v for k, v in o.items() if k != "request_id"}),
    "empty request_id": lambda o: dumps({**o, "request_id": ""}),
    "float chunk_size": lambda o: dumps({**o, "chunk_size": 256.0}),
    "other chunk_size": lambda o: dumps({**o, "chunk_size": 128, "chunk_hashes": []}),
    "float in shapes": lambda o: dumps({**o, "shapes": [[2.0, 32, 256, 8, 128]]}),
    "true in shapes": lambda o: dumps({**o, "shapes": [[2, 32, 256, 8, 128, True]]}),
    "other shapes": lambda o: dumps({**o, "shapes": [[2, 32, 256, 8, 64]]}),
    "unknown dtype": lambda o: dumps({**o, "dtypes": ["complex64"]}),
    "no dtypes": lambda o: dumps({k: v for k, v in o.items() if k != "dtypes"}),
    "other model": lambda o: dumps({**o, "model_name": "m3"}),
    "non-ascii id": lambda o: dumps({**o, "request_id": "réq"}).replace("\\u00e9", "é"),
    "huge seq_len": lambda o: dumps({**o, "seq_len": 2**70}),
    "not json": lambda o: dumps(o)[:-1],
    "blank": lambda o: "   ",
    "trailing spaces": lambda o: dumps(o) + "  ",
    "space before ]": lambda o: dumps(o)[:-2] + " ]}",
    "array": lambda o: "[" + dumps(o) + "]",
}


def write_log(path: Path, texts: list[str], ending: str = "\n", final: bool = True) -> None:
    data = ending.join(texts) + (ending if final else "")
    path.write_bytes(data.encode("utf-8"))


@settings(max_examples=250, deadline=None)
@given(
    n_lines=st.integers(1, 150),
    changes=st.lists(
        st.tuples(st.integers(0, 149), st.sampled_from(sorted(MUTATIONS))), max_size=4
    ),
    ending=st.sampled_from(["\n", "\r\n"]),
    final=st.booleans(),
    model=st.sampled_from([None, "m1"]),
    kv=st.sampled_from([None, 1000]),
)
def test_fast_path_equals_reference(
    tmp_path_factory: pytest.TempPathFactory,
    n_lines: int,
    changes: list[tuple[int, str]],
    ending: str,
    final: bool,
    model: str | None,
    kv: int | None,
) -> None:
    texts = [dumps(good_line(i)) for i in range(n_lines)]
    for at, name in changes:
        if at < n_lines:
            texts[at] = MUTATIONS[name](good_line(at))
    path = tmp_path_factory.mktemp("log") / "lookup_hashes_0.jsonl"
    write_log(path, texts, ending, final)
    assert fast(path, model, kv) == reference(path, model, kv)


def test_every_mutation_alone_matches_the_reference(tmp_path: Path) -> None:
    """Each mutation at line 54 of 120, with and without a model filter or a bytes-per-chunk
    override; the lines laid out alike around it stay column-wise."""
    outcomes = {}
    for name, mutate in MUTATIONS.items():
        texts = [dumps(good_line(i)) for i in range(120)]
        texts[53] = mutate(good_line(53))  # 3 hashes, seq_len 868
        path = tmp_path / f"{len(outcomes)}.jsonl"
        write_log(path, texts)
        for model, kv in [("m1", None), (None, 1000), (None, None)]:
            result = fast(path, model, kv)
            assert result == reference(path, model, kv), name
        outcomes[name] = result if isinstance(result, str) else "ok"
        if outcomes[name] == "ok":
            assert column_lines(path) >= 120 - 2 * 32, name
    assert outcomes["bad hex"] == (
        f"{tmp_path}/3.jsonl:54: field 'chunk_hashes[0]' must be a hex string (optional "
        '0x); got "0x00000000000000zz"'
    )
    assert {n for n, o in outcomes.items() if o != "ok"} == {
        "one hash too many",
        "one hash too few",
        "bad hex",
        "space in hash",
        "int hash",
        "huge timestamp",
        "negative timestamp",
        "bool timestamp",
        "empty request_id",
        "float chunk_size",
        "other chunk_size",
        "float in shapes",
        "true in shapes",
        "other shapes",
        "unknown dtype",
        "no dtypes",
        "not json",
        "array",
        "huge seq_len",
    }


def test_first_bad_line_is_reported_across_chunks(tmp_path: Path) -> None:
    texts = [dumps(good_line(i)) for i in range(6000)]  # ~2.1 MB: 3 chunks of 1 MiB
    texts[4321] = MUTATIONS["bad hex"](good_line(4321))
    texts[5000] = MUTATIONS["negative timestamp"](good_line(5000))
    path = tmp_path / "log.jsonl"
    write_log(path, texts)
    expected = (
        f"{path}:4322: field 'chunk_hashes[0]' must be a hex string (optional 0x); "
        'got "0x00000000000000zz"'
    )
    assert fast(path) == reference(path) == expected
    texts[100] = MUTATIONS["negative timestamp"](good_line(100))
    write_log(path, texts)
    assert fast(path) == f"{path}:101: field 'timestamp' must be a number of seconds >= 0; got -1.0"
    texts[100] = dumps(good_line(100))
    texts[4321] = dumps(good_line(4321))
    write_log(path, texts)
    assert (
        fast(path)
        == reference(path)
        == (f"{path}:5001: field 'timestamp' must be a number of seconds >= 0; got -1.0")
    )
    texts[5000] = dumps(good_line(5000))
    write_log(path, texts)
    assert column_lines(path) == 6000
    assert fast(path) == reference(path)
    # Invalid UTF-8 is reported at its line, after the lines before it.
    data = path.read_bytes().replace(b'"r4321"', b'"r\xff321"')
    path.write_bytes(data.replace(b'"r100"', b'"r1\xc3"'))
    assert fast(path) == f"{path}:101: not valid UTF-8 (bad byte at column 46)"


def test_model_facts_and_first_seen_match_across_chunks(tmp_path: Path) -> None:
    texts = [dumps(good_line(i)) for i in range(6000)]
    texts[3001] = MUTATIONS["other shapes"](good_line(3001))
    path = tmp_path / "log.jsonl"
    write_log(path, texts)
    assert (
        fast(path)
        == reference(path)
        == (
            f"{path}:3002: model 'm1': bytes per chunk 16777216 differs from 33554432 first seen "
            f"at {path}:2"
        )
    )


def test_reader_pauses_and_restores_the_garbage_collector(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write_log(path, [dumps(good_line(i)) for i in range(3)])
    assert gc.isenabled()
    assert len(read_lmcache(path).events) == 3
    assert gc.isenabled()
    write_log(path, ["{"])
    with pytest.raises(LocatedError):
        read_lmcache(path)
    assert gc.isenabled()
    gc.disable()
    try:
        read_lmcache(tmp_path)  # a directory without logs: an error too
    except LocatedError:
        pass
    try:
        write_log(path, [dumps(good_line(i)) for i in range(3)])
        read_lmcache(path)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_result_type_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write_log(path, [line()])
    trace = read_lmcache(path)
    assert type(trace) is LMCacheTrace
    assert [type(e) for e in trace.events] == [TraceEvent]
    assert trace.events == [TraceEvent(1, "request", "m1", "r", 1_500_000_000, [1, 2], 600)]
    assert type(trace.events[0].keys) is list
