"""Generic JSON configuration documents: reading, locating fields, reporting problems.

Shared by every strict configuration loader (the ``litehit replay`` configuration of
:mod:`litehit_service.litehit.config`, the optimizer's of
:mod:`litehit_service.optimizer.optimize.config`, the ``serve --groups`` file of
:mod:`litehit_service.entries`), so no loader depends on another's home for them:

- :func:`read_text` / :func:`parse_json`: a file's text and its JSON, errors located;
- :func:`read_json_document`: both, plus the 1-based line of every field path;
- :func:`field_line`: the line of a field path (or of its nearest parent);
- :class:`ConfigErrors` / :func:`raise_config_errors`: every problem of a document at once;
- :func:`join_field`: the dotted path of a field inside an entry.

Depends on the standard library and :mod:`litehit_core` only (no YAML, no gRPC).
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from litehit_core import LocatedError

__all__ = [
    "ConfigErrors",
    "field_line",
    "join_field",
    "parse_json",
    "raise_config_errors",
    "read_json_document",
    "read_text",
]


def join_field(where: str, name: str) -> str:
    """Dotted path of ``name`` inside ``where``: ``instances[0]`` -> ``instances[0].name``.
    O(len)."""
    return f"{where}.{name}" if where else name


def read_text(path: str, what: str) -> str:
    """The UTF-8 text of ``path`` (a BOM skipped); LocatedError at line 0 naming ``what``
    when it cannot be read. O(file size)."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise LocatedError(path, 0, f"cannot read the {what}: {reason}") from None


def parse_json(path: str, text: str) -> Any:
    """``text`` (from ``path``) as JSON; LocatedError with the parser's line. O(len)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise LocatedError(
            path, exc.lineno, f"invalid JSON: {exc.msg} at column {exc.colno}"
        ) from None
    except RecursionError:
        raise LocatedError(path, 0, "invalid JSON: nested too deeply") from None


# --------------------------------------------------------------------------- every problem


class ConfigErrors(LocatedError):
    """Every problem of a config at once: a :class:`LocatedError` that is the first of
    ``errors`` (its path, line, field and reason) and prints all of them, one
    ``path:line: field: reason`` per line, in line order. Picklable."""

    def __init__(self, errors: tuple[LocatedError, ...]) -> None:
        first = errors[0]
        super().__init__(first.path, first.line_no, first.reason, first.field)
        self.errors = errors
        self.args = ("\n".join(str(e) for e in errors),)

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.errors,))

    def at(self, path: str, line_no: int) -> ConfigErrors:
        """Every error placed at ``path:line_no`` (see :meth:`LocatedError.at`)."""
        return ConfigErrors(tuple(e.at(path, line_no) for e in self.errors))


def raise_config_errors(problems: list[LocatedError]) -> None:
    """Raise :class:`ConfigErrors` of ``problems`` (sorted by line; a problem about a field
    at or under one already reported is left out, as a consequence of it); no-op if none.
    O(problems²), problems being few."""
    kept: list[LocatedError] = []
    for problem in problems:
        if not any(_within(problem.field, k.field) for k in kept):
            kept.append(problem)
    if kept:
        raise ConfigErrors(tuple(sorted(kept, key=lambda e: e.line_no)))


def _within(field_path: str, parent: str) -> bool:
    if not parent or field_path == parent:  # "": the document itself is wrong
        return True
    return field_path.startswith(parent) and field_path[len(parent)] in ".["


# --------------------------------------------------------------------------- field lines


def field_line(field_lines: Mapping[str, int], field_path: str) -> int:
    """Line of ``field_path`` in ``field_lines`` (:func:`read_json_document`), else of its
    nearest parent (the whole document's first line at the top); 0 if unknown. O(depth)."""
    path = field_path
    while path:
        line = field_lines.get(path)
        if line is not None:
            return line
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return field_lines.get("", 0)


def read_json_document(path: str | os.PathLike[str], what: str) -> tuple[Any, dict[str, int]]:
    """A JSON configuration file: its data and the 1-based line of every field path
    (``instances[0].block_size``). LocatedError for a file that cannot be read (naming
    ``what``), invalid JSON (the parser's line) or a field given twice. O(file size)."""
    name = os.fspath(path)
    text = read_text(name, what)
    data = parse_json(name, text)
    lines, duplicate = _field_lines(text)
    if duplicate is not None:
        dup_path, dup_line = duplicate
        raise LocatedError(name, dup_line, "duplicate field (given twice)", dup_path)
    return data, lines


_WS = re.compile(r"[ \t\n\r]*")


def _field_lines(text: str) -> tuple[dict[str, int], tuple[str, int] | None]:
    """Map every field path of a valid JSON document to the 1-based line where it starts.

    Object members map at their key, array elements at their value. Also returns the first
    duplicate member ``(path, line)``, if any. O(len(text) + fields * log lines).
    """
    newlines = [m.start() for m in re.finditer("\n", text)]
    decode = json.JSONDecoder().raw_decode
    ws = _WS.match

    def skip(i: int) -> int:
        return ws(text, i).end()  # type: ignore[union-attr]  # always matches

    lines: dict[str, int] = {}
    duplicate: list[tuple[str, int]] = []

    def line_of(i: int) -> int:
        return bisect.bisect_left(newlines, i) + 1

    def walk(i: int, path: str) -> int:
        i = skip(i)
        ch = text[i]
        if ch not in "{[":
            return decode(text, i)[1]
        close = "}" if ch == "{" else "]"
        i = skip(i + 1)
        if text[i] == close:
            return i + 1
        k = 0
        while True:
            i = skip(i)
            if ch == "{":
                key, i2 = decode(text, i)
                p = join_field(path, key)
                if p in lines and not duplicate:
                    duplicate.append((p, line_of(i)))
                lines.setdefault(p, line_of(i))
                i = skip(i2) + 1  # past ':'
            else:
                p = f"{path}[{k}]"
                lines[p] = line_of(i)
                k += 1
            i = skip(walk(i, p))
            if text[i] == ",":
                i += 1
                continue
            return i + 1

    lines[""] = line_of(skip(0))
    walk(0, "")
    return lines, (duplicate[0] if duplicate else None)
