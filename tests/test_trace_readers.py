"""The trace-reader registry: every registered format reads its example, round-trips through
the standard format, is recognised by ``detect_format`` and reports a bad line at its line;
unknown names are clear errors; the package's modules stay small, documented and acyclic;
its capabilities agree with what each reader does, and no code outside the package tests a
format's name (an AST walk of ``litehit_service.offline`` and ``litehit_service.commands``)."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest
from layout import iter_modules

from litehit_core import LocatedError
from litehit_service.commands import simulate as simulate_command
from litehit_service.litehit import config
from litehit_service.lmcache.simulator import simulate
from litehit_service.traces.convert import pipeline as convert
from litehit_service.traces.logs import CONVERTERS
from litehit_service.traces.readers import (
    EVENT_KINDS,
    INT64_MAX,
    INT64_MIN,
    READERS,
    TraceEvent,
    TraceReader,
    detect_format,
    format_names,
    format_standard_event,
    get_reader,
    parse_lines,
    read_standard,
)
from litehit_service.traces.readers.jsonl import parse_numbered

PACKAGE = Path(__file__).resolve().parents[1] / "litehit_service" / "traces" / "readers"
NAMES = sorted(READERS)


def write_example(tmp_path: Path, reader: TraceReader, extra: bytes = b"") -> Path:
    path = tmp_path / f"{reader.name}.jsonl"
    path.write_bytes(reader.example + extra)
    return path


def test_the_registry_holds_the_formats_the_commands_offer() -> None:
    assert format_names() == tuple(READERS) == ("standard", "mooncake", "lmcache")
    for offered in (config.TRACE_FORMATS, simulate.FORMATS):
        assert set(offered) <= set(READERS), offered
    assert set(convert.FORMATS) == set(READERS) | set(CONVERTERS)
    # every command offers every format, in its documented order
    assert config.TRACE_FORMATS == format_names()
    # convert: the readers, the log converters, the output format last
    assert convert.FORMATS == (
        "mooncake",
        "lmcache",
        "publisher-log",
        "qwen-bailian",
        "text",
        "standard",
    )
    assert simulate.FORMATS == tuple(sorted(READERS))  # name order: lmcache (default) first


def test_simulate_and_sweep_take_every_simulator_format() -> None:
    parser = argparse.ArgumentParser()
    simulate_command.add_input_options(parser)
    for name in simulate.FORMATS:
        args = parser.parse_args(["-i", "x", "--trace-format", name])
        assert args.trace_format == name
    with pytest.raises(SystemExit):
        parser.parse_args(["-i", "x", "--trace-format", "csv"])


@pytest.mark.parametrize("name", NAMES)
def test_capabilities_agree_with_what_the_reader_does(name: str, tmp_path: Path) -> None:
    reader = READERS[name]
    assert reader.whole_input == (reader.line_parser() is None)
    assert reader.sizes_in_trace == (reader.default_block_size is None)
    assert reader.names_instances == ("instance_id" not in reader.options)
    if reader.default_block_size is not None:
        assert type(reader.default_block_size) is int and reader.default_block_size > 0
    path = write_example(tmp_path, reader)
    if not reader.sizes_in_trace:
        with pytest.raises(NotImplementedError, match=f"{name!r} does not state its key sizes"):
            reader.read_sized(path)
        return
    assert "block_size" not in reader.options
    events, sizes = reader.read_sized(path)
    assert events == list(reader.read(path))
    assert {e.instance_id for e in events} == set(sizes)
    for chunk, kv_bytes in sizes.values():
        assert chunk > 0 and kv_bytes > 0


def test_default_block_sizes() -> None:
    assert READERS["standard"].default_block_size == config.DEFAULT_BLOCK_SIZE == 256
    assert READERS["mooncake"].default_block_size == convert.DEFAULT_MOONCAKE_BLOCK_SIZE == 512
    assert convert.DEFAULT_STANDARD_BLOCK_SIZE == config.DEFAULT_BLOCK_SIZE


# ---------------------------------------------------------------- no format-name tests

WALKED = ("litehit_service",)
"""The packages whose code must ask a reader, not test a format's name (every one but the
readers' own, :data:`TRACES`)."""
TRACES = "litehit_service.traces.readers"
FORMAT_NAMES = frozenset(format_names())


