"""The interface a log converter implements, and the record it yields.

A *converter* turns logs that are not traces (a KVCacheManager event-publisher log, the
Qwen Bailian usage traces) into LiteHit's standard trace: it pairs, filters, renames and
re-keys events, so unlike a :class:`~litehit_service.traces.readers.records.TraceReader` it
reads several inputs at once, skips documented kinds of lines (counted, reported) and may
hold records back (a write whose finish never came). ``litehit convert --from NAME`` finds
it in :data:`~litehit_service.traces.logs.CONVERTERS`.

One conversion is a :class:`Conversion`: :meth:`Conversion.records` yields
:class:`Converted` records in time order while streaming the inputs; afterwards
:meth:`Conversion.late` gives the records only the end of the input could decide (sorted;
they are merged in after the records of equal time) and :meth:`Conversion.report` the
summary lines. No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from litehit_service.traces.readers.records import TraceEvent

__all__ = ["Conversion", "Converted", "Converter"]


class Converted(NamedTuple):
    """One output record: ``event`` written as a standard line, with ``extra`` (``""`` or
    ``',"name":value...'``, optional fields that readers ignore) before its closing brace."""

    event: TraceEvent
    extra: str = ""


class Conversion:
    """One run of a converter over its inputs (state: pending pairs, counters)."""

    def records(self) -> Iterator[Converted]:
        """The records in non-decreasing time order, streaming the inputs; a bad line
        raises :class:`~litehit_core.LocatedError` at its ``file:line``."""
        raise NotImplementedError

    def late(self) -> list[Converted]:
        """After :meth:`records` is exhausted: records decided only by the end of the input,
        sorted by time (stable), to be merged after the records of equal time."""
        return []

    def report(self) -> list[str]:
        """After the run: what was read, written and skipped, one line each (for stderr)."""
        return []

    def block_sizes(self) -> dict[str, int]:
        """After the run: tokens per key of each instance written (a starter config needs
        one); empty when every instance has the converter's block size."""
        return {}


class Converter:
    """One log format to convert: its name (``--from``), the options it takes, its defaults.

    Class attributes: ``name``; ``options`` (the keyword options :meth:`open` takes, named
    like the ``convert`` command's destinations: ``block_size``, ``instance_id``,
    ``instance_map``, ``emit``, ``reorder_window_ms``, and text's ``tokenizer_path``,
    ``model_name``, ``time_field``, ``content_field``, ``instance_block_sizes``,
    ``max_workers``); ``required`` (those a user must
    give); ``default_block_size`` (tokens per key when not given; ``None``: required);
    ``default_time_offset_ns`` (added to every timestamp unless ``--time-offset-ns`` says
    otherwise); ``input_suffix`` (a directory input is read as its files ending with this,
    in name order; ``""``: every regular file); ``example`` (a small valid input, bytes).
    """

    name: ClassVar[str] = ""
    options: ClassVar[tuple[str, ...]] = ()
    required: ClassVar[tuple[str, ...]] = ()
    default_block_size: ClassVar[int | None] = None
    default_time_offset_ns: ClassVar[int] = 0
    input_suffix: ClassVar[str] = ""
    example: ClassVar[bytes] = b""
    sizes_in_trace: ClassVar[bool] = False
    """Never: a converted log does not state KV bytes (asked like a reader's)."""

    def open(
        self,
        inputs: Sequence[str],
        *,
        max_line_bytes: int,
        advance: Callable[[int], object],
        **options: Any,
    ) -> Conversion:
        """A conversion of the files ``inputs`` (directories already expanded), calling
        ``advance(nbytes)`` as input bytes are read (a progress bar's feed)."""
        raise NotImplementedError

    def sniff(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (a line decoded as a JSON object) looks like this format: explains
        another format's error (``use --from NAME``). O(1)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
