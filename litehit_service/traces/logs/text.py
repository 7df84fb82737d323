"""Raw prompts + a tokenizer -> standard ``request`` records (``--from text``).

The input is JSON lines, as the reference's text converter reads them: a time field
(``--time-field``, default ``time``) and a prompt field (``--content-field``, default
``prompt_messages``: a string or a list of chat messages). Each line becomes one
``request``:

- ``timestamp_ns``: the time field (:func:`~litehit_service.traces.logs.prompts.parse_time_ns`:
  ``"2024-01-01 12:00:00.000000"`` as UTC, or seconds since the epoch); no offset;
- ``instance_id``: the line's ``instance_id`` field when it has one (a non-empty string),
  else ``--instance`` (default ``instance``, the reference's ``--instance-id`` default);
- ``keys``: the prompt rendered and tokenized, the token ids chained with the project's
  prefix hash, one key per complete block of the instance's block size
  (``--instance-block-sizes`` for that instance, else ``--block-size``, else 16)
  (:mod:`~litehit_service.traces.logs.prompts` states every formula);
- ``input_len``: the number of tokens (a trailing partial block counts here, keyless);
- ``trace_id``: ``file:line``.

A line whose prompt tokenizes to no token is skipped (counted). Lines are ordered as every
log converter orders them (:mod:`~litehit_service.traces.logs.ordering`: a file sorted
within ``--reorder-window-ms``, files merged), then tokenized in batches of
:data:`ENCODE_BATCH` (the ``tokenizers`` library encodes a batch on its own threads).
Cost: O(bytes + tokens); memory: a reorder window per file and one batch.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from litehit_core import LocatedError
from litehit_service.traces.logs.base import Conversion, Converted, Converter
from litehit_service.traces.logs.ordering import Stamped, time_ordered
from litehit_service.traces.logs.prompts import (
    PromptError,
    block_keys,
    content_of,
    load_tokenizer,
    parse_time_ns,
    render_prompt,
)
from litehit_service.traces.readers.jsonl import decode_object
from litehit_service.traces.readers.records import TraceEvent

__all__ = [
    "BLOCK_TOKENS",
    "CONTENT_FIELD",
    "DEFAULT_INSTANCE",
    "ENCODE_BATCH",
    "INSTANCE_FIELD",
    "TIME_FIELD",
    "TextPrompts",
]

BLOCK_TOKENS = 16
"""Tokens per key when neither ``--block-size`` nor ``--instance-block-sizes`` says (the
reference's default)."""
TIME_FIELD = "time"
"""The time field's default name (``--time-field``)."""
CONTENT_FIELD = "prompt_messages"
"""The prompt field's default name (``--content-field``)."""
INSTANCE_FIELD = "instance_id"
"""A line's own instance, when it names one (else ``--instance``)."""
DEFAULT_INSTANCE = "instance"
"""The instance of a line that names none, without ``--instance`` (the reference's)."""
ENCODE_BATCH = 256
"""Prompts tokenized per call of the tokenizer (one batch in memory)."""


class Prompt(NamedTuple):
    """One parsed line: its instance and its rendered text."""

    instance: str
    text: str


def line_parser(time_field: str, content_field: str) -> Callable[[bytes, int, str], Stamped | None]:
    """The parser of one line for :func:`time_ordered`: a :class:`Stamped` whose value is a
    :class:`Prompt`, ``None`` for a blank line, LocatedError ``file:line: field: reason``
    for a bad one. O(len(line))."""

    def parse(text: bytes, line_no: int, path: str) -> Stamped | None:
        obj = decode_object(text, line_no, path)
        if obj is None:
            return None
        try:
            if time_field not in obj:
                raise PromptError(time_field, "missing (--time-field names the time's field)")
            time_ns = parse_time_ns(obj[time_field], time_field)
            prompt = render_prompt(content_of(obj, content_field), content_field)
            instance = obj.get(INSTANCE_FIELD)
            if instance is not None and (type(instance) is not str or not instance):
                raise PromptError(INSTANCE_FIELD, f"must be a non-empty string; got {instance!r}")
        except PromptError as exc:
            raise LocatedError(path, line_no, exc.reason, exc.field) from None
        stamp = f"{time_field} {obj[time_field]}"
        return Stamped(time_ns, path, line_no, Prompt(instance or "", prompt), stamp)

    return parse


class TextConversion(Conversion):
    """One run: orders the lines, tokenizes them in batches, keys each prompt."""

    def __init__(
        self,
        files: Sequence[str],
        tokenizer: Any,
        instance: str,
        block_size: int,
        sizes: Mapping[str, int],
        parse: Callable[[bytes, int, str], Stamped | None],
        window_ns: int,
        max_line_bytes: int,
        advance: Callable[[int], object],
    ) -> None:
        self.files = files
        self.tokenizer = tokenizer
        self.instance = instance
        self.block_size = block_size
        self.sizes = dict(sizes)
        self.parse = parse
        self.window_ns = window_ns
        self.max_line_bytes = max_line_bytes
        self.advance = advance
        self.counts: Counter[str] = Counter()
        self.per_instance: Counter[str] = Counter()

    def size_of(self, instance: str) -> int:
        """Tokens per key of ``instance``."""
        return self.sizes.get(instance, self.block_size)

    def records(self) -> Iterator[Converted]:
        stream = time_ordered(
            self.files, self.parse, window_ns=self.window_ns,
            max_line_bytes=self.max_line_bytes, advance=self.advance,
        )  # fmt: skip
        batch: list[Stamped] = []
        for item in stream:
            batch.append(item)
            if len(batch) == ENCODE_BATCH:
                yield from self._keyed(batch)
                batch = []
        yield from self._keyed(batch)

    def _keyed(self, batch: list[Stamped]) -> Iterator[Converted]:
        if not batch:
            return
        texts = [item.value.text for item in batch]
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=True)
        counts = self.counts
        for item, encoding in zip(batch, encodings, strict=True):
            ids = encoding.ids
            counts["lines"] += 1
            if not ids:
                counts["lines without tokens skipped"] += 1
                continue
            instance = item.value.instance or self.instance
            size = self.size_of(instance)
            keys = block_keys(ids, size)
            counts["tokens"] += len(ids)
            counts["keys"] += len(keys)
            self.per_instance[instance] += 1
            trace_id = f"{os.path.basename(item.path)}:{item.line_no}"
            yield Converted(
                TraceEvent(
                    item.line_no, "request", instance, trace_id, item.time, keys, len(ids)
                )  # fmt: skip
            )

    def block_sizes(self) -> dict[str, int]:
        return {name: self.size_of(name) for name in self.per_instance}

    def report(self) -> list[str]:
        counts = self.counts
        written = sum(self.per_instance.values())
        instances = ", ".join(f"{name} ({n})" for name, n in sorted(self.per_instance.items()))
        lines = [
            f"text: read {counts['lines']} prompts -> {written} requests, {counts['tokens']} "
            f"tokens, {counts['keys']} complete blocks",
            f"text: {len(self.per_instance)} instances: {instances or 'none'}",
        ]
        skipped = counts["lines without tokens skipped"]
        if skipped:
            lines.append(f"text: skipped {skipped} lines without tokens")
        return lines


