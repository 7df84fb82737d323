"""Writing standard trace lines: the one loop behind ``litehit convert``'s output.

:func:`write_events` writes records as standard JSONL shifted by a time offset and checks
every timestamp (in int64, never backwards); :func:`merge_late` merges records only the end
of a log could decide (a converter's :meth:`~litehit_service.traces.logs.Conversion.late`)
into a written file, in time order. O(total keys). :func:`output_container` and
:func:`transcode` put the written JSONL into the container the output asks for (gzip,
zstd, Parquet), streaming.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TextIO

from litehit_core import LocatedError
from litehit_service.traces.logs.base import Converted
from litehit_service.traces.readers import INT64_MAX, TraceEvent, format_standard_event

__all__ = ["OUTPUT_CONTAINERS", "merge_late", "output_container", "shifted", "transcode",
           "write_events"]  # fmt: skip

OUTPUT_CONTAINERS = ("jsonl", "jsonl.gz", "jsonl.zst", "parquet")
"""What ``litehit convert --to`` accepts (default: the output's extension says)."""

TIME_FIELD = '"timestamp_ns":'


def write_events(
    events: Iterable[TraceEvent] | Iterable[Converted],
    out: TextIO,
    offset_ns: int,
    source: str,
    extras: bool = False,
) -> tuple[int, list[str]]:
    """Write ``events`` (with ``extras``: :class:`Converted` records) as standard lines
    shifted by ``offset_ns``; returns (count, instance ids in first-seen order). Rejects
    timestamps that end up <= 0, overflow int64 or go backwards, naming the source line.
    O(total keys)."""
    seen: dict[str, None] = {}
    write = out.write
    fmt = format_standard_event
    count = 0
    prev_ts = 0
    prev_line = 0
    extra = ""
    for item in events:
        ev, extra = item if extras else (item, "")
        ts = shifted(ev, offset_ns, source)
        if ts < prev_ts:
            raise LocatedError(
                source,
                ev.line_no,
                f"timestamp goes backwards: {ev.timestamp_ns} ns is before the previous "
                f"event's {prev_ts - offset_ns} ns (line {prev_line})",
            )
        prev_ts, prev_line = ts, ev.line_no
        if ev.instance_id not in seen:
            seen[ev.instance_id] = None
        write(fmt(ev, ts, extra))
        count += 1
    return count, list(seen)


def shifted(ev: TraceEvent, offset_ns: int, source: str) -> int:
    """``ev``'s timestamp plus ``offset_ns``; LocatedError at its line unless in
    [1, 2**63-1]. O(1)."""
    ts = ev.timestamp_ns + offset_ns
    if ts <= 0 or ts > INT64_MAX:
        raise LocatedError(
            source,
            ev.line_no,
            f"timestamp_ns {ev.timestamp_ns} + --time-offset-ns {offset_ns} = {ts} is "
            "outside [1, 2**63-1]",
        )
    return ts


def merge_late(
    written: str, out: TextIO, late: Sequence[Converted], offset_ns: int, source: str
) -> tuple[int, list[str]]:
    """Copy the standard trace at ``written`` (time-ordered, as :func:`write_events` wrote
    it) to ``out`` with the ``late`` records (sorted by time) merged in, each after the
    lines of equal time; returns (late records written, their instance ids). O(bytes of
    ``written`` + late records); memory O(one line)."""
    fmt = format_standard_event
    seen: dict[str, None] = {}
    i = 0
    n = len(late)
    with open(written, encoding="utf-8", newline="") as fh:
        for line in fh:
            start = line.index(TIME_FIELD) + len(TIME_FIELD)
            ts = int(line[start : line.index(",", start)])
            while i < n and late[i].event.timestamp_ns + offset_ns < ts:
                out.write(fmt(late[i].event, shifted(late[i].event, offset_ns, source),
                              late[i].extra))  # fmt: skip
                seen[late[i].event.instance_id] = None
                i += 1
            out.write(line)
    for record in late[i:]:
        out.write(fmt(record.event, shifted(record.event, offset_ns, source), record.extra))
        seen[record.event.instance_id] = None
    return n, list(seen)


def output_container(output: str, to: str | None = None) -> str:
    """The container of ``output``: ``to`` when given, else its extension's (``.parquet``,
    ``.gz``, ``.zst``; anything else plain JSONL). O(1)."""
    if to is not None:
        return to
    for suffix, container in ((".parquet", "parquet"), (".gz", "jsonl.gz"),
                              (".zst", "jsonl.zst")):  # fmt: skip
        if output.endswith(suffix):
            return container
    return "jsonl"


def transcode(jsonl_path: str, out_path: str, container: str) -> None:
    """Write the standard JSONL at ``jsonl_path`` to ``out_path`` in ``container`` (one of
    :data:`OUTPUT_CONTAINERS` but plain ``jsonl``), streaming. O(bytes)."""
    import shutil

    if container == "parquet":
        from litehit_service.traces.readers.parquet import write_parquet

        write_parquet(jsonl_path, out_path)
        return
    with open(jsonl_path, "rb") as src, open(out_path, "wb") as raw:
        if container == "jsonl.gz":
            import gzip

            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as packed:
                shutil.copyfileobj(src, packed, 1 << 20)
        else:
            import zstandard

            with zstandard.ZstdCompressor().stream_writer(raw, closefd=False) as packed:
                shutil.copyfileobj(src, packed, 1 << 20)
