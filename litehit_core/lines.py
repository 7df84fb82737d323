"""Bounded line reading: every line-oriented reader refuses a line longer than a limit.

Trace readers and the facts reader take their lines from :func:`read_lines`, which reads
a binary file in chunks, yields their whole lines and raises
:class:`LocatedError` ``"{path}:{line_no}: line is longer than {N} bytes (max_line_bytes)"``
at the first line whose bytes (its line ending excluded) exceed ``max_line_bytes`` --
*without* reading that line whole: at most ``max_line_bytes + 1`` bytes of it are ever
read. Every line before it has been yielded by then, so a caller that stops at its own
first bad line still reports the first problem of the file.

Line endings are universal newlines, as Python's text files split them: ``\\n``, ``\\r\\n``
or a lone ``\\r``; lines are returned with their endings, untranslated. The limit is in
bytes, not characters.

Costs: O(file bytes) with C-level scans (``rfind``, ``splitlines``); memory
O(:data:`CHUNK_BYTES` + the longest line), never more than ``max_line_bytes + 1`` bytes of
one line.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator
from typing import BinaryIO, TypeVar

from litehit_core.errors import LocatedError

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "check_max_line_bytes",
    "line_too_long",
    "read_lines",
    "split_bytes",
]

DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
"""The default longest line (64 MiB = 67,108,864 bytes, line ending excluded) of every
trace and facts reader; ``--max-line-bytes`` changes it per command."""
CHUNK_BYTES = 1 << 20
"""Bytes read at a time (1 MiB; less when ``max_line_bytes`` is smaller)."""
_BOM = codecs.BOM_UTF8
_CR = 13
T = TypeVar("T")


def check_max_line_bytes(value: object) -> int:
    """``value`` if it is an integer > 0; else ``ValueError`` naming it. O(1)."""
    if type(value) is not int or value <= 0:
        raise ValueError(f"max_line_bytes must be an integer > 0, got {value!r}")
    return value


def line_too_long(path: str, line_no: int, max_line_bytes: int) -> LocatedError:
    """The one error for a line over the limit: ``path:line: line is longer than N bytes
    (max_line_bytes)``."""
    return LocatedError(
        path, line_no, f"line is longer than {max_line_bytes} bytes (max_line_bytes)"
    )


def split_bytes(chunk: bytes) -> list[bytes]:
    """The default ``split`` of :func:`read_lines`: the lines of ``chunk`` as bytes, with
    their endings. O(len(chunk)) in C."""
    return chunk.splitlines(keepends=True)


def read_lines(
    fh: BinaryIO,
    path: str,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    *,
    skip_bom: bool = False,
    split: Callable[[bytes], list[T]] = split_bytes,  # type: ignore[assignment]
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[list[T]]:
    """Yield the lines of the binary file ``fh``, one list per chunk read, in file order;
    then raise :func:`line_too_long` at the first line longer than ``max_line_bytes`` --
    after yielding every line before it. ``path`` names the file in the error; ``skip_bom``
    drops a leading UTF-8 byte-order mark (as the ``utf-8-sig`` codec does). ``ValueError``
    unless ``max_line_bytes`` is an integer > 0.

    ``split`` turns a chunk of whole lines (bytes ending with a line ending, except maybe
    the file's last) into its list of lines, splitting exactly at universal newlines: the
    default :func:`split_bytes` keeps bytes; the facts reader decodes a chunk at once and
    splits it as text. Line numbers in errors count the lists' items.

    Why it never holds more than ``max_line_bytes + 1`` bytes of a line: reads are at most
    ``min(chunk_bytes, max_line_bytes + 1)`` bytes, and while a line is unfinished only as
    many bytes as keep it at ``max_line_bytes + 1`` are read. So a chunk of complete lines
    is at most ``max_line_bytes + 1`` bytes and none of its lines can be too long; only the
    unfinished tail needs a check (a chunk can be longer only after a BOM or a ``\\r`` at
    the limit; its lines are then checked one by one).

    Cost: O(file bytes): per chunk of :data:`CHUNK_BYTES` a few C-level scans and one
    ``split``; memory O(chunk + longest line).
    """
    limit = check_max_line_bytes(max_line_bytes)
    return _read(fh, path, limit, skip_bom, split, chunk_bytes)


def _read(
    fh: BinaryIO,
    path: str,
    limit: int,
    skip_bom: bool,
    split: Callable[[bytes], list[T]],
    chunk_bytes: int,
) -> Iterator[list[T]]:
    block = max(1, min(chunk_bytes, limit + 1))
    read = fh.read
    pending = bytearray()  # the unfinished line: no ending yet, or a \r that \n may follow
    lines_before = 0  # complete lines yielded so far
    if skip_bom:
        data = read(max(block, len(_BOM)))
        if data.startswith(_BOM):
            data = data[len(_BOM) :] or read(block)
    else:
        data = read(block)
    while data:
        n_last = data.rfind(b"\n")
        r_last = data.rfind(b"\r", n_last + 1)  # a \r after the last \n ends a line too
        if r_last == len(data) - 1:  # a final \r: the next byte decides \r or \r\n
            r_last = data.rfind(b"\r", n_last + 1, r_last)
        cut = max(n_last, r_last) + 1  # just after the last complete line ending; 0 = none
        if cut == 0 and not (pending and pending[-1] == _CR):
            pending += data
        else:
            if pending:
                chunk = b"".join((pending, memoryview(data)[:cut]))
            else:
                chunk = data if cut == len(data) else data[:cut]
            pending = bytearray(memoryview(data)[cut:])
            if len(chunk) > limit + 1:  # rare: check its lines one by one
                raw = chunk.splitlines(keepends=True)
                for k, line in enumerate(raw):
                    if len(line.rstrip(b"\r\n")) > limit:
                        if k:
                            yield split(b"".join(raw[:k]))
                        raise line_too_long(path, lines_before + k + 1, limit)
            lines = split(chunk)
            yield lines
            lines_before += len(lines)
        unfinished = len(pending) - (1 if pending and pending[-1] == _CR else 0)
        if unfinished > limit:
            raise line_too_long(path, lines_before + 1, limit)
        data = read(max(1, min(block, limit + 1 - len(pending))))
    if pending:
        yield split(bytes(pending))
