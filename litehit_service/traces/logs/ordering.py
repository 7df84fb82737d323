"""Several log files as one stream in time order, with bounded memory.

Logs are written in roughly time order: one writer thread, a queue fed by many threads,
rotated files. :func:`time_ordered` gives the stable sort by time of the concatenation of
the files (ties keep file order, then line order) without holding the files: each file is
sorted within a sliding window (:func:`windowed`: a line may come up to ``window_ns``
after a later-stamped one) and the files are merged (:func:`heapq.merge`). A line later
than that is an error naming it and the window, never a silently different order.

Cost: O(lines x log(lines in a window)); memory: the lines of one window per file.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

from litehit_core import LocatedError
from litehit_service.traces.readers.jsonl import numbered_lines, open_trace

__all__ = ["Stamped", "expand_inputs", "parsed_lines", "time_ordered", "windowed"]

ADVANCE_EVERY = 4096
"""Lines between two progress-bar updates (a call per line would cost ~5 %)."""


class Stamped(NamedTuple):
    """One parsed line with its sort time: ``time`` (ns), ``path``, 1-based ``line_no``,
    ``value`` (what the converter parsed), ``stamp`` (the time as the line wrote it, e.g.
    ``trigger_time_us 1700000000000000``, for error messages)."""

    time: int
    path: str
    line_no: int
    value: Any
    stamp: str


LineParser = Callable[[bytes, int, str], "Stamped | None"]
"""``parse(line, line_no, path)``: a line to its :class:`Stamped` (``None``: nothing to
order, e.g. a blank or skipped line); a bad line raises LocatedError."""


def expand_inputs(paths: Sequence[str], suffix: str = "") -> list[str]:
    """``paths`` with each directory replaced by its regular files (not hidden, names ending
    with ``suffix``) in name order. A missing path, or a directory without such files, is a
    LocatedError at line 0. O(directory entries)."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(
                entry.path
                for entry in os.scandir(path)
                if entry.is_file() and not entry.name.startswith(".")
                and entry.name.endswith(suffix)
            )  # fmt: skip
            if not found:
                what = f"*{suffix} files" if suffix else "files"
                raise LocatedError(path, 0, f"directory holds no {what}")
            files.extend(found)
        elif os.path.exists(path):
            files.append(path)
        else:
            raise LocatedError(path, 0, "no such file or directory")
    return files


def parsed_lines(
    path: str, parse: LineParser, max_line_bytes: int, advance: Callable[[int], object]
) -> Iterator[Stamped]:
    """The non-``None`` results of ``parse`` over the lines of ``path`` (UTF-8 checked, a
    line over ``max_line_bytes`` an error), feeding ``advance`` with the bytes read.
    O(bytes); memory O(a chunk of lines)."""
    pending = 0
    count = 0
    with open_trace(path) as fh:
        for line_no, text in numbered_lines(fh, path, max_line_bytes):
            pending += len(text)
            count += 1
            if count == ADVANCE_EVERY:
                advance(pending)
                pending = count = 0
            item = parse(text, line_no, path)
            if item is not None:
                yield item
    advance(pending)


def windowed(items: Iterable[Stamped], window_ns: int) -> Iterator[Stamped]:
    """``items`` stably sorted by time, holding at most the items of the last ``window_ns``:
    an item leaves once an item ``window_ns`` newer arrived. An item older than one already
    given out is a LocatedError at its line naming both stamps and the window (the full sort
    would have put it earlier). O(log window) per item."""
    heap: list[tuple[int, int, Stamped]] = []
    newest: int | None = None
    last: Stamped | None = None
    for seq, item in enumerate(items):
        if last is not None and item.time < last.time:
            raise LocatedError(
                item.path,
                item.line_no,
                f"{item.stamp} is earlier than {last.stamp} of line {last.line_no}, "
                f"more than the reorder window ({window_ns / 1e6:g} ms) out of order; "
                "widen --reorder-window-ms",
            )
        heapq.heappush(heap, (item.time, seq, item))
        if newest is None or item.time > newest:
            newest = item.time
        limit = newest - window_ns
        while heap and heap[0][0] <= limit:
            last = heapq.heappop(heap)[2]
            yield last
    while heap:
        yield heapq.heappop(heap)[2]


def time_ordered(
    files: Sequence[str],
    parse: LineParser,
    *,
    window_ns: int,
    max_line_bytes: int,
    advance: Callable[[int], object],
) -> Iterator[Stamped]:
    """The parsed lines of ``files`` as the stable sort by time of their concatenation
    (each file windowed by ``window_ns``, then merged; ties: file order, then line order).
    Lazy: files are opened as the merge starts. O(lines x log(window + files))."""
    streams = [
        windowed(parsed_lines(path, parse, max_line_bytes, advance), window_ns) for path in files
    ]
    return heapq.merge(*streams, key=attrgetter("time"))