class TextPrompts(Converter):
    """Raw prompts (see the module docstring)."""

    name = "text"
    options = (
        "block_size", "instance_id", "reorder_window_ms", "tokenizer_path", "model_name",
        "time_field", "content_field", "instance_block_sizes", "max_workers",
    )  # fmt: skip
    required = ("tokenizer_path",)
    default_block_size = BLOCK_TOKENS
    default_time_offset_ns = 0
    input_suffix = ".jsonl"
    example = (
        b'{"time":"2024-01-01 12:00:00.000000","prompt_messages":"the quick brown fox"}\n'
        b'{"time":"2024-01-01 12:00:01.500000","prompt_messages":[{"role":"user",'
        b'"content":"the quick brown fox"}]}\n'
    )

    def sniff(self, obj: Mapping[str, Any]) -> bool:
        """A ``prompt_messages`` field (the default prompt field)."""
        return CONTENT_FIELD in obj

    def open(
        self,
        inputs: Sequence[str],
        *,
        max_line_bytes: int,
        advance: Callable[[int], object],
        tokenizer_path: str | None = None,
        model_name: str | None = None,
        instance_id: str = DEFAULT_INSTANCE,
        block_size: int = BLOCK_TOKENS,
        instance_block_sizes: Mapping[str, int] | None = None,
        time_field: str = TIME_FIELD,
        content_field: str = CONTENT_FIELD,
        reorder_window_ms: int = 1000,
        max_workers: int | None = None,
        **options: Any,
    ) -> Conversion:
        """A conversion of ``inputs`` (files) tokenized by the tokenizer at
        ``tokenizer_path`` (or ``./model/<model_name>``); loads it (O(tokenizer file)).
        ``max_workers`` is accepted and not acted on (the library's threads encode)."""
        tokenizer = load_tokenizer(tokenizer_path, model_name)
        return TextConversion(
            inputs, tokenizer, instance_id, block_size, instance_block_sizes or {},
            line_parser(time_field, content_field), reorder_window_ms * 1_000_000,
            max_line_bytes, advance,
        )  # fmt: skip


CONVERTER = TextPrompts()
