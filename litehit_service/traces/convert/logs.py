"""``litehit convert`` for the log converters: several inputs, one time-ordered trace.

:func:`convert_logs` expands directories, runs a
:class:`~litehit_service.traces.logs.Converter` over the files with a progress bar
of their bytes, writes its records as standard lines (the shared writer,
:mod:`~litehit_service.traces.convert.writer`) and, when the end of the input decided some
records (a write whose finish never came), merges them in by time in a second pass over
the written file. The caller publishes the file (all or nothing). Cost: O(input bytes), plus
O(output bytes) for the second pass when there are late records; memory: the converter's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from litehit_core import LocatedError
from litehit_service.offline.outputs import byte_progress
from litehit_service.traces.convert.writer import merge_late, write_events
from litehit_service.traces.logs import Converter
from litehit_service.traces.logs.ordering import expand_inputs
from litehit_service.traces.readers.compressed import plain_size

__all__ = ["convert_logs"]


def convert_logs(
    converter: Converter,
    inputs: Sequence[str],
    tmp_output: str,
    *,
    block_size: int | None,
    instance_id: str | None,
    time_offset_ns: int,
    max_line_bytes: int,
    **options: Any,
) -> tuple[int, list[str], list[str], dict[str, int]]:
    """Convert ``inputs`` (files or directories) with ``converter`` into the standard trace
    ``tmp_output``; returns (records written, instance ids, the converter's report lines,
    each instance's tokens per key when they differ from ``block_size``'s).
    ``options`` (``instance_map``, ``emit``, ``reorder_window_ms``; ``None`` = the
    converter's default) go to :meth:`Converter.open` with ``block_size`` and
    ``instance_id`` when it takes them. LocatedError at the first bad line."""
    files = expand_inputs(inputs, converter.input_suffix)
    kwargs = {name: value for name, value in options.items() if value is not None}
    if "block_size" in converter.options:
        kwargs["block_size"] = block_size or converter.default_block_size
    if "instance_id" in converter.options and instance_id is not None:
        kwargs["instance_id"] = instance_id
    source = files[0] if len(files) == 1 else "the merged input"
    sizes = [plain_size(path) for path in files]
    total = None if None in sizes else sum(sizes)  # type: ignore[arg-type]  # None: compressed
    with byte_progress(total, "convert") as advance:
        conversion = converter.open(files, max_line_bytes=max_line_bytes, advance=advance,
                                    **kwargs)  # fmt: skip
        with open(tmp_output, "w", encoding="utf-8", newline="\n") as out:
            count, instances = write_events(
                conversion.records(), out, time_offset_ns, source, extras=True
            )
        late = conversion.late()
    if late:
        first_pass = tmp_output + ".pass1"
        os.replace(tmp_output, first_pass)
        try:
            with open(tmp_output, "w", encoding="utf-8", newline="\n") as out:
                added, more = merge_late(first_pass, out, late, time_offset_ns, source)
        finally:
            os.remove(first_pass)
        count += added
        instances += [name for name in more if name not in instances]
    if count == 0:
        raise LocatedError(inputs[0], 0, "no events to convert")
    return count, instances, conversion.report(), conversion.block_sizes()
