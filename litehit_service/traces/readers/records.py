"""The common record every trace reader yields, and the interface a trace format implements.

Owns :class:`TraceEvent` (one ``get`` / ``request`` / ``write`` record: nanoseconds, int64
block keys, tokens), the int64 bounds every reader checks keys and timestamps against, and
:class:`TraceReader`, the base class of the one object per format that
:mod:`~litehit_service.traces.readers.registry` maps a format name to. No I/O and no parsing
here; importing it costs nothing beyond :mod:`typing`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, NamedTuple

from litehit_core.lines import DEFAULT_MAX_LINE_BYTES

__all__ = [
    "EVENT_KINDS",
    "INT64_MAX",
    "INT64_MIN",
    "MASK64",
    "LineParser",
    "TraceEvent",
    "TraceReader",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MASK64 = 2**64 - 1
"""The low 64 bits of an integer (hash -> key mappings)."""

EVENT_KINDS = ("get", "request", "write")
"""Event types of the standard format, in documentation order."""


class TraceEvent(NamedTuple):
    """One trace line: a request (``get``/``request``) or a write-back (``write``).

    ``timestamp_ns`` is in nanoseconds; ``keys`` are the int64 keys of complete blocks at the
    trace's native granularity; ``input_len`` is the prompt length in tokens (0 for a write
    without one). ``line_no`` is the 1-based line in the source file. Policy replay only
    (spec §2; other readers leave the defaults): ``block_mask`` of a read -- ``None``, an
    int n (the first n blocks are local to the engine) or a tuple of bools, one per key;
    ``ttl_us`` of a write or request -- 0 (the group's default TTL), > 0 (this write's TTL
    in microseconds) or -1 (never expires).
    """

    line_no: int
    kind: str
    instance_id: str
    trace_id: str
    timestamp_ns: int
    keys: list[int]
    input_len: int
    block_mask: int | tuple[bool, ...] | None = None
    ttl_us: int = 0


LineParser = Callable[[bytes | str, int, str], "TraceEvent | None"]
"""``parse(text, line_no, path)``: one line (UTF-8 bytes or text, ending optional) to its
event, ``None`` for a blank line; a bad line raises
:class:`~litehit_core.LocatedError` ``"{path}:{line_no}: {reason}"``."""


class TraceReader:
    """One trace format: its name, how to recognise it, and how to read it into
    :class:`TraceEvent` records. Subclass it in one module per format, create one instance
    (``READER``) and add it to :data:`~litehit_service.traces.readers.registry.READERS`.

    Class attributes: ``name`` (the format name users type: ``--from``, ``trace_format``);
    ``options`` (the keyword options :meth:`read` takes besides ``max_line_bytes``, in the
    order the format documents them); ``example`` (a small valid input file, bytes, that
    every reader's tests read -- ``tests/test_trace_readers.py``). The subclass docstring
    says what the format is (fields, units) and what reading it costs.

    Capabilities, the questions callers ask instead of testing a format's name (each a
    class attribute, set in the format's module):

    - ``whole_input``: the events need the whole input first (sorted, paired), so
      :meth:`line_parser` is ``None``; ``replay`` reads it as one batch and progress counts
      events, not bytes (LMCache);
    - ``sizes_in_trace``: the trace states each instance's tokens per key and KV bytes per
      key, given by :meth:`read_sized`, so a caller takes no block size for it and need not
      be told the KV bytes per key (LMCache's ``chunk_size``, shapes and dtypes);
    - ``default_block_size``: tokens per key when the caller gives none (Mooncake: its
      hash-id granularity; standard: a replay config's default); ``None`` exactly when
      ``sizes_in_trace``;
    - ``names_instances``: every record names its instance; ``False`` when none does and
      each event gets the ``instance_id`` option instead (Mooncake), so a replay with more
      than one instance must route them (``override_instance_id`` / fan-out);
    - ``default_time_offset_ns``: what ``convert`` adds to every timestamp unless told
      otherwise: 1 ms for a format whose clock starts at 0 (Mooncake: the standard format
      wants ``timestamp_ns > 0``), 0 for the others, whose values stay as they are;
    - ``columnar``: the format's chunks are pyarrow tables of the standard fields
      (:func:`~litehit_service.traces.readers.columns.standard_chunks`, the line parser as
      the slow path), which ``convert`` writes to Parquet as they are -- the standard
      format, in JSONL or Parquet (another format with a :meth:`column_source`, Mooncake,
      goes to Parquet by columns too, its rows built from the checked columns).

    - ``events_by_columns``: reading by columns pays even when every record becomes a
      Python event (``replay``); ``False`` for a format whose line parser makes the events
      faster than pyarrow's decode plus the conversion to Python objects (Mooncake: orjson
      on a short line, ``bench/README.md``), which ``replay`` then reads line by line.

    :meth:`column_source` reads a format by columns (the standard format and Mooncake;
    ``None`` for the others, read line by line): what the policy replay and ``convert`` to
    Parquet ask first, and ``replay`` for a format with ``events_by_columns``.

    Whether the format takes an option (``block_size``, ``instance_id``, ``model``,
    ``kv_bytes_per_chunk``) is ``name in reader.options``.
    """

    name: ClassVar[str] = ""
    options: ClassVar[tuple[str, ...]] = ()
    example: ClassVar[bytes] = b""
    whole_input: ClassVar[bool] = False
    sizes_in_trace: ClassVar[bool] = False
    default_block_size: ClassVar[int | None] = None
    names_instances: ClassVar[bool] = True
    default_time_offset_ns: ClassVar[int] = 0
    columnar: ClassVar[bool] = False
    events_by_columns: ClassVar[bool] = True

    def read(
        self,
        path: str | os.PathLike[str],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        **options: Any,
    ) -> Iterable[TraceEvent]:
        """The events of ``path`` in the order the format defines (file order unless the
        format says otherwise). Arguments are checked at call time (``ValueError``); a bad
        line raises :class:`~litehit_core.LocatedError` naming file, line, field and value."""
        raise NotImplementedError

    def sniff(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj``, the first non-blank line of a file decoded as a JSON object,
        looks like this format (its distinctive fields are present). O(1)."""
        raise NotImplementedError

    def line_parser(self, **options: Any) -> LineParser | None:
        """A :data:`LineParser` with ``options`` bound, for formats whose lines are
        independent (the batch loop of ``replay`` and ``convert``,
        :func:`~litehit_service.traces.readers.registry.parse_lines`); ``None`` for a format
        that needs the whole input (sorting, pairing). Options the format does not take are
        ignored."""
        return None

    def column_source(
        self,
        path: str,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        chunk_bytes: int | None = None,
        **options: Any,
    ) -> Any:
        """The trace at ``path`` by columns, ``options`` bound as in :meth:`line_parser`:
        a :class:`~litehit_service.traces.readers.columns.ColumnSource` (chunks of about
        ``chunk_bytes`` of JSON, default the reader's; opened now, LocatedError at line 0
        when the file cannot be), or ``None`` for a format read only line by line (the
        default). Options the format does not take are ignored."""
        return None

    def read_sized(
        self,
        path: str | os.PathLike[str],
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        **options: Any,
    ) -> tuple[list[TraceEvent], Mapping[str, tuple[int, int]]]:
        """For a format with ``sizes_in_trace``: the events of :meth:`read` (a list) and,
        per instance read, ``(tokens per key, KV bytes per key)`` as the trace states them.
        ``NotImplementedError`` for any other format."""
        raise NotImplementedError(f"trace format {self.name!r} does not state its key sizes")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