def _constants(node: ast.AST) -> set[str]:
    """String constants of an operand (itself, or the items of a literal tuple/list/set)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {n.value for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def format_name_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every test of a registered format name in ``tree``: a comparison
    (``==``, ``!=``, ``in``, ...) with one, a ``match`` case on one, a lookup by one, or a
    table keyed by them."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            names = set().union(*map(_constants, [node.left, *node.comparators]))
            if names & FORMAT_NAMES:
                found.append((node.lineno, f"compares with {sorted(names & FORMAT_NAMES)}"))
        elif isinstance(node, ast.MatchValue):
            names = _constants(node.value) & FORMAT_NAMES
            if names:
                found.append((node.lineno, f"matches {sorted(names)}"))
        elif isinstance(node, ast.Subscript):
            names = _constants(node.slice) & FORMAT_NAMES
            if names:
                found.append((node.lineno, f"looks up {sorted(names)}"))
        elif isinstance(node, ast.Dict):
            names = set().union(*(_constants(k) for k in node.keys if k is not None))
            if names & FORMAT_NAMES:
                found.append((node.lineno, f"table keyed by {sorted(names & FORMAT_NAMES)}"))
    return found


def test_no_code_outside_the_trace_package_tests_a_format_name() -> None:
    walked = []
    offenders = []
    for module in iter_modules():
        inside = any(module.name == p or module.name.startswith(p + ".") for p in WALKED)
        if not inside or module.name == TRACES or module.name.startswith(TRACES + "."):
            continue
        walked.append(module.name)
        for line, what in format_name_tests(module.tree()):
            offenders.append(f"{module.path}:{line}: {what}")
    assert {"litehit_service.litehit.replay", "litehit_service.commands.convert"} <= set(walked)
    assert offenders == [], "format names tested outside traces.readers:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "source, expected",
    [
        ('if fmt == "lmcache": pass', "compares with ['lmcache']"),
        ('ok = "mooncake" != config.trace_format', "compares with ['mooncake']"),
        ('x = fmt in ("standard", "csv")', "compares with ['standard']"),
        ('match fmt:\n    case "mooncake": pass', "matches ['mooncake']"),
        ('SIZE["standard"]', "looks up ['standard']"),
        ('SIZE = {"mooncake": 512}', "table keyed by ['mooncake']"),
        ('fmt == other or fmt == "lmcacheX" or reader.whole_input', None),
    ],
)
def test_the_walker_sees_each_kind_of_format_name_test(source: str, expected: str | None) -> None:
    found = format_name_tests(ast.parse(source))
    assert [what for _, what in found] == ([expected] if expected else [])


@pytest.mark.parametrize("name", NAMES)
def test_reader_is_named_documented_and_has_an_example(name: str) -> None:
    reader = READERS[name]
    assert isinstance(reader, TraceReader)
    assert reader.name == name and re.fullmatch(r"[a-z][a-z0-9-]*", name)
    assert get_reader(name) is reader
    doc = type(reader).__dict__.get("__doc__")  # its own, not TraceReader's
    assert doc and len(doc.split()) >= 10
    assert reader.example.endswith(b"\n")
    assert len(set(reader.options)) == len(reader.options)


@pytest.mark.parametrize("name", NAMES)
def test_reader_reads_its_example(name: str, tmp_path: Path) -> None:
    reader = READERS[name]
    path = write_example(tmp_path, reader)
    events = list(reader.read(path))
    assert events
    for ev in events:
        assert type(ev) is TraceEvent
        assert ev.kind in EVENT_KINDS and ev.instance_id and type(ev.trace_id) is str
        assert 0 <= ev.timestamp_ns <= INT64_MAX and ev.input_len >= 0 and ev.line_no >= 1
        assert all(type(k) is int and INT64_MIN <= k <= INT64_MAX for k in ev.keys)
    # the same through the generic entry points
    assert detect_format(path) is reader
    assert list(reader.read(str(path), max_line_bytes=1 << 20)) == events


@pytest.mark.parametrize("name", NAMES)
def test_reader_round_trips_through_the_standard_format(name: str, tmp_path: Path) -> None:
    reader = READERS[name]
    events = list(reader.read(write_example(tmp_path, reader)))
    out = tmp_path / "standard.jsonl"
    # the standard format needs timestamp_ns > 0: shift by 1 ns as the converter does
    out.write_text("".join(format_standard_event(e, e.timestamp_ns + 1) for e in events))
    back = list(read_standard(out))
    assert [e._replace(line_no=0, timestamp_ns=e.timestamp_ns - 1) for e in back] == [
        e._replace(line_no=0) for e in events
    ]


@pytest.mark.parametrize("name", NAMES)
def test_line_parser_agrees_with_read(name: str, tmp_path: Path) -> None:
    reader = READERS[name]
    parse = reader.line_parser()
    if parse is None:
        with pytest.raises(ValueError, match=f"{name!r} cannot be parsed line by line"):
            parse_lines([], 1, "x", name, 512, "default")
        return
    path = write_example(tmp_path, reader)
    lines = reader.example.splitlines(keepends=True)
    events, error = parse_numbered(lines, 1, str(path), parse)
    assert error is None and events == list(reader.read(path))
    plain, error = parse_lines(lines, 1, str(path), name, 512, "default", True)
    assert error is None and plain == [tuple(e) for e in events]


@pytest.mark.parametrize("name", NAMES)
def test_bad_line_is_reported_at_its_line(name: str, tmp_path: Path) -> None:
    reader = READERS[name]
    path = write_example(tmp_path, reader, b"[1]\n")
    bad_line = reader.example.count(b"\n") + 1
    with pytest.raises(LocatedError) as info:
        list(reader.read(path))
    assert str(info.value) == f"{path}:{bad_line}: expected a JSON object, got array [1]"


def test_mooncake_options_reach_the_reader_and_the_line_parser(tmp_path: Path) -> None:
    reader = get_reader("mooncake")
    lines = [b'{"timestamp": 1, "input_length": 600, "hash_ids": [4, 5, 6]}\n']
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"".join(lines))
    events = list(reader.read(path, block_size=256, instance_id="m"))
    assert events == [TraceEvent(1, "request", "m", "1", 1_000_000, [4, 5], 600)]
    assert parse_lines(lines, 1, str(path), "mooncake", 256, "m") == (events, None)
    assert reader.line_parser(block_size=256, instance_id="m")(lines[0], 1, "x") == events[0]


@pytest.mark.parametrize("value", ["nope", "", "Standard", None, 3])
def test_unknown_format_names_the_value_and_the_known_formats(value: object) -> None:
    expected = f"unknown trace format {value!r}; known formats: 'standard', 'mooncake', 'lmcache'"
    with pytest.raises(ValueError) as info:
        get_reader(value)  # type: ignore[arg-type]
    assert str(info.value) == expected
    with pytest.raises(ValueError) as info:
        parse_lines([b"{}\n"], 1, "x", value, 512, "default")  # type: ignore[arg-type]
    assert str(info.value) == expected


def test_detect_format_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"\n  \n")
    with pytest.raises(LocatedError, match=r"empty\.jsonl:0: cannot tell the trace format"):
        detect_format(empty)
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'\n{"a": 1}\n')
    known = "'standard', 'mooncake', 'lmcache'"
    with pytest.raises(LocatedError) as info:
        detect_format(other)
    assert str(info.value) == (
        f"{other}:2: cannot tell the trace format: no format matches (known: {known})"
    )
    both = tmp_path / "both.jsonl"
    both.write_bytes(b'{"type": "get", "keys": [], "hash_ids": [], "input_length": 1}\n')
    with pytest.raises(LocatedError, match="'standard' and 'mooncake' matches"):
        detect_format(both)
    logs = tmp_path / "logs"
    logs.mkdir()
    with pytest.raises(LocatedError, match=r"logs:0: directory holds no \*\.jsonl files"):
        detect_format(logs)
    (logs / "lookup_hashes_0.jsonl").write_bytes(READERS["lmcache"].example)
    assert detect_format(logs) is READERS["lmcache"]


def test_package_modules_are_small_documented_and_import_no_private_names() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    # one module per format, in this package
    homes = {type(r).__module__.rpartition(".") for r in READERS.values()}
    assert {home for home, _, _ in homes} == {"litehit_service.traces.readers"}
    assert len(homes) == len(READERS)
    assert {p.stem for p in modules} >= {"__init__", "registry", "records", "jsonl"}
    for path in modules:
        text = path.read_text()
        tree = ast.parse(text)
        assert ast.get_docstring(tree), path
        assert text.count("\n") < 600, path
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, (path, node.module, private)
                # no module imports the package itself: no cycle through __init__
                assert node.module != "litehit_service.traces.readers", path
