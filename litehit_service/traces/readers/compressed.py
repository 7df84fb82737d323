"""Trace files as bytes, plain or in a container: gzip (``.gz``) and zstd (``.zst``) inputs
are read transparently everywhere a trace is read, and so is a Parquet trace
(:mod:`.parquet`: its rows as the standard lines they stand for), each told by its first
bytes (not by its name: a ``.jsonl`` that is gzip'd reads as well).

:func:`open_bytes` opens a file for :func:`~litehit_service.traces.readers.jsonl.trace_lines`
(only ``read(n)`` is used): decompressed on the fly, in O(1) memory besides the
decompressor's window, and a corrupt or truncated stream is a
:class:`~litehit_core.LocatedError` at line 0 naming the compression, never a traceback.
:func:`plain_size` is the byte count a progress bar may count against: the file's size
when it is plain JSONL, None (unknown) otherwise. Cost: the decompression, one core.
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from typing import Any, BinaryIO

from litehit_core import LocatedError

__all__ = [
    "CONTAINERS",
    "EXPANSION",
    "container_of",
    "container_or_none",
    "open_bytes",
    "plain_size",
    "text_bytes",
    "trace_sizes",
]

CONTAINERS = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"PAR1": "parquet"}
"""The magic bytes each container's file starts with."""
EXPANSION = 8
"""About how many bytes of JSONL one stored byte of a container holds (the Mooncake
conversation trace: gzip 4.6, Parquet 6.6, zstd 9.7; ``bench_containers.py``)."""


def container_of(path: str | os.PathLike[str]) -> str | None:
    """``"gzip"``, ``"zstd"``, ``"parquet"`` or None (plain) for the regular file at
    ``path``, from its first four bytes; None without reading for anything else (a FIFO,
    a terminal: reading would take bytes from its stream); OSError as ``open`` raises it.
    O(1)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None
    with open(path, "rb") as fh:
        return _container(fh.read(4))


def container_or_none(path: str | os.PathLike[str]) -> str | None:
    """:func:`container_of`, or None when the file cannot be read (its reader then reports
    it, located, when it opens it). O(1)."""
    try:
        return container_of(path)
    except OSError:
        return None


def _container(head: bytes) -> str | None:
    return next((name for magic, name in CONTAINERS.items() if head.startswith(magic)), None)


class _Checked:
    """A decompressing reader whose stream errors become located errors (line 0)."""

    def __init__(self, raw: BinaryIO, reader: Any, path: str, compression: str) -> None:
        self._raw, self._reader, self._path, self._compression = raw, reader, path, compression

    def read(self, size: int = -1) -> bytes:
        try:
            return self._reader.read(size)
        except (OSError, EOFError, zlib.error, ValueError) as exc:  # _Zstd: ValueError too
            raise LocatedError(
                self._path, 0, f"not a valid {self._compression} stream: {exc}"
            ) from None

    def close(self) -> None:
        self._reader.close()
        self._raw.close()

    def __enter__(self) -> _Checked:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Zstd:
    """zstd frames decompressed from ``raw``, one after another; a stream that ends inside
    a frame (a truncated file) is an error, not a quiet end."""

    CHUNK = 1 << 20

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._new = zstandard.ZstdDecompressor().decompressobj
        self._error = zstandard.ZstdError
        self._raw = raw
        self._frame = self._new()
        self._started = False
        self._buffer = bytearray()

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            data = self._raw.read(self.CHUNK)
            if not data:
                if self._started and not self._frame.eof:
                    raise ValueError("the stream ends inside a frame (truncated?)")
                break
            while data:
                if self._frame.eof:
                    self._frame = self._new()
                self._started = True
                try:
                    self._buffer += self._frame.decompress(data)
                except self._error as exc:  # zstandard.ZstdError: no OSError
                    raise ValueError(str(exc)) from None
                data = self._frame.unused_data if self._frame.eof else b""
        n = len(self._buffer) if size < 0 else min(size, len(self._buffer))
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def close(self) -> None:
        self._raw.close()


def open_bytes(path: str) -> BinaryIO:
    """Open ``path`` for reading its (decompressed) bytes; a file that cannot be opened is
    a LocatedError at line 0 (as is a zstd file without the ``zstandard`` library)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
        compression = _container(raw.peek(4)[:4])  # peeked: a FIFO's bytes stay in it
        if compression == "parquet":
            raw.close()
            from litehit_service.traces.readers.parquet import ParquetLines

            return ParquetLines(path)  # type: ignore[return-value]
    except IsADirectoryError:
        raise LocatedError(
            path,
            0,
            "is a folder, and a trace is one file: name one trace file (a folder of traces "
            "is not merged: join its records into one file, in timestamp order)",
        ) from None
    except OSError as exc:
        raise LocatedError(path, 0, f"cannot read the trace: {exc.strerror or exc}") from None
    if compression is None:
        return raw
    reader: Any = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "gzip" else _Zstd(raw)
    return _Checked(raw, reader, path, compression)  # type: ignore[return-value]


def plain_size(path: str | os.PathLike[str]) -> int | None:
    """The file's size in bytes when it is plain JSONL (what its lines add up to), else
    None: a progress bar counts without a total. None for a file that cannot be read."""
    try:
        return None if container_of(path) is not None else os.path.getsize(path)
    except OSError:
        return None


def trace_sizes(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(the file's bytes, about how many bytes of JSONL it holds: :func:`text_bytes`); (0,
    0) for a file that cannot be read. For a run's plan line. O(1)."""
    try:
        return os.path.getsize(path), text_bytes(path)
    except OSError:
        return 0, 0


def text_bytes(path: str | os.PathLike[str]) -> int:
    """About how many bytes of JSONL the file at ``path`` holds: its size, times
    :data:`EXPANSION` for a container; 0 for a file that cannot be read. For size rules
    (which engine a replay of this size wants), not for progress. O(1)."""
    try:
        size = os.path.getsize(path)
        return size * EXPANSION if container_of(path) is not None else size
    except OSError:
        return 0
