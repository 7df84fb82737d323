"""Raw prompts to keys: the documented formulas of ``litehit convert --from text``.

Everything another tool needs to reproduce a converted trace's keys lives here:

- :func:`parse_time_ns`: the time field, ``"YYYY-MM-DD HH:MM:SS[.fraction]"`` (the
  reference converter's format; ``T`` for the space, ``,`` for the dot, 1 to 9 fraction
  digits; UTC unless it ends in ``Z`` or ``+HH:MM``/``-HH:MM``) or a JSON number of seconds
  since the Unix epoch, to integer nanoseconds, exactly as written (a number is read from
  its shortest decimal form, so ``1.1`` is 1,100,000,000 ns, not the float's error);
- :func:`render_prompt`: the content field, a string as it is or a list of chat messages
  ``{"role", "content"}`` (or ``{"messages": [...]}``) rendered as the concatenation of
  ``f"{role}: {text}\\n"`` per message, where ``text`` is the content string (``null``:
  empty; a list of parts: the ``text`` of each ``{"type": "text"}`` part, joined);
- :func:`load_tokenizer`: a Hugging Face ``tokenizer.json`` (or the directory holding one),
  read with the ``tokenizers`` library (the optional ``text`` extra); the text is
  tokenized with ``add_special_tokens=True`` (the tokenizer's post-processor, e.g. a BOS);
- :func:`block_keys`: the token ids chained with the project's prefix hash, token by token
  from 0 (``h_0 = 0``, ``h_t = next(h_{t-1}, token_t)``, :mod:`litehit_core.prefix_hash`),
  one key per complete block of ``B`` tokens: ``key_j = h_{(j+1)B}``; a trailing partial
  block has no key (its tokens stay in ``input_len``).

The keys equal those of the reference's text converter for the same token ids. The
reference renders a message list with the model's chat template (transformers); the
``tokenizers`` library has no template engine, and a template's output depends on the
transformers version, so the rendering here is plain and fixed: it keeps a conversation's
next turn an extension of the previous one (what prefix reuse depends on) and can be
reproduced from this docstring alone. Give pre-rendered strings for template-exact tokens.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from litehit_core import InvalidRequestError, LocatedError

__all__ = [
    "INSTALL_HINT",
    "PromptError",
    "block_keys",
    "content_of",
    "load_tokenizer",
    "parse_block_sizes",
    "parse_time_ns",
    "render_prompt",
    "tokenizer_file",
]

INSTALL_HINT = "pip install 'litehit[text]'"
"""How to get the optional dependency of ``--from text`` (the ``tokenizers`` library)."""
TIME_TEXT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})?"
)
"""A time string: date, time, optional fraction (1-9 digits), optional UTC offset."""
TIME_FORMS = (
    "'YYYY-MM-DD HH:MM:SS[.ffffff]' (UTC unless it ends in Z or +HH:MM) or a number of "
    "seconds since the epoch"
)
MAX_SECONDS = (2**63 - 1) // 1_000_000_000
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class PromptError(ValueError):
    """A value of a line that is not a prompt: ``field`` (dotted, e.g.
    ``prompt_messages[2].content``) and ``reason``; the converter places it at its line."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def parse_time_ns(value: Any, field: str = "time") -> int:
    """``value`` (a time string or a number of seconds, see the module docstring) as
    nanoseconds since the Unix epoch; :class:`PromptError` naming ``field`` for anything
    else or a time before the epoch / beyond int64. O(len(value))."""
    if type(value) is int or type(value) is float:
        if value != value or not 0 <= value <= MAX_SECONDS:
            raise PromptError(field, f"must be {TIME_FORMS} in [0, {MAX_SECONDS}]; got {value}")
        if type(value) is int:
            return value * 1_000_000_000
        return round(decimal.Decimal(repr(value)) * 1_000_000_000)  # as written, no float error
    if type(value) is not str:
        raise PromptError(field, f"must be {TIME_FORMS}; got {_show(value)}")
    match = TIME_TEXT.fullmatch(value.strip())
    if match is None:
        raise PromptError(field, f"must be {TIME_FORMS}; got {_show(value)}")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second),
            tzinfo=_zone(zone),
        )  # fmt: skip
    except ValueError as exc:  # a day, hour, ... or UTC offset out of range
        raise PromptError(field, f"{exc}; got {_show(value)}") from None
    seconds = (moment - EPOCH) // datetime.timedelta(seconds=1)
    nanos = int((fraction or "0").ljust(9, "0"))
    if not 0 <= seconds <= MAX_SECONDS - 1:
        raise PromptError(field, f"must be after 1970-01-01 and before 2262; got {_show(value)}")
    return seconds * 1_000_000_000 + nanos


def _zone(zone: str | None) -> datetime.timezone:
    if zone is None or zone == "Z":
        return datetime.timezone.utc
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    offset = datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return datetime.timezone(sign * offset)


