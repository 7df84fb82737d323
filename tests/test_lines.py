"""A bound on line length in every reader: the core line reader, each trace reader and the
facts reader refuse a line over ``max_line_bytes`` at its line, without reading it whole."""

from __future__ import annotations

import csv
import io
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from long_lines import fact, fact_of, lmc, moon, sparse_long_line, std, write

from litehit_core import (
    DEFAULT_MAX_LINE_BYTES,
    FACTS_HEADER,
    FactRow,
    FactsWriter,
    LocatedError,
    read_facts,
)
from litehit_core.lines import read_lines
from litehit_service.traces.readers import read_lmcache, read_mooncake, read_standard

MIB = 1024 * 1024


def too_long(path: Path | str, line_no: int, limit: int) -> str:
    return f"{path}:{line_no}: line is longer than {limit} bytes (max_line_bytes)"


class CountingReader(io.RawIOBase):
    """A binary file that counts the bytes handed out (what a reader has read)."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._inner.readinto(buffer)
        self.bytes_read += n
        return n


def collect(chunks: Iterable[list[bytes]]) -> tuple[list[bytes], LocatedError | None]:
    out: list[bytes] = []
    try:
        for lines in chunks:
            out += lines
    except LocatedError as exc:
        return out, exc
    return out, None


# ----------------------------------------------------------------------------- core reader


def test_default_is_64_mib() -> None:
    assert DEFAULT_MAX_LINE_BYTES == 67_108_864


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r", b""])
def test_a_line_of_exactly_the_limit_is_accepted(ending: bytes) -> None:
    data = b"ab\n" + b"x" * 10 + ending
    lines, error = collect(read_lines(io.BytesIO(data), "f", 10, chunk_bytes=4))
    assert error is None
    assert lines == [b"ab\n", b"x" * 10 + ending]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r", b""])
def test_one_byte_more_is_refused_at_its_line(ending: bytes) -> None:
    data = b"ab\n\ncd\n" + b"x" * 11 + ending + b"after\n"
    lines, error = collect(read_lines(io.BytesIO(data), "f", 10))
    assert lines == [b"ab\n", b"\n", b"cd\n"]  # every line before it was delivered first
    assert error is not None and str(error) == too_long("f", 4, 10)
    assert (error.path, error.line_no) == ("f", 4)


def test_the_limit_counts_bytes_not_characters() -> None:
    line = "é" * 5  # 5 characters, 10 bytes
    ok, error = collect(read_lines(io.BytesIO(line.encode() + b"\n"), "f", 10))
    assert error is None and ok == [line.encode() + b"\n"]
    _, error = collect(read_lines(io.BytesIO(line.encode() + b"\n"), "f", 9))
    assert error is not None and str(error) == too_long("f", 1, 9)


def test_universal_newlines_and_bom() -> None:
    data = b"\xef\xbb\xbfa\rb\r\nc\n\rd"
    assert collect(read_lines(io.BytesIO(data), "f", skip_bom=True)) == (
        [b"a\r", b"b\r\n", b"c\n", b"\r", b"d"],
        None,
    )
    assert collect(read_lines(io.BytesIO(data), "f"))[0][0] == b"\xef\xbb\xbfa\r"


def test_a_crlf_split_across_reads_stays_one_ending() -> None:
    for chunk_bytes in range(1, 8):
        data = b"abc\r\ndef\r\n\r\ng"
        lines, error = collect(read_lines(io.BytesIO(data), "f", 100, chunk_bytes=chunk_bytes))
        assert error is None and lines == [b"abc\r\n", b"def\r\n", b"\r\n", b"g"], chunk_bytes


def test_bad_limits_are_value_errors() -> None:
    for bad in (0, -1, 1.5, "10", True, None):
        with pytest.raises(ValueError, match="max_line_bytes must be an integer > 0"):
            read_lines(io.BytesIO(b""), "f", bad)  # type: ignore[arg-type]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\r", b"\r\n", b"\xc3\xa9"]), max_size=40),
    st.integers(1, 9),
    st.integers(1, 12),
)
def test_matches_splitlines_and_reads_at_most_limit_plus_one_of_a_long_line(
    parts: list[bytes], limit: int, chunk_bytes: int
) -> None:
    data = b"".join(parts)
    expected = data.splitlines(keepends=True)  # universal newlines, as text files split
    bad = next((i for i, line in enumerate(expected) if len(line.rstrip(b"\r\n")) > limit), None)
    fh = CountingReader(data)
    lines, error = collect(read_lines(fh, "p", limit, chunk_bytes=chunk_bytes))
    if bad is None:
        assert error is None and lines == expected
    else:
        assert lines == expected[:bad]
        assert error is not None and str(error) == too_long("p", bad + 1, limit)
        offset = sum(map(len, expected[:bad]))
        assert fh.bytes_read <= offset + limit + 1  # never more of the long line


def test_a_long_line_is_not_read_whole() -> None:
    head = b'{"a": 1}\n' * 3
    fh = CountingReader(head + b"x" * (8 * MIB) + b"\n")
    lines, error = collect(read_lines(fh, "p", 1024))
    assert len(lines) == 3 and error is not None and error.line_no == 4
    assert fh.bytes_read <= len(head) + 1024 + 1


# ----------------------------------------------------------------------------- readers


def read_all_standard(path: Path, limit: int) -> list[Any]:
    return list(read_standard(path, max_line_bytes=limit))


def read_all_mooncake(path: Path, limit: int) -> list[Any]:
    return list(read_mooncake(path, 4, max_line_bytes=limit))


def read_all_lmcache(path: Path, limit: int) -> list[Any]:
    return read_lmcache(path, kv_bytes_per_chunk=8, max_line_bytes=limit).events


def read_all_facts(path: Path, limit: int) -> list[Any]:
    return list(read_facts(path, max_line_bytes=limit))


READERS: list[tuple[str, Callable[[int, int], str], Callable[[Path, int], list[Any]]]] = [
    ("standard", std, read_all_standard),
    ("mooncake", moon, read_all_mooncake),
    ("lmcache", lmc, read_all_lmcache),
]


@pytest.mark.parametrize(("kind", "line", "read"), READERS, ids=[r[0] for r in READERS])
def test_trace_reader_refuses_a_2_mib_line(
    tmp_path: Path, kind: str, line: Callable[[int, int], str], read: Callable
) -> None:
    path = write(tmp_path / "t.jsonl", [line(1, 0), line(2, 0), line(3, 2 * MIB), line(4, 0)])
    with pytest.raises(LocatedError) as info:
        read(path, MIB)
    assert str(info.value) == too_long(path, 3, MIB)


@pytest.mark.parametrize(("kind", "line", "read"), READERS, ids=[r[0] for r in READERS])
def test_trace_reader_accepts_a_line_of_exactly_the_limit(
    tmp_path: Path, kind: str, line: Callable[[int, int], str], read: Callable
) -> None:
    path = write(tmp_path / "t.jsonl", [line(1, 0), line(2, MIB), line(3, 0)])
    assert len(read(path, MIB)) == 3
    with pytest.raises(LocatedError) as info:
        read(path, MIB - 1)
    assert str(info.value) == too_long(path, 2, MIB - 1)


@pytest.mark.parametrize(("kind", "line", "read"), READERS, ids=[r[0] for r in READERS])
def test_an_earlier_bad_line_is_reported_first(
    tmp_path: Path, kind: str, line: Callable[[int, int], str], read: Callable
) -> None:
    path = write(tmp_path / "t.jsonl", [line(1, 0), "{not json", line(3, 4096)])
    with pytest.raises(LocatedError) as info:
        read(path, 1024)
    assert info.value.line_no == 2 and "invalid JSON" in str(info.value)


def test_standard_reader_yields_events_before_the_long_line(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [std(1), std(2), std(3, 4096)])
    events = read_standard(path, max_line_bytes=1024)
    assert [next(events).timestamp_ns, next(events).timestamp_ns] == [1, 2]
    with pytest.raises(LocatedError, match=":3: line is longer than 1024 bytes"):
        next(events)


def test_lmcache_directory_names_the_file_and_its_line(tmp_path: Path) -> None:
    write(tmp_path / "lookup_hashes_0.jsonl", [lmc(1.0), lmc(2.0)])
    second = write(tmp_path / "lookup_hashes_1.jsonl", [lmc(3.0), lmc(4.0, 2 * MIB)])
    with pytest.raises(LocatedError) as info:
        read_lmcache(tmp_path, kv_bytes_per_chunk=8, max_line_bytes=MIB)
    assert str(info.value) == too_long(second, 2, MIB)


def test_readers_check_the_limit_at_call_time(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", [std(1)])
    for call in (
        lambda: read_standard(path, max_line_bytes=0),
        lambda: read_mooncake(path, max_line_bytes=-1),
        lambda: read_lmcache(path, max_line_bytes=0),
    ):
        with pytest.raises(ValueError, match="max_line_bytes must be an integer > 0"):
            call()
    with pytest.raises(ValueError, match="max_line_bytes must be an integer > 0"):
        list(read_facts(path, max_line_bytes=0))


def test_facts_reader_refuses_a_2_mib_line(tmp_path: Path) -> None:
    path = write(tmp_path / "f.csv", [FACTS_HEADER, fact("a"), fact_of(2 * MIB), fact("c")])
    with pytest.raises(LocatedError) as info:
        read_all_facts(path, MIB)
    assert str(info.value) == too_long(path, 3, MIB)


def test_facts_reader_accepts_a_row_of_exactly_the_limit(tmp_path: Path) -> None:
    path = write(tmp_path / "f.csv", [FACTS_HEADER, fact("a"), fact_of(MIB), fact("c")])
    rows = read_all_facts(path, MIB)
    assert [len(r.trace_id) for r in rows] == [1, MIB - len(fact("")), 1]
    with pytest.raises(LocatedError) as info:
        read_all_facts(path, MIB - 1)
    assert str(info.value) == too_long(path, 3, MIB - 1)


def test_facts_line_numbers_count_physical_lines(tmp_path: Path) -> None:
    # a quoted trace id spanning two lines: the long line after it is line 5
    path = tmp_path / "f.csv"
    with FactsWriter(path) as writer:
        writer.write(FactRow("two\nlines", "i", 1, 13, 4, 1024, ()))
        writer.write(FactRow("b", "i", 1, 13, 4, 1024, ()))
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(fact_of(4096) + "\n")
    assert len(read_all_facts(path, 4096)) == 3
    with pytest.raises(LocatedError) as info:
        read_all_facts(path, 4095)
    assert str(info.value) == too_long(path, 5, 4095)


def test_facts_header_over_the_limit(tmp_path: Path) -> None:
    path = write(tmp_path / "f.csv", [FACTS_HEADER, fact("a")])
    with pytest.raises(LocatedError) as info:
        read_all_facts(path, len(FACTS_HEADER) - 1)
    assert str(info.value) == too_long(path, 1, len(FACTS_HEADER) - 1)


# ----------------------------------------------------------------------------- memory


def peak_bytes(call: Callable[[], Any]) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        call()
    except LocatedError as exc:
        error: BaseException | None = exc
    else:
        error = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, peak


@pytest.mark.parametrize(
    ("name", "head", "read"),
    [
        ("standard", [std(1), std(2)], read_all_standard),
        ("mooncake", [moon(1), moon(2)], read_all_mooncake),
        ("lmcache", [lmc(1.0), lmc(2.0)], read_all_lmcache),
        ("facts", [FACTS_HEADER, fact("a")], read_all_facts),
    ],
)
def test_a_100_mib_line_fails_at_1_kib_without_being_read(
    tmp_path: Path, name: str, head: list[str], read: Callable
) -> None:
    path = sparse_long_line(tmp_path / "big", head)
    error, peak = peak_bytes(lambda: read(path, 1024))
    assert error is not None and str(error) == too_long(path, 3, 1024)
    assert peak < 4 * MIB, f"{name}: {peak} bytes allocated while failing"


def test_a_quoted_field_over_the_limit_across_lines_is_located(tmp_path: Path) -> None:
    # every physical line is within the limit, the quoted field spanning them is not
    limit = 200_000
    previous = csv.field_size_limit(131_072)  # the csv default; read_facts raises it
    try:
        check_field_over_limit(tmp_path, limit)
    finally:
        csv.field_size_limit(previous)
    assert csv.field_size_limit() == previous


def check_field_over_limit(tmp_path: Path, limit: int) -> None:
    half = "x" * 150_000
    path = write(tmp_path / "f.csv", [FACTS_HEADER, fact("a"), fact(f'"{half}\n{half}"')])
    with pytest.raises(LocatedError) as info:
        read_all_facts(path, limit)
    assert str(info.value) == f"{path}:4: malformed CSV: field larger than field limit ({limit})"


ODD_SEPARATORS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("odd", ODD_SEPARATORS)
def test_facts_split_lines_as_a_file_does(tmp_path: Path, odd: str) -> None:
    # str.splitlines would split at these; a file (and the csv module) does not
    path = tmp_path / "f.csv"
    rows = [FactRow(f"a{odd}b", f"i{odd}", 1, 13, 4, 1024, ()), FactRow("c", "i", 2, 8, 4, 8, ())]
    with FactsWriter(path) as writer:
        for row in rows:
            writer.write(row)
    assert list(read_facts(path)) == rows
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(fact_of(100) + "\n")
    with pytest.raises(LocatedError) as info:
        read_all_facts(path, 99)
    assert str(info.value) == too_long(path, 4, 99)
