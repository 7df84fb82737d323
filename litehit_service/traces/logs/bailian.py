"""Qwen Bailian usage traces -> standard ``request`` records (spec §10).

The traces (``alibaba-edu/qwen-bailian-usagetraces-anon``) are JSON lines: ``chat_id``,
``parent_chat_id`` (-1 for a first turn), ``timestamp`` (seconds, a float), ``input_length``
and ``output_length`` (tokens), ``type``, ``turn`` and ``hash_ids``: one id per 16-token
block of the input, NOT chained (the same id at two positions is the same content, not the
same prefix). Each line becomes a ``request`` of the one instance ``--instance`` names:

- ``timestamp_ns = round(timestamp x 1e9)`` (then the time offset, 1 ms by default, since
  the traces start at 0 s and a standard timestamp is > 0);
- ``keys``: the prefix-chained hash (:func:`litehit_core.prefix_chain.chain_keys`) of
  the ids of the complete blocks, ``hash_ids[: input_length // 16]``; the id of a trailing
  partial block is dropped, its tokens stay in ``input_len = input_length``. A line with
  fewer ids than complete blocks keeps them all (counted: its tail is a miss);
- ``trace_id``: ``chat_id`` as text (or ``file:line`` without one); ``chat_id``,
  ``parent_chat_id`` and ``turn`` are copied as optional fields readers ignore;
- ``--emit get-write``: a ``get`` and a ``write`` of the same keys at the same time instead
  (the get first), for a replay that should not see the write as part of the request.

``output_length`` and ``type`` are not used. Cost: O(bytes + lines x log window); memory:
a reorder window per file.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from litehit_service.traces.logs.base import Conversion, Converted, Converter
from litehit_service.traces.logs.ordering import Stamped, time_ordered
from litehit_service.traces.readers.jsonl import (
    bad_field,
    check_int64_array,
    decode_object,
    positive_int,
    require,
)
from litehit_service.traces.readers.records import INT64_MAX, TraceEvent

__all__ = ["BLOCK_TOKENS", "EMIT_MODES", "QwenBailian"]

BLOCK_TOKENS = 16
"""Tokens per hash id in the published traces (``--block-size`` overrides)."""
EMIT_MODES = ("request", "get-write")
"""``--emit`` values: one ``request`` per line, or a ``get`` and a ``write``."""
MAX_SECONDS = INT64_MAX / 1e9 - 1
CHAT_FIELDS = ("chat_id", "parent_chat_id", "turn")


def parse_line(text: bytes, line_no: int, path: str) -> Stamped | None:
    """One trace line, stamped with ``round(timestamp x 1e9)`` ns; ``value`` is
    ``(input_length, hash_ids, chat fields)``. ``None`` for a blank line. O(len(text))."""
    obj = decode_object(text, line_no, path)
    if obj is None:
        return None
    seconds = require(obj, "timestamp", line_no, path)
    if (
        type(seconds) not in (int, float)
        or not math.isfinite(seconds)
        or not 0 <= seconds <= MAX_SECONDS
    ):
        raise bad_field(path, line_no, "timestamp", "a number of seconds >= 0", seconds)
    input_length = require(obj, "input_length", line_no, path)
    if not positive_int(input_length):
        raise bad_field(path, line_no, "input_length", "an integer > 0", input_length)
    hash_ids = require(obj, "hash_ids", line_no, path)
    if type(hash_ids) is not list:
        raise bad_field(path, line_no, "hash_ids", "an array of integers", hash_ids)
    if hash_ids:
        check_int64_array(hash_ids, "hash_ids", line_no, path, text)
    chat = {}
    for field in CHAT_FIELDS:
        value = obj.get(field)
        if value is None:
            continue
        if type(value) not in (int, str):
            raise bad_field(path, line_no, field, "an integer or a string", value)
        chat[field] = value
    time_ns = round(seconds * 1e9) if type(seconds) is float else seconds * 1_000_000_000
    return Stamped(time_ns, path, line_no, (input_length, hash_ids, chat), f"timestamp {seconds}")


class BailianConversion(Conversion):
    """One run: re-keys every line, in time order."""

    def __init__(
        self,
        files: Sequence[str],
        instance: str,
        block_size: int,
        emit: str,
        window_ns: int,
        max_line_bytes: int,
        advance: Callable[[int], object],
    ) -> None:
        self.files = files
        self.instance = instance
        self.block_size = block_size
        self.emit = emit
        self.window_ns = window_ns
        self.max_line_bytes = max_line_bytes
        self.advance = advance
        self.counts: Counter[str] = Counter()

    def records(self) -> Iterator[Converted]:
        from litehit_core.prefix_chain import chain_keys  # numba: only when converting

        stream = time_ordered(
            self.files, parse_line, window_ns=self.window_ns,
            max_line_bytes=self.max_line_bytes, advance=self.advance,
        )  # fmt: skip
        size = self.block_size
        instance = self.instance
        counts = self.counts
        for item in stream:
            input_length, hash_ids, chat = item.value
            complete = input_length // size
            counts["lines"] += 1
            if len(hash_ids) < complete:
                counts["lines with fewer hash_ids than complete blocks"] += 1
            elif len(hash_ids) > complete:
                counts["partial-block ids dropped"] += len(hash_ids) - complete
            keys = chain_keys(hash_ids[:complete])
            chat_id = chat.get("chat_id")
            trace_id = (
                str(chat_id) if chat_id is not None
                else f"{os.path.basename(item.path)}:{item.line_no}"
            )  # fmt: skip
            extra = "".join(f",{json.dumps(k)}:{json.dumps(v)}" for k, v in chat.items())
            if self.emit == "request":
                yield Converted(
                    TraceEvent(item.line_no, "request", instance, trace_id, item.time, keys,
                               input_length), extra)  # fmt: skip
            else:
                yield Converted(
                    TraceEvent(item.line_no, "get", instance, trace_id, item.time, keys,
                               input_length), extra)  # fmt: skip
                yield Converted(
                    TraceEvent(item.line_no, "write", instance, trace_id, item.time, keys, 0),
                    extra,
                )

    def report(self) -> list[str]:
        counts = dict(self.counts)
        lines = counts.pop("lines", 0)
        parts = "".join(f", {n} {what}" for what, n in sorted(counts.items()))
        kind = "requests" if self.emit == "request" else "gets and writes"
        return [f"qwen-bailian: read {lines} lines -> {kind} of {self.instance!r}{parts}"]


class QwenBailian(Converter):
    """Qwen Bailian usage traces (see the module docstring)."""

    name = "qwen-bailian"
    options = ("block_size", "instance_id", "emit", "reorder_window_ms")
    required = ("instance_id",)
    default_block_size = BLOCK_TOKENS
    default_time_offset_ns = 1_000_000
    input_suffix = ".jsonl"
    example = (
        b'{"chat_id":1,"parent_chat_id":-1,"timestamp":0.0,"input_length":40,'
        b'"output_length":5,"type":"text","turn":1,"hash_ids":[11,12,13]}\n'
        b'{"chat_id":2,"parent_chat_id":1,"timestamp":1.25,"input_length":70,'
        b'"output_length":9,"type":"text","turn":2,"hash_ids":[11,12,14,15,16]}\n'
    )

    def sniff(self, obj: Mapping[str, Any]) -> bool:
        """A ``hash_ids`` field with a ``chat_id`` or ``parent_chat_id`` (a Mooncake trace
        has ``hash_ids`` without them)."""
        return "hash_ids" in obj and ("chat_id" in obj or "parent_chat_id" in obj)

    def open(
        self,
        inputs: Sequence[str],
        *,
        max_line_bytes: int,
        advance: Callable[[int], object],
        instance_id: str = "",
        block_size: int = BLOCK_TOKENS,
        emit: str = "request",
        reorder_window_ms: int = 1000,
        **options: Any,
    ) -> Conversion:
        """A conversion of ``inputs`` (files) into records of ``instance_id``."""
        if emit not in EMIT_MODES:
            raise ValueError(f"emit must be one of {EMIT_MODES}, got {emit!r}")
        return BailianConversion(
            inputs, instance_id, block_size, emit, reorder_window_ms * 1_000_000,
            max_line_bytes, advance,
        )  # fmt: skip


CONVERTER = QwenBailian()