def render_prompt(content: Any, field: str = "prompt_messages") -> str:
    """The text of a prompt (see the module docstring): a string as it is, a message list
    (or ``{"messages": [...]}``) as ``role: text`` lines. :class:`PromptError` naming the
    offending ``field[i].key`` otherwise. O(len(content))."""
    if type(content) is str:
        return content
    if type(content) is dict and "messages" in content:
        content = content["messages"]
        field = f"{field}.messages"
    if type(content) is not list:
        raise PromptError(
            field, f"must be a string or a list of chat messages {{role, content}}; got "
            f"{_show(content)}",
        )  # fmt: skip
    parts = []
    for i, message in enumerate(content):
        where = f"{field}[{i}]"
        if type(message) is not dict:
            raise PromptError(where, f"must be a message {{role, content}}; got {_show(message)}")
        role = message.get("role")
        if type(role) is not str or not role:
            raise PromptError(f"{where}.role", f"must be a non-empty string; got {_show(role)}")
        parts.append(f"{role}: {_message_text(message.get('content'), f'{where}.content')}\n")
    return "".join(parts)


def _message_text(content: Any, field: str) -> str:
    if content is None:
        return ""
    if type(content) is str:
        return content
    if type(content) is list:
        texts = []
        for j, part in enumerate(content):
            text = part.get("text") if type(part) is dict and part.get("type") == "text" else None
            if type(text) is not str:
                raise PromptError(
                    f"{field}[{j}]",
                    f'must be a text part {{"type": "text", "text": ...}}; got {_show(part)}',
                )
            texts.append(text)
        return "".join(texts)
    raise PromptError(
        field, f"must be a string, null or a list of text parts; got {_show(content)}"
    )


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if _jsonable(value) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


def block_keys(token_ids: list[int], block_size: int) -> list[int]:
    """The keys of the complete blocks of ``token_ids`` (int64 each): the prefix hash
    chained over every token from 0, read at each block's last token. O(tokens), compiled
    from a few blocks on (:func:`litehit_core.prefix_chain.chain_keys`)."""
    from litehit_core.prefix_chain import chain_keys  # numba: only when converting

    complete = len(token_ids) // block_size * block_size
    if complete == 0:
        return []
    return chain_keys(token_ids[:complete])[block_size - 1 :: block_size]


def parse_block_sizes(text: str) -> dict[str, int]:
    """``--instance-block-sizes``: ``"a:16,b:32"`` as ``{"a": 16, "b": 32}`` (the last one
    of a repeated id wins); ``ValueError`` naming the bad entry. O(len(text))."""
    sizes: dict[str, int] = {}
    for entry in text.split(","):
        name, sep, size = entry.rpartition(":")
        if not sep or not name.strip() or not size.strip().isdigit() or int(size) <= 0:
            raise ValueError(f"{entry.strip()!r} is not INSTANCE:TOKENS (TOKENS an integer > 0)")
        sizes[name.strip()] = int(size)
    return sizes


def tokenizer_file(tokenizer_path: str | None, model_name: str | None) -> str:
    """Where the tokenizer is, as the reference looks: ``./model/<model_name>`` when that
    directory exists, else ``tokenizer_path``; a directory means its ``tokenizer.json``.
    LocatedError at line 0 naming the path when there is no such file. O(1)."""
    path = tokenizer_path
    if model_name and os.path.isdir(os.path.join("model", model_name)):
        path = os.path.join("model", model_name)
    if path is None:
        raise LocatedError(
            os.path.join("model", model_name or ""), 0,
            "no such directory (--model-name reads the tokenizer from ./model/NAME); give "
            "--tokenizer-path",
        )  # fmt: skip
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        where = "holds no tokenizer.json" if os.path.isdir(path) else "no such file"
        raise LocatedError(
            path, 0,
            f"{where} (--tokenizer-path: a Hugging Face tokenizer.json or the directory "
            "holding it, local files only)",
        )  # fmt: skip
    return file


def load_tokenizer(tokenizer_path: str | None, model_name: str | None = None) -> Any:
    """The ``tokenizers.Tokenizer`` at :func:`tokenizer_file` (truncation and padding off).
    :class:`~litehit_core.InvalidRequestError` naming :data:`INSTALL_HINT` without the
    library (checked first); LocatedError at line 0 for a file that is missing or that it
    cannot read. O(tokenizer file)."""
    try:
        import tokenizers
    except ImportError:
        raise InvalidRequestError(
            f"--from text needs the 'tokenizers' library: {INSTALL_HINT}"
        ) from None
    file = tokenizer_file(tokenizer_path, model_name)
    try:
        tokenizer = tokenizers.Tokenizer.from_file(file)
    except Exception as exc:  # the library raises a plain Exception for a bad file
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LocatedError(file, 0, f"not a tokenizers tokenizer.json: {reason}") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def content_of(obj: Mapping[str, Any], field: str) -> Any:
    """``obj[field]`` (the prompt), or :class:`PromptError` when it is missing."""
    if field not in obj:
        raise PromptError(field, "missing (--content-field names the prompt's field)")
    return obj[field]
